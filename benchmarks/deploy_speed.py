# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How deploy.yml scales with the fleet: first converge, no-op rerun and rolling a new vLLM pin,
on 2, 4 and 8 test hosts.

    .venv/bin/python benchmarks/deploy_speed.py [--hosts 2,4,8] [--keep] [--json FILE]

For each fleet size N it starts N fresh test hosts (Podman containers with systemd, tests/hosts;
fleet-vllm-bench-1..N on the network fleet-vllm-net, with the demo fleet's variables,
inventories/demo/group_vars), installs the test fixtures (molecule/shared/prepare.yml), then runs
``ansible-playbook deploy.yml`` three times with the ansible.posix.json callback:

  converge      from bare hosts to N serving endpoints (the inventory's pin, the 0.16 nightly);
  no-op rerun   the same command again: nothing to change, nothing to restart;
  new pin       -e vllm_runtime_version=0.33.0: a new venv on every host, each host restarted.

It prints, per run: task results (not skipped) and changed ones, wall-clock seconds, the task
results of the rolling play, the restarts, the venv installs and in which play they ran. Goals,
as ratios measured in this one run:

  1. no-op rerun on 2 hosts < converge on 2 hosts / 4;
  2. no-op rerun on 8 hosts < 3 x no-op rerun on 2 hosts (on this 2-core machine);
  3. no-op rerun: no task result in the rolling play (only the staged/running comparison);
  4. new pin on N hosts: N restarts, N venv installs, all in the staging play (one parallel
     install phase, not N in a row).

Exit code 0 when every goal is met, 1 when not, 2 when a run failed. Needs root, like the test
hosts; the hosts are removed after each size unless --keep (then only the last size's stay).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOSTS_DIR = os.path.join(ROOT, "tests", "hosts")
PREFIX = "fleet-vllm-bench-"
NETWORK = "fleet-vllm-net"
NEW_PIN = "0.33.0"
RESTART_TASK = "Start or restart the service"
INSTALL_ACTION = "fleet.vllm.vllm_venv"


def sh(argv, **kwargs):
    return subprocess.run(argv, check=True, text=True, stdout=subprocess.PIPE, **kwargs).stdout.strip()


def log(message):
    print(f"deploy_speed: {message}", file=sys.stderr, flush=True)


def parse_time(stamp):
    return datetime.datetime.fromisoformat(stamp.rstrip("Z"))


def summarize(report):
    """Task results run and changed; per play the results; restarts; venv installs per play."""
    out = {"tasks": 0, "changed": 0, "plays": [], "restarts": 0, "installs": {}, "install_seconds": 0.0}
    for index, play in enumerate(report["plays"]):
        name = play["play"]["name"]
        count = 0
        for task in play["tasks"]:
            active = [r for r in task["hosts"].values() if not r.get("skipped")]
            count += len(active)
            out["changed"] += sum(1 for r in active if r.get("changed"))
            if RESTART_TASK in task["task"]["name"]:
                out["restarts"] += sum(1 for r in active if r.get("changed"))
            installs = sum(1 for r in active if r.get("action") == INSTALL_ACTION and r.get("changed"))
            if installs:
                out["installs"][name] = out["installs"].get(name, 0) + installs
                duration = task["task"]["duration"]
                if "end" in duration:
                    out["install_seconds"] += (parse_time(duration["end"]) - parse_time(duration["start"])).total_seconds()
        out["tasks"] += count
        out["plays"].append({"index": index, "name": name, "results": count})
    out["install_seconds"] = round(out["install_seconds"], 1)
    return out


def deploy(inventory, env, *extra):
    env = dict(env, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    start, used = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(["ansible-playbook", "deploy.yml", "-i", inventory, *extra], cwd=ROOT, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    seconds = round(time.monotonic() - start, 1)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU of ansible-playbook and everything it waited for (the modules it ran on the test hosts,
    # which are processes of this machine); the services systemd started on the hosts are not in it.
    cpu = round(after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime, 1)
    try:
        report = json.loads(proc.stdout[proc.stdout.index("{"):])
    except ValueError:
        report = None
    if proc.returncode != 0 or report is None:
        log(f"deploy.yml failed (rc {proc.returncode}):\n{proc.stdout[-5000:]}\n{proc.stderr[-3000:]}")
        sys.exit(2)
    return dict(summarize(report), seconds=seconds, cpu=cpu)


def rolling_results(data):
    return sum(p["results"] for p in data["plays"] if p["name"].startswith("Roll"))


def remove_hosts(names):
    subprocess.run(["podman", "rm", "--force", "--ignore", "--time", "0"] + names, check=False,
                   stdout=subprocess.DEVNULL)


def start_hosts(names, image, wheelhouse):
    remove_hosts(names)
    for name in names:
        sh(["podman", "run", "--detach", "--name", name, "--hostname", name, "--network", NETWORK,
            "--systemd=always", "--publish", "127.0.0.1::8000", "--volume", f"{wheelhouse}:/srv/wheelhouse:ro",
            "--label", "org.fleet-vllm.bench=1", image])


def measure(count, image, wheelhouse, env, keep):
    names = [f"{PREFIX}{i}" for i in range(1, count + 1)]
    with tempfile.TemporaryDirectory(prefix="fleet-vllm-bench-") as inventory:
        with open(os.path.join(inventory, "hosts.yml"), "w", encoding="utf-8") as handle:
            # The demo fleet's connection (inventories/demo/hosts.yml): fleet_nsenter with pipelining.
            handle.write("all:\n  children:\n    vllm_servers:\n      vars:\n"
                         "        ansible_connection: fleet_nsenter\n      hosts:\n")
            for name in names:
                handle.write(f"        {name}:\n          ansible_host: {name}\n")
        os.symlink(os.path.join(ROOT, "inventories", "demo", "group_vars"), os.path.join(inventory, "group_vars"))
        try:
            log(f"{count} hosts: starting {names[0]}..{names[-1]}")
            start_hosts(names, image, wheelhouse)
            subprocess.run(["ansible-playbook", os.path.join(ROOT, "molecule", "shared", "prepare.yml"), "-i", inventory,
                            "-f", "16"], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
            log(f"{count} hosts: converge")
            converge = deploy(inventory, env)
            log(f"{count} hosts: no-op rerun")
            rerun = deploy(inventory, env)
            log(f"{count} hosts: new pin (vllm_runtime_version={NEW_PIN})")
            pin = deploy(inventory, env, "-e", f"vllm_runtime_version={NEW_PIN}")
        finally:
            if not keep:
                remove_hosts(names)
    return {"hosts": count, "converge": converge, "rerun": rerun, "pin": pin}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--hosts", default="2,4,8", help="fleet sizes, comma-separated (default 2,4,8)")
    parser.add_argument("--keep", action="store_true", help="leave the last fleet's hosts running")
    parser.add_argument("--json", help="also write the numbers to this file")
    opts = parser.parse_args()
    if os.geteuid() != 0:
        parser.error("run as root (rootful Podman for the test hosts)")
    sizes = [int(n) for n in opts.hosts.split(",")]

    env = dict(os.environ, PATH=os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ["PATH"],
               ANSIBLE_INJECT_FACT_VARS="false", ANSIBLE_FORKS="16")
    subprocess.run([os.path.join(HOSTS_DIR, "prepare-machine.sh")], check=True, stdout=subprocess.DEVNULL)
    image = sh([os.path.join(HOSTS_DIR, "build-image.sh")])
    wheelhouse = sh([os.path.join(HOSTS_DIR, "wheelhouse.sh")])
    sh([os.path.join(HOSTS_DIR, "mirror.sh"), "up"], env=dict(env, FLEET_VLLM_MIRROR_WHEELHOUSE=wheelhouse))
    env["FLEET_VLLM_MIRROR_URL"] = sh([os.path.join(HOSTS_DIR, "mirror.sh"), "url"])

    runs = [measure(n, image, wheelhouse, env, opts.keep and n == sizes[-1]) for n in sizes]

    print(f"{'hosts':>5} {'run':<12} {'tasks':>6} {'changed':>8} {'seconds':>8} {'cpu s':>6} {'rolling':>8} {'restarts':>9} "
          f"{'installs (play)':<24}")
    for r in runs:
        for label in ("converge", "rerun", "pin"):
            d = r[label]
            installs = ", ".join(f"{v} in '{k[:14]}'" for k, v in d["installs"].items()) or "-"
            print(f"{r['hosts']:>5} {label:<12} {d['tasks']:>6} {d['changed']:>8} {d['seconds']:>8.1f} {d['cpu']:>6.1f} "
                  f"{rolling_results(d):>8} {d['restarts']:>9} {installs:<24}")
    goals = []
    by = {r["hosts"]: r for r in runs}
    if 2 in by:
        c, n = by[2]["converge"]["seconds"], by[2]["rerun"]["seconds"]
        goals.append(("no-op rerun on 2 hosts < converge / 4", f"{n:.1f} s < {c:.1f} / 4 = {c / 4:.1f} s", n < c / 4))
        cc, nc = by[2]["converge"]["cpu"], by[2]["rerun"]["cpu"]
        print(f"no-op / converge on 2 hosts: {n / c:.2f} of the wall-clock time, {nc / cc:.2f} of the CPU time "
              f"({nc:.1f} / {cc:.1f} CPU s; the CPU ratio holds on a loaded machine, the goal is the wall-clock one)")
    if 2 in by and 8 in by:
        n2, n8 = by[2]["rerun"]["seconds"], by[8]["rerun"]["seconds"]
        goals.append(("no-op rerun on 8 hosts < 3 x on 2 hosts", f"{n8:.1f} s < 3 x {n2:.1f} = {3 * n2:.1f} s", n8 < 3 * n2))
    for r in runs:
        d = r["rerun"]
        goals.append((f"no-op rerun on {r['hosts']} hosts: nothing changed, nothing in the rolling play",
                      f"{d['changed']} changed, {rolling_results(d)} rolling task results",
                      d["changed"] == 0 and rolling_results(d) == 0))
        p = r["pin"]
        staged = [k for k in p["installs"] if k.startswith("Stage")]
        goals.append((f"new pin on {r['hosts']} hosts: {r['hosts']} restarts, {r['hosts']} installs, all while staging",
                      f"{p['restarts']} restarts, installs {p['installs']} ({p['install_seconds']:.1f} s of install tasks)",
                      p["restarts"] == r["hosts"] and sum(p["installs"].values()) == r["hosts"]
                      and staged and p["installs"][staged[0]] == r["hosts"]))
    met = all(ok for dummy, dummy2, ok in goals)
    for name, figures, ok in goals:
        print(f"goal: {name}: {figures}: {'met' if ok else 'NOT met'}")
    if opts.json:
        with open(opts.json, "w", encoding="utf-8") as handle:
            json.dump({"runs": runs, "goals": [{"goal": g, "figures": f, "met": ok} for g, f, ok in goals]}, handle,
                      indent=1)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
