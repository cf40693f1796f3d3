"""Issue 22: the DCGM exporter fixture (tests/fixtures/dcgm/dcgm_exporter.py), a stand-in for NVIDIA's dcgm-exporter
4.5.3-4.8.2 on a host of 8 RTX PRO 6000, describes the same machine as the nvidia-smi fixture rtx-pro-6000-x8, writes
text Prometheus parses, lists every name tests/fixtures/monitoring/series.txt gives the exporter, and takes a change
of its state file at the next scrape, without a restart."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from conftest import FIXTURES, free_port, prerequisite
from tests.helpers import promql

EXPORTER = FIXTURES / "dcgm" / "dcgm_exporter.py"
NVIDIA_SMI = FIXTURES / "nvidia-smi" / "rtx-pro-6000-x8"
PROMTOOL = shutil.which("promtool")
SAMPLE = re.compile(r'^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)\{(?P<labels>.*)\} (?P<value>\S+)$')
LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
# promtool's lint findings on NVIDIA's exporter itself, which this fixture keeps: the label modelName is camelCase
# (rendermetrics/render_metrics.go) and DCGM_FI_DEV_PCIE_REPLAY_COUNTER is a counter without _total
# (etc/default-counters.csv). Anything else promtool says is the fixture's own fault.
EXPORTERS_OWN_LINT = {"label names should be written in 'snake_case' not 'camelCase'",
                      'counter metrics should have "_total" suffix', "metric name should not include type 'counter'"}


def nvidia_smi_gpus():
    """[(index, uuid, bus id, name, driver, memory.total MiB, memory.reserved MiB)] of the nvidia-smi fixture."""
    rows = (NVIDIA_SMI / "query-gpu.csv").read_text().splitlines()
    header = rows[0].split(", ")
    out = []
    for row in rows[1:]:
        cell = dict(zip(header, row.split(", ")))
        out.append((cell["index"], cell["uuid"], cell["pci.bus_id"], cell["name"], cell["driver_version"],
                    int(cell["memory.total [MiB]"].split()[0]), int(cell["memory.reserved [MiB]"].split()[0])))
    return out


def parse(text):
    """[(name, {label: value}, value)] of the samples of an exposition."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match, "not a sample line: %r" % line
        out.append((match.group("name"), dict(LABEL.findall(match.group("labels"))), float(match.group("value"))))
    return out


def per_gpu(samples, name):
    return {labels["gpu"]: value for metric, labels, value in samples if metric == name}


class Exporter:
    """The fixture started on a free port, with a state file (absent until a test writes it)."""

    def __init__(self, tmp_path, *args):
        self.state = tmp_path / "state.json"
        self.port = free_port()
        self.url = "http://127.0.0.1:%d/metrics" % self.port
        self.proc = subprocess.Popen([sys.executable, str(EXPORTER), "--address", "127.0.0.1", "--port", str(self.port),
                                      "--state", str(self.state), *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == self.url, self.proc.communicate(timeout=10)

    def scrape(self, path="/metrics"):
        url = self.url[:-len("/metrics")] + path
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers.get("Content-Type"), response.read().decode("utf-8")

    def set_state(self, state):
        tmp = self.state.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self.state)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=10)


@pytest.fixture
def exporter(tmp_path):
    started = Exporter(tmp_path, "--hostname", "gpu-node-01")
    yield started
    assert started.stop() == 0


@prerequisite(PROMTOOL is not None, "promtool is not installed (apt-get install prometheus)")
def test_prometheus_parses_it_and_finds_only_what_it_finds_in_nvidias_exporter(exporter):
    """promtool check metrics: exit 1 is text Prometheus cannot parse, 3 lint findings only. The real exporter's
    output has two kinds of finding, kept here on purpose; the fixture must add none."""
    status, content_type, text = exporter.scrape()
    assert status == 200 and content_type == "text/plain; charset=utf-8"
    proc = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False)
    findings = {line.split(" ", 1)[1] for line in (proc.stdout + proc.stderr).splitlines() if line.strip()}
    assert proc.returncode in (0, 3), proc.stdout + proc.stderr
    assert findings <= EXPORTERS_OWN_LINT, findings - EXPORTERS_OWN_LINT
    camel = {line.split(" ", 1)[0] for line in (proc.stdout + proc.stderr).splitlines() if "camelCase" in line}
    assert camel == {name for name, dummy, dummy in parse(text)}  # modelName, on every metric: nothing else is camelCase


