"""Helpers of the scenarios with a monitoring host (test helper, not part of the collection): Prometheus' and
Alertmanager's HTTP APIs and what the test webhook receiver (webhook_receiver.py) got, read from inside the
monitoring host through container_exec (nsenter) (they listen there; nothing leaves this machine).
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.parse

import yaml

import container_exec
import fleet_hosts as fleet

PROMETHEUS = "http://127.0.0.1:9090"
ALERTMANAGER = "http://127.0.0.1:9093"
WEBHOOK_LOG = "/var/lib/fleet-vllm-test-webhook/received.jsonl"

_GET = r"""
import json, sys, urllib.request
method, url, body = sys.argv[1], sys.argv[2], sys.argv[3]
request = urllib.request.Request(url, data=body.encode() if body else None, method=method,
                                 headers={"Content-Type": "application/json"} if body else {})
try:
    with urllib.request.urlopen(request, timeout=20) as response:
        print(json.dumps([response.status, response.read().decode()]))
except urllib.error.HTTPError as e:
    print(json.dumps([e.code, e.read().decode()]))
except OSError as e:
    print(json.dumps([0, "%s: %s" % (type(e).__name__, e)]))
"""


def monitor():
    return fleet.instances("vllm_monitoring")[0]


exec_in = container_exec.output


def http(url, method="GET", body=""):
    """(status, text) of a request made inside the monitoring host."""
    status, text = json.loads(exec_in(monitor(), ["python3", "-c", _GET, method, url, body]))
    return status, text


def api(url):
    status, text = http(url)
    assert status == 200, (url, status, text)
    return json.loads(text)


def query(expr):
    """Prometheus' instant query: [{metric: {...}, value: [t, "v"]}]."""
    data = api(PROMETHEUS + "/api/v1/query?" + encode({"query": expr}))
    assert data["status"] == "success", data
    return data["data"]["result"]


def encode(params):
    return urllib.parse.urlencode(params)


def targets():
    return api(PROMETHEUS + "/api/v1/targets?state=active")["data"]["activeTargets"]


def silences():
    return api(ALERTMANAGER + "/api/v2/silences")


def received():
    """Every notification the webhook got: [{received, body}] in order."""
    out = exec_in(monitor(), ["sh", "-c", "cat %s 2>/dev/null || true" % WEBHOOK_LOG])
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def notified(entries=None):
    """(received time, notification status of the alert, alertname, fleet_host) of each alert of each notification."""
    out = []
    for entry in received() if entries is None else entries:
        for alert in entry["body"].get("alerts", []):
            labels = alert.get("labels", {})
            out.append((entry["received"], alert.get("status"), labels.get("alertname"), labels.get("fleet_host")))
    return out


def now():
    """The monitoring host's clock (the webhook log's times are its)."""
    return float(exec_in(monitor(), ["python3", "-c", "import time; print(time.time())"]))


def wait_notified(alertname, host, status, since, timeout):
    """Seconds from SINCE (the monitoring host's clock) until the webhook got ALERTNAME for HOST with STATUS
    (firing or resolved), or None after TIMEOUT seconds."""
    deadline = time.monotonic() + timeout
    while True:
        for at, got_status, name, fleet_host in notified():
            if at >= since and (name, fleet_host, got_status) == (alertname, host, status):
                return round(at - since, 1)
        if time.monotonic() > deadline:
            return None
        time.sleep(1)


def settings():
    """The scenario's monitoring settings (its converge.yml play vars): the intervals and the alerts' overrides."""
    path = os.path.join(os.environ["MOLECULE_SCENARIO_DIRECTORY"], "converge.yml")
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)[0]["vars"]


def seconds(duration):
    """A Prometheus duration (5s, 1m30s) in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    return sum(float(n) * units[u] for n, u in re.findall(r"([0-9]+)(ms|s|m|h|d)", duration))


def bound(alert_for, rate_based=False, extra=0.0):
    """The longest a fault can take to reach the webhook (docs/monitoring.md): the scrape that sees it, the evaluation
    that finds it, the alert's for:, a rate window when the expression is a rate, Alertmanager's group_wait; plus
    EXTRA (the gateway's own checks for an alert read from HAProxy) and 5 s for the HTTP hops and this test's polling."""
    s = settings()
    alerts = s.get("vllm_monitoring_alerts", {})
    total = (seconds(s["vllm_monitoring_scrape_interval"]) + seconds(s["vllm_monitoring_evaluation_interval"])
             + seconds(alerts.get(alert_for, "0s")) + seconds(s["vllm_monitoring_group_wait"]) + extra + 5)
    if rate_based:
        total += seconds(alerts.get("rate_window", "2m"))
    return total


def resolve_bound(extra=0.0):
    """The longest from the fault's end to the resolved notification: a scrape, an evaluation, Alertmanager's
    group_interval (resolved alerts go out with the group's next flush), plus EXTRA and 5 s."""
    s = settings()
    return (seconds(s["vllm_monitoring_scrape_interval"]) + seconds(s["vllm_monitoring_evaluation_interval"])
            + seconds(s["vllm_monitoring_group_interval"]) + extra + 5)


def running_config():
    """The configuration Prometheus runs (its /api/v1/status/config), parsed."""
    return yaml.safe_load(api(PROMETHEUS + "/api/v1/status/config")["data"]["yaml"])


def intervals():
    """(scrape, evaluation) intervals in seconds, as Prometheus runs them."""
    config = running_config()["global"]
    return seconds(config["scrape_interval"]), seconds(config["evaluation_interval"])


def assert_quiet(start, end, loaded):
    """Nothing paged in [START, END]: no alert firing at any evaluation, none pending after the first round that
    followed the configuration's load at LOADED, none in Alertmanager, nothing at the webhook. (A host's node target,
    with its fleet_vllm_info, can be scraped before its vLLM target is: FleetVllmEngineDown's third clause then holds
    for one evaluation, and its for: is what keeps that from paging.)"""
    scrape, evaluation = intervals()
    alerts = alerts_between(start, end, evaluation)
    assert {key: span for key, span in alerts.items() if key[2] == "firing"} == {}, alerts
    assert {key: span for key, span in alerts.items() if span[1] > loaded + 2 * scrape + evaluation} == {}, alerts
    assert api(ALERTMANAGER + "/api/v2/alerts") == []
    assert received() == []


def loaded_at():
    """When Prometheus last loaded its configuration (its own series, on the monitoring host's clock), or None
    before it has scraped itself once."""
    values = query('max(prometheus_config_last_reload_success_timestamp_seconds{job="prometheus"})')
    return float(values[0]["value"][1]) if values else None


def alerts_between(start, end, step):
    """Every alert Prometheus had, pending or firing, in [START, END] (its ALERTS series, every STEP seconds):
    {(alertname, fleet_host, alertstate): [first, last]} on the monitoring host's clock."""
    data = api(PROMETHEUS + "/api/v1/query_range?" + encode({"query": "ALERTS", "start": start, "end": end, "step": step}))
    assert data["status"] == "success", data
    out = {}
    for series in data["data"]["result"]:
        labels, times = series["metric"], [float(t) for t, dummy in series["values"]]
        out[(labels.get("alertname"), labels.get("fleet_host"), labels.get("alertstate"))] = [min(times), max(times)]
    return out
