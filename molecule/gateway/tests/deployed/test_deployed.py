"""After deploy.yml and its rerun: vLLM on loopback behind a front door that asks for the key on
every path, a gateway that balances across the front doors, and a rerun that reloaded nothing.
TLS on every network hop (issue 24, point 8; converge.yml): the front doors and the gateway answer
TLS only, the gateway's checks and requests reach the front doors over TLS with each one's name
verified, and a client's completion through the gateway verifies the gateway's certificate."""

import json
import os
import subprocess
import time

import fleet_hosts as fleet
import gateway_hosts as gw

testinfra_hosts = fleet.testinfra_hosts()
PATHS = [("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("POST", "/invocations")]
# The monitoring's listener on every front door and gateway (fleet_vllm_metrics_port; tests/deployed/test_monitoring.py).
METRICS_PORT = 9180


def test_rerun_did_not_reload_or_rewrite_haproxy():
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "gateway-record.json"), encoding="utf-8") as handle:
        record = json.load(handle)
    for name, before in record.items():
        assert gw.haproxy_processes(name) == before["processes"], f"HAProxy on {name} was reloaded or restarted"
        assert gw.exec_in(name, ["stat", "-c", "%i %Y %a %U:%G", gw.CONFIG]).strip() == before["config"]


def test_haproxy_config_holds_the_key_and_is_not_world_readable():
    for name in fleet.instances() + [gw.gateway()]:
        mode_owner = gw.exec_in(name, ["stat", "-c", "%a %U:%G", gw.CONFIG]).split()
        assert mode_owner == ["640", "root:haproxy"], (name, mode_owner)
        assert fleet.api_key() not in " ".join(gw.haproxy_processes(name).values()), "the key is on HAProxy's argv"


def test_vllm_listens_on_loopback_only_and_haproxy_on_the_network(host):
    """converge.yml deploys the layout before 0.4.0 (fleet_vllm_engine_socket ""): the engine on its port, on loopback;
    roll.yml moves it to its socket (tests/rolled)."""
    listening = [line.split()[3] for line in host.check_output("ss -Htln").splitlines()]
    assert [a for a in listening if a.endswith(":%d" % fleet.PORT)] == ["127.0.0.1:%d" % fleet.PORT], listening
    assert [a for a in listening if a.endswith(":%d" % fleet.FRONTDOOR_PORT)] == ["0.0.0.0:%d" % fleet.FRONTDOOR_PORT], listening
    assert host.socket("tcp://0.0.0.0:%d" % fleet.FRONTDOOR_PORT).is_listening


def test_from_another_host_the_engine_is_unreachable_and_every_path_needs_the_key():
    lb, body = gw.gateway(), gw.chat_body()
    asks = []
    for name in fleet.instances():
        asks.append((name, fleet.PORT, "GET", "/health", "", ""))
        asks += [(name, fleet.FRONTDOOR_PORT, method, path, "", body if method == "POST" else "") for method, path in PATHS]
        asks += [(name, fleet.FRONTDOOR_PORT, "GET", "/nowhere", "", "")]
    asks += [("127.0.0.1", 8080, method, path, "", body if method == "POST" else "") for method, path in PATHS]
    answers = gw.requests_from(lb, asks)
    for ask, (status, text) in zip(asks, answers):
        if ask[1] == fleet.PORT:
            assert status == 0 and "ConnectionRefused" in text, (ask, status, text)
        else:
            assert status == 401, (ask, status, text)
            assert json.loads(text) == {"error": "Unauthorized"}


def test_with_the_key_the_gateway_serves_and_forwards_only_the_allowed_paths():
    lb, key, body = gw.gateway(), fleet.api_key(), gw.chat_body()
    asks = [("127.0.0.1", 8080, "GET", "/v1/models", key, ""), ("127.0.0.1", 8080, "POST", "/v1/chat/completions", key, body),
            ("127.0.0.1", 8080, "POST", "/invocations", key, body), ("127.0.0.1", 8080, "GET", "/metrics", key, ""),
            ("127.0.0.1", 8080, "GET", "/v1/models", key + "x", "")]
    (models, chat, invocations, metrics, wrong) = gw.requests_from(lb, asks)
    assert models[0] == 200 and fleet.served_name() in models[1]
    assert chat[0] == 200 and json.loads(chat[1])["choices"][0]["message"]["content"]
    assert invocations[0] == 404 and metrics[0] == 404, (invocations, metrics)
    assert wrong[0] == 401
    # Through the gateway's port published on this machine's loopback too, over TLS (the scenario's CA).
    base = fleet.frontdoor_base(lb)
    assert base.startswith("https://"), base
    status, text = fleet.chat(base, key, fleet.served_name())
    assert status == 200, text


def test_the_gateway_balances_across_every_front_door_and_checks_them_up():
    rows = gw.stat(gw.gateway())
    servers = {r["svname"]: r for r in rows if r["pxname"] == gw.BACKEND and r["svname"] not in ("FRONTEND", "BACKEND")}
    assert sorted(servers) == fleet.instances()
    for name, r in servers.items():
        assert r["status"] == "UP", (name, r["status"], r["check_status"], r["last_chk"])
        assert r["check_status"] == "L7OK", (name, r["check_status"])


