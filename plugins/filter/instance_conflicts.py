# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: instance_conflicts
short_description: What one engine instance shares with the other instances of its machine
version_added: "0.9.0"
author: fleet.vllm developers (@fleet-vllm)
positional: host
description:
  - Several vLLM engine instances may run on one machine, each an inventory host of its own (C(fleet_vllm_instance)
    names it, empty for the machine's one engine). Takes one entry per instance and returns the conflicts of
    O(host) with the other entries of the same non-empty C(machine) (such as
    RV(fleet.vllm.preflight#module:machine_id)); entries with an empty C(machine) are compared with none.
  - "Conflicts: the same instance name twice on one machine; a GPU UUID both list; a port equal to a port of the
    other; a port inside the other's block of internal ports (vLLM's C(VLLM_PORT) and up), either way; overlapping
    blocks; an instance with no GPUs (it takes every GPU of the machine) on a machine of several instances."
  - Each message names both inventory hosts, the machine, and the variable to change - C(fleet_vllm_instance),
    C(fleet_vllm_instance_gpus), C(fleet_vllm_instance_port_base), or the variable that sets the port (the key of
    C(ports)).
options:
  _input:
    description:
      - The instances, one dict each with C(host) (the inventory host), C(machine), C(instance) (its name, empty for
        the machine's one engine), C(gpus) (GPU UUIDs, empty for every GPU), C(ports) (variable name to port),
        C(block_start) (the first internal port, V(0) for no block) and C(block_size) (default 32).
    type: list
    elements: dict
    required: true
  host:
    description: The inventory host whose conflicts are returned; it must be one of the entries.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Refuse instances of one machine that share GPUs or ports
  ansible.builtin.assert:
    that: __conflicts | length == 0
    fail_msg: "{{ __conflicts | join('; ') }}"
  vars:
    __conflicts: >-
      {{ [{'host': 'gpu1-a', 'machine': '4f1c', 'instance': 'a', 'gpus': ['GPU-2c3e7876-b74a-57b3-94a4-1b4d866fd427'],
           'ports': {'vllm_server_port': 8001}, 'block_start': 29500, 'block_size': 32},
          {'host': 'gpu1-b', 'machine': '4f1c', 'instance': 'b', 'gpus': ['GPU-0d2261a5-0a7f-5a5d-92a9-a81b02a1a4e6'],
           'ports': {'vllm_server_port': 8002}, 'block_start': 29532, 'block_size': 32}]
         | fleet.vllm.instance_conflicts('gpu1-a') }}
# [] - each has its own GPU, port and block
"""

RETURN = r"""
_value:
  description: One message per conflict of O(host), in the order of the other entries; empty when there is none.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_text

from collections.abc import Mapping, Sequence

DEFAULT_BLOCK_SIZE = 32
INSTANCE_VAR = "fleet_vllm_instance"
GPUS_VAR = "fleet_vllm_instance_gpus"
BLOCK_VAR = "fleet_vllm_instance_port_base"


def _int(value, host, field):
    if isinstance(value, bool):
        raise AnsibleFilterError("instance_conflicts: %s of %s is %r, not a whole number" % (field, host, value))
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        raise AnsibleFilterError("instance_conflicts: %s of %s is %r, not a whole number" % (field, host, value))


def _entry(item):
    if not isinstance(item, Mapping):
        raise AnsibleFilterError("instance_conflicts: each instance must be a dict, got %r" % (item,))
    host = to_text(item.get("host") or "")
    if not host:
        raise AnsibleFilterError("instance_conflicts: an instance has no host: %r" % (item,))
    gpus = item.get("gpus") or []
    if isinstance(gpus, (str, bytes)) or not isinstance(gpus, Sequence):
        raise AnsibleFilterError("instance_conflicts: gpus of %s must be a list, got %r" % (host, gpus))
    ports = item.get("ports") or {}
    if not isinstance(ports, Mapping):
        raise AnsibleFilterError("instance_conflicts: ports of %s must be a dict of variable: port, got %r" % (host, ports))
    start = _int(item.get("block_start"), host, "block_start")
    size = DEFAULT_BLOCK_SIZE if item.get("block_size") is None else _int(item["block_size"], host, "block_size")
    ports = dict((to_text(name), _int(port, host, to_text(name))) for name, port in ports.items())
    return dict(
        host=host,
        machine=to_text(item.get("machine") or "").strip(),
        instance=to_text(item.get("instance") or ""),
        gpus=[to_text(gpu) for gpu in gpus],
        ports=dict((name, port) for name, port in ports.items() if port),
        block=(start, start + max(size, 1) - 1) if start else None,
    )


def _instance(entry):
    return "the machine's one engine (%s empty)" % INSTANCE_VAR if not entry["instance"] else \
        "instance \"%s\" (%s)" % (entry["instance"], INSTANCE_VAR)


def _block(entry):
    return "%d-%d (%s)" % (entry["block"][0], entry["block"][1], BLOCK_VAR)


def _pair_conflicts(mine, other):
    me, it, machine = mine["host"], other["host"], mine["machine"]
    found = []
    if mine["instance"] == other["instance"]:
        found.append("%s and %s are both %s of machine %s: give each instance of a machine a name of its own (%s)"
                     % (me, it, _instance(mine), machine, INSTANCE_VAR))
    theirs = set(gpu.strip().lower() for gpu in other["gpus"])
    shared = [gpu for gpu in mine["gpus"] if gpu.strip().lower() in theirs]
    if shared:
        found.append("%s and %s both list %s in %s, on machine %s: give each instance GPUs of its own"
                     % (me, it, ", ".join(shared), GPUS_VAR, machine))
    if not mine["gpus"]:
        found.append("%s lists no GPUs (%s empty), so its engine would take every GPU of machine %s, which %s shares: "
                     "list the GPUs of each instance of the machine (%s of %s and of %s)"
                     % (me, GPUS_VAR, machine, it, GPUS_VAR, me, it))
    if not other["gpus"]:
        found.append("%s shares machine %s with %s, which lists no GPUs (%s empty), so its engine would take every "
                     "GPU: list the GPUs of each instance of the machine (%s of %s and of %s)"
                     % (me, machine, it, GPUS_VAR, GPUS_VAR, me, it))
    for name, port in sorted(mine["ports"].items(), key=lambda item: (item[1], item[0])):
        for other_name, other_port in sorted(other["ports"].items()):
            if port == other_port:
                found.append("%s's %s and %s's %s are both port %d on machine %s: change one of them"
                             % (me, name, it, other_name, port, machine))
        if other["block"] and other["block"][0] <= port <= other["block"][1]:
            found.append(
                "%s's %s (%d) is inside %s's block of internal ports %s on machine %s, from which vLLM takes ports "
                "(VLLM_PORT and up): change %s's %s or %s's %s" % (me, name, port, it, _block(other), machine, me, name,
                                                                   it, BLOCK_VAR))
    if mine["block"]:
        for other_name, other_port in sorted(other["ports"].items(), key=lambda item: (item[1], item[0])):
            if mine["block"][0] <= other_port <= mine["block"][1]:
                found.append(
                    "%s's %s (%d) is inside %s's block of internal ports %s on machine %s, from which vLLM takes ports "
                    "(VLLM_PORT and up): change %s's %s or %s's %s" % (it, other_name, other_port, me, _block(mine),
                                                                       machine, it, other_name, me, BLOCK_VAR))
        if other["block"] and mine["block"][0] <= other["block"][1] and other["block"][0] <= mine["block"][1]:
            found.append("%s's block of internal ports %s and %s's %s overlap on machine %s: give each instance a "
                         "block of its own (%s of %s or of %s)"
                         % (me, _block(mine), it, _block(other), machine, BLOCK_VAR, me, it))
    return found


def instance_conflicts(instances, host):
    if isinstance(instances, (str, bytes, Mapping)) or not isinstance(instances, Sequence):
        raise AnsibleFilterError("instance_conflicts: the instances must be a list of dicts, got %r" % (instances,))
    entries = [_entry(item) for item in instances]
    host = to_text(host)
    mine = next((entry for entry in entries if entry["host"] == host), None)
    if mine is None:
        raise AnsibleFilterError("instance_conflicts: %s is not among the instances (%s)"
                                 % (host, ", ".join(entry["host"] for entry in entries) or "none"))
    if not mine["machine"]:
        return []
    problems = []
    for other in entries:
        if other is mine or other["host"] == host or other["machine"] != mine["machine"]:
            continue
        problems.extend(_pair_conflicts(mine, other))
    return problems


class FilterModule(object):
    def filters(self):
        return {"instance_conflicts": instance_conflicts}
