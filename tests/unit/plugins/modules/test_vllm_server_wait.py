"""vllm_server_wait against a small HTTP server that imitates vLLM's /health, /v1/models and
/v1/chat/completions (a test double: it answers, it does not infer), and a refused port."""

from __future__ import annotations

import json
import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest


class FakeVllm(BaseHTTPRequestHandler):
    health = 200
    models = ["kimi"]

    def _send(self, code, body):
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self._send(self.server.health, None)
        elif self.path == "/v1/models":
            self._send(200, {"data": [{"id": m} for m in self.server.models]})

    def do_POST(self):
        self.server.posts.append(self.path)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert body["max_tokens"] == 1
        self._send(200, {"choices": [{"message": {"content": "OK"}}]})

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = HTTPServer(("127.0.0.1", 0), FakeVllm)
    httpd.health, httpd.models, httpd.posts = 200, ["kimi"], []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()


def url(httpd):
    return "http://127.0.0.1:%d" % httpd.server_address[1]


def test_ready_models_and_completion(run_module, server):
    result = run_module("vllm_server_wait", {"url": url(server), "served_model_name": "kimi", "timeout": 30}).result
    assert result["ready"] is True and result["models"] == ["kimi"] and result["completion"] == "OK", result


def test_check_mode_sends_no_completion(run_module, server):
    """Issue 14, point 13: verification in check mode sent a real completion."""
    run = run_module("vllm_server_wait", {"url": url(server), "served_model_name": "kimi", "timeout": 30}, check=True)
    assert not run.failed and run.result["ready"] is True and run.result["models"] == ["kimi"], run
    assert run.result["completion"] is None and server.posts == []
    assert run_module("vllm_server_wait", {"url": url(server), "served_model_name": "kimi"}).result["completion"] == "OK"
    assert server.posts == ["/v1/chat/completions"]


def test_missing_model_name_fails(run_module, server):
    result = run_module("vllm_server_wait", {"url": url(server), "served_model_name": "other", "timeout": 30}).result
    assert result["failed"] and "lists kimi, not other" in result["msg"]


def test_engine_dead_503_fails_fast(run_module, server):
    server.health = 503
    result = run_module("vllm_server_wait", {"url": url(server), "served_model_name": "kimi", "timeout": 600}).result
    assert result["failed"] and "503" in result["msg"] and result["elapsed"] < 30


def test_refused_counts_as_loading_until_the_timeout(run_module):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    result = run_module("vllm_server_wait", {"url": "http://127.0.0.1:%d" % port, "served_model_name": "kimi",
                                             "timeout": 3, "interval": 1}).result
    assert result["failed"] and "did not answer 200 within 3 seconds" in result["msg"], result
    assert result["elapsed"] >= 3 and result["health_status"] is None


# ---- the unit watch ----------------------------------------------------------------------------
#
# TEST DOUBLES: systemctl and journalctl below are scripts standing in for systemd, which this
# machine does not run (PID 1 is not systemd). `systemctl show UNIT --property=...` prints the
# states a crash-looping unit goes through, one per call, as systemd prints them (KEY=VALUE
# lines); journalctl prints a journal. The Molecule scenario `failures` watches a real unit.


def fake_systemd(tmp_path, states, journal):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "states.json").write_text(json.dumps(states))
    (bin_dir / "systemctl").write_text(
        "#!/usr/bin/env python3\n"
        "import json, os, sys\n"
        "here = %r\n"
        "assert sys.argv[1:3] == ['show', 'vllm.service'], sys.argv\n"
        "states = json.load(open(os.path.join(here, 'states.json')))\n"
        "count = os.path.join(here, 'calls')\n"
        "n = int(open(count).read()) if os.path.exists(count) else 0\n"
        "open(count, 'w').write(str(n + 1))\n"
        "print('\\n'.join('%%s=%%s' %% kv for kv in sorted(states[min(n, len(states) - 1)].items())))\n"
        % str(tmp_path))
    (bin_dir / "journalctl").write_text("#!/bin/sh\nprintf '%s\\n'\n" % "\\n".join(journal))
    for name in ("systemctl", "journalctl"):
        (bin_dir / name).chmod(0o755)
    return {"PATH": "%s:%s" % (bin_dir, os.environ["PATH"])}


def refused_url():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return "http://127.0.0.1:%d" % port


LOADING = {"ActiveState": "active", "SubState": "running", "Result": "success", "NRestarts": "0"}
JOURNAL = ["(EngineCore_DP0 pid=812) ValueError: No valid attention backend found for cuda",
           "vllm.service: Main process exited, code=exited, status=1/FAILURE"]


@pytest.mark.parametrize("crashed", [
    {"ActiveState": "activating", "SubState": "auto-restart", "Result": "exit-code", "NRestarts": "0"},
    {"ActiveState": "failed", "SubState": "failed", "Result": "exit-code", "NRestarts": "0"},
    {"ActiveState": "active", "SubState": "running", "Result": "success", "NRestarts": "1"},
    {"ActiveState": "inactive", "SubState": "dead", "Result": "success", "NRestarts": "0"},
], ids=["auto-restart", "failed", "restarted-since-start", "stopped"])
def test_a_crash_looping_unit_fails_fast_with_its_journal(run_module, tmp_path, crashed):
    env = fake_systemd(tmp_path, [LOADING, LOADING, crashed], JOURNAL)
    run = run_module("vllm_server_wait", {"url": refused_url(), "unit": "vllm.service", "served_model_name": "kimi",
                                          "timeout": 120, "interval": 1}, env=env)
    result = run.result
    assert result["failed"], result
    assert result["elapsed"] < 30, result  # not the 120 s timeout
    assert result["msg"].startswith("vllm.service is %s/%s (result %s, %s restarts) while the model was loading" % (
        crashed["ActiveState"], crashed["SubState"], crashed["Result"], crashed["NRestarts"])), result["msg"]
    assert result["msg"].endswith("the last lines of its journal:\n" + "\n".join(JOURNAL))
    assert result["journal"] == JOURNAL
    assert result["unit_state"] == crashed


def test_a_healthy_loading_unit_is_waited_for(run_module, tmp_path, server):
    env = fake_systemd(tmp_path, [LOADING], JOURNAL)
    run = run_module("vllm_server_wait", {"url": url(server), "unit": "vllm.service", "served_model_name": "kimi",
                                          "timeout": 30}, env=env)
    assert run.result["ready"] is True and run.result["journal"] == [], run.result
    assert run.result["unit_state"] == LOADING
