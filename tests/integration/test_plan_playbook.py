"""playbooks/plan.yml (fleet.vllm.vllm_preflight, tasks_from: plan) through ansible-playbook from the checkout, on local
"hosts": each host's GPUs are the stand-in nvidia-smi's answers from a captured fixture of its own (a wrapper per host
picks it), the model's size the Hub's listing from a loopback Hub API (tests/hub/api_server.py), or a size given. The
planner's table of answers is tests/unit/plugins/filter/test_topology_plan.py's; here, what the playbook reads, prints
and refuses, and that it changes nothing (check mode gives the same)."""

from __future__ import annotations

import json
import sys

import pytest
import yaml

from conftest import FIXTURES, ROOT, run_playbook
from tests.hub.api_server import HubApi

pytestmark = pytest.mark.integration

PLAYBOOK = ROOT / "playbooks" / "plan.yml"
REPO = "nvidia/Kimi-K2.5-NVFP4"
REVISION = "0123456789abcdef0123456789abcdef01234567"
KIMI_K3 = 1_645_900_000_000
KIMI_K3_MIN = 1_976 * 10 ** 9
PLAN = "Plan the model's copies over the hosts"
REPORT = "Report the plan"
REFUSE = "Refuse a shape that cannot serve the model"


def tree(shards, shard_bytes):
    files = [{"type": "file", "path": "config.json", "size": 3481, "oid": "5c2b8e37d8a0a4b2a0c1a3b5f3a51b4b25b1e2a1"}]
    files += [{"type": "file", "path": "model-%05d-of-%05d.safetensors" % (i, shards), "size": 135, "oid": "%040x" % i,
               "lfs": {"oid": "%064x" % i, "size": shard_bytes, "pointerSize": 135}} for i in range(1, shards + 1)]
    return files


@pytest.fixture(scope="module")
def hub():
    """Kimi-K2.5-NVFP4 as the Hub lists it: 119 shards, 591 GB in all (with config.json)."""
    server = HubApi({"/api/models/%s/tree/%s?recursive=true" % (REPO, REVISION): (200, tree(119, 4_966_386_525))})
    yield server
    server.close()


def plan(tmp_path, hosts, hub=None, flags=(), models=None, **variables):
    """playbooks/plan.yml on HOSTS ({name: nvidia-smi fixture, or None for a host whose nvidia-smi finds no GPU}); MODELS:
    {name: fleet_vllm_model_repo} set in the inventory (the others' model is REPO, given on the command line)."""
    inventory, host_vars = tmp_path / "hosts.yml", {}
    for name, fixture in hosts.items():
        wrapper = tmp_path / name / "nvidia-smi"
        wrapper.parent.mkdir(parents=True, exist_ok=True)
        wrapper.write_text("#!/bin/sh\nFLEET_VLLM_FAKE_GPUS=%s exec %s \"$@\"\n" % (fixture, FIXTURES / "bin" / "nvidia-smi"))
        wrapper.chmod(0o755)
        host_vars[name] = dict(ansible_connection="local", ansible_python_interpreter=sys.executable,
                               fleet_vllm_nvidia_smi=str(wrapper), fleet_vllm_model_repo=(models or {}).get(name, REPO))
    inventory.write_text(yaml.safe_dump({"all": {"children": {"vllm_servers": {"hosts": host_vars}}}}))
    extra = dict(fleet_vllm_model_revision=REVISION, fleet_vllm_trust_remote_code=False,
                 fleet_vllm_controller_hub_endpoint=hub.endpoint if hub else "http://127.0.0.1:9", vllm_preflight_rdma=False)
    extra.update(variables)
    return run_playbook(PLAYBOOK, "-i", inventory, *flags, extra_vars=extra, timeout=300,
                        env={"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"})


