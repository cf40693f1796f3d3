"""The monitoring's own faults never hold up what serves, and a configuration Prometheus refuses is reported while the
old one keeps serving (issue 22 item 9; faults.yml made them):
  - with the monitoring host down, deploy.yml rolled every fleet host onto the new setting, each host's silence
    skipped with a warning naming it, and the run reported that host unreachable at its end (exit code 4);
  - a CA file its user prometheus cannot read passed promtool (run as root) and was refused at the reload: the run
    failed saying so, and Prometheus kept the configuration it had; the next good run brought it to the new one."""

import json
import os

import fleet_hosts as fleet
import monitoring_hosts as mon

testinfra_hosts = [f"podman://{name}" for name in fleet.instances() + fleet.instances("fleet_vllm_newcomers")]


def recorded(name):
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "prometheus-%s.json" % name), encoding="utf-8") as handle:
        return json.load(handle)


def test_with_the_monitoring_host_down_the_roll_went_on_and_warned(host):
    run = fleet.load_run("monitor-down")
    name, monitor = fleet.name_of(host), mon.monitor()
    assert run["rc"] == 4, run["output_tail"][-3000:]
    assert run["recap"][name]["failed"] == 0 and run["recap"][name]["unreachable"] == 0, run["recap"]
    # the monitoring's play, the last, met the host down and said so
    assert run["recap"][monitor]["unreachable"] == 1 and run["recap"][monitor]["failed"] == 0, run["recap"]
    words = fleet.words(run["by_host"].get(name, ""))
    assert "WARNING: no silence for %s's planned restart on %s" % (name, monitor) in words, words[-3000:]
    # and the host was rolled: its engine runs the new setting
    data = fleet.facts(host, refresh=True)
    assert data["unit"]["ActiveState"] == "active"
    cmdline = data["cmdline"] or []
    assert "--max-model-len" in cmdline and cmdline[cmdline.index("--max-model-len") + 1] == "4096", cmdline


def test_a_configuration_prometheus_refuses_is_reported_and_the_old_one_keeps_serving():
    run = fleet.load_run("reload-refused")
    assert run["rc"] != 0
    words = " ".join(run["output_tail"].split())
    assert "refused the configuration written to /etc/prometheus/prometheus.yml and keeps serving the one it had" in words, words[-3000:]
    before, after = recorded("before-refused"), recorded("after-refused")
    assert before["runtime"]["reloadConfigSuccess"] is True
    assert after["runtime"]["reloadConfigSuccess"] is False
    assert after["runtime"]["lastConfigTime"] == before["runtime"]["lastConfigTime"]
    # The file was written (promtool, run as root, took it) and Prometheus read it, but its scrape pools could not
    # open the CA: they kept the old configuration and every target is still scraped. (Its /api/v1/status/config
    # shows the file read, not what scrapes: Prometheus 2.42 gives it the new one before the scrape manager refuses.)
    assert "root-only-ca" in after["file"] and "root-only-ca" not in before["file"]
    assert "root-only-ca" in after["config"] and "root-only-ca" not in before["config"]
    assert [(t["scrapeUrl"], t["lastError"]) for t in after["targets"] if t["health"] != "up"] == []
    assert len(after["targets"]) == len(before["targets"])


def test_the_next_good_run_brings_prometheus_to_the_configuration_written():
    run = fleet.load_run("reload-again")
    assert run["rc"] == 0, run["output_tail"][-3000:]
    runtime = mon.api(mon.PROMETHEUS + "/api/v1/status/runtimeinfo")["data"]
    assert runtime["reloadConfigSuccess"] is True
    assert runtime["lastConfigTime"] != recorded("after-refused")["runtime"]["lastConfigTime"]
    assert "root-only-ca" not in mon.api(mon.PROMETHEUS + "/api/v1/status/config")["data"]["yaml"]
