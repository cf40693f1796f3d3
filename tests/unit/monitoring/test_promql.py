"""Issue 22: every series the alert rules and the Grafana dashboard of roles/vllm_monitoring name exists. A vllm: name
is one the real vLLM defines, with the suffix its kind is exported with (vllm/v1/metrics/loggers.py of 0.33.0 and of
0.16.0: docs/monitoring.md "Series per vLLM release"); a haproxy_ or node_ name is one tests/fixtures/monitoring/
series.txt lists, and that list is measured again here from HAProxy's and node exporter's own output when they are
installed. Every expression parses (promtool), the dashboard's with its Grafana variables substituted."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.request

import pytest

from conftest import free_port, prerequisite
from tests.helpers import haproxy, promql

SERIES = promql.series_fixture()
# Names neither vLLM's nor an exporter's: Prometheus's own up, and the node exporter's textfile collector's
# fleet_vllm_info and fleet_vllm_models_filesystem_info, which the monitoring role writes on each fleet host.
OTHER = {"up", "fleet_vllm_info", "fleet_vllm_models_filesystem_info"}
# The name of vLLM's API server's HTTP instrumentation (prometheus_fastapi_instrumentator's default metric, which vLLM
# adds: vllm/entrypoints/serve/instrumentator/metrics.py), on the engine's /metrics beside the vllm: series.
VLLM_HTTP = {"http_requests_total"}
NODE_EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("prometheus-node-exporter", path="/usr/bin")


@pytest.fixture(scope="module")
def exprs(tmp_path_factory):
    """[(where, expr)]: every alert's expr (rules rendered with the defaults) and every dashboard target."""
    rules = promql.render_rules(tmp_path_factory.mktemp("rules"))
    out = [("rule " + name, expr) for name, expr in promql.rule_exprs(rules)]
    out += [("panel " + title, expr) for title, expr in promql.dashboard_exprs()]
    return out


def names(exprs):
    return {name: where for where, expr in exprs for name in promql.metric_names(expr)}


def test_the_extractor_finds_metric_names_and_nothing_else():
    expr = ('label_replace(max by (host) (up{job="vllm", le=~"$1"}) == 0 or (a:b_total unless on (host) '
            'rate(c_d[2m] offset 5m) > 0.99e3), "x", "$1", "host", "(.*)") * on (m) group_left (n) sum(e) by (le) / bool f')
    assert promql.metric_names(expr) == {"up", "a:b_total", "c_d", "e", "f"}
    assert promql.grafana_to_promql('rate(x{host=~"$host", h="${host}"}[$__rate_interval])') == 'rate(x{host=~".*", h=".*"}[5m])'


def test_the_dashboard_is_importable():
    dashboard = json.loads(promql.DASHBOARD.read_text())
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"]
    assert dashboard["schemaVersion"] >= 39
    (host,) = [v for v in dashboard["templating"]["list"] if v["name"] == "host"]
    assert host["query"]["query"] == "label_values(fleet_vllm_info, host)"
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert all(p["datasource"]["uid"] == "${DS_PROMETHEUS}" for p in panels)
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


