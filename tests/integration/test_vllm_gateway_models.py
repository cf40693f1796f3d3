"""Several models behind one gateway (issue 26: instances of helper models beside the fleet's model): the gateway
rendered from the role's template, run by this machine's HAProxy (Debian's 2.6.12, the one the role installs), in front
of three stand-in engines on loopback (TEST FIXTURES: tests/helpers/standin_engine.py) that answer 404 to a request
naming another model than their own, as vLLM does:

- kimi-1 and kimi-2 serve the fleet's model (kimi-k2.5), embed-1 a helper model (org/embed-small), each an inventory
  host whose front door is the stand-in's port;
- the gateway must have one backend per model, check each server with a completion of its own model (a check asking
  for another model would find it DOWN: 404), and send each request to the backend of the model its body names, one
  naming none to the default model's backend; /v1/models lists both; a body whose model comes after the bytes the
  gateway reads is answered 413 and reaches no engine;
- the rolling phase's drain (the role's own drain tasks, run against this HAProxy's runtime API) finds a helper host in
  its model's backend."""

from __future__ import annotations

import csv
import http.client
import io
import json
import subprocess
import time

import pytest
import yaml

from conftest import ROOT, free_port, prerequisite, run_playbook
from tests.helpers.haproxy import HAPROXY, ask
from tests.helpers.haproxy import running as haproxy_running
from tests.helpers.standin_engine import StandInEngine

pytestmark = [
    pytest.mark.integration,
    prerequisite(HAPROXY, reason="haproxy is not installed (Debian: haproxy; tools/bootstrap.sh installs it)"),
]

PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "vllm_gateway_render.yml"
DRAIN = ROOT / "tests" / "integration" / "playbooks" / "vllm_gateway_drain.yml"
KEY = "k26-fleet.vllm-gateway-models~0123456789"
KIMI, EMBED = "kimi-k2.5", "org/embed-small"
BUFFER = 16384


def servers(sock):
    """{(backend, server): status} from show stat."""
    rows = csv.DictReader(io.StringIO(ask(sock, "show stat").lstrip("# ")))
    return {(row["pxname"], row["svname"]): row["status"] for row in rows if row["svname"] not in ("FRONTEND", "BACKEND")}


def wait_checked(sock, engines, timeout=30):
    """show stat once every engine has answered two of the gateway's check completions (HAProxy starts its servers UP,
    before any check), or at the timeout."""
    deadline = time.monotonic() + timeout
    while not all(len(engine.models) >= 2 for engine in engines.values()) and time.monotonic() < deadline:
        time.sleep(0.3)
    return servers(sock)


