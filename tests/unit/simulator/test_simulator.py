"""The engine simulator (tests/simulator), a TEST FIXTURE imitating vLLM's OpenAI server.

Both wheels (an old nightly that predates FP8 KV in TRITON_MLA on SM120, and 0.33.0) are built
with tests/simulator/build-wheel.py and installed with pip from a local wheelhouse into fresh
venvs, the way the vllm_runtime role installs from a site wheelhouse (``--no-index
--find-links``); the fixture nvidia-smi (8x RTX PRO 6000, compute capability 12.0) is on PATH.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from conftest import free_port

ROOT = Path(__file__).resolve().parents[3]
SIM = ROOT / "tests" / "simulator"
FIXTURES = ROOT / "tests" / "fixtures"
KIMI = FIXTURES / "models" / "kimi-k2.5-nvfp4"
OLD = "0.16.0rc2.dev313+g6f5e2a9c1"
NEW = "0.33.0"
SEED_FLAGS = ("--tensor-parallel-size", "--tool-call-parser", "--reasoning-parser", "--enable-auto-tool-choice",
              "--trust-remote-code", "--kv-cache-dtype", "--served-model-name", "--api-key")
SEED_ARGS = ["--tensor-parallel-size", "8", "--tool-call-parser", "kimi_k2", "--reasoning-parser", "kimi_k2",
             "--enable-auto-tool-choice", "--trust-remote-code", "--served-model-name", "kimi-k2.5"]
API = ["-m", "vllm.entrypoints.openai.api_server"]


def journal_line(name, pattern):
    """The first match of ``pattern`` in a stored journal excerpt, without vLLM's line prefix."""
    text = (FIXTURES / "journal" / name).read_text()
    return re.search(pattern, text, re.M).group(0)


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheelhouse")
    for version in (OLD, NEW):
        subprocess.run([sys.executable, str(SIM / "build-wheel.py"), version, str(out)], check=True, capture_output=True)
    return out


def _venv(tmp_path_factory, wheelhouse, version):
    """A venv with the simulator installed by pip, as the role installs ``vllm==<version>``."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
                    "--disable-pip-version-check", "--no-index", "--find-links", str(wheelhouse),
                    "vllm==%s" % version], check=True, capture_output=True)
    return venv


@pytest.fixture(scope="session")
def old_venv(tmp_path_factory, wheelhouse):
    return _venv(tmp_path_factory, wheelhouse, OLD)


@pytest.fixture(scope="session")
def new_venv(tmp_path_factory, wheelhouse):
    return _venv(tmp_path_factory, wheelhouse, NEW)


def sim_env(**extra):
    env = dict(os.environ)
    env.pop("VLLM_API_KEY", None)
    env.update(PATH="%s:%s" % (FIXTURES / "bin", env.get("PATH", "/usr/bin:/bin")),
               FLEET_VLLM_FAKE_GPUS="rtx-pro-6000-x8", FLEET_VLLM_SIM_LOAD_SECONDS="1", PYTHONDONTWRITEBYTECODE="1")
    env.update(extra)
    return env


def run(venv, args, **env):
    return subprocess.run([str(venv / "bin" / "python")] + API + list(args), capture_output=True, text=True,
                          env=sim_env(**env), timeout=30, cwd=str(venv), check=False)


class Server(object):
    """A started simulator: ``request(method, path, body, headers)`` -> (status, headers, body)."""

    def __init__(self, venv, model, args=(), **env):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [str(venv / "bin" / "python")] + API + [str(model), "--host", "127.0.0.1", "--port", str(self.port)] + list(args),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=sim_env(**env), cwd=str(venv))
        self.refused_while_loading = False

    def wait_ready(self, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("simulator exited %s: %s" % (self.proc.returncode, self.proc.communicate()))
            try:
                status, dummy, dummy = self.request("GET", "/health")
                if status == 200:
                    return
            except ConnectionRefusedError:
                self.refused_while_loading = True
            time.sleep(0.1)
        raise AssertionError("simulator not ready after %ss" % timeout)

    def request(self, method, path, body=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            data = json.dumps(body) if body is not None else None
            conn.request(method, path, body=data, headers=dict(headers or {}, **({"Content-Type": "application/json"} if data else {})))
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), response.read().decode("utf-8")
        finally:
            conn.close()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        # A bound for a loaded CI machine, not a speed check: the stop itself takes well under a second.
        out, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, out, err


# ---- the wheel and the flag list ----------------------------------------------------------


def test_wheel_is_complete_and_carries_the_collections_rules(wheelhouse):
    wheel = wheelhouse / ("vllm-%s-py3-none-any.whl" % OLD)
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        dist = "vllm-%s.dist-info/" % OLD
        assert {dist + "METADATA", dist + "WHEEL", dist + "RECORD", dist + "entry_points.txt"} <= names
        record = archive.read(dist + "RECORD").decode().splitlines()
        listed = {}
        for line in record:
            name, digest, size = line.rsplit(",", 2)
            listed[name] = (digest, size)
        assert set(listed) == names
        for name, (digest, size) in listed.items():
            if name == dist + "RECORD":
                assert (digest, size) == ("", "")
                continue
            data = archive.read(name)
            assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert int(size) == len(data)
        assert "Version: %s\n" % OLD in archive.read(dist + "METADATA").decode()
        assert "vllm = vllm.entrypoints.cli.main:main" in archive.read(dist + "entry_points.txt").decode()
        assert "__version__ = %r" % OLD in archive.read("vllm/__init__.py").decode()
        assert "__commit_id__ = commit_id = 'g6f5e2a9c1'" in archive.read("vllm/_version.py").decode()
        for copy, source in (("vllm/_fleet_kv_rules.py", "_kv_cache.py"), ("vllm/_fleet_support_rules.py", "_vllm_support.py")):
            original = (ROOT / "plugins" / "module_utils" / source).read_text()
            copied = archive.read(copy).decode()
            assert copied.startswith('# -*- coding: utf-8 -*-') and "TEST FIXTURE COPY" in copied
            body = original.split('"""', 1)[1]
            assert copied.endswith(body), "%s must be %s verbatim after the note" % (copy, source)
        for name in names:
            if name.endswith(".py"):
                text = archive.read(name).decode()
                docstring = text.split('"""', 2)[1]
                assert "TEST FIXTURE" in docstring, "%s must say it is a test fixture" % name


def test_flag_lists_come_from_both_real_versions():
    document = json.loads((SIM / "vllm" / "flags.json").read_text())
    assert "tools/extract-vllm-flags.py" in document["_header"]
    assert set(document["versions"]) == {"0.16.0", "0.33.0"}
    for version, entry in document["versions"].items():
        strings = {s for option in entry["options"] for s in option["option_strings"]}
        missing = [flag for flag in SEED_FLAGS if flag not in strings]
        assert not missing, "vLLM %s's list lacks %s" % (version, missing)
        tp = [o for o in entry["options"] if "--tensor-parallel-size" in o["option_strings"]][0]
        assert tp["takes_value"] is True and tp["type"] == "int"
        tool_choice = [o for o in entry["options"] if "--enable-auto-tool-choice" in o["option_strings"]][0]
        assert tool_choice["takes_value"] is False


# ---- the old build: the seed failure ------------------------------------------------------


def test_old_build_refuses_fp8_kv_mla_on_sm120_with_vllms_error(old_venv):
    result = run(old_venv, [str(KIMI)] + SEED_ARGS)
    assert result.returncode == 1, result
    expected = journal_line("attention-backend-fp8-sm120.txt", r"ValueError: No valid attention backend found.*$")
    errors = [line for line in result.stderr.splitlines() if "ValueError: No valid attention backend" in line]
    assert len(errors) == 8, "one per tensor-parallel worker"
    assert all(line.endswith("] " + expected) for line in errors), (errors[0], expected)
    assert "(APIServer pid=" in result.stderr.splitlines()[-1]
    assert result.stderr.splitlines()[-1].endswith(
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}")
    assert "Using fp8 data type to store kv cache" in result.stdout
    assert "vLLM API server version %s" % OLD in result.stdout


def test_old_build_honours_an_explicit_fp8_kv_cache_dtype(old_venv):
    result = run(old_venv, [str(FIXTURES / "models" / "bf16-kv"), "--kv-cache-dtype", "fp8"])
    assert result.returncode == 1
    assert "kv_cache_dtype=fp8, block_size=None" in result.stderr
    assert "TRITON_MLA: [kv_cache_dtype not supported]" in result.stderr