# ---- TLS on every network hop (issue 24, point 8) ------------------------------------------------


def test_the_front_doors_and_the_gateway_listen_with_tls_and_the_gateway_verifies_each_front_doors_name():
    for name in fleet.instances() + [gw.gateway()]:
        config = gw.exec_in(name, ["cat", gw.CONFIG])
        binds = [line.strip() for line in config.splitlines() if line.strip().startswith("bind ")]
        # the front door or the gateway, and the monitoring's metrics listener (the scenario has a monitoring host)
        assert binds == ["bind *:8080 ssl crt /etc/haproxy/tls/host.pem", "bind *:9180 ssl crt /etc/haproxy/tls/host.pem"], (name, binds)
    config = gw.exec_in(gw.gateway(), ["cat", gw.CONFIG])
    assert "ssl verify required ca-file %s" % gw.CA_FILE in config
    # the fleet's front doors (the metrics listener's own backend has the gateway's node exporter: server node)
    servers = [line.split() for line in config.splitlines() if line.strip().startswith("server ") and line.split()[1] != "node"]
    assert sorted(words[1] for words in servers) == fleet.instances()
    for words in servers:
        assert words[3:] == ["sni", "str(%s)" % words[1], "check-sni", words[1], "verifyhost", words[1]], words
    # HAProxy's own view: every server of the backend uses TLS (show servers state: srv_use_ssl).
    state = gw.runtime(gw.gateway(), "show servers state %s" % gw.BACKEND).splitlines()
    columns = state[1].lstrip("# ").split()
    rows = [dict(zip(columns, line.split())) for line in state[2:] if line.strip() and not line.startswith("#")]
    assert sorted(r["srv_name"] for r in rows) == fleet.instances()
    assert all(r["srv_use_ssl"] == "1" for r in rows), rows


def test_no_plain_http_is_answered_on_the_network():
    """A client with the key that speaks plain HTTP to a front door or to the gateway gets no answer
    (the TLS listener takes no plain request): the key it sent is never served in clear."""
    lb, key = gw.gateway(), fleet.api_key()
    asks = [(name, port, "GET", path, key, "") for name in fleet.instances()
            for port, path in ((fleet.FRONTDOOR_PORT, "/v1/models"), (METRICS_PORT, "/metrics/vllm"))]
    asks.append(("127.0.0.1", 8080, "GET", "/v1/models", key, ""))
    for ask, (status, text) in zip(asks, gw.requests_from(lb, asks, tls=False)):
        assert status in (0, 400), (ask, status, text)  # no HTTP answer, or HAProxy's 400 to a non-TLS hello
        assert fleet.served_name() not in text, (ask, text)
    # On a fleet host the only TCP listeners on the network, besides the peers' rsync socket (a socket
    # unit: systemd listens, vllm_weights), are the front door's TLS port and its metrics listener's (TLS too); vLLM
    # and the node exporter are on loopback - but for the rendezvous store of a vLLM build that starts its workers
    # through tcp:// (before the file:// handshake: the demo's 0.16 pin; tests/simulator/README.md "Instances"), which
    # torch's TCPStore binds on every address: the engine's unit denies every address but loopback to it
    # (IPAddressDeny=any, IPAddressAllow=localhost; enforced where systemd has cgroup v2).
    for name in fleet.instances():
        # ss names a socket's process from other users' /proc/PID/fd, which root in a container reads only with
        # CAP_SYS_PTRACE (podman exec --privileged); without it the engine's and HAProxy's sockets show no process.
        listeners = subprocess.run(["podman", "exec", "--privileged", name, "ss", "-Htlnp"], check=True,
                                   capture_output=True, text=True).stdout.splitlines()
        engine = {line.split()[0] for line in gw.exec_in(name, ["ps", "-e", "-o", "pid=,unit="]).splitlines()
                  if line.split()[1:] == [fleet.SERVICE]}
        network = sorted(line.split()[3] for line in listeners
                         if not line.split()[3].startswith(("127.", "[::1]")) and 'users:(("systemd"' not in line
                         and not any("pid=%s," % pid in line for pid in engine))
        assert network == ["0.0.0.0:%d" % fleet.FRONTDOOR_PORT, "0.0.0.0:%d" % METRICS_PORT], (name, listeners)
        deny = gw.exec_in(name, ["systemctl", "show", "-p", "IPAddressDeny", "--value", fleet.SERVICE]).split()
        assert sorted(deny) == ["0.0.0.0/0", "::/0"], (name, deny)


def test_the_gateways_checks_reach_the_front_doors_over_tls():
    """With no client traffic, each front door's count of TLS connections (show info: CumSslConns)
    grows by the gateway's checks (two connections per check, every vllm_gateway_check_interval s),
    and the gateway finds them up: the checks, which carry the key, go over TLS."""
    before = {name: int(gw.info(name)["CumSslConns"]) for name in fleet.instances()}
    time.sleep(gw.CHECK_INTERVAL * 2 + 1)
    after = {name: int(gw.info(name)["CumSslConns"]) for name in fleet.instances()}
    for name in fleet.instances():
        assert after[name] - before[name] >= 2, (name, before, after)
    rows = gw.stat(gw.gateway())
    for name in fleet.instances():
        assert gw.row(rows, gw.BACKEND, name)["check_status"] == "L7OK"
