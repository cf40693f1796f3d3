# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Why the gateway exists: requests lost while deploy.yml rolls a new vLLM pin, with and without
the gateway's drain, and what the front door and the gateway add to each request.

    .venv/bin/python benchmarks/gateway_rolling.py [--keep] [--json FILE]

Starts three fresh test hosts (Podman containers with systemd, tests/hosts, on the network
fleet-vllm-net, with the demo fleet's variables): fleet-vllm-gwbench-1 and -2 in vllm_servers and
fleet-vllm-gwbench-lb in vllm_gateways; installs the test fixtures (molecule/shared/prepare.yml)
and runs deploy.yml. Then, from inside the gateway host (the bounded client
molecule/shared/traffic_client.py, 4 threads, streaming and non-streaming chat completions):

  latency   300 requests one after the other to each of: vLLM itself (127.0.0.1:8000 inside
            host 1), host 1's front door from inside host 1, host 1's front door from the gateway
            host, the gateway; the medians give what the front door and the gateway add;
  roll 1    deploy.yml -e vllm_runtime_version=0.33.0 with an inventory that has no vllm_gateways
            group (the rolling phase as before: nothing drains), while one client talks to host 1
            directly and another through the gateway (which then only has its health checks);
  roll 2    deploy.yml back to the inventory's pin with the gateway in the inventory (drain before
            each restart, back once the gateway sees the host up), the same two clients.

Each restart "loads the model" for LOAD_SECONDS (20 s; a real 540 GB load takes minutes).

Prints the table of requests sent, failed and truncated per client and roll, and the latencies.
Needs root, like the test hosts; the hosts are removed at the end unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOSTS_DIR = os.path.join(ROOT, "tests", "hosts")
CLIENT = os.path.join(ROOT, "molecule", "shared", "traffic_client.py")
PREFIX = "fleet-vllm-gwbench-"
NETWORK = "fleet-vllm-net"
NEW_PIN = "0.33.0"
# The simulated model load of each restart (FLEET_VLLM_SIM_LOAD_SECONDS of molecule/shared/prepare.yml).
# A real 540 GB load takes minutes; with 1 s, the front door's own connection retries (HAProxy's
# default `retries 3`, a second apart) hide most of a restart from a client that talks to a host.
LOAD_SECONDS = "20"


def sh(argv, **kwargs):
    return subprocess.run(argv, check=True, text=True, stdout=subprocess.PIPE, **kwargs).stdout.strip()


def log(message):
    print(f"gateway_rolling: {message}", file=sys.stderr, flush=True)


def demo_vars():
    import yaml

    with open(os.path.join(ROOT, "inventories", "demo", "group_vars", "vllm_servers.yml"), encoding="utf-8") as handle:
        data = yaml.safe_load(handle)
    return data["vllm_server_api_key"], data["vllm_server_served_model_name"]


def inventory(directory, servers, gateways):
    os.makedirs(directory)
    with open(os.path.join(directory, "hosts.yml"), "w", encoding="utf-8") as handle:
        handle.write("all:\n  vars:\n    ansible_connection: fleet_nsenter\n  children:\n    vllm_servers:\n      hosts:\n")
        for name in servers:
            handle.write(f"        {name}: {{ansible_host: {name}}}\n")
        if gateways:
            handle.write("    vllm_gateways:\n      hosts:\n")
            for name in gateways:
                handle.write(f"        {name}: {{ansible_host: {name}}}\n")
    os.symlink(os.path.join(ROOT, "inventories", "demo", "group_vars"), os.path.join(directory, "group_vars"))
    return directory


