# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: weights_plan
short_description: Decide, per host, where its model snapshot comes from
version_added: "0.1.0"
author: fleet.vllm developers (@fleet-vllm)
description:
  - Turns what each host of a fleet has (a complete snapshot or not, its site, whether it is in the
    play) into one action per host of the play - V(none) (it has the snapshot), V(download) (from
    the hub or the site mirror), V(copy) (from the peer named in C(peer)) or V(verify) (shared
    storage).
  - With source V(peer), the hub serves each byte once per site - in a site where no host has the
    snapshot, one host of the play downloads it (the site's seed host when that host is in the play,
    else the first host of the play in the site) and the others copy it from there; in a site where
    some host has it, in the play or not (a node added with C(--limit)), nobody downloads and the
    hosts that lack it copy from those that have it, spread evenly.
  - Each copier also gets C(peers), the candidates in the order to try them - the hosts that have
    the snapshot (rotated, so that first choices spread evenly), then the other copiers of its site
    in the play, which serve the next ones once they have finished. fleet.vllm.hf_snapshot tries
    them in that order and waits for those at their connection limit.
  - With source V(hub) every host that lacks the snapshot downloads it; with V(shared) every host
    verifies it.
options:
  _input:
    description:
      - One entry per host - C(host) (its name), C(site), C(complete) (bool, or null when unknown),
        C(in_play) (bool), C(seed) (the seed host its variables name, or empty), C(serves) (bool, default true - false
        when its peer daemon is off, C(vllm_weights_peer_daemon=false), and then it is never a source nor the seed).
    type: list
    elements: dict
    required: true
  source:
    description: V(peer), V(hub) or V(shared).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Plan the fleet's downloads
  ansible.builtin.set_fact:
    plan: "{{ hosts_status | fleet.vllm.weights_plan(source='peer') }}"
# plan['gpu-node-02'] == {'action': 'copy', 'peer': 'gpu-node-01', 'peers': ['gpu-node-01', 'gpu-node-03'], 'reason': '...'}
"""

RETURN = r"""
_value:
  description:
    - Host name -> C(action), C(peer) (for V(copy), else null), C(peers) (for V(copy), the candidates in order, C(peer)
      first; else empty) and C(reason), for the hosts of the play.
  type: dict
