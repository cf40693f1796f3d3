"""The monitoring host's files, rendered from roles/vllm_monitoring's own templates, defaults and variables on the
controller for an inventory written here (tests/integration/playbooks/vllm_monitoring_render.yml), held to the tools
Debian 12 runs them with (promtool 2.42, amtool 0.25):

- prometheus.yml passes `promtool check config` (which loads the rendered rules too), and its scrape targets are
  exactly the inventory's: vllm the fleet hosts, haproxy and node the fleet hosts and the gateways (node also the
  monitoring host's own exporter on loopback), dcgm the fleet hosts that set fleet_vllm_dcgm_exporter; each labelled
  with its host and fleet_role, a TLS front door reached in https by its certificate's name. A host added to the
  inventory is scraped, a host removed is not.
- alertmanager.yml passes `amtool check-config`; each receiver gets the severities it asks for (amtool's own routing
  test), and without receivers only the UI receiver is left.
- roles/vllm_monitoring/tasks/check.yml refuses each bad setting naming its variable, and passes the defaults.
- The node exporter's textfile (fleet_vllm.prom.j2) stays valid exposition format whatever the label values hold (a
  quote, a backslash, a line feed), and gives those values back as they were."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from conftest import ROOT, prerequisite, run_playbook
from tests.helpers import tls

PROMTOOL = shutil.which("promtool")
AMTOOL = shutil.which("amtool")

pytestmark = [pytest.mark.integration]
needs_promtool = prerequisite(PROMTOOL is not None, "promtool is not installed (apt-get install prometheus)")
needs_amtool = prerequisite(AMTOOL is not None, "amtool is not installed (apt-get install prometheus-alertmanager)")

RENDER = ROOT / "tests" / "integration" / "playbooks" / "vllm_monitoring_render.yml"
CHECK = ROOT / "tests" / "integration" / "playbooks" / "vllm_monitoring_check.yml"
CHECK_TASK = "Check the monitoring settings that argument specs cannot express"
TOKEN = "m22-fleet.vllm-metrics~0123456789abcdef0123"
PORT = 9180  # fleet_vllm_metrics_port's default

# Two fleet hosts (one with a TLS front door, one with DCGM), a gateway (with fleet_vllm_dcgm_exporter set, which a
# gateway has no use for) and the monitoring host.
FLEET = {
    "vllm_servers": {
        "gpu-a": {"ansible_host": "10.0.0.11", "fleet_vllm_dcgm_exporter": True},
        "gpu-b": {"ansible_host": "10.0.0.12", "vllm_gateway_tls_certificate": "/etc/haproxy/gpu-b.pem",
                  "vllm_gateway_backend_tls_name": "gpu-b.fleet.example"},
    },
    "vllm_gateways": {"gw-a": {"fleet_vllm_dcgm_exporter": True}},
    "vllm_monitoring": {"mon-a": {}},
}
# The same fleet after gpu-b left and gpu-c (reached by vllm_gateway_address, with DCGM) joined.
CHANGED = {
    "vllm_servers": {
        "gpu-a": FLEET["vllm_servers"]["gpu-a"],
        "gpu-c": {"ansible_host": "10.0.0.99", "vllm_gateway_address": "10.0.0.13", "fleet_vllm_dcgm_exporter": "true"},
    },
    "vllm_gateways": FLEET["vllm_gateways"],
    "vllm_monitoring": FLEET["vllm_monitoring"],
}
RECEIVERS = [
    {"name": "oncall", "webhook_url": "https://hooks.example/page?token=s3cr3t-page", "severities": ["page"]},
    {"name": "tickets", "webhook_url": "http://tickets.example/hook", "severities": ["ticket"]},
    {"name": "everything", "webhook_url": "https://all.example?token=s3cr3t-all"},
]


def write_inventory(directory, groups):
    path = directory / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {name: {"hosts": hosts} for name, hosts in groups.items()}}}))
    return path


def render(directory, groups, templates=None, **variables):
    """Render the role's templates (default: the monitoring host's three) for the inventory GROUPS into DIRECTORY, with
    the rules file and the token file prometheus.yml names there (the token written, as the role writes it)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "token").write_text(TOKEN)
    extra = {"dest": str(directory), "_vllm_monitoring_rules_file": str(directory / "fleet_vllm_rules.yml"),
             "_vllm_monitoring_token_file": str(directory / "token"), "fleet_vllm_metrics_token": TOKEN, **variables}
    if templates is not None:
        extra["templates"] = templates
    run = run_playbook(RENDER, "-i", write_inventory(directory, groups), extra_vars=extra, timeout=300)
    assert run.rc == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return directory


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """FLEET rendered with RECEIVERS and a CA file (its gpu-b serves in TLS)."""
    directory = tmp_path_factory.mktemp("fleet")
    dummy, ca = tls.make_ca(directory)
    return render(directory, FLEET, vllm_monitoring_receivers=RECEIVERS, vllm_monitoring_ca_file=str(ca))


