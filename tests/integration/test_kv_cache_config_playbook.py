"""fleet.vllm.kv_cache_config through ansible-playbook from the checkout: check, real, check,
real, for both states, verifying the files on disk after every step."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import FIXTURES, ROOT, run_playbook, snapshot

pytestmark = pytest.mark.integration

PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "kv_cache_config.yml"


def play(model, state, *flags):
    run = run_playbook(PLAYBOOK, *flags, extra_vars={"model_path": str(model), "kv_state": state})
    return run.rc, run.stats(), run.tasks()["Set the KV-cache declaration state"]


def test_check_real_check_real_for_both_states(tmp_path):
    model = tmp_path / "served"
    shutil.copytree(FIXTURES / "models" / "kimi-k2.5-nvfp4", model)
    pristine = snapshot(model)

    rc, stats, task = play(model, "absent", "--check", "--diff")
    assert rc == 0 and stats["changed"] == 1 and task["changed"] is True
    assert task["kv_cache_dtype_before"] == "fp8_e4m3" and task["kv_cache_dtype_after"] == "auto"
    assert {d["after_header"] for d in task["diff"]} == {str(model / n) for n in (".fleet-vllm-kv-cache.json", "config.json", "hf_quant_config.json")}
    assert snapshot(model) == pristine

    rc, stats, task = play(model, "absent", "--diff")
    assert rc == 0 and stats["changed"] == 1
    config = json.loads((model / "config.json").read_text())
    assert "kv_cache_scheme" not in config["quantization_config"]
    assert "kv_cache_quant_algo" not in json.loads((model / "hf_quant_config.json").read_text())["quantization"]
    assert (model / ".fleet-vllm-kv-cache.json").is_file()
    stripped = snapshot(model)

    for flags in (("--check",), ()):
        rc, stats, task = play(model, "absent", *flags)
        assert rc == 0 and stats["changed"] == 0 and task["changed"] is False
        assert snapshot(model) == stripped

    rc, stats, task = play(model, "present", "--check")
    assert rc == 0 and stats["changed"] == 1 and task["kv_cache_dtype_after"] == "fp8_e4m3"
    assert snapshot(model) == stripped

    rc, stats, task = play(model, "present")
    assert rc == 0 and stats["changed"] == 1
    assert snapshot(model) == pristine

    for flags in (("--check",), ()):
        rc, stats, task = play(model, "present", *flags)
        assert rc == 0 and stats["changed"] == 0
        assert snapshot(model) == pristine


def test_bad_input_fails_the_play_and_leaves_files(tmp_path):
    model = tmp_path / "served"
    shutil.copytree(FIXTURES / "models" / "kimi-k2.5-nvfp4", model)
    (model / "config.json").write_text('{"quantization_config": {"kv_cache_scheme": "FP8",}}\n')
    before = snapshot(model)
    rc, stats, task = play(model, "absent")
    assert rc != 0 and stats["failures"] == 1
    assert "config.json is not valid JSON" in task["msg"] and "line 1, column 51" in task["msg"]
    assert snapshot(model) == before
