"""The serving group's rank killed (side effect kill.yml): the group's head left the gateway's rotation - the group
cannot serve without its rank - and the next deploy brought the group back whole, serving through the gateway."""

import json
import os

import fleet_hosts as fleet

testinfra_hosts = fleet.testinfra_hosts("fleet_vllm_test_group")


def result():
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "topology-kill.json"), encoding="utf-8") as handle:
        return json.load(handle)


def test_the_head_left_rotation_once_its_rank_was_killed():
    data = result()
    assert data["left_after"] is not None, data
    assert data["status_down"].startswith("DOWN"), data


def test_the_next_deploy_brought_the_group_back(host):
    data = result()
    assert data["rc"] == 0 and data["back_after"] is not None, data
    name = fleet.name_of(host)
    assert data["units_after"][name]["ActiveState"] == "active"
    # Started by the deploy (a deliberate start resets the counter), not by systemd's restart of a crash, which the
    # group's vllm_server_restart_sec (900) holds off.
    assert data["units_after"][name]["NRestarts"] == "0", data["units_after"][name]
    assert data["units_after"][name]["InvocationID"] != data["units_before"][name]["InvocationID"]
    client = data["client"]
    assert client["sent"] == 40 and client["ok"] == 40 and client["failed"] == 0, client


def test_verify_diagnose_and_acceptance_pass_on_the_group(host):
    """playbooks/verify.yml asks the head for a completion and checks the rank is the engine that started;
    playbooks/diagnose.yml asks no API of the headless rank (it has none); playbooks/acceptance.yml measures the group
    through its head, and the rank keeps no result of its own."""
    assert result()["checks"] == {"verify": 0, "diagnose": 0, "acceptance": 0}
    for name in ("verify", "diagnose", "acceptance"):
        run = fleet.load_run("topology-" + name)
        assert all(recap["failed"] == 0 for recap in run["recap"].values()), run["recap"]
    record = host.file("/var/lib/fleet-vllm/acceptance/last.json")
    assert record.exists == (fleet.name_of(host) == fleet.instances("fleet_vllm_test_group")[0])
