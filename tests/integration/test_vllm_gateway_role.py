"""vllm_gateway refuses bad input before anything changes: an empty key (unless the operator opts
out), a key HAProxy's configuration or a Bearer token cannot carry, a front door on vLLM's own
port. Run in check mode on the controller: each case must stop at the role's first task, so
nothing is installed or written here."""

from __future__ import annotations

import pytest

from conftest import ROOT, run_playbook

pytestmark = [pytest.mark.integration]

PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "vllm_gateway_frontdoor.yml"


def refused(**extra):
    run = run_playbook(PLAYBOOK, "--check", extra_vars=dict({"vllm_server_served_model_name": "kimi-k2.5"}, **extra),
                       timeout=300)
    assert run.rc != 0
    names = [task["task"]["name"] for task in run.out["plays"][0]["tasks"]]
    failed = [task for task in run.out["plays"][0]["tasks"] if task["hosts"]["localhost"].get("failed")]
    assert len(failed) == 1 and failed[0]["task"]["name"].endswith("Check the gateway settings that argument specs cannot express")
    assert names[-1] == failed[0]["task"]["name"], "a task ran after the refusal: %s" % names
    return failed[0]["hosts"]["localhost"]["msg"], run


def test_an_empty_key_is_refused_naming_the_variable_and_the_opt_out():
    msg, dummy = refused(vllm_server_api_key="")
    assert "vllm_server_api_key" in msg and "vllm_gateway_allow_no_key: true" in msg


@pytest.mark.parametrize("key", ['abc"def', "abc def", "abc\\def", "a=b", "abc;x"])
def test_a_key_a_bearer_token_cannot_carry_is_refused_and_not_shown(key):
    msg, run = refused(vllm_server_api_key=key)
    assert "vllm_gateway_api_key" in msg and "RFC 6750" in msg
    assert key not in run.stdout and key not in run.stderr


def test_the_front_door_on_vllms_own_port_is_refused():
    msg, dummy = refused(vllm_server_api_key="k1", vllm_server_port=8080)
    assert "vllm_gateway_frontdoor_port and vllm_gateway_engine_port" in msg
