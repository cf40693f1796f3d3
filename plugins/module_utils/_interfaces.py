# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host's network addresses in the shape of ansible.builtin.setup's network facts, read with
``ip -json address show``: fleet.vllm.host_state and fleet.vllm.preflight report them (the weights
role derives the networks its peers may copy from)."""

from __future__ import annotations

import json


def interfaces(module, required=True):
    """The interfaces; without ``ip`` (iproute2), a failure, or None when not ``required``."""
    ip = module.get_bin_path("ip")
    if not ip:
        if not required:
            return None
        module.fail_json(msg="the ip command (iproute2) is not installed, so this host's network addresses cannot be read: "
                             "install iproute2, or set the networks explicitly (vllm_weights_peer_networks)")
    rc, out, err = module.run_command([ip, "-json", "address", "show"])
    if rc != 0:
        module.fail_json(msg="ip -json address show failed (exit code %d): %s" % (rc, err.strip()))
    try:
        links = json.loads(out or "[]")
    except ValueError as exc:
        module.fail_json(msg="ip -json address show printed no JSON (%s): is iproute2 older than 4.13?" % exc)
    result = {}
    for link in links:
        name = link.get("ifname")
        if not name:
            continue
        entry = dict(device=name, ipv4={}, ipv4_secondaries=[], ipv6=[])
        for address in link.get("addr_info") or []:
            local, prefix = address.get("local"), address.get("prefixlen")
            if not local or prefix is None:
                continue
            if address.get("family") == "inet":
                item = dict(address=local, prefix=str(prefix))
                if entry["ipv4"]:
                    entry["ipv4_secondaries"].append(item)
                else:
                    entry["ipv4"] = item
            elif address.get("family") == "inet6":
                entry["ipv6"].append(dict(address=local, prefix=str(prefix), scope=address.get("scope", "")))
        result[name] = entry
    return result
