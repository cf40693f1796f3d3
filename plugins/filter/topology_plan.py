# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: topology_plan
short_description: Plan how a model's copies are laid over the fleet's hosts, or refuse the shape with the reason
version_added: "0.9.0"
author: fleet.vllm developers (@fleet-vllm)
description:
  - From the model's size, each host's GPUs (count and memory) and whether the hosts have RDMA between them, says
    how the model is served - V(replicas) (one host holds a copy; one per host), V(group) (a copy spans several
    hosts - tensor parallel within a host x pipeline parallel across the hosts), or V(refused) with the reason.
  - One copy needs its weights plus 20 % for the KV cache and activations, or the model's stated minimum where it is
    larger; a host gives its GPUs x its smallest GPU's memory x vLLM's C(--gpu-memory-utilization) (0.9 unless set).
    The result's C(arithmetic) shows the computation.
  - Refused - tensor parallel or expert parallel across hosts without RDMA, a copy that spans hosts whose GPUs
    differ, not enough hosts for one copy (naming how many are missing), an explicit size that does not fit.
  - The rules and their sources are in the collection's docs/topologies.md.
options:
  _input:
    description: The model's size in bytes (its weights, as the Hub lists them).
    type: int
    required: true
  hosts:
    description:
      - The hosts, by name, each with its GPU facts - C({gpus, memory_mib}) or the return of
        M(fleet.vllm.gpu_info) (C(count), C(memory_total_mib_min)).
    type: dict
    required: true
  rdma:
    description: Whether the hosts reach each other over RDMA (InfiniBand or RoCE).
    type: bool
    default: false
  gpu_memory_utilization:
    description: vLLM's C(--gpu-memory-utilization); V(0) or V(null) for vLLM's default, 0.9.
    type: float
  min_memory_bytes:
    description: The model's stated minimum of GPU memory per copy, where its recipe gives one (V(0) for none).
    type: int
    default: 0
  headroom_percent:
    description: What one copy needs beyond its weights for the KV cache and activations, in percent of the weights.
    type: int
    default: 20
  tensor_parallel_size:
    description: An explicit tensor-parallel size (the operator's override); V(null) to plan it.
    type: int
  pipeline_parallel_size:
    description: An explicit pipeline-parallel size; V(null) to plan it.
    type: int
  expert_parallel:
    description: Whether the copy runs with expert parallel on.
    type: bool
    default: false
  compute_capability:
    description: The GPUs' compute capability, for what vLLM recommends on it.
    type: str
  model:
    description: How to name the model in the arithmetic.
    type: str
    default: the model
  names:
    description: The variables to name in messages, by option (C(tensor_parallel_size), C(pipeline_parallel_size),
      C(rdma), C(hosts), C(expert_parallel), C(gpu_memory_utilization), C(min_memory_bytes)).
    type: dict
"""

EXAMPLES = r"""
- name: Plan Kimi K3 NVFP4 on the fleet
  ansible.builtin.debug:
    msg: "{{ (1645900000000 | fleet.vllm.topology_plan(hosts={'gpu-01': {'gpus': 8, 'memory_mib': 97887}})).summary }}"
# refused: 3 hosts needed for one copy (TP 8 x PP 3), the inventory has 1: 2 missing
"""

RETURN = r"""
_value:
  description: The plan.
  type: dict
  contains:
    shape:
      description: V(replicas), V(group) or V(refused).
      type: str
    tensor_parallel_size:
      description: TP per copy (V(null) when refused before it is known, or for replicas on hosts that differ).
      type: int
    pipeline_parallel_size:
      description: PP per copy.
      type: int
    hosts_per_copy:
      description: How many hosts one copy spans.
      type: int
    copies:
      description: How many copies the hosts hold.
      type: int
    spare:
      description: The hosts that no copy uses.
      type: list
      elements: str
    needed_bytes:
      description: What one copy needs of GPU memory.
      type: int
    usable_bytes_per_host:
      description: What a host gives.
      type: int
    arithmetic:
      description: The computation, line by line.
      type: list
      elements: str
    notes:
      description: What is worth knowing and changes nothing.
      type: list
      elements: str
    error:
      description: Why the shape is refused, else V(null).
      type: str
    summary:
      description: The plan in one line.
      type: str
"""

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.fleet.vllm.plugins.module_utils._topology import plan_topology


def _number(value):
    """A whole number as the inventory may write it ("8"); anything else goes on, to be refused by name."""
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return value


def _headroom(percent):
    percent = _number(percent)
    if isinstance(percent, bool) or not isinstance(percent, int) or percent < 0:
        raise ValueError("the memory headroom must be a whole percentage, got %r" % (percent,))
    return percent / 100.0


def topology_plan(model_bytes, hosts=None, rdma=False, gpu_memory_utilization=None, min_memory_bytes=0,
                  headroom_percent=20, tensor_parallel_size=None, pipeline_parallel_size=None, expert_parallel=False,
                  compute_capability=None, model="the model", names=None):
    try:
        return plan_topology(_number(model_bytes), hosts, rdma=boolean(rdma, strict=True),
                             gpu_memory_utilization=gpu_memory_utilization, min_memory_bytes=_number(min_memory_bytes),
                             headroom=_headroom(headroom_percent),
                             tensor_parallel_size=_number(tensor_parallel_size),
                             pipeline_parallel_size=_number(pipeline_parallel_size),
                             expert_parallel=boolean(expert_parallel, strict=True),
                             compute_capability=compute_capability, model=model, names=names)
    except (TypeError, ValueError) as error:
        raise AnsibleFilterError("topology_plan: %s" % error)


class FilterModule(object):
    def filters(self):
        return {"topology_plan": topology_plan}
