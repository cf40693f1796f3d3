"""upgrade_rollback, step 5: Ctrl-C while the third host loaded its restarted model, then the same
command again: the rerun adopted the running service (the staged state, restarted after the
pending record) instead of restarting it a second time, verified it and recorded it. Then the
whole fleet converged: the first host (its fault gone) restarted, nothing else did."""

from __future__ import annotations

import warnings

import fleet_hosts as fleet

testinfra_hosts = fleet.testinfra_hosts()


def test_interrupted_after_the_restart_before_the_model_answered():
    run = fleet.load_run("interrupted")
    interrupt = run["interrupt"]
    assert run["rc"] != 0, run["output_tail"][-2000:]
    assert interrupt["invocation_after"] and interrupt["invocation_after"] != interrupt["invocation_before"]
    assert interrupt["health_down"] is True, "interrupted too late: the model had loaded already"
    if run.get("hung"):
        # ansible-core's bug, not the roles': the operator's second Ctrl-C ended it (run_playbook.py).
        warnings.warn("ansible-playbook %s; its threads' stacks are in the run's log" % run["hung"]["why"])


def test_rerun_adopted_without_restarting():
    rerun = fleet.load_run("rerun")
    assert rerun["rc"] == 0, rerun["output_tail"][-3000:]
    assert "adopt: the service was restarted on the staged state by an interrupted run" in rerun["output_tail"]


def test_each_host_restarted_once_at_most_and_serves_the_upgrade(host):
    """Since the record taken after the failed upgrade: the first host restarted once (its fault
    gone); the second, rolled in the failed upgrade's batch, was not restarted again; the third
    runs the very process the interrupted run started."""
    first, second, third = fleet.instances()
    assert fleet.load_run("converge_all")["rc"] == 0, fleet.load_run("converge_all")["output_tail"][-3000:]
    data = fleet.facts(host)
    name = fleet.name_of(host)
    if name == first:
        assert fleet.restarted_since_record(host, data)
    elif name == second:
        assert not fleet.restarted_since_record(host, data)
    else:
        assert data["unit"]["InvocationID"] == fleet.load_run("interrupted")["interrupt"]["invocation_after"]
        assert data["unit"]["NRestarts"] == "0"
    fleet.assert_serving(host, data, fleet.NEW_VERSION)
    fleet.assert_kv_kept(data)
