"""fleet.vllm.served_model: the served directory is links to the pristine snapshot plus copies of
the small files; patched copies survive re-runs; a new revision replaces what changed and drops the
KV-cache record; the pristine files are never written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils import _snapshot
from conftest import snapshot

RECORD = ".fleet-vllm-kv-cache.json"


def make_snapshot(path, config=None, shards=("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config or {"quantization_config": {"kv_cache_scheme": {"num_bits": 8}}}))
    (path / "hf_quant_config.json").write_text('{"quantization": {"kv_cache_quant_algo": "FP8"}}\n')
    for name in shards:
        (path / name).write_bytes(b"\0" * 64)
    (path / "tokenizer.model").write_bytes(b"tok")
    listed = sorted(name.name for name in path.iterdir())
    _snapshot.write_manifest(str(path), _snapshot.make_manifest("nvidia/Kimi-K2.5-NVFP4", path.name, [
        dict(path=name, size=(path / name).stat().st_size, sha256=_snapshot.sha256_of(str(path / name))) for name in listed]))
    (path / ".cache" / "huggingface").mkdir(parents=True)
    (path / ".cache" / "huggingface" / "x.metadata").write_text("m")
    return path


@pytest.fixture
def dirs(tmp_path):
    return make_snapshot(tmp_path / "pristine" / ("a" * 40)), tmp_path / "served"


def test_links_and_copies_then_nothing_to_do(run_module, dirs):
    source, served = dirs
    before = snapshot(source)
    check = run_module("served_model", dict(source=str(source), path=str(served)), check=True, diff=True)
    assert check.result["changed"] and not served.exists(), check
    assert "config.json (copy)" in check.result["diff"]["after"]
    first = run_module("served_model", dict(source=str(source), path=str(served)))
    assert first.result["changed"] and first.result["links"] == 3 and first.result["copies"] == 2, first
    for name in ("model-00001-of-00002.safetensors", "tokenizer.model"):
        assert (served / name).is_symlink() and Path(os.readlink(served / name)) == source / name
    for name in ("config.json", "hf_quant_config.json"):
        assert not (served / name).is_symlink() and (served / name).read_bytes() == (source / name).read_bytes()
    assert not (served / ".cache").exists() and not (served / ".fleet-vllm-snapshot.json").exists()
    again = run_module("served_model", dict(source=str(source), path=str(served)))
    assert not again.result["changed"], again
    assert snapshot(source) == before


def test_a_patched_copy_survives_and_a_new_revision_replaces_it(run_module, dirs, tmp_path):
    source, served = dirs
    run_module("served_model", dict(source=str(source), path=str(served)))
    (served / "config.json").write_text('{"quantization_config": {}}')
    (served / RECORD).write_text("{}")
    kept = run_module("served_model", dict(source=str(source), path=str(served)))
    assert not kept.result["changed"] and (served / "config.json").read_text() == '{"quantization_config": {}}'
    # A new revision: config.json changed, one shard renamed.
    new = make_snapshot(tmp_path / "pristine" / ("b" * 40), config={"quantization_config": {"kv_cache_scheme": None}},
                        shards=("model-00001-of-00001.safetensors",))
    moved = run_module("served_model", dict(source=str(new), path=str(served)))
    assert moved.result["changed"], moved
    assert json.loads((served / "config.json").read_text()) == {"quantization_config": {"kv_cache_scheme": None}}
    assert not (served / RECORD).exists()
    assert not (served / "model-00002-of-00002.safetensors").exists()
    assert Path(os.readlink(served / "model-00001-of-00001.safetensors")).parent == new
    assert sorted(moved.result["removed"]) == sorted(["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", RECORD])


def test_an_identical_copy_keeps_its_patch_across_revisions(run_module, dirs, tmp_path):
    source, served = dirs
    run_module("served_model", dict(source=str(source), path=str(served)))
    (served / "config.json").write_text('{"patched": true}')
    (served / RECORD).write_text("{}")
    same = make_snapshot(tmp_path / "pristine" / ("c" * 40))
    result = run_module("served_model", dict(source=str(same), path=str(served)))
    assert result.result["changed"]  # the links moved
    assert (served / "config.json").read_text() == '{"patched": true}' and (served / RECORD).exists()


@pytest.mark.parametrize("case, needle", [
    ("missing", "is not a directory: fetch the snapshot first"),
    ("inside", "must not contain each other"),
    ("file", "exists and is not a directory"),
])
def test_bad_paths_fail_and_write_nothing(run_module, dirs, case, needle):
    source, served = dirs
    path = {"missing": served, "inside": source / "served", "file": served}[case]
    src = source.parent / "nope" if case == "missing" else source
    if case == "file":
        served.write_text("x")
    before = snapshot(source.parent.parent)
    result = run_module("served_model", dict(source=str(src), path=str(path)))
    assert result.failed and needle in result.result["msg"], result
    assert snapshot(source.parent.parent) == before


def test_umask_027_leaves_the_served_directory_open_to_the_service(run_module, dirs):
    """Issue 14, point 2: under a CIS umask of 027 the directories made here were 0750, closed to the service user."""
    source, served = dirs
    target = served / "variants" / "abc"
    old = os.umask(0o027)
    try:
        result = run_module("served_model", dict(source=str(source), path=str(target)))
    finally:
        os.umask(old)
    assert not result.failed, result
    for directory in (served, served / "variants", target):
        assert oct(directory.stat().st_mode & 0o777) == "0o755", directory
    assert oct((target / "config.json").stat().st_mode & 0o777) == "0o644"


# ---- issue 24, point 4: only the files of the snapshot's listing are served ---------------------

PLANTED = ("processor_config.json", "evil.py", "chat_template.jinja", "sub/hook.py", "Config.json", "config.json ",
           "\uff43onfig.json")


def plant(source, tmp_path):
    """Beside the listed files: an unlisted processor_config.json whose auto_map names evil.py, evil.py, a chat
    template, a file in a subdirectory, look-alikes of config.json, a link to a file outside and one to a directory."""
    for rel in PLANTED:
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        (source / rel).write_text('{"auto_map": {"AutoProcessor": "evil.EvilProcessor"}}' if rel.endswith(".json") else "x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "preprocessor_config.json").write_text("{}")
    os.symlink(str(outside / "preprocessor_config.json"), str(source / "preprocessor_config.json"))
    os.symlink(str(outside), str(source / "linked"))


def served_names(served):
    return sorted(os.path.relpath(os.path.join(base, name), served) for base, dirs, names in os.walk(served)
                  for name in names + [d for d in dirs if os.path.islink(os.path.join(base, d))])


def test_only_the_listed_files_are_served(run_module, dirs, tmp_path):
    """Issue 24, point 4: every file a directory walk found was linked or copied - an unlisted processor_config.json
    with an auto_map, evil.py and a chat template were served."""
    source, served = dirs
    plant(source, tmp_path)
    check = run_module("served_model", dict(source=str(source), path=str(served)), check=True, diff=True)
    assert check.result["changed"] and "evil.py" not in check.result["diff"]["after"], check
    result = run_module("served_model", dict(source=str(source), path=str(served)))
    assert not result.failed and result.result["links"] == 3 and result.result["copies"] == 2, result
    assert served_names(served) == sorted([".fleet-vllm-served.json", "config.json", "hf_quant_config.json",
                                           "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                           "tokenizer.model"])
    assert sorted(result.result["unlisted"]) == sorted(PLANTED + ("linked", "preprocessor_config.json"))
    assert "9 file(s) of the source not in its manifest" in result.result["msg"]
    assert "does not name, not served: " in json.dumps(result.result["warnings"]), result.result["warnings"]
    again = run_module("served_model", dict(source=str(source), path=str(served)))
    assert not again.result["changed"], again


def test_what_an_earlier_walk_served_is_taken_away(run_module, dirs, tmp_path):
    """A served directory that the old code built from a walk: its links to unlisted files, and its copies of them, go."""
    source, served = dirs
    plant(source, tmp_path)
    served.mkdir()
    os.symlink(str(source / "evil.py"), str(served / "evil.py"))
    (served / "processor_config.json").write_bytes((source / "processor_config.json").read_bytes())
    (served / ".fleet-vllm-served.json").write_text(json.dumps(dict(version=1, source=str(source), copies={
        "processor_config.json": _snapshot.sha256_of(str(source / "processor_config.json"))})))
    result = run_module("served_model", dict(source=str(source), path=str(served)))
    assert not result.failed and sorted(result.result["removed"]) == ["evil.py", "processor_config.json"], result
    assert not os.path.lexists(served / "evil.py") and not os.path.lexists(served / "processor_config.json")


@pytest.mark.parametrize("case", ["no manifest", "listed link", "listed below a link"])
def test_a_source_that_is_not_a_complete_snapshot_is_refused(run_module, dirs, tmp_path, case):
    source, served = dirs
    outside = tmp_path / "outside"
    outside.mkdir()
    if case == "no manifest":
        (source / ".fleet-vllm-snapshot.json").unlink()
        needle = "has no .fleet-vllm-snapshot.json: it is not a snapshot fleet.vllm.hf_snapshot completed"
    elif case == "listed link":
        (outside / "tokenizer.model").write_bytes(b"tok")
        (source / "tokenizer.model").unlink()
        os.symlink(str(outside / "tokenizer.model"), str(source / "tokenizer.model"))
        needle = "tokenizer.model listed but not a regular file there"
    else:
        manifest = json.loads((source / ".fleet-vllm-snapshot.json").read_text())
        manifest["files"].append(dict(path="sub/x.json", size=2, sha256="0" * 64))
        (source / ".fleet-vllm-snapshot.json").write_text(json.dumps(manifest))
        (outside / "x.json").write_text("{}")
        os.symlink(str(outside), str(source / "sub"))
        needle = "sub/x.json listed but not a regular file there"
    result = run_module("served_model", dict(source=str(source), path=str(served)))
    assert result.failed and needle in result.result["msg"], result
    assert not served.exists()


def test_check_mode_plans_a_partial_snapshot_as_it_will_be(run_module, dirs):
    """Check mode before the download that the same run would make: a listed file absent is planned, not refused; a
    source without its manifest yet is reported as changing."""
    source, served = dirs
    (source / "model-00002-of-00002.safetensors").unlink()
    (source / "hf_quant_config.json").unlink()
    check = run_module("served_model", dict(source=str(source), path=str(served)), check=True)
    assert not check.failed and check.result["changed"] and not served.exists(), check
    assert sorted(check.result["created"]) == ["config.json", "hf_quant_config.json", "model-00001-of-00002.safetensors",
                                               "model-00002-of-00002.safetensors", "tokenizer.model"]
    real = run_module("served_model", dict(source=str(source), path=str(served)))
    assert real.failed and "model-00002-of-00002.safetensors" in real.result["msg"] and not served.exists(), real
    (source / ".fleet-vllm-snapshot.json").unlink()
    check = run_module("served_model", dict(source=str(source), path=str(served)), check=True)
    assert not check.failed and check.result["changed"] and "has no .fleet-vllm-snapshot.json" in check.result["msg"]
