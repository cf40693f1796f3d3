"""fleet.vllm.topology_plan: the planner's answers for a table of (model, fleet) fixtures (issue 26). The hosts' GPU
facts are what fleet.vllm.gpu_info makes (the same command lines and parser) of the stand-in nvidia-smi's answers
from the captured outputs under tests/fixtures/nvidia-smi, so the memory per GPU is what the real cards report
(RTX PRO 6000 Blackwell: 97887 MiB)."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.fleet.vllm.plugins.filter.topology_plan import topology_plan
from ansible_collections.fleet.vllm.plugins.module_utils._nvidia_smi import (
    parse_gpu_query, parse_topology, query_argv, summarise, topology_argv)

NVIDIA_SMI = str(Path(__file__).resolve().parents[3] / "fixtures" / "bin" / "nvidia-smi")

# The models (docs/topologies.md says where each figure comes from).
KIMI_K25 = 591 * 10 ** 9  # nvidia/Kimi-K2.5-NVFP4: ~540-591 GB in 119 shards; the upper figure
KIMI_K25_LOW = 540 * 10 ** 9
KIMI_K3 = 1_645_900_000_000  # Kimi K3 NVFP4: 1,645.9 GB (vllm-project/recipes PR #744)
KIMI_K3_MIN = 1_976 * 10 ** 9  # its stated minimum of GPU memory, same source
SMALL = 16 * 10 ** 9  # an 8B model in BF16, a helper model


@functools.lru_cache(maxsize=None)
def facts(fixture):
    """fleet.vllm.gpu_info's facts of a host whose nvidia-smi answers from the captured outputs of FIXTURE."""
    env = dict(os.environ, FLEET_VLLM_FAKE_GPUS=fixture)

    def ask(argv):
        return subprocess.run(argv, env=env, capture_output=True, text=True, check=True, timeout=60).stdout
    return summarise(parse_gpu_query(ask(query_argv(NVIDIA_SMI))), "13.0", parse_topology(ask(topology_argv(NVIDIA_SMI))))


def fleet(count, fixture="rtx-pro-6000-x8"):
    one = facts(fixture)
    return {"gpu-%02d" % n: one for n in range(1, count + 1)}


def test_the_fixtures_are_the_cards_the_plans_assume():
    assert facts("rtx-pro-6000-x8")["count"] == 8 and facts("rtx-pro-6000-x8")["memory_total_mib_min"] == 97887
    assert facts("h100-sxm-x8")["count"] == 8 and facts("h100-sxm-x8")["memory_total_mib_min"] != 97887


@pytest.mark.parametrize("size", [KIMI_K25, KIMI_K25_LOW], ids=["591GB", "540GB"])
def test_kimi_k25_on_8x96gb_hosts_is_replicas(size):
    plan = topology_plan(size, hosts=fleet(4), model="nvidia/Kimi-K2.5-NVFP4")
    assert plan["shape"] == "replicas" and plan["error"] is None, plan
    assert (plan["tensor_parallel_size"], plan["pipeline_parallel_size"], plan["hosts_per_copy"], plan["copies"]) == (8, 1, 1, 4)
    # The arithmetic: 8 x 97887 MiB x 0.9 = 739.0 GB per host, against the weights + 20 %.
    text = "\n".join(plan["arithmetic"])
    assert "8 GPU(s) x 97887 MiB x 0.9 (--gpu-memory-utilization) = 739.0 GB per host" in text, text
    assert "%s <= 739.0 GB: one host holds a copy" % ("709.2 GB" if size == KIMI_K25 else "648.0 GB") in text, text
    assert plan["summary"] == "replicas: 4, TP 8 x PP 1 each"


def test_kimi_k3_on_the_same_hosts_is_tp8_by_pp3_with_the_arithmetic():
    plan = topology_plan(KIMI_K3, hosts=fleet(8), min_memory_bytes=KIMI_K3_MIN, model="Kimi K3 NVFP4")
    assert plan["shape"] == "group" and plan["error"] is None, plan
    assert (plan["tensor_parallel_size"], plan["pipeline_parallel_size"], plan["hosts_per_copy"]) == (8, 3, 3)
    assert plan["copies"] == 2 and plan["spare"] == ["gpu-07", "gpu-08"]
    assert plan["needed_bytes"] == KIMI_K3_MIN
    text = "\n".join(plan["arithmetic"])
    # The stated minimum (1,976 GB) is above the weights + 20 % (1,975.1 GB): it is what a copy needs.
    assert "one copy needs 1,976.0 GB: the model's stated minimum (1,976.0 GB), above the weights + 20 %" in text, text
    assert "1,976.0 GB / 739.0 GB = 2.67: a copy spans 3 hosts; TP 8 (the GPUs of a host) x PP 3 (the hosts)" in text, text
    assert "8 host(s) / 3 per copy = 2 group(s), 2 spare" in text, text


