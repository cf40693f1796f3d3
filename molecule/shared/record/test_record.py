"""Record step (``verify ../shared/record`` in a scenario's test_sequence), not a check.

Writes, for every host of the scenario, the service's identity (InvocationID, start timestamps,
main PID, restart count) and every file a deploy owns (content, mode, owner, mtime; link
targets) to $MOLECULE_EPHEMERAL_DIRECTORY/fleet-record.json. The scenario's later verify steps
compare the hosts with this record: "nothing changed, nothing restarted" after an idempotence
run or after another host joined; "restarted, one at a time" after an upgrade.
"""

from __future__ import annotations

import json
import os

import fleet_hosts as fleet


def test_record_every_host():
    import testinfra

    record = {}
    for name in fleet.instances():
        host = testinfra.get_host(f"podman://{name}")
        record[name] = fleet.snapshot(host)
    tmp = fleet.record_path() + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1, sort_keys=True)
    os.replace(tmp, fleet.record_path())
