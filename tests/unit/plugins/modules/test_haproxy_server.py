"""haproxy_server: its reading of HAProxy's runtime API answers (recorded from HAProxy 2.6.12, the
Debian 12 package, in the gateway scenario: tests/fixtures/haproxy/), and the module against a
unix socket that answers as that HAProxy did (a test double: it replays the recorded answers and
keeps the commands it got). The real HAProxy is driven by the Molecule scenario `gateway`."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import prerequisite

ROOT = Path(__file__).resolve().parents[4]
FIXTURES = ROOT / "tests" / "fixtures" / "haproxy"
sys.path.insert(0, str(ROOT / "collections"))
from ansible_collections.fleet.vllm.plugins.modules import haproxy_server as hs  # noqa: E402

sys.path.pop(0)

READY = (FIXTURES / "show-servers-state-ready.txt").read_text()
STAT = (FIXTURES / "show-stat-up.txt").read_text()
SERVER = "h13g-gateway-1"


def test_reads_the_admin_state_and_the_counters_of_a_real_haproxy():
    assert hs.parse_servers_state(READY, "fleet_vllm", SERVER) == 0
    assert hs.parse_servers_state(READY, "fleet_vllm", "no-such-host") is None
    assert hs.parse_servers_state(READY, "other_backend", SERVER) is None
    row = hs.parse_stat(STAT, "fleet_vllm", SERVER)
    assert row == {"status": "UP", "scur": 0, "qcur": 0}
    assert hs.parse_stat(STAT, "fleet_vllm", "no-such-host") is None


@pytest.mark.parametrize("bits, name", [(0, "ready"), (0x08, "drain"), (0x10, "drain"), (0x01, "maint"),
                                        (0x09, "maint"), (0x20, "maint"), (0x02, "maint"), (0x05, "maint"),
                                        # CMAINT alone: configured "disabled", then set ready; an FQDN set
                                        # from the runtime API (HMAINT): neither is maintenance
                                        (0x04, "ready"), (0x40, "ready"), (0x44, "ready"), (0x48, "drain"),
                                        (None, None)])
def test_admin_state_bits(bits, name):
    assert hs.admin_name(bits) == name


HAPROXY = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin")


@prerequisite(HAPROXY, "haproxy is not installed (tools/bootstrap.sh installs it)")
def test_admin_state_is_read_as_the_real_haproxy_reports_it(tmp_path):
    """A real HAProxy (2.6 in Debian 12): a server configured "disabled" and then set ready keeps
    SRV_ADMF_CMAINT (0x04), one whose FQDN was set from the runtime API gets SRV_ADMF_HMAINT (0x40);
    "show stat" reports neither as MAINT, and admin_name agrees with it for every server."""
    sock = str(tmp_path / "admin.sock")
    config = tmp_path / "haproxy.cfg"
    config.write_text(
        "global\n    stats socket %s level admin\n"
        "defaults\n    mode http\n    timeout connect 1s\n    timeout client 1s\n    timeout server 1s\n"
        "resolvers r\n    nameserver ns 127.0.0.1:53\n"
        "backend b\n    server configured-off 127.0.0.1:9 disabled\n    server fqdn-set 127.0.0.1:9 resolvers r\n"
        "    server forced-off 127.0.0.1:9\n    server drained 127.0.0.1:9\n    server plain 127.0.0.1:9\n" % sock)
    proc = subprocess.Popen([HAPROXY, "-db", "-f", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(sock):
            assert proc.poll() is None and time.monotonic() < deadline, "haproxy did not start"
            time.sleep(0.05)
        for command in ("set server b/configured-off state ready", "set server b/fqdn-set fqdn localhost",
                        "set server b/fqdn-set state drain", "set server b/fqdn-set state ready",
                        "set server b/forced-off state maint", "set server b/drained state drain"):
            hs.ask(sock, command)
        states = hs.ask(sock, "show servers state b")
        stat = hs.ask(sock, "show stat")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    bits = {name: hs.parse_servers_state(states, "b", name)
            for name in ("configured-off", "fqdn-set", "forced-off", "drained", "plain")}
    assert bits == {"configured-off": 0x04, "fqdn-set": 0x40, "forced-off": 0x01, "drained": 0x08, "plain": 0}
    for name, value in bits.items():
        status = hs.parse_stat(stat, "b", name)["status"]
        expected = "maint" if status.startswith("MAINT") else "drain" if status.startswith("DRAIN") else "ready"
        assert (name, hs.admin_name(value)) == (name, expected), status


class FakeRuntimeApi(threading.Thread):
    """A unix socket answering one command per connection as HAProxy's runtime API does."""

    def __init__(self, path, state_bits=0):
        super().__init__(daemon=True)
        self.path, self.state_bits, self.commands = path, state_bits, []
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(path)
        self.sock.listen(8)

    def answer(self, command):
        if command.startswith("show servers state"):
            return READY.replace(" 2 0 1 1 15", " 2 %d 1 1 15" % self.state_bits, 1)
        if command == "show stat":
            return STAT.replace(",UP,", ",DRAIN,", 1) if self.state_bits & 0x08 else STAT
        if command.startswith("set server %s/%s state " % ("fleet_vllm", SERVER)):
            self.state_bits = {"ready": 0, "drain": 0x08, "maint": 0x01}[command.rsplit(" ", 1)[1]]
            return "\n"
        return "No such server.\n"

    def run(self):
        while True:
            try:
                conn, dummy = self.sock.accept()
            except OSError:
                return
            with conn:
                command = conn.recv(4096).decode().strip()
                self.commands.append(command)
                conn.sendall(self.answer(command).encode())


