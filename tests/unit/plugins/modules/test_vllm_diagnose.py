"""fleet.vllm.vllm_diagnose run as Ansible runs a module: real files in tmp_path, a real HTTP
server on 127.0.0.1, and stand-ins for systemctl/journalctl where the machine has no systemd."""

from __future__ import annotations

import errno
import json
import os
import pwd
import socket
import struct
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT, free_port, snapshot

from ansible_collections.fleet.vllm.plugins.module_utils._readiness import probe_request
from tests.helpers.standin_engine import UnixHTTPServer

JOURNAL = FIXTURES / "journal"
ME = pwd.getpwuid(os.geteuid()).pw_name
KEYS = {"changed", "service", "findings", "shm_leftovers", "model_check", "endpoint", "journal_tail", "healthy", "msg"}
API_KEY = "sk-fleet-test-9f3c1e77a2"


def journal(name):
    return (JOURNAL / name).read_text(encoding="utf-8")


def ids(run):
    return [finding["id"] for finding in run.result["findings"]]


def only(run, fid):
    matching = [finding for finding in run.result["findings"] if finding["id"] == fid]
    assert len(matching) == 1, run
    return matching[0]


# ---- safetensors files -----------------------------------------------------------------------

ITEMSIZE = {"BF16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1}


def write_safetensors(path, tensors, cut=0):
    """A safetensors file as the Rust writer lays it out: 8-byte little-endian header length,
    the JSON header padded with spaces to 8 bytes, the tensors' bytes. ``cut`` drops that many
    bytes from the end (a download killed before the end). Returns the whole file's size."""
    header = {"__metadata__": {"format": "pt"}}
    position = 0
    for name, (dtype, shape) in tensors.items():
        count = 1
        for dim in shape:
            count *= dim
        size = count * ITEMSIZE[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [position, position + size]}
        position += size
    blob = json.dumps(header, separators=(",", ":")).encode("utf-8")
    blob += b" " * (-len(blob) % 8)
    data = struct.pack("<Q", len(blob)) + blob + bytes(range(256)) * (position // 256) + bytes(position % 256)
    Path(path).write_bytes(data[:len(data) - cut])
    return len(data)


SHARD_TENSORS = [
    {"model.layers.0.self_attn.kv_a_proj_with_mqa.weight": ("BF16", [576, 64]), "model.embed_tokens.weight": ("BF16", [32, 64])},
    {"model.layers.1.mlp.experts.0.down_proj.weight": ("U8", [64, 32]),
     "model.layers.1.mlp.experts.0.down_proj.weight_scale": ("F8_E4M3", [64, 2])},
    {"model.layers.2.input_layernorm.weight": ("BF16", [64])},
    {"model.norm.weight": ("BF16", [64])},
    {"lm_head.weight": ("BF16", [32, 64])},
]


def make_model(directory, broken=True):
    """A checkpoint with an index over five shards: 00001 whole, and with ``broken`` 00002 cut
    short by 100 bytes, 00003 missing, 00004 empty, 00005 a link to a file that is gone."""
    directory.mkdir()
    names = ["model-%05d-of-00005.safetensors" % (number + 1) for number in range(len(SHARD_TENSORS))]
    weight_map = {}
    sizes = {}
    for name, tensors in zip(names, SHARD_TENSORS):
        weight_map.update((tensor, name) for tensor in tensors)
        sizes[name] = write_safetensors(directory / name, tensors)
    (directory / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": sum(sizes.values())}, "weight_map": weight_map}, indent=2), encoding="utf-8")
    if broken:
        write_safetensors(directory / names[1], SHARD_TENSORS[1], cut=100)
        (directory / names[2]).unlink()
        (directory / names[3]).write_bytes(b"")
        (directory / names[4]).unlink()
        (directory / names[4]).symlink_to("../pristine/" + names[4])
    return names, sizes


# ---- stand-ins for systemctl and journalctl ----------------------------------------------------

SHOW_FAILED = """LoadState=loaded
ActiveState=activating
SubState=auto-restart
Result=exit-code
ExecMainStatus=1
NRestarts=4
ActiveEnterTimestamp=
"""
SHOW_ACTIVE = """LoadState=loaded
ActiveState=active
SubState=running
Result=success
ExecMainStatus=0
NRestarts=0
ActiveEnterTimestamp=Sun 2026-11-29 18:00:02 UTC
"""
# What systemctl show prints for a unit that does not exist (rc 0).
SHOW_NOT_FOUND = """LoadState=not-found
ActiveState=inactive
SubState=dead
Result=success
ExecMainStatus=0
NRestarts=0
ActiveEnterTimestamp=
"""


def fake_systemd(directory, show=SHOW_FAILED, journal_text="", systemctl_rc=0, systemctl_err="", journalctl=True):
    """Stand-ins for systemctl and journalctl (this machine does not run systemd): they print
    what the real tools print for `systemctl show -p ...` and `journalctl -o cat`, whatever the
    arguments, and record their argv and LC_ALL in calls.log. Returns the directory for PATH."""
    directory.mkdir()
    (directory / "show.txt").write_text(show, encoding="utf-8")
    (directory / "journal.txt").write_text(journal_text, encoding="utf-8")
    log = directory / "calls.log"
    scripts = {"systemctl": (directory / "show.txt", systemctl_rc, systemctl_err)}
    if journalctl:
        scripts["journalctl"] = (directory / "journal.txt", 0, "")
    for name, (output, rc, err) in scripts.items():
        (directory / (name + ".err")).write_text(err + "\n" if err else "", encoding="utf-8")
        script = directory / name
        script.write_text(
            "#!/bin/sh\n"
            "printf '%%s LC_ALL=%%s' '%s' \"$LC_ALL\" >> '%s'\n"
            "for arg in \"$@\"; do printf ' [%%s]' \"$arg\" >> '%s'; done\n"
            "printf '\\n' >> '%s'\n"
            "/bin/cat '%s' >&2\n"
            "/bin/cat '%s'\n"
            "exit %d\n" % (name, log, log, log, directory / (name + ".err"), output, rc),
            encoding="utf-8",
        )
        script.chmod(0o755)
    return directory


def calls(directory):
    return (directory / "calls.log").read_text(encoding="utf-8").splitlines()


def on_path(directory, rest=True):
    return {"PATH": str(directory) + (os.pathsep + os.environ["PATH"] if rest else "")}


# ---- an HTTP server that answers like vLLM's ------------------------------------------------


@pytest.fixture
def vllm_http():
    """``start(mode, unix=None)`` -> (base_url, requests seen). A stand-in for vLLM's OpenAI server
    on 127.0.0.1, or on the Unix socket ``unix`` (a path; base_url is then http://localhost):
    /health (200, or 503 when the engine died), /v1/models, and a chat completion that answers
    (``ok``), never answers (``hang``, the engine of vLLM issue #39863), or is never reached
    (``dead``). It checks nothing but the routes."""
    started = []

    def start(mode, unix=None):
        release = threading.Event()
        seen = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def answer(self, status, doc=None):
                body = json.dumps(doc).encode("utf-8") if doc is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                seen.append(dict(method="GET", path=self.path, auth=self.headers.get("Authorization"), host=self.headers.get("Host")))
                if self.path == "/health":
                    self.answer(503 if mode == "dead" else 200)
                elif self.path == "/v1/models":
                    self.answer(200, {"object": "list", "data": [{"id": "kimi-k2.5", "object": "model", "owned_by": "vllm"}]})
                else:
                    self.answer(404, {"detail": "Not Found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                seen.append(dict(method="POST", path=self.path, auth=self.headers.get("Authorization"), host=self.headers.get("Host"),
                                 body=body))
                if mode == "hang":
                    release.wait(60)
                    return
                # "one-token": an engine that stopped after the prefill (ignoring min_tokens); else what max_tokens asks.
                tokens = 1 if mode == "one-token" else body["max_tokens"]
                self.answer(200, {"id": "chatcmpl-1", "object": "chat.completion", "model": body["model"],
                                  "choices": [{"index": 0, "message": {"role": "assistant", "content": "OK"},
                                               "finish_reason": "length"}],
                                  "usage": {"prompt_tokens": 12, "completion_tokens": tokens, "total_tokens": 12 + tokens}})

        server = UnixHTTPServer(str(unix), Handler) if unix else ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append((server, release))
        return "http://localhost" if unix else "http://127.0.0.1:%d" % server.server_port, seen

    yield start
    for server, release in started:
        release.set()
        server.shutdown()
        server.server_close()


# ---- offline analysis of a saved journal -------------------------------------------------------


def test_saved_journal_with_leftover_shm_files(run_module, tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    for name in ("psm_3f9a1c2e", "sem.mp-k2x9q1", "vllm_offload_0.mmap", "nccl-AbC123", "pulse-shm-1234"):
        (shm / name).write_bytes(b"\0" * 64)
    before = snapshot(shm)
    args = {"journal_text": journal("attention-backend-fp8-sm120.txt"), "shm_dir": str(shm), "service_user": ME}
    run = run_module("vllm_diagnose", args)
    assert not run.failed, run
    assert set(run.result) >= KEYS
    assert run.result["changed"] is False
    assert run.result["healthy"] is False
    assert ids(run) == ["attention_backend", "shm_leftovers"]
    assert only(run, "attention_backend")["details"]["kv_cache_dtype"] == "fp8_e4m3"
    leftovers = run.result["shm_leftovers"]
    assert [entry["path"] for entry in leftovers] == [str(shm / "psm_3f9a1c2e"), str(shm / "sem.mp-k2x9q1"),
                                                      str(shm / "vllm_offload_0.mmap")]
    for entry in leftovers:
        assert (entry["owner"], entry["uid"], entry["size"]) == (ME, os.geteuid(), 64)
        assert entry["owned_by_service_user"] is True and entry["removable"] is True
    shm_finding = only(run, "shm_leftovers")
    assert "Found 3 such file(s), 3 owned by %s; the service is stopped." % ME in shm_finding["cause"]
    assert str(shm / "psm_3f9a1c2e") in shm_finding["remedy"]
    service = run.result["service"]
    assert service["checked"] is False and service["stopped"] is True and service["unit"] == "vllm.service"
    assert run.result["msg"] == ("vllm.service (from journal_text: stopped): No attention backend for this KV-cache dtype "
                                 "on this GPU; Leftover vLLM files in /dev/shm")
    assert run.result["journal_tail"][-1].endswith("compute capability not supported]}.")
    assert snapshot(shm) == before

    check = run_module("vllm_diagnose", args, check=True)
    # The same result apart from the echoed options (ansible-core 2.21 no longer returns `invocation`).
    assert ({k: v for k, v in check.result.items() if k != "invocation"}
            == {k: v for k, v in run.result.items() if k != "invocation"})
    assert snapshot(shm) == before


def test_leftover_files_of_other_users_are_not_removable(run_module, tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / "psm_00aa11bb").write_bytes(b"x")
    run = run_module("vllm_diagnose", {"journal_text": journal("rejected-flag.txt"), "shm_dir": str(shm),
                                       "service_user": "vllm-not-" + ME})
    entry = run.result["shm_leftovers"][0]
    assert (entry["owned_by_service_user"], entry["removable"]) == (False, False)
    finding = only(run, "shm_leftovers")
    assert "0 owned by vllm-not-%s" % ME in finding["cause"]
    assert "(none found now)" in finding["remedy"]
    assert ids(run) == ["rejected_flag", "shm_leftovers"]


def test_running_service_keeps_its_shm_files(run_module, tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / "psm_00aa11bb").write_bytes(b"x")
    run = run_module("vllm_diagnose", {"journal_text": journal("healthy.txt"), "shm_dir": str(shm), "service_user": ME})
    assert run.result["findings"] == []
    assert run.result["shm_leftovers"][0]["removable"] is False
    assert run.result["healthy"] is True
    assert run.result["msg"] == "vllm.service (from journal_text: started): no known failure in the journal"


def test_unknown_failure_returns_the_tail(run_module, tmp_path):
    run = run_module("vllm_diagnose", {"journal_text": journal("unknown-import-error.txt"), "shm_dir": str(tmp_path / "none")})
    assert run.result["findings"] == [] and run.result["shm_leftovers"] == []
    assert run.result["healthy"] is False
    assert run.result["journal_tail"][-1] == "ImportError: libcudart.so.13: cannot open shared object file: No such file or directory"
    assert run.result["msg"] == "vllm.service (from journal_text: stopped): no known failure matched; read journal_tail"


# ---- the model files -------------------------------------------------------------------------


def test_truncated_missing_and_empty_shards_are_named(run_module, tmp_path):
    names, sizes = make_model(tmp_path / "model")
    before = snapshot(tmp_path / "model")
    run = run_module("vllm_diagnose", {"journal_text": journal("model-truncated-shard.txt"), "model_path": str(tmp_path / "model"),
                                       "shm_dir": str(tmp_path / "none")}, check=True)
    assert not run.failed, run
    check = run.result["model_check"]
    assert (check["checked"], check["index"], check["shards"], check["ok"]) == (True, "model.safetensors.index.json", 5, False)
    assert check["missing"] == [names[2], names[4]]
    assert check["empty"] == [names[3]]
    assert check["truncated"] == [dict(file=names[1], size=sizes[names[1]] - 100, expected_size=sizes[names[1]])]
    assert check["problems"] == [
        "%s is truncated: %d bytes, its header says %d" % (names[1], sizes[names[1]] - 100, sizes[names[1]]),
        "%s is missing" % names[2],
        "%s is empty" % names[3],
        "%s is a link to ../pristine/%s, which does not exist" % (names[4], names[4]),
    ]
    assert ids(run) == ["model_files"]
    finding = only(run, "model_files")
    assert finding["evidence"][0].endswith("incomplete metadata, file not fully covered")
    assert finding["evidence"][1:] == check["problems"]
    assert "ansible-playbook deploy.yml --tags weights" in finding["remedy"]
    assert snapshot(tmp_path / "model") == before


def test_whole_model_passes(run_module, tmp_path):
    make_model(tmp_path / "model", broken=False)
    run = run_module("vllm_diagnose", {"journal_text": journal("healthy.txt"), "model_path": str(tmp_path / "model"),
                                       "shm_dir": str(tmp_path / "none")})
    check = run.result["model_check"]
    assert (check["ok"], check["shards"], check["problems"], check["truncated"]) == (True, 5, [], [])
    assert run.result["findings"] == [] and run.result["healthy"] is True


@pytest.mark.parametrize("damage, problem", [
    (lambda path: path.write_bytes(path.read_bytes()[:20]), "is truncated inside its header: 20 bytes, the header alone needs"),
    (lambda path: path.write_bytes(path.read_bytes()[:5]), "is truncated: 5 bytes, less than the 8-byte header length"),
    (lambda path: path.write_bytes(path.read_bytes() + b"\0" * 16), "has 16 bytes more than its header covers"),
    (lambda path: path.write_bytes(struct.pack("<Q", 8) + b"not json" + b"\0" * 64), "has a header that is not safetensors JSON"),
    (lambda path: path.write_bytes(struct.pack("<Q", 2 ** 40) + b"\0" * 64), "is not a safetensors file: header length 1099511627776"),
], ids=["cut-in-header", "shorter-than-length", "too-long", "bad-header", "huge-header"])
def test_shard_damage_kinds(run_module, tmp_path, damage, problem):
    names, dummy = make_model(tmp_path / "model", broken=False)
    damage(tmp_path / "model" / names[0])
    run = run_module("vllm_diagnose", {"journal_text": "", "model_path": str(tmp_path / "model"), "shm_dir": str(tmp_path / "none")})
    problems = run.result["model_check"]["problems"]
    assert len(problems) == 1 and problems[0].startswith(names[0] + " ") and problem in problems[0], problems
    assert ids(run) == ["model_files"]


def test_model_without_index_and_missing_directory(run_module, tmp_path):
    single = tmp_path / "single"
    single.mkdir()
    write_safetensors(single / "model.safetensors", SHARD_TENSORS[0], cut=1)
    run = run_module("vllm_diagnose", {"journal_text": "", "model_path": str(single), "shm_dir": str(tmp_path / "none")})
    check = run.result["model_check"]
    assert (check["index"], check["shards"], [t["file"] for t in check["truncated"]]) == (None, 1, ["model.safetensors"])
    gone = run_module("vllm_diagnose", {"journal_text": "", "model_path": str(tmp_path / "gone"), "shm_dir": str(tmp_path / "none")})
    assert gone.result["model_check"]["problems"] == ["model directory %s does not exist" % (tmp_path / "gone")]
    assert ids(gone) == ["model_files"]


@pytest.mark.vllm
def test_shard_verdicts_agree_with_the_real_safetensors(run_module, tmp_path, vllm_venv):
    """The size rule is the one the safetensors library applies when vLLM opens a shard."""
    names, dummy = make_model(tmp_path / "model")
    run = run_module("vllm_diagnose", {"journal_text": "", "model_path": str(tmp_path / "model"), "shm_dir": str(tmp_path / "none")})
    check = run.result["model_check"]
    bad = set(check["missing"]) | set(check["empty"]) | set(t["file"] for t in check["truncated"])
    present = [name for name in names if (tmp_path / "model" / name).exists()]
    script = ("import json, sys\nfrom safetensors import safe_open\nout = {}\nfor path in sys.argv[1:]:\n"
              "    try:\n        with safe_open(path, 'np') as f:\n            list(f.keys())\n        out[path] = None\n"
              "    except Exception as exc:\n        out[path] = str(exc)\nprint(json.dumps(out))\n")
    proc = subprocess.run([str(vllm_venv / "bin" / "python"), "-c", script] + [str(tmp_path / "model" / n) for n in present],
                          capture_output=True, text=True, timeout=120, check=True)
    verdicts = json.loads(proc.stdout)
    for name in present:
        error = verdicts[str(tmp_path / "model" / name)]
        assert (error is not None) == (name in bad), (name, error)
    assert verdicts[str(tmp_path / "model" / names[1])] == (
        "Error while deserializing header: incomplete metadata, file not fully covered")


# ---- the endpoint ----------------------------------------------------------------------------


def test_health_answers_but_completion_hangs(run_module, tmp_path, vllm_http):
    base_url, seen = vllm_http("hang")
    run = run_module("vllm_diagnose", {"journal_text": journal("healthy.txt"), "shm_dir": str(tmp_path / "none"),
                                       "base_url": base_url + "/", "api_key": API_KEY, "timeout": 2})
    assert not run.failed, run
    endpoint = run.result["endpoint"]
    assert (endpoint["checked"], endpoint["health_status"], endpoint["model"], endpoint["hang"], endpoint["ok"]) == (
        True, 200, "kimi-k2.5", True, False)
    assert endpoint["completion_status"] is None
    assert endpoint["completion_error"] == "no answer within 2 s"
    assert 2 <= endpoint["completion_seconds"] < 10
    assert ids(run) == ["engine_unhealthy"]
    finding = only(run, "engine_unhealthy")
    assert finding["evidence"] == [
        "GET %s/health -> 200" % base_url,
        "POST %s/v1/chat/completions (model kimi-k2.5, max_tokens 2) -> no answer within 2 s" % base_url,
    ]
    assert run.result["healthy"] is False
    assert [(r["method"], r["path"]) for r in seen] == [("GET", "/health"), ("GET", "/v1/models"), ("POST", "/v1/chat/completions")]
    assert seen[-1]["auth"] == "Bearer " + API_KEY
    assert seen[-1]["body"]["max_tokens"] == 2 and seen[-1]["body"]["model"] == "kimi-k2.5"
    assert API_KEY not in run.stdout


def test_answering_endpoint_is_healthy(run_module, tmp_path, vllm_http):
    base_url, seen = vllm_http("ok")
    run = run_module("vllm_diagnose", {"journal_text": journal("healthy.txt"), "shm_dir": str(tmp_path / "none"),
                                       "base_url": base_url, "served_model_name": "kimi-k2.5", "timeout": 5})
    endpoint = run.result["endpoint"]
    assert (endpoint["health_status"], endpoint["completion_status"], endpoint["completion_error"], endpoint["hang"], endpoint["ok"]) == (
        200, 200, None, False, True)
    assert endpoint["base_url"] == base_url and endpoint["unix_socket"] is None
    assert run.result["findings"] == []
    assert run.result["healthy"] is True
    assert run.result["msg"].startswith("vllm.service (from journal_text: started): healthy, a two-token completion took ")
    # With the model name given, /v1/models is not asked; without an api_key no header is sent.
    assert [(r["method"], r["path"], r["auth"]) for r in seen] == [("GET", "/health", None), ("POST", "/v1/chat/completions", None)]
    # The collection's one probe, the body vllm_server_wait and the gateways send (issue 27, point 1).
    assert seen[-1]["body"] == probe_request("kimi-k2.5")
    assert seen[-1]["body"]["min_tokens"] == 2 and seen[-1]["body"]["ignore_eos"] is True


def test_a_completion_without_its_decode_token_is_not_healthy(run_module, tmp_path, vllm_http):
    """An engine that stopped after the prefill's token (one that ignores min_tokens): no decode step proved."""
    base_url, dummy = vllm_http("one-token")
    run = run_module("vllm_diagnose", {"journal_text": journal("healthy.txt"), "shm_dir": str(tmp_path / "none"),
                                       "base_url": base_url, "served_model_name": "kimi-k2.5", "timeout": 5})
    endpoint = run.result["endpoint"]
    assert endpoint["completion_status"] == 200 and endpoint["ok"] is False
    assert endpoint["completion_error"] == (
        "HTTP 200, but the completion has 1 token(s) (usage.completion_tokens), not the 2 that max_tokens and min_tokens "
        "ask for: no decode step ran, so it does not prove that the engine decodes")
    assert run.result["healthy"] is False
    assert run.result["msg"].endswith("no known failure; endpoint: " + endpoint["completion_error"])


def test_shm_too_small_from_a_saved_journal_measures_shm_dir(run_module, tmp_path):
    """Issue 27, points 2 and 3: the journal's sizes; with shm_dir read, what it holds now, and a finding that
    does not claim what the measurement contradicts; with none, nothing said of it."""
    unread = run_module("vllm_diagnose", {"journal_text": journal("shm-too-small-cpu.txt"), "shm_dir": str(tmp_path / "none")})
    assert ids(unread) == ["shm_too_small"]
    finding = only(unread, "shm_too_small")
    assert finding["details"]["required_bytes"] == 160 << 20 and finding["details"]["free_bytes_then"] == 62 << 20
    assert finding["details"]["free_bytes_now"] is None and "contradicted_by" not in finding["details"]
    assert "none found now" not in finding["remedy"]
    shm = tmp_path / "shm"
    shm.mkdir()
    read = run_module("vllm_diagnose", {"journal_text": journal("shm-too-small-cpu.txt"), "shm_dir": str(shm)})
    assert ids(read) == ["shm_too_small"]
    finding = only(read, "shm_too_small")
    st = os.statvfs(str(shm))
    assert finding["details"]["total_bytes_now"] == st.f_blocks * st.f_frsize
    if finding["details"]["free_bytes_now"] >= 160 << 20:  # this machine's disk: room now, which the finding says
        assert finding["title"] == "/dev/shm is too small for the engine: in the journal, not on the host now"
        assert finding["cause"].startswith('The journal says "RuntimeError: Insufficient space in /dev/shm for shared-memory '
                                           'allocation: 160 MiB required, 62 MiB free"; but %s has ' % "/dev/shm")
    assert read.result["healthy"] is False  # the journal shows the start ended


def test_a_failure_the_serving_host_contradicts_is_reported_as_the_journals_words_and_healthy(run_module, tmp_path, vllm_http):
    """The journal read holds a failed start, the unit is active and the probe's completion answers: the finding
    says what the journal said and what the host shows, and the service is healthy."""
    base_url, dummy = vllm_http("ok")
    fake = fake_systemd(tmp_path / "bin", show=SHOW_ACTIVE, journal_text=journal("rejected-flag.txt"))
    run = run_module("vllm_diagnose", {"base_url": base_url, "shm_dir": str(tmp_path / "none")}, env=on_path(fake))
    finding = only(run, "rejected_flag")
    assert finding["details"]["contradicted_by"] == (
        "%s/health answers 200 and a 2-token chat completion answered 200: an engine serves there now" % base_url)
    assert finding["title"] == "vLLM rejected a command-line flag: in the journal, not on the host now"
    assert run.result["healthy"] is True
    assert run.result["msg"] == "vllm.service active/running: vLLM rejected a command-line flag: in the journal, not on the host now"


def test_health_503_is_a_dead_engine(run_module, tmp_path, vllm_http):
    base_url, dummy = vllm_http("dead")
    run = run_module("vllm_diagnose", {"journal_text": journal("healthy.txt"), "shm_dir": str(tmp_path / "none"), "base_url": base_url})
    assert run.result["endpoint"]["health_status"] == 503
    assert run.result["endpoint"]["health_error"] == "HTTP 503 Service Unavailable"
    assert ids(run) == ["engine_core_died"]
    assert only(run, "engine_core_died")["evidence"] == ["GET %s/health -> 503" % base_url]


def test_refused_connection_is_loading_not_a_failure(run_module, tmp_path):
    base_url = "http://127.0.0.1:%d" % free_port()
    run = run_module("vllm_diagnose", {"journal_text": journal("healthy.txt").split("Application startup")[0],
                                       "shm_dir": str(tmp_path / "none"), "base_url": base_url})
    endpoint = run.result["endpoint"]
    assert endpoint["health_status"] is None
    assert "refused" in endpoint["health_error"] and "still loading" in endpoint["health_error"]
    assert run.result["findings"] == [] and run.result["healthy"] is False
    assert run.result["msg"].startswith("vllm.service (from journal_text: started): no known failure; endpoint: ")


# ---- the endpoint on a Unix socket (vLLM's --uds) ----------------------------------------------


def test_answering_endpoint_over_a_unix_socket_without_a_key(run_module, tmp_path, vllm_http):
    """unix_socket alone probes http://localhost over the socket; no api_key, no Authorization header."""
    path = tmp_path / "engine.sock"
    base_url, seen = vllm_http("ok", unix=path)
    run = run_module("vllm_diagnose", {"journal_text": journal("healthy.txt"), "shm_dir": str(tmp_path / "none"),
                                       "unix_socket": str(path), "timeout": 5})
    endpoint = run.result["endpoint"]
    assert (endpoint["checked"], endpoint["base_url"], endpoint["unix_socket"], endpoint["model"], endpoint["ok"]) == (
        True, "http://localhost", str(path), "kimi-k2.5", True), run
    assert run.result["findings"] == [] and run.result["healthy"] is True
    assert [(r["method"], r["path"], r["auth"], r["host"]) for r in seen] == [
        ("GET", "/health", None, "localhost"), ("GET", "/v1/models", None, "localhost"),
        ("POST", "/v1/chat/completions", None, "localhost")]
    assert seen[-1]["body"] == probe_request("kimi-k2.5")


def test_evidence_over_a_unix_socket_names_it(run_module, tmp_path, vllm_http):
    path = tmp_path / "engine.sock"
    vllm_http("dead", unix=path)
    run = run_module("vllm_diagnose", {"journal_text": journal("healthy.txt"), "shm_dir": str(tmp_path / "none"),
                                       "base_url": "http://localhost/", "unix_socket": str(path)})
    assert run.result["endpoint"]["health_status"] == 503 and run.result["endpoint"]["base_url"] == "http://localhost"
    assert ids(run) == ["engine_core_died"]
    assert only(run, "engine_core_died")["evidence"] == ["GET http://localhost/health over unix:%s -> 503" % path]


def test_a_hang_over_a_unix_socket_names_it(run_module, tmp_path, vllm_http):
    path = tmp_path / "engine.sock"
    vllm_http("hang", unix=path)
    run = run_module("vllm_diagnose", {"journal_text": journal("healthy.txt"), "shm_dir": str(tmp_path / "none"),
                                       "unix_socket": str(path), "served_model_name": "kimi-k2.5", "timeout": 1})
    assert only(run, "engine_unhealthy")["evidence"] == [
        "GET http://localhost/health over unix:%s -> 200" % path,
        "POST http://localhost/v1/chat/completions over unix:%s (model kimi-k2.5, max_tokens 2) -> no answer within 1 s" % path,
    ]


@pytest.mark.parametrize("state", ["missing", "refusing"])
def test_a_unix_socket_that_is_not_there_or_refuses_is_a_refused_connection(run_module, tmp_path, state):
    """No file at the path (the service is down), or a socket nothing listens on (bound by a start
    that has not come up, or left by one that ended): reported as a refused port is, not a traceback."""
    path = tmp_path / "engine.sock"
    if state == "refusing":
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.bind(str(path))  # closed without listen: the file stays and refuses connections
    run = run_module("vllm_diagnose", {"journal_text": journal("healthy.txt").split("Application startup")[0],
                                       "shm_dir": str(tmp_path / "none"), "unix_socket": str(path)})
    assert not run.failed, run
    endpoint = run.result["endpoint"]
    assert (endpoint["checked"], endpoint["unix_socket"], endpoint["health_status"], endpoint["ok"]) == (True, str(path), None, False)
    said = ("Connection refused: no socket at unix:%s ([Errno %d] No such file or directory)" % (path, errno.ENOENT)
            if state == "missing" else "[Errno %d] Connection refused: unix:%s" % (errno.ECONNREFUSED, path))
    assert endpoint["health_error"] == said + ": nothing listens yet (the model is still loading) or the service is down"
    assert run.result["findings"] == [] and run.result["healthy"] is False
    assert run.result["msg"] == "vllm.service (from journal_text: started): no known failure; endpoint: " + endpoint["health_error"]
    assert "Traceback" not in run.stdout + run.stderr


# ---- the live path: systemctl and journalctl -------------------------------------------------


def test_live_failed_unit(run_module, tmp_path):
    fake = fake_systemd(tmp_path / "bin", journal_text=journal("attention-backend-fp8-sm120.txt"))
    run = run_module("vllm_diagnose", {"unit": "vllm", "journal_lines": 250, "shm_dir": str(tmp_path / "none")}, env=on_path(fake))
    assert not run.failed, run
    assert run.result["service"] == dict(unit="vllm.service", checked=True, load_state="loaded", active_state="activating",
                                         sub_state="auto-restart", result="exit-code", exec_main_status=1, n_restarts=4,
                                         active_enter_timestamp="", stopped=True)
    assert ids(run) == ["attention_backend"]
    assert run.result["msg"] == ("vllm.service activating/auto-restart (exit-code, 4 restarts): No attention backend for "
                                 "this KV-cache dtype on this GPU")
    assert calls(fake) == [
        "systemctl LC_ALL=C [show] [vllm.service] [-p] "
        "[LoadState,ActiveState,SubState,Result,ExecMainStatus,NRestarts,ActiveEnterTimestamp] [--no-pager]",
        "journalctl LC_ALL=C [-u] [vllm.service] [-n] [250] [--no-pager] [-o] [cat]",
    ]


def test_live_active_unit_with_answering_endpoint(run_module, tmp_path, vllm_http):
    base_url, dummy = vllm_http("ok")
    fake = fake_systemd(tmp_path / "bin", show=SHOW_ACTIVE, journal_text=journal("healthy.txt"))
    run = run_module("vllm_diagnose", {"base_url": base_url, "shm_dir": str(tmp_path / "none")}, env=on_path(fake))
    assert run.result["service"]["stopped"] is False
    assert run.result["service"]["active_enter_timestamp"] == "Sun 2026-11-29 18:00:02 UTC"
    assert run.result["healthy"] is True
    assert run.result["msg"].startswith("vllm.service active/running: healthy, a two-token completion took ")


def test_unit_not_found(run_module, tmp_path):
    fake = fake_systemd(tmp_path / "bin", show=SHOW_NOT_FOUND)
    run = run_module("vllm_diagnose", {"unit": "vllm-test.service", "shm_dir": str(tmp_path / "none")}, env=on_path(fake))
    assert run.failed
    assert run.result["msg"] == (
        "unit vllm-test.service is not installed on this host (systemctl: LoadState=not-found); set unit to the vLLM "
        "service's name (vllm_server_service_name), or deploy it with ansible-playbook deploy.yml")
    assert set(run.result) >= KEYS
    assert run.result["service"]["load_state"] == "not-found"
    assert len(calls(fake)) == 1, "journalctl must not run for a unit that does not exist"


def test_systemctl_failure_is_reported(run_module, tmp_path):
    error = "System has not been booted with systemd as init system (PID 1). Can't operate."
    fake = fake_systemd(tmp_path / "bin", show="", systemctl_rc=1, systemctl_err=error)
    run = run_module("vllm_diagnose", {"shm_dir": str(tmp_path / "none")}, env=on_path(fake))
    assert run.failed
    assert run.result["msg"].startswith("systemctl show vllm.service failed (rc 1): " + error)
    assert "journal_text" in run.result["msg"]
    assert set(run.result) >= KEYS


def test_without_journalctl(run_module, tmp_path):
    fake = fake_systemd(tmp_path / "bin", journalctl=False)
    run = run_module("vllm_diagnose", {"shm_dir": str(tmp_path / "none")}, env=on_path(fake, rest=False))
    assert run.failed
    assert run.result["msg"].startswith("journalctl not found")
    assert run.result["service"]["n_restarts"] == 4


@pytest.mark.parametrize("args, message", [
    ({"journal_lines": 0}, "journal_lines must be at least 1, got 0"),
    ({"timeout": 0}, "timeout must be at least 1 second, got 0"),
    ({"base_url": "127.0.0.1:8000"}, "base_url '127.0.0.1:8000' must start with http:// or https://"),
])
def test_bad_arguments(run_module, args, message):
    run = run_module("vllm_diagnose", dict(args, journal_text=""))
    assert run.failed
    assert run.result["msg"].startswith(message)
    assert set(run.result) >= KEYS


# ---- the playbook ----------------------------------------------------------------------------


@pytest.mark.integration
def test_playbook_shows_findings_and_hides_the_key(tmp_path):
    """playbooks/diagnose.yml on this machine (connection local, the stand-ins on PATH): the
    findings are shown although the diagnosis task is no_log, and the API key never is."""
    fake = fake_systemd(tmp_path / "bin", journal_text=journal("attention-backend-fp8-sm120.txt"))
    env = dict(os.environ, PATH=str(fake) + os.pathsep + os.environ["PATH"], ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "playbooks/diagnose.yml", "-i", "localhost,", "-c", "local",
         "-e", "fleet_vllm_hosts=localhost", "-e", "ansible_become=false", "-e", "ansible_python_interpreter=" + sys.executable,
         "-e", "vllm_server_api_key=" + API_KEY, "-e", "vllm_server_port=%d" % free_port()],
        cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "No attention backend for this KV-cache dtype on this GPU (attention_backend)" in out
    assert "vllm_kv_cache_policy: strip" in out
    assert "No valid attention backend found for cuda" in out
    assert "vllm.service activating/auto-restart (exit-code, 4 restarts)" in out
    assert API_KEY not in out and API_KEY not in proc.stderr


@pytest.mark.integration
def test_playbook_stops_a_host_with_the_reason(tmp_path):
    fake = fake_systemd(tmp_path / "bin", show=SHOW_NOT_FOUND)
    env = dict(os.environ, PATH=str(fake) + os.pathsep + os.environ["PATH"], ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "playbooks/diagnose.yml", "-i", "localhost,", "-c", "local",
         "-e", "fleet_vllm_hosts=localhost", "-e", "ansible_become=false", "-e", "ansible_python_interpreter=" + sys.executable,
         "-e", "vllm_server_api_key=" + API_KEY],
        cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "unit vllm.service is not installed on this host" in proc.stdout
    assert API_KEY not in proc.stdout and API_KEY not in proc.stderr
