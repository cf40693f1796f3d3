"""What vllm_server_wait and vllm_diagnose read of a vLLM service (plugins/module_utils/_units.py):
the commands for systemd and its journal, and HTTP requests to a real server on 127.0.0.1 (a test
double of vLLM's API server: it answers as the test says, it does not infer)."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils._units import (
    C_LOCALE, Answer, headers, journal_argv, parse_properties, request, run_c, show_argv,
)


class FakeModule(object):
    """What run_c needs of an AnsibleModule: run_command, recorded."""

    def __init__(self, answer=(0, "out", "err")):
        self.calls = []
        self.answer = answer

    def run_command(self, argv, **kwargs):
        self.calls.append((argv, kwargs))
        return self.answer


def test_commands_run_in_the_c_locale_whatever_bytes_they_print():
    module = FakeModule((3, "o", "e"))
    assert run_c(module, ["systemctl", "show"]) == (3, "o", "e")
    assert module.calls == [(["systemctl", "show"], dict(environ_update=C_LOCALE, errors="surrogate_or_replace"))]
    assert C_LOCALE == {"LANG": "C", "LC_ALL": "C", "LC_MESSAGES": "C"}


def test_the_commands_for_the_unit_and_its_journal():
    assert show_argv("/bin/systemctl", "vllm.service", ("ActiveState", "NRestarts")) == [
        "/bin/systemctl", "show", "vllm.service", "-p", "ActiveState,NRestarts", "--no-pager"]
    assert journal_argv("/bin/journalctl", "vllm.service", 250) == [
        "/bin/journalctl", "-u", "vllm.service", "-n", "250", "--no-pager", "-o", "cat"]


def test_properties_are_read_as_systemd_prints_them():
    text = "ActiveState=active\nActiveEnterTimestamp=\nExecStart={ path=/x ; argv[]=/x --a=b }\nnot a property\n"
    assert parse_properties(text) == {"ActiveState": "active", "ActiveEnterTimestamp": "",
                                      "ExecStart": "{ path=/x ; argv[]=/x --a=b }"}
    assert parse_properties("") == {}


def test_headers_carry_the_key_and_the_type_of_a_body():
    assert headers(None, False) == {"Accept": "application/json"}
    assert headers("", True) == {"Accept": "application/json", "Content-Type": "application/json"}
    assert headers("sk-1", True) == {"Accept": "application/json", "Authorization": "Bearer sk-1",
                                     "Content-Type": "application/json"}


# ---- HTTP against a server on 127.0.0.1 -------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    def _send(self, code, data, extra=()):
        self.send_response(code)
        for key, value in extra:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.server.seen.append(dict(method="GET", path=self.path, headers=dict(self.headers)))
        if self.path == "/health":
            self._send(200, b"")
        elif self.path == "/v1/models":
            self._send(200, b'{"data": [{"id": "kimi"}]}')
        elif self.path == "/moved":
            self._send(302, b"", [("Location", "/health")])
        elif self.path == "/hang-up":
            self.close_connection = True  # no status line at all
        else:
            self._send(404, b'{"detail": "Not Found"}')

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append(dict(method="POST", path=self.path, headers=dict(self.headers), body=body))
        self._send(500, b"engine dead")

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.seen = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def base(httpd):
    return "http://127.0.0.1:%d" % httpd.server_address[1]


def test_a_get_answers_with_its_status_and_body(server):
    answer = request(base(server) + "/v1/models", timeout=5)
    assert (answer.status, answer.body, answer.reason, answer.timed_out, answer.http_error) == (
        200, b'{"data": [{"id": "kimi"}]}', None, False, False)
    assert answer.json() == {"data": [{"id": "kimi"}]} and 0 <= answer.seconds < 5
    seen = server.seen[0]
    assert (seen["method"], seen["path"], seen["headers"].get("Accept")) == ("GET", "/v1/models", "application/json")
    assert "Authorization" not in seen["headers"] and "Content-Type" not in seen["headers"]


def test_a_post_sends_json_with_the_key_and_keeps_an_errors_body(server):
    answer = request(base(server) + "/v1/chat/completions", {"model": "kimi", "max_tokens": 2}, "sk-1", 5)
    assert (answer.status, answer.body, answer.reason, answer.timed_out, answer.http_error) == (
        500, b"engine dead", "Internal Server Error", False, True)
    assert answer.json() is None  # not JSON
    seen = server.seen[0]
    assert (seen["method"], seen["body"]) == ("POST", {"model": "kimi", "max_tokens": 2})
    assert seen["headers"]["Authorization"] == "Bearer sk-1" and seen["headers"]["Content-Type"] == "application/json"


def test_an_http_error_with_a_json_body(server):
    answer = request(base(server) + "/nowhere", timeout=5)
    assert (answer.status, answer.reason, answer.http_error, answer.json()) == (404, "Not Found", True, {"detail": "Not Found"})


def test_options_go_to_open_url(server):
    """follow_redirects none: a redirect is the answer (vllm_diagnose does not follow one)."""
    answer = request(base(server) + "/moved", timeout=5, follow_redirects="none")
    assert (answer.status, answer.reason, answer.http_error) == (302, "Found", True)
    followed = request(base(server) + "/moved", timeout=5)
    assert (followed.status, followed.reason) == (200, None)


def test_a_refused_connection_has_no_status():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    answer = request("http://127.0.0.1:%d/health" % port, timeout=5)
    assert (answer.status, answer.body, answer.timed_out, answer.http_error) == (None, b"", False, False)
    assert "refused" in answer.reason.lower(), answer.reason


def test_a_server_that_does_not_answer_in_time_timed_out():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)  # the connection is taken, nothing is ever answered
        answer = request("http://127.0.0.1:%d/v1/chat/completions" % sock.getsockname()[1], {"model": "kimi"}, timeout=1)
    assert (answer.status, answer.timed_out, answer.http_error) == (None, True, False)
    assert answer.reason == "timed out" and answer.seconds >= 1


def test_a_server_that_hangs_up_says_so(server):
    answer = request(base(server) + "/hang-up", timeout=5)
    assert (answer.status, answer.timed_out, answer.http_error) == (None, False, False)
    assert "closed connection without response" in answer.reason, answer.reason


def test_an_empty_body_is_no_json():
    assert Answer(200, b"", None, False, 0.1).json() is None
    assert Answer(200, b"[1]", None, False, 0.1).json() == [1]
