"""fleet.vllm.weights_plan: the hub serves each byte once per site with source peer."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.fleet.vllm.plugins.filter.weights_plan import weights_plan, weights_status


def host(name, complete=False, in_play=True, site="default", seed=""):
    return dict(host=name, complete=complete, in_play=in_play, site=site, seed=seed)


def actions(plan):
    return {name: (p["action"], p["peer"]) for name, p in plan.items()}


def test_peer_first_host_downloads_the_others_copy_from_it():
    plan = weights_plan([host("a"), host("b"), host("c")], "peer")
    assert actions(plan) == {"a": ("download", None), "b": ("copy", "a"), "c": ("copy", "a")}


def test_peer_named_seed_downloads():
    plan = weights_plan([host("a", seed="b"), host("b", seed="b"), host("c", seed="b")], "peer")
    assert actions(plan) == {"a": ("copy", "b"), "b": ("download", None), "c": ("copy", "b")}


def test_peer_onboarding_copies_from_hosts_outside_the_play():
    plan = weights_plan([host("a", True, False), host("b", True, False), host("new")], "peer")
    assert actions(plan) == {"new": ("copy", "a")}


def test_peer_copies_are_spread_over_the_hosts_that_have_it():
    plan = weights_plan([host("a", True), host("b", True), host("c"), host("d"), host("e")], "peer")
    assert actions(plan) == {"a": ("none", None), "b": ("none", None), "c": ("copy", "a"), "d": ("copy", "b"),
                             "e": ("copy", "a")}


def test_peer_one_download_per_site():
    plan = weights_plan([host("a1", site="a"), host("a2", site="a"), host("b1", site="b"), host("b2", site="b"),
                         host("b0", True, False, site="b")], "peer")
    assert actions(plan) == {"a1": ("download", None), "a2": ("copy", "a1"), "b1": ("copy", "b0"), "b2": ("copy", "b0")}


def test_hub_every_host_downloads_and_shared_verifies():
    assert actions(weights_plan([host("a", True), host("b")], "hub")) == {"a": ("none", None), "b": ("download", None)}
    assert actions(weights_plan([host("a"), host("b", in_play=False)], "shared")) == {"a": ("verify", None)}


def test_unknown_source_names_the_variable():
    with pytest.raises(AnsibleFilterError, match="vllm_weights_source is 'nfs'"):
        weights_plan([host("a")], "nfs")


def test_status_of_hosts_outside_the_play():
    hostvars = {"p": {"vllm_weights_site": "x"}}
    assert weights_status({"item": "p", "complete": True}, False, hostvars)["complete"] is True
    assert weights_status({"item": "p", "complete": True, "unreachable": True}, False, hostvars)["complete"] is False
    assert weights_status({"item": "p", "complete": True}, False, hostvars)["site"] == "x"
    mine = weights_status({"inventory_hostname": "a", "__vllm_weights_local": {"complete": True}}, True)
    assert mine == dict(host="a", site="default", complete=True, in_play=True, seed="")
