"""failures, step 3: a malformed config.json in the snapshot fails the play with the file and
the position, writes nothing half-way, and leaves the running service alone."""

from __future__ import annotations

import json

import fleet_hosts as fleet

testinfra_hosts = fleet.testinfra_hosts()


def _first():
    return fleet.instances()[0]


def test_the_play_failed_naming_file_and_position(host):
    if fleet.name_of(host) != _first():
        return
    run = fleet.load_run("bad_config")
    assert run["rc"] != 0
    data = fleet.facts(host)
    broken = f"{fleet.pristine(data)}/config.json"
    position = None
    try:
        json.loads(data["content"][broken])
    except json.JSONDecodeError as error:
        position = (error.lineno, error.colno)
    assert position, f"{broken} is valid JSON: the side effect did not break it"
    output = run["output_tail"]
    assert "config.json" in output, output[-3000:]
    assert f"line {position[0]}" in output and f"column {position[1]}" in output, output[-3000:]
    assert run["recap"][_first()]["failed"] == 1, run["recap"]


def test_served_files_whole_and_unchanged(host):
    """Nothing half-written: the served directory is as it was (valid JSON, same bytes), and no
    file of the deploy changed, except the broken pristine file itself."""
    data = fleet.facts(host)
    before = fleet.load_record()[fleet.name_of(host)]
    broken = f"{fleet.pristine(data)}/config.json"
    changes = [line for line in fleet.diff(before, data) if not line.startswith(broken + ":")]
    assert changes == []
    for name in fleet.KV_FILES:
        json.loads(data["content"][f"{fleet.SERVED_CURRENT}/{name}"])


def test_still_serving(host):
    data = fleet.facts(host)
    assert not fleet.restarted_since_record(host, data)
    fleet.assert_serving(host, data, fleet.OLD_VERSION)