def test_old_build_serves_the_stripped_checkpoint(old_venv, run_module, tmp_path):
    model = tmp_path / "kimi"
    shutil.copytree(KIMI, model)
    strip = run_module("kv_cache_config", {"path": str(model), "state": "absent"})
    assert not strip.failed and strip.result["kv_cache_dtype_after"] == "auto", strip
    server = Server(old_venv, model, SEED_ARGS)
    try:
        server.wait_ready()
        status, dummy, body = server.request("GET", "/metrics")
        assert status == 200 and 'cache_dtype="auto"' in body
        status, dummy, body = server.request("GET", "/version")
        assert json.loads(body) == {"version": OLD}
    finally:
        rc, out, err = server.stop()
    assert rc == 0, err
    assert "Using fp8 data type" not in out
    assert "Using TRITON_MLA attention backend" in out


def test_a_sigterm_during_request_dispatch_stops_the_server(old_venv):
    """The signal handler's Terminate can land while the main thread is inside socketserver's
    dispatch of a request (starting its handler thread): it must leave serve_forever there too,
    not be swallowed by socketserver's ``except Exception`` (handle_error) and leave a server that
    ignores its SIGTERM."""
    script = (
        "import socketserver\n"
        "from vllm._simulator import Terminate\n"
        "class Server(socketserver.ThreadingTCPServer):\n"
        "    def get_request(self):\n"
        "        return object(), ('127.0.0.1', 1)\n"
        "    def verify_request(self, request, address):\n"
        "        return True\n"
        "    def process_request(self, request, address):\n"
        "        raise Terminate()\n"
        "    def shutdown_request(self, request):\n"
        "        pass\n"
        "server = Server(('127.0.0.1', 0), socketserver.BaseRequestHandler)\n"
        "try:\n"
        "    server._handle_request_noblock()\n"
        "except Terminate:\n"
        "    print('stopped')\n"
        "else:\n"
        "    print('swallowed')\n"
    )
    out = subprocess.run([str(old_venv / "bin" / "python"), "-c", script], capture_output=True, text=True, timeout=30,
                         env=sim_env(), cwd=str(old_venv), check=False)
    assert out.stdout.strip() == "stopped", out.stdout + out.stderr


def test_old_build_rejects_a_flag_only_newer_vllm_knows(old_venv):
    document = json.loads((SIM / "vllm" / "flags.json").read_text())["versions"]
    old = {s for o in document["0.16.0"]["options"] for s in o["option_strings"]}
    new_only = sorted(s for o in document["0.33.0"]["options"] for s in o["option_strings"]
                      if s.startswith("--") and s not in old and not o["takes_value"])
    assert new_only, "0.33.0 has switches 0.16.0 lacks"
    result = run(old_venv, [str(KIMI), new_only[0]])
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == "api_server.py: error: unrecognized arguments: %s" % new_only[0]


# ---- the new build --------------------------------------------------------------------------


def test_new_build_serves_the_fp8_checkpoint(new_venv):
    server = Server(new_venv, KIMI, SEED_ARGS, VLLM_API_KEY="test-key-not-secret")
    auth = {"Authorization": "Bearer test-key-not-secret"}
    try:
        server.wait_ready()
        assert server.refused_while_loading, "the port must refuse connections while the model 'loads'"
        status, dummy, body = server.request("GET", "/health")
        assert (status, body) == (200, "")
        status, dummy, body = server.request("GET", "/v1/models")
        assert (status, json.loads(body)) == (401, {"error": "Unauthorized"})
        status, dummy, body = server.request("GET", "/v1/models", headers={"Authorization": "Bearer wrong"})
        assert status == 401
        status, dummy, body = server.request("GET", "/v1/models", headers=auth)
        models = json.loads(body)
        assert status == 200 and models["object"] == "list"
        assert [(m["id"], m["object"], m["owned_by"], m["root"], m["max_model_len"]) for m in models["data"]] == [
            ("kimi-k2.5", "model", "vllm", str(KIMI), 262144)]
        status, dummy, body = server.request("GET", "/version")
        assert (status, json.loads(body)) == (200, {"version": NEW})
        status, headers, body = server.request("GET", "/metrics")
        assert status == 200 and headers["content-type"].startswith("text/plain")
        assert re.search(r'^vllm:kv_cache_usage_perc\{.*\} 0\.0$', body, re.M)
        assert re.search(r'^vllm:cache_config_info\{.*cache_dtype="fp8_e4m3".*\} 1\.0$', body, re.M)
        question = {"model": "kimi-k2.5", "messages": [{"role": "user", "content": "Say one word"}], "max_tokens": 1}
        status, dummy, body = server.request("POST", "/v1/chat/completions", question)
        assert status == 401
        status, dummy, body = server.request("POST", "/v1/chat/completions", question, auth)
        answer = json.loads(body)
        assert status == 200 and answer["object"] == "chat.completion" and answer["model"] == "kimi-k2.5"
        choice = answer["choices"][0]
        assert choice["message"]["role"] == "assistant" and len(choice["message"]["content"].split()) == 1
        assert choice["finish_reason"] == "length"
        usage = answer["usage"]
        assert usage["completion_tokens"] == 1 and usage["prompt_tokens"] > 0
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        status, dummy, again = server.request("POST", "/v1/chat/completions", question, auth)
        assert json.loads(again)["choices"][0]["message"] == choice["message"], "replies are deterministic"
        status, dummy, body = server.request("POST", "/v1/chat/completions", dict(question, model="other"), auth)
        assert status == 404 and json.loads(body)["error"]["type"] == "NotFoundError"
    finally:
        rc, out, err = server.stop()
    assert rc == 0, err
    assert "Using fp8 data type to store kv cache" in out
    assert "kv_cache_dtype=fp8_e4m3" in out
    assert "test-key-not-secret" not in out + err
    assert re.search(r"^\(APIServer pid=\d+\) INFO \d\d-\d\d \d\d:\d\d:\d\d \[api_server\.py:\d+\] ", out, re.M)


def test_api_key_flag_and_unknown_flags(new_venv):
    result = run(new_venv, [str(KIMI), "--no-such-flag"])
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == "api_server.py: error: unrecognized arguments: --no-such-flag"
    assert result.stderr.startswith("usage: api_server.py ")
    serve = subprocess.run([str(new_venv / "bin" / "vllm"), "serve", str(KIMI), "--enable-reasoning"],
                           capture_output=True, text=True, env=sim_env(), timeout=30, check=False)
    assert serve.returncode == 2
    assert serve.stderr.splitlines()[-1] == journal_line("rejected-flag.txt", r"^vllm: error: .*$")
    version = subprocess.run([str(new_venv / "bin" / "vllm"), "--version"], capture_output=True, text=True, timeout=30, check=False)
    assert version.stdout.strip() == NEW
    missing_parser = run(new_venv, [str(KIMI), "--enable-auto-tool-choice"])
    assert missing_parser.returncode == 1
    assert "--enable-auto-tool-choice requires --tool-call-parser" in missing_parser.stderr


def test_api_key_flag_guards_v1_only(new_venv):
    server = Server(new_venv, FIXTURES / "models" / "bf16-kv", ["--api-key", "k1"], FLEET_VLLM_SIM_LOAD_SECONDS="0")
    try:
        server.wait_ready()
        assert server.request("GET", "/v1/models")[0] == 401
        assert server.request("GET", "/v1/models", headers={"Authorization": "Bearer k1"})[0] == 200
        assert server.request("GET", "/metrics")[0] == 200
        assert server.request("GET", "/nowhere")[0] == 404
    finally:
        rc, dummy, err = server.stop()
    assert rc == 0, err


def test_collection_probe_reads_the_simulator(new_venv):
    """The collection's probe finds the version and checks argv against the simulator's flag
    list; the KV dtype and the backends fall back to the collection's rules and table."""
    sys.path.insert(0, str(ROOT / "collections"))
    try:
        from ansible_collections.fleet.vllm.plugins.module_utils._vllm_probe_payload import PAYLOAD
    finally:
        sys.path.pop(0)

    def probe(server_args):
        question = {"model_path": str(KIMI), "kv_cache_dtype": "auto", "backends": ["TRITON_MLA"],
                    "attention": {"use_mla": True, "head_size": 576, "dtype": "bfloat16", "capability": [12, 0]},
                    "server_args": server_args}
        proc = subprocess.run([str(new_venv / "bin" / "python"), "-c", PAYLOAD], input=json.dumps(question),
                              capture_output=True, text=True, env=sim_env(), timeout=30, check=False)
        return json.loads(proc.stdout)

    answer = probe([str(KIMI)] + SEED_ARGS)
    assert answer["vllm_version"] == NEW
    assert answer["server_args"] == {"accepted": True, "error": None}
    assert "error" in answer["kv"] and answer["backends"]["error"], "no vLLM internals: the module falls back"
    rejected = probe([str(KIMI), "--no-such-flag"])["server_args"]
    assert rejected["accepted"] is False and "unrecognized arguments: --no-such-flag" in rejected["error"]
    # a --kv-cache-dtype the parser takes but the engine would refuse at start: refused here too
    typo = probe([str(KIMI), "--kv-cache-dtype", "fp8_e4m4"])["server_args"]
    assert typo["accepted"] is False
    assert typo["error"].startswith("--kv-cache-dtype fp8_e4m4: Invalid kv_cache_dtype: 'fp8_e4m4'. Valid values are: "
                                    "['auto', 'float16', 'bfloat16', 'fp8', 'fp8_e4m3'")