def task(run, name):
    """The one result of a run_once task (the first host's)."""
    for entry in run.out["plays"][0]["tasks"]:
        if entry["task"]["name"].endswith(name):
            return next(iter(entry["hosts"].values()))
    raise AssertionError("no task %r ran:\n%s" % (name, run.stdout[-3000:]))


def test_kimi_k25_from_the_hub_listing_on_8x96gb_hosts_is_replicas_and_changes_nothing(tmp_path, hub):
    hosts = {"gpu-01": "rtx-pro-6000-x8", "gpu-02": "rtx-pro-6000-x8"}
    run = plan(tmp_path, hosts, hub=hub)
    assert run.rc == 0, run.stdout[-4000:]
    result = task(run, PLAN)["ansible_facts"]["vllm_preflight_plan"]
    assert result["shape"] == "replicas" and result["copies"] == 2 and result["tensor_parallel_size"] == 8, result
    # The size is the listing's: 119 x 4,966,386,525 bytes + config.json = 591.0 GB.
    assert result["arithmetic"][0].startswith("%s@%s: 591.0 GB of weights; one copy needs 709.2 GB" % (REPO, REVISION))
    printed = task(run, REPORT)["msg"]
    assert printed[-1] == "PLAN: replicas: 2, TP 8 x PP 1 each", printed
    assert "gpu-01, gpu-02: 8 GPU(s) x 97887 MiB x 0.9 (--gpu-memory-utilization) = 739.0 GB per host" in printed
    assert all(not stats["changed"] for stats in run.out["stats"].values()), run.out["stats"]
    checked = plan(tmp_path, hosts, hub=hub, flags=("--check",))
    assert checked.rc == 0 and task(checked, PLAN)["ansible_facts"]["vllm_preflight_plan"] == result


def test_kimi_k3_sized_by_its_recipe_needs_three_hosts_and_two_are_refused_naming_the_missing_one(tmp_path):
    sized = dict(vllm_preflight_model_size_bytes=KIMI_K3, vllm_preflight_model_min_memory_bytes=KIMI_K3_MIN)
    run = plan(tmp_path, {"gpu-01": "rtx-pro-6000-x8", "gpu-02": "rtx-pro-6000-x8"}, **sized)
    assert run.rc != 0
    refused = task(run, REFUSE)
    assert refused["failed"] and refused["msg"] == (
        "3 hosts needed for one copy (TP 8 x PP 3), this run (2 hosts) has 2: 1 missing"), refused
    assert "1,976.0 GB / 739.0 GB = 2.67: a copy spans 3 hosts" in "\n".join(task(run, REPORT)["msg"])
    three = plan(tmp_path, {"gpu-%02d" % n: "rtx-pro-6000-x8" for n in (1, 2, 3)}, **sized)
    assert three.rc == 0, three.stdout[-3000:]
    assert task(three, REPORT)["msg"][-1] == "PLAN: group: 3 host(s) per copy, TP 8 x PP 3, 1 copy(ies)"


def test_cross_host_tensor_parallel_is_refused_without_rdma(tmp_path):
    run = plan(tmp_path, {"gpu-%02d" % n: "rtx-pro-6000-x8" for n in (1, 2, 3, 4)}, vllm_preflight_plan_shape="16x2",
               vllm_preflight_model_size_bytes=KIMI_K3, vllm_preflight_model_min_memory_bytes=KIMI_K3_MIN)
    assert run.rc != 0
    assert task(run, REFUSE)["msg"].startswith(
        "vllm_preflight_plan_shape (TP) 16 spans 2 hosts of 8 GPUs: its all-reduces (two per layer) would cross the "
        "network, and vllm_preflight_rdma is false"), task(run, REFUSE)["msg"]


