"""The front door terminates TLS with the certificate it is given (issue 13, point 1): the role's
own HAProxy configuration (rendered from its template and variables, tests/integration/playbooks/
vllm_gateway_render.yml) run by the real HAProxy of this machine (Debian's package, the one the
role installs on a host), in front of a stand-in for vLLM on loopback. A certificate made here
with openssl; the client checks the server against it. What is checked: the certificate HAProxy
presents is the given one, the key is asked for on every path over TLS, a request with the key
reaches vLLM, and plain HTTP on the TLS port gets no answer."""

from __future__ import annotations

import http.client
import json
import shutil
import ssl
import subprocess

import pytest

from conftest import ROOT, free_port, prerequisite, run_playbook
from tests.helpers.haproxy import running as haproxy_running
from tests.helpers.standin_engine import StandInEngine

pytestmark = [
    pytest.mark.integration,
    prerequisite(shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin"),
                 reason="haproxy is not installed (Debian: haproxy; tools/bootstrap.sh installs it)"),
    prerequisite(shutil.which("openssl"), reason="openssl is not installed"),
]

PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "vllm_gateway_render.yml"
KEY = "k1-fleet.vllm_test~key-0123456789abcdef"
NAME = "frontdoor.fleet-vllm.test"


@pytest.fixture
def front_door(tmp_path):
    haproxy = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=" + NAME,
                    "-addext", "subjectAltName=DNS:%s,IP:127.0.0.1" % NAME, "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    bundle = tmp_path / "frontdoor.pem"  # HAProxy's crt: the certificate and its key in one file
    bundle.write_bytes(cert.read_bytes() + key.read_bytes())
    bundle.chmod(0o600)
    engine = StandInEngine()
    port = free_port()
    config = tmp_path / "haproxy.cfg"
    run = run_playbook(PLAYBOOK, extra_vars={
        "dest": str(config), "vllm_gateway_api_key": KEY, "vllm_gateway_engine_port": engine.port,
        "vllm_gateway_frontdoor_port": port, "vllm_gateway_bind_address": "127.0.0.1",
        "vllm_gateway_tls_certificate": str(bundle), "_vllm_gateway_socket": str(tmp_path / "admin.sock")})
    assert run.rc == 0, run.stdout[-3000:]
    text = config.read_text()
    assert "bind 127.0.0.1:%d ssl crt %s" % (port, bundle) in text
    # The same check the role runs before it puts a configuration in place.
    checked = subprocess.run([haproxy, "-c", "-q", "-f", str(config)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr
    try:
        with haproxy_running(config, port):
            yield dict(port=port, context=ssl.create_default_context(cafile=str(cert)), cert=cert)
    finally:
        engine.close()


def request(door, method, path, key=None, body=None):
    connection = http.client.HTTPSConnection("127.0.0.1", door["port"], context=door["context"], timeout=10)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    try:
        connection.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        # Read before the answer: http.client drops the socket once it has read an answer that closes it.
        cert = connection.sock.getpeercert()
        response = connection.getresponse()
        return response.status, response.read().decode(), cert
    finally:
        connection.close()


def test_the_front_door_terminates_tls_with_the_given_certificate_and_asks_the_key_on_every_path(front_door):
    chat = {"model": "kimi-k2.5", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    for method, path in (("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("POST", "/invocations"),
                         ("GET", "/health")):
        status, body, cert = request(front_door, method, path, body=chat if method == "POST" else None)
        assert (status, json.loads(body)) == (401, {"error": "Unauthorized"}), (path, body)
        assert dict(item[0] for item in cert["subject"])["commonName"] == NAME
    status, body, dummy = request(front_door, "POST", "/v1/chat/completions", key=KEY, body=chat)
    assert status == 200 and json.loads(body)["path"] == "/v1/chat/completions", body
    status, body, dummy = request(front_door, "GET", "/v1/models", key="wrong-" + KEY)
    assert status == 401
    status, body, dummy = request(front_door, "POST", "/invocations", key=KEY, body=chat)
    assert status == 404, body  # with the key: not a path the front door forwards (vllm_gateway_paths)


def test_the_tls_port_refuses_plain_http(front_door):
    connection = http.client.HTTPConnection("127.0.0.1", front_door["port"], timeout=10)
    try:
        connection.request("GET", "/v1/models", headers={"Authorization": "Bearer " + KEY})
        response = connection.getresponse()
        got = response.status
    except (http.client.HTTPException, ConnectionError, OSError):
        got = None
    finally:
        connection.close()
    assert got in (None, 400), got  # no HTTP answer from an SSL listener (or HAProxy's 400 for a non-TLS hello)
