"""A small, deterministic model repository shaped like nvidia/Kimi-K2.5-NVFP4 (test stand-in).

The real checkpoint is ~540-591 GB in 119 shards. This one has the same file layout at a size a
test can download in well under a second:

- ``config.json`` and ``hf_quant_config.json`` copied byte for byte from
  tests/fixtures/models/kimi-k2.5-nvfp4/ (ModelOpt NVFP4, ``kv_cache_scheme`` FP8 in the config,
  ``kv_cache_quant_algo: FP8`` in hf_quant_config.json),
- ``generation_config.json``, ``tokenizer_config.json`` and a ``README.md`` with a model card,
- N safetensors shards named as the real ones (``model-00001-of-00004.safetensors``), each about
  ``shard_bytes`` long, holding small real tensors with the real checkpoint's naming and dtypes
  (BF16 embeddings, norms, attention and dense/shared MLPs; NVFP4 experts as packed ``U8`` weights
  with ``F8_E4M3`` block scales and ``F32`` global/input scales),
- ``model.safetensors.index.json`` with ``metadata.total_size`` (the sum of the tensors' data
  bytes, as transformers writes it) and a ``weight_map`` naming every tensor -> shard.

The safetensors files are written by hand (stdlib only): an 8-byte little-endian header length,
a JSON header (``__metadata__: {"format": "pt"}``, per tensor ``dtype``/``shape``/
``data_offsets`` relative to the data section), padded with spaces to a multiple of 8 bytes as
the reference implementation does, then the data. Tensor contents come from SHAKE-256 of the
tensor name, so the same arguments always give byte-identical files.

``make_git_repo`` commits such a directory into a bare git repository with plain blobs (no Git
LFS: olah serves plain blobs from a local mirror as they are; it only needs LFS objects for LFS
pointer files) and a fixed author, committer, date and message, so the commit sha depends only
on the files. ``make_mirror`` lays that repository out the way olah's ``mirrors-path`` expects
(``<mirrors>/models/nvidia/Kimi-K2.5-NVFP4``).

CLI::

    python tests/hub/synthetic_repo.py DEST [--shards N] [--shard-bytes B]
    python tests/hub/synthetic_repo.py DEST --git GIT_DIR      # also commit it into GIT_DIR
    python tests/hub/synthetic_repo.py DEST --mirrors MIRRORS  # and into MIRRORS/models/<repo>

prints a JSON summary (files, sizes, commit sha when committed).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ID = "nvidia/Kimi-K2.5-NVFP4"
FIXTURE_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "models" / "kimi-k2.5-nvfp4"
VERBATIM_FILES = ("config.json", "hf_quant_config.json")
INDEX_FILE = "model.safetensors.index.json"
DEFAULT_SHARDS = 4
DEFAULT_SHARD_BYTES = 256 * 1024
MIN_SHARD_BYTES = 32 * 1024

# Fixed identity and date of the synthetic commit: the sha then depends only on the tree.
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "fleet.vllm synthetic repo",
    "GIT_AUTHOR_EMAIL": "synthetic@fleet-vllm.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "fleet.vllm synthetic repo",
    "GIT_COMMITTER_EMAIL": "synthetic@fleet-vllm.invalid",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+0000",
}
COMMIT_MESSAGE = "Synthetic Kimi-K2.5-NVFP4-shaped checkpoint (fleet.vllm tests)\n"

# Dimensions of the synthetic tensors (the config keeps the real ones; nothing loads these).
HIDDEN = 128
VOCAB = 64
DENSE_INTERMEDIATE = 32
MOE_INTERMEDIATE = 64
EXPERTS_PER_LAYER = 8
Q_LORA = 32
KV_LORA = 24
ROPE_DIM = 8
HEADS = 2
QK_NOPE = 16
V_HEAD = 16
NVFP4_GROUP = 16  # elements per FP8 block scale

DTYPE_SIZE = {"BF16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1}

_GENERATION_CONFIG = {
    "_from_model_config": True,
    "bos_token_id": 163584,
    "eos_token_id": 163585,
    "max_length": 262144,
    "pad_token_id": 163839,
    "transformers_version": "4.57.1",
}

_TOKENIZER_CONFIG = {
    "added_tokens_decoder": {},
    "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
    "bos_token": "[BOS]",
    "clean_up_tokenization_spaces": False,
    "eos_token": "[EOS]",
    "extra_special_tokens": {},
    "model_max_length": 1000000000000000019884624838656,
    "pad_token": "[PAD]",
    "tokenizer_class": "TikTokenTokenizer",
    "unk_token": "[UNK]",
}

_README = """---
license: other
license_name: modified-mit
library_name: transformers
base_model: moonshotai/Kimi-K2.5
tags:
- nvfp4
- modelopt
- synthetic
---

