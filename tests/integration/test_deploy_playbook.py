"""deploy.yml resolves from a checkout and by its collection name, and the example inventory
reproduces the seed deployment's command line and NCCL environment."""

from __future__ import annotations

import json
import os
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


def test_deploy_runs_the_pipeline_in_order_one_host_at_a_time():
    proc = run("ansible-playbook", "deploy.yml", "-i", "inventories/example", "--list-tasks", "--list-hosts")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    phases = ["fleet.vllm.vllm_preflight :", "fleet.vllm.vllm_weights : Plan where",
              "fleet.vllm.vllm_runtime :", "fleet.vllm.vllm_weights : Link the served", "fleet.vllm.vllm_kv_cache :",
              "fleet.vllm.vllm_nccl :", "fleet.vllm.vllm_server :"]
    positions = [out.index(phase) for phase in phases]
    assert positions == sorted(positions), "pipeline phases out of order"
    # Preflight and the weights for all hosts at once (nothing that serves is touched), then the rest one host at a time.
    first, second = out.split("play #2")
    assert "vllm_preflight" in first and "Plan where" in first and "vllm_runtime" not in first
    assert "Link the served" in second and "vllm_server :" in second
    for host in ("gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04"):
        assert host in out
    for tag in ("preflight", "weights", "runtime", "kv_cache", "nccl", "server"):
        assert "TAGS: [%s]" % tag in out or "%s]" % tag in out
    play = (ROOT / "playbooks" / "deploy.yml").read_text()
    assert play.count("serial:") == 1 and "serial: \"{{ fleet_vllm_serial | default(1) }}\"" in play


def test_example_inventory_reproduces_the_seed_command_line():
    played = run_playbook("tests/integration/playbooks/example_argv.yml", "-i", "inventories/example",
                          "--limit", "gpu-node-01")
    assert played.rc == 0, played.stdout[-2000:] + played.stderr
    argv = played.tasks("gpu-node-01")["Show the argv"]["msg"]
    joined = " ".join(argv)
    assert "--tensor-parallel-size 8 --tool-call-parser kimi_k2 --reasoning-parser kimi_k2 --enable-auto-tool-choice --trust-remote-code" in joined
    assert argv[:5] == ["/opt/vllm/current/bin/python", "-m", "vllm.entrypoints.openai.api_server",
                        "--model", "/srv/vllm/models/served/nvidia--Kimi-K2.5-NVFP4"]
    assert argv[argv.index("--served-model-name") + 1] == "kimi-k2.5"
    assert "--disable-log-requests" not in argv and "--api-key" not in argv
    assert "--kv-cache-dtype" not in argv, "auto must follow the checkpoint, not be forced"


def test_example_inventory_nccl_per_host():
    proc = run("ansible-inventory", "-i", "inventories/example", "--list")
    assert proc.returncode == 0, proc.stderr
    hostvars = json.loads(proc.stdout)["_meta"]["hostvars"]
    assert hostvars["gpu-node-01"]["vllm_nccl_env"] == {}
    assert hostvars["gpu-node-04"]["vllm_nccl_env"] == {"NCCL_P2P_DISABLE": "1"}
    assert hostvars["gpu-node-01"]["vllm_kv_cache_policy"] == "auto"