def test_new_build_refuses_an_unknown_kv_cache_dtype_at_engine_start(new_venv):
    """vLLM 0.33's parser has no choices for --kv-cache-dtype; its CacheConfig refuses a typo."""
    result = run(new_venv, [str(KIMI), "--kv-cache-dtype", "fp8_e4m4"] + SEED_ARGS)
    assert result.returncode == 1, result
    assert "Value error, Invalid kv_cache_dtype: 'fp8_e4m4'. Valid values are: ['auto', 'float16'," in result.stderr


@pytest.mark.vllm
@pytest.mark.parametrize("version, simulated", [("0.16.0", OLD), ("0.33.0", NEW)])
def test_simulated_kv_cache_dtypes_are_the_real_builds(version, simulated, vllm_env, tmp_path_factory, wheelhouse):
    """The simulator's vllm.config.cache lists what the real build's CacheDType lists."""
    from conftest import _vllm_venv

    real = _vllm_venv(version)
    code = "import typing; from vllm.config.cache import CacheDType; print(list(typing.get_args(CacheDType)))"
    proc = subprocess.run([str(real / "bin" / "python"), "-c", code], capture_output=True, text=True, env=vllm_env,
                          timeout=300, check=True)
    venv = _venv(tmp_path_factory, wheelhouse, simulated)
    sim = subprocess.run([str(venv / "bin" / "python"), "-c", code],
                         capture_output=True, text=True, env=sim_env(), timeout=30, check=True)
    assert sim.stdout.strip() == proc.stdout.strip().splitlines()[-1]


def test_engine_holds_a_shared_memory_segment_while_it_serves(new_venv, tmp_path):
    """As vLLM's broadcast queue: /dev/shm/psm_<8 hex> (here a directory of the test), 0600, mapped while
    serving, removed at a clean stop."""
    shm = tmp_path / "shm"
    shm.mkdir()
    server = Server(new_venv, FIXTURES / "models" / "bf16-kv", FLEET_VLLM_SIM_SHM_DIR=str(shm))
    try:
        server.wait_ready()
        segments = list(shm.iterdir())
        assert len(segments) == 1 and re.fullmatch(r"psm_[0-9a-f]{8}", segments[0].name), segments
        assert oct(segments[0].stat().st_mode & 0o777) == "0o600"
        maps = Path("/proc/%d/maps" % server.proc.pid).read_text()
        assert str(segments[0]) in maps
    finally:
        rc, out, err = server.stop()
    assert rc == 0, err
    assert list(shm.iterdir()) == []


# ---- --uds: the server on a Unix socket -------------------------------------------------------


