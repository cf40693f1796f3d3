"""The rolling phase takes a serving group (issue 26) as one unit: every member rolls when one differs, the group is
one batch of the rolling play however fleet_vllm_serial counts, a batch holds fleet_vllm_serial copies (a group with
all its hosts), a group one of whose members failed its staging does not roll, and the canary gate refuses a group.
playbooks/tasks/rolling.yml and roll.yml's serial: on local hosts (nothing is contacted)."""

from __future__ import annotations

import sys

import pytest

from conftest import ROOT, run_playbook

pytestmark = [pytest.mark.integration]
PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "rolling_units.yml"
# Two groups and three hosts that serve alone, in inventory order: a1 s1 b1 b2 b3 s2 a2 s3 (a group's members need not
# be next to each other in the inventory).
INVENTORY = """
all:
  vars: {ansible_connection: local, ansible_python_interpreter: %s}
  children:
    vllm_servers:
      hosts: {a1: {}, s1: {}, b1: {}, b2: {}, b3: {}, s2: {}, a2: {}, s3: {}}
    copy_a:
      hosts: {a1: {}, a2: {}}
      vars: {fleet_vllm_serving_group: copy_a}
    copy_b:
      hosts: {b1: {}, b2: {}, b3: {}}
      vars: {fleet_vllm_serving_group: copy_b}
"""


def roll(tmp_path, rollout, **extra):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(INVENTORY % sys.executable)
    run = run_playbook(PLAYBOOK, "-i", inventory, extra_vars=dict(rollout=rollout, **extra), timeout=300)
    batches = []
    # The json callback makes one play of each batch of the rolling play (serial).
    for play in run.out["plays"][1:]:
        for task in play["tasks"]:
            if task["task"]["name"] != "Show the batch":
                continue
            seen = {host: result["msg"] for host, result in task["hosts"].items()}
            first = next(iter(seen.values()))
            batches.append({"hosts": first["batch"], "actions": {h: seen[h]["rollout"]["action"] for h in seen},
                            "reasons": {h: seen[h]["rollout"]["reason"] for h in seen}, "sizes": first["sizes"]})
    return run, batches


def test_a_group_rolls_whole_in_one_batch_when_one_member_differs(tmp_path):
    run, batches = roll(tmp_path, {"a2": "restart", "s2": "restart", "b3": "start"})
    assert run.rc == 0, run.stdout[-3000:]
    # Units in inventory order (each at its first host): copy_a, copy_b, s2; fleet_vllm_serial 1 = one copy a batch.
    assert [b["hosts"] for b in batches] == [["a1", "a2"], ["b1", "b2", "b3"], ["s2"]]
    assert batches[0]["sizes"] == [2, 3, 1]
    # The members that did not differ restart with their group, saying why.
    assert batches[0]["actions"] == {"a1": "restart", "a2": "restart"}
    assert "its serving group copy_a restarts as one" in batches[0]["reasons"]["a1"]
    assert batches[1]["actions"] == {"b1": "restart", "b2": "restart", "b3": "start"}


def test_a_batch_holds_serial_copies_of_the_model(tmp_path):
    run, batches = roll(tmp_path, {h: "restart" for h in ("a1", "s1", "b2", "s2", "s3")}, fleet_vllm_serial=2,
                        fleet_vllm_max_down=2)
    assert run.rc == 0, run.stdout[-3000:]
    assert [b["hosts"] for b in batches] == [["a1", "a2", "s1"], ["b1", "b2", "b3", "s2"], ["s3"]]


def test_nothing_differs_nothing_rolls(tmp_path):
    run, batches = roll(tmp_path, {})
    assert run.rc == 0, run.stdout[-3000:]
    assert batches == []


def test_a_group_with_a_member_that_failed_staging_does_not_roll(tmp_path):
    run, batches = roll(tmp_path, {"a1": "restart", "s1": "restart"}, failed=["a2"],
                        fleet_vllm_max_fail_percentage=50)
    assert [b["hosts"] for b in batches] == [["s1"]], run.stdout[-3000:]
    assert "the serving group(s) copy_a" in run.stdout


def test_the_canary_gate_refuses_a_group_to_roll(tmp_path):
    run, batches = roll(tmp_path, {"b1": "restart"}, fleet_vllm_canary=1)
    assert run.rc != 0 and batches == []
    assert "fleet_vllm_canary is 1 and the serving group(s) of b1 would roll" in run.stdout
