"""fleet.vllm.weights_plan: the hub serves each byte once per site with source peer."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.fleet.vllm.plugins.filter.weights_plan import weights_networks, weights_plan, weights_status


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


def test_copiers_get_every_candidate_in_order_and_first_choices_spread():
    plan = weights_plan([host("a", True), host("b", True), host("c"), host("d"), host("e"), host("x", True, False)],
                        "peer")
    # Sources first (a, b, x: in or out of the play), rotated per copier; then the other copiers, which serve once done.
    assert plan["c"]["peers"] == ["a", "b", "x", "d", "e"]
    assert plan["d"]["peers"] == ["b", "x", "a", "e", "c"]
    assert plan["e"]["peers"] == ["x", "a", "b", "c", "d"]
    assert all(plan[h]["peer"] == plan[h]["peers"][0] for h in "cde")
    assert plan["a"]["peers"] == [] and "2 other host(s)" in plan["c"]["reason"]


def test_without_a_source_copiers_start_from_the_seed_then_each_other():
    plan = weights_plan([host(n) for n in ("s", "c1", "c2", "c3")], "peer")
    assert plan["s"]["action"] == "download" and plan["s"]["peers"] == []
    assert plan["c1"]["peers"] == ["s", "c2", "c3"]
    assert plan["c2"]["peers"] == ["s", "c3", "c1"]
    assert plan["c3"]["peers"] == ["s", "c1", "c2"]


def facts(**interfaces):
    data = {"interfaces": list(interfaces), "default_ipv4": {"address": "10.1.2.3", "interface": "eth0", "prefix": "24"}}
    for name, value in interfaces.items():
        data[name.replace("-", "_")] = dict(value, device=name)
    return data


NET_FACTS = facts(
    lo={"ipv4": {"address": "127.0.0.1", "netmask": "255.0.0.0", "prefix": "8"},
        "ipv6": [{"address": "::1", "prefix": "128", "scope": "host"}]},
    eth0={"ipv4": {"address": "10.1.2.3", "netmask": "255.255.255.0", "prefix": "24"},
          "ipv4_secondaries": [{"address": "192.168.7.9", "netmask": "255.255.254.0", "prefix": "23"}],
          "ipv6": [{"address": "fd00:1:2::3", "prefix": "64", "scope": "global"},
                   {"address": "fe80::1", "prefix": "64", "scope": "link"}]},
    **{"br-fab": {"ipv4": {"address": "172.30.0.1", "netmask": "255.255.0.0", "prefix": "16"}}},
)


def test_networks_derived_from_the_interfaces():
    assert weights_networks(NET_FACTS) == ["10.1.2.0/24", "172.30.0.0/16", "192.168.6.0/23", "fd00:1:2::/64"]
    assert weights_networks(NET_FACTS, loopback=True) == ["10.1.2.0/24", "127.0.0.0/8", "172.30.0.0/16",
                                                          "192.168.6.0/23", "::1/128", "fd00:1:2::/64"]


def test_networks_given_are_normalised_and_bad_ones_named():
    assert weights_networks(NET_FACTS, ["10.9.8.7/16", "fd00::5", "10.9.0.0/16"]) == ["10.9.0.0/16", "fd00::5/128"]
    with pytest.raises(AnsibleFilterError, match="vllm_weights_peer_networks has 'rack-3'.*CIDR"):
        weights_networks(NET_FACTS, ["10.0.0.0/8", "rack-3"])
    with pytest.raises(AnsibleFilterError, match="vllm_weights_peer_networks is '10.0.0.0/8'"):
        weights_networks(NET_FACTS, "10.0.0.0/8")


def test_no_address_outside_loopback_says_what_to_set():
    with pytest.raises(AnsibleFilterError, match="set vllm_weights_peer_networks"):
        weights_networks(facts(lo=NET_FACTS["lo"]))


def test_weights_listing_takes_the_digests_from_the_hub_tree():
    from ansible_collections.fleet.vllm.plugins.filter.weights_plan import weights_listing
    tree = [
        {"type": "directory", "oid": "d" * 40, "size": 0, "path": "sub"},
        {"type": "file", "oid": "a" * 40, "size": 12, "path": "config.json"},
        {"type": "file", "oid": "b" * 40, "size": 130, "path": "model-00001-of-00002.safetensors",
         "lfs": {"oid": "c" * 64, "size": 4_600_000_000, "pointerSize": 130}},
        {"type": "file", "oid": "e" * 40, "size": 40, "path": "sub/modeling_kimi.py"},
    ]
    assert weights_listing(tree) == [
        {"path": "config.json", "size": 12, "git_sha1": "a" * 40},
        {"path": "model-00001-of-00002.safetensors", "size": 4_600_000_000, "sha256": "c" * 64},
        {"path": "sub/modeling_kimi.py", "size": 40, "git_sha1": "e" * 40},
    ]
    assert [f["path"] for f in weights_listing(tree, ["sub/"])] == ["sub/modeling_kimi.py"]
    assert [f["path"] for f in weights_listing(tree, None, ["*.safetensors"])] == ["config.json", "sub/modeling_kimi.py"]
    with pytest.raises(AnsibleFilterError, match="cannot be verified"):
        weights_listing([{"type": "file", "size": 1, "path": "x.py"}])