class UnixConnection(http.client.HTTPConnection):
    """HTTP over the Unix socket at ``path`` (the Host header says localhost)."""

    def __init__(self, path, timeout=10):
        http.client.HTTPConnection.__init__(self, "localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def unix_request(path, method, url, body=None):
    conn = UnixConnection(str(path))
    try:
        conn.request(method, url, body=json.dumps(body) if body is not None else None,
                     headers={"Content-Type": "application/json"} if body is not None else {})
        response = conn.getresponse()
        return response.status, response.read().decode("utf-8")
    finally:
        conn.close()


def test_uds_serves_on_a_unix_socket_without_a_key_and_a_second_bind_fails(new_venv, old_venv, tmp_path):
    """--uds PATH as vLLM's create_server_unix_socket: bound before the load (PATH refuses connections
    while the model loads), its mode from the umask (no chmod), --host/--port ignored, no key asked when
    none is set, no unlink: a second start on PATH (either build's parser takes --uds) fails to bind, exit 1."""
    path = tmp_path / "engine.sock"
    port = free_port()
    proc = subprocess.Popen(
        ["/bin/sh", "-c", 'umask 077 && exec "$0" "$@"', str(new_venv / "bin" / "python")] + API
        + [str(FIXTURES / "models" / "bf16-kv"), "--uds", str(path), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=sim_env(), cwd=str(new_venv))
    try:
        deadline = time.monotonic() + 20
        refused = False
        while True:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "not ready over %s" % path
            try:
                if unix_request(path, "GET", "/health") == (200, ""):
                    break
            except ConnectionRefusedError:
                refused = True
            except FileNotFoundError:
                pass
            time.sleep(0.1)
        assert refused, "the bound socket must refuse connections while the model loads"
        # A client that has its answer hangs up at once: the access log still has every request,
        # as uvicorn's (logged at the response's start). A send after the peer's close is EPIPE
        # over a Unix socket, even of an empty body: that once lost the line below.
        for dummy in range(20):
            assert unix_request(path, "GET", "/health") == (200, "")
        assert stat.S_ISSOCK(path.lstat().st_mode) and path.lstat().st_mode & 0o777 == 0o700, oct(path.lstat().st_mode)
        status, body = unix_request(path, "GET", "/v1/models")
        assert status == 200 and [m["id"] for m in json.loads(body)["data"]] == [str(FIXTURES / "models" / "bf16-kv")]
        status, body = unix_request(path, "POST", "/v1/chat/completions", CHAT)
        assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == 3
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        second = run(old_venv, [str(FIXTURES / "models" / "bf16-kv"), "--uds", str(path)])
        assert second.returncode == 1, second
        errors = second.stderr.splitlines()
        api = re.match(r"\(APIServer pid=\d+\) ", errors[-1]).group(0)
        assert errors[-4] == api + "Traceback (most recent call last):", errors
        assert errors[-3].startswith(api + '  File "') and errors[-3].endswith('_simulator.py", line 1, in create_server_unix_socket')
        assert errors[-2:] == [api + "    sock.bind(path)", api + "OSError: [Errno %d] Address already in use" % errno.EADDRINUSE]
        assert "Starting to load model" not in second.stdout, "vLLM binds before it loads"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert re.search(r"^\(APIServer pid=\d+\) INFO \S+ \S+ \[api_server\.py:\d+\] Starting vLLM server on unix:%s$"
                     % re.escape(str(path)), out, re.M), out
    assert "on http://" not in out, "--host and --port are ignored with --uds"
    assert len(re.findall(r'^\(APIServer pid=\d+\) INFO:      - "GET /health HTTP/1\.1" 200 OK$', out, re.M)) == 21, out
    assert path.exists(), "vLLM leaves its socket file behind"


# ---- what the gateway relies on: SageMaker's routes, the faults, --shutdown-timeout -------------


CHAT = {"messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 3}


def test_invocations_runs_a_chat_completion_without_the_key_as_vllm_does(new_venv):
    """vLLM 0.33.0's --api-key guards /v1, /v2, /inference and /cohere only: SageMaker's
    /invocations (and /ping) answer without it; a body no request type takes is a 400."""
    server = Server(new_venv, FIXTURES / "models" / "bf16-kv", ["--api-key", "k1"], FLEET_VLLM_SIM_LOAD_SECONDS="0")
    try:
        server.wait_ready()
        assert server.request("POST", "/v1/chat/completions", CHAT)[0] == 401
        status, dummy, body = server.request("POST", "/invocations", CHAT)
        assert status == 200, body
        assert json.loads(body)["object"] == "chat.completion"
        assert json.loads(body)["choices"][0]["finish_reason"] == "length"
        status, dummy, body = server.request("POST", "/invocations", {"nothing": 1})
        assert status == 400 and "Cannot find suitable handler" in body
        assert server.request("GET", "/ping")[0] == 200
        assert server.request("POST", "/ping")[0] == 200
        assert server.request("GET", "/v1x")[0] == 404  # not under /v1: not guarded, not a route
    finally:
        rc, dummy, err = server.stop()
    assert rc == 0, err


def test_fault_file_switches_a_running_engine_to_dead_and_hung_and_back(new_venv, tmp_path):
    fault = tmp_path / "fault"
    server = Server(new_venv, FIXTURES / "models" / "bf16-kv", FLEET_VLLM_SIM_LOAD_SECONDS="0",
                    FLEET_VLLM_SIM_FAULT_FILE=str(fault))
    try:
        server.wait_ready()
        assert server.request("POST", "/v1/chat/completions", CHAT)[0] == 200
        fault.write_text("dead\n")
        status, dummy, body = server.request("POST", "/v1/chat/completions", CHAT)
        assert status == 500 and "EngineCore encountered an issue" in body
        assert server.request("GET", "/health")[0] == 200
        fault.write_text("hung\n")
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=2)
        conn.request("POST", "/invocations", body=json.dumps(CHAT), headers={"Content-Type": "application/json"})
        with pytest.raises(socket.timeout):
            conn.getresponse()
        conn.close()
        assert server.request("GET", "/health")[0] == 200
        fault.unlink()
        assert server.request("POST", "/v1/chat/completions", CHAT)[0] == 200
    finally:
        server.proc.kill()
        server.proc.communicate(timeout=60)


RUNNING = re.compile(r'^vllm:num_requests_running\{engine="0",model_name="[^"]+"\} (\S+)$', re.M)


def requests_running(server):
    """The value of vllm:num_requests_running on the simulator's /metrics, as text ("0.0")."""
    status, dummy, body = server.request("GET", "/metrics")
    assert status == 200, body
    values = RUNNING.findall(body)
    assert len(values) == 1, body
    return values[0]


def test_a_hung_request_counts_as_running_in_the_metrics(new_venv, tmp_path):
    """vllm:num_requests_running counts the requests in flight, a hung engine's too (what the monitoring's
    FleetVllmEngineWedged reads): 0.0 when idle and after a request is answered, 1.0 while one hangs. The hung request
    sleeps in the simulator's own daemon thread; the client gives up after a few seconds and the simulator is killed."""
    fault = tmp_path / "fault"
    server = Server(new_venv, FIXTURES / "models" / "bf16-kv", FLEET_VLLM_SIM_LOAD_SECONDS="0",
                    FLEET_VLLM_SIM_FAULT_FILE=str(fault))
    outcome = []

    def hung_chat():
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        try:
            conn.request("POST", "/v1/chat/completions", body=json.dumps(CHAT), headers={"Content-Type": "application/json"})
            outcome.append(conn.getresponse().status)
        except (OSError, http.client.HTTPException) as exc:
            outcome.append(exc)
        finally:
            conn.close()

    try:
        server.wait_ready()
        assert requests_running(server) == "0.0"
        assert server.request("POST", "/v1/chat/completions", CHAT)[0] == 200
        assert requests_running(server) == "0.0"
        fault.write_text("hung\n")
        client = threading.Thread(target=hung_chat, daemon=True)
        client.start()
        deadline = time.monotonic() + 4
        while requests_running(server) != "1.0" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert requests_running(server) == "1.0"
        assert server.request("GET", "/health")[0] == 200  # /health answers all the while
        client.join(timeout=10)
        assert not client.is_alive()
        assert len(outcome) == 1 and isinstance(outcome[0], socket.timeout), outcome  # never answered
    finally:
        server.proc.kill()
        server.proc.communicate(timeout=60)


HTTP_REQUESTS = re.compile(r'^http_requests_total\{handler="([^"]+)",method="([^"]+)",status="([^"]+)"\} (\S+)$', re.M)


def test_the_api_servers_requests_are_counted_by_handler_method_and_status_as_vllm_counts_them(new_venv, tmp_path):
    """http_requests_total as vLLM's instrumentation exports it (prometheus_fastapi_instrumentator's default metric, what
    the monitoring's FleetVllmEngine5xxRate reads): by handler, method and status group; a path no route serves under
    "none"; /health, /ping, /version and /metrics not counted; an engine with the dead fault counted as 5xx while
    /health answers 200."""
    fault = tmp_path / "fault"
    server = Server(new_venv, FIXTURES / "models" / "bf16-kv", FLEET_VLLM_SIM_LOAD_SECONDS="0",
                    FLEET_VLLM_SIM_FAULT_FILE=str(fault))
    try:
        server.wait_ready()
        for dummy in range(2):
            assert server.request("POST", "/v1/chat/completions", CHAT)[0] == 200
        assert server.request("POST", "/v1/chat/completions", {"messages": "x"})[0] == 400
        assert server.request("GET", "/v1/models")[0] == 200
        assert server.request("GET", "/nowhere")[0] == 404
        for path in ("/health", "/ping", "/version", "/metrics"):
            assert server.request("GET", path)[0] == 200
        fault.write_text("dead\n")
        for dummy in range(3):
            assert server.request("POST", "/v1/chat/completions", CHAT)[0] == 500
        assert server.request("GET", "/health")[0] == 200
        status, dummy, body = server.request("GET", "/metrics")
        assert status == 200
        counted = {(handler, method, group): value for handler, method, group, value in HTTP_REQUESTS.findall(body)}
        assert counted == {("/v1/chat/completions", "POST", "2xx"): "2.0", ("/v1/chat/completions", "POST", "4xx"): "1.0",
                           ("/v1/chat/completions", "POST", "5xx"): "3.0", ("/v1/models", "GET", "2xx"): "1.0",
                           ("none", "GET", "4xx"): "1.0"}, body
        assert "# TYPE http_requests_total counter" in body
    finally:
        server.proc.kill()
        server.proc.communicate(timeout=60)


def chat(server, **fields):
    """(status, parsed body) of a chat completion with these request fields."""
    status, dummy, body = server.request("POST", "/v1/chat/completions", dict(CHAT, **fields))
    return status, json.loads(body)


def test_a_model_whose_first_token_is_eos_honours_min_tokens_and_ignore_eos_as_vllm_does(new_venv):
    """FLEET_VLLM_SIM_FIRST_TOKEN=eos: one EOS token (no text, usage 1) unless min_tokens masks EOS for
    that many tokens or ignore_eos generates on; min_tokens checked as vLLM's SamplingParams checks it."""
    server = Server(new_venv, FIXTURES / "models" / "bf16-kv", FLEET_VLLM_SIM_LOAD_SECONDS="0",
                    FLEET_VLLM_SIM_FIRST_TOKEN="eos")
    try:
        server.wait_ready()
        answers = {}
        for name, fields in (("plain", dict(max_tokens=2)), ("min2", dict(max_tokens=2, min_tokens=2)),
                             ("min1", dict(max_tokens=3, min_tokens=1)), ("ignore", dict(max_tokens=3, ignore_eos=True))):
            status, body = chat(server, **fields)
            assert status == 200, body
            choice = body["choices"][0]
            answers[name] = (choice["message"]["content"], choice["finish_reason"], body["usage"]["completion_tokens"])
        assert answers == {"plain": ("", "stop", 1), "min2": ("This is", "length", 2), "min1": ("This", "stop", 2),
                           "ignore": ("This is a", "length", 3)}
        status, body = chat(server, max_tokens=2, min_tokens=3)
        assert status == 400 and body["error"]["message"] == "min_tokens must be less than or equal to max_tokens=2, got 3."
        status, body = chat(server, max_tokens=2, min_tokens=-1)
        assert status == 400 and body["error"]["message"] == "min_tokens must be greater than or equal to 0, got -1."
    finally:
        server.proc.kill()
        server.proc.communicate(timeout=60)
    # Without it the sentence is cut to max_tokens, whatever min_tokens and ignore_eos say.
    server = Server(new_venv, FIXTURES / "models" / "bf16-kv", FLEET_VLLM_SIM_LOAD_SECONDS="0")
    try:
        server.wait_ready()
        status, body = chat(server, max_tokens=2, min_tokens=2, ignore_eos=True)
        assert (status, body["choices"][0]["message"]["content"], body["usage"]["completion_tokens"]) == (200, "This is", 2)
    finally:
        server.proc.kill()
        server.proc.communicate(timeout=60)


@pytest.mark.parametrize("eos_first", [False, True], ids=["words", "eos-first"])
def test_decode_dead_answers_the_prefills_token_and_dies_at_the_first_decode_step(new_venv, eos_first):
    """FLEET_VLLM_SIM_FAULT=decode-dead, the real CPU engine with an FP8 KV cache: max_tokens 1 -> 200, a second
    token -> 500 and dead from then on, /health 200. A model whose first token is EOS passes two tokens without
    min_tokens (only the prefill ran) and dies with it."""
    env = dict(FLEET_VLLM_SIM_LOAD_SECONDS="0", FLEET_VLLM_SIM_FAULT="decode-dead")
    if eos_first:
        env["FLEET_VLLM_SIM_FIRST_TOKEN"] = "eos"
    server = Server(new_venv, FIXTURES / "models" / "bf16-kv", **env)
    try:
        server.wait_ready()
        assert chat(server, max_tokens=1)[0] == 200
        if eos_first:
            assert chat(server, max_tokens=2)[0] == 200
        status, body = chat(server, max_tokens=2, min_tokens=2)
        assert status == 500 and "EngineCore encountered an issue" in body["error"]["message"]
        assert chat(server, max_tokens=1)[0] == 500
        assert server.request("GET", "/health")[0] == 200
    finally:
        server.proc.kill()
        out, dummy = server.proc.communicate(timeout=60)
    assert "EngineCore encountered a fatal error at the first decode step" in out


@pytest.mark.parametrize("timeout, finishes", [("5", True), ("0", False)])
def test_shutdown_timeout_lets_requests_in_flight_finish(new_venv, tmp_path, timeout, finishes):
    """A request in flight when SIGTERM arrives: with --shutdown-timeout 5 the server stops
    taking new connections and waits for it (here it never ends: the hung fault), exiting after
    the timeout; with 0 it exits at once."""
    fault = tmp_path / "fault"
    server = Server(new_venv, FIXTURES / "models" / "bf16-kv", ["--shutdown-timeout", timeout],
                    FLEET_VLLM_SIM_LOAD_SECONDS="0", FLEET_VLLM_SIM_FAULT_FILE=str(fault))
    server.wait_ready()
    fault.write_text("hung")
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("POST", "/v1/chat/completions", body=json.dumps(CHAT), headers={"Content-Type": "application/json"})
    time.sleep(0.5)
    started = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    with pytest.raises(ConnectionRefusedError):
        server.request("GET", "/health")
    out, err = server.proc.communicate(timeout=60)  # not stop(): a second SIGTERM ends the wait
    rc = server.proc.returncode
    waited = time.monotonic() - started
    conn.close()
    assert rc == 0, err
    assert "mode=%s timeout=%ss" % ("drain" if finishes else "abort", timeout) in out
    if finishes:
        assert waited >= 4.5, waited
    else:
        assert waited < 4.5, waited


@pytest.mark.parametrize("build", ["old", "new"])
def test_collection_probe_says_which_builds_have_shutdown_timeout(build, old_venv, new_venv):
    """fleet.vllm.vllm_probe's server_flags: vLLM 0.33.0's parser has --shutdown-timeout, the
    0.16 nightly's not (the flag lists come from the real parsers), so vllm_server passes it only
    to the former."""
    sys.path.insert(0, str(ROOT / "collections"))
    try:
        from ansible_collections.fleet.vllm.plugins.module_utils._vllm_probe_payload import PAYLOAD
    finally:
        sys.path.pop(0)
    venv = new_venv if build == "new" else old_venv
    question = {"server_flags": ["--shutdown-timeout", "--no-such-flag"], "server_args": [str(KIMI)]}
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", PAYLOAD], input=json.dumps(question),
                          capture_output=True, text=True, env=sim_env(), timeout=30, check=False)
    answer = json.loads(proc.stdout)
    assert answer["server_flags"] == {"--shutdown-timeout": build == "new", "--no-such-flag": False}


# ---- a serving group: one model copy across hosts (--nnodes > 1), on loopback ------------------------


GROUP_MODEL = FIXTURES / "models" / "bf16-kv"


def group_env(shm, **extra):
    """A serving group's environment: no load time, short join bounds, the workers' sockets on loopback."""
    env = {"FLEET_VLLM_SIM_LOAD_SECONDS": "0", "FLEET_VLLM_SIM_JOIN_TIMEOUT": "20", "VLLM_HOST_IP": "127.0.0.1",
           "FLEET_VLLM_SIM_SHM_DIR": str(shm)}
    env.update(extra)
    return env


def group_args(master_port, node_rank, nnodes=2, extra=()):
    return ["--nnodes", str(nnodes), "--node-rank", str(node_rank), "--master-addr", "127.0.0.1",
            "--master-port", str(master_port), "--tensor-parallel-size", "2"] + list(extra)


def start_rank(venv, master_port, shm, node_rank=1, args=(), **env):
    """A headless rank, as vLLM starts one: ``vllm serve MODEL --headless --nnodes ... --node-rank R``."""
    return subprocess.Popen([str(venv / "bin" / "vllm"), "serve", str(GROUP_MODEL), "--headless"]
                            + group_args(master_port, node_rank) + list(args),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=sim_env(**group_env(shm, **env)), cwd=str(venv))


class Output(object):
    """A running process's stdout, read line by line in a thread, so that a test can wait for a line."""

    def __init__(self, proc):
        self.proc = proc
        self.lines = []
        self.done = False
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        try:
            for line in self.proc.stdout:
                with self.cond:
                    self.lines.append(line)
                    self.cond.notify_all()
        finally:
            with self.cond:
                self.done = True
                self.cond.notify_all()

    def wait_for(self, pattern, timeout=20):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for line in self.lines:
                    found = re.search(pattern, line)
                    if found:
                        return found
                left = deadline - time.monotonic()
                if left <= 0 or self.done:
                    raise AssertionError("no line %r in %s" % (pattern, "".join(self.lines)))
                self.cond.wait(left)

    def text(self):
        self.thread.join(timeout=30)
        return "".join(self.lines)


def listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return False
    return True


def hello(port, line):
    """What the head of a serving group answers a hello line on its master port."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(line.encode("utf-8"))
        return conn.makefile("r").readline().strip()


def stop_all(*procs):
    for proc in procs:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)


def test_a_serving_groups_head_serves_once_its_rank_joined_and_dies_with_it(new_venv, tmp_path):
    """Rank 0 listens on --master-port and is not ready (its API port refuses) until rank 1 said hello; a hello
    with a rank out of range, or a second rank 1, is refused and logged, the group serves on; a SIGKILL of the
    rank kills the head's engine within seconds, exit 1, in vLLM's words."""
    shm = tmp_path / "shm"
    shm.mkdir()
    master = free_port()
    head = Server(new_venv, GROUP_MODEL, group_args(master, 0), **group_env(shm))
    rank = None
    try:
        deadline = time.monotonic() + 20
        while not listening(master):
            assert head.proc.poll() is None, head.proc.communicate()
            assert time.monotonic() < deadline, "the head does not listen on its master port"
            time.sleep(0.1)
        assert hello(master, "fleet-vllm-sim-join node_rank=7 nnodes=2 mq=-\n") == (
            "refused node_rank=7 is not a rank the head waits for (1..1)")
        assert hello(master, "fleet-vllm-sim-join node_rank=1 nnodes=3 mq=-\n") == "refused nnodes=3, the head's is 2"
        time.sleep(1)
        with pytest.raises(ConnectionRefusedError):
            head.request("GET", "/health")
        assert head.proc.poll() is None, "the head waits for its rank"
        rank = start_rank(new_venv, master, shm)
        head.wait_ready()
        assert rank.poll() is None
        deadline = time.monotonic() + 10
        while len(list(shm.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len([p for p in shm.iterdir() if re.fullmatch(r"psm_[0-9a-f]{8}", p.name)]) == 2, "the head's and the rank's"
        second = subprocess.run([str(new_venv / "bin" / "vllm"), "serve", str(GROUP_MODEL), "--headless"]
                                + group_args(master, 1), capture_output=True, text=True, timeout=60,
                                env=sim_env(**group_env(shm)), cwd=str(new_venv), check=False)
        assert second.returncode == 1, second
        assert re.search(r"^\(Worker_TP1 pid=\d+\) RuntimeError: the head of the serving group at 127\.0\.0\.1:%d refused "
                         r"node_rank=1: node_rank=1 has already joined \(from 127\.0\.0\.1:\d+\)" % master,
                         second.stderr, re.M), second.stderr
        assert head.request("GET", "/health")[0] == 200
        rank.kill()
        rank.communicate(timeout=60)
        killed = time.monotonic()
        out, err = head.proc.communicate(timeout=30)
        assert time.monotonic() - killed < 5, "the head must notice a dead rank within seconds"
    finally:
        stop_all(rank, head.proc)
    assert head.proc.returncode == 1, err
    assert "tensor_parallel_size=2, pipeline_parallel_size=1, quantization=" in out
    assert "DP group leader: node_rank=0, node_rank_within_dp=0, master_addr=127.0.0.1, mq_connect_ip=127.0.0.1 (local), " \
           "world_size=2, local_world_size=1" in out
    refusals = re.findall(r"^\(EngineCore_DP0 pid=\d+\) WARNING \S+ \S+ \[multiproc_executor\.py:\d+\] Refused a rank of "
                          r"the serving group from 127\.0\.0\.1:\d+: (.*)$", out, re.M)
    assert refusals == ["node_rank=7 is not a rank the head waits for (1..1)", "nnodes=3, the head's is 2",
                        refusals[2]] and refusals[2].startswith("node_rank=1 has already joined"), refusals
    joined = re.search(r"^\(EngineCore_DP0 pid=\d+\) INFO \S+ \S+ \[multiproc_executor\.py:\d+\] node_rank=1 joined the "
                       r"serving group from 127\.0\.0\.1:\d+ \(workers 1-1, message queue tcp://127\.0\.0\.1:\d+\); 1 of 1 "
                       r"remote nodes joined$", out, re.M)
    assert joined and joined.start() < out.index("Starting to load model") < out.index("Starting vLLM API server"), out
    assert re.search(r"^\(EngineCore_DP0 pid=\d+\) ERROR \S+ \S+ \[multiproc_executor\.py:\d+\] Worker proc VllmWorker-0 "
                     r"died unexpectedly, shutting down executor\.$", out, re.M), out
    assert re.search(r"^\(APIServer pid=\d+\) ERROR \S+ \S+ \[async_llm\.py:\d+\] vllm\.v1\.engine\.exceptions\.EngineDeadError: "
                     r"EngineCore encountered an issue\. See stack trace \(above\) for the root cause\.$", out, re.M), out
    assert out.rstrip().endswith("Finished server process [%d]" % head.proc.pid)


def test_a_headless_rank_serves_nothing_and_goes_when_its_head_goes(new_venv, tmp_path):
    """``vllm serve --headless --node-rank 1``: no API server (neither its --uds nor its --port), its workers' socket on
    VLLM_HOST_IP at a port of the system's choice; the head's SIGTERM (exit 0) ends it, exit 1, with vLLM's worker error;
    its shared-memory segment is gone."""
    shm = tmp_path / "shm"
    shm.mkdir()
    master, rank_port = free_port(), free_port()
    uds = tmp_path / "rank.sock"
    head = Server(new_venv, GROUP_MODEL, group_args(master, 0), **group_env(shm))
    rank = start_rank(new_venv, master, shm, args=["--uds", str(uds), "--port", str(rank_port)])
    lines = Output(rank)
    try:
        head.wait_ready()
        queue = lines.wait_for(r"^\(Worker_TP1 pid=\d+\) INFO \S+ \S+ \[shm_broadcast\.py:\d+\] vLLM message queue "
                               r"communication handle: Handle\(local_reader_ranks=\[\], buffer_handle=None, "
                               r"local_subscribe_addr=None, remote_subscribe_addr='tcp://127\.0\.0\.1:(\d+)', "
                               r"remote_addr_ipv6=False\)$")
        assert listening(int(queue.group(1))), "the rank's workers listen on VLLM_HOST_IP"
        lines.wait_for(r"\[default_loader\.py:\d+\] Loading weights took")
        assert not uds.exists() and not listening(rank_port), "a headless rank has no API server"
        assert rank.poll() is None
        rc, out, err = head.stop()
        stopped = time.monotonic()
        rank.wait(timeout=30)
        assert time.monotonic() - stopped < 5, "the rank must notice its head's end within seconds"
    finally:
        stop_all(rank, head.proc)
    assert rc == 0, err
    text, errors = lines.text(), rank.stderr.read()
    assert rank.returncode == 1, errors
    assert re.search(r"^INFO \S+ \S+ \[serve\.py:\d+\] Launching vLLM \(v%s\) headless multiproc executor, with head node "
                     r"address 127\.0\.0\.1:%d for torch\.distributed process group\.$" % (re.escape(NEW), master), text, re.M)
    assert "rank 1 in world size 2 is assigned as DP rank 0, PP rank 0, TP rank 1, EP rank 1" in text
    assert "vLLM API server version" not in text and "(APIServer" not in text, "no API server in a headless rank"
    assert re.search(r"^\(Worker_TP1 pid=\d+\) ERROR \S+ \S+ \[multiproc_executor\.py:\d+\] torch\.distributed\."
                     r"DistNetworkError: Failed to recv, got 0 bytes\. Connection was likely closed\. Did the remote server "
                     r"shutdown or crash\?", text, re.M), text
    assert re.search(r"^ERROR \S+ \S+ \[multiproc_executor\.py:\d+\] Worker proc VllmWorker-1 died unexpectedly, shutting "
                     r"down executor\.$", text, re.M), text
    assert list(shm.iterdir()) == [], "both removed their segments"


def test_a_headless_rank_stops_with_exit_0_on_sigterm_and_its_head_dies(new_venv, tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    master = free_port()
    head = Server(new_venv, GROUP_MODEL, group_args(master, 0), **group_env(shm))
    rank = start_rank(new_venv, master, shm)
    try:
        head.wait_ready()
        time.sleep(0.5)
        rank.send_signal(signal.SIGTERM)
        out, err = rank.communicate(timeout=30)
        dummy, head_err = head.proc.communicate(timeout=30)
    finally:
        stop_all(rank, head.proc)
    assert rank.returncode == 0, err
    assert "died unexpectedly" not in out
    assert head.proc.returncode == 1, head_err
    assert list(shm.iterdir()) == []


@pytest.mark.parametrize("entry, args, message", [
    ("api", ["--node-rank", "2"], "(APIServer pid=PID) AssertionError: node_rank=2 must be less than nnodes=2."),
    ("serve", ["--node-rank", "2", "--headless"], "AssertionError: node_rank=2 must be less than nnodes=2."),
    ("api", ["--tensor-parallel-size", "3"], "(APIServer pid=PID) AssertionError: world_size=3 must be divisible by nnodes=2."),
    ("api", ["--tensor-parallel-size", "2", "--data-parallel-size", "3", "--nnodes", "4"],
     "(APIServer pid=PID) AssertionError: world_size=6 must be divisible by nnodes=4."),
    ("api", ["--node-rank", "-1"], "(APIServer pid=PID) pydantic_core._pydantic_core.ValidationError: 1 validation error "
     "for ParallelConfig\n(APIServer pid=PID) node_rank\n(APIServer pid=PID)   Input should be greater than or equal to 0 "
     "[type=greater_than_equal, input_value=-1, input_type=int]"),
    ("api", ["--distributed-executor-backend", "ray"], "(APIServer pid=PID) pydantic_core._pydantic_core.ValidationError: "
     "1 validation error for ParallelConfig\n(APIServer pid=PID)   Value error, nnodes > 1 can only be set when "
     "distributed executor backend is mp, uni or external_launcher."),
], ids=["rank-out-of-range", "headless-rank-out-of-range", "world-not-divisible", "dp-counts", "negative-rank", "ray"])
def test_vllms_refusals_of_a_serving_groups_flags(new_venv, entry, args, message):
    base = ["--nnodes", "2", "--tensor-parallel-size", "2"]
    if entry == "api":
        result = run(new_venv, [str(GROUP_MODEL)] + base + args)
    else:
        result = subprocess.run([str(new_venv / "bin" / "vllm"), "serve", str(GROUP_MODEL)] + base + args,
                                capture_output=True, text=True, env=sim_env(), timeout=30, check=False)
    assert result.returncode == 1, result
    errors = re.sub(r"pid=\d+", "pid=PID", result.stderr)
    assert errors.endswith(message + "\n"), errors
    assert "Starting to load model" not in result.stdout


def test_a_serving_groups_join_bounds_and_the_starts_vllm_cannot_serve(new_venv, tmp_path):
    """FLEET_VLLM_SIM_JOIN_TIMEOUT bounds the head's wait for its ranks (torch's TCPStore error) and a rank's tries to
    reach its head (torch's client error); ``vllm serve --headless --node-rank 0`` waits for a front end and fails as
    vLLM's headless data-parallel engine does; an API server on rank 1 (``python -m ...api_server --headless``, whose
    --headless vLLM ignores) joins, loads, and fails at the engine's first call, and its head dies with it."""
    shm = tmp_path / "shm"
    shm.mkdir()
    master = free_port()
    env = sim_env(**group_env(shm, FLEET_VLLM_SIM_JOIN_TIMEOUT="1"))
    started = time.monotonic()
    alone = subprocess.run([str(new_venv / "bin" / "python")] + API + [str(GROUP_MODEL), "--port", str(free_port())]
                           + group_args(master, 0), capture_output=True, text=True, env=env, timeout=60,
                           cwd=str(new_venv), check=False)
    assert alone.returncode == 1 and time.monotonic() - started < 15, alone
    assert re.search(r"^\(Worker_TP0 pid=\d+\) torch\.distributed\.DistStoreError: Timed out after 2 seconds waiting for "
                     r"clients\. 1/2 clients joined\.$", alone.stderr, re.M), alone.stderr
    assert alone.stderr.splitlines()[-1].endswith(
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}")
    assert "Starting vLLM API server" not in alone.stdout
    lost = subprocess.run([str(new_venv / "bin" / "vllm"), "serve", str(GROUP_MODEL), "--headless"] + group_args(master, 1),
                          capture_output=True, text=True, env=env, timeout=60, cwd=str(new_venv), check=False)
    assert lost.returncode == 1, lost
    assert lost.stderr.splitlines()[-1].endswith(
        "torch.distributed.DistNetworkError: The client socket has timed out after 1000ms while trying to connect to "
        "(127.0.0.1, %d)." % master), lost.stderr
    headless_head = subprocess.run([str(new_venv / "bin" / "vllm"), "serve", str(GROUP_MODEL), "--headless"]
                                   + group_args(master, 0), capture_output=True, text=True, env=env, timeout=60,
                                   cwd=str(new_venv), check=False)
    assert headless_head.returncode == 1, headless_head
    assert "Launching 1 data parallel engine(s) in headless mode, with head node address tcp://127.0.0.1:29550." \
        in headless_head.stdout
    assert headless_head.stderr.splitlines()[-1].endswith(
        "RuntimeError: Did not receive response from front-end process within 5 minutes")
    head = Server(new_venv, GROUP_MODEL, group_args(master, 0), **group_env(shm))
    try:
        follower = subprocess.run([str(new_venv / "bin" / "python")] + API + [str(GROUP_MODEL), "--headless",
                                                                              "--port", str(free_port())]
                                  + group_args(master, 1), capture_output=True, text=True, timeout=60,
                                  env=sim_env(**group_env(shm)), cwd=str(new_venv), check=False)
        out, err = head.proc.communicate(timeout=30)
    finally:
        stop_all(head.proc)
    assert follower.returncode == 1, follower
    assert "vLLM API server version" in follower.stdout, "--headless changes nothing for the api_server module"
    assert follower.stderr.splitlines()[-2:] == [
        "(EngineCore_DP0 pid=%d) AssertionError: collective_rpc should not be called on follower node" % (follower_pid(follower) + 1),
        "(APIServer pid=%d) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"
        % follower_pid(follower)], follower.stderr
    assert head.proc.returncode == 1, err
    assert "Worker proc VllmWorker-0 died unexpectedly" in out