@pytest.fixture(scope="module")
def changed(tmp_path_factory):
    """CHANGED rendered with the defaults: no receiver, no CA (no TLS host left)."""
    return render(tmp_path_factory.mktemp("changed"), CHANGED)


def promtool(*args, stdin=None):
    return subprocess.run([PROMTOOL, *args], input=stdin, capture_output=True, text=True, timeout=120, check=False)


def amtool(*args):
    return subprocess.run([AMTOOL, *args], capture_output=True, text=True, timeout=120, check=False)


def scrape_targets(directory):
    """{job: {(target, host, fleet_role, scheme, metrics path)}} of the fleet's jobs of a rendered prometheus.yml."""
    config = yaml.safe_load((directory / "prometheus.yml").read_text())
    out = {}
    for job in config["scrape_configs"]:
        entries = out.setdefault(job["job_name"], set())
        for static in job.get("static_configs") or []:
            labels = static.get("labels", {})
            assert set(labels) <= {"host", "fleet_role", "__scheme__", "__metrics_path__"}, (job["job_name"], labels)
            for target in static["targets"]:
                entries.add((target, labels["host"], labels["fleet_role"], labels.get("__scheme__", job.get("scheme", "http")),
                             labels.get("__metrics_path__", job.get("metrics_path", "/metrics"))))
    return out


def fleet_jobs(hosts, job):
    """The entries of JOB for HOSTS: (name, address, fleet_role, scheme)."""
    return {("%s:%d" % (address, PORT), name, role, scheme, "/metrics/" + job) for name, address, role, scheme in hosts}


MONITORING_NODE = ("127.0.0.1:9100", "mon-a", "monitoring", "http", "/metrics")


