"""The silence of a planned restart ends without a page (roles/vllm_monitoring/tasks/silence.yml and unsilence.yml, as
playbooks/roll.yml runs them), against this machine's real Prometheus (2.42) and Alertmanager (0.25), Debian's
packages, the ones the role installs, on loopback.

Found by CI (2026-12-04, molecule/gateway): the roll expired a host's silence as soon as it was back in rotation, while
the alerts its restart raised were still active (Prometheus had not scraped it again yet), and Alertmanager notified
them. Here the host is reported back a few seconds after the role starts to end its silence; the role must wait for
the resolution, and with no wait (vllm_monitoring_unsilence_wait: 0, the roll's choice for a host that failed) the
same restart does page: the race is real on these services, and the test can fail.

The fleet hosts: one test metrics endpoint serves fleet_vllm_test_down{fleet_host=...} for each, which the test's
single alert rule turns into an alert labelled with the host, as the fleet's rules label theirs."""

from __future__ import annotations

import http.server
import json
import secrets
import shutil
import socketserver
import subprocess
import threading
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from conftest import ROOT, free_port, prerequisite, run_playbook

PROMETHEUS = shutil.which("prometheus") or shutil.which("prometheus", path="/usr/bin")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("prometheus-alertmanager", path="/usr/bin")
PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "vllm_monitoring_unsilence.yml"
ALERT = "FleetVllmTestHostDown"
DRIFT = "FleetVllmTestDrift"

pytestmark = prerequisite(PROMETHEUS is not None and ALERTMANAGER is not None,
                          "Prometheus and Alertmanager are not installed (Debian: prometheus, prometheus-alertmanager)")


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


class _Metrics(http.server.BaseHTTPRequestHandler):
    """GET /metrics: fleet_vllm_test_down per host, and fleet_vllm_test_drift 1 from the host's restart on (what a
    roll's drift does: it lasts until the whole fleet is rolled); POST /set?host=H&down=0|1&after=S: from S seconds on,
    down=1 being the restart."""
    schedule = {}  # host -> [(from monotonic time, value)]
    restarted = set()
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    @classmethod
    def value(cls, host):
        now = time.monotonic()
        with cls.lock:
            current = [value for start, value in cls.schedule.get(host, []) if start <= now]
        return current[-1] if current else 0

    def do_GET(self):
        with self.lock:
            hosts = sorted(self.schedule)
        body = "".join('fleet_vllm_test_down{fleet_host="%s"} %d\nfleet_vllm_test_drift{fleet_host="%s"} %d\n'
                       % (host, self.value(host), host, host in self.restarted) for host in hosts).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
        set_down(query["host"][0], int(query["down"][0]), float(query["after"][0]))
        if query["down"][0] == "1":
            with self.lock:
                self.restarted.add(query["host"][0])
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


def set_down(host, down, after=0.0):
    with _Metrics.lock:
        _Metrics.schedule.setdefault(host, []).append((time.monotonic() + after, down))
        _Metrics.schedule[host].sort()


class _Webhook(http.server.BaseHTTPRequestHandler):
    """What Alertmanager notifies: [(alertname, fleet_host, status)] of each alert of each notification."""
    received = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        for alert in body.get("alerts", []):
            self.received.append((alert["labels"].get("alertname"), alert["labels"].get("fleet_host"), alert["status"]))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


def notified(host):
    return [entry for entry in _Webhook.received if entry[1] == host]


