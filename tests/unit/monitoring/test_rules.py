"""Issue 22: the alert rules of roles/vllm_monitoring (templates/fleet_vllm_rules.yml.j2), rendered as Ansible renders
them, held to promtool (Debian 12's Prometheus 2.42): the file loads (promtool check rules), each alert fires on the
series it is about and not on a healthy fleet, with the labels and annotations it should carry (promtool test rules,
rules_test.yml and annotations_test.yml), every threshold and every `for:` comes from vllm_monitoring_alerts, and
every alert names its fleet host in fleet_host, which the silences of a planned roll match."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from conftest import prerequisite
from tests.helpers import promql

HERE = promql.ROOT / "tests" / "unit" / "monitoring"
DEFAULTS = yaml.safe_load(promql.ALERT_VARS.read_text())
ALERT_DEFAULTS = DEFAULTS["__vllm_monitoring_alert_defaults"]
DURATION = re.compile(DEFAULTS["__vllm_monitoring_duration_pattern"])

needs_promtool = prerequisite(promql.PROMTOOL is not None, "promtool is not installed (apt-get install prometheus)")

# Every alert, the key of vllm_monitoring_alerts its `for:` reads and the keys of the thresholds its expr reads.
ALERTS = {
    "FleetVllmEngineDown": ("engine_down_for", []),
    "FleetVllmEngineWedged": ("wedged_for", ["rate_window"]),
    "FleetVllmAdmissionStalled": ("admission_stalled_for", []),
    "FleetVllmEngine5xxRate": ("engine_5xx_for", ["rate_window", "engine_5xx_ratio"]),
    "FleetVllmTtftP99High": ("ttft_for", ["rate_window", "ttft_p99_seconds"]),
    "FleetVllmQueueTimeHigh": ("queue_time_for", ["rate_window", "queue_time_p99_seconds"]),
    "FleetVllmKvCacheHigh": ("kv_cache_for", ["kv_cache_usage_ratio"]),
    "FleetVllmPreemptions": ("preemptions_for", ["rate_window", "preemptions_per_second"]),
    "FleetVllmHostOutOfRotation": ("out_of_rotation_for", []),
    "FleetVllmGateway5xxRate": ("gateway_5xx_for", ["rate_window", "gateway_5xx_ratio"]),
    "FleetVllmHaproxyDown": ("haproxy_down_for", []),
    "FleetVllmDrift": ("drift_for", []),
    "FleetVllmNodeDown": ("node_down_for", []),
    "FleetVllmNodeMemoryLow": ("node_memory_for", ["node_memory_avail_ratio"]),
    "FleetVllmModelsDiskLow": ("models_disk_for", ["models_disk_avail_ratio"]),
}

# Overrides that differ from every default and from each other: each shows up where its key is read, or not at all.
OVERRIDES = {key: ("%ds" % (31 + i) if key.endswith("_for") or key == "rate_window" else round(0.0123 + i / 1000, 4))
             for i, key in enumerate(sorted(ALERT_DEFAULTS))}


def promtool(*args, cwd=None):
    return subprocess.run([promql.PROMTOOL, *args], capture_output=True, text=True, timeout=300, check=False, cwd=cwd)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """The rules rendered with the role's defaults (vllm_monitoring_alerts {})."""
    return promql.render_rules(tmp_path_factory.mktemp("rules-defaults"))


@pytest.fixture(scope="module")
def overridden(tmp_path_factory):
    """The rules rendered with OVERRIDES."""
    return promql.render_rules(tmp_path_factory.mktemp("rules-overridden"), alerts=OVERRIDES)


def by_name(path):
    return {rule["alert"]: rule for rule in promql.rules(path)}


@needs_promtool
def test_rules_load_in_prometheus(rendered):
    proc = promtool("check", "rules", str(rendered))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: %d rules found" % len(ALERTS) in proc.stdout, proc.stdout


