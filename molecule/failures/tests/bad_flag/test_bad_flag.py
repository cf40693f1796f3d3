"""failures, step 2: a flag the installed vLLM rejects fails the staging play on every host,
before anything is written; the running services keep serving and no host is rolled."""

from __future__ import annotations

import fleet_hosts as fleet

testinfra_hosts = fleet.testinfra_hosts()


def test_the_play_failed_with_vllms_message():
    run = fleet.load_run("bad_flag")
    assert run["rc"] != 0
    assert "--no-such-flag" in run["output_tail"], run["output_tail"][-3000:]
    # Staging checks every host at once with its own vLLM's parser: both fail there, and the
    # rolling play never starts.
    for name in fleet.instances():
        assert run["recap"][name]["failed"] == 1, run["recap"]
    assert "Roll the hosts whose staged state differs" not in run["output_tail"]


def test_nothing_changed_and_not_restarted(host):
    before = fleet.load_record()[fleet.name_of(host)]
    assert fleet.diff(before, fleet.facts(host)) == []


def test_still_serving(host):
    fleet.assert_serving(host, fleet.facts(host), fleet.OLD_VERSION)
