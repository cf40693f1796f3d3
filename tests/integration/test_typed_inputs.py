"""A wrongly typed variable stops deploy.yml (and the other playbooks) before any change, with a
message naming it - whichever play or entry point reads it, the rolling phase's included - and an
old name of a shared setting is read as the new one, for every role, with a deprecation warning.

ansible-core checks a role's argument spec only for the entry point called, when it is called:
before fleet.vllm.check_inputs, a non-numeric vllm_server_max_model_len went through `| int` to 0,
dropped --max-model-len from the unit and restarted the host (issue 25). The runs are in check
mode, and what ran is read back: only fleet.vllm.fleet_vllm's checks, nothing changed."""

from __future__ import annotations

import re
import sys

import pytest

from conftest import ROOT, run_playbook

pytestmark = pytest.mark.integration

FLEET_VLLM_TASKS = {"Check that the old names set agree with each other", "Set the new names from the old ones",
                    "Check the type of every variable set for a role of the collection",
                    "Check the shared settings that argument specs cannot express"}


def inventory(tmp_path):
    path = tmp_path / "hosts.ini"
    path.write_text("[vllm_servers]\ngpu-a ansible_connection=local ansible_python_interpreter=%s ansible_become=false\n"
                    % sys.executable)
    return path


CASES = [
    # (playbook, variables, the variable named, the play whose entry point reads it)
    ("deploy.yml", {"vllm_server_max_model_len": "128k"}, "vllm_server_max_model_len"),   # server stage
    ("deploy.yml", {"vllm_server_port": "eighty"}, "vllm_server_port"),
    ("deploy.yml", {"fleet_vllm_nccl_env": [1, 2]}, "fleet_vllm_nccl_env"),
    ("deploy.yml", {"vllm_gateway_drain_timeout": "soon"}, "vllm_gateway_drain_timeout"),  # rolling phase only
    ("deploy.yml", {"vllm_runtime_source": "nighty"}, "vllm_runtime_source"),              # not one of the choices
    ("deploy.yml", {"vllm_weights_peer_port": [873]}, "vllm_weights_peer_port"),
    ("deploy.yml", {"fleet_vllm_trust_remote_code": "maybe"}, "fleet_vllm_trust_remote_code"),
    ("deploy.yml", {"fleet_vllm_remote_code_sha256": ["abc"]}, "fleet_vllm_remote_code_sha256"),
    # an old name, typed wrongly, is caught under the name it now sets
    ("deploy.yml", {"vllm_server_tensor_parallel_size": "eight"}, "fleet_vllm_tensor_parallel_size"),
    ("playbooks/rollback.yml", {"vllm_runtime_keep": "two"}, "vllm_runtime_keep"),
    ("playbooks/verify.yml", {"vllm_server_verify": "perhaps"}, "vllm_server_verify"),
    ("playbooks/diagnose.yml", {"vllm_server_port": "x"}, "vllm_server_port"),
]


@pytest.mark.parametrize("playbook,variables,named", CASES, ids=["%s-%s" % (c[0], sorted(c[1])[0]) for c in CASES])
def test_a_wrongly_typed_variable_stops_the_run_before_any_change_naming_it(tmp_path, playbook, variables, named):
    run = run_playbook(ROOT / playbook, "-i", inventory(tmp_path), "--check", extra_vars=variables, timeout=300)
    assert run.rc != 0, run.stdout[-2000:]
    # Every play's tasks on the host (deploy.yml's first play, the gateways' checks, has no task on it).
    ran = [task for play in range(len(run.out["plays"])) for task in run.task_list("gpu-a", play)]
    failed = [(name, result) for name, result in ran if result.get("failed")]
    assert len(failed) == 1, ran
    name, result = failed[0]
    assert re.search(r"\b%s\b" % named, result["msg"]), result
    # Nothing but the shared role's checks ran before it (and the include_role of verify.yml and
    # diagnose.yml that brings them): no task of any role that changes a host.
    shared_spec = {t for t, dummy in ran if t.startswith("Validating arguments against arg spec 'main' - The settings")}
    includes = {t for t, r in ran if r.get("action") == "ansible.builtin.include_role" and not r.get("failed")}
    assert {task for task, dummy in ran} - FLEET_VLLM_TASKS - shared_spec - includes <= {name}, ran
    assert run.stats("gpu-a")["changed"] == 0


def show(tmp_path, variables):
    run = run_playbook(ROOT / "tests" / "integration" / "playbooks" / "renamed_settings.yml", "-i", inventory(tmp_path),
                       extra_vars=variables, timeout=300)
    return run, run.tasks("gpu-a")


def test_an_old_name_is_read_as_the_new_one_for_every_role_with_a_warning(tmp_path):
    """The issue's case: vllm_runtime_base_dir moved the venvs but not the fleet_vllm_python the
    server and the KV-cache roles fall back to. Now it sets fleet_vllm_runtime_dir, which both follow."""
    run, tasks = show(tmp_path, {"vllm_runtime_base_dir": "/srv/venvs", "vllm_kv_cache_platform": "cpu"})
    assert run.rc == 0, run.stdout[-2000:]
    assert tasks["Show them"]["msg"] == {"platform": "cpu", "runtime_dir": "/srv/venvs",
                                         "python": "/srv/venvs/current/bin/python"}
    warned = " ".join(run.stderr.split())
    for old, new in (("vllm_runtime_base_dir", "fleet_vllm_runtime_dir"), ("vllm_kv_cache_platform", "fleet_vllm_platform")):
        assert "%s is renamed %s, which every role of fleet.vllm reads: set %s instead" % (old, new, new) in warned, warned
    # The values are not shown (an old name may hold a token).
    assert "censored" in str(tasks["Set the new names from the old ones"])


def test_two_old_names_of_one_setting_that_disagree_stop_the_run(tmp_path):
    run, tasks = show(tmp_path, {"vllm_server_platform": "cpu", "vllm_preflight_platform": "cuda"})
    assert run.rc != 0 and "Show them" not in tasks
    assert ("vllm_preflight_platform and vllm_server_platform are both set, to different values, and both are old "
            "names of fleet_vllm_platform: set fleet_vllm_platform only") in " ".join((run.stdout + run.stderr).split())


def test_the_new_names_need_no_warning(tmp_path):
    run, tasks = show(tmp_path, {"fleet_vllm_runtime_dir": "/srv/venvs"})
    assert run.rc == 0 and tasks["Show them"]["msg"]["python"] == "/srv/venvs/current/bin/python"
    assert "is renamed" not in run.stderr
