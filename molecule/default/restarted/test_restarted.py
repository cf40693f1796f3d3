"""default, after the side effect restarts.yml: three times the service was stopped and deploy.yml
started it again, with no file changed (no daemon-reload to empty systemd's start counter). With
the converge's start that made four starts within StartLimitIntervalSec, one more than
StartLimitBurst: each deploy started it all the same (the roll resets the start counter before a
deliberate start), and it serves."""

from __future__ import annotations

import json
import os

import fleet_hosts as fleet

testinfra_hosts = fleet.testinfra_hosts()
RUNS = ("restart-1", "restart-2", "restart-3")


def test_each_deploy_started_every_host():
    for name in RUNS:
        run = fleet.load_run(name)
        assert run["rc"] == 0, run["output_tail"][-4000:]
        for host in fleet.instances():
            assert run["recap"][host]["failed"] == 0 and run["recap"][host]["changed"] > 0, (name, run["recap"])


def test_three_more_starts_went_past_the_start_limit(host):
    unit = fleet.facts(host)["unit"]
    assert unit["StartLimitBurst"] == "3", unit
    assert (unit["ActiveState"], unit["SubState"], unit["NRestarts"]) == ("active", "running", "0"), unit
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "starts-before-restarts.json"),
              encoding="utf-8") as handle:
        before = json.load(handle)[fleet.name_of(host)]
    journal = host.check_output("journalctl -u %s -o cat --no-pager" % fleet.SERVICE)
    # systemd logs "Started vllm.service - <Description>." at each start.
    starts = [line for line in journal.splitlines() if line.startswith("Started %s" % fleet.SERVICE)]
    assert before >= 1 and len(starts) == before + 3, (before, starts)
    assert "attempted too often" not in journal and "start-limit-hit" not in journal


def test_the_service_serves(host):
    fleet.assert_serving(host, fleet.facts(host), fleet.OLD_VERSION)


# restarts.yml planted these in the first host's pristine snapshot before its deploys (issue 24, point 4).
PLANTED = {"processor_config.json": '{"auto_map": {"AutoProcessor": "evil.EvilProcessor"}}', "evil.py": "import os\n",
           "chat_template.jinja": "pwned\n", "extra/hook.py": "x = 1\n", "preprocessor_config.json": None}
LIST = "find %s -path %s/.cache -prune -o ! -type d -printf '%%P\\n'"


def test_files_the_listing_does_not_name_were_moved_aside_and_are_not_served(host):
    """Issue 24, point 4: files beside the correctly hashed listed ones were taken as part of a complete snapshot and
    linked into the served directory. The first deploy after the planting moved them out of the snapshot, kept, and
    reported them; the next two found nothing to move; none is served, and the engine serves (test_the_service_serves)."""
    planted = fleet.name_of(host) == fleet.instances()[0]
    snapshot = host.check_output("dirname %s/*/%s", fleet.PRISTINE_PARENT, fleet.SNAPSHOT_MANIFEST)
    commit = snapshot.rsplit("/", 1)[1]
    manifest = json.loads(host.check_output("cat %s/%s", snapshot, fleet.SNAPSHOT_MANIFEST))
    listed = sorted(item["path"] for item in manifest["files"])
    on_disk = sorted(host.check_output(LIST, snapshot, snapshot).splitlines())
    assert on_disk == sorted(listed + [fleet.SNAPSHOT_MANIFEST])
    served = host.check_output("readlink -f %s", fleet.SERVED_CURRENT)
    names = sorted(host.check_output(LIST, served, served).splitlines())
    assert not set(PLANTED) & set(names), names
    assert set(names) <= set(listed) | {".fleet-vllm-served.json", ".fleet-vllm-kv-cache.json"}, names
    rejected = "%s/.fleet-vllm-rejected/%s" % (fleet.PRISTINE_PARENT, commit)
    found = host.run("ls -1 %s", rejected)
    if not planted:
        assert found.rc != 0, found.stdout
        return
    moves = [name for name in found.stdout.split() if name.startswith("unlisted-")]
    assert len(moves) == 1, found.stdout
    where = "%s/%s" % (rejected, moves[0])
    assert sorted(host.check_output(LIST, where, where).splitlines()) == sorted(PLANTED)
    for rel, text in PLANTED.items():
        if text is None:
            assert host.file("%s/%s" % (where, rel)).linked_to == "/etc/shadow"
        else:
            assert host.file("%s/%s" % (where, rel)).content_string == text
    assert host.file("%s/.fleet-vllm-rejected" % fleet.PRISTINE_PARENT).mode == 0o700
    # Reported in the first deploy's output, names and sizes (the module's warning; its message too, wrapped there).
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "run-restart-1.log"), encoding="utf-8") as handle:
        warnings = [line for line in handle if line.startswith("[WARNING]: ") and "not in the hub's listing" in line]
    assert len(warnings) == 1 and "5 file(s) not in the hub's listing of the commit were in the snapshot and were moved " \
        "out of it, never served: chat_template.jinja (6 bytes), evil.py (10 bytes), extra/hook.py (6 bytes), " \
        "preprocessor_config.json (a link), processor_config.json (53 bytes), into %s/unlisted-" % rejected in warnings[0], warnings
