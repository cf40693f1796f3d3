"""default, after the side effect restarts.yml: three times the service was stopped and deploy.yml
started it again, with no file changed (no daemon-reload to empty systemd's start counter). With
the converge's start that made four starts within StartLimitIntervalSec, one more than
StartLimitBurst: each deploy started it all the same (the roll resets the start counter before a
deliberate start), and it serves."""

from __future__ import annotations

import json
import os

import fleet_hosts as fleet

testinfra_hosts = fleet.testinfra_hosts()
RUNS = ("restart-1", "restart-2", "restart-3")


def test_each_deploy_started_every_host():
    for name in RUNS:
        run = fleet.load_run(name)
        assert run["rc"] == 0, run["output_tail"][-4000:]
        for host in fleet.instances():
            assert run["recap"][host]["failed"] == 0 and run["recap"][host]["changed"] > 0, (name, run["recap"])


def test_three_more_starts_went_past_the_start_limit(host):
    unit = fleet.facts(host)["unit"]
    assert unit["StartLimitBurst"] == "3", unit
    assert (unit["ActiveState"], unit["SubState"], unit["NRestarts"]) == ("active", "running", "0"), unit
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "starts-before-restarts.json"),
              encoding="utf-8") as handle:
        before = json.load(handle)[fleet.name_of(host)]
    journal = host.check_output("journalctl -u %s -o cat --no-pager" % fleet.SERVICE)
    # systemd logs "Started vllm.service - <Description>." at each start.
    starts = [line for line in journal.splitlines() if line.startswith("Started %s" % fleet.SERVICE)]
    assert before >= 1 and len(starts) == before + 3, (before, starts)
    assert "attempted too often" not in journal and "start-limit-hit" not in journal


def test_the_service_serves(host):
    fleet.assert_serving(host, fleet.facts(host), fleet.OLD_VERSION)
