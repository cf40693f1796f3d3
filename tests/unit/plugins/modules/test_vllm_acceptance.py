"""fleet.vllm.vllm_acceptance against the engine simulator (tests/simulator, a TEST FIXTURE: its
stand-in of vLLM's benchmark client really loads it, and its speed file sets how fast it generates),
installed into a real venv as a site installs vLLM, with the fixture nvidia-smi (tests/fixtures/bin)
in its busy mode and the kernel-log fixtures: what is measured, what is "not measured" and why, the
key kept out of every command line, and the GPUs judged under the load."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
FIXTURES = ROOT / "tests" / "fixtures"
KEY = "fleet-vllm-acceptance-test-key-0123456789"
PROFILE = {"input_tokens": 16, "output_tokens": 16, "requests": 8, "concurrency": 4, "warmup_requests": 2, "seed": 0}


@pytest.fixture(scope="module")
def sim_venv(tmp_path_factory):
    """A real venv with the simulator's wheel pip-installed (no index), as vllm_runtime installs vLLM."""
    out = tmp_path_factory.mktemp("acceptance-sim")
    subprocess.run([sys.executable, str(ROOT / "tests" / "simulator" / "build-wheel.py"), "0.33.0", str(out)],
                   check=True, capture_output=True)
    venv.EnvBuilder(with_pip=True).create(out / "venv")
    python = out / "venv" / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(out), "vllm==0.33.0"],
                   check=True, capture_output=True)
    return out, python


