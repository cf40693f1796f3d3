"""fleet.vllm.weights_plan and its helpers, whole results: the plan entry of every host (action,
peer, peers and the reason the vllm_weights role prints), the status entries the plan is made
from, and the errors an operator reads. test_weights_plan.py covers who copies from whom."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.fleet.vllm.plugins.filter.weights_plan import (
    weights_peer_address,
    weights_peer_url,
    weights_plan,
    weights_status,
)

COMPLETE = dict(action="none", peer=None, peers=[], reason="the snapshot is complete here")


def host(name, complete=False, in_play=True, site="default", seed=""):
    return dict(host=name, complete=complete, in_play=in_play, site=site, seed=seed)


def test_shared_storage_plan_in_full():
    assert weights_plan([host("a", True), host("b"), host("c", in_play=False)], "shared") == {
        "a": dict(action="verify", peer=None, peers=[], reason="shared storage: verify only"),
        "b": dict(action="verify", peer=None, peers=[], reason="shared storage: verify only"),
    }


def test_hub_plan_in_full():
    assert weights_plan([host("a", True), host("b"), host("c", in_play=False)], "hub") == {
        "a": COMPLETE,
        "b": dict(action="download", peer=None, peers=[], reason="source hub: every host downloads"),
    }


def test_peer_plan_without_a_source_in_full():
    assert weights_plan([host("s", site="r1"), host("c1", site="r1"), host("c2", site="r1")], "peer") == {
        "s": dict(action="download", peer=None, peers=[],
                  reason="no host of site r1 has the snapshot: this one fetches it for the site"),
        "c1": dict(action="copy", peer="s", peers=["s", "c2"],
                   reason="copy from s once it has fetched the snapshot for site r1 (or from 1 other host(s) of the site "
                          "once they have it)"),
        "c2": dict(action="copy", peer="s", peers=["s", "c1"],
                   reason="copy from s once it has fetched the snapshot for site r1 (or from 1 other host(s) of the site "
                          "once they have it)"),
    }


def test_peer_plan_with_sources_in_full():
    assert weights_plan([host("a", True), host("b", True, in_play=False), host("c"), host("d")], "peer") == {
        "a": COMPLETE,
        "c": dict(action="copy", peer="a", peers=["a", "b", "d"],
                  reason="copy from a, which has the snapshot (or from 1 other host(s) of the site once they have it)"),
        "d": dict(action="copy", peer="b", peers=["b", "a", "c"],
                  reason="copy from b, which has the snapshot (or from 1 other host(s) of the site once they have it)"),
    }
    assert weights_plan([host("a", True), host("c")], "peer")["c"] == dict(
        action="copy", peer="a", peers=["a"], reason="copy from a, which has the snapshot")


def test_the_first_seed_named_that_is_in_the_play_downloads():
    """Seeds named by hosts outside the play, or by no host of the site, are passed over."""
    hosts = [host("a", seed="gone"), host("b", seed="c"), host("c"), host("x", in_play=False, seed="x")]
    plan = weights_plan(hosts, "peer")
    assert {name: entry["action"] for name, entry in plan.items()} == {"a": "copy", "b": "copy", "c": "download"}
    assert plan["a"]["peers"] == ["c", "b"]


def test_entries_default_to_one_site_without_a_seed():
    plan = weights_plan([dict(host="a", in_play=True), dict(host="b", in_play=True, site="default")], "peer")
    assert plan["a"]["reason"] == "no host of site default has the snapshot: this one fetches it for the site"
    assert plan["b"]["peers"] == ["a"]
    # Hosts whose in_play is missing are not in the play.
    assert weights_plan([dict(host="a")], "hub") == {}


@pytest.mark.parametrize("raw", [{"site": "r1"}, {"host": ""}, "gpu-1", None])
def test_an_entry_without_a_host_name(raw):
    with pytest.raises(AnsibleFilterError) as caught:
        weights_plan([raw], "peer")
    assert str(caught.value) == "weights_plan: each entry needs a host name, got %r" % (raw,)


def test_unknown_source_in_full():
    with pytest.raises(AnsibleFilterError) as caught:
        weights_plan([], "nfs")
    assert str(caught.value) == "vllm_weights_source is 'nfs': use one of peer, hub, shared"


# ---- weights_status --------------------------------------------------------------------------


def test_status_of_a_host_in_the_play_in_full():
    data = {"inventory_hostname": "a", "vllm_weights_site": "r2", "vllm_weights_seed_host": "b",
            "__vllm_weights_local": {"complete": True}}
    assert weights_status(data, True) == dict(host="a", site="r2", complete=True, in_play=True, seed="b", serves=True)
    assert weights_status({"inventory_hostname": "a"}, True) == dict(
        host="a", site="default", complete=False, in_play=True, seed="", serves=True)
    assert weights_status(dict(data, vllm_weights_peer_daemon=False), True)["serves"] is False


HOSTVARS = {"p": {"vllm_weights_site": "r3", "vllm_weights_seed_host": "q"}}


@pytest.mark.parametrize("result, complete", [
    ({"item": "p", "complete": True}, True),
    ({"item": "p", "complete": False}, False),
    ({"item": "p"}, False),
    ({"item": "p", "complete": True, "unreachable": True}, False),
    ({"item": "p", "complete": True, "failed": True}, False),
    ({"item": "p", "complete": True, "skipped": True}, False),
    ({"item": "p", "complete": True, "failed": False, "skipped": False, "unreachable": False}, True),
])
def test_status_of_a_host_outside_the_play_in_full(result, complete):
    assert weights_status(result, False, HOSTVARS) == dict(host="p", site="r3", complete=complete, in_play=False, seed="q", serves=True)


def test_status_of_a_host_without_variables():
    assert weights_status({"item": "p", "complete": True}, False) == dict(
        host="p", site="default", complete=True, in_play=False, seed="", serves=True)
    assert weights_status({"item": "p", "complete": True}, False, {"p": {"vllm_weights_peer_daemon": "false"}})["serves"] is False
    assert weights_status({"item": "z", "complete": True}, False, HOSTVARS)["site"] == "default"


def test_status_without_an_item_in_full():
    with pytest.raises(AnsibleFilterError) as caught:
        weights_status({"complete": True}, False, HOSTVARS)
    assert str(caught.value) == ("weights_status: expects a loop result with an item (the host asked), got "
                                 "{'complete': True}")


# ---- peer addresses --------------------------------------------------------------------------


@pytest.mark.parametrize("host_vars, address", [
    ({"vllm_weights_peer_address": "10.0.0.9", "ansible_host": "10.0.0.1", "inventory_hostname": "a"}, "10.0.0.9"),
    ({"vllm_weights_peer_address": "", "ansible_host": "10.0.0.1", "inventory_hostname": "a"}, "10.0.0.1"),
    ({"inventory_hostname": "a"}, "a"),
])
def test_peer_address(host_vars, address):
    assert weights_peer_address(host_vars) == address


@pytest.mark.parametrize("host_vars", [{}, None, "a"])
def test_peer_address_needs_host_variables(host_vars):
    with pytest.raises(AnsibleFilterError) as caught:
        weights_peer_address(host_vars)
    assert str(caught.value) == ("weights_peer_address: expects a host's variables (hostvars[name]), got %r"
                                 % (type(host_vars),))


def test_peer_url():
    assert weights_peer_url({"ansible_host": "10.0.0.1"}, "/models/kimi/") == "rsync://10.0.0.1:8873/models/kimi"
    assert weights_peer_url({"ansible_host": "10.0.0.1"}, "m", 9000) == "rsync://10.0.0.1:9000/m"
    assert weights_peer_url({"ansible_host": "h"}, "/X/Kimi-K2.5-NVFP4X/") == "rsync://h:8873/X/Kimi-K2.5-NVFP4X"
    assert weights_peer_url({"ansible_host": "10.0.0.1", "vllm_weights_peer_port": 7000}, "m", 9000) == (
        "rsync://10.0.0.1:7000/m")


# ---- weights_networks ------------------------------------------------------------------------


def interface(name, ipv4=None, ipv6=None, secondaries=None):
    value = dict(device=name)
    if ipv4 is not None:
        value["ipv4"] = ipv4
    if ipv6 is not None:
        value["ipv6"] = ipv6
    if secondaries is not None:
        value["ipv4_secondaries"] = secondaries
    return value


def test_networks_read_from_every_kind_of_interface_entry():
    from ansible_collections.fleet.vllm.plugins.filter.weights_plan import weights_networks
    facts = {
        "interfaces": ["eth0", "eth1", "eth2", "ib0"],
        "default_ipv4": {"address": "10.1.2.3", "interface": "eth0", "prefix": "24"},
        "not_an_interface": {"ipv4": {"address": "10.99.0.1", "prefix": "24"}},
        # netmask without prefix; an entry without an address; an address that is not one
        "eth0": interface("eth0", {"address": "10.4.5.6", "netmask": "255.255.0.0"},
                          secondaries=[{"prefix": "24"}, "junk", {"address": "bogus", "prefix": "8"},
                                       {"address": "192.168.9.9", "prefix": "24"}]),
        # no IPv4 at all; link-local first, an entry without a prefix, a zone index
        "eth1": interface("eth1", ipv6=[{"address": "fe80::1", "prefix": "64"}, {"address": "fd00:9::1"}, "junk",
                                        {"address": "fd00:1::5%eth1", "prefix": "64"}]),
        "eth2": interface("eth2", {"address": "127.0.0.2", "prefix": "8"},
                          ipv6=[{"address": "fd00:2::1", "prefix": "48"}]),
    }
    assert weights_networks(facts) == ["10.4.0.0/16", "192.168.9.0/24", "fd00:1::/64", "fd00:2::/48"]


@pytest.mark.parametrize("facts, networks, message", [
    ({}, 5, "vllm_weights_peer_networks is 5: set it to a list of networks (CIDRs)"),
    ({}, {"a": "10.0.0.0/8"}, "vllm_weights_peer_networks is {'a': '10.0.0.0/8'}: set it to a list of networks (CIDRs)"),
    ({}, ["10.0.0.0/8", "rack-3"],
     "vllm_weights_peer_networks has 'rack-3', which is not an IPv4 or IPv6 address or network (CIDR): set it to networks "
     "such as 10.20.0.0/16 or fd00:20::/64"),
    (["eth0"], None, "weights_networks: expects a host's facts (ansible_facts), got <class 'list'>"),
    ({"lo": {"device": "lo", "ipv4": {"address": "127.0.0.1", "prefix": "8"}}}, None,
     "no private network of this host to admit peers from (it has no address outside loopback and link-local): set "
     "vllm_weights_peer_networks to the networks (CIDRs) its peers copy from (public ones included, if they really copy "
     "over those), or turn the peer daemon off (vllm_weights_peer_daemon: false; its peers then copy from others or "
     "download)"),
])
def test_network_errors_in_full(facts, networks, message):
    from ansible_collections.fleet.vllm.plugins.filter.weights_plan import weights_networks
    with pytest.raises(AnsibleFilterError) as caught:
        weights_networks(facts, networks)
    assert str(caught.value) == message


def test_a_site_outside_the_play_does_not_hide_the_next_one():
    plan = weights_plan([host("x1", site="x", in_play=False), host("y1", site="y"), host("y2", site="y")], "peer")
    assert {name: entry["action"] for name, entry in plan.items()} == {"y1": "download", "y2": "copy"}
