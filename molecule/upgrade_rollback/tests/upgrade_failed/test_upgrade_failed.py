"""upgrade_rollback, step 4: a rolling upgrade in batches capped at two (fleet_vllm_serial=3,
fleet_vllm_max_down=2) whose first host fails verification. The first batch was the first and the
second host: both restarted; the first failed its real completion (its engine is dead behind a
healthy /health) and the play stopped there with the journal's cause, naming the host; the second
rolled and serves 0.33.0; the third, the next batch, was not touched: same process, same live
files, same venv, still serving the old pin, with the new state only staged beside it. What
playbooks/roll.yml promises (max_fail_percentage 0, the batch capped at fleet_vllm_max_down):
with max_fail_percentage 100, or the cap ignored, the third host would have rolled."""

from __future__ import annotations

import re

import fleet_hosts as fleet

testinfra_hosts = fleet.testinfra_hosts()


def _index(host):
    return fleet.instances().index(fleet.name_of(host))


def test_the_play_stopped_after_the_first_batch_naming_the_host_and_the_cause():
    run = fleet.load_run("upgrade_fails")
    first, second, third = fleet.instances()
    assert run["rc"] != 0
    assert run["recap"][first]["failed"] == 1 and run["recap"][second]["failed"] == 0, run["recap"]
    output = run["output_tail"]
    # The failure names the host: its fatal line, and no other host's.
    assert set(re.findall(r"^fatal: \[([^\]]+)\]: FAILED!", output, re.M)) == {first}, output[-3000:]
    assert "a two-token chat completion answers 500 although /health answers 200" in output, output[-3000:]
    assert "EngineCore encountered a fatal error" in output, "the journal's cause is not in the message"
    # The third host staged (it is in the recap, nothing failed) but was never in a rolling batch.
    assert run["recap"][third]["failed"] == 0, run["recap"]


def test_one_batch_of_two_never_more_down_and_the_next_batch_never_down():
    """From this machine's polls of each front door's /health (every 0.1 s): the first and the
    second host went down together (one batch), the third never did, never more than
    fleet_vllm_max_down (2) at once."""
    run = fleet.load_run("upgrade_fails")
    first, second, third = fleet.instances()
    windows = {name: fleet.down_windows(run, name) for name in (first, second, third)}
    assert windows[first] and windows[second], windows
    assert windows[third] == [], "the third host went down: a later batch was touched (%s)" % windows
    (s1, e1), (s2, e2) = windows[first][0], windows[second][0]
    assert s2 < e1 and s1 < e2, "the first and second host were not down together: not one batch (%s)" % windows
    events = sorted([(w[0], 1) for ws in windows.values() for w in ws] + [(w[1], -1) for ws in windows.values() for w in ws])
    down = peak = 0
    for dummy, step in events:
        down += step
        peak = max(peak, down)
    assert peak <= 2, "%d hosts down at once, more than fleet_vllm_max_down" % peak


def test_each_host_as_the_rollout_left_it(host):
    data = fleet.facts(host)
    before = fleet.load_record()[fleet.name_of(host)]
    index = _index(host)
    if index == 0:
        assert fleet.restarted_since_record(host, data)
        assert data["http"]["health"][0] == 200
        assert data["http"]["chat"][0] == 500, data["http"]["chat"]
    elif index == 1:
        fleet.assert_restarted_and_serving(host, fleet.NEW_VERSION)
    else:
        assert not fleet.restarted_since_record(host, data)
        fleet.assert_serving(host, data, fleet.OLD_VERSION)
        for path in (fleet.UNIT_FILE, fleet.NCCL_ENV, fleet.SECRETS_ENV, "/opt/vllm/current", fleet.SERVED_CURRENT):
            assert data["files"][path] == before["files"][path], path
        # ... while the new venv is staged beside the running one
        venvs = host.check_output("ls /opt/vllm/venvs").split()
        assert any(name.endswith("-0.33.0") for name in venvs), venvs
        assert not data["realpath"]["/opt/vllm/current"].endswith("-0.33.0")