@pytest.fixture
def engine(sim_venv, tmp_path):
    """The simulator serving with KEY, at the speed in its speed file, and a fake systemctl naming its PID as the
    unit's main process (no systemd here); yields (url, env for the module, speed file, fault file)."""
    out, python = sim_venv
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    speed, fault = tmp_path / "speed", tmp_path / "fault"
    speed.write_text("* 400\n")
    env = dict(os.environ, PATH="%s:%s" % (FIXTURES / "bin", os.environ["PATH"]), FLEET_VLLM_FAKE_GPUS="rtx-pro-6000-x8",
               FLEET_VLLM_SIM_LOAD_SECONDS="0", FLEET_VLLM_SIM_SPEED_FILE=str(speed), FLEET_VLLM_SIM_FAULT_FILE=str(fault),
               FLEET_VLLM_SIM_SHM_DIR=str(tmp_path), VLLM_API_KEY=KEY)
    proc = subprocess.Popen([str(python), "-m", "vllm.entrypoints.openai.api_server", str(FIXTURES / "models" / "bf16-kv"),
                             "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "kimi",
                             "--kv-cache-dtype", "auto", "--tensor-parallel-size", "8"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    systemctl = bin_dir / "systemctl"
    systemctl.write_text("#!/bin/sh\necho %d\n" % proc.pid)
    systemctl.chmod(0o755)
    module_env = {"PATH": "%s:%s:%s" % (bin_dir, FIXTURES / "bin", os.environ["PATH"]),
                  "FLEET_VLLM_FAKE_GPUS": "rtx-pro-6000-x8", "FLEET_VLLM_FAKE_GPUS_BUSY": "1"}
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None, "the simulator did not listen"
            time.sleep(0.1)
    yield "http://127.0.0.1:%d" % port, module_env, speed, fault
    proc.kill()
    proc.wait(timeout=60)


def args(base_url, tmp_path, **extra):
    base = {"url": base_url, "api_key": KEY, "served_model_name": "kimi", "tokenizer": str(FIXTURES / "models" / "bf16-kv"),
            "profile": PROFILE, "timeout": 120, "nvidia_smi": "nvidia-smi", "sample_interval": 0.2,
            "kernel_log": str(FIXTURES / "kernel-log" / "healthy.txt"), "accepted_file": str(tmp_path / "accepted.json")}
    base.update(extra)
    return base


def test_a_healthy_host_is_measured_with_its_identity_and_its_gpus_under_load(run_module, engine, tmp_path):
    url, env, _speed, _fault = engine
    result = run_module("vllm_acceptance", args(url, tmp_path), env=env).result
    assert result["status"] == "measured" and result["reason"] is None and not result["changed"], result
    metrics = result["metrics"]
    assert (metrics["completed"], metrics["failed"]) == (8, 0)
    # 400 tokens/s per request, 4 at a time, 16 tokens each (the first one after a prefill's 1/400 s): the host
    # cannot be faster than 1600 tokens/s, and the simulator on a loaded CI machine is not much slower than that.
    assert 100 < metrics["output_tokens_per_s"] <= 1600, metrics
    assert 2.0 <= metrics["itl_p50_ms"] < 100 and metrics["ttft_p50_ms"] >= 2.0, metrics
    identity = result["identity"]
    assert identity["vllm_version"] == "vllm 0.33.0" and identity["kv_cache_dtype"] == "auto"
    assert identity["tensor_parallel_size"] == "8" and identity["model"] == "kimi" and identity["platform"] == "cuda"
    assert identity["gpus"] == "8 x NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert result["hardware"]["failures"] == [] and result["hardware"]["gpus_under_load"] == 8
    assert result["hardware"]["samples"] >= 1 and result["last_accepted"] is None and len(result["key"]) == 16
    assert not os.path.exists(tmp_path / "accepted.json")


def test_the_key_reaches_the_client_through_its_environment_never_its_command_line(run_module, engine, tmp_path):
    url, env, speed, _fault = engine
    speed.write_text("* 40\n")  # about 2 s of load: time to look at every process meanwhile
    seen = {"argv": [], "environ": 0, "clients": 0}
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    cmdline = Path("/proc/%s/cmdline" % pid).read_bytes()
                    if KEY.encode() in cmdline:
                        seen["argv"].append(cmdline)
                    if b"vllm.benchmarks.serve" in cmdline:
                        seen["clients"] += 1
                        if b"OPENAI_API_KEY=" + KEY.encode() in Path("/proc/%s/environ" % pid).read_bytes():
                            seen["environ"] += 1
                except OSError:
                    continue
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = run_module("vllm_acceptance", args(url, tmp_path), env=env).result
    finally:
        stop.set()
        watcher.join()
    assert result["status"] == "measured", result
    # The engine (the fixture) gets the key from VLLM_API_KEY too: no process ever had it in its argv.
    assert seen["argv"] == [] and seen["clients"] > 0 and seen["environ"] > 0, seen
    assert KEY not in repr(result)


@pytest.mark.parametrize("how, reason", [
    ({"api_key": "wrong-key"}, "the front door refused the key (HTTP 401 on /v1/models)"),
    ({"timeout": 1}, "the profile did not finish within 1 s (timeout); the client was stopped"),
    ({"python": "/nonexistent/bin/python"}, "cannot start /nonexistent/bin/python"),
    ({"url": "http://127.0.0.1:9"}, "the front door did not answer /v1/models"),
])
def test_a_host_that_cannot_be_measured_is_not_measured_with_the_reason(run_module, engine, tmp_path, how, reason):
    url, env, speed, _fault = engine
    speed.write_text("* 20\n")
    result = run_module("vllm_acceptance", args(url, tmp_path, **how), env=env).result
    assert result["status"] == "not_measured" and result["metrics"] is None, result
    assert reason in result["reason"], result["reason"]


def test_failed_requests_are_counted_with_their_error(run_module, engine, tmp_path):
    url, env, _speed, fault = engine
    fault.write_text("dead\n")
    result = run_module("vllm_acceptance", args(url, tmp_path), env=env).result
    assert result["status"] == "measured" and result["metrics"]["failed"] == 8 and result["metrics"]["completed"] == 0
    assert any("500" in e for e in result["errors"]), result["errors"]


@pytest.mark.parametrize("scenario, kernel_log, expected", [
    ("rtx-pro-6000-x8-gen2", "healthy.txt", ("pcie_link", "Gen2")),
    ("rtx-pro-6000-x8-throttled", "healthy.txt", ("clocks", "thermal")),
    ("rtx-pro-6000-x8", "xid-79.txt", ("xid", "79")),
])
def test_the_gpus_are_judged_under_the_load(run_module, engine, tmp_path, scenario, kernel_log, expected):
    url, env, _speed, _fault = engine
    env = dict(env, FLEET_VLLM_FAKE_GPUS=scenario)
    result = run_module("vllm_acceptance", args(url, tmp_path, kernel_log=str(FIXTURES / "kernel-log" / kernel_log)),
                        env=env).result
    assert result["status"] == "measured", result
    failures = result["hardware"]["failures"]
    assert len(failures) == 1 and failures[0]["check"] == expected[0], failures
    assert expected[1].lower() in failures[0]["message"].lower() and failures[0]["bus_id"] in failures[0]["message"]


def test_an_idle_reading_proves_nothing_about_the_link(run_module, engine, tmp_path):
    url, env, _speed, _fault = engine
    env = dict(env, FLEET_VLLM_FAKE_GPUS_BUSY="")
    result = run_module("vllm_acceptance", args(url, tmp_path), env=env).result
    hardware = result["hardware"]
    assert hardware["failures"] == [] and hardware["gpus_under_load"] == 0
    assert len([n for n in hardware["notes"] if "not seen under load" in n]) == 8, hardware["notes"]


def test_the_last_accepted_result_of_the_same_identity_is_returned(run_module, engine, tmp_path):
    url, env, _speed, _fault = engine
    first = run_module("vllm_acceptance", args(url, tmp_path), env=env).result
    (tmp_path / "accepted.json").write_text('{"%s": {"output_tokens_per_s": 1234.5}, "other": {"x": 1}}' % first["key"])
    second = run_module("vllm_acceptance", args(url, tmp_path), env=env).result
    assert second["key"] == first["key"] and second["last_accepted"] == {"output_tokens_per_s": 1234.5}
    other = run_module("vllm_acceptance", args(url, tmp_path, profile=dict(PROFILE, seed=1)), env=env).result
    assert other["key"] != first["key"] and other["last_accepted"] is None


def test_a_damaged_accepted_file_stops_it_naming_the_file(run_module, engine, tmp_path):
    url, env, _speed, _fault = engine
    (tmp_path / "accepted.json").write_text("{half")
    result = run_module("vllm_acceptance", args(url, tmp_path), env=env).result
    assert result["failed"] and "accepted.json cannot be read as the host's accepted results" in result["msg"]


def test_check_mode_sends_no_load(run_module, engine, tmp_path):
    url, env, _speed, _fault = engine
    result = run_module("vllm_acceptance", args(url, tmp_path), check=True, env=env).result
    assert result["status"] == "not_measured" and result["reason"] == "check mode: no load sent"
