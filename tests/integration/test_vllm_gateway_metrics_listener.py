"""The monitoring's way in (issue 22 item 2): the metrics listener of a front door and of a gateway, rendered from
the role's template (tests/integration/playbooks/vllm_gateway_render.yml) and run by this machine's HAProxy (Debian's
2.6.12) in front of stand-ins for the engine and the node exporter.

- It opens only with the monitoring's own token: not without it, not with the API key, not with a wrong one; and
  the token opens nothing on the inference listener.
- With the token it serves GET of the exporters' paths only: the engine's /metrics (which gets no credential), HAProxy's
  own exporter and the node exporter; any other path, however spelled, and any other method is refused before it
  reaches the engine - no inference through it (the next attacks on the same sink: encoded and dotted paths, an
  absolute URI, a second slash, a case change, HEAD/POST).
- With fleet_vllm_metrics_sources set, another address is refused even with the token.
- Without monitoring hosts the listener is not there at all."""

from __future__ import annotations

import http.client
import json

import pytest

from conftest import ROOT, free_port, prerequisite, run_playbook
from tests.helpers.haproxy import HAPROXY
from tests.helpers.haproxy import running as haproxy_running
from tests.helpers.standin_engine import StandInEngine

pytestmark = [
    pytest.mark.integration,
    prerequisite(HAPROXY, reason="haproxy is not installed (Debian: haproxy; tools/bootstrap.sh installs it)"),
]

PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "vllm_gateway_render.yml"
KEY = "k22-fleet.vllm-api-key~0123456789abcdef0123"
TOKEN = "m22-fleet.vllm-metrics~0123456789abcdef0123"


def request(port, path, token=None, method="GET", body=None):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    headers = {"Authorization": "Bearer " + token} if token is not None else {}
    if body is not None:
        headers["Content-Type"] = "application/json"
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def render(tmp_path, mode="frontdoor", **variables):
    config = tmp_path / ("haproxy-%s.cfg" % mode)
    run = run_playbook(PLAYBOOK, extra_vars=dict({
        "dest": str(config), "__vllm_gateway_mode": mode, "vllm_gateway_api_key": KEY,
        "vllm_gateway_bind_address": "127.0.0.1", "vllm_gateway_allow_plain_http": True,
        "vllm_gateway_check_model": "kimi-k2.5", "_vllm_gateway_socket": str(tmp_path / "admin.sock"),
        "__fleet_vllm_monitoring_on": True, "fleet_vllm_metrics_token": TOKEN, "fleet_vllm_metrics_sources": [],
        "fleet_vllm_dcgm_exporter": False, "vllm_gateway_backend_hosts": []}, **variables), timeout=300)
    assert run.rc == 0, run.stdout[-3000:]
    return config


@pytest.fixture
def front_door(tmp_path):
    engine, node = StandInEngine(), StandInEngine()
    port, metrics = free_port(), free_port()
    config = render(tmp_path, vllm_gateway_engine_port=engine.port, vllm_gateway_frontdoor_port=port,
                    fleet_vllm_metrics_port=metrics, _vllm_gateway_node_exporter_port=node.port)
    try:
        with haproxy_running(config, metrics):
            yield dict(port=port, metrics=metrics, config=config, engine=engine, node=node)
    finally:
        engine.close()
        node.close()


def test_the_listener_opens_with_the_monitoring_token_only(front_door):
    metrics = front_door["metrics"]
    assert TOKEN not in front_door["config"].read_text()  # its SHA-256 only, as for the key
    for token in (None, KEY, TOKEN[:-1] + "x", ""):
        status, dummy = request(metrics, "/metrics/vllm", token=token)
        assert status == 401, (token, status)
    assert front_door["engine"].seen == []
    # and the token opens nothing where the key is asked for
    status, dummy = request(front_door["port"], "/v1/models", token=TOKEN)
    assert status == 401
    assert front_door["engine"].seen == []


def test_the_token_gets_the_exporters_and_the_engine_never_sees_it(front_door):
    metrics = front_door["metrics"]
    status, body = request(metrics, "/metrics/vllm", token=TOKEN)
    assert status == 200 and json.loads(body)["path"] == "/metrics"
    method, path, headers = front_door["engine"].seen[-1]
    assert (method, path) == ("GET", "/metrics")
    assert not {name.lower() for name in headers} & {"authorization"}
    status, body = request(metrics, "/metrics/node", token=TOKEN)
    assert status == 200 and json.loads(body)["path"] == "/metrics"
    assert len(front_door["node"].seen) == 1
    status, body = request(metrics, "/metrics/haproxy", token=TOKEN)
    assert status == 200
    assert 'haproxy_server_status{proxy="fleet_vllm",server="engine",state="UP"}' in body
    assert 'haproxy_frontend_http_responses_total{proxy="fleet_vllm"' in body


@pytest.mark.parametrize("method,path", [
    ("POST", "/v1/chat/completions"),
    ("GET", "/v1/models"),
    ("POST", "/invocations"),
    ("GET", "/health"),
    ("GET", "/metrics"),
    ("GET", "/metrics/vllm/../../v1/models"),
    ("GET", "/metrics/vllm%2F..%2F..%2Fv1%2Fmodels"),
    ("GET", "//metrics/vllm"),
    ("GET", "/METRICS/VLLM"),
    ("GET", "/metrics/dcgm"),
    ("GET", "http://engine/v1/models"),
    ("POST", "/metrics/vllm"),
    ("PUT", "/metrics/node"),
    ("DELETE", "/metrics/haproxy"),
])
def test_nothing_else_goes_through_with_the_token(front_door, method, path):
    body = json.dumps({"model": "kimi-k2.5", "messages": [{"role": "user", "content": "hi"}]}) if method != "GET" else None
    status, dummy = request(front_door["metrics"], path, token=TOKEN, method=method, body=body)
    assert status in (404, 405), (method, path, status)
    assert front_door["engine"].seen == [] and front_door["node"].seen == []


def test_another_address_is_refused_even_with_the_token(tmp_path):
    engine = StandInEngine()
    metrics = free_port()
    config = render(tmp_path, vllm_gateway_engine_port=engine.port, vllm_gateway_frontdoor_port=free_port(),
                    fleet_vllm_metrics_port=metrics, fleet_vllm_metrics_sources=["192.0.2.0/24", "2001:db8::1"])
    try:
        with haproxy_running(config, metrics):
            status, dummy = request(metrics, "/metrics/vllm", token=TOKEN)
            assert status == 403
            assert engine.seen == []
    finally:
        engine.close()


def test_a_gateway_serves_its_own_exporter_and_no_engine(tmp_path):
    node = StandInEngine()
    metrics = free_port()
    config = render(tmp_path, mode="gateway", vllm_gateway_port=free_port(), fleet_vllm_metrics_port=metrics,
                    _vllm_gateway_node_exporter_port=node.port)
    try:
        with haproxy_running(config, metrics):
            assert request(metrics, "/metrics/haproxy", token=TOKEN)[0] == 200
            assert request(metrics, "/metrics/node", token=TOKEN)[0] == 200
            assert request(metrics, "/metrics/vllm", token=TOKEN)[0] == 404
    finally:
        node.close()


def test_without_monitoring_hosts_there_is_no_listener(tmp_path):
    config = render(tmp_path, __fleet_vllm_monitoring_on=False, fleet_vllm_metrics_port=free_port())
    text = config.read_text()
    assert "fleet_vllm_metrics" not in text and "prometheus-exporter" not in text
