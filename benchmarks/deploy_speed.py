# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How fast deploy.yml converges a two-host fleet, and how fast a no-op rerun is.

    .venv/bin/python benchmarks/deploy_speed.py [--keep] [--json FILE]

Starts two fresh test hosts (Podman containers with systemd, tests/hosts; named
fleet-vllm-bench-1 and -2 on the network fleet-vllm-net, with the demo fleet's variables,
inventories/demo/group_vars), installs the test fixtures (molecule/shared/prepare.yml), then
runs ``ansible-playbook deploy.yml`` twice with the ansible.posix.json callback:

  converge      from bare hosts to two serving endpoints,
  no-op rerun   the same command again: nothing to change, nothing to restart.

For each run it prints the tasks run (task x host results that were not skipped), the tasks
changed, and the wall-clock seconds; for the converge also the time spent downloading (the
weights role's download and peer copy: roles/vllm_weights/tasks/fetch.yml, follow.yml) and
installing (the vLLM venv, fleet.vllm.vllm_venv, the huggingface_hub venv and OS packages), as the wall-clock time of those tasks. The goal:

  no-op rerun < (converge - download - install) / 3

i.e. a rerun costs at most a third of the converge's own work. Exit code 0 when the goal is
met, 1 when not, 2 when a run failed. Needs root, like the test hosts; the hosts are removed
at the end unless --keep.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOSTS_DIR = os.path.join(ROOT, "tests", "hosts")
NAMES = ["fleet-vllm-bench-1", "fleet-vllm-bench-2"]
NETWORK = "fleet-vllm-net"
# Installing software: the vLLM venv, the downloader's venv (two command tasks of the weights role)
# and OS packages.
INSTALL_ACTIONS = {"fleet.vllm.vllm_venv", "ansible.builtin.package", "ansible.builtin.apt"}
INSTALL_TASKS = ("vllm_weights : Create the downloader's venv", "vllm_weights : Install huggingface_hub into it")
DOWNLOAD_FILES = ("roles/vllm_weights/tasks/fetch.yml", "roles/vllm_weights/tasks/follow.yml")


def sh(argv, **kwargs):
    return subprocess.run(argv, check=True, text=True, stdout=subprocess.PIPE, **kwargs).stdout.strip()


def log(message):
    print(f"deploy_speed: {message}", file=sys.stderr, flush=True)


def parse_time(stamp):
    return datetime.datetime.fromisoformat(stamp.rstrip("Z"))


def summarize(report):
    """Tasks run and changed, and the wall-clock seconds of the download and install tasks."""
    run = changed = 0
    download = install = 0.0
    for play in report["plays"]:
        for task in play["tasks"]:
            results = task["hosts"].values()
            duration = task["task"]["duration"]
            seconds = 0.0
            if "end" in duration:
                seconds = (parse_time(duration["end"]) - parse_time(duration["start"])).total_seconds()
            active = [r for r in results if not r.get("skipped")]
            run += len(active)
            changed += sum(1 for r in active if r.get("changed"))
            if not active:
                continue
            path = task["task"].get("path", "")
            actions = {r.get("action") for r in active}
            if any(part in path for part in DOWNLOAD_FILES):
                download += seconds
            elif actions & INSTALL_ACTIONS or task["task"]["name"].endswith(INSTALL_TASKS):
                install += seconds
    return {"tasks": run, "changed": changed, "download": round(download, 1), "install": round(install, 1)}


def deploy(inventory, env):
    env = dict(env, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    start = time.monotonic()
    proc = subprocess.run(["ansible-playbook", "deploy.yml", "-i", inventory], cwd=ROOT, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    seconds = round(time.monotonic() - start, 1)
    try:
        report = json.loads(proc.stdout[proc.stdout.index("{"):])
    except ValueError:
        report = None
    if proc.returncode != 0 or report is None:
        log(f"deploy.yml failed (rc {proc.returncode}):\n{proc.stdout[-5000:]}\n{proc.stderr[-3000:]}")
        sys.exit(2)
    return dict(summarize(report), seconds=seconds, stats=report["stats"])


def start_hosts(image, wheelhouse):
    for name in NAMES:
        subprocess.run(["podman", "rm", "--force", "--ignore", "--time", "0", name], check=True,
                       stdout=subprocess.DEVNULL)
        sh(["podman", "run", "--detach", "--name", name, "--hostname", name, "--network", NETWORK,
            "--systemd=always", "--publish", "127.0.0.1::8000", "--volume", f"{wheelhouse}:/srv/wheelhouse:ro",
            "--label", "org.fleet-vllm.bench=1", image])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--keep", action="store_true", help="leave the two hosts running")
    parser.add_argument("--json", help="also write the numbers to this file")
    opts = parser.parse_args()
    if os.geteuid() != 0:
        parser.error("run as root (rootful Podman for the test hosts)")

    env = dict(os.environ, PATH=os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ["PATH"],
               ANSIBLE_INJECT_FACT_VARS="false")
    subprocess.run([os.path.join(HOSTS_DIR, "prepare-machine.sh")], check=True, stdout=subprocess.DEVNULL)
    image = sh([os.path.join(HOSTS_DIR, "build-image.sh")])
    wheelhouse = sh([os.path.join(HOSTS_DIR, "wheelhouse.sh")])
    sh([os.path.join(HOSTS_DIR, "mirror.sh"), "up"], env=dict(env, FLEET_VLLM_MIRROR_WHEELHOUSE=wheelhouse))
    env["FLEET_VLLM_MIRROR_URL"] = sh([os.path.join(HOSTS_DIR, "mirror.sh"), "url"])

    with tempfile.TemporaryDirectory(prefix="fleet-vllm-bench-") as inventory:
        with open(os.path.join(inventory, "hosts.yml"), "w", encoding="utf-8") as handle:
            # The demo fleet's connection (inventories/demo/hosts.yml): fleet_nsenter with pipelining.
            handle.write("all:\n  children:\n    vllm_servers:\n      vars:\n"
                         "        ansible_connection: fleet_nsenter\n      hosts:\n")
            for name in NAMES:
                handle.write(f"        {name}:\n          ansible_host: {name}\n")
        os.symlink(os.path.join(ROOT, "inventories", "demo", "group_vars"), os.path.join(inventory, "group_vars"))
        try:
            log(f"starting {' and '.join(NAMES)}")
            start_hosts(image, wheelhouse)
            subprocess.run(["ansible-playbook", os.path.join(ROOT, "molecule", "shared", "prepare.yml"), "-i", inventory],
                           cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
            log("converge: ansible-playbook deploy.yml")
            converge = deploy(inventory, env)
            log("no-op rerun: ansible-playbook deploy.yml")
            rerun = deploy(inventory, env)
        finally:
            if not opts.keep:
                subprocess.run(["podman", "rm", "--force", "--ignore", "--time", "0"] + NAMES, check=False,
                               stdout=subprocess.DEVNULL)

    own_work = converge["seconds"] - converge["download"] - converge["install"]
    budget = own_work / 3
    print(f"{'run':<13} {'tasks':>6} {'changed':>8} {'seconds':>8}")
    for label, data in (("converge", converge), ("no-op rerun", rerun)):
        print(f"{label:<13} {data['tasks']:>6} {data['changed']:>8} {data['seconds']:>8.1f}")
    print(f"converge: download {converge['download']:.1f} s, install {converge['install']:.1f} s "
          f"(wall-clock time of those tasks)")
    met = rerun["seconds"] < budget and rerun["changed"] == 0
    print(f"goal: no-op rerun < (converge - download - install) / 3 = ({converge['seconds']:.1f} - "
          f"{converge['download']:.1f} - {converge['install']:.1f}) / 3 = {budget:.1f} s: "
          f"{'met' if met else 'NOT met'} ({rerun['seconds']:.1f} s, {rerun['changed']} changed)")
    if opts.json:
        with open(opts.json, "w", encoding="utf-8") as handle:
            json.dump({"converge": converge, "rerun": rerun, "budget": round(budget, 1), "met": met}, handle, indent=1)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