def follower_pid(result):
    return int(re.search(r"^\(APIServer pid=(\d+)\)", result.stdout, re.M).group(1))


# ---- instances: several engines on one machine, each with its GPUs (CUDA_VISIBLE_DEVICES) and its ports (VLLM_PORT) --


INSTANCE_MODEL = FIXTURES / "models" / "no-quantization"
# The rtx-pro-6000-x8 scenario's GPUs (tests/fixtures/nvidia-smi/rtx-pro-6000-x8/query-gpu.csv), by index.
X8 = ["GPU-2c3e7876-b74a-57b3-94a4-1b4d866fd427", "GPU-0d2261a5-0a7f-5a5d-92a9-a81b02a1a4e6",
      "GPU-b692f93d-b6f3-5fed-b2f0-eb5dda32afb6", "GPU-0856f067-669f-59e6-a511-70cade1abdc0",
      "GPU-9bb2460f-3aa9-59ed-962e-8ecd72cfc046", "GPU-ae7facef-2874-54c6-8a16-decae44ba7fd",
      "GPU-fb4ce638-25b5-5192-ac85-30c12e36d414", "GPU-962a9b24-55da-5a51-b225-b0ace23f6d01"]
WORLD_SIZE_ERROR = ("(APIServer pid=PID) pydantic_core._pydantic_core.ValidationError: 1 validation error for "
                    "ParallelConfig\n(APIServer pid=PID)   Value error, World size (%d) is larger than the number of "
                    "available GPUs (%d) in this node. If this is intentional and you are using:\n(APIServer pid=PID) "
                    "- ray, set '--distributed-executor-backend ray'.\n(APIServer pid=PID) - multiprocessing, set "
                    "'--nnodes' appropriately.\n")


