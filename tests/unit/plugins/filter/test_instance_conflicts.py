"""fleet.vllm.instance_conflicts: the engine instances of one machine (issue 26 point 3), each an inventory host of its
own, against each other - names, GPUs, ports and blocks of internal ports (vLLM's VLLM_PORT and up)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.fleet.vllm.plugins.filter.instance_conflicts import instance_conflicts

GPU0 = "GPU-2c3e7876-b74a-57b3-94a4-1b4d866fd427"
GPU1 = "GPU-0d2261a5-0a7f-5a5d-92a9-a81b02a1a4e6"
GPU2 = "GPU-b692f93d-b6f3-5fed-b2f0-eb5dda32afb6"
MACHINE = "4f1c2e8a9b7d4c6e8f0a1b2c3d4e5f60"


def instance(host, name, gpus, server_port, block_start, machine=MACHINE, **extra):
    entry = dict(host=host, machine=machine, instance=name, gpus=gpus,
                 ports={"vllm_server_port": server_port, "fleet_vllm_metrics_port": server_port + 1000},
                 block_start=block_start, block_size=32)
    entry.update(extra)
    return entry


A = instance("gpu1-a", "a", [GPU0], 8001, 29500)
B = instance("gpu1-b", "b", [GPU1], 8002, 29532)


def test_instances_apart_have_no_conflict():
    other_machine = instance("gpu2-a", "a", [GPU0], 8001, 29500, machine="9a8b")
    assert instance_conflicts([A, B, other_machine], "gpu1-a") == []
    assert instance_conflicts([A, B, other_machine], "gpu1-b") == []
    assert instance_conflicts([A, B, other_machine], "gpu2-a") == []


def test_the_same_name_twice_on_one_machine():
    twin = instance("gpu1-a2", "a", [GPU1], 8002, 29532)
    assert instance_conflicts([A, twin], "gpu1-a") == [
        'gpu1-a and gpu1-a2 are both instance "a" (fleet_vllm_instance) of machine %s: give each instance of a machine '
        "a name of its own (fleet_vllm_instance)" % MACHINE]
    engines = [instance("x", "", [GPU0], 8001, 29500), instance("y", "", [GPU1], 8002, 29532)]
    assert instance_conflicts(engines, "y") == [
        "y and x are both the machine's one engine (fleet_vllm_instance empty) of machine %s: give each instance of a "
        "machine a name of its own (fleet_vllm_instance)" % MACHINE]


def test_a_gpu_both_list():
    b = dict(B, gpus=[GPU2, GPU0.upper()])
    problems = instance_conflicts([dict(A, gpus=[GPU0, GPU1]), b], "gpu1-a")
    assert problems == ["gpu1-a and gpu1-b both list %s in fleet_vllm_instance_gpus, on machine %s: give each instance "
                        "GPUs of its own" % (GPU0, MACHINE)]


def test_an_instance_without_gpus_on_a_machine_of_several():
    problems = instance_conflicts([dict(A, gpus=[]), B], "gpu1-a")
    assert problems == [
        "gpu1-a lists no GPUs (fleet_vllm_instance_gpus empty), so its engine would take every GPU of machine %s, "
        "which gpu1-b shares: list the GPUs of each instance of the machine (fleet_vllm_instance_gpus of gpu1-a and of "
        "gpu1-b)" % MACHINE]
    problems = instance_conflicts([dict(A, gpus=[]), B], "gpu1-b")
    assert problems == [
        "gpu1-b shares machine %s with gpu1-a, which lists no GPUs (fleet_vllm_instance_gpus empty), so its engine would "
        "take every GPU: list the GPUs of each instance of the machine (fleet_vllm_instance_gpus of gpu1-b and of "
        "gpu1-a)" % MACHINE]
    assert instance_conflicts([dict(A, gpus=[])], "gpu1-a") == []


def test_a_port_of_another():
    b = dict(B, ports={"vllm_gateway_frontdoor_port": 8001})
    assert instance_conflicts([A, b], "gpu1-a") == [
        "gpu1-a's vllm_server_port and gpu1-b's vllm_gateway_frontdoor_port are both port 8001 on machine %s: change "
        "one of them" % MACHINE]
    assert instance_conflicts([A, b], "gpu1-b") == [
        "gpu1-b's vllm_gateway_frontdoor_port and gpu1-a's vllm_server_port are both port 8001 on machine %s: change "
        "one of them" % MACHINE]


def test_a_port_inside_the_others_block_either_way():
    b = dict(B, ports={"fleet_vllm_metrics_port": 29510})
    expected = [
        "gpu1-b's fleet_vllm_metrics_port (29510) is inside gpu1-a's block of internal ports 29500-29531 "
        "(fleet_vllm_instance_port_base) on machine %s, from which vLLM takes ports (VLLM_PORT and up): change "
        "gpu1-b's fleet_vllm_metrics_port or gpu1-a's fleet_vllm_instance_port_base" % MACHINE]
    assert instance_conflicts([A, b], "gpu1-a") == expected
    assert instance_conflicts([A, b], "gpu1-b") == expected


def test_overlapping_blocks():
    b = dict(B, block_start=29531)
    assert instance_conflicts([A, b], "gpu1-a") == [
        "gpu1-a's block of internal ports 29500-29531 (fleet_vllm_instance_port_base) and gpu1-b's 29531-29562 "
        "(fleet_vllm_instance_port_base) overlap on machine %s: give each instance a block of its own "
        "(fleet_vllm_instance_port_base of gpu1-a or of gpu1-b)" % MACHINE]
    assert instance_conflicts([A, dict(B, block_start=29532)], "gpu1-a") == []
    assert instance_conflicts([A, dict(B, block_start=0)], "gpu1-a") == []
    assert instance_conflicts([A, dict(B, block_start=29468)], "gpu1-a") == []
    assert len(instance_conflicts([A, dict(B, block_start=29469)], "gpu1-a")) == 1


def test_every_conflict_of_one_pair_is_reported():
    b = instance("gpu1-b", "a", [GPU0], 8001, 29510)
    problems = instance_conflicts([A, b], "gpu1-a")
    assert len(problems) == 5, problems  # name, GPU, two equal ports, blocks
    assert all("gpu1-a" in problem and "gpu1-b" in problem for problem in problems)


def test_an_empty_machine_is_compared_with_none():
    a, b = dict(A, machine=""), dict(B, machine="", gpus=[GPU0])
    assert instance_conflicts([a, b], "gpu1-a") == []


def test_values_as_strings_and_defaults():
    a = dict(A, block_start="29500", ports={"vllm_server_port": "8001"})
    b = dict(B, ports={"vllm_server_port": 8001}, block_size=None)
    b.pop("block_size")
    assert len(instance_conflicts([a, b], "gpu1-a")) == 1


@pytest.mark.parametrize("instances, host", [
    ("gpu1-a", "gpu1-a"), ({"host": "gpu1-a"}, "gpu1-a"), ([A, "b"], "gpu1-a"), ([A, dict(B, host="")], "gpu1-a"),
    ([A, B], "gpu9"), ([dict(A, gpus="GPU-x")], "gpu1-a"), ([dict(A, ports=[8001])], "gpu1-a"),
    ([dict(A, block_start="x")], "gpu1-a"), ([dict(A, ports={"vllm_server_port": True})], "gpu1-a"),
])
def test_input_that_is_not_instances_is_an_error(instances, host):
    with pytest.raises(AnsibleFilterError):
        instance_conflicts(instances, host)
