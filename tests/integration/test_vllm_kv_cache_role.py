"""The vllm_kv_cache role decides from the real vLLM: the 0.16.0 build (before FP8 MLA on
SM120) must strip the FP8 KV cache of a Kimi-K2.5-NVFP4 checkpoint on compute capability 12.0;
0.33.0 must keep it, restoring what the old build stripped; reruns change nothing."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import FIXTURES, ROOT, run_playbook, snapshot

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "vllm_kv_cache.yml"


def play(model, python, *flags, **extra):
    variables = {
        "fleet_vllm_served_model_path": str(model),
        "fleet_vllm_python": str(python),
        "vllm_kv_cache_probe_environment": {"VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"},
        # the probe's answers stay with the test, not in /var/cache of this machine
        "vllm_kv_cache_probe_cache_dir": str(model.parent / "probe-cache"),
        # and its decision records too
        "fleet_vllm_state_dir": str(model.parent / "state"),
    }
    variables.update(extra)
    run = run_playbook(PLAYBOOK, *flags, extra_vars=variables, path=[FIXTURES / "bin"],
                       env={"FLEET_VLLM_FAKE_GPUS": "rtx-pro-6000-x8"})
    return run.rc, run.stats(), run.tasks()


def decision(tasks):
    return tasks["Report the KV-cache decision"]["msg"]


def test_old_vllm_strips_new_vllm_restores(tmp_path, vllm_venv_old, vllm_venv):
    model = tmp_path / "served"
    shutil.copytree(FIXTURES / "models" / "kimi-k2.5-nvfp4", model)
    pristine = snapshot(model)
    old, new = vllm_venv_old / "bin" / "python", vllm_venv / "bin" / "python"

    rc, stats, tasks = play(model, old, "--check")
    assert rc == 0, tasks
    assert stats["changed"] == 1 and snapshot(model) == pristine
    probe = tasks["Ask the installed vLLM whether a backend accepts the checkpoint's KV-cache dtype"]
    assert probe["vllm_version"].startswith("0.16.0")
    assert probe["backend_available"] is False
    triton = [b for b in probe["backends"] if b["name"] == "TRITON_MLA"]
    assert triton and triton[0]["accepts"] is False

    rc, stats, tasks = play(model, old)
    assert rc == 0 and stats["changed"] == 1
    line = decision(tasks)
    assert "checkpoint asks for fp8_e4m3; vLLM 0.16.0" in line and "compute capability 12.0" in line
    assert "-> strip" in line and line.endswith("vLLM resolves --kv-cache-dtype auto to auto")
    assert "kv_cache_scheme" not in json.loads((model / "config.json").read_text())["quantization_config"]

    # Each new question imports vLLM (about 40 s): the rerun with nothing to do is checked once,
    # after the upgrade, and for the strip side in test_forced_policies_need_no_probe.
    rc, stats, tasks = play(model, new)
    assert rc == 0 and stats["changed"] == 1
    line = decision(tasks)
    assert "vLLM 0.33.0" in line and "TRITON_MLA: accepts" in line and "-> keep it" in line
    assert snapshot(model) == pristine, "the upgrade did not restore the checkpoint's FP8 KV cache"
    assert tasks["Ask the installed vLLM whether a backend accepts the checkpoint's KV-cache dtype"]["cached"] is False

    # The rerun with the same inputs and untouched files: the decision recorded one run ago, one
    # module run on the host, no question to vLLM and nothing applied.
    rc, stats, tasks = play(model, new)
    assert rc == 0 and stats["changed"] == 0 and snapshot(model) == pristine
    assert tasks["Ask the installed vLLM whether a backend accepts the checkpoint's KV-cache dtype"].get("skipped") is True
    assert tasks["Apply the KV-cache decision, and record it"].get("skipped") is True
    assert decision(tasks) == line.replace("-> keep it;", "-> keep it (recorded for these inputs and files: nothing "
                                           "asked or changed);")

    # Without the record (another state directory), the same question of the same install about the
    # same files: the answer the real vLLM gave, from the probe's cache, without importing vLLM.
    rc, stats, tasks = play(model, new, fleet_vllm_state_dir=str(tmp_path / "other-state"))
    assert rc == 0 and stats["changed"] == 1 and snapshot(model) == pristine  # the record is written
    assert tasks["Ask the installed vLLM whether a backend accepts the checkpoint's KV-cache dtype"]["cached"] is True


def test_forced_policies_need_no_probe(tmp_path):
    model = tmp_path / "served"
    shutil.copytree(FIXTURES / "models" / "kimi-k2.5-nvfp4", model)
    pristine = snapshot(model)
    nowhere = tmp_path / "no-venv" / "python"  # the probe must not run for forced policies

    rc, stats, tasks = play(model, nowhere, "--check", vllm_kv_cache_policy="strip")
    assert rc == 0 and stats["changed"] == 1 and snapshot(model) == pristine, tasks
    rc, stats, tasks = play(model, nowhere, vllm_kv_cache_policy="strip")
    assert rc == 0 and stats["changed"] == 1, tasks
    assert decision(tasks).startswith("policy strip: checkpoint asks for fp8_e4m3 -> strip")
    stripped = snapshot(model)
    rc, stats, tasks = play(model, nowhere, vllm_kv_cache_policy="strip")
    assert rc == 0 and stats["changed"] == 0 and snapshot(model) == stripped
    rc, stats, tasks = play(model, nowhere, vllm_kv_cache_policy="keep")
    assert rc == 0 and stats["changed"] == 1
    assert snapshot(model) == pristine


def test_bad_policy_fails_before_anything_changes(tmp_path):
    model = tmp_path / "served"
    shutil.copytree(FIXTURES / "models" / "kimi-k2.5-nvfp4", model)
    pristine = snapshot(model)
    rc, stats, tasks = play(model, tmp_path / "python", vllm_kv_cache_policy="sometimes")
    assert rc != 0 and stats["failures"] == 1
    failed = [t for t in tasks.values() if t.get("failed")]
    assert "vllm_kv_cache_policy" in failed[0]["msg"] and "sometimes" in failed[0]["msg"]
    assert snapshot(model) == pristine


# Issue 11: a host without GPUs is a CPU host (fleet_vllm_platform auto), and the question is
# put to vLLM's CPU platform. The tiny FP8-KV DeepSeek-V3 checkpoint of tests/hub/tiny_mla.py is
# the seed failure on the real CPU engine (docs/evidence.md section 5): it must be stripped.

def play_without_gpus(model, python, *flags, **extra):
    variables = {
        "fleet_vllm_served_model_path": str(model),
        "fleet_vllm_python": str(python),
        "vllm_kv_cache_probe_cache_dir": str(model.parent / "probe-cache"),
        "fleet_vllm_state_dir": str(model.parent / "state"),
    }
    variables.update(extra)
    # no fixture nvidia-smi on PATH, and none on this machine
    run = run_playbook(PLAYBOOK, *flags, extra_vars=variables)
    return run.rc, run.stats(), run.tasks()


def test_a_host_without_gpus_decides_for_the_cpu_platform(tmp_path, vllm_venv):
    from tests.hub import tiny_mla

    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has an nvidia-smi: it is not a host without GPUs")
    model = tmp_path / "served"
    tiny_mla.make_repo(model, "fp8kv")
    python = vllm_venv / "bin" / "python"

    # cuda asked for, and no GPU to read: the role stops, as before
    rc, _stats, tasks = play_without_gpus(model, python, fleet_vllm_platform="cuda")
    assert rc != 0 and tasks["Read the GPUs"].get("failed") is True, tasks
    # cpu with a compute capability: refused before anything runs, naming both variables
    rc, _stats, tasks = play_without_gpus(model, python, fleet_vllm_platform="cpu",
                                          vllm_kv_cache_compute_capability="12.0")
    assert rc != 0
    assert "vllm_kv_cache_compute_capability is 12.0 and fleet_vllm_platform is cpu" in tasks[
        "Check the platform settings"]["msg"]
    assert json.loads((model / "config.json").read_text())["quantization_config"]["kv_cache_scheme"]

    rc, stats, tasks = play_without_gpus(model, python)
    assert rc == 0, tasks
    assert tasks["Read the GPUs"]["gpu_info"]["count"] == 0 and not tasks["Read the GPUs"].get("failed")
    probe = tasks["Ask the installed vLLM whether a backend accepts the checkpoint's KV-cache dtype"]
    assert probe["platform"] == "cpu" and probe["compute_capability"] is None
    assert probe["kv_cache_dtype_resolved"] == "fp8_e4m3" and probe["backend_available"] is False
    line = decision(tasks)
    assert "checkpoint asks for fp8_e4m3; vLLM 0.33.0 (introspection) on the CPU platform: CPU_MLA" in line, line
    assert "compute capability" not in line
    assert "-> strip" in line and line.endswith("vLLM resolves --kv-cache-dtype auto to auto")
    assert "kv_cache_scheme" not in json.loads((model / "config.json").read_text())["quantization_config"]
    assert "kv_cache_quant_algo" not in json.loads((model / "hf_quant_config.json").read_text())["quantization"]
    assert stats["changed"] == 1

    # the rerun: the decision recorded for these inputs, nothing asked
    rc, stats, tasks = play_without_gpus(model, python)
    assert rc == 0 and stats["changed"] == 0, tasks
    assert tasks["Ask the installed vLLM whether a backend accepts the checkpoint's KV-cache dtype"].get("skipped") is True
