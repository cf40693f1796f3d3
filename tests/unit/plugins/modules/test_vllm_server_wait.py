"""vllm_server_wait against a small HTTP server that imitates vLLM's /health, /v1/models and
/v1/chat/completions (a test double: it answers, it does not infer), and a refused port."""

from __future__ import annotations

import json
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
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert body["max_tokens"] == 1
        self._send(200, {"choices": [{"message": {"content": "OK"}}]})

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = HTTPServer(("127.0.0.1", 0), FakeVllm)
    httpd.health, httpd.models = 200, ["kimi"]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()


def url(httpd):
    return "http://127.0.0.1:%d" % httpd.server_address[1]


def test_ready_models_and_completion(run_module, server):
    result = run_module("vllm_server_wait", {"url": url(server), "served_model_name": "kimi", "timeout": 30}).result
    assert result["ready"] is True and result["models"] == ["kimi"] and result["completion"] == "OK", result


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
