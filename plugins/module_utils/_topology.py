# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shape of a model's copies on a fleet: replicas (the model fits one host), tensor parallel within a host x
pipeline parallel across N hosts (it does not), or a refusal with the reason and the arithmetic.

The rules and their sources (docs/topologies.md):

- Memory one copy needs: the weights plus room for the KV cache and activations, at least
  ``headroom`` (default 20 %) of the weights, or the model's stated minimum where it is larger. 20 % is what
  the Kimi K3 NVFP4 recipe states: 1,645.9 GB of weights, a minimum of 1,976 GB of GPU memory
  (vllm-project/recipes PR #744), 1.2006 times the weights.
- Memory a host gives: its GPUs x the smallest GPU's memory x vLLM's --gpu-memory-utilization, where unset 0.9:
  the smaller of the defaults of vLLM 0.16.0 (0.9) and 0.33.0 (0.92; CacheConfig.gpu_memory_utilization in
  vllm/config/cache.py), so that a plan holds for either build.
- Across hosts without RDMA: tensor parallelism all-reduces twice per layer, pipeline parallelism hands off once
  per stage (defilantech/LLMKube#1423), so a copy that spans hosts is TP = the GPUs of a host x PP = the hosts.
  Tensor parallelism across hosts, and expert parallelism across hosts (its all-to-all kernels need RDMA: llm-d
  wide-EP's DeepEP requirement; on PCIe deepseek-ai/DeepEP#462 measured 313.5 vs 314.8 tok/s), are refused
  without RDMA. On compute capability 12.x vLLM recommends expert parallel off within a host too
  (vllm-project/vllm PR #41834): said, not refused.
- vLLM spans hosts with --nnodes/--node-rank/--master-addr/--master-port, the ranks other than 0 --headless
  (multiprocessing, no Ray).
"""

from __future__ import annotations

import math

GB = 1000 ** 3
MIB = 1024 ** 2
# vLLM's default --gpu-memory-utilization: 0.9 in 0.16.0, 0.92 in 0.33.0 (CacheConfig, vllm/config/cache.py); the smaller.
VLLM_GPU_MEMORY_UTILIZATION = 0.9
# What one copy needs beyond its weights, as a share of them: the Kimi K3 recipe's minimum over its weights.
HEADROOM = 0.2


def gb(value):
    return "{0:,.1f} GB".format(value / float(GB))


def _host_shape(name, facts):
    """(gpus, smallest GPU's MiB) of a host's facts: {gpus: N, memory_mib: M} or fleet.vllm.gpu_info's return."""
    if not isinstance(facts, dict):
        raise ValueError("host %s: its GPU facts must be a mapping, got %r" % (name, facts))
    gpus = facts.get("gpus", facts.get("count"))
    if isinstance(gpus, list):
        gpus = len(gpus)
    memory = facts.get("memory_mib", facts.get("memory_total_mib_min"))
    if memory is None and gpus == 0:
        memory = 0  # fleet.vllm.gpu_info on a host without GPUs
    for what, value in (("GPU count", gpus), ("GPU memory (MiB)", memory)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError("host %s: its %s must be a whole number, got %r" % (name, what, value))
    return gpus, memory


def _whole(value, what, minimum=1):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError("%s must be a whole number of %d or more, got %r" % (what, minimum, value))
    return value


def plan_topology(model_bytes, hosts, rdma=False, gpu_memory_utilization=None, headroom=HEADROOM,
                  min_memory_bytes=0, tensor_parallel_size=None, pipeline_parallel_size=None,
                  expert_parallel=False, compute_capability=None, model="the model", names=None):
    """The plan for MODEL_BYTES of weights on HOSTS ({name: facts}), as a dict:

    shape: replicas | group | refused; tensor_parallel_size, pipeline_parallel_size, hosts_per_copy, copies (how
    many copies the hosts hold), spare (the hosts no copy uses), needed_bytes, usable_bytes_per_host,
    arithmetic (the lines of the computation), notes, error (why refused, else None) and summary (one line).

    TENSOR_PARALLEL_SIZE / PIPELINE_PARALLEL_SIZE are the operator's explicit choice (None: planned). NAMES maps
    the options to the variables named in messages."""
    names = dict(dict(tensor_parallel_size="tensor_parallel_size", pipeline_parallel_size="pipeline_parallel_size",
                      rdma="rdma", hosts="the inventory", expert_parallel="expert_parallel",
                      gpu_memory_utilization="gpu_memory_utilization", min_memory_bytes="min_memory_bytes"),
                 **(names or {}))
    model_bytes = _whole(model_bytes, "the model's size in bytes")
    min_memory_bytes = _whole(min_memory_bytes or 0, names["min_memory_bytes"], minimum=0)
    tp = _whole(tensor_parallel_size, names["tensor_parallel_size"])
    pp = _whole(pipeline_parallel_size, names["pipeline_parallel_size"])
    try:
        utilization = float(gpu_memory_utilization or 0) or VLLM_GPU_MEMORY_UTILIZATION  # 0: vLLM's default
    except (TypeError, ValueError):
        utilization = -1.0
    if not 0 < utilization <= 1:
        raise ValueError("%s must be above 0 and at most 1, got %r" % (names["gpu_memory_utilization"], gpu_memory_utilization))
    if not isinstance(hosts, dict) or not hosts:
        raise ValueError("%s: no host to plan for" % names["hosts"])
    shapes = {name: _host_shape(name, facts) for name, facts in sorted(hosts.items())}

    need = max(int(math.ceil(model_bytes * (1 + headroom))), min_memory_bytes)
    with_headroom = "the weights + %d %% for the KV cache and activations" % round(headroom * 100)
    lines = ["%s: %s of weights; one copy needs %s: %s" % (
        model, gb(model_bytes), gb(need),
        "the model's stated minimum (%s), above %s (%s)" % (gb(min_memory_bytes), with_headroom, gb(model_bytes * (1 + headroom)))
        if min_memory_bytes > model_bytes * (1 + headroom) else with_headroom)]
    notes = []
    plan = dict(shape="refused", tensor_parallel_size=None, pipeline_parallel_size=None, hosts_per_copy=None,
                copies=0, spare=[], needed_bytes=need, usable_bytes_per_host=None, arithmetic=lines, notes=notes,
                error=None, summary=None)

    def refuse(error):
        plan.update(error=error, summary="refused: %s" % error)
        return plan

    by_shape = {}
    for name, shape in shapes.items():
        by_shape.setdefault(shape, []).append(name)
    gpuless = [name for name, (gpus, memory) in shapes.items() if not gpus or not memory]
    if gpuless:
        return refuse("%s %s no GPU with known memory: plan for GPU hosts only" % (
            ", ".join(gpuless), "has" if len(gpuless) == 1 else "have"))

    def usable(shape):
        gpus, memory = shape
        return int(gpus * memory * MIB * utilization)

    for (gpus, memory), members in sorted(by_shape.items(), key=lambda item: (-item[0][0], -item[0][1])):
        lines.append("%s: %d GPU(s) x %d MiB x %s (--gpu-memory-utilization) = %s per host"
                     % (", ".join(members), gpus, memory, utilization, gb(usable((gpus, memory)))))
    if expert_parallel and compute_capability and str(compute_capability).split(".", maxsplit=1)[0] == "12":
        notes.append("vLLM recommends expert parallel off on compute capability 12.x, even within a host "
                     "(vllm-project/vllm PR #41834)")

    explicit = tp is not None or pp is not None
    if explicit:
        return _explicit(plan, shapes, by_shape, need, usable, tp or 1, pp or 1, rdma, expert_parallel, names, refuse)

    fits = [name for name, shape in shapes.items() if usable(shape) >= need]
    if fits and len(fits) == len(shapes):
        smallest = min(shapes.values(), key=usable)
        per_gpu = smallest[1] * MIB * utilization
        least = next((t for t in (1, 2, 4, 8, 16, 32, 64) if t <= smallest[0] and t * per_gpu >= need), smallest[0])
        plan.update(shape="replicas", tensor_parallel_size=smallest[0] if len(by_shape) == 1 else None,
                    pipeline_parallel_size=1, hosts_per_copy=1, copies=len(shapes),
                    usable_bytes_per_host=usable(smallest))
        lines.append("%s <= %s: one host holds a copy; %d replica(s), one per host, TP = the host's GPUs x PP 1"
                     % (gb(need), gb(usable(smallest)), len(shapes)))
        if least < smallest[0]:
            notes.append("a copy fits in %d GPU(s) (%d x %s = %s): up to %d instances per host, each on its own "
                         "GPUs, instead of one" % (least, least, gb(per_gpu), gb(least * per_gpu), smallest[0] // least))
        plan["summary"] = "replicas: %d, TP %s x PP 1 each" % (len(shapes), plan["tensor_parallel_size"] or "= the host's GPUs")
        return plan
    if fits:
        short = sorted(set(shapes) - set(fits))
        return refuse("%s cannot hold a copy (%s needed) while %s can: a copy that spans hosts needs hosts alike; "
                      "serve it on the hosts that hold it, or on a group of hosts alike" % (
                          ", ".join(short), gb(need), ", ".join(sorted(fits))))
    if len(by_shape) > 1:
        return refuse("the model needs several hosts and %s differ in GPUs (%s): the members of a group must have "
                      "the same GPUs" % (names["hosts"], "; ".join(
                          "%s: %d x %d MiB" % (", ".join(members), shape[0], shape[1])
                          for shape, members in sorted(by_shape.items()))))
    shape, members = list(by_shape.items())[0]
    per_host = usable(shape)
    count = int(math.ceil(need / float(per_host)))
    lines.append("%s / %s = %.2f: a copy spans %d hosts; TP %d (the GPUs of a host) x PP %d (the hosts), without "
                 "tensor parallel across hosts" % (gb(need), gb(per_host), need / float(per_host), count, shape[0], count))
    plan.update(tensor_parallel_size=shape[0], pipeline_parallel_size=count, hosts_per_copy=count,
                usable_bytes_per_host=per_host)
    if expert_parallel and not rdma:
        return refuse("%s across %d hosts needs RDMA (its all-to-all kernels; llm-d wide-EP, deepseek-ai/DeepEP#462) "
                      "and %s is false: turn it off" % (names["expert_parallel"], count, names["rdma"]))
    if len(members) < count:
        return refuse("%d hosts needed for one copy (TP %d x PP %d), %s has %d: %d missing" % (
            count, shape[0], count, names["hosts"], len(members), count - len(members)))
    copies = len(members) // count
    plan.update(shape="group", copies=copies, spare=sorted(members)[copies * count:])
    lines.append("%d host(s) / %d per copy = %d group(s)%s" % (
        len(members), count, copies, ", %d spare" % len(plan["spare"]) if plan["spare"] else ""))
    plan["summary"] = "group: %d host(s) per copy, TP %d x PP %d, %d copy(ies)" % (count, shape[0], count, copies)
    return plan


def _explicit(plan, shapes, by_shape, need, usable, tp, pp, rdma, expert_parallel, names, refuse):
    """The operator's TP x PP, checked: fits, no tensor or expert parallel across hosts without RDMA."""
    lines = plan["arithmetic"]
    smallest = min(shapes.values(), key=usable)
    gpus = smallest[0]
    world = tp * pp
    hosts_per_copy = int(math.ceil(world / float(gpus)))
    per_gpu = usable(smallest) / float(gpus)
    lines.append("%s %d x %s %d = %d GPUs: %d host(s) of %d GPUs per copy, %s" % (
        names["tensor_parallel_size"], tp, names["pipeline_parallel_size"], pp, world, hosts_per_copy, gpus,
        gb(world * per_gpu)))
    plan.update(tensor_parallel_size=tp, pipeline_parallel_size=pp, hosts_per_copy=hosts_per_copy,
                usable_bytes_per_host=usable(smallest))
    if hosts_per_copy > 1 and len(by_shape) > 1:
        return refuse("a copy spans %d hosts and %s differ in GPUs: the members of a group must have the same GPUs"
                      % (hosts_per_copy, names["hosts"]))
    if tp > gpus and not rdma:
        return refuse("%s %d spans %d hosts of %d GPUs: its all-reduces (two per layer) would cross the network, and "
                      "%s is false; keep tensor parallel within a host (%s at most %d) and span hosts with %s" % (
                          names["tensor_parallel_size"], tp, int(math.ceil(tp / float(gpus))), gpus, names["rdma"],
                          names["tensor_parallel_size"], gpus, names["pipeline_parallel_size"]))
    if world % hosts_per_copy or (hosts_per_copy > 1 and world // hosts_per_copy != gpus):
        return refuse("%s x %s = %d GPUs does not fill %d host(s) of %d GPUs alike: a copy across hosts uses every "
                      "GPU of each (%s = %d)" % (names["tensor_parallel_size"], names["pipeline_parallel_size"], world,
                                                 hosts_per_copy, gpus, names["tensor_parallel_size"], gpus))
    if hosts_per_copy == 1 and gpus % world:
        return refuse("%s x %s = %d GPUs does not divide the %d GPUs of a host" % (
            names["tensor_parallel_size"], names["pipeline_parallel_size"], world, gpus))
    if world * per_gpu < need:
        return refuse("%s x %s = %d GPUs give %s, one copy needs %s: raise them" % (
            names["tensor_parallel_size"], names["pipeline_parallel_size"], world, gb(world * per_gpu), gb(need)))
    if expert_parallel and hosts_per_copy > 1 and not rdma:
        return refuse("%s across %d hosts needs RDMA (its all-to-all kernels; llm-d wide-EP, deepseek-ai/DeepEP#462) "
                      "and %s is false: turn it off" % (names["expert_parallel"], hosts_per_copy, names["rdma"]))
    if hosts_per_copy == 1:
        per_host = gpus // world
        plan.update(shape="replicas", copies=len(shapes) * per_host)
        plan["summary"] = "replicas: %d (%d per host), TP %d x PP %d each" % (len(shapes) * per_host, per_host, tp, pp)
        lines.append("%s needed <= %s given by %d GPU(s): %d copy(ies) per host"
                     % (gb(need), gb(world * per_gpu), world, per_host))
        return plan
    if len(shapes) < hosts_per_copy:
        return refuse("%d hosts needed for one copy (%s %d x %s %d), %s has %d: %d missing" % (
            hosts_per_copy, names["tensor_parallel_size"], tp, names["pipeline_parallel_size"], pp, names["hosts"],
            len(shapes), hosts_per_copy - len(shapes)))
    copies = len(shapes) // hosts_per_copy
    plan.update(shape="group", copies=copies, spare=sorted(shapes)[copies * hosts_per_copy:])
    plan["summary"] = "group: %d host(s) per copy, TP %d x PP %d, %d copy(ies)" % (hosts_per_copy, tp, pp, copies)
    return plan