def _serve(handler):
    server = _Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _get(url):
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def _wait(what, check, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, "%s: not within %d s" % (what, timeout)
        time.sleep(0.5)


@pytest.fixture(scope="module")
def monitoring(tmp_path_factory):
    """Prometheus (scrape and evaluation every second) and Alertmanager (group wait and interval 1 s) on loopback,
    the metrics endpoint and the webhook: their URLs."""
    base = tmp_path_factory.mktemp("monitoring")
    metrics, webhook = _serve(_Metrics), _serve(_Webhook)
    am_port, prom_port = free_port(), free_port()
    (base / "alertmanager.yml").write_text(yaml.safe_dump({
        "route": {"receiver": "pager", "group_by": ["alertname", "fleet_host"], "group_wait": "1s",
                  "group_interval": "1s", "repeat_interval": "1h"},
        "receivers": [{"name": "pager", "webhook_configs": [
            {"url": "http://127.0.0.1:%d/" % webhook.server_port, "send_resolved": True}]}]}))
    (base / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "test", "rules": [
        {"alert": ALERT, "expr": "fleet_vllm_test_down == 1", "labels": {"severity": "page"}},
        # Pending for the whole test, as FleetVllmDrift is through a roll (drift_for 1h).
        {"alert": DRIFT, "expr": "fleet_vllm_test_drift == 1", "for": "1h", "labels": {"severity": "ticket"}}]}]}))
    (base / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": ["127.0.0.1:%d" % am_port]}]}]},
        "rule_files": [str(base / "rules.yml")],
        "scrape_configs": [{"job_name": "test", "static_configs": [
            {"targets": ["127.0.0.1:%d" % metrics.server_port]}]}]}))
    log = (base / "services.log").open("wb")
    procs = [
        subprocess.Popen([ALERTMANAGER, "--config.file=%s" % (base / "alertmanager.yml"), "--storage.path=%s" % (base / "am"),
                          "--web.listen-address=127.0.0.1:%d" % am_port, "--cluster.listen-address="],
                         stdout=log, stderr=subprocess.STDOUT),
        subprocess.Popen([PROMETHEUS, "--config.file=%s" % (base / "prometheus.yml"), "--storage.tsdb.path=%s" % (base / "tsdb"),
                          "--web.listen-address=127.0.0.1:%d" % prom_port], stdout=log, stderr=subprocess.STDOUT),
    ]
    urls = dict(alertmanager="http://127.0.0.1:%d" % am_port, prometheus="http://127.0.0.1:%d" % prom_port,
                metrics="http://127.0.0.1:%d" % metrics.server_port, base=base)
    try:
        for name in ("alertmanager", "prometheus"):
            def ready(url=urls[name]):
                try:
                    with urllib.request.urlopen(url + "/-/ready", timeout=2) as response:
                        return response.status == 200
                except OSError:
                    assert all(proc.poll() is None for proc in procs), (base / "services.log").read_text()
                    return False
            _wait("%s ready" % name, ready)
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        metrics.shutdown()
        webhook.shutdown()
        log.close()


# Each fleet host is one case: (restart takes it down, reported back after S seconds (-1: never), unsilence wait).
# BACK leaves the role's unsilence (its fleet role's checks, the include) time to begin on a loaded machine before the
# host is back: without the wait, the silence then surely ends while the alert is still active.
BACK = 20
CASES = {
    "gpu-waits": dict(fleet_vllm_test_restart_down=True, fleet_vllm_test_back_after=BACK, vllm_monitoring_unsilence_wait=60),
    "gpu-no-wait": dict(fleet_vllm_test_restart_down=True, fleet_vllm_test_back_after=BACK, vllm_monitoring_unsilence_wait=0),
    "gpu-still-down": dict(fleet_vllm_test_restart_down=True, fleet_vllm_test_back_after=-1, vllm_monitoring_unsilence_wait=4),
    # Down (and notified) before its restart began, and still down: not raised by the restart, so not waited for.
    "gpu-down-before": dict(fleet_vllm_test_restart_down=False, fleet_vllm_test_back_after=-1,
                            vllm_monitoring_unsilence_wait=60),
}


@pytest.fixture(scope="module")
def rolled(monitoring):
    """The four restarts in one ansible-playbook run, then the notifications once Alertmanager has flushed: (run,
    the silences of each host, the services' URLs)."""
    base = monitoring["base"]
    for host in CASES:
        set_down(host, 0)
    set_down("gpu-down-before", 1)
    _wait("the page of gpu-down-before before its restart", lambda: notified("gpu-down-before"))
    inventory = base / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {
        "vars": dict(ansible_connection="local", ansible_python_interpreter=str(ROOT / ".venv" / "bin" / "python")
                     if (ROOT / ".venv" / "bin" / "python").exists() else "auto",
                     fleet_vllm_metrics_token=secrets.token_hex(32),  # the fleet role's checks want one with monitoring
                     fleet_vllm_test_metrics_url=monitoring["metrics"],
                     fleet_vllm_test_alertmanager_url=monitoring["alertmanager"]),
        "children": {
            "vllm_servers": {"hosts": {host: dict(variables) for host, variables in CASES.items()}},
            "vllm_monitoring": {"hosts": {"mon": dict(
                vllm_monitoring_listen_address="127.0.0.1",
                vllm_monitoring_alertmanager_port=int(monitoring["alertmanager"].rsplit(":", 1)[1]),
                vllm_monitoring_prometheus_port=int(monitoring["prometheus"].rsplit(":", 1)[1]))}},
        }}}))
    run = run_playbook(PLAYBOOK, "-i", str(inventory), "--forks", "5", timeout=600)
    assert run.rc == 0, run.stdout[-5000:] + run.stderr[-3000:]
    # Alertmanager flushes every second (group_interval): what it would notify after the silences ended, it has by now.
    time.sleep(5)
    silences = {}
    for silence in _get(monitoring["alertmanager"] + "/api/v2/silences"):
        host = [m["value"] for m in silence["matchers"] if m["name"] == "fleet_host"]
        silences.setdefault(host[0] if host else None, []).append(silence)
    return run, silences, monitoring


