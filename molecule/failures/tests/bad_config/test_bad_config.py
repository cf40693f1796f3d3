"""failures, step 3: a config.json in a snapshot that is not what the hub lists for its commit (the
side effect broke its JSON) is moved out of the snapshot, the listed file is copied again from the
peer, the run succeeds, nothing half-written, and the running service is left alone."""

from __future__ import annotations

import json

import fleet_hosts as fleet

testinfra_hosts = fleet.testinfra_hosts()

REJECTED = f"{fleet.PRISTINE_PARENT}/.fleet-vllm-rejected"


def _first():
    return fleet.instances()[0]


def test_the_run_repaired_the_snapshot(host):
    run = fleet.load_run("bad_config")
    assert run["rc"] == 0, run["output_tail"][-3000:]
    data = fleet.facts(host)
    snapshot = fleet.pristine(data)
    # Valid JSON again, the bytes the hub serves for it.
    config = f"{snapshot}/config.json"
    status, listed = data["http"]["mirror:config.json"]
    assert status == 200 and data["content"][config] == listed
    json.loads(data["content"][config])
    if fleet.name_of(host) != _first():
        assert host.run("test -e %s", REJECTED).rc != 0
        return
    # The broken copy was kept, out of the snapshot, root only.
    found = host.check_output("ls -1 %s/*/config.json.*", REJECTED).split()
    assert len(found) == 1, found
    kept = host.file(found[0])
    assert kept.mode == 0o600 and host.file(REJECTED).mode == 0o700
    try:
        json.loads(kept.content_string)
    except json.JSONDecodeError:
        pass
    else:
        raise AssertionError(f"{found[0]} is valid JSON: it is not the broken file")
    assert run["recap"][_first()]["failed"] == 0, run["recap"]


# What the repair itself writes on the first host: the snapshot and its bookkeeping (its lock, the
# rejected copy, the verified record, the progress record). Nothing else may change, there or on the peer.
REPAIR = (fleet.PRISTINE_PARENT + "/", "/var/lib/fleet-vllm/weights/")


def test_served_files_whole_and_unchanged(host):
    """Nothing half-written: the served directory is as it was (valid JSON, same bytes), and no
    file of the deploy changed but the repaired snapshot's own (on the first host only)."""
    data = fleet.facts(host)
    before = fleet.load_record()[fleet.name_of(host)]
    changes = fleet.diff(before, data)
    if fleet.name_of(host) == _first():
        repaired = [line for line in changes if line.startswith(REPAIR)]
        assert any(line.startswith(REJECTED + ":") for line in repaired), changes
        changes = [line for line in changes if not line.startswith(REPAIR)]
    assert changes == []
    for name in fleet.KV_FILES:
        json.loads(data["content"][f"{fleet.SERVED_CURRENT}/{name}"])


def test_still_serving(host):
    data = fleet.facts(host)
    assert not fleet.restarted_since_record(host, data)
    fleet.assert_serving(host, data, fleet.OLD_VERSION)
