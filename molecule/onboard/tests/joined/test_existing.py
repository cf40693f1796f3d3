"""onboard: the hosts that were serving before the new node joined were not touched."""

from __future__ import annotations

import ipaddress
import json
import os

import fleet_hosts as fleet

testinfra_hosts = [f"podman://{name}" for name in fleet.instances()
                   if name not in fleet.instances("fleet_vllm_newcomers")]


def test_not_restarted_and_nothing_changed(host):
    before = fleet.load_record()[fleet.name_of(host)]
    assert before["unit"]["InvocationID"], "the host was not serving when recorded"
    assert fleet.diff(before, fleet.facts(host)) == []


def test_still_serving(host):
    fleet.assert_serving(host, fleet.facts(host), fleet.OLD_VERSION)


def _socket(host):
    out = host.check_output("systemctl show fleet-vllm-rsyncd.socket -p InvocationID -p ActiveState -p IPAddressAllow")
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def test_peer_socket_not_restarted_by_the_newcomer(host):
    """The rsync socket the newcomer copied through kept its identity: nothing that serves restarted."""
    path = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "socket-%s.json" % fleet.name_of(host))
    with open(path, encoding="utf-8") as handle:
        before = json.load(handle)
    assert before["InvocationID"] and before["ActiveState"] == "active", before
    assert _socket(host) == before


def test_peer_socket_admits_the_hosts_networks_only(host):
    """IPAddressAllow holds the network of the test network (not loopback), rsyncd's hosts allow the same."""
    allow = _socket(host)["IPAddressAllow"].split()
    address = host.check_output("python3 -c %s", "import socket; print(socket.gethostbyname(socket.gethostname()))")
    assert allow and all(ipaddress.ip_network(net).version in (4, 6) for net in allow), allow
    assert any(ipaddress.ip_address(address) in ipaddress.ip_network(net) for net in allow), (address, allow)
    assert not any(ipaddress.ip_network(net).overlaps(ipaddress.ip_network("127.0.0.0/8"))
                   for net in allow if ipaddress.ip_network(net).version == 4), allow
    conf = host.file("/etc/fleet-vllm/rsyncd.conf").content_string
    hosts_allow = [line.split("=", 1)[1].split() for line in conf.splitlines() if line.startswith("hosts allow")]
    assert [{ipaddress.ip_network(n) for n in nets} for nets in hosts_allow] == [{ipaddress.ip_network(n) for n in allow}]
    # From loopback, outside those networks, nothing is served (dropped by the socket filter, or refused by rsync).
    denied = host.run("rsync --contimeout=5 --timeout=10 rsync://127.0.0.1:8873/fleet-vllm-models/")
    assert denied.rc != 0 and "safetensors" not in denied.stdout, denied


def test_an_idle_connection_is_dropped_after_the_handshake_timeout(host):
    """From the newcomer (an allowed address), a connection that sends nothing is closed after the 5 s timeout."""
    import testinfra

    newcomer = testinfra.get_host(f"podman://{fleet.instances('fleet_vllm_newcomers')[0]}")
    probe = ("import socket, time, sys\n"
             "s = socket.create_connection((sys.argv[1], 8873), timeout=5)\n"
             "s.settimeout(30)\n"
             "t = time.monotonic()\n"
             "try:\n"
             "    while s.recv(100):\n"
             "        pass\n"
             "except ConnectionResetError:\n"
             "    pass\n"
             "print(round(time.monotonic() - t, 1))\n")
    seconds = float(newcomer.check_output("python3 -c %s %s", probe, fleet.name_of(host)))
    assert 4 <= seconds <= 12, seconds