@pytest.fixture
def api(tmp_path):
    server = FakeRuntimeApi(str(tmp_path / "admin.sock"))
    server.start()
    yield server
    server.sock.close()


def args(api, **extra):
    return dict({"socket": api.path, "backend": "fleet_vllm", "server": SERVER}, **extra)


def sets(api):
    return [c for c in api.commands if c.startswith("set ")]


def test_drain_sends_the_command_and_waits_for_an_empty_server(run_module, api):
    result = run_module("haproxy_server", args(api, state="drain", wait_timeout=5)).result
    assert result["changed"] and result["admin_state_before"] == "ready" and result["admin_state_after"] == "drain"
    assert sets(api) == ["set server fleet_vllm/%s state drain" % SERVER]
    assert result["sessions"] == 0 and not result["timed_out"] and result["status"] == "DRAIN"


def test_drain_of_a_drained_server_changes_nothing(run_module, api):
    api.state_bits = 0x08
    result = run_module("haproxy_server", args(api, state="drain")).result
    assert not result["changed"] and sets(api) == []


def test_check_mode_sends_no_command(run_module, api):
    result = run_module("haproxy_server", args(api, state="drain", wait_timeout=5), check=True).result
    assert result["changed"] and sets(api) == [] and api.state_bits == 0


def test_ready_waits_for_the_checks_to_say_up(run_module, api):
    api.state_bits = 0x08
    result = run_module("haproxy_server", args(api, state="ready", wait_timeout=5)).result
    assert result["changed"] and result["status"] == "UP" and not result["timed_out"]
    assert sets(api) == ["set server fleet_vllm/%s state ready" % SERVER]


def test_ready_fails_when_the_checks_never_say_up(run_module, tmp_path):
    server = FakeRuntimeApi(str(tmp_path / "down.sock"), state_bits=0x08)
    original = server.answer
    server.answer = lambda command: (STAT.replace(",UP,", ",DOWN,", 1) if command == "show stat" else original(command))
    server.start()
    try:
        result = run_module("haproxy_server", {"socket": server.path, "backend": "fleet_vllm", "server": SERVER,
                                               "state": "ready", "wait_timeout": 1, "interval": 0.2}).result
    finally:
        server.sock.close()
    assert result["failed"] and result["timed_out"] and "did not find it UP within 1 s" in result["msg"]


def test_ready_waits_past_a_failed_check_for_a_good_one(run_module, api):
    # A check that failed while the engine restarted leaves "UP 1/2" once the server is ready: one more
    # failure takes it down. The wait ends only when a good check made it "UP" again (CI saw a roll end
    # on "UP 1/2" when the wait took any status starting with UP).
    api.state_bits = 0x08
    original, reads = api.answer, []

    def answer(command):
        if command == "show stat" and api.state_bits == 0:
            reads.append(command)
            return STAT if len(reads) > 3 else STAT.replace(",UP,", ",UP 1/2,", 1)
        return original(command)
    api.answer = answer
    result = run_module("haproxy_server", args(api, state="ready", wait_timeout=5, interval=0.1)).result
    assert result["status"] == "UP" and not result["timed_out"] and len(reads) == 4, (result, reads)


def test_ready_fails_when_a_failed_check_is_never_followed_by_a_good_one(run_module, api):
    api.state_bits = 0x08
    original = api.answer
    api.answer = lambda command: (STAT.replace(",UP,", ",UP 1/2,", 1) if command == "show stat" and api.state_bits == 0
                                  else original(command))
    result = run_module("haproxy_server", args(api, state="ready", wait_timeout=1, interval=0.2)).result
    assert result["failed"] and result["timed_out"] and result["status"] == "UP 1/2", result
    assert "did not find it UP within 1 s (status UP 1/2)" in result["msg"]


def test_an_unknown_server_is_a_warning_not_a_failure(run_module, api):
    result = run_module("haproxy_server", args(api, server="gpu-node-09", state="drain")).result
    assert not result["changed"] and not result["found"] and sets(api) == []
    assert "no server gpu-node-09" in str(result.get("warnings")), result


def test_no_socket_fails_with_what_to_check(run_module, tmp_path):
    result = run_module("haproxy_server", {"socket": str(tmp_path / "absent.sock"), "backend": "fleet_vllm",
                                           "server": SERVER, "state": "drain"}).result
    assert result["failed"] and "stats socket" in result["msg"] and "absent.sock" in result["msg"]
