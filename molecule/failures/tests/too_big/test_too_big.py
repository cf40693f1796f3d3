"""failures, step 1: a file system too small for the model is refused by preflight, before any
byte is downloaded and before anything is installed."""

from __future__ import annotations

import json
import os

import fleet_hosts as fleet

testinfra_hosts = fleet.testinfra_hosts()


def test_the_play_failed_in_preflight_naming_the_fix():
    run = fleet.load_run("too_big")
    assert run["rc"] != 0
    output = run["output_tail"]
    assert "fleet_vllm_pristine_dir" in output and "free" in output, output[-3000:]
    for name in fleet.instances():
        assert run["recap"][name]["failed"] == 1, run["recap"]


def test_no_file_requested_from_the_mirror(host):
    """None by this host. (The mirror's log is the machine's: the onboard scenario runs beside this one and
    appears in it with its own hosts' addresses.)"""
    addresses = host.check_output("hostname -I").split()
    assert addresses
    run = fleet.load_run("too_big")
    assert [line for line in fleet.file_requests(run["mirror_log"]) if line.split()[-1] in addresses] == []


def test_nothing_written_to_the_small_file_system():
    path = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "too_big-listing.json")
    with open(path, encoding="utf-8") as handle:
        listings = json.load(handle)
    assert listings == {name: [] for name in fleet.instances()}


def test_nothing_installed(host):
    data = fleet.facts(host)
    for path in (fleet.UNIT_FILE, "/opt/vllm/current", "/opt/fleet-vllm", fleet.SERVED):
        assert data["files"][path] is None, path
    assert data["unit"]["ActiveState"] == "inactive"