@needs_promtool
def test_alerts_fire_on_their_series_and_not_on_a_healthy_fleet(rendered):
    # rules_test.yml expects no annotations (promtool compares them): it runs on the rules without them.
    data = yaml.safe_load(rendered.read_text())
    for group in data["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations")
    (rendered.parent / "fleet_vllm_rules.labels.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    for name in ("rules_test.yml", "annotations_test.yml"):
        shutil.copy(HERE / name, rendered.parent / name)
        proc = promtool("test", "rules", name, cwd=rendered.parent)
        assert proc.returncode == 0, "%s:\n%s%s" % (name, proc.stdout[-6000:], proc.stderr[-3000:])


def test_every_alert_is_tested_firing_and_not_firing(rendered):
    assert set(by_name(rendered)) == set(ALERTS)
    fires, stays_quiet, annotated = set(), set(), set()
    for case in yaml.safe_load((HERE / "rules_test.yml").read_text())["tests"]:
        for check in case["alert_rule_test"]:
            (fires if check["exp_alerts"] else stays_quiet).add(check["alertname"])
    for case in yaml.safe_load((HERE / "annotations_test.yml").read_text())["tests"]:
        for check in case["alert_rule_test"]:
            assert all("exp_annotations" in alert for alert in check["exp_alerts"]), check
            annotated.add(check["alertname"])
    assert fires == set(ALERTS), set(ALERTS) ^ fires
    assert stays_quiet == set(ALERTS), set(ALERTS) ^ stays_quiet
    assert annotated == set(ALERTS), set(ALERTS) ^ annotated


def test_every_alert_names_its_fleet_host_severity_and_runbook(rendered):
    for name, rule in by_name(rendered).items():
        # fleet_host is what the silences of a planned roll match: set by label_replace in the expression itself.
        assert re.search(r'label_replace\(.*"fleet_host", "\$1", "(host|server)", "\(\.\*\)"\s*\)\s*$', rule["expr"], re.S), name
        assert rule["labels"] == {"severity": rule["labels"]["severity"]} and rule["labels"]["severity"] in ("page", "ticket"), name
        assert set(rule["annotations"]) == {"summary", "description", "runbook"}, name
        assert "{{ $labels.fleet_host }}" in rule["annotations"]["summary"], name
        assert "docs/monitoring.md, %s" % name in rule["annotations"]["runbook"], name
        assert DURATION.match(rule["for"]), name


def test_the_defaults_are_what_the_rules_read(rendered):
    rules = by_name(rendered)
    for name, (for_key, threshold_keys) in ALERTS.items():
        assert rules[name]["for"] == ALERT_DEFAULTS[for_key], name
        for key in threshold_keys:
            value = ALERT_DEFAULTS[key]
            assert ("[%s]" % value if key == "rate_window" else "> %s" % value) in rules[name]["expr"].replace("< ", "> "), (name, key)
    # The models' filesystem is the one each host names in fleet_vllm_models_filesystem_info, not a setting.
    expr = rules["FleetVllmModelsDiskLow"]["expr"]
    assert re.search(r'\band on \(host, mountpoint\)\s+fleet_vllm_models_filesystem_info\{job="node"\}', expr), expr
    assert "mountpoint=" not in expr, expr


@needs_promtool
def test_every_threshold_and_duration_comes_from_vllm_monitoring_alerts(overridden):
    """Each key overridden shows up where the alert reads it, no default is left in any expression, and the
    result still loads (here with durations of about 30s)."""
    proc = promtool("check", "rules", str(overridden))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rules = by_name(overridden)
    used = set()
    for name, (for_key, threshold_keys) in ALERTS.items():
        assert rules[name]["for"] == OVERRIDES[for_key], name
        used.add(for_key)
        for key in threshold_keys:
            wanted = "[%s]" % OVERRIDES[key] if key == "rate_window" else " %s" % OVERRIDES[key]
            assert wanted in rules[name]["expr"], (name, key, rules[name]["expr"])
            used.add(key)
        assert "[%s]" % ALERT_DEFAULTS["rate_window"] not in rules[name]["expr"], name
    assert used == set(ALERT_DEFAULTS), set(ALERT_DEFAULTS) ^ used


def test_every_default_duration_is_a_prometheus_duration():
    for key, value in ALERT_DEFAULTS.items():
        if key.endswith("_for") or key == "rate_window":
            assert isinstance(value, str) and DURATION.match(value), key
        else:
            assert isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0, key


@needs_promtool
@pytest.mark.parametrize("duration", ["30s", "5m", "1h30m", "2d", "1w", "1y", "500ms", "1m30s500ms", "0s",
                                      "", "30", "1.5h", "30 s", "s", "1m1h", "30sec", "-5m", "5M", "1h 30m"])
def test_the_duration_pattern_is_what_prometheus_takes(duration, tmp_path):
    """__vllm_monitoring_duration_pattern accepts a duration exactly when Prometheus 2.42 takes it as a `for:`."""
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "up == 0", "for": duration}]}]}))
    takes = promtool("check", "rules", str(path)).returncode == 0
    assert bool(DURATION.match(duration)) == takes, (duration, takes)


def test_the_argument_spec_lists_every_key():
    """meta/argument_specs.yml documents vllm_monitoring_alerts key for key, durations as str, thresholds as
    numbers, no default (the defaults are vars/main.yml's)."""
    specs = promql.ROLE / "meta" / "argument_specs.yml"
    spec = yaml.safe_load(specs.read_text())["argument_specs"]["main"]["options"]["vllm_monitoring_alerts"] if specs.exists() else {}
    if "options" not in spec:
        pytest.fail("%s has no options for vllm_monitoring_alerts" % specs)
    options = spec["options"]
    assert set(options) == set(ALERT_DEFAULTS), set(options) ^ set(ALERT_DEFAULTS)
    for key, option in options.items():
        assert "default" not in option, key
        assert option["type"] == ("str" if isinstance(ALERT_DEFAULTS[key], str) else "float"), key
