"""The gateway's TLS to the front doors (issue 24, point 3): a gateway rendered from the role's
template with vllm_gateway_backend_ca_file, run by this machine's HAProxy (Debian's 2.6.12, the
one the role installs), in front of two front doors on loopback:

- door1 (127.0.0.1): the role's own front-door configuration, terminating TLS with a certificate
  for door1's name from a CA made here, a stand-in engine behind it;
- door2 (127.0.0.2): an impostor, a TLS server holding a certificate from the same CA but for
  another name, that answers every request 200 and keeps every byte it is sent (in clear before
  a TLS hello, or decrypted after one).

What is checked: the gateway's checks reach door1 over TLS and find it UP, and a client's request
through the gateway comes back from door1's engine; the impostor is DOWN and is sent nothing, not
the checks' key, not a client's prompt, even when its server is forced up at the gateway (then
only the name check of the traffic's own handshake stands between it and the clients)."""

from __future__ import annotations

import csv
import http.client
import io
import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from conftest import ROOT, free_port, prerequisite, run_playbook
from tests.helpers.haproxy import HAPROXY, ask
from tests.helpers.haproxy import running as haproxy_running
from tests.helpers.standin_engine import StandInEngine
from tests.helpers.tls import issue, make_ca

pytestmark = [
    pytest.mark.integration,
    prerequisite(HAPROXY, reason="haproxy is not installed (Debian: haproxy; tools/bootstrap.sh installs it)"),
    prerequisite(shutil.which("openssl"), reason="openssl is not installed"),
]

PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "vllm_gateway_render.yml"
KEY = "k24-fleet.vllm_backend~tls-key-0123456789"
PROMPT = "the client's prompt, for door1 only"
DOOR1, DOOR2, OTHER = "door1.fleet-vllm.test", "door2.fleet-vllm.test", "other.fleet-vllm.test"


class Impostor(object):
    """A front door's impostor at ADDRESS:PORT with a certificate of the fleet's CA for another
    name: whatever reaches it (a plain request, or one over a TLS session a client accepted) is
    kept in ``received`` and answered 200, as a front door that had the engine behind it would."""

    def __init__(self, address, port, cert, key):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        received = self.received = []
        handshakes = self.handshakes = []

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def setup(self):
                self.request.settimeout(5)
                self.tls = self.request.recv(1, socket.MSG_PEEK) == b"\x16"  # a TLS record: handshake
                if self.tls:
                    try:
                        self.request = context.wrap_socket(self.request, server_side=True)
                        handshakes.append("accepted")
                    except (ssl.SSLError, OSError) as exc:
                        handshakes.append("refused: %s" % exc)  # the client refused the certificate
                        raise
                super().setup()

            def answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode(errors="replace") if length else ""
                received.append({"tls": self.tls, "line": self.requestline, "headers": str(self.headers),
                                 "body": body})
                data = json.dumps({"impostor": True}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = answer  # noqa: N815 (http.server's names)

            def log_message(self, *args):
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass  # a refused handshake: kept in handshakes

        self.server = Server((address, port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def servers(sock):
    """{server: (status, check_status, check_desc)} of the backend fleet_vllm, from show stat."""
    rows = csv.DictReader(io.StringIO(ask(sock, "show stat").lstrip("# ")))
    return {row["svname"]: (row["status"], row["check_status"], row.get("last_chk", ""))
            for row in rows if row["pxname"] == "fleet_vllm" and row["svname"] not in ("FRONTEND", "BACKEND")}


def wait_for(sock, wanted, timeout=30):
    """show stat until every server of WANTED has its status (UP or DOWN), or the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        now = servers(sock)
        if all(now.get(name, ("",))[0] == status for name, status in wanted.items()):
            return now
        if time.monotonic() > deadline:
            return now
        time.sleep(0.3)


def chat(port):
    """A client's chat completion through the gateway: (status, body)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    body = {"model": "kimi-k2.5", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 1}
    try:
        connection.request("POST", "/v1/chat/completions", body=json.dumps(body),
                           headers={"Content-Type": "application/json", "Authorization": "Bearer " + KEY})
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


@pytest.fixture
def fleet(tmp_path):
    ca = make_ca(tmp_path)
    dummy, dummy, door1_bundle = issue(tmp_path, ca, DOOR1)
    other_cert, other_key, dummy = issue(tmp_path, ca, OTHER)
    frontdoor_port, gateway_port = free_port(), free_port()
    engine = StandInEngine()
    impostor = Impostor("127.0.0.2", frontdoor_port, other_cert, other_key)
    common = {"vllm_gateway_api_key": KEY, "vllm_gateway_frontdoor_port": frontdoor_port,
              "vllm_gateway_bind_address": "127.0.0.1", "vllm_gateway_check_model": "kimi-k2.5"}

    door = tmp_path / "frontdoor.cfg"
    run = run_playbook(PLAYBOOK, extra_vars=dict(
        common, dest=str(door), vllm_gateway_engine_port=engine.port,
        vllm_gateway_tls_certificate=str(door1_bundle), _vllm_gateway_socket=str(tmp_path / "frontdoor.sock")))
    assert run.rc == 0, run.stdout[-3000:]

    # The fleet's hosts as an inventory gives them: each front door's address and the name its
    # certificate carries, host variables of the fleet host that the gateway reads.
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {
        "door1": {"vllm_gateway_address": "127.0.0.1", "vllm_gateway_backend_tls_name": DOOR1},
        "door2": {"vllm_gateway_address": "127.0.0.2", "vllm_gateway_backend_tls_name": DOOR2}}}}))
    gateway = tmp_path / "gateway.cfg"
    sock = tmp_path / "gateway.sock"
    run = run_playbook(PLAYBOOK, "-i", inventory, extra_vars=dict(
        common, dest=str(gateway), __vllm_gateway_mode="gateway", vllm_gateway_port=gateway_port,
        vllm_gateway_backend_hosts=["door1", "door2"], vllm_gateway_backend_ca_file=str(ca[1]),
        vllm_gateway_balance="roundrobin", vllm_gateway_check_interval=1, vllm_gateway_check_timeout=2,
        vllm_gateway_check_fall=1, vllm_gateway_check_rise=1, _vllm_gateway_socket=str(sock)))
    assert run.rc == 0, run.stdout[-3000:]
    for config in (door, gateway):  # the check the role runs before it puts a configuration in place
        checked = subprocess.run([HAPROXY, "-c", "-q", "-f", str(config)], capture_output=True, text=True, check=False)
        assert checked.returncode == 0, checked.stderr
    try:
        with haproxy_running(door, frontdoor_port), haproxy_running(gateway, gateway_port):
            yield dict(port=gateway_port, sock=sock, impostor=impostor, config=gateway.read_text())
    finally:
        impostor.close()
        engine.close()