def test_eight_gpus_of_the_nvidia_smi_fixtures_host(exporter):
    dummy, dummy, text = exporter.scrape()
    samples = parse(text)
    gpus = nvidia_smi_gpus()
    assert len(gpus) == 8
    expected = {(index, uuid, bus, "nvidia" + index, name, driver) for index, uuid, bus, name, driver, dummy, dummy in gpus}
    names = {name for name, dummy, dummy in samples}
    for name in names:
        got = {(labels["gpu"], labels["UUID"], labels["pci_bus_id"], labels["device"], labels["modelName"],
                labels["DCGM_FI_DRIVER_VERSION"]) for metric, labels, dummy in samples if metric == name}
        assert got == expected, name
    assert {labels["Hostname"] for dummy, labels, dummy in samples} == {"gpu-node-01"}
    # Labels in the exporter's order (gpuMetricsFormat), the XID metric's err_code and err_msg last.
    first = text.splitlines()[2]
    order = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"]
    assert [k for k, dummy in LABEL.findall(first)] == order
    xid = [labels for metric, labels, dummy in samples if metric == "DCGM_FI_DEV_XID_ERRORS"]
    assert {(x["err_code"], x["err_msg"]) for x in xid} == {("0", "No Error")}
    # Idle as the nvidia-smi fixture shows it: links at gen 1 x16 of gen 5 x16, the clocks idle, memory as listed.
    assert set(per_gpu(samples, "DCGM_FI_DEV_PCIE_LINK_GEN").values()) == {1.0}
    assert set(per_gpu(samples, "DCGM_FI_DEV_PCIE_MAX_LINK_GEN").values()) == {5.0}
    assert set(per_gpu(samples, "DCGM_FI_DEV_PCIE_LINK_WIDTH").values()) == {16.0}
    assert set(per_gpu(samples, "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH").values()) == {16.0}
    assert set(per_gpu(samples, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS").values()) == {1.0}  # GPU_IDLE
    total, reserved = gpus[0][5], gpus[0][6]
    assert set(per_gpu(samples, "DCGM_FI_DEV_FB_FREE").values()) == {float(total - reserved)}
    assert set(per_gpu(samples, "DCGM_FI_DEV_FB_RESERVED").values()) == {float(reserved)}
    # Every sample is the value the nvidia-smi summary shows for that GPU (temperature; power rounds to its watts).
    summary = re.findall(r"\|\s+N/A\s+(\d+)C\s+P\d+\s+(\d+)W", (NVIDIA_SMI / "summary.txt").read_text())
    assert [(int(t), int(w)) for t, w in summary] == [
        (int(per_gpu(samples, "DCGM_FI_DEV_GPU_TEMP")[str(i)]), round(per_gpu(samples, "DCGM_FI_DEV_POWER_USAGE")[str(i)]))
        for i in range(8)]
    # Integer fields as %d, the DOUBLE one (power) as %f.
    assert re.search(r'^DCGM_FI_DEV_POWER_USAGE\{gpu="0",.*\} \d+\.\d{6}$', text, re.M)
    assert re.search(r'^DCGM_FI_DEV_PCIE_LINK_GEN\{gpu="0",.*\} 1$', text, re.M)


def test_metrics_come_in_field_id_order_with_help_and_type():
    sys.path.insert(0, str(EXPORTER.parent))
    try:
        import dcgm_exporter  # pylint: disable=import-outside-toplevel,import-error
    finally:
        sys.path.remove(str(EXPORTER.parent))
    ids = [counter[0] for counter in dcgm_exporter.COUNTERS]
    assert ids == sorted(ids)
    assert dict((c[1], c[0]) for c in dcgm_exporter.COUNTERS if 235 <= c[0] <= 238) == {
        "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": 235, "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": 236,
        "DCGM_FI_DEV_PCIE_LINK_GEN": 237, "DCGM_FI_DEV_PCIE_LINK_WIDTH": 238}
    text = dcgm_exporter.render({}, "h")
    for fid, name, prom_type, help_text, dummy in dcgm_exporter.COUNTERS:
        assert "# HELP %s %s\n# TYPE %s %s\n%s{" % (name, help_text, name, prom_type, name) in text, fid


def test_the_series_fixture_lists_what_it_exports(exporter):
    dummy, dummy, text = exporter.scrape()
    exported = {name for name, dummy, dummy in parse(text)}
    (section,) = [s for s in promql.series_fixture() if s.startswith("dcgm-exporter")]
    assert promql.series_fixture()[section] == exported


def test_a_state_change_shows_at_the_next_scrape(exporter):
    before = parse(exporter.scrape()[2])
    exporter.set_state({"3": {"DCGM_FI_DEV_PCIE_LINK_GEN": 2, "DCGM_FI_DEV_XID_ERRORS": 79, "DCGM_FI_DEV_FB_USED": 90000}})
    after = parse(exporter.scrape()[2])
    assert per_gpu(before, "DCGM_FI_DEV_PCIE_LINK_GEN")["3"] == 1
    assert per_gpu(after, "DCGM_FI_DEV_PCIE_LINK_GEN") == {str(i): (2.0 if i == 3 else 1.0) for i in range(8)}
    (xid,) = [labels for name, labels, value in after if name == "DCGM_FI_DEV_XID_ERRORS" and value == 79]
    assert (xid["gpu"], xid["err_code"], xid["err_msg"]) == ("3", "79", "GPU has fallen off the bus")
    assert per_gpu(after, "DCGM_FI_DEV_FB_FREE")["3"] == 97887 - 520 - 90000
    # "*" sets every GPU (a host under load), a GPU's own entry wins, null takes a GPU out of the answer.
    exporter.set_state({"*": {"DCGM_FI_DEV_PCIE_LINK_GEN": 5, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0},
                        "3": {"DCGM_FI_DEV_PCIE_LINK_GEN": 2}, "7": None})
    loaded = parse(exporter.scrape()[2])
    assert per_gpu(loaded, "DCGM_FI_DEV_PCIE_LINK_GEN") == {str(i): (2.0 if i == 3 else 5.0) for i in range(7)}
    assert set(per_gpu(loaded, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS").values()) == {0.0}
    exporter.state.unlink()
    assert parse(exporter.scrape()[2]) == before


def test_a_wrong_state_is_an_error_not_a_silent_default(exporter):
    for state, reason in [({"3": {"DCGM_FI_DEV_PCIE_LINK_GENERATION": 2}}, "no metric"), ({"8": {}}, "no GPU"),
                          ({"3": {"DCGM_FI_DEV_PCIE_LINK_GEN": "2"}}, "must be a number")]:
        exporter.set_state(state)
        with pytest.raises(urllib.error.HTTPError) as caught:
            exporter.scrape()
        assert caught.value.code == 500 and reason in caught.value.read().decode()
    with pytest.raises(urllib.error.HTTPError) as caught:
        exporter.scrape("/")
    assert caught.value.code == 404


def test_without_a_hostname_there_is_no_hostname_label(tmp_path):
    started = Exporter(tmp_path, "--hostname", "")
    try:
        samples = parse(started.scrape()[2])
        assert samples and not any("Hostname" in labels for dummy, labels, dummy in samples)
    finally:
        assert started.stop() == 0