def visible_line(stdout):
    return re.search(r"^\(APIServer pid=\d+\) INFO [0-9: -]+ \[cuda\.py:\d+\] (Visible GPUs: .*)$", stdout, re.M).group(1)


def seen(value, *gpus, machine=8):
    """The simulator's line for CUDA_VISIBLE_DEVICES ``value`` (None: unset) and the rtx-pro-6000-x8 indexes ``gpus``."""
    setting = "CUDA_VISIBLE_DEVICES unset" if value is None else "CUDA_VISIBLE_DEVICES=%s" % value
    devices = ", ".join("cuda:%d=%s (GPU %d)" % (number, X8[index], index) for number, index in enumerate(gpus))
    return "Visible GPUs: %d of %d (%s): %s (test simulator)" % (len(gpus), machine, setting, devices or "none")


def free_ports(count):
    """``count`` consecutive TCP ports nothing listens on now (the first of them)."""
    for dummy in range(50):
        first = free_port()
        if first + count > 65535:
            continue
        try:
            for port in range(first, first + count):
                with socket.socket() as probe:
                    probe.bind(("", port))
        except OSError:
            continue
        return first
    raise AssertionError("no %d consecutive free ports" % count)


def test_an_instance_sees_the_gpus_its_uuids_name_in_their_order_and_serves_on_them(new_venv):
    """CUDA_VISIBLE_DEVICES with a subset of the machine's GPU UUIDs (one given as a prefix, as CUDA takes one): the
    engine sees those, in the list's order, logs them, and serves with tensor parallelism over all of them."""
    value = ",".join([X8[5], X8[3][:12], X8[6]])
    server = Server(new_venv, INSTANCE_MODEL, ["--tensor-parallel-size", "3"], CUDA_VISIBLE_DEVICES=value)
    try:
        server.wait_ready()
    finally:
        rc, out, err = server.stop()
    assert rc == 0, err
    assert visible_line(out) == seen(value, 5, 3, 6)
    assert "tensor_parallel_size=3" in out