"""

# weights_peer_address, weights_peer_url, weights_status, weights_networks and weights_listing are documented in their .yml
# files next to this one.

import ipaddress
import re

from ansible.errors import AnsibleFilterError

SOURCES = ("peer", "hub", "shared")


def _entry(raw):
    if not isinstance(raw, dict) or not raw.get("host"):
        raise AnsibleFilterError("weights_plan: each entry needs a host name, got %r" % (raw,))
    return dict(host=str(raw["host"]), site=str(raw.get("site") or "default"), complete=raw.get("complete"),
                in_play=bool(raw.get("in_play")), seed=str(raw.get("seed") or ""), serves=raw.get("serves", True) is not False)


def weights_plan(hosts, source):
    if source not in SOURCES:
        raise AnsibleFilterError("vllm_weights_source is %r: use one of %s" % (source, ", ".join(SOURCES)))
    entries = [_entry(raw) for raw in hosts or []]
    plan = {}
    if source == "shared":
        for e in entries:
            if e["in_play"]:
                plan[e["host"]] = dict(action="verify", peer=None, peers=[], reason="shared storage: verify only")
        return plan
    if source == "hub":
        for e in entries:
            if e["in_play"]:
                plan[e["host"]] = (dict(action="none", peer=None, peers=[], reason="the snapshot is complete here")
                                   if e["complete"] else
                                   dict(action="download", peer=None, peers=[], reason="source hub: every host downloads"))
        return plan
    sites = {}
    for e in entries:
        sites.setdefault(e["site"], []).append(e)
    for site, members in sites.items():
        players = [e for e in members if e["in_play"]]
        if not players:
            continue
        # Hosts whose peer daemon is off (vllm_weights_peer_daemon: false) serve nobody: never a source nor the seed.
        sources = [e["host"] for e in members if e["complete"] and e["serves"]]
        seed = None
        if not sources:
            named = [e["seed"] for e in players if e["seed"]]
            by_name = dict((e["host"], e) for e in players if e["serves"])
            seed = next((name for name in named if name in by_name), None) or next(iter(
                e["host"] for e in players if e["serves"] and not e["complete"]), None)
        copiers = [e["host"] for e in players if not e["complete"] and e["host"] != seed and e["serves"]]
        lacking = 0
        for e in players:
            if e["complete"]:
                plan[e["host"]] = dict(action="none", peer=None, peers=[], reason="the snapshot is complete here")
            elif e["host"] == seed:
                plan[e["host"]] = dict(action="download", peer=None, peers=[],
                                       reason="no host of site %s has the snapshot: this one fetches it for the site" % site)
            elif not sources and seed is None:
                plan[e["host"]] = dict(action="download", peer=None, peers=[],
                                       reason="no host of site %s that serves its peers has the snapshot or fetches it "
                                              "(their peer daemon is off): this one downloads it" % site)
            else:
                others = _rotated([name for name in copiers if name != e["host"]], lacking)
                if sources:
                    first = _rotated(sources, lacking)
                    reason = "copy from %s, which has the snapshot" % first[0]
                else:
                    first = [seed]
                    reason = "copy from %s once it has fetched the snapshot for site %s" % (seed, site)
                if others:
                    reason += " (or from %d other host(s) of the site once they have it)" % len(others)
                lacking += 1
                plan[e["host"]] = dict(action="copy", peer=first[0], peers=first + others, reason=reason)
    return plan


def _rotated(names, offset):
    if not names:
        return []
    offset %= len(names)
    return names[offset:] + names[:offset]


def weights_peer_address(host_vars):
    """The address peers reach a host at: vllm_weights_peer_address, else ansible_host, else its name."""
    try:
        for name in ("vllm_weights_peer_address", "ansible_host", "inventory_hostname"):
            value = host_vars.get(name)
            if value:
                return str(value)
    except AttributeError:
        pass
    raise AnsibleFilterError("weights_peer_address: expects a host's variables (hostvars[name]), got %r" % (type(host_vars),))


def weights_peer_url(host_vars, path, port=8873):
    """rsync://<weights_peer_address>:<its vllm_weights_peer_port, else port>/<path> for a host's variables."""
    own_port = _get(host_vars, "vllm_weights_peer_port", None)
    return "rsync://%s:%s/%s" % (weights_peer_address(host_vars), own_port or port, str(path).strip("/"))


def _get(mapping, name, default=None):
    try:
        value = mapping.get(name)
    except AttributeError:  # None or not a mapping: nothing to read
        return default
    return default if value is None else value


def weights_status(data, in_play, all_hostvars=None):
    """A weights_plan entry: from a host's variables (in the play), or from the result of asking a host outside
    the play (a loop result of fleet.vllm.hf_snapshot delegated to it, with all_hostvars)."""
    if in_play:
        local = _get(data, "__vllm_weights_local")
        return dict(host=_get(data, "inventory_hostname"), site=_get(data, "vllm_weights_site", "default"),
                    complete=bool(_get(local, "complete")), in_play=True,
                    seed=_get(data, "vllm_weights_seed_host", ""), serves=_serves(data))
    host = _get(data, "item")
    if not host:
        raise AnsibleFilterError("weights_status: expects a loop result with an item (the host asked), got %r" % (data,))
    host_vars = _get(all_hostvars, host)
    usable = not (_get(data, "unreachable") or _get(data, "failed") or _get(data, "skipped"))
    return dict(host=host, site=_get(host_vars, "vllm_weights_site", "default"),
                complete=bool(usable and _get(data, "complete")), in_play=False,
                seed=_get(host_vars, "vllm_weights_seed_host", ""), serves=_serves(host_vars))


