"""fleet.vllm.weights_plan: the hub serves each byte once per site with source peer."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.fleet.vllm.plugins.filter.weights_plan import weights_networks, weights_plan, weights_status


def host(name, complete=False, in_play=True, site="default", seed="", serves=True):
    return dict(host=name, complete=complete, in_play=in_play, site=site, seed=seed, serves=serves)


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
    assert mine == dict(host="a", site="default", complete=True, in_play=True, seed="", serves=True)


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


def test_a_host_whose_peer_daemon_is_off_is_never_a_source():
    """Issue 24 point 14: vllm_weights_peer_daemon false - no peer copies from it, nor waits for it to fetch."""
    # It has the snapshot (outside the play, or in it): the others copy from the hosts that serve, or download.
    plan = weights_plan([host("off", True, False, serves=False), host("a", True, False), host("new")], "peer")
    assert plan["new"]["peers"] == ["a"]
    plan = weights_plan([host("off", True, serves=False), host("b"), host("c")], "peer")
    assert actions(plan) == {"off": ("none", None), "b": ("download", None), "c": ("copy", "b")}
    # It lacks it: it is neither the seed (named or first) nor a candidate of the other copiers.
    plan = weights_plan([host("off", seed="off", serves=False), host("b", seed="off"), host("c", seed="off"), host("d")], "peer")
    assert actions(plan)["b"] == ("download", None)
    assert all("off" not in entry["peers"] for entry in plan.values()), plan
    assert plan["off"]["action"] == "copy" and plan["off"]["peers"][0] == "b"
    # No host of the site serves: each downloads for itself rather than waiting for one that never serves.
    plan = weights_plan([host("x", serves=False), host("y", serves=False)], "peer")
    assert actions(plan) == {"x": ("download", None), "y": ("download", None)}


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


def ipv4(address, prefix):
    return {"ipv4": {"address": address, "prefix": str(prefix)}}


# Issue 24 point 14: one interface next to a private eth0 - is its network admitted by default?
INTERFACE_TABLE = [
    # container and VM plumbing, by the names Docker, libvirt, Podman, CNI, LXC/LXD and Kubernetes overlays give it
    ("docker0", ipv4("172.17.0.1", 16), False),
    ("br-3f2a9c1b7d4e", ipv4("172.18.0.1", 16), False),
    ("docker_gwbridge", ipv4("172.19.0.1", 16), False),
    ("veth1a2b3c4", ipv4("172.17.0.9", 32), False),
    ("virbr0", ipv4("192.168.122.1", 24), False),
    ("virbr0-nic", ipv4("192.168.123.1", 24), False),
    ("vnet3", ipv4("192.168.124.1", 24), False),
    ("podman0", ipv4("10.88.0.1", 16), False),
    ("cni-podman0", ipv4("10.88.1.1", 24), False),
    ("cni0", ipv4("10.244.0.1", 24), False),
    ("lxcbr0", ipv4("10.0.3.1", 24), False),
    ("lxdbr0", ipv4("10.0.4.1", 24), False),
    ("flannel.1", ipv4("10.244.0.0", 32), False),
    ("cali12ab34cd56e", ipv4("10.245.0.1", 32), False),
    ("tunl0", ipv4("10.246.0.1", 32), False),
    ("vxlan.calico", ipv4("10.247.0.1", 32), False),
    ("cilium_host", ipv4("10.248.0.1", 32), False),
    ("weave", ipv4("10.32.0.1", 12), False),
    ("kube-ipvs0", ipv4("10.96.0.1", 32), False),
    # public, documentation and other non-private prefixes, on a real NIC
    ("eno1", ipv4("203.0.113.7", 24), False),
    ("eno1", ipv4("8.8.4.4", 24), False),
    ("eno1", {"ipv6": [{"address": "2001:db8:5::7", "prefix": "64", "scope": "global"}]}, False),
    ("eno1", {"ipv6": [{"address": "2a01:4f8::7", "prefix": "64", "scope": "global"}]}, False),
    ("eno1", ipv4("10.9.8.7", 7), False),  # a prefix wider than 10/8 reaches public addresses
    ("eno1", ipv4("169.254.3.4", 16), False),  # link-local
    ("eno1", {"ipv6": [{"address": "fe80::7", "prefix": "64", "scope": "link"}]}, False),
    ("lo", ipv4("127.0.0.1", 8), False),
    # what a peer can be on: private, shared address space, unique local; a bridge the operator named, a bond, a VLAN
    ("eno1", ipv4("192.168.50.7", 24), True),
    ("eno1", ipv4("172.20.1.7", 24), True),
    ("eno1", ipv4("100.70.1.7", 16), True),
    ("eno1", {"ipv6": [{"address": "fd12:3456::7", "prefix": "64", "scope": "global"}]}, True),
    ("br0", ipv4("10.20.0.7", 16), True),
    ("br-lan", ipv4("10.21.0.7", 16), True),
    ("bond0.100", ipv4("10.22.0.7", 16), True),
]


@pytest.mark.parametrize("device, addresses, admitted", INTERFACE_TABLE)
def test_default_networks_are_the_private_ones_of_real_interfaces(device, addresses, admitted):
    base = {"ipv4": {"address": "10.1.2.3", "prefix": "24"}}
    found = weights_networks(facts(**{"eth0": base, device: addresses}))
    extra = [n for n in found if n != "10.1.2.0/24"]
    assert "10.1.2.0/24" in found
    assert bool(extra) == admitted, (device, addresses, found)


def test_only_plumbing_and_public_networks_fail_naming_what_was_left_out():
    with pytest.raises(AnsibleFilterError) as err:
        weights_networks(facts(lo=NET_FACTS["lo"], docker0=ipv4("172.17.0.1", 16), eno1=ipv4("203.0.113.7", 24)))
    message = str(err.value)
    for words in ("172.17.0.0/16 on docker0 (containers", "203.0.113.0/24 on eno1 (not a private network)",
                  "set vllm_weights_peer_networks", "vllm_weights_peer_daemon: false"):
        assert words in message, message
    # Peers on loopback (tests): loopback alone is enough, and the rest still left out.
    assert weights_networks(facts(lo=NET_FACTS["lo"], docker0=ipv4("172.17.0.1", 16)), loopback=True) == ["127.0.0.0/8", "::1/128"]


def test_public_networks_given_explicitly_are_kept():
    assert weights_networks(facts(eno1=ipv4("203.0.113.7", 24)), ["203.0.113.0/24", "2001:db8::/32"]) == [
        "203.0.113.0/24", "2001:db8::/32"]


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