@needs_promtool
def test_prometheus_takes_the_configuration_and_its_rules(fleet):
    config = yaml.safe_load((fleet / "prometheus.yml").read_text())
    assert config["rule_files"] == [str(fleet / "fleet_vllm_rules.yml")]
    assert {job["authorization"]["credentials_file"] for job in config["scrape_configs"] if "authorization" in job} == {str(fleet / "token")}
    assert TOKEN not in (fleet / "prometheus.yml").read_text()
    proc = promtool("check", "config", str(fleet / "prometheus.yml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 1 rule files found" in proc.stdout and "SUCCESS: 15 rules found" in proc.stdout, proc.stdout


def assert_fleet_targets(directory, servers, dcgm):
    """The jobs of the rendered prometheus.yml in DIRECTORY are these servers', the gateway gw-a's and the monitoring
    host's own node exporter; the targets by job, for more checks."""
    gateways = [("gw-a", "gw-a", "gateway", "http")]
    targets = scrape_targets(directory)
    assert targets["vllm"] == fleet_jobs(servers, "vllm")
    assert targets["haproxy"] == fleet_jobs(servers + gateways, "haproxy")
    assert targets["node"] == fleet_jobs(servers + gateways, "node") | {MONITORING_NODE}
    assert targets["dcgm"] == fleet_jobs(dcgm, "dcgm")
    return targets


def test_the_scrape_targets_are_the_inventorys(fleet):
    servers = [("gpu-a", "10.0.0.11", "server", "http"), ("gpu-b", "gpu-b.fleet.example", "server", "https")]
    # fleet_vllm_dcgm_exporter: gpu-a only; gw-a sets it too, and a gateway has no GPU.
    targets = assert_fleet_targets(fleet, servers, dcgm=servers[:1])
    assert targets["prometheus"] == {("127.0.0.1:9090", "mon-a", "monitoring", "http", "/metrics")}
    assert targets["alertmanager"] == {("127.0.0.1:9093", "mon-a", "monitoring", "http", "/metrics")}
    # TLS front doors: the CA given checks every certificate.
    config = yaml.safe_load((fleet / "prometheus.yml").read_text())
    tls = {job["job_name"]: job.get("tls_config") for job in config["scrape_configs"]
           if job["job_name"] in targets and job["job_name"] not in ("prometheus", "alertmanager")}
    assert tls == {name: {"ca_file": str(fleet / "ca.pem")} for name in ("vllm", "haproxy", "node", "dcgm")}


def test_a_serving_groups_headless_rank_has_no_engine_to_scrape(tmp_path):
    """A serving group (issue 26): gpu-a and gpu-b serve one copy, gpu-a the head. Only the head has an API server, so
    only it is in the vllm job; both are still scraped for HAProxy (their front doors) and the node."""
    group = {"fleet_vllm_serving_group": "copy_a"}
    groups = {
        "vllm_servers": {"gpu-a": {"ansible_host": "10.0.0.11", **group}, "gpu-b": {"ansible_host": "10.0.0.12", **group},
                         "gpu-c": {"ansible_host": "10.0.0.13"}},
        "copy_a": {"gpu-a": {}, "gpu-b": {}},
        "vllm_gateways": FLEET["vllm_gateways"],
        "vllm_monitoring": FLEET["vllm_monitoring"],
    }
    targets = scrape_targets(render(tmp_path, groups))
    servers = [("gpu-a", "10.0.0.11", "server", "http"), ("gpu-b", "10.0.0.12", "server", "http"),
               ("gpu-c", "10.0.0.13", "server", "http")]
    assert targets["vllm"] == fleet_jobs([servers[0], servers[2]], "vllm")
    assert targets["node"] == fleet_jobs(servers + [("gw-a", "gw-a", "gateway", "http")], "node") | {MONITORING_NODE}


@needs_promtool
def test_a_host_that_joins_is_scraped_and_one_that_leaves_is_not(changed):
    proc = promtool("check", "config", str(changed / "prometheus.yml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    servers = [("gpu-a", "10.0.0.11", "server", "http"), ("gpu-c", "10.0.0.13", "server", "http")]
    assert_fleet_targets(changed, servers, dcgm=servers)
    text = (changed / "prometheus.yml").read_text()
    assert "gpu-b" not in text and "10.0.0.99" not in text and "tls_config" not in text


def checked_alertmanager(directory):
    """The rendered alertmanager.yml in DIRECTORY, once amtool check-config took it: (its path, its content)."""
    path = str(directory / "alertmanager.yml")
    proc = amtool("check-config", path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return path, yaml.safe_load((directory / "alertmanager.yml").read_text())


@needs_amtool
def test_each_receiver_gets_the_severities_it_asks_for(fleet):
    path, config = checked_alertmanager(fleet)
    assert config["route"]["receiver"] == "fleet_vllm_ui_only"
    assert [(r["receiver"], r.get("matchers"), r["continue"]) for r in config["route"]["routes"]] == [
        ("oncall", ['severity=~"page"'], True), ("tickets", ['severity=~"ticket"'], True), ("everything", None, True)]
    assert {r["name"]: [w["url"] for w in r.get("webhook_configs", [])] for r in config["receivers"]} == dict(
        {"fleet_vllm_ui_only": []}, **{r["name"]: [r["webhook_url"]] for r in RECEIVERS})
    for severity, receivers in (("page", "oncall,everything"), ("ticket", "tickets,everything"), ("other", "everything")):
        proc = amtool("config", "routes", "test", "--config.file=" + path, "alertname=FleetVllmEngineDown", "severity=" + severity)
        assert proc.stdout.strip() == receivers, (severity, proc.stdout, proc.stderr)


@needs_amtool
def test_without_receivers_alerts_stay_in_the_ui(changed):
    path, config = checked_alertmanager(changed)
    assert config["receivers"] == [{"name": "fleet_vllm_ui_only"}]
    assert "routes" not in config["route"] and config["route"]["receiver"] == "fleet_vllm_ui_only"
    proc = amtool("config", "routes", "test", "--config.file=" + path, "alertname=FleetVllmEngineDown", "severity=page")
    assert proc.stdout.strip() == "fleet_vllm_ui_only", proc.stdout + proc.stderr


# ---- the checks of the settings -----------------------------------------------------------------------------------


def check(tmp_path, groups=None, **variables):
    """roles/vllm_monitoring/tasks/check.yml against localhost with the role's defaults and variables, VARIABLES over
    them, for the inventory GROUPS (none: localhost alone): (its result, the run)."""
    args = ["-i", write_inventory(tmp_path, groups)] if groups else []
    run = run_playbook(CHECK, *args, extra_vars=variables, timeout=300)
    results = [task["hosts"]["localhost"] for play in run.out["plays"] for task in play["tasks"]
               if task["task"]["name"].endswith(CHECK_TASK) and "localhost" in task["hosts"]]
    assert len(results) == 1, run.stdout[-3000:] + run.stderr[-3000:]
    assert (run.rc == 0) == (not results[0].get("failed")), run.stdout[-3000:]
    return results[0], run


def receiver(name="oncall", url="https://hooks.example/page?token=s3cr3t"):
    return {"vllm_monitoring_receivers": [{"name": name, "webhook_url": url}]}


WITHOUT_TLS = {"vllm_servers": {"gpu-a": FLEET["vllm_servers"]["gpu-a"]}, "vllm_gateways": FLEET["vllm_gateways"],
               "vllm_monitoring": FLEET["vllm_monitoring"]}


@pytest.mark.parametrize("groups,variables,named", [
    pytest.param(WITHOUT_TLS, receiver(url="https://hooks.example/pa\nge?token=s3cr3t"), ['vllm_monitoring_receivers: "oncall"'],
                 id="webhook-url-with-a-line-feed"),
    pytest.param(WITHOUT_TLS, receiver(url="https://fleet:s3cr3t@hooks.example/page"), ['vllm_monitoring_receivers: "oncall"'],
                 id="webhook-url-with-a-user-and-password"),
    pytest.param(WITHOUT_TLS, receiver(name="on call"), ['vllm_monitoring_receivers: "on call"'], id="receiver-name-with-a-blank"),
    pytest.param(WITHOUT_TLS, {"vllm_monitoring_alerts": {"wedged_for": "5 m"}}, ["vllm_monitoring_alerts.wedged_for: set a Prometheus duration"],
                 id="alert-duration-with-a-blank"),
    pytest.param(WITHOUT_TLS, {"vllm_monitoring_scrape_interval": "15"}, ["vllm_monitoring_scrape_interval: set a Prometheus duration"],
                 id="scrape-interval-without-unit"),
    pytest.param(WITHOUT_TLS, {"vllm_monitoring_silence_minutes": 0}, ["vllm_monitoring_silence_minutes is 0: set 1 or more"],
                 id="no-silence"),
    pytest.param(WITHOUT_TLS, {"vllm_monitoring_unsilence_wait": "2m"},
                 ['vllm_monitoring_unsilence_wait is "2m": set a number of seconds'], id="unsilence-wait-with-a-unit"),
    pytest.param(WITHOUT_TLS, {"vllm_monitoring_unsilence_wait": 7201},
                 ["vllm_monitoring_unsilence_wait is 7201: set a number of seconds, 0 or more and no longer than the silence"],
                 id="unsilence-wait-longer-than-the-silence"),
    pytest.param(FLEET, {"vllm_monitoring_ca_file": ""}, ["gpu-b serve their metrics in TLS", "set vllm_monitoring_ca_file"],
                 id="tls-host-without-ca"),
])
def test_a_bad_setting_is_refused_naming_its_variable(tmp_path, groups, variables, named):
    result, run = check(tmp_path, groups, **variables)
    assert result.get("failed") and run.rc != 0, run.stdout[-3000:]
    msg = result["msg"]
    for text in named:
        assert text in msg, msg
    # That one check, and no other: everything else is the defaults, which pass.
    assert "; " not in msg, msg
    # A webhook URL may hold a token: the refusal names the receiver, never its URL.
    assert "s3cr3t" not in run.stdout, run.stdout[-3000:]


@pytest.mark.parametrize("groups,variables", [
    pytest.param(None, {}, id="defaults-no-inventory"),
    pytest.param(WITHOUT_TLS, {}, id="defaults-plain-fleet"),
    pytest.param(FLEET, dict(vllm_monitoring_ca_file="/etc/prometheus/fleet-ca.pem", vllm_monitoring_receivers=RECEIVERS),
                 id="tls-fleet-with-ca-and-receivers"),
])
def test_good_settings_pass(tmp_path, groups, variables):
    result, run = check(tmp_path, groups, **variables)
    assert not result.get("failed") and run.rc == 0, result.get("msg")


# ---- the node exporter's textfile ---------------------------------------------------------------------------------

SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+)\Z")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(?:,|\Z)')


def parse_exposition(text):
    """[(name, {label: value}, value)] of the samples of an exposition-format text, label values unescaped (\\\\, \\",
    \\n); a sample line that does not parse fails the test."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match, line
        labels, pos, body = {}, 0, match.group(2)
        while pos < len(body):
            label = LABEL.match(body, pos)
            assert label, (line, body[pos:])
            labels[label.group(1)] = re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), label.group(2))
            pos = label.end()
        samples.append((match.group(1), labels, match.group(3)))
    return samples


@needs_promtool
def test_the_textfile_stays_valid_whatever_its_labels_hold(tmp_path):
    nasty = 'a "quoted" \\ back\nslash'
    root = "/srv/the \"models\" \\ dir\nx/models"
    mount = "/srv/the \"models\" \\ dir\nx"
    render(tmp_path, WITHOUT_TLS, templates=["fleet_vllm.prom.j2"], fleet_vllm_model_repo="org/" + nasty,
           fleet_vllm_model_revision=nasty, fleet_vllm_models_root=root,
           __vllm_monitoring_models_mount={"stdout": mount + "\n"},
           vllm_runtime_staged={"version": "0.33.0", "pin": {"distribution": "vllm", "commit": nasty}})
    text = (tmp_path / "fleet_vllm.prom").read_text()
    proc = promtool("check", "metrics", stdin=text)
    assert proc.returncode == 0, proc.stdout + proc.stderr + text
    samples = parse_exposition(text)
    assert [(name, value) for name, dummy, value in samples] == [("fleet_vllm_info", "1"), ("fleet_vllm_models_filesystem_info", "1")]
    info, filesystem = samples[0][1], samples[1][1]
    assert info["model"] == "org/" + nasty and info["model_revision"] == nasty and info["vllm_commit"] == nasty, info
    assert info["vllm_version"] == "0.33.0" and info["tensor_parallel_size"] == "8", info
    assert filesystem == {"models_root": root, "mountpoint": mount}, filesystem