def _results(run, host, task):
    return [result for name, result in run.task_list(host) if name == task]


WAIT = "Wait for the alerts this host's restart raised to resolve in Prometheus"
WAIT_AM = "Wait for Alertmanager to have the resolutions"
REPORT = "Report the alerts of this host's restart that are still active as its silence ends"


def _polls(run, host):
    """{api: attempts} of the waits (0: not asked)."""
    polls = {}
    for api, task in (("prometheus", WAIT), ("alertmanager", WAIT_AM)):
        (result,) = _results(run, host, task)
        items = result.get("results", [])
        assert len(items) == 1, result
        polls[api] = 0 if items[0].get("skipped") else items[0].get("attempts", 1)
    return polls


def _warnings(run, host):
    return [item["msg"] for result in _results(run, host, REPORT) for item in result.get("results", [])
            if not item.get("skipped")]


def test_every_silence_of_the_roll_is_expired(rolled):
    silences = rolled[1]
    for host in CASES:
        states = [s["status"]["state"] for s in silences.get(host, [])]
        assert states == ["expired"], (host, silences.get(host))
        assert silences[host][0]["createdBy"] == "fleet.vllm"


def test_a_restart_that_comes_back_ends_its_silence_once_its_alert_resolved_and_pages_no_one(rolled):
    run = rolled[0]
    assert notified("gpu-waits") == [], _Webhook.received
    # It waited: Prometheus was asked again and again while the host was reported down, and Alertmanager had the
    # resolution at the first ask once Prometheus had none. It ended there, before its limit (31 asks for 60 s),
    # although the drift alert its restart raised is still pending: a pending alert is not waited for.
    polls = _polls(run, "gpu-waits")
    assert 2 <= polls["prometheus"] < 31 and polls["alertmanager"] == 1, polls
    pending = [a for a in _get(rolled[2]["prometheus"] + "/api/v1/alerts")["data"]["alerts"]
               if a["labels"].get("fleet_host") == "gpu-waits"]
    assert [(a["labels"]["alertname"], a["state"]) for a in pending] == [(DRIFT, "pending")], pending
    assert _warnings(run, "gpu-waits") == []


def test_without_the_wait_the_same_restart_pages(rolled):
    """The control: what the roll did before, and still does for a host that failed."""
    run = rolled[0]
    assert ("FleetVllmTestHostDown", "gpu-no-wait", "firing") in notified("gpu-no-wait"), _Webhook.received
    assert _polls(run, "gpu-no-wait") == {"prometheus": 0, "alertmanager": 0}


def test_a_host_still_alerting_after_the_wait_is_reported_and_pages(rolled):
    run = rolled[0]
    warnings = _warnings(run, "gpu-still-down")
    assert len(warnings) == 1 and ALERT in warnings[0] and "prometheus on mon" in warnings[0], warnings
    assert DRIFT not in warnings[0], warnings
    assert "vllm_monitoring_unsilence_wait, 4 s" in warnings[0], warnings
    assert ("FleetVllmTestHostDown", "gpu-still-down", "firing") in notified("gpu-still-down"), _Webhook.received
    # A wait of 4 s is two polls after the first ask (one every 2 s): bounded; Alertmanager is not asked then.
    assert _polls(run, "gpu-still-down") == {"prometheus": 3, "alertmanager": 0}


def test_an_alert_older_than_the_silence_is_not_waited_for_nor_notified_again(rolled):
    run = rolled[0]
    assert _polls(run, "gpu-down-before") == {"prometheus": 1, "alertmanager": 1}
    assert _warnings(run, "gpu-down-before") == []
    assert notified("gpu-down-before") == [(ALERT, "gpu-down-before", "firing")], _Webhook.received
