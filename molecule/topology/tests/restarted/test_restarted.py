"""One instance of a machine restarted under load (side effect instance.yml: deploy.yml --limit topo-3-mini with a
new setting): the machine's other instance kept its processes, its InvocationID, its shared memory and every request
of its clients."""

import json
import os


def result():
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "topology-instance.json"), encoding="utf-8") as handle:
        return json.load(handle)


def named_unit(data):
    (unit,) = [u for u in data["before"] if u.startswith("vllm@")]
    return unit


def test_the_named_instance_restarted():
    data = result()
    assert data["rc"] == 0
    unit = named_unit(data)
    before, after = data["before"][unit], data["after"][unit]
    assert before["InvocationID"] != after["InvocationID"] and after["ActiveState"] == "active", (before, after)
    assert not set(before["pids"]) & set(after["pids"]), (before["pids"], after["pids"])


def test_the_other_instance_kept_its_processes_and_its_invocation():
    data = result()
    before, after = data["before"]["vllm.service"], data["after"]["vllm.service"]
    assert before["pids"] and before["pids"] == after["pids"], (before, after)
    for key in ("InvocationID", "MainPID", "NRestarts", "ActiveState"):
        assert before[key] == after[key], (key, before, after)


def test_the_other_instances_shared_memory_was_left_alone():
    data = result()
    unit = named_unit(data)
    mine = "/dev/shm/fleet-vllm@%s/" % unit[len("vllm@"):-len(".service")]
    others_before = sorted(f for f in data["before"]["shm"] if not f.startswith(mine))
    others_after = sorted(f for f in data["after"]["shm"] if not f.startswith(mine))
    assert others_before and others_before == others_after, (others_before, others_after)
    assert set(f for f in data["before"]["shm"] if f.startswith(mine)) != set(f for f in data["after"]["shm"] if f.startswith(mine))


def test_no_request_to_the_other_instance_failed():
    client = result()["client"]
    assert client["sent"] >= 50, client
    assert (client["failed"], client["truncated"]) == (0, 0), client["errors"]
