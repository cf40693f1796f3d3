"""tests/hub/synthetic_repo.py: the Kimi-K2.5-NVFP4-shaped test repository is deterministic,
its shards are valid safetensors files, its index names every tensor, its config carries the
KV-cache fields, and its git commit has the same sha everywhere."""

from __future__ import annotations

import filecmp
import importlib.util
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import prerequisite

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "tests" / "hub" / "synthetic_repo.py"
FIXTURE = ROOT / "tests" / "fixtures" / "models" / "kimi-k2.5-nvfp4"

# The commit of make_repo()'s defaults (4 shards of 256 KiB). It changes when the generator, the
# fixture's config.json/hf_quant_config.json or the fixed commit identity change: then update it
# here (and wherever a scenario pins it). Same on every machine: a different sha here means the
# output is not deterministic.
DEFAULT_SHA = "a45267417813fc76eec8350af9f643b68aa5d195"

DTYPE_SIZE = {"BF16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1}


def _load():
    spec = importlib.util.spec_from_file_location("fleet_vllm_synthetic_repo", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


synthetic = _load()


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    dest = tmp_path_factory.mktemp("kimi")
    summary = synthetic.make_repo(dest)
    return dest, summary


def _parse(path):
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    assert 8 + length <= len(data), "header length %d beyond the file (%d bytes)" % (length, len(data))
    header = json.loads(data[8:8 + length])
    return header, len(data) - 8 - length, length


def test_files_and_sizes(repo):
    dest, summary = repo
    names = sorted(p.name for p in dest.iterdir())
    assert names == sorted(summary["files"])
    assert names == [
        "README.md", "config.json", "generation_config.json", "hf_quant_config.json",
        "model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
        "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors",
        "model.safetensors.index.json", "tokenizer_config.json",
    ]
    for name, size in summary["files"].items():
        assert (dest / name).stat().st_size == size
    for name in summary["shards"]:
        # About shard_bytes: never above, and within one tensor (+ its header entry) below.
        assert 256 * 1024 - 20 * 1024 < summary["files"][name] <= 256 * 1024


def test_deterministic(tmp_path):
    first = synthetic.make_repo(tmp_path / "a", shards=3, shard_bytes=64 * 1024)
    second = synthetic.make_repo(tmp_path / "b", shards=3, shard_bytes=64 * 1024)
    assert first == second
    names = sorted(first["files"])
    match, mismatch, errors = filecmp.cmpfiles(tmp_path / "a", tmp_path / "b", names, shallow=False)
    assert (match, mismatch, errors) == (names, [], [])


def test_shards_parse_as_safetensors(repo):
    dest, summary = repo
    for name in summary["shards"]:
        header, data_size, header_size = _parse(dest / name)
        assert (8 + header_size) % 8 == 0, "data section not 8-byte aligned"
        assert header.pop("__metadata__") == {"format": "pt"}
        assert header, "%s holds no tensor" % name
        spans = []
        for tensor, info in header.items():
            assert set(info) == {"dtype", "shape", "data_offsets"}
            begin, end = info["data_offsets"]
            assert 0 <= begin <= end <= data_size, (tensor, info, data_size)
            count = 1
            for dim in info["shape"]:
                count *= dim
            assert end - begin == count * DTYPE_SIZE[info["dtype"]], tensor
            spans.append((begin, end))
        spans.sort()
        # Contiguous, no overlap, the whole data section used.
        assert spans[0][0] == 0 and spans[-1][1] == data_size
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))


def test_nvfp4_layout_of_an_expert(repo):
    dest, summary = repo
    header = _parse(dest / summary["shards"][1])[0]
    experts = [k for k in header if ".mlp.experts." in k and k.endswith("gate_proj.weight")]
    assert experts
    prefix = experts[0][: -len(".weight")]
    weight, scale = header[prefix + ".weight"], header[prefix + ".weight_scale"]
    assert weight["dtype"] == "U8" and scale["dtype"] == "F8_E4M3"
    # Packed FP4: two values a byte; one FP8 scale per 16 values.
    assert weight["shape"][0] == scale["shape"][0]
    assert weight["shape"][1] * 2 == scale["shape"][1] * 16
    assert header[prefix + ".weight_scale_2"] == {"dtype": "F32", "shape": [], "data_offsets": header[prefix + ".weight_scale_2"]["data_offsets"]}
    assert header[prefix + ".input_scale"]["dtype"] == "F32"