@pytest.mark.parametrize("value, gpus", [
    (",".join([X8[2], "GPU-00000000-0000-0000-0000-000000000000", X8[4]]), [2]),  # ends at the unknown UUID
    (",".join([X8[2], "0", X8[4]]), [2]),                                         # ends at the first entry not GPU-
    (",".join([X8[2], X8[2]]), []),                                               # a UUID twice: no device
    ("GPU-", []),                                                                 # a prefix of every GPU: ambiguous
], ids=["unknown-uuid", "index-among-uuids", "uuid-twice", "ambiguous-prefix"])
def test_cuda_visible_devices_ends_at_the_first_uuid_cuda_cannot_resolve(new_venv, value, gpus):
    """CUDA enumerates the devices before the first entry it cannot resolve; more tensor-parallel workers than that
    is vLLM's refusal (ParallelConfig), with vLLM's words, before the engine starts."""
    result = run(new_venv, [str(INSTANCE_MODEL), "--tensor-parallel-size", "2"], CUDA_VISIBLE_DEVICES=value)
    assert result.returncode == 1, result
    assert visible_line(result.stdout) == seen(value, *gpus)
    assert re.sub(r"pid=\d+", "pid=PID", result.stderr).endswith(WORLD_SIZE_ERROR % (2, len(gpus))), result.stderr
    assert "Initializing a V1 LLM engine" not in result.stdout


@pytest.mark.parametrize("value, gpus", [
    ("7,2", [7, 2]),
    (" 4 , 1", [4, 1]),      # blanks around an index are skipped
    ("3gpu,5", [3, 5]),      # an entry is read as strtoul reads it
    ("0,9,1", [0]),          # cut at the first index the machine does not have
    ("1,-1,2", [1]),         # ends at a negative entry
    ("6,x,2", [6]),          # ends at an entry that is no number
    ("1,2,1", []),           # an index twice: no device
    ("", []),                # set and empty: no device
    (None, list(range(8))),  # unset: every GPU
], ids=["order", "blanks", "strtoul", "past-the-end", "negative", "not-a-number", "twice", "empty", "unset"])
def test_cuda_visible_devices_by_index_as_cuda_reads_it(new_venv, value, gpus):
    """An index list, as torch counts it for vLLM (torch.cuda._parse_visible_devices, which reads CUDA's rules):
    world size 8 on what it leaves is refused with the count in vLLM's message, or starts where 8 are visible."""
    env = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
    result = run(new_venv, [str(INSTANCE_MODEL), "--tensor-parallel-size", "4", "--pipeline-parallel-size", "2"],
                 FLEET_VLLM_SIM_LOAD_SECONDS="0", FLEET_VLLM_SIM_FAULT="exit", **env)
    assert result.returncode == 1, result
    assert visible_line(result.stdout) == seen(value, *gpus)
    if len(gpus) == 8:  # it starts (and dies at the fault "exit", after the load)
        assert "Initializing a V1 LLM engine" in result.stdout and "Starting to load model" in result.stdout
    else:
        assert re.sub(r"pid=\d+", "pid=PID", result.stderr).endswith(WORLD_SIZE_ERROR % (8, len(gpus))), result.stderr


