"""failures, step 2: a flag the installed vLLM rejects fails the play before the unit changes;
the running service keeps serving and the rollout stops at the first host."""

from __future__ import annotations

import fleet_hosts as fleet

testinfra_hosts = fleet.testinfra_hosts()


def test_the_play_failed_with_vllms_message():
    run = fleet.load_run("bad_flag")
    assert run["rc"] != 0
    assert "--no-such-flag" in run["output_tail"], run["output_tail"][-3000:]
    first, second = fleet.instances()[:2]
    assert run["recap"][first]["failed"] == 1, run["recap"]
    # serial 1 and max_fail_percentage 0: the second host's rollout never started.
    assert run["recap"][second]["failed"] == 0, run["recap"]


def test_nothing_changed_and_not_restarted(host):
    before = fleet.load_record()[fleet.name_of(host)]
    assert fleet.diff(before, fleet.facts(host)) == []


def test_still_serving(host):
    fleet.assert_serving(host, fleet.facts(host), fleet.OLD_VERSION)
