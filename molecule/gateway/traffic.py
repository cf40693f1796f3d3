"""Side effects of the gateway scenario (test helper): traffic through the gateway while something
happens, with HAProxy's own counters before and after.

    python traffic.py roll -- playbooks/deploy.yml -e vllm_runtime_version=0.33.0
        the bounded client (molecule/shared/traffic_client.py) runs inside the gateway host
        against https://127.0.0.1:8080 (the scenario's CA) while molecule/shared/run_playbook.py runs the deploy;
    python traffic.py hang
        hangs the first fleet host's engine (the simulator's fault file), times how long the
        gateway keeps it in rotation, sends requests through the gateway once it left, times the
        alerts that reach the monitoring's webhook, heals it and times its return and the alerts'
        resolution; then drains the second host at the gateway and stops the first one's engine at
        once, and times those alerts and their resolution the same way.

Writes $MOLECULE_EPHEMERAL_DIRECTORY/gateway-<name>.json for the verify step.
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
import monitoring_hosts as mon  # noqa: E402


def counters(lb):
    rows = gw.stat(lb)
    front = gw.row(rows, "fleet_vllm", "FRONTEND")
    servers = {r["svname"]: {k: r[k] for k in ("status", "scur", "stot", "hrsp_5xx", "econ", "eresp", "wretr", "wredis")}
               for r in rows if r["pxname"] == gw.BACKEND and r["svname"] not in ("FRONTEND", "BACKEND")}
    return {"frontend": {k: int(front[k] or 0) for k in ("req_tot", "hrsp_2xx", "hrsp_4xx", "hrsp_5xx")},
            "servers": servers}


def start_client(lb, requests, seconds):
    return gw.start_client(lb, requests, seconds)


finish_client = gw.finish_client
wait_status = gw.wait_status


def roll(playbook_args):
    lb = gw.gateway()
    before = counters(lb)
    bounds = {"requests": 1000000, "seconds": 1500}
    client = start_client(lb, **bounds)
    time.sleep(2)
    rc = subprocess.run([sys.executable, os.path.join(SHARED, "run_playbook.py"), "gateway-roll", "--expect", "ok", "--"]
                        + playbook_args, check=False).returncode
    time.sleep(2)
    result = finish_client(lb, client)
    return {"rc": rc, "client": result, "bounds": bounds, "before": before, "after": counters(lb)}


def hang():
    lb = gw.gateway()
    victim = fleet.instances()[0]
    for name in fleet.instances():
        seconds, status = wait_status(lb, name, lambda s: s.startswith("UP"), 120)
        assert seconds is not None, "%s is not UP at the gateway before the test: %s" % (name, status)
    before = counters(lb)
    hung_at = mon.now()
    gw.exec_in(victim, ["sh", "-c", "mkdir -p %s && echo hung > %s" % (os.path.dirname(gw.FAULT_FILE), gw.FAULT_FILE)])
    left_after, status_down = wait_status(lb, victim, lambda s: s.startswith("DOWN"), 120)
    client = finish_client(lb, start_client(lb, requests=60, seconds=120), stop=False) if left_after is not None else None
    middle = counters(lb)
    # The monitoring: the hung engine is wedged (requests running, no token) and out of rotation at the gateway.
    alerts = {"hung": {"victim": victim, "at": hung_at, "fired": {}, "resolved": {}}}
    expected = {"FleetVllmEngineWedged": mon.bound("wedged_for", rate_based=True),
                "FleetVllmHostOutOfRotation": mon.bound("out_of_rotation_for", extra=gw.LEAVE_BOUND)}
    for name, limit in expected.items():
        alerts["hung"]["fired"][name] = [mon.wait_notified(name, victim, "firing", hung_at, limit + 30), limit]
    healed_at = mon.now()
    gw.exec_in(victim, ["rm", "-f", gw.FAULT_FILE])
    back_after, status_up = wait_status(lb, victim, lambda s: s.startswith("UP"), 120)
    for name in expected:
        limit = mon.resolve_bound(extra=gw.CHECK_RISE * (gw.CHECK_INTERVAL + gw.CHECK_TIMEOUT))
        alerts["hung"]["resolved"][name] = [mon.wait_notified(name, victim, "resolved", healed_at, limit + 30), limit]
    # The hung engine's requests are still in flight (they never end): its stop would wait out the shutdown timeout.
    # So the other host's engine is stopped, and this one drained.
    alerts["down"] = stopped_and_drained(lb, [n for n in fleet.instances() if n != victim][0], victim)
    return {"victim": victim, "left_after": left_after, "status_down": status_down, "client": client,
            "back_after": back_after, "status_up": status_up, "before": before, "middle": middle, "after": counters(lb),
            "alerts": alerts, "received": mon.received()}


def stopped_and_drained(lb, stopped, drained):
    """STOPPED's engine stopped (a dead engine: its /metrics gone) and DRAINED put in drain at the gateway, at once;
    then both back. The alerts each fires and resolves, with the seconds they took and their bounds."""
    out = {"stopped": stopped, "drained": drained, "fired": {}, "resolved": {}}
    expected = [("FleetVllmEngineDown", stopped, mon.bound("engine_down_for")),
                ("FleetVllmHostOutOfRotation", stopped, mon.bound("out_of_rotation_for", extra=gw.LEAVE_BOUND)),
                ("FleetVllmHostOutOfRotation", drained, mon.bound("out_of_rotation_for"))]
    # From the moment the engine is gone (systemctl stop returns once it has exited).
    gw.exec_in(stopped, ["systemctl", "stop", "vllm.service"])
    started_at = mon.now()
    gw.runtime(lb, "set server %s/%s state drain" % (gw.BACKEND, drained))
    for name, host, limit in expected:
        out["fired"]["%s %s" % (name, host)] = [mon.wait_notified(name, host, "firing", started_at, limit + 30), limit]
    ended_at = mon.now()
    gw.runtime(lb, "set server %s/%s state ready" % (gw.BACKEND, drained))
    gw.exec_in(stopped, ["systemctl", "start", "vllm.service"])
    for name, host, dummy in expected:
        limit = mon.resolve_bound(extra=gw.CHECK_RISE * (gw.CHECK_INTERVAL + gw.CHECK_TIMEOUT) + 10)
        out["resolved"]["%s %s" % (name, host)] = [mon.wait_notified(name, host, "resolved", ended_at, limit + 30), limit]
    for name in (stopped, drained):
        wait_status(lb, name, lambda s: s.startswith("UP"), 120)
    return out


def main():
    name = sys.argv[1]
    result = roll(sys.argv[sys.argv.index("--") + 1:]) if name == "roll" else hang()
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "gateway-%s.json" % name), "w",
              encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    print(json.dumps(result, indent=1))
    return 0 if name == "hang" or result["rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
