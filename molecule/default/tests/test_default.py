"""Verify the PLACEHOLDER scenario (molecule/default) on the real test hosts.

The end-to-end work replaces this with checks of the real fleet.vllm deploy. Hosts are addressed
as ``podman://NAME``: testinfra's podman backend runs ``podman exec`` directly, where Molecule's
default ansible wiring would start one ansible process per check.
"""

from __future__ import annotations

import os
import subprocess
import urllib.request

import yaml

PORT = 8000


def _instances():
    with open(os.environ["MOLECULE_INVENTORY_FILE"], encoding="utf-8") as inventory:
        return sorted(yaml.safe_load(inventory)["all"]["hosts"])


testinfra_hosts = [f"podman://{name}" for name in _instances()]


def _name(host):
    return host.backend.get_hostname()


def test_systemd_is_pid_1_and_running(host):
    assert host.file("/proc/1/comm").content_string.strip() == "systemd"
    state = host.run("systemctl is-system-running")
    assert state.stdout.strip() == "running", host.run("systemctl --failed --no-pager").stdout


def test_unit_active_and_enabled(host):
    unit = host.service("fleet-vllm-placeholder.service")
    assert unit.is_running
    assert unit.is_enabled


def test_port_listens_in_host(host):
    assert host.socket(f"tcp://0.0.0.0:{PORT}").is_listening


def test_published_port_answers_from_machine(host):
    name = _name(host)
    published = subprocess.run(
        ["podman", "port", name, f"{PORT}/tcp"], check=True, capture_output=True, text=True
    ).stdout.split()[0]
    assert published.startswith("127.0.0.1:"), published
    with urllib.request.urlopen(f"http://{published}/", timeout=5) as response:
        assert response.status == 200
        assert response.read().decode() == f"{name}\n"


def test_peers_resolve_by_name(host):
    for peer in _instances():
        body = host.check_output(
            "python3 -c 'import sys, urllib.request; "
            "print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode(), end=\"\")' %s",
            f"http://{peer}:{PORT}/",
        )
        assert body == peer