def test_rdma_auto_reads_the_hosts(tmp_path):
    """This machine has no RDMA device (/sys/class/infiniband): auto reads false, and the same request is refused."""
    import os
    devices = os.listdir("/sys/class/infiniband") if os.path.isdir("/sys/class/infiniband") else []
    run = plan(tmp_path, {"gpu-%02d" % n: "rtx-pro-6000-x8" for n in (1, 2, 3, 4)}, vllm_preflight_plan_shape="16x2",
               vllm_preflight_rdma="auto", vllm_preflight_model_size_bytes=KIMI_K3,
               vllm_preflight_model_min_memory_bytes=KIMI_K3_MIN)
    assert (run.rc == 0) == bool(devices), run.stdout[-3000:]


def test_a_group_over_hosts_whose_gpus_differ_is_refused(tmp_path):
    run = plan(tmp_path, {"gpu-01": "rtx-pro-6000-x8", "gpu-02": "rtx-pro-6000-x8", "gpu-03": "b200-x8"},
               vllm_preflight_model_size_bytes=KIMI_K3, vllm_preflight_model_min_memory_bytes=KIMI_K3_MIN)
    assert run.rc != 0 and "differ in GPUs" in task(run, REFUSE)["msg"], task(run, REFUSE)


@pytest.mark.parametrize("variables,named", [
    (dict(vllm_preflight_plan_shape="8 by 4"), 'vllm_preflight_plan_shape is "8 by 4": set auto (planned), or TPxPP'),
    (dict(vllm_preflight_plan_shape="0x4"), 'vllm_preflight_plan_shape is "0x4"'),
    (dict(vllm_preflight_rdma="maybe"), 'vllm_preflight_rdma is "maybe": set auto'),
    (dict(vllm_preflight_model_min_memory_bytes=-1), "vllm_preflight_model_min_memory_bytes (-1) and"),
    (dict(vllm_preflight_memory_headroom_percent=-20), "vllm_preflight_memory_headroom_percent is -20"),
    # Not a number at all: the collection's type check of every variable (fleet.vllm.fleet_vllm) refuses it first.
    (dict(vllm_preflight_model_min_memory_bytes="2TB"), "argument 'vllm_preflight_model_min_memory_bytes' is of type str"),
    (dict(vllm_preflight_memory_headroom_percent="20%"), "argument 'vllm_preflight_memory_headroom_percent' is of type str"),
])
def test_bad_settings_are_refused_before_any_host_is_read(tmp_path, variables, named):
    run = plan(tmp_path, {"gpu-01": "rtx-pro-6000-x8"}, vllm_preflight_model_size_bytes=KIMI_K3, **variables)
    assert run.rc != 0
    first = run.out["plays"][0]["tasks"]
    failed = [entry for entry in first if any(result.get("failed") for result in entry["hosts"].values())]
    assert failed and failed[0]["task"]["name"].endswith((
        "Check the planner's settings", "Check the type of every variable set for a role of the collection")), \
        json.dumps(failed)[:2000]
    assert named in failed[0]["hosts"]["gpu-01"]["msg"], failed[0]["hosts"]["gpu-01"]["msg"]
    assert not [entry for entry in first if entry["task"]["name"].endswith("Read the host's GPUs")]


def test_hosts_of_two_models_are_planned_one_model_at_a_time(tmp_path, hub):
    """A run of a helper model's instances beside the fleet's (issue 26) is refused before any host is read, naming the
    hosts of each model and how to plan each."""
    run = plan(tmp_path, {"gpu-01": "rtx-pro-6000-x8", "gpu-02": "rtx-pro-6000-x8"}, hub=hub, models={"gpu-02": "BAAI/bge-m3"})
    assert run.rc != 0
    refused = task(run, "Check that the hosts planned serve one model")
    assert refused["failed"], refused
    assert "%s at %s on gpu-01; BAAI/bge-m3 at %s on gpu-02" % (REPO, REVISION, REVISION) in refused["msg"], refused["msg"]
    assert "-e fleet_vllm_hosts=GROUP" in refused["msg"]
    assert not any(entry["task"]["name"].endswith("Read the host's GPUs") for entry in run.out["plays"][0]["tasks"])
