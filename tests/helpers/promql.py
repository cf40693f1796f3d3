"""The PromQL of the monitoring role (roles/vllm_monitoring): the alert rules rendered from their template as
Ansible renders them, every expression of the rules and of the Grafana dashboard, the metric names each one
names, and promtool's verdict on them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "vllm_monitoring"
RULES_TEMPLATE = ROLE / "templates" / "fleet_vllm_rules.yml.j2"
DASHBOARD = ROLE / "files" / "fleet_vllm_dashboard.json"
ALERT_VARS = ROLE / "vars" / "main.yml"
PROMTOOL = shutil.which("promtool")

# Every function of PromQL (Prometheus 2.42) and every aggregation: a name followed by "(" is one of them, and
# a name that is one of these and is not followed by "(" would still not be a metric name in the rules.
KEYWORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
    "atan2", "inf", "nan",
}


def render_rules(dest, alerts=None):
    """Render the rules template into dest (a directory) as the role does: ansible.builtin.template with the
    role's vars/main.yml (include_vars) and the user's vllm_monitoring_alerts (default {}). Returns the
    rendered file's path."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / "fleet_vllm_rules.yml"
    playbook = dest / "render.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Render the alert rules", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "tasks": [
            {"name": "Read the role's vars", "ansible.builtin.include_vars": {"file": str(ALERT_VARS)}},
            {"name": "Render", "ansible.builtin.template": {"src": str(RULES_TEMPLATE), "dest": str(target), "mode": "0644"}},
        ],
    }], sort_keys=False))
    extra = {"vllm_monitoring_alerts": alerts or {}}
    bindir = Path(sys.executable).parent
    env = dict(os.environ, ANSIBLE_INJECT_FACT_VARS="false", ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false", PATH=os.pathsep.join([str(bindir), os.environ.get("PATH", "")]))
    proc = subprocess.run([str(bindir / "ansible-playbook"), str(playbook), "-e", json.dumps(extra)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        raise AssertionError("rendering %s failed:\n%s\n%s" % (RULES_TEMPLATE, proc.stdout[-3000:], proc.stderr[-3000:]))
    return target


def rules(path):
    """The rules of a rendered rules file, as parsed: [{alert, expr, for, labels, annotations}]."""
    return [rule for group in yaml.safe_load(Path(path).read_text())["groups"] for rule in group["rules"]]


def rule_exprs(path):
    """[(alert name, expr)] of a rendered rules file."""
    return [(rule.get("alert") or rule.get("record"), rule["expr"]) for rule in rules(path)]


def grafana_to_promql(expr):
    """A dashboard expression as Prometheus would get it from Grafana, near enough to parse: Grafana's own
    intervals ($__rate_interval, $__interval, $__range) become 5m, any other variable ($host, ${host},
    [[host]]) the regex .* it is with "All" selected."""
    expr = re.sub(r"\$\{__\w+\}|\$__\w+", "5m", expr)
    return re.sub(r"\$\{\w+(:\w+)?\}|\$\w+|\[\[\w+\]\]", ".*", expr)


def dashboard_exprs(path=DASHBOARD):
    """[(panel title, expr)] of every target of every panel of the dashboard (rows' panels included), with
    Grafana's variables substituted (grafana_to_promql)."""
    out = []

    def walk(panels):
        for panel in panels:
            for target in panel.get("targets", []):
                if target.get("expr"):
                    out.append((panel.get("title", ""), grafana_to_promql(target["expr"])))
            walk(panel.get("panels", []))

    walk(json.loads(Path(path).read_text())["panels"])
    return out


def metric_names(expr):
    """The metric names an expression selects. Strings, label matchers, range durations and the label lists of
    by/without/on/ignoring/group_left/group_right go first; what is left that looks like a name, is not followed
    by "(" (a function or an aggregation) and is not a keyword is a metric name."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    text = re.sub(r"\{[^}]*\}", "{}", text)
    text = re.sub(r"\[[^\]]*\]", "[]", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w:.])[a-zA-Z_:][a-zA-Z0-9_:]*", text):
        if text[match.end():].lstrip().startswith("("):
            continue
        if match.group(0).lower() in KEYWORDS:
            continue
        names.add(match.group(0))
    return names


def promtool_check(exprs, directory):
    """promtool check rules on the expressions, each as a recording rule: the CompletedProcess (rc 0 when every
    one parses)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "exprs.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "exprs", "rules": [
        {"record": "fleet_vllm:expr_%d" % i, "expr": expr} for i, expr in enumerate(exprs)]}]}))
    return subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=120, check=False)


def vllm_series(loggers_py):
    """{exposition name: kind} of the vLLM series defined in a vLLM's vllm/v1/metrics/loggers.py: a gauge is
    exported under its name, a counter with _total, a histogram with _bucket, _sum and _count (prometheus_client).
    Read from the source: each definition is self._gauge_cls / _counter_cls / _histogram_cls(name="vllm:...")."""
    source = Path(loggers_py).read_text()
    out = {}
    for kind, name in re.findall(r"_(gauge|counter|histogram)_cls\(\s*name=\"(vllm:[a-zA-Z0-9_:]+)\"", source):
        suffixes = {"gauge": [""], "counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}[kind]
        for suffix in suffixes:
            out[name + suffix] = kind
    return out


def series_fixture(path=ROOT / "tests" / "fixtures" / "monitoring" / "series.txt"):
    """{section: set of names} of tests/fixtures/monitoring/series.txt ("[exporter version]" then one name a
    line; # starts a comment)."""
    sections = {}
    current = None
    for line in Path(path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), set())
        else:
            current.add(line)
    return sections