def playbook(inv, env, path, *extra):
    start = time.monotonic()
    proc = subprocess.run(["ansible-playbook", path, "-i", inv, *extra], cwd=ROOT, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        log(f"{path} failed (rc {proc.returncode}):\n{proc.stdout[-6000:]}")
        sys.exit(2)
    return round(time.monotonic() - start, 1)


def client(host, url, key, model, requests, seconds, workers, stop, pause=0.05):
    """A started client inside HOST (the key through the environment, not argv)."""
    subprocess.run(["podman", "cp", CLIENT, f"{host}:/root/traffic_client.py"], check=True)
    subprocess.run(["podman", "exec", host, "rm", "-f", stop], check=True)
    return subprocess.Popen(
        ["podman", "exec", "--env", "TRAFFIC_KEY", host, "sh", "-c",
         'exec python3 /root/traffic_client.py --url "$0" --model "$1" --requests "$2" --seconds "$3" '
         '--workers "$4" --stop-file "$5" --pause "$6"', url, model, str(requests), str(seconds), str(workers), stop,
         str(pause)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, TRAFFIC_KEY=key))


def finish(host, proc, stop, tell=True):
    """The client's counts; with tell, it is told to stop first, else it ends at its own bound."""
    if tell:
        subprocess.run(["podman", "exec", host, "touch", stop], check=True)
    out, err = proc.communicate(timeout=600)
    if proc.returncode != 0:
        log(f"client failed: {err}")
        sys.exit(2)
    return json.loads(out)


def roll_with_traffic(inv, env, lb, host1, key, model, *extra):
    direct = client(lb, f"http://{host1}:8080", key, model, 1000000, 1500, 4, "/tmp/stop-direct")
    through = client(lb, "http://127.0.0.1:8080", key, model, 1000000, 1500, 4, "/tmp/stop-gateway")
    time.sleep(2)
    seconds = playbook(inv, env, "deploy.yml", *extra)
    time.sleep(2)
    return {"seconds": seconds, "direct": finish(lb, direct, "/tmp/stop-direct"),
            "gateway": finish(lb, through, "/tmp/stop-gateway")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--keep", action="store_true", help="leave the hosts running")
    parser.add_argument("--json", help="also write the numbers to this file")
    opts = parser.parse_args()
    if os.geteuid() != 0:
        parser.error("run as root (rootful Podman for the test hosts)")
    env = dict(os.environ, ANSIBLE_INJECT_FACT_VARS="false", ANSIBLE_FORKS="16",
               ANSIBLE_CONNECTION_PLUGINS=os.path.join(HOSTS_DIR, "connection_plugins"), ANSIBLE_PIPELINING="true")
    env["PATH"] = os.path.join(os.environ.get("FLEET_VLLM_VENV") or os.path.join(ROOT, ".venv"), "bin") + os.pathsep + env["PATH"]
    subprocess.run([os.path.join(HOSTS_DIR, "prepare-machine.sh")], check=True, stdout=subprocess.DEVNULL)
    image = os.environ.get("FLEET_VLLM_TESTHOST_IMAGE") or sh([os.path.join(HOSTS_DIR, "build-image.sh")])
    wheelhouse = os.environ.get("FLEET_VLLM_WHEELHOUSE") or sh([os.path.join(HOSTS_DIR, "wheelhouse.sh")])
    if not os.environ.get("FLEET_VLLM_MIRROR_URL"):
        sh([os.path.join(HOSTS_DIR, "mirror.sh"), "up"], env=dict(env, FLEET_VLLM_MIRROR_WHEELHOUSE=wheelhouse))
        env["FLEET_VLLM_MIRROR_URL"] = sh([os.path.join(HOSTS_DIR, "mirror.sh"), "url"])
    key, model = demo_vars()

    servers = [f"{PREFIX}1", f"{PREFIX}2"]
    lb = f"{PREFIX}lb"
    names = servers + [lb]
    subprocess.run(["podman", "rm", "--force", "--ignore", "--time", "0"] + names, check=False, stdout=subprocess.DEVNULL)
    results = {}
    with tempfile.TemporaryDirectory(prefix="fleet-vllm-gwbench-") as tmp:
        with_gw = inventory(os.path.join(tmp, "with"), servers, [lb])
        without_gw = inventory(os.path.join(tmp, "without"), servers, [])
        try:
            for name in names:
                sh(["podman", "run", "--detach", "--name", name, "--hostname", name, "--network", NETWORK,
                    "--systemd=always", "--volume", f"{wheelhouse}:/srv/wheelhouse:ro", "--label", "org.fleet-vllm.bench=1",
                    image])
            log("prepare and converge (two fleet hosts and a gateway)")
            playbook(with_gw, dict(env, FLEET_VLLM_SIM_LOAD_SECONDS=LOAD_SECONDS),
                     os.path.join(ROOT, "molecule", "shared", "prepare.yml"))
            results["converge_seconds"] = playbook(with_gw, env, "deploy.yml")

            log("latency: 300 requests one after the other per path")
            latency = {}
            for label, host, url in (("vllm", servers[0], "http://127.0.0.1:8000"),
                                     ("front door (same host)", servers[0], "http://127.0.0.1:8080"),
                                     ("front door (from the gateway host)", lb, f"http://{servers[0]}:8080"),
                                     ("gateway", lb, "http://127.0.0.1:8080")):
                latency[label] = finish(host, client(host, url, key, model, 300, 300, 1, "/tmp/stop-latency", pause=0),
                                        "/tmp/stop-latency", tell=False)
            results["latency"] = latency

            log(f"roll 1: no vllm_gateways group in the inventory (nothing drains), to {NEW_PIN}")
            results["roll_without_drain"] = roll_with_traffic(without_gw, env, lb, servers[0], key, model,
                                                              "-e", f"vllm_runtime_version={NEW_PIN}")
            log("roll 2: the gateway in the inventory (drain, undrain), back to the inventory's pin")
            results["roll_with_drain"] = roll_with_traffic(with_gw, env, lb, servers[0], key, model)
        finally:
            if not opts.keep:
                subprocess.run(["podman", "rm", "--force", "--ignore", "--time", "0"] + names, check=False,
                               stdout=subprocess.DEVNULL)

    if opts.json:
        with open(opts.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1)
    print(f"{'roll':<36} {'client':<30} {'sent':>7} {'failed':>7} {'truncated':>9} {'lost %':>7}")
    for roll in ("roll_without_drain", "roll_with_drain"):
        for who, label in (("direct", "to host 1 directly"), ("gateway", "through the gateway")):
            c = results[roll][who]
            lost = c["failed"] + c["truncated"]
            print(f"{roll + ' (%.0f s)' % results[roll]['seconds']:<36} {label:<30} {c['sent']:>7} {c['failed']:>7} "
                  f"{c['truncated']:>9} {100.0 * lost / max(c['sent'], 1):>7.2f}")
    print(f"{'path':<36} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8}")
    for label, c in results["latency"].items():
        print(f"{label:<36} {c['latencies_ms']['p50']:>8} {c['latencies_ms']['p90']:>8} {c['latencies_ms']['p99']:>8}")
    p50 = {k: v["latencies_ms"]["p50"] for k, v in results["latency"].items()}
    print(f"added by the front door: {p50['front door (same host)'] - p50['vllm']:.2f} ms (p50, same host); "
          f"by the gateway: {p50['gateway'] - p50['front door (from the gateway host)']:.2f} ms (p50)")
    ok = results["roll_with_drain"]["gateway"]["failed"] + results["roll_with_drain"]["gateway"]["truncated"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
