"""Side effects of the topology scenario (test helper): a serving group (issue 26) through the gateway.

    python traffic.py roll -- playbooks/deploy.yml -e vllm_runtime_version=0.33.0
        the deploy in check mode first (nothing may restart); then the bounded client (molecule/shared/traffic_client.py) runs inside the gateway host against
        http://127.0.0.1:8080 while molecule/shared/run_playbook.py runs the deploy; the units' starts are read
        before and after;
    python traffic.py kill
        kills the group's rank (SIGKILL of its unit's processes), times how long the gateway keeps the group's head
        in rotation, then runs deploy.yml --limit on the group and reads the gateway and the units again; then
        playbooks/verify.yml,
        playbooks/diagnose.yml and playbooks/acceptance.yml on the fleet;
    python traffic.py instance
        the bounded client runs inside the gateway host against the front door of topo-3's unnamed instance while
        deploy.yml --limit topo-3-mini, with a new setting, restarts the machine's other instance (vllm@mini); the
        machine's units, their processes and the engines' shared-memory segments are read before and after.

Writes $MOLECULE_EPHEMERAL_DIRECTORY/topology-<name>.json for the verify step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(os.path.dirname(HERE), "shared")
sys.path.insert(0, SHARED)

import fleet_hosts as fleet  # noqa: E402
import gateway_hosts as gw  # noqa: E402


def members():
    """The serving group's hosts in inventory order (the head first) - the scenario names them so."""
    return fleet.instances("fleet_vllm_test_group")


def units():
    """Each fleet host's vllm.service: its InvocationID, state, when its main process started and when it last
    stopped (monotonic, us: the containers share the kernel's clock)."""
    out = {}
    for name in fleet.instances():
        text = gw.exec_in(name, ["systemctl", "show", fleet.SERVICE, "-p",
                                 "InvocationID,ActiveState,NRestarts,ExecMainStartTimestampMonotonic,InactiveEnterTimestampMonotonic"])
        out[name] = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    return out


def counters(lb):
    front = gw.row(gw.stat(lb), "fleet_vllm", "FRONTEND")
    return {k: int(front[k] or 0) for k in ("req_tot", "hrsp_2xx", "hrsp_4xx", "hrsp_5xx")}


def client(lb, requests, seconds):
    """The bounded client inside the gateway host, plain HTTP (the demo inventory's gateway)."""
    return gw.start_client(lb, requests, seconds, url="http://127.0.0.1:8080", ca_file=None)


servers, wait_status, finish = gw.servers, gw.wait_status, gw.finish_client


def deploy(name, args):
    return subprocess.run([sys.executable, os.path.join(SHARED, "run_playbook.py"), name, "--expect", "ok", "--"] + args,
                          check=False).returncode


def roll(args):
    lb = gw.gateway()
    for name in servers(lb):
        assert wait_status(lb, name, lambda s: s.startswith("UP"), 120)[0] is not None, "%s not UP before the roll" % name
    # First in check mode: it says what would roll and changes nothing (no engine restarted, the group included).
    units_unchecked = units()
    rc_check = deploy("topology-check", ["--check"] + args)
    before, units_before = counters(lb), units()
    proc = client(lb, 1000000, 1500)
    time.sleep(2)
    rc = deploy("topology-roll", args)
    time.sleep(2)
    result = finish(lb, proc)
    return {"rc": rc, "rc_check": rc_check, "units_unchecked": units_unchecked,
            "client": result, "before": before, "after": counters(lb), "units_before": units_before,
            "units_after": units(), "servers": servers(lb)}


def kill():
    lb = gw.gateway()
    head, rank = members()[0], members()[1]
    assert wait_status(lb, head, lambda s: s.startswith("UP"), 120)[0] is not None, "the head is not UP before the kill"
    units_before = units()
    gw.exec_in(rank, ["systemctl", "kill", "--signal=SIGKILL", fleet.SERVICE])
    left_after, status_down = wait_status(lb, head, lambda s: s.startswith("DOWN"), 180)
    # The pin roll.yml deployed: nothing new to stage, only the group to bring back - with --limit on the group, as a
    # group is onboarded (its hosts only; the gateway drains and puts back its head by delegation).
    rc = deploy("topology-kill", ["playbooks/deploy.yml", "--limit", "fleet_vllm_test_group", "-e", "vllm_runtime_version=0.33.0"])
    back_after, status_up = wait_status(lb, head, lambda s: s.startswith("UP"), 180)
    proc = client(lb, 40, 120)
    result = finish(lb, proc, stop=False)
    # The fleet's read-only playbooks on a group: its head answers, its rank is the engine that started.
    checks = {name: deploy("topology-%s" % name, ["playbooks/%s.yml" % name]) for name in ("verify", "diagnose", "acceptance")}
    return {"head": head, "rank": rank, "left_after": left_after, "status_down": status_down, "rc": rc, "checks": checks,
            "back_after": back_after, "status_up": status_up, "client": result, "units_before": units_before,
            "units_after": units(), "servers": servers(lb)}


def machine(name):
    """The engine units of a machine of several instances: for each, its InvocationID, state and main PID, the PIDs of
    its control group (ps's unit column), and the engines' shared-memory segments (/dev/shm, and a named instance's
    own directory there)."""
    out = {}
    listed = gw.exec_in(name, ["ps", "-e", "-o", "pid=,unit="])
    named = ["vllm@%s.service" % fleet.host_vars(n)["fleet_vllm_instance"] for n, c in fleet.named_instances().items() if c == name]
    for unit in ["vllm.service"] + named:
        text = gw.exec_in(name, ["systemctl", "show", unit, "-p", "InvocationID,ActiveState,MainPID,NRestarts"])
        out[unit] = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
        out[unit]["pids"] = sorted(int(line.split()[0]) for line in listed.splitlines() if line.split()[1:] == [unit])
    out["shm"] = gw.exec_in(name, ["find", "/dev/shm", "-maxdepth", "2", "-name", "psm_*"]).split()
    return out


def instance():
    lb = gw.gateway()
    named = fleet.named_instances()
    mini = sorted(named)[0]
    box = named[mini]
    for name in (box, mini):
        assert wait_status(lb, name, lambda s: s.startswith("UP"), 120)[0] is not None, "%s not UP before the restart" % name
    before = machine(box)
    proc = gw.start_client(lb, 1000000, 600, url="http://%s:8080" % box, ca_file=None)
    time.sleep(2)
    rc = deploy("topology-instance", ["playbooks/deploy.yml", "--limit", mini, "-e", "vllm_server_restart_sec=31"])
    time.sleep(2)
    result = finish(lb, proc)
    return {"machine": box, "instance": mini, "rc": rc, "client": result, "before": before, "after": machine(box),
            "servers": servers(lb)}


def main(argv):
    what = argv[0]
    result = roll(argv[2:]) if what == "roll" else kill() if what == "kill" else instance()
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "topology-%s.json" % what), "w", encoding="utf-8") as out:
        json.dump(result, out, indent=1, sort_keys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
