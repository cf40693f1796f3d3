"""vllm_server decides --safetensors-load-strategy as the KV-cache dtype is decided (issue 23 point 4):
from what the staged vLLM's own parser takes (the real vLLM 0.33.0 and 0.16.0, asked by
fleet.vllm.vllm_probe) and the file system the model's files are on (fleet.vllm.host_state's
storage), with the reason in the output; a value the parser does not take is refused before
anything changes, naming the variable. The role's stage tasks run in check mode on local inventory
hosts (this machine has no systemd as PID 1): nothing is created either way."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT, run_cases

from ansible_collections.fleet.vllm.plugins.filter.load_strategy import load_strategy
from ansible_collections.fleet.vllm.plugins.module_utils._load_strategy import FLAG, storage

pytestmark = [pytest.mark.integration, pytest.mark.vllm]
REPORT = "Report the load strategy"


def launcher(directory, venv):
    """A python the service user (daemon) can reach, which runs the venv's: the role refuses a python its service
    user cannot reach, and the venvs live under root's 0700 home."""
    path = directory / venv.name / "bin" / "python"
    path.parent.mkdir(parents=True)
    path.write_text('#!/bin/sh\nexec %s "$@"\n' % (venv / "bin" / "python"))
    path.chmod(0o755)
    return path


# Stands in for systemctl on this machine, which has no systemd as PID 1: the stage tasks' look asks
# `systemctl show UNIT --property=...` for the service, and it answers as systemd 252 does for a unit it
# has never loaded.
SYSTEMCTL = """#!/bin/sh
[ "$1" = show ] || { echo "test stand-in systemctl: only show" >&2; exit 1; }
printf 'ActiveState=inactive\\nSubState=dead\\nResult=success\\nUnitFileState=\\nLoadState=not-found\\n'
printf 'NeedDaemonReload=no\\nInvocationID=\\nExecMainStartTimestampMonotonic=0\\n'
"""


@pytest.fixture(scope="module")
def staged(vllm_venv, vllm_venv_old):
    """One check-mode run of the role's stage tasks: case-0 auto with 0.33.0, case-1 prefetch with 0.16.0 (whose
    parser takes any string and documents lazy, eager, torchao), case-2 default with 0.33.0. In a directory others
    may pass through (pytest's own are 0700), as the service user must reach the model."""
    work = Path(tempfile.mkdtemp(prefix="fleet-vllm-load-strategy-"))
    try:
        os.chmod(work, 0o755)
        model = work / "served"
        model.mkdir()
        (model / "config.json").write_text("{}")
        (model / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 4096)
        for path in (model, model / "config.json", model / "model-00001-of-00001.safetensors"):
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        common = {"fleet_vllm_served_model_path": str(model), "fleet_vllm_models_root": str(work),
                  "vllm_server_user": "daemon", "vllm_server_group": "daemon",
                  "vllm_server_env_dir": str(work / "etc"), "fleet_vllm_state_dir": str(work / "state"),
                  "fleet_vllm_runtime_dir": str(work / "runtime"), "vllm_server_probe_cache_dir": str(work / "cache"),
                  "fleet_vllm_platform": "cpu"}
        new, old = str(launcher(work, vllm_venv)), str(launcher(work, vllm_venv_old))
        (work / "bin").mkdir()
        (work / "bin" / "systemctl").write_text(SYSTEMCTL)
        (work / "bin" / "systemctl").chmod(0o755)
        cases = [{"fleet_vllm_python": new, "vllm_server_load_strategy": "auto"},
                 {"fleet_vllm_python": old, "vllm_server_load_strategy": "prefetch"},
                 {"fleet_vllm_python": new, "vllm_server_load_strategy": "default"}]
        run = run_cases(ROOT / "tests" / "integration" / "playbooks" / "vllm_server_stage.yml", cases, work, common,
                        args=["--check"], timeout=900, path=[work / "bin"])
        yield run, model, work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_auto_is_decided_from_the_real_parser_and_the_file_system_and_reported(staged, vllm_venv):
    run, model, work = staged
    tasks = run.tasks("case-0")
    probe = tasks["Check the command line with the installed vLLM's own parser, and ask what it takes"]
    # vLLM 0.33.0's parser (tests/unit/plugins/module_utils/test_load_strategy.py asks it directly)
    assert sorted(probe["server_flag_choices"][FLAG]["choices"]) == ["eager", "lazy", "prefetch", "torchao"], probe
    expected = load_strategy("auto", choices=probe["server_flag_choices"][FLAG], storage=storage(str(model)),
                             build="vLLM 0.33.0 (%s)" % (work / vllm_venv.name / "bin" / "python"))
    look = tasks["Look at the venv's python, the staged files, the GPU device nodes and the service account"]
    # The look names the mount the kernel lists for the model's file, as /proc/self/mountinfo does for this process.
    with open("/proc/self/mountinfo") as handle:
        mounts = {line.split(" ")[4]: line.split(" - ", 1)[1].split(" ")[0] for line in handle}
    assert look["storage"]["mount_point"] in mounts and look["storage"]["fs_type"] == mounts[look["storage"]["mount_point"]]
    assert look["storage"]["safetensors_files"] == 1 and look["storage"]["safetensors_bytes"] == 4096
    msg = tasks[REPORT]["msg"]
    assert msg == "%s: %s" % (" ".join(expected["argv"]) or "no %s" % FLAG, expected["reason"]), msg
    assert ("the models' file system (%s)" % look["storage"]["fs_type"]) in msg
    # The unit this run would stage carries exactly those words after the command line.
    unit = tasks["Write the directories, the cleanup run before each start, the staged systemd unit and secrets"]
    exec_start = [line for line in json.dumps(unit).split("\\n") if line.startswith("ExecStart=")]
    assert exec_start and (" ".join(expected["argv"]) in exec_start[0] if expected["argv"] else FLAG not in exec_start[0])


def test_a_value_the_staged_parser_does_not_take_is_refused_before_anything_changes(staged):
    run, model, work = staged
    stats, tasks = run.stats("case-1"), run.task_list("case-1")
    assert stats["failures"] == 1 and stats["changed"] == 0, (stats, tasks)
    name, failed = [(n, r) for n, r in tasks if r.get("failed")][0]
    assert name == "Refuse a load strategy the staged vLLM does not take"
    assert failed["msg"].startswith("vllm_server_load_strategy is prefetch, which vLLM 0.16.0")
    assert "takes lazy, eager, torchao" in failed["msg"] and "Nothing was changed." in failed["msg"]
    ran = [n for n, dummy in tasks]
    assert not any(n.startswith(("Create", "Write")) for n in ran), ran
    assert not (work / "etc").exists() and not (work / "state").exists()


def test_default_leaves_the_option_out(staged):
    run, model, work = staged
    assert run.tasks("case-2")[REPORT]["msg"].startswith(
        "no %s: vllm_server_load_strategy is default" % FLAG), run.tasks("case-2")[REPORT]
