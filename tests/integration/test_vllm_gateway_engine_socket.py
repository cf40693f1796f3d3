"""The front door in front of an engine on its Unix socket (issue 24, point 2): the role's front-door configuration
(tests/integration/playbooks/vllm_gateway_render.yml) run by this machine's HAProxy (Debian's 2.6.12) in front of a
stand-in engine (tests/helpers/standin_engine.py) listening where vLLM's --uds would.

- The front door forwards to the socket (no TCP port any local user could bind while the engine is down), asks for
  the key, and strips it: the engine behind the socket holds none, and never sees a client's key.
- Where the engine still runs on its port (started before it had a socket, until the roll restarts it; or
  fleet_vllm_engine_socket empty on purpose), the front door forwards there, with the key the engine then checks.
- Which of the two the front door writes, from what configure.yml's look found on the host."""

from __future__ import annotations

import http.client
import json
import shutil

import pytest

from conftest import ROOT, free_port, prerequisite, run_playbook, shared_tmpdir
from tests.helpers.haproxy import HAPROXY
from tests.helpers.haproxy import running as haproxy_running
from tests.helpers.standin_engine import StandInEngine
from test_vllm_gateway_key_guard import render

pytestmark = [
    pytest.mark.integration,
    prerequisite(HAPROXY, reason="haproxy is not installed (Debian: haproxy; tools/bootstrap.sh installs it)"),
]

KEY = "k24-fleet.vllm-key-guard~0123456789abcdef"


def ask(port, key=None):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = "Bearer " + key
    try:
        connection.request("POST", "/v1/chat/completions", body=json.dumps({"model": "kimi-k2.5"}), headers=headers)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def authorization(headers):
    return [value for name, value in headers.items() if name.lower() == "authorization"]


def test_the_front_door_reaches_the_engine_on_its_socket_and_strips_the_key(tmp_path):
    directory = shared_tmpdir("fleet-vllm-engine-socket-")
    try:
        path = directory / "engine.sock"
        engine = StandInEngine(unix_socket=path)
        port = free_port()
        config = render(tmp_path, vllm_gateway_frontdoor_port=port, __vllm_gateway_engine_socket=str(path))
        text = config.read_text()
        assert "server engine unix@%s\n" % path in text and "server engine 127.0.0.1:" not in text, text
        try:
            with haproxy_running(config, port):
                assert ask(port)[0] == 401
                assert ask(port, KEY + "x")[0] == 401
                assert engine.seen == [], engine.seen
                status, body = ask(port, KEY)
                assert status == 200, body
        finally:
            engine.close()
        [(method, target, headers)] = engine.seen
        assert (method, target) == ("POST", "/v1/chat/completions")
        assert authorization(headers) == [], headers
        assert KEY not in json.dumps(headers)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_an_engine_on_its_port_gets_the_key_it_checks(tmp_path):
    engine = StandInEngine()
    port = free_port()
    config = render(tmp_path, vllm_gateway_frontdoor_port=port, vllm_gateway_engine_port=engine.port)
    text = config.read_text()
    assert "server engine 127.0.0.1:%d\n" % engine.port in text and "unix@" not in text and "del-header" not in text
    try:
        with haproxy_running(config, port):
            assert ask(port, KEY)[0] == 200
    finally:
        engine.close()
    [(_method, _target, headers)] = engine.seen
    assert authorization(headers) == ["Bearer " + KEY], headers


SOCKET = "/run/fleet-vllm/vllm/engine.sock"
OTHER = "/run/fleet-vllm/vllm-b/engine.sock"
PYTHON = ["/opt/vllm/current/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m"]


@pytest.mark.parametrize("setting, running, expected", [
    (SOCKET, None, SOCKET),                                    # a new host: its engine will start on the socket
    (SOCKET, PYTHON + ["--host", "127.0.0.1", "--port", "8000"], ""),  # started before it had a socket: its port, until the roll
    (SOCKET, PYTHON + ["--uds", SOCKET], SOCKET),              # rolled onto the socket
    (OTHER, PYTHON + ["--uds", SOCKET], SOCKET),               # the setting changed: where it runs, until the roll
    ("", PYTHON + ["--uds", SOCKET], SOCKET),                  # back to the port on purpose: the socket, until the roll
    ("", None, ""),                                            # a new host, the port on purpose
    ("", PYTHON + ["--port", "8000"], ""),
    (SOCKET, PYTHON + ["--uds", "/tmp/x y.sock"], SOCKET),     # a --uds of another form is never written: the setting's
    (SOCKET, PYTHON + ["--uds"], SOCKET),
])
def test_the_front_door_follows_the_engine_as_it_runs(tmp_path, setting, running, expected):
    """roles/vllm_gateway/vars/main.yml's __vllm_gateway_engine_socket, from configure.yml's look at the loaded unit
    (host_state's exec_start: the words of its ExecStart=). The front door never forwards to a port where the engine
    does not listen (the key would go to whoever holds it), nor away from where it still listens."""
    playbook = tmp_path / "decide.yml"
    unit = {"load_state": "loaded" if running else "not-found", "exec_start": running or []}
    playbook.write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: false\n  vars_files:\n"
        "    - %s/roles/fleet_vllm/defaults/main.yml\n    - %s/roles/fleet_vllm/vars/main.yml\n"
        "    - %s/roles/vllm_gateway/defaults/main.yml\n"
        "    - %s/roles/vllm_gateway/vars/main.yml\n"
        "  tasks:\n    - ansible.builtin.debug:\n        msg: \"decided={{ __vllm_gateway_engine_socket }}=\"\n" % (ROOT, ROOT, ROOT, ROOT))
    run = run_playbook(playbook, extra_vars={"fleet_vllm_engine_socket": setting, "__vllm_gateway_mode": "frontdoor",
                                             "__vllm_gateway_engine_look": {"units": {"vllm.service": unit}}}, timeout=300)
    assert run.rc == 0, run.stdout[-3000:]
    assert "decided=%s=" % expected in run.stdout, run.stdout[-3000:]