@prerequisite(promql.PROMTOOL is not None, "promtool is not installed (apt-get install prometheus)")
def test_every_expression_parses(exprs, tmp_path):
    proc = promql.promtool_check([expr for dummy, expr in exprs], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_name_is_vllm_an_exporter_or_known(exprs):
    used = names(exprs)
    assert {"vllm:num_requests_running", "haproxy_server_status", "node_filesystem_avail_bytes", "fleet_vllm_info"} <= set(used)
    unknown = {n: w for n, w in used.items() if not n.startswith(("vllm:", "haproxy_", "node_")) and n not in OTHER | VLLM_HTTP}
    assert not unknown, unknown


def test_every_exporter_name_is_in_the_series_fixture(exprs):
    listed = SERIES["haproxy 2.6"] | SERIES["prometheus-node-exporter 1.5"]
    missing = {n: w for n, w in names(exprs).items() if n.startswith(("haproxy_", "node_")) and n not in listed}
    assert not missing, missing


def _check_vllm(exprs, venv):
    loggers = next(venv.glob("lib/python3*/site-packages/vllm/v1/metrics/loggers.py"))
    defined = promql.vllm_series(loggers)
    assert "vllm:num_requests_running" in defined, loggers
    wrong = {n: w for n, w in names(exprs).items() if n.startswith("vllm:") and n not in defined}
    assert not wrong, "not series of the vLLM of %s: %s" % (venv, wrong)
    # http_requests_total{handler, method, status="5xx"}: vLLM adds the instrumentator's default metrics with the
    # status grouped, and leaves the OpenAI API's handlers counted.
    site = loggers.parents[3]
    attach = (site / "vllm" / "entrypoints" / "serve" / "instrumentator" / "metrics.py").read_text()
    call = re.search(r"Instrumentator\((.*?)\)\s*\.add\(\)\s*\.instrument\(app\)", attach, re.S)
    assert call, "vLLM of %s does not add the instrumentator's default metrics" % venv
    assert "should_group_status_codes" not in call.group(1) and "/v1" not in call.group(1), call.group(1)
    instrumentator = site / "prometheus_fastapi_instrumentator"
    assert re.search(r"should_group_status_codes: bool = True", (instrumentator / "instrumentation.py").read_text())
    default = (instrumentator / "metrics.py").read_text().split("\ndef default(", 1)[1]
    assert re.search(r'total_label_names = \(\s*"method",\s*"status",\s*"handler",\s*\)\s*TOTAL = Counter\(\s*'
                     r'name="http_requests_total",', default), "%s: no http_requests_total by method, status, handler" % instrumentator


@pytest.mark.vllm
def test_every_vllm_name_is_a_series_of_vllm_0_33(exprs, vllm_venv):
    _check_vllm(exprs, vllm_venv)


@pytest.mark.vllm
def test_every_vllm_name_is_a_series_of_vllm_0_16(exprs, vllm_venv_old):
    _check_vllm(exprs, vllm_venv_old)


def _scrape(url, timeout=20):
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                text = response.read().decode()
            return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
        except OSError:
            assert time.monotonic() < deadline, "nothing answered at %s" % url
            time.sleep(0.2)


@prerequisite(haproxy.HAPROXY is not None, "haproxy is not installed")
def test_the_haproxy_series_are_what_haproxy_exports(tmp_path):
    """HAProxy's exporter, with a frontend and a backend fleet_vllm as on a gateway: every name listed is exported,
    with the per-state series of haproxy_server_status that FleetVllmHostOutOfRotation reads."""
    stats, front = free_port(), free_port()
    config = tmp_path / "haproxy.cfg"
    config.write_text("\n".join([
        "defaults", "    mode http", "    timeout connect 5s", "    timeout client 30s", "    timeout server 30s",
        "frontend stats", "    bind 127.0.0.1:%d" % stats, "    http-request use-service prometheus-exporter",
        "frontend fleet_vllm", "    bind 127.0.0.1:%d" % front, "    default_backend fleet_vllm",
        "backend fleet_vllm", "    server gpu-node-01 127.0.0.1:%d" % free_port(), ""]))
    with haproxy.running(config, stats):
        url = "http://127.0.0.1:%d/metrics" % stats
        exported = _scrape(url)
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
    assert SERIES["haproxy 2.6"] <= exported, SERIES["haproxy 2.6"] - exported
    for state in ("DOWN", "UP", "MAINT", "DRAIN", "NOLB"):
        assert 'haproxy_server_status{proxy="fleet_vllm",server="gpu-node-01",state="%s"}' % state in text, state
    assert 'haproxy_frontend_http_responses_total{proxy="fleet_vllm",code="5xx"}' in text


@prerequisite(NODE_EXPORTER is not None, "prometheus-node-exporter is not installed")
def test_the_node_series_are_what_node_exporter_exports():
    port = free_port()
    proc = subprocess.Popen([NODE_EXPORTER, "--web.listen-address=127.0.0.1:%d" % port],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        exported = _scrape("http://127.0.0.1:%d/metrics" % port)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert SERIES["prometheus-node-exporter 1.5"] <= exported, SERIES["prometheus-node-exporter 1.5"] - exported
