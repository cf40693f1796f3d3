# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: rolling_batch
short_description: How many hosts one batch of a rolling restart takes
version_added: "0.1.0"
author: fleet.vllm developers (@fleet-vllm)
description:
  - Turns a batch size given as a count or a percentage of the hosts to roll (as Ansible's C(serial)
    takes it) into a count, capped at O(max_down) - never more hosts restarting at once than that.
  - A percentage is of O(hosts) and rounds down as Ansible's C(serial) does, but a batch takes at
    least one host.
  - Bad input fails naming the variable (C(fleet_vllm_serial), C(fleet_vllm_max_down)).
options:
  _input:
    description: The batch size - a whole number (V(2), V("2")) or a percentage (V("25%")).
    type: raw
    required: true
  max_down:
    description: The most hosts that may be down at once; a whole number, 1 or more.
    type: raw
    required: true
  hosts:
    description: How many hosts are to be rolled (a percentage is of these).
    type: int
    required: true
  setting:
    description: The variable the batch size comes from, named in the messages (the canary gate's is C(fleet_vllm_canary)).
    type: str
    default: fleet_vllm_serial
"""

EXAMPLES = r"""
- name: Compute the batch of the rolling phase
  ansible.builtin.set_fact:
    batch: "{{ '25%' | fleet.vllm.rolling_batch(max_down=4, hosts=32) }}"
# batch == 4 (25% of 32 is 8, capped at 4 down at once)
"""

RETURN = r"""
_value:
  description: The number of hosts per batch, from 1 to O(max_down).
  type: int
"""

import math
import re

from ansible.errors import AnsibleFilterError

COUNT = re.compile(r"^\s*([0-9]+)\s*\Z")
PERCENT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*%\s*\Z")


def _count(value, name):
    if isinstance(value, bool):
        raise AnsibleFilterError("%s is %r: set a whole number of hosts, 1 or more" % (name, value))
    if isinstance(value, int):
        number = value
    else:
        match = COUNT.match(str(value))
        if not match:
            return None
        number = int(match.group(1))
    if number < 1:
        raise AnsibleFilterError("%s is %r: set a whole number of hosts, 1 or more" % (name, value))
    return number


def rolling_batch(serial, max_down, hosts, setting="fleet_vllm_serial"):
    try:
        hosts = int(hosts)
    except (TypeError, ValueError):
        raise AnsibleFilterError("rolling_batch: hosts must be a number, got %r" % (hosts,))
    down = _count(max_down, "fleet_vllm_max_down")
    if down is None:
        raise AnsibleFilterError("fleet_vllm_max_down is %r: set the most hosts that may restart at once, a whole number"
                                 " (1 or more)" % (max_down,))
    batch = _count(serial, setting)
    if batch is None:
        match = PERCENT.match(str(serial))
        if not match or float(match.group(1)) <= 0 or float(match.group(1)) > 100:
            raise AnsibleFilterError("%s is %r: set a number of hosts (2) or a percentage of the hosts to"
                                     " roll above 0 and up to 100 (25%%)" % (setting, serial))
        batch = max(1, int(math.floor(hosts * float(match.group(1)) / 100.0)))
    return max(1, min(batch, down))


class FilterModule(object):
    def filters(self):
        return dict(rolling_batch=rolling_batch)