def test_kimi_k3_without_enough_hosts_is_refused_naming_how_many_are_missing():
    plan = topology_plan(KIMI_K3, hosts=fleet(2), min_memory_bytes=KIMI_K3_MIN, model="Kimi K3 NVFP4")
    assert plan["shape"] == "refused", plan
    assert plan["error"] == "3 hosts needed for one copy (TP 8 x PP 3), the inventory has 2: 1 missing"
    assert plan["summary"].startswith("refused: ")


def test_cross_host_tensor_parallel_without_rdma_is_refused_and_with_rdma_planned():
    names = dict(tensor_parallel_size="fleet_vllm_tensor_parallel_size", rdma="fleet_vllm_rdma",
                 pipeline_parallel_size="fleet_vllm_pipeline_parallel_size")
    refused = topology_plan(KIMI_K3, hosts=fleet(4), min_memory_bytes=KIMI_K3_MIN, tensor_parallel_size=16,
                            pipeline_parallel_size=2, names=names)
    assert refused["shape"] == "refused", refused
    assert refused["error"].startswith("fleet_vllm_tensor_parallel_size 16 spans 2 hosts of 8 GPUs: its all-reduces "
                                       "(two per layer) would cross the network, and fleet_vllm_rdma is false")
    allowed = topology_plan(KIMI_K3, hosts=fleet(4), min_memory_bytes=KIMI_K3_MIN, tensor_parallel_size=16,
                            pipeline_parallel_size=2, rdma=True, names=names)
    assert allowed["shape"] == "group" and allowed["hosts_per_copy"] == 4 and allowed["copies"] == 1, allowed


def test_expert_parallel_across_hosts_without_rdma_is_refused():
    plan = topology_plan(KIMI_K3, hosts=fleet(3), min_memory_bytes=KIMI_K3_MIN, expert_parallel="true")
    assert plan["shape"] == "refused" and "expert_parallel across 3 hosts needs RDMA" in plan["error"], plan


def test_expert_parallel_within_a_host_on_sm12x_is_said_not_refused():
    plan = topology_plan(KIMI_K25, hosts=fleet(2), expert_parallel=True, compute_capability="12.0")
    assert plan["shape"] == "replicas", plan
    assert any("PR #41834" in note for note in plan["notes"]), plan["notes"]


def test_a_group_of_hosts_whose_gpus_differ_is_refused():
    hosts = dict(fleet(2), **{"gpu-h100": facts("h100-sxm-x8"), "gpu-h100-b": facts("h100-sxm-x8")})
    plan = topology_plan(KIMI_K3, hosts=hosts, min_memory_bytes=KIMI_K3_MIN)
    assert plan["shape"] == "refused" and "differ in GPUs" in plan["error"], plan
    assert "gpu-01, gpu-02: 8 x 97887 MiB" in plan["error"], plan["error"]


def test_an_explicit_shape_that_does_not_hold_the_model_is_refused_with_the_figures():
    plan = topology_plan(KIMI_K3, hosts=fleet(4), min_memory_bytes=KIMI_K3_MIN, tensor_parallel_size=8,
                         pipeline_parallel_size=2)
    assert plan["shape"] == "refused", plan
    assert plan["error"] == "tensor_parallel_size x pipeline_parallel_size = 16 GPUs give 1,478.0 GB, one copy needs 1,976.0 GB: raise them"


def test_an_explicit_shape_that_holds_it_on_more_hosts_than_planned_is_followed():
    plan = topology_plan(KIMI_K3, hosts=fleet(8), min_memory_bytes=KIMI_K3_MIN, tensor_parallel_size=8,
                         pipeline_parallel_size=4)
    assert (plan["shape"], plan["hosts_per_copy"], plan["copies"], plan["spare"]) == ("group", 4, 2, []), plan


def test_a_small_model_fits_one_gpu_and_says_how_many_instances_a_host_could_hold():
    plan = topology_plan(SMALL, hosts=fleet(1, "rtx-pro-6000-ws-x4"))
    assert plan["shape"] == "replicas" and plan["tensor_parallel_size"] == 4, plan
    assert any("a copy fits in 1 GPU(s)" in note and "up to 4 instances per host" in note for note in plan["notes"])
    explicit = topology_plan(SMALL, hosts=fleet(2, "rtx-pro-6000-ws-x4"), tensor_parallel_size=2)
    assert (explicit["shape"], explicit["copies"]) == ("replicas", 4), explicit
    assert explicit["summary"] == "replicas: 4 (2 per host), TP 2 x PP 1 each"


