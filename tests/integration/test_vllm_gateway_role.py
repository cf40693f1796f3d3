"""vllm_gateway refuses bad input before anything changes: an empty key (unless the operator opts
out), a key HAProxy's configuration or a Bearer token cannot carry, a front door on vLLM's own
port. Run in check mode on the controller: each case must stop at the role's first task, so
nothing is installed or written here."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

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
    msg, dummy = refused(vllm_server_api_key="0123456789abcdef0123456789abcdef", vllm_server_port=8080, fleet_vllm_engine_socket="")
    assert "shorter than" not in msg and "vllm_gateway_frontdoor_port and vllm_gateway_engine_port" in msg, msg


def test_the_front_door_on_vllms_own_port_is_refused():
    msg, dummy = refused(vllm_server_api_key=KEY, vllm_server_port=8080, fleet_vllm_engine_socket="")
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
# A gateway that speaks TLS to its clients and to the front doors (issue 24 point 8: nothing else passes its checks).
GATEWAY_TLS = {"vllm_gateway_tls_certificate": "/etc/haproxy/tls/gateway.pem", "vllm_gateway_backend_ca_file": "/etc/haproxy/tls/ca.pem"}


# ---- issue 24 point 8: no clear text on a network hop unless the operator opts out ----------------

CHECK = "Check the gateway settings that argument specs cannot express"
PLAIN_LISTENER = "would take requests in plain HTTP on"
PLAIN_BACKENDS = "with the key to the front doors in plain HTTP"


def checked(playbook, host="localhost", **extra):
    """A check-mode run of PLAYBOOK: (the result of the role's first check on HOST, the run). The
    tasks after it may fail on this controller (nothing is installed here); they are not asked."""
    run = run_playbook(playbook, "--check", extra_vars=dict({"vllm_server_served_model_name": "kimi-k2.5",
                                                            "vllm_server_api_key": KEY, "fleet_hosts": []}, **extra),
                       timeout=300)
    results = [task["hosts"][host] for play in run.out["plays"] for task in play["tasks"]
               if task["task"]["name"].endswith(CHECK) and host in task["hosts"]]
    assert len(results) == 1, run.stdout[-3000:]
    return results[0], run


def test_a_plain_http_front_door_is_refused_naming_the_certificate_and_the_opt_out():
    msg, run = refused(vllm_server_api_key=KEY)
    assert "the front door of localhost would take requests in plain HTTP on *:8080" in msg, msg
    assert "vllm_gateway_tls_certificate" in msg and "vllm_gateway_allow_plain_http: true" in msg, msg
    assert "vllm_gateway_bind_address: 127.0.0.1" in msg, msg
    assert run.stats()["changed"] == 0


@pytest.mark.parametrize("variables", [
    {"vllm_gateway_allow_plain_http": True},                                # the operator's opt-out
    {"vllm_gateway_tls_certificate": "/etc/haproxy/tls/frontdoor.pem"},     # TLS
    {"vllm_gateway_bind_address": "127.0.0.1"},                             # loopback: no network hop
    {"vllm_gateway_bind_address": "::1"},
])
def test_a_front_door_with_tls_on_loopback_or_the_opt_out_passes_the_check(variables):
    result, dummy = checked(PLAYBOOK, **variables)
    assert not result.get("failed"), result.get("msg")


@pytest.mark.parametrize("address", ["*", "0.0.0.0", "10.0.0.5", "127.0.0.1.example", "::"])
def test_a_front_door_on_a_network_address_in_plain_http_is_refused(address):
    msg, dummy = refused(vllm_server_api_key=KEY, vllm_gateway_bind_address=address)
    assert PLAIN_LISTENER in msg and "vllm_gateway_allow_plain_http: true" in msg, msg


@pytest.mark.parametrize("variables, refusals", [
    ({}, [PLAIN_LISTENER, PLAIN_BACKENDS]),
    ({"vllm_gateway_tls_certificate": "/etc/haproxy/tls/gateway.pem"}, [PLAIN_BACKENDS]),
    ({"vllm_gateway_backend_ca_file": "/etc/haproxy/tls/ca.pem"}, [PLAIN_LISTENER]),
    ({"vllm_gateway_backend_ca_file": "/etc/haproxy/tls/ca.pem", "vllm_gateway_bind_address": "127.0.0.1"}, []),
    (GATEWAY_TLS, []),
    ({"vllm_gateway_allow_plain_http": True}, []),
])
def test_a_gateway_in_plain_http_to_its_clients_or_to_the_front_doors_is_refused_unless_opted_out(variables, refusals):
    result, run = checked(GATEWAY, **variables)
    msg = result.get("msg", "")
    assert bool(result.get("failed")) == bool(refusals), msg
    assert (PLAIN_LISTENER in msg, PLAIN_BACKENDS in msg) == (PLAIN_LISTENER in refusals, PLAIN_BACKENDS in refusals), msg
    if refusals:
        assert "vllm_gateway_allow_plain_http: true" in msg, msg
        assert ("vllm_gateway_backend_ca_file" in msg) == (PLAIN_BACKENDS in refusals), msg
        assert "the gateway localhost" in msg or "the gateway of localhost" in msg, msg
        assert run.rc != 0 and run.stats()["changed"] == 0
        # Nothing ran on the gateway after the refusal.
        names = [task["task"]["name"] for play in run.out["plays"][1:] for task in play["tasks"]]
        assert names[-1].endswith(CHECK), names


def test_deploy_stops_at_a_plain_http_gateway_before_any_fleet_host_runs_a_task(tmp_path):
    """The gateways' checks run in deploy.yml's first play: a gateway without TLS stops the run before the
    staging play starts on the fleet hosts (whose front doors are fine here)."""
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[vllm_servers]\ngpu-a ansible_connection=local ansible_python_interpreter=%s ansible_become=false\n"
                         "[vllm_gateways]\nlb-a ansible_connection=local ansible_python_interpreter=%s ansible_become=false\n"
                         % (sys.executable, sys.executable))
    run = run_playbook(ROOT / "deploy.yml", "-i", inventory, "--check", extra_vars={
        "vllm_server_served_model_name": "kimi-k2.5", "vllm_server_api_key": KEY,
        "vllm_gateway_tls_certificate": "/etc/haproxy/tls/host.pem"}, timeout=300)
    assert run.rc != 0
    failed = [(name, result) for name, result in run.task_list("lb-a") if result.get("failed")]
    assert [name for name, dummy in failed] == [CHECK], run.task_list("lb-a")
    assert PLAIN_BACKENDS in failed[0][1]["msg"] and "vllm_gateway_backend_ca_file" in failed[0][1]["msg"]
    assert run.out["plays"][0]["play"]["name"] == "Check the fleet's gateways' settings before anything changes"
    ran_on_fleet = [task["task"]["name"] for play in run.out["plays"] for task in play["tasks"] if "gpu-a" in task["hosts"]]
    assert ran_on_fleet == [], ran_on_fleet
    assert run.stats("lb-a")["changed"] == 0 and "gpu-a" not in run.out["stats"]


def gateway_checks(fleet_hosts):
    """A gateway's run in check mode, up to its checks of the fleet hosts' variables: that task's
    result per fleet host (the tasks after it may fail on this controller; they are not asked)."""
    run = run_playbook(GATEWAY, "--check", extra_vars=dict(GATEWAY_TLS, **{
        "vllm_server_served_model_name": "kimi-k2.5", "vllm_server_api_key": KEY, "fleet_hosts": fleet_hosts}),
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


EXAMPLE_CHECK = ROOT / "tests" / "integration" / "playbooks" / "vllm_gateway_check.yml"


@pytest.mark.parametrize("variables, refused", [
    ({}, False),
    # What the example held before issue 24 point 8: no certificate, no CA.
    ({"vllm_gateway_tls_certificate": "", "vllm_gateway_backend_ca_file": ""}, True),
])
def test_the_example_inventory_speaks_tls_on_every_hop(variables, refused):
    """inventories/example is what operators copy: its front doors and its gateway pass the checks with
    TLS on every hop, and the same inventory without its certificate and CA is refused on every host."""
    run = run_playbook(EXAMPLE_CHECK, "-i", ROOT / "inventories" / "example", "--check",
                       extra_vars=dict({"vault_vllm_server_api_key": "k1-example-0123456789abcdef0123456789"}, **variables), timeout=300)
    hosts = ["gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04", "gpu-node-05", "gpu-node-06", "lb-01"]
    results = {host: dict(run.task_list(host)).get(CHECK) for host in hosts}
    assert all(result is not None for result in results.values()), run.stdout[-3000:]
    for host, result in results.items():
        assert bool(result.get("failed")) == refused, (host, result.get("msg"))
        if refused:
            assert PLAIN_LISTENER in result["msg"], result["msg"]
            assert (PLAIN_BACKENDS in result["msg"]) == (host == "lb-01"), result["msg"]
    assert (run.rc != 0) == refused


def test_a_serving_group_is_one_backend_its_head_and_a_helper_model_one_of_its_own():
    """inventories/example's serving group kimi_long_context (issue 26): the gateway sends to its head, gpu-node-05, and
    not to its headless rank gpu-node-06, which serves no API; every host that serves alone is a backend, and the
    instances of the helper model (gpu-node-07, gpu-node-07-b) the backend of their model."""
    run = run_playbook(ROOT / "tests" / "integration" / "playbooks" / "example_backends.yml", "-i", ROOT / "inventories" / "example")
    assert run.rc == 0, run.stdout[-3000:]
    shown = dict(run.task_list("lb-01"))["Show the backends"]["msg"]
    assert shown == ["gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04", "gpu-node-05", "gpu-node-07", "gpu-node-07-b"]
    # Its helper model's instances (qwen_helpers) are the backend of their model; requests naming none go to Kimi's.
    backends = dict(run.task_list("lb-01"))["Show the backend of each model"]["msg"]
    assert [(b["name"], b["model"], b["servers"]) for b in backends] == [
        ("fleet_vllm", "kimi-k2.5", ["gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04", "gpu-node-05"]),
        ("fleet_vllm:qwen3-32b", "qwen3-32b", ["gpu-node-07", "gpu-node-07-b"])]
