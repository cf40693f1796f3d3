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
  - With source V(hub) every host that lacks the snapshot downloads it; with V(shared) every host
    verifies it.
options:
  _input:
    description:
      - One entry per host - C(host) (its name), C(site), C(complete) (bool, or null when unknown),
        C(in_play) (bool), C(seed) (the seed host its variables name, or empty).
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
# plan['gpu-node-02'] == {'action': 'copy', 'peer': 'gpu-node-01', 'reason': '...'}
"""

RETURN = r"""
_value:
  description: Host name -> C(action), C(peer) (for V(copy), else null) and C(reason), for the hosts of the play.
  type: dict
"""

# weights_peer_address is documented in weights_peer_address.yml next to this file.

from ansible.errors import AnsibleFilterError

SOURCES = ("peer", "hub", "shared")


def _entry(raw):
    if not isinstance(raw, dict) or not raw.get("host"):
        raise AnsibleFilterError("weights_plan: each entry needs a host name, got %r" % (raw,))
    return dict(host=str(raw["host"]), site=str(raw.get("site") or "default"), complete=raw.get("complete"),
                in_play=bool(raw.get("in_play")), seed=str(raw.get("seed") or ""))


def weights_plan(hosts, source):
    if source not in SOURCES:
        raise AnsibleFilterError("vllm_weights_source is %r: use one of %s" % (source, ", ".join(SOURCES)))
    entries = [_entry(raw) for raw in hosts or []]
    plan = {}
    if source == "shared":
        for e in entries:
            if e["in_play"]:
                plan[e["host"]] = dict(action="verify", peer=None, reason="shared storage: verify only")
        return plan
    if source == "hub":
        for e in entries:
            if e["in_play"]:
                plan[e["host"]] = (dict(action="none", peer=None, reason="the snapshot is complete here") if e["complete"]
                                   else dict(action="download", peer=None, reason="source hub: every host downloads"))
        return plan
    sites = {}
    for e in entries:
        sites.setdefault(e["site"], []).append(e)
    for site, members in sites.items():
        players = [e for e in members if e["in_play"]]
        if not players:
            continue
        sources = [e["host"] for e in members if e["complete"]]
        seed = None
        if not sources:
            named = [e["seed"] for e in players if e["seed"]]
            by_name = dict((e["host"], e) for e in players)
            seed = next((name for name in named if name in by_name), None) or players[0]["host"]
        lacking = 0
        for e in players:
            if e["complete"]:
                plan[e["host"]] = dict(action="none", peer=None, reason="the snapshot is complete here")
            elif e["host"] == seed:
                plan[e["host"]] = dict(action="download", peer=None,
                                       reason="no host of site %s has the snapshot: this one fetches it for the site" % site)
            else:
                if sources:
                    candidates = [name for name in sources if name != e["host"]]
                    peer = candidates[lacking % len(candidates)]
                    reason = "copy from %s, which has the snapshot" % peer
                else:
                    peer = seed
                    reason = "copy from %s once it has fetched the snapshot for site %s" % (seed, site)
                lacking += 1
                plan[e["host"]] = dict(action="copy", peer=peer, reason=reason)
    return plan


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


def _get(mapping, name, default=None):
    try:
        value = mapping.get(name, default)
    except AttributeError:
        return default
    return default if value is None else value


def weights_status(data, in_play, all_hostvars=None):
    """A weights_plan entry: from a host's variables (in the play), or from the result of asking a host outside
    the play (a loop result of fleet.vllm.hf_snapshot delegated to it, with all_hostvars)."""
    if in_play:
        local = _get(data, "__vllm_weights_local", {}) or {}
        return dict(host=_get(data, "inventory_hostname"), site=_get(data, "vllm_weights_site", "default"),
                    complete=bool(_get(local, "complete", False)), in_play=True,
                    seed=_get(data, "vllm_weights_seed_host", ""))
    host = _get(data, "item")
    if not host:
        raise AnsibleFilterError("weights_status: expects a loop result with an item (the host asked), got %r" % (data,))
    host_vars = _get(all_hostvars or {}, host, {})
    usable = not (_get(data, "unreachable", False) or _get(data, "failed", False) or _get(data, "skipped", False))
    return dict(host=host, site=_get(host_vars, "vllm_weights_site", "default"),
                complete=bool(usable and _get(data, "complete", False)), in_play=False,
                seed=_get(host_vars, "vllm_weights_seed_host", ""))


class FilterModule(object):
    def filters(self):
        return dict(weights_plan=weights_plan, weights_peer_address=weights_peer_address, weights_status=weights_status)
