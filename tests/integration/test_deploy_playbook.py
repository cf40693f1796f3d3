"""deploy.yml resolves from a checkout and by its collection name, and the example inventory
reproduces the seed deployment's command line and NCCL environment."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, run_playbook

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
ENV = dict(os.environ, PATH=str(BIN) + os.pathsep + os.environ.get("PATH", ""))


def run(*argv, env=None):
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], cwd=ROOT, env=env or ENV,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("playbook", ["deploy.yml", "fleet.vllm.deploy", "playbooks/rollback.yml",
                                      "playbooks/verify.yml", "playbooks/diagnose.yml"])
def test_playbooks_resolve_and_parse(playbook):
    proc = run("ansible-playbook", playbook, "-i", "inventories/example", "--syntax-check")
    assert proc.returncode == 0, proc.stderr


def test_deploy_stages_everything_at_once_then_rolls_in_batches():
    proc = run("ansible-playbook", "deploy.yml", "-i", "inventories/example", "--list-tasks", "--list-hosts")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    # The first plays check the gateways' settings (issue 24, point 8) and the monitoring's (issue 22) and change
    # nothing; then the staging play; the rolling play after the gateways'.
    plays = {re.match(r"[0-9]+ \([^)]*\): (.*?)\s+TAGS:", chunk).group(1): chunk for chunk in out.split("play #")[1:]}
    check = plays["Check the fleet's gateways' settings before anything changes"]
    assert "vllm_gateway : Check the gateway settings" in check and "lb-01" in check, check
    assert list(plays).index("Check the monitoring's settings before anything changes") < list(plays).index(
        "Stage the next state of every host")
    stage = plays["Stage the next state of every host"]
    roll = plays["Roll the hosts whose staged state differs, in batches"]
    phases = ["fleet.vllm.vllm_preflight :", "fleet.vllm.vllm_weights : Plan where",
              "fleet.vllm.vllm_runtime : Install the pinned vLLM", "fleet.vllm.vllm_weights : Link the served",
              "fleet.vllm.vllm_kv_cache :", "fleet.vllm.vllm_nccl : Hand the staged NCCL", "fleet.vllm.vllm_server : Write the directories, the cleanup",
              "fleet.vllm.vllm_server : Compare the staged state"]
    positions = [stage.index(phase) for phase in phases]
    assert positions == sorted(positions), "staging phases out of order"
    # Staging switches nothing and restarts nothing; the rolling play does, on the hosts that differ.
    for word in ("Point the current link", "Copy the staged", "Start or restart"):
        assert word not in stage and word in roll, word
    assert "hosts (0)" in roll or "fleet_vllm_rolling" in roll
    for host in ("gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04"):
        assert host in stage
    for tag in ("preflight", "weights", "runtime", "kv_cache", "nccl", "server"):
        assert "%s]" % tag in out or "%s," % tag in out, tag
    deploy = (ROOT / "playbooks" / "deploy.yml").read_text()
    assert "serial" not in deploy.replace("fleet_vllm_serial", ""), "staging runs on every host at once"
    roll_play = (ROOT / "playbooks" / "roll.yml").read_text()
    assert roll_play.count("serial:") == 1 and "fleet_vllm_rolling_batch" in roll_play
    assert "max_fail_percentage: 0" in roll_play
    # Which hosts roll and the batch size (fleet_vllm_serial capped at fleet_vllm_max_down) are decided
    # in one place that every staging play imports last, not as a side effect of the server role's stage.
    rolling = (ROOT / "playbooks" / "tasks" / "rolling.yml").read_text()
    assert "groups: fleet_vllm_rolling" in rolling and "fleet_vllm_rolling_batch:" in rolling
    assert "fleet_vllm_serial | fleet.vllm.rolling_batch(max_down=fleet_vllm_max_down," in rolling
    for staging in ("deploy.yml", "rollback.yml"):
        assert "import_tasks: tasks/rolling.yml" in (ROOT / "playbooks" / staging).read_text(), staging
    assert "fleet_vllm_rolling" not in (ROOT / "roles" / "vllm_server" / "tasks" / "stage.yml").read_text()


def test_playbooks_hold_no_copies_of_role_defaults():
    """Settings reach roles through their defaults (fleet.vllm.fleet_vllm for the shared ones):
    a playbook that passes `default(<literal>)` would keep a second copy that drifts."""
    for path in sorted((ROOT / "playbooks").glob("**/*.yml")):
        text = path.read_text()
        # (An inventory without a vllm_gateways group is not a role default.)
        allowed = ("fleet_vllm_hosts | default('vllm_servers')", "fleet_vllm_max_fail_percentage | default(0)",
                   "| first | default(1)", "groups['vllm_gateways'] | default([])")
        for line in text.splitlines():
            if "default(" in line and not line.lstrip().startswith("#"):
                assert any(a in line for a in allowed), "%s: %s" % (path.name, line.strip())


def test_example_inventory_reproduces_the_seed_command_line():
    played = run_playbook("tests/integration/playbooks/example_argv.yml", "-i", "inventories/example",
                          "--limit", "gpu-node-01")
    assert played.rc == 0, played.stdout[-2000:] + played.stderr
    argv = played.tasks("gpu-node-01")["Show the argv"]["msg"]
    joined = " ".join(argv)
    assert "--tensor-parallel-size 8 --tool-call-parser kimi_k2 --reasoning-parser kimi_k2 --enable-auto-tool-choice --trust-remote-code" in joined
    # The staged venv and the served directory of (commit, venv), beside what runs: not the links.
    assert argv[:5] == ["/opt/vllm/venvs/pypi-0.33.0/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model",
                        "/srv/vllm/models/served/nvidia--Kimi-K2.5-NVFP4/variants/0123456789ab-pypi-0.33.0"]
    assert argv[argv.index("--served-model-name") + 1] == "kimi-k2.5"
    assert "--disable-log-requests" not in argv and "--api-key" not in argv
    assert "--kv-cache-dtype" not in argv, "auto must follow the checkpoint, not be forced"


def test_example_inventory_nccl_per_host():
    proc = run("ansible-inventory", "-i", "inventories/example", "--list")
    assert proc.returncode == 0, proc.stderr
    hostvars = json.loads(proc.stdout)["_meta"]["hostvars"]
    assert hostvars["gpu-node-01"]["fleet_vllm_nccl_env"] == {}
    assert hostvars["gpu-node-04"]["fleet_vllm_nccl_env"] == {"NCCL_P2P_DISABLE": "1"}
    assert hostvars["gpu-node-01"]["vllm_kv_cache_policy"] == "auto"