def _serves(host_vars):
    """Whether the host's peer daemon serves its peers (vllm_weights_peer_daemon, true unless set false). A named
    instance of a machine (fleet_vllm_instance) serves none: the machine's daemon is its unnamed instance's."""
    if str(_get(host_vars, "fleet_vllm_instance", "") or "").strip():
        return False
    value = _get(host_vars, "vllm_weights_peer_daemon", True)
    return not (value is False or str(value).strip().lower() in ("false", "no", "off", "0", "n"))


def _network(text, what):
    try:
        return ipaddress.ip_network(str(text).strip(), strict=False)
    except ValueError:
        raise AnsibleFilterError("%s has %r, which is not an IPv4 or IPv6 address or network (CIDR): set it to networks "
                                 "such as 10.20.0.0/16 or fd00:20::/64" % (what, text))


# The interfaces of container and VM plumbing on this host (their networks hold its containers, guests or overlay
# endpoints, not its peers), by the names their software gives them (docs/peer-copy.md, "Who may copy"):
# Docker's default bridge, its user networks' bridges (br- and the network id's first 12 hex digits) and swarm's
# gateway bridge; veth pairs; libvirt's bridges and guests' taps; Podman's (netavark) and CNI bridges; LXC/LXD;
# Kubernetes overlays (flannel, Calico, Cilium, Weave, kube-proxy's IPVS, kube-router); nerdctl.
VIRTUAL_INTERFACES = re.compile(
    r"(docker\d+|docker_gwbridge|br-[0-9a-f]{12}|veth.*|virbr.*|vnet\d+|podman\d+|cni.*|lxcbr\d+|lxdbr\d+|lxc.*"
    r"|flannel.*|cali.*|tunl\d+|vxlan\.calico|cilium_.*|weave|kube-ipvs\d+|kube-bridge|nerdctl\d+)\Z")
