"""vllm_fingerprint: what the service reads, compared with its last recorded start."""

from __future__ import annotations

import os


def setup(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"a": 1}')
    (model / "model-00001-of-00002.safetensors").write_bytes(b"x" * 64)
    unit = tmp_path / "vllm.service"
    unit.write_text("[Service]\n")
    venvs = tmp_path / "opt"
    (venvs / "0.33.0").mkdir(parents=True)
    (venvs / "0.34.0").mkdir()
    os.symlink("0.33.0", venvs / "current")
    args = {"state_file": str(tmp_path / "state" / "vllm.fingerprint"), "files": [str(unit), str(tmp_path / "missing.env")],
            "links": [str(venvs / "current")], "model_path": str(model), "small_file_bytes": 32}
    return model, unit, venvs, args


def test_record_then_match_then_each_change_differs(run_module, tmp_path):
    model, unit, venvs, args = setup(tmp_path)
    first = run_module("vllm_fingerprint", args).result
    assert first["matches"] is False and first["differences"] == ["no fingerprint recorded"] and not first["changed"]

    check = run_module("vllm_fingerprint", dict(args, record=True), check=True).result
    assert check["changed"] and not os.path.exists(args["state_file"])
    rec = run_module("vllm_fingerprint", dict(args, record=True)).result
    assert rec["changed"] and oct(os.stat(args["state_file"]).st_mode & 0o777) == "0o600"
    again = run_module("vllm_fingerprint", dict(args, record=True)).result
    assert not again["changed"] and again["matches"]
    assert run_module("vllm_fingerprint", args).result["matches"] is True

    changes = [
        (lambda: unit.write_text("[Service]\nX=1\n"), "file %s" % unit),
        (lambda: (os.remove(venvs / "current"), os.symlink("0.34.0", venvs / "current")), "link %s" % (venvs / "current")),
        (lambda: (model / "config.json").write_text('{"a": 2}'), "model config.json"),
        (lambda: (model / "model-00001-of-00002.safetensors").write_bytes(b"x" * 65), "model model-00001-of-00002.safetensors"),
        (lambda: (model / "model-00002-of-00002.safetensors").write_bytes(b"y" * 64), "model model-00002-of-00002.safetensors"),
    ]
    for change, expected in changes:
        change()
        result = run_module("vllm_fingerprint", args).result
        assert result["matches"] is False and result["differences"] == [expected], result
        run_module("vllm_fingerprint", dict(args, record=True))


def test_large_files_count_by_size_not_content(run_module, tmp_path):
    model, unit, venvs, args = setup(tmp_path)
    run_module("vllm_fingerprint", dict(args, record=True))
    (model / "model-00001-of-00002.safetensors").write_bytes(b"z" * 64)  # same size: a shard is not re-read
    assert run_module("vllm_fingerprint", args).result["matches"] is True


def test_missing_model_dir_fails(run_module, tmp_path):
    args = setup(tmp_path)[3]
    result = run_module("vllm_fingerprint", dict(args, model_path=str(tmp_path / "nope"))).result
    assert result["failed"] and "does not exist" in result["msg"]
