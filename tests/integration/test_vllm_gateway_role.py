"""vllm_gateway refuses bad input before anything changes: an empty key (unless the operator opts
out), a key HAProxy's configuration or a Bearer token cannot carry, a front door on vLLM's own
port. Run in check mode on the controller: each case must stop at the role's first task, so
nothing is installed or written here."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from conftest import ROOT, run_playbook

from ansible_collections.fleet.vllm.plugins.module_utils._failures import PROBE_MAX_TOKENS, probe_request

pytestmark = [pytest.mark.integration]

PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "vllm_gateway_frontdoor.yml"
# A key the checks accept: RFC 6750 characters, 32 or more of them.
KEY = "k1-fleet.vllm-gateway-role~0123456789"


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


# Issue 24 point 10: the front doors hold the key's unsalted SHA-256; a short key is found from it, or by guessing.
@pytest.mark.parametrize("key", ["Zq9x-short", "fleet-vllm-demo-key", "0123456789abcdef0123456789abcde"])
def test_a_key_shorter_than_32_characters_is_refused_and_not_shown(key):
    msg, run = refused(vllm_server_api_key=key)
    assert "vllm_gateway_api_key (by default vllm_server_api_key) is shorter than 32 characters" in msg, msg
    assert "openssl rand -hex 32" in msg
    assert key not in run.stdout and key not in run.stderr


def test_a_key_of_32_characters_passes_the_length_check():
    """The check after it fails instead (the front door on vLLM's own port): the key passed."""
    msg, dummy = refused(vllm_server_api_key="0123456789abcdef0123456789abcdef", vllm_server_port=8080)
    assert "shorter than" not in msg and "vllm_gateway_frontdoor_port and vllm_gateway_engine_port" in msg, msg


def test_the_front_door_on_vllms_own_port_is_refused():
    msg, dummy = refused(vllm_server_api_key=KEY, vllm_server_port=8080)
    assert "vllm_gateway_frontdoor_port and vllm_gateway_engine_port" in msg


# Issue 24 point 11: every value haproxy.cfg.j2 writes, each element of a list on its own, is one word of HAProxy's
# configuration. A newline in vllm_gateway_bind_address wrote "http-request allow" before the key check (haproxy -c
# accepted it, /invocations answered without a key); the next attack on the same sink is any other value it writes.
@pytest.mark.parametrize("variables, named", [
    ({"vllm_gateway_bind_address": "*:8080\n    http-request allow"}, "vllm_gateway_bind_address (a newline)"),
    ({"vllm_gateway_bind_address": "127.0.0.1\r\n    http-request allow"}, "vllm_gateway_bind_address (a carriage return)"),
    ({"vllm_gateway_bind_address": "* # all"}, "vllm_gateway_bind_address (a blank)"),
    ({"vllm_gateway_tls_certificate": "/etc/haproxy/site.pem\n    http-request allow"},
     "vllm_gateway_tls_certificate (a newline)"),
    ({"vllm_gateway_paths": ["/v1/models", "/v1/chat/completions\r"]}, "vllm_gateway_paths[1] (a carriage return)"),
    ({"vllm_gateway_paths": ["/v1/models\n    http-request allow"]}, "vllm_gateway_paths[0] (a newline)"),
    ({"vllm_gateway_check_model": "kimi\n"}, "vllm_gateway_check_model (a newline)"),
])
def test_a_value_that_would_break_a_line_of_haproxys_configuration_is_refused(variables, named):
    msg, run = refused(vllm_server_api_key=KEY, **variables)
    assert named in msg and "HAProxy's configuration" in msg, msg


@pytest.mark.parametrize("variables", [
    {"vllm_gateway_tarpit_after": -1},
    {"vllm_gateway_tarpit_period": 0},
    {"vllm_gateway_tarpit_timeout": 0},
])
def test_a_tarpit_out_of_range_is_refused(variables):
    msg, dummy = refused(vllm_server_api_key=KEY, **variables)
    assert "vllm_gateway_tarpit_after must be 0 (no tarpit) or more" in msg, msg


GATEWAY = ROOT / "tests" / "integration" / "playbooks" / "vllm_gateway_gateway.yml"
HOST_CHECK = "Check the fleet hosts' addresses and TLS names that the gateway's server lines write"


def gateway_checks(fleet_hosts):
    """A gateway's run in check mode, up to its checks of the fleet hosts' variables: that task's
    result per fleet host (the tasks after it may fail on this controller; they are not asked)."""
    run = run_playbook(GATEWAY, "--check", extra_vars={
        "vllm_server_served_model_name": "kimi-k2.5", "vllm_server_api_key": KEY, "fleet_hosts": fleet_hosts},
        timeout=300)
    tasks = [task for play in run.out["plays"] for task in play["tasks"]]
    checks = [task for task in tasks if task["task"]["name"].endswith(HOST_CHECK)]
    assert len(checks) == 1, [task["task"]["name"] for task in tasks]
    return {item["item"]: item for item in checks[0]["hosts"]["localhost"]["results"]}, run


def test_fleet_hosts_that_set_no_address_or_name_pass_the_gateways_check():
    """The regression the rehearsal of this check met: a map(attribute=..., default=...) over
    hostvars failed on a fleet host that sets neither vllm_gateway_address nor a TLS name."""
    results, dummy = gateway_checks([{"name": "fleet-a", "vars": {}}, {"name": "fleet-b", "vars": {}}])
    assert sorted(results) == ["fleet-a", "fleet-b"]
    assert not any(result.get("failed") for result in results.values()), results


@pytest.mark.parametrize("variables, named", [
    ({"vllm_gateway_address": "10.0.0.1:8080\n    http-request allow"}, "vllm_gateway_address (a newline)"),
    ({"vllm_gateway_backend_tls_name": "fleet-a.example verify none"}, "vllm_gateway_backend_tls_name (a blank)"),
])
def test_a_fleet_hosts_value_that_would_break_a_server_line_is_refused(variables, named):
    results, run = gateway_checks([{"name": "fleet-a", "vars": variables}, {"name": "fleet-b", "vars": {}}])
    assert results["fleet-a"].get("failed"), results
    assert named in results["fleet-a"]["msg"] and "host variables of fleet-a" in results["fleet-a"]["msg"]
    assert not results["fleet-b"].get("failed"), results
    assert run.rc != 0


# ---- the gateways' completion check: the collection's one readiness probe --------------------

RENDER = ROOT / "tests" / "integration" / "playbooks" / "vllm_gateway_render.yml"


def test_the_gateways_check_body_is_the_readiness_probe(tmp_path):
    """Issue 27, point 1: the body HAProxy sends is probe_request()'s JSON (max_tokens, and vLLM's
    min_tokens and ignore_eos, which force the decode step when the model's first token is EOS),
    rendered from the role's own template and variables, and a configuration HAProxy accepts."""
    config = tmp_path / "haproxy.cfg"
    run = run_playbook(RENDER, extra_vars={
        "dest": str(config), "__vllm_gateway_mode": "gateway", "vllm_gateway_api_key": KEY,
        "vllm_gateway_check_model": "kimi-k2.5", "vllm_gateway_backend_hosts": [],
        "_vllm_gateway_socket": str(tmp_path / "admin.sock")}, timeout=300)
    assert run.rc == 0, run.stdout[-3000:]
    sends = [line.strip() for line in config.read_text().splitlines()
             if line.strip().startswith("http-check send meth POST uri /v1/chat/completions")]
    assert len(sends) == 1, sends
    match = re.search(r" body '([^']*)'$", sends[0])
    assert match, sends[0]
    body = json.loads(match.group(1))
    assert body == probe_request("kimi-k2.5")
    assert body["min_tokens"] == body["max_tokens"] == PROBE_MAX_TOKENS and body["ignore_eos"] is True
    haproxy = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin")
    if haproxy:
        checked = subprocess.run([haproxy, "-c", "-q", "-f", str(config)], capture_output=True, text=True, check=False)
        assert checked.returncode == 0, checked.stderr


def test_a_check_model_that_is_not_a_name_is_refused_naming_the_filter(tmp_path):
    run = run_playbook(RENDER, extra_vars={
        "dest": str(tmp_path / "haproxy.cfg"), "__vllm_gateway_mode": "gateway", "vllm_gateway_api_key": KEY,
        "vllm_gateway_check_model": "", "vllm_gateway_backend_hosts": []}, timeout=300)
    assert run.rc != 0
    assert "fleet.vllm.probe_body: the probe's model (the served model name) must be a non-empty string" in run.stdout
    assert not (tmp_path / "haproxy.cfg").exists()
