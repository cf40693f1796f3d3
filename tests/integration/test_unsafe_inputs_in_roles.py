"""Issue 24 point 11: a value written into a systemd unit is checked element by element. The check ran on
the repr of a list, where a newline is the two characters \\n: a list value of a hardening override wrote a
root ExecStartPost= that systemd-analyze verify accepted. Each run stops at the role's input check, naming
the element, with nothing changed (in check mode for the weights role; the server role's checks run
before its first change, as tests/integration/test_vllm_server_role.py shows)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT, run_playbook

pytestmark = [pytest.mark.integration]

PLAYBOOKS = ROOT / "tests" / "integration" / "playbooks"
ROOT_LINE = "ExecStartPost=+/bin/touch /tmp/fleet-vllm-pwned"


def failed_message(tasks):
    failed = [(name, result) for name, result in tasks if result.get("failed")]
    assert len(failed) == 1, tasks
    return failed[0]


@pytest.mark.parametrize("overrides, named", [
    ({"ProtectSystem": ["strict", "full\n" + ROOT_LINE]}, "vllm_weights_peer_hardening_overrides.ProtectSystem[1] (a newline)"),
    ({"ProtectSystem": "strict\n" + ROOT_LINE}, "vllm_weights_peer_hardening_overrides.ProtectSystem (a newline)"),
    ({"ProtectSystem": "strict\r" + ROOT_LINE}, "vllm_weights_peer_hardening_overrides.ProtectSystem (a carriage return)"),
])
def test_a_line_break_in_a_peer_hardening_override_is_refused_naming_the_element(tmp_path, overrides, named):
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[vllm_servers]\ngpu-a ansible_connection=local ansible_python_interpreter=%s ansible_become=false\n"
                     % sys.executable)
    run = run_playbook(PLAYBOOKS / "vllm_weights.yml", "-i", hosts, "--check", timeout=300, extra_vars={
        "vllm_weights_peer_hardening_overrides": overrides, "fleet_vllm_pristine_dir": str(tmp_path / "pristine"),
        "fleet_vllm_served_model_path": str(tmp_path / "served")})
    assert run.rc != 0
    name, result = failed_message(run.task_list("gpu-a"))
    assert name.endswith("Check the settings that argument specs cannot express"), name
    assert named in result["msg"] and "line break" in result["msg"], result["msg"]
    assert run.stats("gpu-a")["changed"] == 0
    assert not (tmp_path / "pristine").exists() and not Path("/tmp/fleet-vllm-pwned").exists()


@pytest.mark.parametrize("variables, named", [
    ({"vllm_server_hardening_overrides": {"ProtectSystem": ["strict", "full\n" + ROOT_LINE]}},
     "vllm_server_hardening_overrides.ProtectSystem[1] (a newline)"),
    ({"vllm_server_hardening_overrides": {"ProtectProc": "noaccess\r" + ROOT_LINE}},
     "vllm_server_hardening_overrides.ProtectProc (a carriage return)"),
])
def test_a_line_break_in_a_server_hardening_override_is_refused_naming_the_element(tmp_path, variables, named):
    extra = {"fleet_vllm_served_model_path": "/srv/models/kimi", "vllm_server_user": "fleet-vllm-test-never",
             "vllm_server_env_dir": str(tmp_path / "etc"), "fleet_vllm_state_dir": str(tmp_path / "state")}
    extra.update(variables)
    run = run_playbook(PLAYBOOKS / "vllm_server.yml", "--check", extra_vars=extra, path=[FIXTURES / "bin"],
                       env={"FLEET_VLLM_FAKE_GPUS": "rtx-pro-6000-x8"}, timeout=300)
    assert run.rc != 0
    name, result = failed_message(run.task_list())
    assert name.endswith("Check the settings that argument specs cannot express"), name
    assert named in result["msg"] and "line break" in result["msg"], result["msg"]
    assert run.stats()["changed"] == 0 and not (tmp_path / "etc").exists() and not (tmp_path / "state").exists()