# Kimi-K2.5-NVFP4 (synthetic test stand-in)

Not a model. A few megabytes shaped like nvidia/Kimi-K2.5-NVFP4 for fleet.vllm's tests:
the real config.json and hf_quant_config.json (ModelOpt NVFP4, FP8 KV cache), and
{shards} safetensors shards of small deterministic tensors with the real naming and dtypes.
"""


# --------------------------------------------------------------------------------------------
# Tensor contents


def _stream(name: str, n: int) -> bytes:
    return hashlib.shake_256(("fleet-vllm-synthetic/" + name).encode()).digest(n)


def _bf16_table() -> list:
    # byte b -> the bfloat16 (upper half of the float32) of (b - 128) / 2048, little-endian.
    out = []
    for b in range(256):
        f32 = struct.pack("<f", (b - 128) / 2048.0)
        out.append(f32[2:4])
    return out


_BF16 = _bf16_table()
# byte b -> an FP8 E4M3 scale in [0.5, 1.875] (exponent 0110/0111: never NaN or huge).
_E4M3 = bytes(0x30 | (b & 0x0F) for b in range(256))


def _tensor_bytes(name: str, dtype: str, shape: tuple) -> bytes:
    count = 1
    for dim in shape:
        count *= dim
    raw = _stream(name, count)
    if dtype == "U8":  # packed FP4 (E2M1) pairs: every byte is valid
        return raw
    if dtype == "F8_E4M3":
        return raw.translate(_E4M3)
    if dtype == "BF16":
        if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
            return struct.pack("<f", 1.0)[2:4] * count
        return b"".join(_BF16[b] for b in raw)
    if dtype == "F32":
        if name.endswith("weight_scale_2"):
            return b"".join(struct.pack("<f", (1 + b / 256.0) / (448.0 * 6.0)) for b in raw)
        if name.endswith("input_scale"):
            return b"".join(struct.pack("<f", (1 + b / 256.0) / 448.0) for b in raw)
        return b"".join(struct.pack("<f", (b - 128) / 256.0) for b in raw)
    raise ValueError("unknown dtype %s" % dtype)


def _nbytes(dtype: str, shape: tuple) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count * DTYPE_SIZE[dtype]


# --------------------------------------------------------------------------------------------
# Tensor names, in checkpoint order (as the real Kimi-K2.5 NVFP4 names them)

_P = "language_model.model."


def _attention(layer: int):
    p = "%slayers.%d." % (_P, layer)
    yield p + "input_layernorm.weight", "BF16", (HIDDEN,)
    yield p + "self_attn.q_a_proj.weight", "BF16", (Q_LORA, HIDDEN)
    yield p + "self_attn.q_a_layernorm.weight", "BF16", (Q_LORA,)
    yield p + "self_attn.q_b_proj.weight", "BF16", (HEADS * (QK_NOPE + ROPE_DIM), Q_LORA)
    yield p + "self_attn.kv_a_proj_with_mqa.weight", "BF16", (KV_LORA + ROPE_DIM, HIDDEN)
    yield p + "self_attn.kv_a_layernorm.weight", "BF16", (KV_LORA,)
    yield p + "self_attn.kv_b_proj.weight", "BF16", (HEADS * (QK_NOPE + V_HEAD), KV_LORA)
    yield p + "self_attn.o_proj.weight", "BF16", (HIDDEN, HEADS * V_HEAD)
    yield p + "post_attention_layernorm.weight", "BF16", (HIDDEN,)


def _nvfp4_linear(prefix: str, out_features: int, in_features: int):
    yield prefix + ".weight", "U8", (out_features, in_features // 2)
    yield prefix + ".weight_scale", "F8_E4M3", (out_features, in_features // NVFP4_GROUP)
    yield prefix + ".weight_scale_2", "F32", ()
    yield prefix + ".input_scale", "F32", ()


def _body():
    """Every tensor before the final norm and lm_head: embeddings, a dense layer 0 (excluded
    from quantization, as in hf_quant_config.json), then MoE layers for as long as asked."""
    yield _P + "embed_tokens.weight", "BF16", (VOCAB, HIDDEN)
    yield from _attention(0)
    for proj, shape in (("gate_proj", (DENSE_INTERMEDIATE, HIDDEN)),
                        ("up_proj", (DENSE_INTERMEDIATE, HIDDEN)),
                        ("down_proj", (HIDDEN, DENSE_INTERMEDIATE))):
        yield "%slayers.0.mlp.%s.weight" % (_P, proj), "BF16", shape
    layer = 1
    while True:
        p = "%slayers.%d.mlp." % (_P, layer)
        yield from _attention(layer)
        yield p + "gate.weight", "BF16", (EXPERTS_PER_LAYER, HIDDEN)
        yield p + "gate.e_score_correction_bias", "F32", (EXPERTS_PER_LAYER,)
        for proj, shape in (("gate_proj", (MOE_INTERMEDIATE, HIDDEN)),
                            ("up_proj", (MOE_INTERMEDIATE, HIDDEN)),
                            ("down_proj", (HIDDEN, MOE_INTERMEDIATE))):
            yield "%sshared_experts.%s.weight" % (p, proj), "BF16", shape
        for expert in range(EXPERTS_PER_LAYER):
            for proj, (out_f, in_f) in (("gate_proj", (MOE_INTERMEDIATE, HIDDEN)),
                                        ("up_proj", (MOE_INTERMEDIATE, HIDDEN)),
                                        ("down_proj", (HIDDEN, MOE_INTERMEDIATE))):
                yield from _nvfp4_linear("%sexperts.%d.%s" % (p, expert, proj), out_f, in_f)
        layer += 1


def _tail():
    yield _P + "norm.weight", "BF16", (HIDDEN,)
    yield "language_model.lm_head.weight", "BF16", (VOCAB, HIDDEN)


# --------------------------------------------------------------------------------------------
# safetensors


def _header(tensors) -> bytes:
    """The padded JSON header for ``tensors`` = [(name, dtype, shape), ...] in data order."""
    entries = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape in tensors:
        size = _nbytes(dtype, shape)
        entries[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(entries, separators=(",", ":")).encode()
    pad = (8 - (8 + len(text)) % 8) % 8
    return text + b" " * pad


def _file_size(tensors) -> int:
    return 8 + len(_header(tensors)) + sum(_nbytes(dtype, shape) for _name, dtype, shape in tensors)


def _plan(shards: int, shard_bytes: int):
    """Tensors per shard: fill each shard from the body up to ``shard_bytes``; the last one
    also carries the final norm and lm_head."""
    body = _body()
    tail = list(_tail())
    plan = []
    pending = next(body)
    for index in range(shards):
        suffix = tail if index == shards - 1 else []
        current = []
        # Every shard gets at least one body tensor, however small shard_bytes is.
        while not current or _file_size(current + [pending] + suffix) <= shard_bytes:
            current.append(pending)
            pending = next(body)
        plan.append(current + suffix)
    return plan


def write_safetensors(path: Path, tensors, tensor_bytes=None) -> int:
    """Write ``tensors`` ([(name, dtype, shape), ...]) as one safetensors file, each tensor's bytes
    from ``tensor_bytes(name, dtype, shape)`` (default: this repo's); returns the number of data
    bytes."""
    header = _header(tensors)
    data = 0
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(header)))
        fh.write(header)
        for name, dtype, shape in tensors:
            blob = (tensor_bytes or _tensor_bytes)(name, dtype, shape)
            fh.write(blob)
            data += len(blob)
    return data


def read_safetensors_header(path) -> dict:
    """The parsed JSON header of a safetensors file (for checks)."""
    with open(path, "rb") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        return json.loads(fh.read(length))


def shard_name(index: int, total: int) -> str:
    return "model-%05d-of-%05d.safetensors" % (index, total)


# --------------------------------------------------------------------------------------------
# The repository


def _write(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)


def _json_bytes(obj) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=False) + "\n").encode()


def make_repo(dest, shards: int = DEFAULT_SHARDS, shard_bytes: int = DEFAULT_SHARD_BYTES) -> dict:
    """Write the synthetic repository into ``dest`` (created if missing; files of the same
    names are overwritten, others left alone). Returns ``{"files": {name: size}, "total_size":
    <index total_size>, "shards": [names], "tensors": <count>}``."""
    if shards < 1:
        raise ValueError("shards must be >= 1")
    if shard_bytes < MIN_SHARD_BYTES:
        raise ValueError("shard_bytes must be >= %d" % MIN_SHARD_BYTES)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)

    for name in VERBATIM_FILES:
        shutil.copyfile(FIXTURE_DIR / name, dest / name)
    _write(dest / "generation_config.json", _json_bytes(_GENERATION_CONFIG))
    _write(dest / "tokenizer_config.json", _json_bytes(_TOKENIZER_CONFIG))
    _write(dest / "README.md", _README.format(shards=shards).encode())

    weight_map = {}
    total_size = 0
    names = []
    for index, tensors in enumerate(_plan(shards, shard_bytes), start=1):
        name = shard_name(index, shards)
        names.append(name)
        total_size += write_safetensors(dest / name, tensors)
        for entry in tensors:
            weight_map[entry[0]] = name
    index = {"metadata": {"total_size": total_size},
             "weight_map": dict(sorted(weight_map.items()))}
    _write(dest / INDEX_FILE, _json_bytes(index))

    files = {}
    for name in sorted(list(VERBATIM_FILES) + ["generation_config.json", "tokenizer_config.json",
                                               "README.md", INDEX_FILE] + names):
        files[name] = (dest / name).stat().st_size
    return {"files": files, "total_size": total_size, "shards": names, "tensors": len(weight_map)}


def _git(args, git_dir, input_bytes=None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_IDENTITY)
    # No user or system configuration: nothing (signing, hooks, filters) can change the commit.
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_DIR": str(git_dir),
                "LC_ALL": "C"})
    result = subprocess.run(["git"] + list(args), env=env, input=input_bytes,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    if result.returncode:
        raise RuntimeError("git %s failed: %s" % (" ".join(args), result.stderr.decode(errors="replace")))
    return result.stdout.decode().strip()


def make_git_repo(src_dir, dest_git_dir, message: str = COMMIT_MESSAGE) -> str:
    """Commit every regular file at the top of ``src_dir`` into the bare git repository
    ``dest_git_dir`` (created if missing) as plain blobs on branch ``main`` (HEAD points at
    it), with a fixed author, committer, date and ``message``. Returns the commit sha, which
    depends only on the files' names and contents (and the message). Rerunning with the same
    files is a no-op."""
    src_dir = Path(src_dir)
    dest_git_dir = Path(dest_git_dir)
    if not (dest_git_dir / "HEAD").exists():
        dest_git_dir.mkdir(parents=True, exist_ok=True)
        _git(["init", "--quiet", "--bare"], dest_git_dir)
    _git(["symbolic-ref", "HEAD", "refs/heads/main"], dest_git_dir)
    entries = []
    for path in sorted(src_dir.iterdir()):
        if not path.is_file() or path.name.startswith(".git"):
            continue
        blob = _git(["hash-object", "-w", "--no-filters", "--", str(path)], dest_git_dir)
        entries.append("100644 blob %s\t%s\n" % (blob, path.name))
    tree = _git(["mktree"], dest_git_dir, input_bytes="".join(entries).encode())
    commit = _git(["commit-tree", "--no-gpg-sign", tree, "-m", message.rstrip("\n")], dest_git_dir)
    _git(["update-ref", "refs/heads/main", commit], dest_git_dir)
    return commit


def mirror_git_dir(mirrors_dir, repo_id: str = REPO_ID) -> Path:
    """Where olah (``mirrors-path = [mirrors_dir]``) looks for the git repository of a model."""
    return Path(mirrors_dir) / "models" / repo_id


def make_mirror(mirrors_dir, shards: int = DEFAULT_SHARDS, shard_bytes: int = DEFAULT_SHARD_BYTES,
                repo_id: str = REPO_ID) -> dict:
    """Write the synthetic repo and commit it as ``<mirrors_dir>/models/<repo_id>`` (bare git).
    Returns make_repo's summary plus ``sha`` and ``git_dir``."""
    with tempfile.TemporaryDirectory(prefix="fleet-vllm-synthetic-") as tmp:
        summary = make_repo(tmp, shards=shards, shard_bytes=shard_bytes)
        git_dir = mirror_git_dir(mirrors_dir, repo_id)
        summary["sha"] = make_git_repo(tmp, git_dir)
    summary["git_dir"] = str(git_dir)
    summary["repo_id"] = repo_id
    return summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("dest", help="directory to write the repository's files into")
    parser.add_argument("--shards", type=int, default=DEFAULT_SHARDS)
    parser.add_argument("--shard-bytes", type=int, default=DEFAULT_SHARD_BYTES)
    parser.add_argument("--git", metavar="GIT_DIR", help="also commit the files into this bare git repository")
    parser.add_argument("--mirrors", metavar="MIRRORS_DIR",
                        help="also commit them as MIRRORS_DIR/models/%s (olah's mirrors-path layout)" % REPO_ID)
    args = parser.parse_args(argv)
    summary = make_repo(args.dest, shards=args.shards, shard_bytes=args.shard_bytes)
    if args.git:
        summary["sha"] = make_git_repo(args.dest, args.git)
        summary["git_dir"] = args.git
    if args.mirrors:
        git_dir = mirror_git_dir(args.mirrors)
        summary["sha"] = make_git_repo(args.dest, git_dir)
        summary["git_dir"] = str(git_dir)
    json.dump(summary, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