def test_index_names_every_tensor_and_shard(repo):
    dest, summary = repo
    index = json.loads((dest / "model.safetensors.index.json").read_text())
    weight_map = index["weight_map"]
    assert sorted(set(weight_map.values())) == summary["shards"]
    seen = {}
    total = 0
    for name in summary["shards"]:
        header, data_size = _parse(dest / name)[:2]
        header.pop("__metadata__")
        total += data_size
        for tensor in header:
            seen[tensor] = name
    assert weight_map == seen
    assert index["metadata"]["total_size"] == total == summary["total_size"]
    assert len(weight_map) == summary["tensors"]
    assert "language_model.lm_head.weight" in weight_map
    assert "language_model.model.embed_tokens.weight" in weight_map


def test_config_carries_the_kv_cache_fields(repo):
    dest = repo[0]
    for name in ("config.json", "hf_quant_config.json"):
        assert (dest / name).read_bytes() == (FIXTURE / name).read_bytes(), "%s not verbatim" % name
    quant = json.loads((dest / "config.json").read_text())["quantization_config"]
    assert quant["quant_method"] == "modelopt" and quant["quant_algo"] == "NVFP4"
    assert quant["kv_cache_scheme"] == {"dynamic": False, "num_bits": 8, "type": "float"}
    hf_quant = json.loads((dest / "hf_quant_config.json").read_text())["quantization"]
    assert hf_quant["quant_algo"] == "NVFP4" and hf_quant["kv_cache_quant_algo"] == "FP8"
    for name in ("generation_config.json", "tokenizer_config.json"):
        json.loads((dest / name).read_text())
    assert (dest / "README.md").read_text().startswith("---\n")


def test_rejects_tiny_shards(tmp_path):
    with pytest.raises(ValueError):
        synthetic.make_repo(tmp_path, shard_bytes=1024)
    with pytest.raises(ValueError):
        synthetic.make_repo(tmp_path, shards=0)


@prerequisite(shutil.which("git"), reason="git is not installed")
def test_git_commit_is_deterministic_and_plain(repo, tmp_path):
    dest, summary = repo
    sha = synthetic.make_git_repo(dest, tmp_path / "one.git")
    assert sha == DEFAULT_SHA
    assert synthetic.make_git_repo(dest, tmp_path / "one.git") == sha  # rerun: no change
    mirror = synthetic.make_mirror(tmp_path / "mirrors")
    assert mirror["sha"] == sha
    git_dir = tmp_path / "mirrors" / "models" / "nvidia" / "Kimi-K2.5-NVFP4"
    assert Path(mirror["git_dir"]) == git_dir

    def git(*args):
        return subprocess.run(["git", "--git-dir", str(git_dir)] + list(args), check=True,
                              stdout=subprocess.PIPE).stdout

    assert git("rev-parse", "main").decode().strip() == sha
    assert git("symbolic-ref", "HEAD").decode().strip() == "refs/heads/main"
    listed = git("ls-tree", "-l", "main").decode().splitlines()
    assert sorted(line.split("\t")[1] for line in listed) == sorted(summary["files"])
    for line in listed:
        meta, path = line.split("\t")
        kind, blob, size = meta.split()[1:]
        assert kind == "blob" and int(size) == summary["files"][path]
        # Plain blobs with the files' bytes (no LFS pointers).
        assert git("cat-file", "blob", blob) == (dest / path).read_bytes()


def test_cli(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "repo"), "--shards", "2", "--shard-bytes", "65536"],
        check=True, stdout=subprocess.PIPE, universal_newlines=True)
    summary = json.loads(result.stdout)
    assert summary["shards"] == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert all(size <= 65536 for name, size in summary["files"].items() if name.endswith(".safetensors"))
