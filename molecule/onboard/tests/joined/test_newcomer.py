"""onboard: the node that joined with --limit serves, with the snapshot copied from a peer."""

from __future__ import annotations

import json
import os
import re

import fleet_hosts as fleet
import testinfra

testinfra_hosts = fleet.testinfra_hosts("fleet_vllm_newcomers")


def test_the_run_touched_only_the_new_node():
    run = fleet.load_run("onboard")
    assert run["rc"] == 0, run["output_tail"][-3000:]
    assert sorted(run["recap"]) == fleet.instances("fleet_vllm_newcomers"), run["recap"]


def test_it_was_not_in_the_inventory_of_the_first_deploy():
    """The scenario's own premise: the node joined the inventory after the fleet was deployed."""
    assert fleet.instances("fleet_vllm_newcomers")
    assert not set(fleet.instances("fleet_vllm_newcomers")) & set(fleet.instances())


def test_it_copied_from_a_peer_deployed_before_it_existed():
    run = fleet.load_run("onboard")
    assert "-i" in run["argv"][3:] and any(arg.endswith("onboard-inventory.yml") for arg in run["argv"])
    peers = fleet.instances()
    # The module's message, as the callback printed it (folded lines joined again), from the run's whole output.
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "run-onboard.log"), encoding="utf-8") as handle:
        words = " ".join(handle.read().split())
    assert re.search(r": copied \S+ \S+ from rsync://(%s):8873/" % "|".join(map(re.escape, peers)), words), words[-3000:]
    assert "no peer will serve" not in words


def test_no_shard_from_the_mirror_during_its_run(host):
    """The weights came from a peer: the hub mirror served the new node no shard while it joined. (The mirror's log
    is the machine's: other scenarios running at the same time appear in it with their own addresses.)"""
    run = fleet.load_run("onboard")
    addresses = host.check_output("hostname -I").split()
    assert addresses
    mine = [line for line in fleet.shard_requests(run["mirror_log"]) if line.split()[-1] in addresses]
    assert mine == []
    # Nor anything else: the controller resolved and listed the revision (lookup fleet.vllm.hub_revision).
    assert [line for line in run["mirror_log"] if line.split()[-1] in addresses] == []
    # The log did record the requests of the run, each with its client's address (the controller's
    # lookups), so the checks above could have seen this host's.
    listings = [line for line in run["mirror_log"] if "/api/models/" in line]
    assert listings and all(line.split()[-1].count(".") == 3 for line in listings), run["mirror_log"][-20:]


def _model_files(data, snap):
    """The checkpoint's files in a snapshot (not the manifest, not huggingface_hub's .cache/)."""
    prefix = snap + "/"
    return {p[len(prefix):]: e["sha256"] for p, e in data["files"].items()
            if p.startswith(prefix) and e and "sha256" in e and not any(
                part.startswith(".") for part in p[len(prefix):].split("/"))}


def test_same_snapshot_as_the_peers(host):
    import testinfra

    data = fleet.facts(host)
    reference = fleet.facts(testinfra.get_host(f"podman://{fleet.instances()[0]}"))
    snap = fleet.pristine(data)
    assert snap == fleet.pristine(reference)
    mine = _model_files(data, snap)
    assert any(name.endswith(".safetensors") for name in mine)
    assert mine == _model_files(reference, snap)


def test_pristine_untouched_and_served_stripped(host):
    data = fleet.facts(host)
    fleet.assert_pristine_untouched(data)
    fleet.assert_shards_link_to_pristine(data)
    fleet.assert_kv_stripped(data)


def test_serving(host):
    fleet.assert_serving(host, fleet.facts(host), fleet.OLD_VERSION)


def test_its_peer_daemon_turned_off_is_gone(host):
    """Issue 24 point 14 (onboard.yml, daemon_off.yml): vllm_weights_peer_daemon false stops, disables and removes the
    daemon the node ran since it joined; check mode left it listening; a second run changes nothing."""
    name = fleet.name_of(host)
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "daemon-after-check.json"), encoding="utf-8") as handle:
        after_check = json.load(handle)[name]
    assert "ActiveState=active" in after_check and "UnitFileState=enabled" in after_check, after_check
    check, first, again = (fleet.load_run(run) for run in ("daemon-off-check", "daemon-off", "daemon-off-again"))
    for run in (check, first, again):
        assert run["rc"] == 0, run["output_tail"][-3000:]
    assert check["recap"][name]["changed"] > 0 and first["recap"][name]["changed"] > 0, (check["recap"], first["recap"])
    assert again["recap"][name]["changed"] == 0, again["output_tail"][-3000:]
    show = host.check_output("systemctl show fleet-vllm-rsyncd.socket -p LoadState -p ActiveState")
    assert "LoadState=not-found" in show.splitlines() and "ActiveState=inactive" in show.splitlines(), show
    for path in ("/etc/systemd/system/fleet-vllm-rsyncd.socket", "/etc/systemd/system/fleet-vllm-rsyncd@.service",
                 "/etc/fleet-vllm/rsyncd.conf", "/usr/local/libexec/fleet-vllm/rsync-handshake-gate"):
        assert not host.file(path).exists, path
    # Nothing listens on the peer port any more: a peer's connection is refused.
    peer = testinfra.get_host("podman://%s" % fleet.instances()[0])
    probe = peer.run("python3 -c %s %s", "import socket, sys; socket.create_connection((sys.argv[1], 8873), timeout=5)", name)
    assert probe.rc != 0 and "ConnectionRefusedError" in probe.stderr, (probe.rc, probe.stderr)