# The prefixes a peer may be on by default: private IPv4 (RFC 1918), shared address space (RFC 6598, which clouds use
# for VPCs too) and IPv6 unique local addresses (RFC 4193). Anything else (public, documentation, multicast) needs
# vllm_weights_peer_networks.
PRIVATE_NETWORKS = tuple(ipaddress.ip_network(text) for text in (
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7"))
LOOPBACK_NETWORKS = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


def _private(network):
    return any(network.version == block.version and network.subnet_of(block) for block in PRIVATE_NETWORKS)


def weights_networks(facts, networks=None, loopback=False):
    """The networks whose hosts may copy from this one: ``networks`` (vllm_weights_peer_networks) when given,
    else the networks this host is directly attached to, from its network facts (ansible.builtin.setup,
    gather_subset network): the private prefixes (PRIVATE_NETWORKS) of its interfaces but those of containers, VMs
    and overlays (VIRTUAL_INTERFACES), loopback only when ``loopback`` (the peers reach each other over loopback, as
    in tests). Fails naming what it left out when nothing is left. Normalised CIDRs, IPv4 first, no duplicates."""
    found = []
    if networks:
        if isinstance(networks, (str, bytes)) or not isinstance(networks, (list, tuple)):
            raise AnsibleFilterError("vllm_weights_peer_networks is %r: set it to a list of networks (CIDRs)" % (networks,))
        found = [_network(item, "vllm_weights_peer_networks") for item in networks]
    else:
        if not isinstance(facts, dict):
            raise AnsibleFilterError("weights_networks: expects a host's facts (ansible_facts), got %r" % (type(facts),))
        skipped = []
        for value in facts.values():
            if not isinstance(value, dict) or "device" not in value:
                continue
            device = str(value["device"])
            addresses = []
            for entry in [value.get("ipv4")] + list(value.get("ipv4_secondaries") or []):
                if isinstance(entry, dict) and entry.get("address") and (entry.get("prefix") or entry.get("netmask")):
                    addresses.append("%s/%s" % (entry["address"], entry.get("prefix") or entry["netmask"]))
            for entry in value.get("ipv6") or []:
                if isinstance(entry, dict) and entry.get("address") and entry.get("prefix"):
                    addresses.append("%s/%s" % (entry["address"].split("%")[0], entry["prefix"]))
            for text in addresses:
                try:
                    interface = ipaddress.ip_interface(text)
                except ValueError:
                    continue
                if interface.is_link_local or interface.is_loopback:
                    continue
                if VIRTUAL_INTERFACES.match(device):
                    skipped.append("%s on %s (containers, VMs or an overlay)" % (interface.network, device))
                elif not _private(interface.network):
                    skipped.append("%s on %s (not a private network)" % (interface.network, device))
                else:
                    found.append(interface.network)
        if not found and not loopback:
            raise AnsibleFilterError(
                "no private network of this host to admit peers from%s%s: set vllm_weights_peer_networks to the networks "
                "(CIDRs) its peers copy from (public ones included, if they really copy over those), or turn the peer "
                "daemon off (vllm_weights_peer_daemon: false; its peers then copy from others or download)" % (
                    " (left out: %s)" % ", ".join(skipped) if skipped else "",
                    "" if skipped else " (it has no address outside loopback and link-local)"))
        if loopback:
            found += list(LOOPBACK_NETWORKS)
    unique = []
    for network in sorted(found, key=lambda n: (n.version, n)):
        if network not in unique:
            unique.append(network)
    return [str(network) for network in unique]


def weights_listing(tree, allow_patterns=None, ignore_patterns=None):
    """The Hub's tree listing (GET /api/models/REPO/tree/COMMIT?recursive=true) -> fleet.vllm.hf_snapshot's listing:
    [{path, size, sha256}] for LFS files (lfs.oid is the sha256 of the content), [{path, size, git_sha1}] for the
    others (oid is the git blob id of the content), filtered as huggingface_hub's filter_repo_objects does."""
    import fnmatch

    if not isinstance(tree, list):
        raise AnsibleFilterError("weights_listing: the hub's tree listing is a JSON list of entries, got %s"
                                 % type(tree).__name__)

    def patterns(value):
        if not value:
            return None
        value = [value] if isinstance(value, str) else list(value)
        return [item + "*" if item.endswith("/") else item for item in value]

    allow, ignore = patterns(allow_patterns), patterns(ignore_patterns)
    result = []
    for entry in tree:
        if not isinstance(entry, dict) or entry.get("type") != "file":
            continue
        path = entry.get("path")
        if not isinstance(path, str) or not path:
            raise AnsibleFilterError("weights_listing: a file entry without a path: %r" % (entry,))
        if allow is not None and not any(fnmatch.fnmatch(path, pattern) for pattern in allow):
            continue
        if ignore is not None and any(fnmatch.fnmatch(path, pattern) for pattern in ignore):
            continue
        lfs = entry.get("lfs")
        if isinstance(lfs, dict) and lfs.get("oid"):
            oid = str(lfs["oid"])
            result.append(dict(path=path, size=lfs.get("size", entry.get("size")),
                               sha256=oid.split(":", 1)[1] if oid.startswith("sha256:") else oid))
        elif entry.get("oid"):
            result.append(dict(path=path, size=entry.get("size"), git_sha1=str(entry["oid"])))
        else:
            raise AnsibleFilterError("weights_listing: the hub lists %s without a git blob id (oid) or an LFS sha256: "
                                     "it cannot be verified; is this a Hugging Face Hub API?" % path)
    return result


class FilterModule(object):
    def filters(self):
        return dict(weights_plan=weights_plan, weights_peer_address=weights_peer_address, weights_status=weights_status,
                    weights_networks=weights_networks, weights_peer_url=weights_peer_url,
                    weights_listing=weights_listing)
