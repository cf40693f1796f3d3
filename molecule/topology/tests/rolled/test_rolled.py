"""A new vLLM pin rolled through the gateway (side effect roll.yml): the serving group restarted as one - its two
engines stopped together, its rank started before its head - and no request failed, while the host that serves alone
kept serving and rolled in a batch of its own."""

import json
import os

import fleet_hosts as fleet

testinfra_hosts = fleet.testinfra_hosts()


def result():
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "topology-roll.json"), encoding="utf-8") as handle:
        return json.load(handle)


def members():
    return fleet.instances("fleet_vllm_test_group")


def test_every_host_restarted_on_the_new_pin_and_serves(host):
    assert result()["rc"] == 0
    name = fleet.name_of(host)
    before, after = result()["units_before"][name], result()["units_after"][name]
    assert before["InvocationID"] != after["InvocationID"] and after["ActiveState"] == "active", (before, after)
    assert fleet.NEW_VERSION in host.check_output("readlink -f /opt/vllm/current")


def test_the_group_stopped_together_started_its_rank_before_its_head_and_rolled_in_a_batch_of_its_own():
    after = result()["units_after"]
    head, rank = members()
    replica = [name for name in fleet.instances() if name not in members()][0]

    def at(name, key):
        return int(after[name][key + "TimestampMonotonic"])
    # Both engines were down before either started again, and the rank started before its head.
    assert max(at(head, "InactiveEnter"), at(rank, "InactiveEnter")) < min(at(head, "ExecMainStart"), at(rank, "ExecMainStart"))
    assert at(rank, "ExecMainStart") < at(head, "ExecMainStart")
    # The replica's restart is outside the group's: another batch.
    group_from, group_to = min(at(head, "InactiveEnter"), at(rank, "InactiveEnter")), at(head, "ExecMainStart")
    assert not group_from <= at(replica, "ExecMainStart") <= group_to, after
    assert not group_from <= at(replica, "InactiveEnter") <= group_to, after
    run = fleet.load_run("topology-roll")
    assert all(run["recap"][name]["failed"] == 0 for name in fleet.instances()), run["recap"]


def test_no_request_failed_through_the_gateway():
    data = result()
    client = data["client"]
    assert client["sent"] >= 100, client
    assert (client["failed"], client["truncated"]) == (0, 0), client["errors"]
    assert data["after"]["hrsp_5xx"] - data["before"]["hrsp_5xx"] == 0, data
    assert all(status.startswith("UP") for status in data["servers"].values()), data["servers"]


def test_the_roll_in_check_mode_first_restarted_nothing():
    data = result()
    assert data["rc_check"] == 0
    for name, unit in data["units_unchecked"].items():
        assert data["units_before"][name]["InvocationID"] == unit["InvocationID"], (name, unit)