def request(port, method, path, body=None):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        connection.request(method, path, body=None if body is None else json.dumps(body),
                           headers={"Content-Type": "application/json", "Authorization": "Bearer " + KEY})
        response = connection.getresponse()
        return response.status, json.loads(response.read().decode() or "null")
    finally:
        connection.close()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("gateway-models")
    engines = {"kimi-1": StandInEngine(KIMI, strict_model=True), "kimi-2": StandInEngine(KIMI, strict_model=True),
               "embed-1": StandInEngine(EMBED, strict_model=True)}
    # As an inventory says it: the fleet's model in group_vars (here on each host), the helper's served name on its host.
    inventory = tmp_path / "hosts.yml"
    hosts = {name: {"vllm_gateway_address": "127.0.0.1", "vllm_gateway_frontdoor_port": engine.port,
                    "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
             for name, engine in engines.items()}
    hosts["kimi-1"]["vllm_server_served_model_name"] = KIMI
    hosts["kimi-2"]["vllm_server_served_model_name"] = KIMI
    hosts["embed-1"].update(fleet_vllm_model_repo="org/embed-small-weights", vllm_server_served_model_name=EMBED)
    port, sock = free_port(), tmp_path / "gateway.sock"
    gateways = {"gw": {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}
    # In the engines' order (a gateway's first fleet host's model is its default).
    inventory.write_text(yaml.safe_dump({"all": {"children": {"vllm_servers": {"hosts": hosts},
                                                              "vllm_gateways": {"hosts": gateways}}}}, sort_keys=False))
    config = tmp_path / "gateway.cfg"
    run = run_playbook(PLAYBOOK, "-i", inventory, extra_vars={
        "dest": str(config), "__vllm_gateway_mode": "gateway", "vllm_gateway_api_key": KEY, "vllm_gateway_port": port,
        "vllm_gateway_bind_address": "127.0.0.1", "vllm_gateway_backend_hosts": list(engines),
        "vllm_gateway_check_model": KIMI, "vllm_gateway_route_buffer_bytes": BUFFER, "vllm_gateway_check_interval": 1,
        "vllm_gateway_check_fall": 1, "vllm_gateway_check_rise": 1, "_vllm_gateway_socket": str(sock)})
    assert run.rc == 0, run.stdout[-3000:]
    checked = subprocess.run([HAPROXY, "-c", "-q", "-f", str(config)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr
    try:
        with haproxy_running(config, port):
            up = wait_checked(sock, engines)
            # The drain's socket (a role variable) and the gateway's fleet hosts, as the render had them.
            drain_vars = {"_vllm_gateway_socket": str(sock), "vllm_gateway_backend_hosts": list(engines),
                          "vllm_gateway_check_interval": 1, "vllm_gateway_check_rise": 1}
            yield dict(port=port, sock=sock, engines=engines, config=config.read_text(), up=up, inventory=inventory,
                       drain_vars=drain_vars)
    finally:
        for engine in engines.values():
            engine.close()


def sent(engines):
    """How many bodies each engine received so far."""
    return {name: len(engine.models) for name, engine in engines.items()}


def test_one_backend_per_model_each_checked_with_its_own_model(gateway):
    up = gateway["up"]
    assert up == {("fleet_vllm", "kimi-1"): "UP", ("fleet_vllm", "kimi-2"): "UP",
                  ("fleet_vllm:org:embed-small", "embed-1"): "UP"}, (up, gateway["config"])
    # The checks' completions: each engine was asked for its own model only (a 404 would have made it DOWN).
    for name, engine in gateway["engines"].items():
        asked = set(engine.models)
        assert asked == {EMBED if name == "embed-1" else KIMI}, (name, asked)


def test_each_request_goes_to_the_backend_of_the_model_it_names(gateway):
    engines = gateway["engines"]
    for model, hosts in ((EMBED, {"embed-1"}), (KIMI, {"kimi-1", "kimi-2"})):
        for dummy in range(4):
            before = sent(engines)
            status, body = request(gateway["port"], "POST", "/v1/chat/completions",
                                   {"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 1})
            assert status == 200, body
            after = sent(engines)
            got = {name for name in engines if after[name] > before[name] and engines[name].models[-1] == model}
            assert got and got <= hosts, (model, got)
    # A model no backend serves goes to the default backend, whose engine says it does not exist (vLLM's own 404).
    status, body = request(gateway["port"], "POST", "/v1/completions", {"model": "org/unknown", "prompt": "x"})
    assert status == 404 and "org/unknown" in body["message"], body


def test_a_request_naming_no_model_goes_to_the_default_models_backend(gateway):
    engines = gateway["engines"]
    before = sent(engines)
    status, body = request(gateway["port"], "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})
    assert status == 200, body
    after = sent(engines)
    assert after["embed-1"] == before["embed-1"] and sum(after.values()) == sum(before.values()) + 1


def test_the_model_list_names_every_backends_model(gateway):
    status, body = request(gateway["port"], "GET", "/v1/models")
    assert status == 200 and body["object"] == "list", body
    assert [card["id"] for card in body["data"]] == [KIMI, EMBED], body


def test_a_model_after_the_bytes_the_gateway_reads_is_refused_not_misrouted(gateway):
    engines = gateway["engines"]
    long_prompt = "x" * (2 * BUFFER)
    before = sent(engines)
    status, body = request(gateway["port"], "POST", "/v1/chat/completions",
                           {"messages": [{"role": "user", "content": long_prompt}], "model": EMBED})
    assert status == 413 and "model before messages" in body["error"], body
    assert sent(engines) == before
    # The same long body with its model first is served by the model's backend.
    status, body = request(gateway["port"], "POST", "/v1/chat/completions",
                           {"model": EMBED, "messages": [{"role": "user", "content": long_prompt}]})
    assert status == 200, body
    assert sent(engines)["embed-1"] == before["embed-1"] + 1


def test_the_drain_finds_a_helper_host_in_its_models_backend(gateway):
    run = run_playbook(DRAIN, "-i", gateway["inventory"], "--limit", "embed-1,gw", extra_vars={"state": "drain", **gateway["drain_vars"]})
    assert run.rc == 0, run.stdout[-3000:]
    assert servers(gateway["sock"])[("fleet_vllm:org:embed-small", "embed-1")] == "DRAIN", run.stdout[-6000:]
    run = run_playbook(DRAIN, "-i", gateway["inventory"], "--limit", "embed-1,gw", extra_vars={"state": "undrain", **gateway["drain_vars"]})
    assert run.rc == 0, run.stdout[-3000:]
    assert servers(gateway["sock"])[("fleet_vllm:org:embed-small", "embed-1")] == "UP"
    assert servers(gateway["sock"])[("fleet_vllm", "kimi-1")] == "UP"


@pytest.mark.parametrize("extra, named", [
    ({"vllm_gateway_default_model": "org/other"}, 'vllm_gateway_default_model is "org/other", which no fleet host'),
    ({"vllm_gateway_route_buffer_bytes": 4096}, "vllm_gateway_route_buffer_bytes is 4096"),
])
def test_a_default_no_host_serves_or_a_buffer_out_of_range_is_refused(gateway, extra, named):
    run = run_playbook(ROOT / "tests" / "integration" / "playbooks" / "vllm_gateway_check.yml", "-i", gateway["inventory"],
                       "--limit", "gw", extra_vars=dict({"vllm_gateway_api_key": KEY, "vllm_gateway_allow_plain_http": True}, **extra))
    assert run.rc != 0
    failed = [result["msg"] for play in run.out["plays"] for task in play["tasks"]
              for result in task["hosts"].values() if result.get("failed")]
    assert len(failed) == 1 and named in failed[0], failed or run.stdout[-3000:]
