"""fleet.vllm.kv_cache_config on real files in tmp_path, run as Ansible runs a module."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from conftest import COLLECTIONS, FIXTURES, prerequisite, snapshot

RECORD = ".fleet-vllm-kv-cache.json"

# name, declarations found, kv dtype vLLM resolves before the strip (auto after it)
CASES = [
    pytest.param(
        "kimi-k2.5-nvfp4",
        ["config.json:quantization_config.kv_cache_scheme", "hf_quant_config.json:quantization.kv_cache_quant_algo"],
        "fp8_e4m3",
        id="kimi-k2.5-modelopt-pair",
    ),
    pytest.param(
        "deepseek-r1-fp4-legacy",
        ["hf_quant_config.json:quantization.kv_cache_quant_algo"],
        "fp8_e4m3",
        id="old-layout-hf-quant-config-only",
    ),
    pytest.param(
        "fp8-string-scheme",
        [
            "config.json:quantization_config.kv_cache_quant_algo",
            "config.json:quantization_config.kv_cache_scheme",
            "config.json:quantization_config.quantization.kv_cache_quant_algo",
            "hf_quant_config.json:quantization.kv_cache_quant_algo",
        ],
        "fp8_e4m3",
        id="string-FP8-flat-and-nested-compact-file",
    ),
]


def _json(path):
    return json.loads(Path(path).read_text(encoding="utf-8"))


@pytest.mark.parametrize("name, declared, before", CASES)
def test_strip_then_restore_round_trip(run_module, model_dir, name, declared, before):
    model = model_dir(name)
    original = snapshot(model)

    check = run_module("kv_cache_config", {"path": str(model), "state": "absent"}, check=True, diff=True)
    assert not check.failed, check
    assert check.result["changed"] is True
    assert sorted(check.result["declared"]) == sorted(declared)
    assert sorted(check.result["removed"]) == sorted(declared)
    assert check.result["kv_cache_dtype_before"] == before
    assert check.result["kv_cache_dtype_after"] == "auto"
    assert snapshot(model) == original, "check mode touched the files"
    diffed = {d["after_header"] for d in check.result["diff"]}
    assert str(model / RECORD) in diffed
    assert {str(model / site.split(":")[0]) for site in declared} <= diffed

    strip = run_module("kv_cache_config", {"path": str(model), "state": "absent"})
    assert not strip.failed, strip
    assert strip.result["changed"] is True
    assert sorted(strip.result["removed"]) == sorted(declared)
    assert (strip.result["kv_cache_dtype_before"], strip.result["kv_cache_dtype_after"]) == (before, "auto")
    for site in declared:
        file_name, dotted = site.split(":")
        doc = _json(model / file_name)
        *parents, key = dotted.split(".")
        for parent in parents:
            doc = doc[parent]
        assert key not in doc, site
    record = _json(model / RECORD)
    assert sorted(e["file"] + ":" + ".".join(e["container"] + [e["key"]]) for e in record["removed"]) == sorted(declared)
    assert record["kv_cache_dtype_before"] == before

    again = run_module("kv_cache_config", {"path": str(model), "state": "absent"})
    assert not again.failed, again
    assert again.result["changed"] is False
    assert again.result["kv_cache_dtype_before"] == "auto"
    assert again.result["kv_cache_dtype_checkpoint"] == before, "the record must keep the checkpoint's dtype"
    stripped = snapshot(model)

    check_restore = run_module("kv_cache_config", {"path": str(model), "state": "present"}, check=True)
    assert check_restore.result["changed"] is True
    assert check_restore.result["kv_cache_dtype_after"] == before
    assert snapshot(model) == stripped, "check mode touched the files"

    restore = run_module("kv_cache_config", {"path": str(model), "state": "present"})
    assert not restore.failed, restore
    assert restore.result["changed"] is True
    assert sorted(restore.result["restored"]) == sorted(declared)
    assert (restore.result["kv_cache_dtype_before"], restore.result["kv_cache_dtype_after"]) == ("auto", before)
    assert snapshot(model) == original, "present did not give back the original bytes"

    noop = run_module("kv_cache_config", {"path": str(model), "state": "present"})
    assert noop.result["changed"] is False and not noop.failed, noop
    assert snapshot(model) == original


@pytest.mark.parametrize("name", ["bf16-kv", "no-quantization"])
def test_model_without_kv_quantization_is_a_noop(run_module, model_dir, name):
    model = model_dir(name)
    original = snapshot(model)
    run = run_module("kv_cache_config", {"path": str(model), "state": "absent"}, diff=True)
    assert not run.failed, run
    assert run.result["changed"] is False
    assert run.result["declared"] == [] and run.result["removed"] == []
    assert run.result["kv_cache_dtype_before"] == run.result["kv_cache_dtype_after"] == "auto"
    assert run.result["kv_cache_dtype_checkpoint"] == "auto"
    assert "declares no KV-cache quantization" in run.result["msg"]
    assert "diff" not in run.result
    assert snapshot(model) == original


def test_present_with_nothing_recorded_fails_and_changes_nothing(run_module, model_dir):
    model = model_dir("no-quantization")
    original = snapshot(model)
    run = run_module("kv_cache_config", {"path": str(model), "state": "present"})
    assert run.failed
    assert "nothing recorded to restore" in run.result["msg"]
    assert str(model / RECORD) in run.result["msg"]
    assert snapshot(model) == original


def test_formatting_is_kept_byte_for_byte(run_module, model_dir):
    """Only the declaration's own text leaves the file: indentation, key order, unicode
    escapes, number spellings and the (missing) trailing newline stay."""
    model = model_dir("fp8-string-scheme")
    config_before = (model / "config.json").read_text(encoding="utf-8")
    hq_before = (model / "hf_quant_config.json").read_bytes()
    assert run_module("kv_cache_config", {"path": str(model)}).result["changed"] is True
    config_after = (model / "config.json").read_text(encoding="utf-8")
    expected = config_before.replace('      "kv_cache_quant_algo": "FP8"\n', "").replace(
        '      "quant_algo": "NVFP4",\n', '      "quant_algo": "NVFP4"\n'
    ).replace('    "kv_cache_quant_algo": "FP8",\n    "kv_cache_scheme": "FP8"\n', "").replace(
        '    },\n  },\n  "rms_norm_eps"', '    }\n  },\n  "rms_norm_eps"'
    )
    assert config_after == expected
    assert "1e-06" in config_after
    # The compact file lost its only quantization member and kept its compact style.
    assert (model / "hf_quant_config.json").read_bytes() == hq_before.replace(b'{"kv_cache_quant_algo":"FP8"}', b"{}")
    assert not (model / "hf_quant_config.json").read_bytes().endswith(b"\n")


def test_unicode_and_trailing_newline_survive(run_module, model_dir, tmp_path):
    model = model_dir("bf16-kv")
    config = model / "config.json"
    text = config.read_text(encoding="utf-8").replace(
        '"kv_cache_scheme": null', '"kv_cache_scheme": {"dynamic": false, "num_bits": 8, "type": "float"}'
    )
    config.write_text(text, encoding="utf-8")
    run = run_module("kv_cache_config", {"path": str(model)})
    assert run.result["changed"] is True, run
    after = config.read_text(encoding="utf-8")
    assert "\\u2014" in after and "\\ud83d\\ude80" in after, "unicode escapes were rewritten"
    assert after.endswith("}\n")
    assert after == text.replace(',\n        "kv_cache_scheme": {"dynamic": false, "num_bits": 8, "type": "float"}', "")
    assert run_module("kv_cache_config", {"path": str(model), "state": "present"}).result["changed"] is True
    assert config.read_text(encoding="utf-8") == text


def test_mode_and_owner_are_kept(run_module, model_dir):
    model = model_dir("kimi-k2.5-nvfp4")
    config = model / "config.json"
    os.chmod(config, 0o640)
    if os.geteuid() == 0:
        os.chown(config, 65534, 65534)
    st = config.stat()
    assert run_module("kv_cache_config", {"path": str(model)}).result["changed"] is True
    after = config.stat()
    assert stat.S_IMODE(after.st_mode) == 0o640
    assert (after.st_uid, after.st_gid) == (st.st_uid, st.st_gid)
    assert after.st_ino != st.st_ino, "expected an atomic replace, not an in-place write"


def test_symlinked_files_are_replaced_and_blobs_never_written(run_module, tmp_path):
    """Hugging Face cache layout: snapshots/<sha>/config.json -> ../../blobs/<hash>."""
    source = Path(__file__).resolve().parents[3] / "fixtures" / "models" / "kimi-k2.5-nvfp4"
    blobs = tmp_path / "blobs"
    snap = tmp_path / "snapshots" / ("a" * 40)
    blobs.mkdir()
    snap.mkdir(parents=True)
    for name in ("config.json", "hf_quant_config.json"):
        blob = blobs / ("blob-" + name)
        blob.write_bytes((source / name).read_bytes())
        os.chmod(blob, 0o444)
        (snap / name).symlink_to(Path("..") / ".." / "blobs" / blob.name)
    blobs_before = snapshot(blobs)

    check = run_module("kv_cache_config", {"path": str(snap)}, check=True)
    assert check.result["changed"] is True
    assert (snap / "config.json").is_symlink()

    run = run_module("kv_cache_config", {"path": str(snap), "backup": True})
    assert not run.failed, run
    assert snapshot(blobs) == blobs_before, "a shared blob was written"
    for name in ("config.json", "hf_quant_config.json"):
        assert not (snap / name).is_symlink()
        assert (snap / name).is_file()
    assert "kv_cache_scheme" not in _json(snap / "config.json")["quantization_config"]
    assert len(run.result["backup_files"]) == 2
    for backup in run.result["backup_files"]:
        # A copy of the content the link led to, as a regular file beside the link (every
        # supported core: 2.16's backup_local failed here in chattr).
        assert not Path(backup).is_symlink()
        assert Path(backup).parent == snap
        name = Path(backup).name.split(".json.")[0] + ".json"
        assert Path(backup).read_bytes() == (source / name).read_bytes()
        assert stat.S_IMODE(Path(backup).stat().st_mode) == 0o444

    restore = run_module("kv_cache_config", {"path": str(snap), "state": "present"})
    assert restore.result["changed"] is True
    for name in ("config.json", "hf_quant_config.json"):
        assert (snap / name).read_bytes() == (source / name).read_bytes()
    assert snapshot(blobs) == blobs_before


def test_backup_only_for_real_changes(run_module, model_dir):
    model = model_dir("kimi-k2.5-nvfp4")
    first = run_module("kv_cache_config", {"path": str(model), "backup": True})
    assert len(first.result["backup_files"]) == 2
    for backup in first.result["backup_files"]:
        assert Path(backup).exists()
        assert Path(backup).parent == model
    second = run_module("kv_cache_config", {"path": str(model), "backup": True})
    assert second.result["changed"] is False
    assert second.result["backup_files"] == []
    assert len([p for p in model.iterdir() if p.name.endswith("~")]) == 2


def test_redownloaded_file_is_stripped_again_and_record_kept_whole(run_module, model_dir, tmp_path):
    """A re-copy of config.json from the pristine download brings the declaration back; a new
    strip must find it again, and present must still restore the original."""
    model = model_dir("kimi-k2.5-nvfp4")
    pristine = (model / "config.json").read_bytes()
    original = snapshot(model)
    assert run_module("kv_cache_config", {"path": str(model)}).result["changed"] is True
    (model / "config.json").write_bytes(pristine)
    again = run_module("kv_cache_config", {"path": str(model)})
    assert again.result["changed"] is True
    assert again.result["removed"] == ["config.json:quantization_config.kv_cache_scheme"]
    assert len(_json(model / RECORD)["removed"]) == 2
    assert run_module("kv_cache_config", {"path": str(model), "state": "present"}).result["changed"] is True
    assert snapshot(model) == original


def test_present_conflicting_value_fails_without_writing(run_module, model_dir):
    model = model_dir("kimi-k2.5-nvfp4")
    run_module("kv_cache_config", {"path": str(model)})
    config = model / "config.json"
    config.write_text(
        config.read_text(encoding="utf-8").replace('"quant_algo": "NVFP4",', '"quant_algo": "NVFP4",\n    "kv_cache_scheme": "NVFP4",', 1),
        encoding="utf-8",
    )
    before = snapshot(model)
    run = run_module("kv_cache_config", {"path": str(model), "state": "present"})
    assert run.failed
    assert "cannot restore config.json:quantization_config.kv_cache_scheme" in run.result["msg"]
    assert snapshot(model) == before


BAD_JSON = [
    pytest.param("config.json", '{\n  "model_type": "deepseek_v3",\n  "quantization_config": {,\n}\n', "line 3, column 27", id="config-syntax"),
    pytest.param("hf_quant_config.json", '{"quantization": {"kv_cache_quant_algo": "FP8"', "line 1, column 47", id="hf-quant-truncated"),
    pytest.param("config.json", "", "line 1, column 1", id="config-empty"),
]


@pytest.mark.parametrize("file_name, text, position", BAD_JSON)
def test_malformed_json_fails_with_position_and_changes_nothing(run_module, model_dir, file_name, text, position):
    model = model_dir("kimi-k2.5-nvfp4")
    (model / file_name).write_text(text, encoding="utf-8")
    before = snapshot(model)
    for state in ("absent", "present"):
        run = run_module("kv_cache_config", {"path": str(model), "state": state})
        assert run.failed, run
        assert str(model / file_name) in run.result["msg"]
        assert position in run.result["msg"]
        assert snapshot(model) == before


@pytest.mark.parametrize(
    "replacement, message",
    [
        ('"quantization_config": "NVFP4",', "config.json: quantization_config is a JSON string, expected an object"),
        ('"quantization_config": [1, 2],', "config.json: quantization_config is a JSON array"),
    ],
)
def test_quantization_config_of_unexpected_type(run_module, model_dir, replacement, message):
    model = model_dir("deepseek-r1-fp4-legacy")
    config = model / "config.json"
    config.write_text(config.read_text(encoding="utf-8").replace('"q_lora_rank"', replacement + '\n  "q_lora_rank"'), encoding="utf-8")
    before = snapshot(model)
    run = run_module("kv_cache_config", {"path": str(model)})
    assert run.failed, run
    assert message in run.result["msg"]
    assert str(model) in run.result["msg"]
    assert snapshot(model) == before


def test_missing_directory_and_missing_config(run_module, tmp_path):
    gone = run_module("kv_cache_config", {"path": str(tmp_path / "nope")})
    assert gone.failed and "model directory %s does not exist" % (tmp_path / "nope") in gone.result["msg"]
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "hf_quant_config.json").write_text("{}")
    run = run_module("kv_cache_config", {"path": str(empty)})
    assert run.failed and "%s has no config.json" % empty in run.result["msg"]
    assert sorted(p.name for p in empty.iterdir()) == ["hf_quant_config.json"]
    not_dir = tmp_path / "file"
    not_dir.write_text("x")
    assert "is not a directory" in run_module("kv_cache_config", {"path": str(not_dir)}).result["msg"]


def test_dangling_symlink_named(run_module, model_dir):
    model = model_dir("kimi-k2.5-nvfp4")
    (model / "config.json").unlink()
    (model / "config.json").symlink_to("../../blobs/missing")
    run = run_module("kv_cache_config", {"path": str(model)})
    assert run.failed and "symbolic link to ../../blobs/missing, which does not exist" in run.result["msg"]


def test_corrupt_record_fails_and_keeps_record(run_module, model_dir):
    model = model_dir("kimi-k2.5-nvfp4")
    run_module("kv_cache_config", {"path": str(model)})
    (model / RECORD).write_text('{"format": 1, "removed": "nope"}')
    before = snapshot(model)
    run = run_module("kv_cache_config", {"path": str(model), "state": "present"})
    assert run.failed and "is not a record written by fleet.vllm.kv_cache_config" in run.result["msg"]
    assert snapshot(model) == before


@pytest.mark.parametrize("record_name", ["config.json", "../escape.json", ""])
def test_bad_record_name(run_module, model_dir, record_name):
    model = model_dir("kimi-k2.5-nvfp4")
    before = snapshot(model)
    run = run_module("kv_cache_config", {"path": str(model), "record_name": record_name})
    assert run.failed and "record_name" in run.result["msg"]
    assert snapshot(model) == before


needs_root = prerequisite(os.geteuid() == 0, reason="switching to an unprivileged user needs root")


@pytest.fixture
def world_model(world_tmp):
    """A model fixture in a directory every user can enter."""

    def make(name):
        target = world_tmp / name
        shutil.copytree(FIXTURES / "models" / name, target)
        os.chmod(target, 0o755)
        return target

    return make


@needs_root
def test_unreadable_file_is_named(run_module, world_model):
    model = world_model("kimi-k2.5-nvfp4")
    os.chmod(model / "hf_quant_config.json", 0o600)
    before = snapshot(model)
    run = run_module("kv_cache_config", {"path": str(model)}, user="nobody")
    assert run.failed, run
    assert "cannot read %s" % (model / "hf_quant_config.json") in run.result["msg"]
    assert snapshot(model) == before


@needs_root
@pytest.mark.parametrize("check", [True, False], ids=["check-mode", "real"])
def test_read_only_directory_fails_before_any_write(run_module, world_model, check):
    model = world_model("kimi-k2.5-nvfp4")
    before = snapshot(model)
    run = run_module("kv_cache_config", {"path": str(model)}, user="nobody", check=check)
    assert run.failed, run
    assert "is not writable by this user" in run.result["msg"]
    assert snapshot(model) == before


@needs_root
def test_read_only_file_fails_before_any_write(run_module, world_model):
    model = world_model("kimi-k2.5-nvfp4")
    os.chmod(model, 0o777)
    os.chmod(model / "hf_quant_config.json", 0o666)
    before = snapshot(model)  # config.json stays root-owned 0644: read-only for nobody
    run = run_module("kv_cache_config", {"path": str(model)}, user="nobody")
    assert run.failed, run
    assert "cannot write %s: the file is read-only" % (model / "config.json") in run.result["msg"]
    assert snapshot(model) == before


# ---------------------------------------------------------------------------- the recorded decision

DECISION = {"state": "absent", "reason": "policy strip", "line": "policy strip: checkpoint asks for fp8_e4m3 -> strip"}


def test_a_recorded_decision_is_returned_only_for_its_key_and_untouched_files(run_module, model_dir, tmp_path):
    """The role's rerun with nothing new is one read: the decision comes back while the key (its
    inputs) and the files it left are the same; any change and it is null, so the role decides again."""
    model = model_dir("kimi-k2.5-nvfp4")
    record = tmp_path / "state" / "kv-cache" / "decision.json"
    args = {"path": str(model), "decision_file": str(record), "decision_key": "key-1"}

    first = run_module("kv_cache_config", args, check=True)
    assert not first.failed and first.result["decision"] is None and first.result["decision_recorded"] is False, first

    check = run_module("kv_cache_config", dict(args, state="absent", decision=DECISION), check=True)
    assert check.result["changed"] is True and check.result["decision_recorded"] is True
    assert not record.exists()

    applied = run_module("kv_cache_config", dict(args, state="absent", decision=DECISION))
    assert not applied.failed and applied.result["changed"] is True and applied.result["decision_recorded"] is True
    assert stat.S_IMODE(os.stat(record).st_mode) == 0o644
    written = _json(record)
    assert written["key"] == "key-1" and written["decision"] == DECISION and written["format"] == 1
    assert sorted(written["files"]) == sorted(["config.json", "hf_quant_config.json", RECORD])
    assert all(written["files"].values())  # the stripped files and the strip record, as left

    read = run_module("kv_cache_config", args, check=True)
    assert read.result["decision"] == DECISION and read.result["changed"] is False

    again = run_module("kv_cache_config", dict(args, state="absent", decision=DECISION))
    assert again.result["changed"] is False and again.result["decision_recorded"] is False

    other_key = run_module("kv_cache_config", dict(args, decision_key="key-2"), check=True)
    assert other_key.result["decision"] is None

    config = model / "config.json"
    config.write_text(config.read_text(encoding="utf-8").replace("{", "{\n  \"edited\": true,", 1), encoding="utf-8")
    edited = run_module("kv_cache_config", args, check=True)
    assert not edited.failed and edited.result["decision"] is None


def test_a_record_that_is_not_ours_is_ignored_and_rewritten(run_module, model_dir, tmp_path):
    model = model_dir("kimi-k2.5-nvfp4")
    record = tmp_path / "decision.json"
    record.write_text("not json")
    args = {"path": str(model), "decision_file": str(record), "decision_key": "k"}
    assert run_module("kv_cache_config", args, check=True).result["decision"] is None
    applied = run_module("kv_cache_config", dict(args, state="absent", decision=DECISION))
    assert not applied.failed and _json(record)["decision"] == DECISION


def test_decision_file_needs_a_key(run_module, model_dir, tmp_path):
    model = model_dir("kimi-k2.5-nvfp4")
    before = snapshot(tmp_path)
    run = run_module("kv_cache_config", {"path": str(model), "decision_file": str(tmp_path / "d.json")})
    assert run.failed and run.result["msg"] == "missing parameter(s) required by 'decision_file': decision_key"
    assert snapshot(tmp_path) == before


def test_a_backup_that_cannot_be_made_changes_nothing(run_module, model_dir, tmp_path):
    """Every backup is made before the first write: one that fails (here the second file's,
    refused by a hook in the module's interpreter) leaves the checkpoint and the record as they
    were, and the message names the file."""
    model = model_dir("kimi-k2.5-nvfp4")
    before = snapshot(model)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import shutil\n"
        "_copy2 = shutil.copy2\n"
        "def copy2(src, dst, **kwargs):\n"
        "    if str(src).endswith('hf_quant_config.json'):\n"
        "        raise OSError(28, 'No space left on device')\n"
        "    return _copy2(src, dst, **kwargs)\n"
        "shutil.copy2 = copy2\n",
        encoding="utf-8",
    )
    run = run_module("kv_cache_config", {"path": str(model), "backup": True},
                     env={"PYTHONPATH": "%s:%s" % (hook, COLLECTIONS)})
    assert run.failed, run
    assert "cannot back up %s" % (model / "hf_quant_config.json") in run.result["msg"]
    assert "No space left on device" in run.result["msg"]
    after = {name: entry for name, entry in snapshot(model).items() if not name.endswith("~")}
    assert after == before, "a file of the checkpoint changed although a backup failed"
    assert not (model / RECORD).exists()
