"""The fleet's monitoring after deploy.yml and its rerun (issue 22): Prometheus on the monitoring host scrapes every
host of the inventory through its metrics listener (TLS, the monitoring's token), the fleet's alert rules are loaded
and none fires on the healthy fleet, fleet_vllm_info says what each host runs; the metrics listeners open to the
monitoring's token only, from any host, and never to an inference path; the node exporters listen on loopback."""

import time

import fleet_hosts as fleet
import gateway_hosts as gw
import monitoring_hosts as mon

testinfra_hosts = fleet.testinfra_hosts()
METRICS_PORT = 9180


def token():
    return fleet.group_vars()["fleet_vllm_metrics_token"]


def up_targets(timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        targets = mon.targets()
        if all(t["health"] == "up" for t in targets) or time.monotonic() > deadline:
            return targets
        time.sleep(2)


def test_every_host_of_the_inventory_is_scraped_and_up():
    targets = up_targets()
    servers, lb, monitor = fleet.instances(), gw.gateway(), mon.monitor()
    by_job = {}
    for target in targets:
        by_job.setdefault(target["labels"]["job"], set()).add((target["labels"]["host"], target["labels"]["fleet_role"]))
    assert by_job["vllm"] == {(name, "server") for name in servers}
    assert by_job["haproxy"] == {(name, "server") for name in servers} | {(lb, "gateway")}
    assert by_job["node"] == {(name, "server") for name in servers} | {(lb, "gateway"), (monitor, "monitoring")}
    # DCGM's exporter where a host says it runs one (the first fleet host, group fleet_vllm_test_dcgm: the fixture)
    assert by_job["dcgm"] == {(servers[0], "server")}
    assert [(t["scrapeUrl"], t["lastError"]) for t in targets if t["health"] != "up"] == []
    # through the listeners, in TLS (the scenario's CA, each host's name)
    assert {t["scrapeUrl"].split("://")[0] for t in targets if t["labels"]["fleet_role"] != "monitoring"} == {"https"}


def test_the_rules_are_loaded_and_none_fires_on_the_healthy_fleet():
    groups = mon.api(mon.PROMETHEUS + "/api/v1/rules")["data"]["groups"]
    names = {rule["name"] for group in groups for rule in group["rules"]}
    assert {"FleetVllmEngineDown", "FleetVllmEngineWedged", "FleetVllmHostOutOfRotation", "FleetVllmDrift"} <= names
    assert [r for group in groups for r in group["rules"] if r.get("health") != "ok"] == []
    assert mon.query('ALERTS{alertstate="firing"}') == []


def test_fleet_vllm_info_says_what_each_host_runs(host):
    name = fleet.name_of(host)
    series = mon.query('fleet_vllm_info{host="%s"}' % name)
    assert len(series) == 1, series
    labels = series[0]["metric"]
    data = fleet.facts(host)
    assert labels["vllm_version"] == data["version"]
    assert labels["model"] == fleet.REPO
    assert labels["model_revision"] == fleet.pristine(data).rsplit("/", 1)[1]
    assert labels["tensor_parallel_size"] == str(fleet.group_vars().get("fleet_vllm_tensor_parallel_size", 8))
    # the KV-cache dtype the decision gave is the one the engine says it runs with
    engine = mon.query('vllm:cache_config_info{host="%s"}' % name)
    assert engine and labels["kv_cache_dtype"] == engine[0]["metric"]["cache_dtype"], (labels, engine)
    # one query shows the fleet's drift: none here
    assert mon.query("count(count by (vllm_commit, vllm_version, model_revision, kv_cache_dtype) (fleet_vllm_info)) > 1") == []


def test_the_node_exporter_listens_on_loopback_only(host):
    listening = [line.split()[3] for line in host.check_output("ss -Htln").splitlines()]
    assert [a for a in listening if a.endswith(":9100")] == ["127.0.0.1:9100"], listening


def test_the_metrics_listeners_need_the_monitorings_token_from_another_host():
    """From the gateway host, which is no monitoring host: nothing without the token, nothing with the API key, and with
    the token no inference path - only the exporters."""
    lb, key, body = gw.gateway(), fleet.api_key(), gw.chat_body()
    asks = []
    for name in fleet.instances():
        asks += [(name, METRICS_PORT, "GET", "/metrics/vllm", "", ""), (name, METRICS_PORT, "GET", "/metrics/vllm", key, "")]
        asks += [(name, METRICS_PORT, "POST", "/v1/chat/completions", token(), body),
                 (name, METRICS_PORT, "GET", "/v1/models", token(), ""),
                 (name, METRICS_PORT, "POST", "/metrics/vllm", token(), body)]
        asks += [(name, METRICS_PORT, "GET", path, token(), "") for path in ("/metrics/vllm", "/metrics/haproxy", "/metrics/node")]
        asks += [(name, fleet.FRONTDOOR_PORT, "GET", "/v1/models", token(), "")]
    answers = gw.requests_from(lb, asks)
    for ask, (status, text) in zip(asks, answers):
        dummy, port, method, path, credential, dummy = ask
        if port == fleet.FRONTDOOR_PORT or credential != token():
            assert status == 401, (ask[:4], status, text)
        elif method == "GET" and path.startswith("/metrics/"):
            assert status == 200, (ask[:4], status, text[:300])
        else:
            assert status in (404, 405), (ask[:4], status, text)
    vllm_metrics = [text for ask, (status, text) in zip(asks, answers) if ask[3] == "/metrics/vllm" and status == 200]
    assert vllm_metrics and all("vllm:num_requests_running" in text for text in vllm_metrics)


def test_alertmanagers_file_is_not_world_readable():
    out = mon.exec_in(mon.monitor(), ["stat", "-c", "%a %U:%G", "/etc/prometheus/alertmanager.yml",
                                      "/etc/prometheus/fleet_vllm_metrics.token"]).split("\n")
    assert [line for line in out if line] == ["640 root:prometheus", "640 root:prometheus"]


def test_the_dcgm_exporter_is_scraped_through_the_listener():
    """The fixture's 8 GPUs (the RTX PRO 6000 host of the fixture nvidia-smi) with the PCIe link fields the docs name,
    labelled with the host they are on."""
    name = fleet.instances()[0]
    for field in ("DCGM_FI_DEV_PCIE_LINK_GEN", "DCGM_FI_DEV_PCIE_MAX_LINK_GEN", "DCGM_FI_DEV_PCIE_LINK_WIDTH", "DCGM_FI_DEV_XID_ERRORS"):
        series = mon.query('%s{job="dcgm"}' % field)
        assert {s["metric"]["host"] for s in series} == {name}, (field, series)
        assert len({s["metric"]["UUID"] for s in series}) == 8, (field, series)