def test_an_engine_without_a_visible_gpu_fails_as_torch_does(new_venv):
    """No visible GPU with one worker: torch's "No CUDA GPUs are available" where the worker takes its GPU (vLLM's
    platform, read from NVML, which ignores CUDA_VISIBLE_DEVICES, is still CUDA)."""
    result = run(new_venv, [str(INSTANCE_MODEL)], CUDA_VISIBLE_DEVICES="GPU-ffffffff")
    assert result.returncode == 1, result
    assert visible_line(result.stdout) == seen("GPU-ffffffff")
    assert result.stderr.splitlines()[-2:] == [
        "(EngineCore_DP0 pid=%d) RuntimeError: No CUDA GPUs are available" % (follower_pid(result) + 1),
        "(APIServer pid=%d) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"
        % follower_pid(result)], result.stderr
    assert "Starting to load model" not in result.stdout


def test_the_first_visible_gpu_or_mig_device_picks_the_attention_backend(old_venv, tmp_path):
    """A machine of an SM 12.0 GPU and an SM 9.0 GPU with a MIG device (nvidia-smi -L lists it under its GPU): with
    the first visible, the old build refuses FP8 KV on MLA (SM 12.0); with the second, or its MIG device (the first
    MIG entry: CUDA enumerates one), FLASHMLA takes it (Hopper)."""
    tool = tmp_path / "bin" / "nvidia-smi"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n"
                    "if [ \"$1\" = -L ]; then\n"
                    "  echo 'GPU 0: NVIDIA RTX PRO 6000 Blackwell Server Edition (UUID: GPU-aaaa1111-0000-5000-8000-000000000000)'\n"
                    "  echo 'GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbb2222-0000-5000-8000-000000000000)'\n"
                    "  echo '  MIG 3g.40gb     Device  0: (UUID: MIG-cccc3333-0000-5000-8000-000000000000)'\n"
                    "  exit 0\nfi\n"
                    "echo '0, GPU-aaaa1111-0000-5000-8000-000000000000, 12.0'\n"
                    "echo '1, GPU-bbbb2222-0000-5000-8000-000000000000, 9.0'\n")
    tool.chmod(0o755)
    path = "%s:%s" % (tool.parent, os.environ.get("PATH", "/usr/bin:/bin"))
    kimi = [str(KIMI), "--trust-remote-code"]  # MLA with an FP8 KV cache
    refused = run(old_venv, kimi, PATH=path, CUDA_VISIBLE_DEVICES="0")
    assert refused.returncode == 1 and "ValueError: No valid attention backend found" in refused.stderr, refused
    for value, device in (("1", "GPU-bbbb2222-0000-5000-8000-000000000000 (GPU 1)"),
                          ("MIG-cccc3333,MIG-ffff", "MIG-cccc3333-0000-5000-8000-000000000000 (GPU 1)")):
        result = run(old_venv, kimi, PATH=path, CUDA_VISIBLE_DEVICES=value, FLEET_VLLM_SIM_FAULT="exit",
                     FLEET_VLLM_SIM_LOAD_SECONDS="0")
        assert visible_line(result.stdout) == "Visible GPUs: 1 of 2 (CUDA_VISIBLE_DEVICES=%s): cuda:0=%s (test simulator)" \
            % (value, device), result.stdout
        assert "Using FLASHMLA attention backend" in result.stdout, result
    unknown = run(old_venv, kimi, PATH=path, CUDA_VISIBLE_DEVICES="MIG-ffff,MIG-cccc3333")
    assert visible_line(unknown.stdout).endswith("(CUDA_VISIBLE_DEVICES=MIG-ffff,MIG-cccc3333): none (test simulator)")
    assert unknown.stderr.splitlines()[-2].endswith("RuntimeError: No CUDA GPUs are available"), unknown.stderr


def test_vllm_port_the_first_free_port_from_it_holds_the_rendezvous_of_a_build_before_the_file_store(old_venv):
    """The old build (before vLLM #50999): the executor takes the first port from VLLM_PORT up that an IPv4 socket
    binds (one taken: the next, with vLLM's line), and the first worker's TCPStore listens there, on every address,
    while the engine runs; the URI names VLLM_HOST_IP (one worker). Without VLLM_PORT: a port of the kernel's choice."""
    first = free_ports(3)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", first))
        taken.listen(1)
        server = Server(old_venv, INSTANCE_MODEL, VLLM_PORT=str(first), VLLM_HOST_IP="127.0.0.1")
        try:
            server.wait_ready()
            assert listening(first + 1)
            held = subprocess.run(["ss", "-Htln", "sport = :%d" % (first + 1)], capture_output=True, text=True,
                                  check=False).stdout if shutil.which("ss") else ""
        finally:
            rc, out, err = server.stop()
    assert rc == 0, err
    assert re.search(r"^\(EngineCore_DP0 pid=\d+\) INFO .* \[network_utils\.py:187\] Port %d is already in use, trying "
                     r"port %d$" % (first, first + 1), out, re.M), out
    assert re.search(r"^\(Worker_TP0 pid=\d+\) INFO .* \[parallel_state\.py:\d+\] world_size=1 rank=0 local_rank=0 "
                     r"distributed_init_method=tcp://127\.0\.0\.1:%d backend=nccl$" % (first + 1), out, re.M), out
    if held:
        assert held.split()[3] in ("*:%d" % (first + 1), "[::]:%d" % (first + 1), "0.0.0.0:%d" % (first + 1)), held
    assert not listening(first + 1), "the store closes with the engine"
    server = Server(old_venv, INSTANCE_MODEL, ["--tensor-parallel-size", "2"])
    try:
        server.wait_ready()
    finally:
        rc, out, err = server.stop()
    assert rc == 0, err
    found = re.search(r"distributed_init_method=tcp://127\.0\.0\.1:(\d+) backend=nccl$", out, re.M)  # two: loopback
    assert found and int(found.group(1)) > 0 and "already in use" not in out, out


def test_vllm_port_reaches_no_socket_on_a_build_with_the_file_store(new_venv):
    """0.33.0 (after vLLM #50999): a single host's rendezvous is a FileStore (file://$TMPDIR/vllm_dist_<hex>): no port
    is taken from VLLM_PORT, nothing listens there."""
    first = free_ports(1)
    server = Server(new_venv, INSTANCE_MODEL, ["--tensor-parallel-size", "2"], VLLM_PORT=str(first))
    try:
        server.wait_ready()
        assert not listening(first)
    finally:
        rc, out, err = server.stop()
    assert rc == 0, err
    assert re.search(r"^\(Worker_TP0 pid=\d+\) INFO .* world_size=2 rank=0 local_rank=0 distributed_init_method="
                     r"file:///\S+/vllm_dist_[0-9a-f]{32} backend=nccl$", out, re.M), out


@pytest.mark.parametrize("build, value, message", [
    ("old", "29500a", "ValueError: VLLM_PORT '29500a' must be a valid integer"),
    ("new", "abc", "ValueError: VLLM_PORT 'abc' must be a valid integer"),
    ("new", "tcp://10.0.0.1:29500", "ValueError: VLLM_PORT 'tcp://10.0.0.1:29500' appears to be a URI. This may be "
     "caused by a Kubernetes service discovery issue,check the warning in: "
     "https://docs.vllm.ai/en/latest/configuration/env_vars.html"),
], ids=["old", "new", "new-uri"])
def test_a_vllm_port_that_is_no_integer_fails_the_start_with_vllms_words(old_venv, new_venv, build, value, message):
    """vllm/envs.py get_vllm_port's ValueError, where the build reads VLLM_PORT: the old one in the executor, before
    the load (get_open_port), 0.33.0 at the end of the worker's start, after it (envs.enable_envs_cache)."""
    venv = old_venv if build == "old" else new_venv
    result = run(venv, [str(INSTANCE_MODEL), "--tensor-parallel-size", "2"], VLLM_PORT=value,
                 FLEET_VLLM_SIM_LOAD_SECONDS="0")
    assert result.returncode == 1, result
    lines = re.sub(r"pid=\d+", "pid=PID", result.stderr).splitlines()
    if build == "old":
        assert lines[-2:] == ["(EngineCore_DP0 pid=PID) " + message, "(APIServer pid=PID) RuntimeError: Engine core "
                              "initialization failed. See root cause above. Failed core proc(s): {}"], lines
        assert "Starting to load model" not in result.stdout
    else:
        assert "(Worker_TP0 pid=PID) " + message in lines, lines
        assert lines[-2].endswith("Exception: WorkerProc initialization failed due to an exception in a background "
                                  "process. See stack trace for root cause."), lines
        assert "Loading weights took" in result.stdout
