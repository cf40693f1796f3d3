"""Helpers of the gateway scenario (test helper, not part of the collection): HAProxy's runtime API
and HTTP from inside a test host, through container_exec (nsenter; the containers are on the test
network; nothing leaves this machine).
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import time

import container_exec
import fleet_hosts as fleet

SOCKET = "/run/haproxy/admin.sock"
CONFIG = "/etc/haproxy/haproxy.cfg"
BACKEND = "fleet_vllm"
FAULT_FILE = "/run/fleet-vllm-simulator/fault"
# The scenario's CA on every host (molecule/gateway/prepare.yml): the front doors and the gateway
# speak TLS only (converge.yml), their certificates for the hosts' names, localhost and 127.0.0.1.
CA_FILE = "/etc/haproxy/tls/ca.pem"
# The role's defaults (roles/vllm_gateway/defaults/main.yml), which the scenario keeps.
CHECK_INTERVAL, CHECK_TIMEOUT, CHECK_FALL, CHECK_RISE = 5, 10, 2, 2
# "A dead or hung engine leaves rotation within fall x (interval + timeout) seconds" (the README).
LEAVE_BOUND = CHECK_FALL * (CHECK_INTERVAL + CHECK_TIMEOUT)

_RUNTIME = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(sys.argv[2].encode() + b"\n")
out = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    out += chunk
sys.stdout.write(out.decode())
"""

_HTTP = r"""
import http.client, json, ssl, sys
out = []
ca = sys.argv[2]
for host, port, method, path, key, body in json.loads(sys.argv[1]):
    try:
        if ca:
            c = http.client.HTTPSConnection(host, port, timeout=10, context=ssl.create_default_context(cafile=ca))
        else:
            c = http.client.HTTPConnection(host, port, timeout=10)
        h = {"Content-Type": "application/json"}
        if key:
            h["Authorization"] = "Bearer " + key
        c.request(method, path, body=body or None, headers=h)
        r = c.getresponse()
        out.append([r.status, r.read().decode("utf-8", "replace")[:20000]])
    except (OSError, http.client.HTTPException) as e:
        out.append([0, "%s: %s" % (type(e).__name__, e)])
print(json.dumps(out))
"""


def gateway():
    return fleet.instances("vllm_gateways")[0]


exec_in = container_exec.output


def runtime(name, command):
    """HAProxy's runtime API answer on host NAME."""
    return exec_in(name, ["python3", "-c", _RUNTIME, SOCKET, command])


def stat(name):
    """show stat as a list of dicts (proxy, server, status, scur, hrsp_5xx, ...)."""
    return list(csv.DictReader(io.StringIO(runtime(name, "show stat").lstrip("# "))))


def row(rows, proxy, server):
    return next(r for r in rows if r["pxname"] == proxy and r["svname"] == server)


def requests_from(name, requests, tls=True):
    """[(status, body)] of HTTP requests sent from inside host NAME: (host, port, method, path, key, body);
    over TLS, each server's certificate verified against the scenario's CA and its name (tls=False: plain
    HTTP, status 0 and the error when no HTTP answer came)."""
    return json.loads(exec_in(name, ["python3", "-c", _HTTP, json.dumps(requests), CA_FILE if tls else ""]))


def info(name):
    """show info as a dict (CumSslConns: the TLS connections HAProxy accepted and made since it started)."""
    return dict(line.split(": ", 1) for line in runtime(name, "show info").splitlines() if ": " in line)


def haproxy_processes(name):
    """{pid: command} of the HAProxy processes on host NAME (a reload starts new workers)."""
    out = exec_in(name, ["ps", "-C", "haproxy", "-o", "pid=,args="])
    return {line.split(None, 1)[0]: line.split(None, 1)[1] for line in out.splitlines() if line.strip()}


def chat_body():
    return json.dumps({"model": fleet.served_name(), "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})


# ---- a bounded client inside a gateway host (molecule/shared/traffic_client.py) -------------------------------------

CLIENT = "/root/traffic_client.py"
STOP = "/tmp/traffic-stop"


def start_client(lb, requests, seconds, url="https://127.0.0.1:8080", ca_file=CA_FILE, workers=4, pause=0.05, timeout=None,
                 judge=None):
    """traffic_client.py started inside host LB against URL (TLS verified against CA_FILE; None for plain HTTP), until
    REQUESTS were sent, SECONDS passed or the stop file appears (finish_client): WORKERS threads, each pausing PAUSE
    seconds between two requests, each request given TIMEOUT seconds (None: the client's default). JUDGE: a script that
    runs traffic_client.py with its own judgement of an answer (molecule/real_group/real_client.py), copied beside it
    and run in its place, with the same arguments."""
    subprocess.run(["podman", "cp", os.path.join(os.path.dirname(os.path.abspath(__file__)), "traffic_client.py"),
                    "%s:%s" % (lb, CLIENT)], check=True)
    client = CLIENT
    if judge:
        client = os.path.join(os.path.dirname(CLIENT), os.path.basename(judge))
        subprocess.run(["podman", "cp", judge, "%s:%s" % (lb, client)], check=True)
    exec_in(lb, ["rm", "-f", STOP])
    env = dict(os.environ, TRAFFIC_KEY=fleet.api_key())
    ca = " --ca-file %s" % ca_file if ca_file else ""
    bound = " --timeout %s" % timeout if timeout is not None else ""
    # The key goes through the environment (podman exec --env NAME takes the value from it), not argv.
    return subprocess.Popen(
        ["podman", "exec", "--env", "TRAFFIC_KEY", lb, "sh", "-c",
         'exec python3 %s --url %s%s --model "$0" --requests "$1" --seconds "$2" --stop-file %s --workers %d --pause %s%s'
         % (client, url, ca, STOP, workers, pause, bound), fleet.served_name(), str(requests), str(seconds)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def finish_client(lb, proc, stop=True):
    """The client's counts; with stop, it is told to stop first, else it ends at its own bound."""
    if stop:
        exec_in(lb, ["touch", STOP])
    out, err = proc.communicate(timeout=300)
    if proc.returncode != 0:
        raise SystemExit("traffic client failed: %s" % err)
    return json.loads(out)


def is_fleet_backend(proxy):
    """The gateway's backends of fleet hosts: BACKEND, and one per other model its hosts serve (BACKEND:NAME)."""
    return proxy == BACKEND or proxy.startswith(BACKEND + ":")


def servers(lb):
    """{server: status} of the gateway's backends (each fleet host is in one: its model's)."""
    return {r["svname"]: r["status"] for r in stat(lb)
            if is_fleet_backend(r["pxname"]) and r["svname"] not in ("FRONTEND", "BACKEND")}


def wait_status(lb, server, predicate, timeout):
    """(seconds, status) once SERVER's status at the gateway satisfies PREDICATE, or (None, last status) after TIMEOUT."""
    started = time.monotonic()
    status = None
    while time.monotonic() - started < timeout:
        status = servers(lb).get(server)
        if status is not None and predicate(status):
            return round(time.monotonic() - started, 2), status
        time.sleep(0.5)
    return None, status