def test_the_gateway_checks_the_tls_front_door_and_serves_through_it(fleet):
    now = wait_for(fleet["sock"], {"door1": "UP", "door2": "DOWN"})
    assert now["door1"][0] == "UP", (now, fleet["config"])
    assert now["door1"][1] == "L7OK", now  # both checks answered 200, over TLS (door1 speaks nothing else)
    for dummy in range(4):
        status, body = chat(fleet["port"])
        assert status == 200, body
        assert json.loads(body).get("path") == "/v1/chat/completions", body  # from door1's engine


def test_an_impostor_with_another_name_of_the_same_ca_is_refused_and_sent_nothing(fleet):
    now = wait_for(fleet["sock"], {"door1": "UP", "door2": "DOWN"})
    assert now["door2"][0] == "DOWN", now
    assert fleet["impostor"].handshakes, "the gateway never tried door2 over TLS"
    assert fleet["impostor"].received == []
    # Forced up, checks off: client requests are sent its way, and the traffic's own handshake
    # must refuse it too (a request whose connection failed goes to door1: retry-on conn-failure).
    assert ask(fleet["sock"], "disable health fleet_vllm/door2").strip() == ""
    assert ask(fleet["sock"], "set server fleet_vllm/door2 health up").strip() == ""
    handshakes = len(fleet["impostor"].handshakes)
    answers = [chat(fleet["port"]) for dummy in range(6)]
    assert len(fleet["impostor"].handshakes) > handshakes, "no client request was sent towards door2"
    assert fleet["impostor"].received == []
    assert all("impostor" not in body for dummy, body in answers), answers


def test_a_front_door_without_a_tls_name_is_checked_against_its_inventory_name(tmp_path):
    # HAProxy 2.6 matches a certificate's DNS names only (an IP address in subjectAltName never
    # matches verifyhost: measured), so the name is not the address the gateway dials, which is
    # often an IP (ansible_host); plain HTTP gets no TLS options at all.
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"gpu-node-07.fleet-vllm.test": {"ansible_host": "10.0.0.7"}}}}))
    rendered = {}
    for ca in ("/etc/ssl/fleet-ca.pem", ""):
        config = tmp_path / ("gateway-%s.cfg" % bool(ca))
        run = run_playbook(PLAYBOOK, "-i", inventory, extra_vars={
            "dest": str(config), "__vllm_gateway_mode": "gateway", "vllm_gateway_api_key": KEY,
            "vllm_gateway_check_model": "kimi-k2.5", "vllm_gateway_backend_hosts": ["gpu-node-07.fleet-vllm.test"],
            "vllm_gateway_backend_ca_file": ca, "_vllm_gateway_socket": str(tmp_path / "admin.sock")}, timeout=300)
        assert run.rc == 0, run.stdout[-3000:]
        rendered[bool(ca)] = [line.strip() for line in config.read_text().splitlines() if line.strip().startswith("server ")]
    name = "gpu-node-07.fleet-vllm.test"
    assert rendered[True] == ["server %s 10.0.0.7:8080 sni str(%s) check-sni %s verifyhost %s" % ((name,) * 4)]
    assert rendered[False] == ["server %s 10.0.0.7:8080" % name]
