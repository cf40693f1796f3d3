"""upgrade_rollback, step 4: a rolling upgrade whose second host fails verification. The first
host was rolled and serves 0.33.0; the second was restarted and failed its real completion (its
engine is dead behind a healthy /health), and the play stopped there with the journal's cause;
the third was not touched: same process, same live files, same venv, still serving the old pin,
with the new state only staged beside it."""

from __future__ import annotations

import fleet_hosts as fleet

testinfra_hosts = fleet.testinfra_hosts()


def _index(host):
    return fleet.instances().index(fleet.name_of(host))


def test_the_play_stopped_at_the_second_host_with_the_cause():
    run = fleet.load_run("upgrade_fails")
    first, second, third = fleet.instances()
    assert run["rc"] != 0
    assert run["recap"][first]["failed"] == 0 and run["recap"][second]["failed"] == 1, run["recap"]
    output = run["output_tail"]
    assert "a two-token chat completion answers 500 although /health answers 200" in output, output[-3000:]
    assert "EngineCore encountered a fatal error" in output, "the journal's cause is not in the message"
    # The third host staged (it is in the recap, nothing failed) but was never in a rolling batch.
    assert run["recap"][third]["failed"] == 0, run["recap"]


def test_each_host_as_the_rollout_left_it(host):
    data = fleet.facts(host)
    before = fleet.load_record()[fleet.name_of(host)]
    index = _index(host)
    if index == 0:
        fleet.assert_restarted_and_serving(host, fleet.NEW_VERSION)
    elif index == 1:
        assert fleet.restarted_since_record(host, data)
        assert data["http"]["health"][0] == 200
        assert data["http"]["chat"][0] == 500, data["http"]["chat"]
    else:
        assert not fleet.restarted_since_record(host, data)
        fleet.assert_serving(host, data, fleet.OLD_VERSION)
        for path in (fleet.UNIT_FILE, fleet.NCCL_ENV, fleet.SECRETS_ENV, "/opt/vllm/current", fleet.SERVED_CURRENT):
            assert data["files"][path] == before["files"][path], path
        # ... while the new venv is staged beside the running one
        venvs = host.check_output("ls /opt/vllm/venvs").split()
        assert any(name.endswith("-0.33.0") for name in venvs), venvs
        assert not data["realpath"]["/opt/vllm/current"].endswith("-0.33.0")