def test_replicas_on_hosts_that_differ_but_each_holds_a_copy():
    hosts = dict(fleet(1), **{"gpu-b200": facts("b200-x8")})
    plan = topology_plan(KIMI_K25_LOW, hosts=hosts)
    assert plan["shape"] == "replicas" and plan["copies"] == 2 and plan["tensor_parallel_size"] is None, plan


def test_a_host_that_cannot_hold_a_copy_beside_hosts_that_can_is_refused():
    """8x H100 80 GB: 8 x 81559 MiB x 0.9 = 615.8 GB, under the 648 GB a copy of Kimi-K2.5 (540 GB) needs."""
    hosts = dict(fleet(1), **{"gpu-h100": facts("h100-sxm-x8")})
    plan = topology_plan(KIMI_K25_LOW, hosts=hosts)
    assert plan["shape"] == "refused", plan
    assert plan["error"].startswith("gpu-h100 cannot hold a copy (648.0 GB needed) while gpu-01 can"), plan["error"]


def test_a_host_without_gpus_is_refused():
    plan = topology_plan(KIMI_K25, hosts={"gpu-01": facts("rtx-pro-6000-x8"), "cpu-01": {"count": 0, "memory_total_mib_min": None}})
    assert plan["shape"] == "refused" and plan["error"].startswith("cpu-01 has no GPU with known memory"), plan


@pytest.mark.parametrize("kwargs,named", [
    (dict(hosts={}), "the inventory: no host to plan for"),
    (dict(hosts=None), "the inventory: no host to plan for"),
    (dict(hosts={"gpu-01": {"gpus": "eight", "memory_mib": 97887}}), "host gpu-01: its GPU count must be a whole number"),
    (dict(hosts={"gpu-01": {"gpus": 8, "memory_mib": 97887}}, tensor_parallel_size="eight",
          names={"tensor_parallel_size": "fleet_vllm_tensor_parallel_size"}),
     "fleet_vllm_tensor_parallel_size must be a whole number of 1 or more, got 'eight'"),
    (dict(hosts={"gpu-01": {"gpus": 8, "memory_mib": 97887}}, gpu_memory_utilization=1.5),
     "gpu_memory_utilization must be above 0 and at most 1, got 1.5"),
    (dict(hosts={"gpu-01": {"gpus": 8, "memory_mib": 97887}}, gpu_memory_utilization="most"),
     "gpu_memory_utilization must be above 0 and at most 1, got 'most'"),
    (dict(hosts={"gpu-01": {"gpus": 8, "memory_mib": 97887}}, rdma="maybe"), "maybe"),
])
def test_bad_input_is_refused_naming_it(kwargs, named):
    with pytest.raises(AnsibleFilterError) as error:
        topology_plan(KIMI_K25, **kwargs)
    assert named in str(error.value), str(error.value)


def _default_utilization(venv):
    """CacheConfig.gpu_memory_utilization's default in a real vLLM's source (vllm/config/cache.py)."""
    import re
    (source,) = venv.glob("lib/python3*/site-packages/vllm/config/cache.py")
    match = re.search(r"gpu_memory_utilization: float = Field\(default=([0-9.]+)", source.read_text())
    assert match, source
    return float(match.group(1))


@pytest.mark.vllm
def test_the_planned_utilization_holds_for_both_real_builds(vllm_venv, vllm_venv_old):
    """vLLM 0.16.0's default --gpu-memory-utilization is 0.9, 0.33.0's 0.92: the planner takes the smaller, so that
    a plan holds for either build."""
    from ansible_collections.fleet.vllm.plugins.module_utils._topology import VLLM_GPU_MEMORY_UTILIZATION
    defaults = {_default_utilization(vllm_venv_old), _default_utilization(vllm_venv)}
    assert defaults == {0.9, 0.92} and VLLM_GPU_MEMORY_UTILIZATION == min(defaults), defaults


@pytest.mark.parametrize("unset", [None, 0, 0.0, "0", "0.0", ""])
def test_an_unset_utilization_is_vllms_default_however_it_is_written(unset):
    """vllm_server_gpu_memory_utilization is 0.0 when unset; from -e it may come as a string."""
    plan = topology_plan(KIMI_K25, hosts=fleet(1), gpu_memory_utilization=unset)
    assert "x 0.9 (--gpu-memory-utilization) = 739.0 GB per host" in plan["arithmetic"][1], plan["arithmetic"]
