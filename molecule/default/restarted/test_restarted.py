"""default, after the side effect restarts.yml: three times the service was stopped and started
again, once by hand (systemctl start), then twice by deploy.yml, with no file changed (no
daemon-reload to empty systemd's start counter). With the converge's start the last deploy's was
the fourth within StartLimitIntervalSec, one more than StartLimitBurst: each deploy started it all
the same (the roll resets the start counter before a deliberate start), and it serves."""

from __future__ import annotations

import base64
import json
import os

import fleet_hosts as fleet

testinfra_hosts = fleet.testinfra_hosts()
RUNS = ("restart-2", "restart-3")


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
    reported them; the next found nothing to move; none is served, and the engine serves (test_the_service_serves)."""
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
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "run-restart-2.log"), encoding="utf-8") as handle:
        warnings = [line for line in handle if line.startswith("[WARNING]: ") and "not in the hub's listing" in line]
    assert len(warnings) == 1 and "5 file(s) not in the hub's listing of the commit were in the snapshot and were moved " \
        "out of it, never served: chat_template.jinja (6 bytes), evil.py (10 bytes), extra/hook.py (6 bytes), " \
        "preprocessor_config.json (a link), processor_config.json (53 bytes), into %s/unlisted-" % rejected in warnings[0], warnings


def squatted():
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "squatter.json"), encoding="utf-8") as handle:
        return json.load(handle)


def test_a_squatter_got_neither_the_key_nor_a_prompt():
    """Issue 24, point 2: the front door and the readiness wait talked to 127.0.0.1:8000, which any local user can bind
    while the engine is down; a listener of nobody there got the fleet's key and the client's prompt, and could answer.
    restarts.yml let nobody hold that port on the first host while the engine was stopped, then through the deploy that
    started it (which would have failed to bind the port before), and asked the front door with the key each time: the
    front door said 503, then served the engine's answer, and the squatter received nothing at all."""
    seen = squatted()
    assert seen["stopped"]["status"] == 503, seen["stopped"]
    assert seen["started"]["status"] == 200, seen["started"]
    assert json.loads(seen["started"]["body"])["choices"][0]["message"]["content"] != "squatter", seen["started"]
    assert seen["received_base64"] == "", base64.b64decode(seen["received_base64"])[:2000]


def test_nobody_could_not_take_open_or_replace_the_engines_socket():
    """The next attacks on the same sink: what nobody tried on the engine's socket while it was stopped. Its directory
    is the service user's with the front door's group (2710): nobody may not pass it, so neither connect to the socket
    past the front door's key check (the engine holds no key), nor bind one beside it or in its place, nor remove it."""
    attempts = squatted()["attempts"]
    assert attempts["uid"] != 0, attempts
    for name in ("connect", "bind_beside", "unlink", "bind_in_place", "list_directory"):
        assert attempts[name].startswith("PermissionError"), (name, attempts)


def test_only_the_front_doors_group_may_open_the_socket_of_the_running_engine(host):
    """On every host, the engine running: its socket and directory are the service user's with haproxy's group, which
    may connect (what the front door does); nobody may not, nor may the service's own group."""
    directory, path = os.path.dirname(fleet.ENGINE_SOCKET), fleet.ENGINE_SOCKET
    assert host.check_output("stat -c '%%a %%U %%G' %s", directory) == "2710 vllm haproxy"
    assert host.check_output("stat -c '%%F %%U %%G' %s", path) == "socket vllm haproxy"
    connect = ("import socket, sys; s = socket.socket(socket.AF_UNIX); "
               "s.connect(sys.argv[1]); s.sendall(b'GET /health HTTP/1.0\\r\\n\\r\\n'); print(s.recv(64).decode().split()[1])")
    assert host.check_output("runuser -u haproxy -- python3 -c %s %s", connect, path) == "200"
    refused = host.run("runuser -u nobody -- python3 -c %s %s", connect, path)
    assert refused.rc != 0 and "PermissionError" in refused.stderr, (refused.stdout, refused.stderr)
    # A user of the service's group (not the service user) may not either: the directory lets only haproxy's through.
    refused = host.run("setpriv --reuid=nobody --regid=vllm --clear-groups python3 -c %s %s", connect, path)
    assert refused.rc != 0 and "PermissionError" in refused.stderr, (refused.stdout, refused.stderr)


def test_the_engine_has_no_port_and_no_key(host):
    """The engine listens on its socket only (no TCP listener on the old port) and holds no key: the front door asks
    for it and strips it (the request the squatter would have seen carried none past the front door either)."""
    listeners = host.check_output("ss -Hltn 'sport = :%d'" % fleet.PORT)
    assert listeners == "", listeners
    secrets = host.check_output("cat %s", fleet.SECRETS_ENV)
    assert "VLLM_API_KEY" not in secrets and fleet.api_key() not in secrets
