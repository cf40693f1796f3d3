"""Benchmark of the weights pipeline (issue 4). Prints its figures; asserts nothing in CI.

    .venv/bin/python benchmarks/weights.py [--skip-fleet] [--gb 2]

1. Bytes the hub serves for a fleet of N = 1, 2, 4 hosts with vllm_weights_source peer (goal: 1.00x
   the snapshot for every N; naive hub: N x), through the real role (ansible-playbook on local
   "hosts" with their own roots and rsync daemons, the fault-injecting Hub test server's log).
2. Download throughput of fleet.vllm.hf_snapshot vs a plain HTTP client (8 threads of urllib,
   as many files in flight as the module's max_workers) fetching the same files from the same
   server in the same run, with the server limited to a link speed (goal: >= 0.9x).
3. Verification of a 119-shard, 540 GB snapshot made of sparse files (goal: under 1 s), against
   the time a full sha256 pass would take at this machine's measured hashing speed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "collections"), str(ROOT / "tests")]

from ansible_collections.fleet.vllm.plugins.module_utils import _snapshot as snap  # noqa: E402
from tests.hub.fakehub import FakeHub  # noqa: E402
from tests.hub.synthetic_repo import make_repo  # noqa: E402

REPO = "nvidia/Kimi-K2.5-NVFP4"


def run_module(name, args, workdir):
    args_file = Path(workdir) / ("%s-args.json" % name)
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict(args, _ansible_remote_tmp=str(workdir))}))
    proc = subprocess.run([sys.executable, str(ROOT / "plugins" / "modules" / (name + ".py")), str(args_file)],
                          env=dict(os.environ, PYTHONPATH=str(ROOT / "collections")), capture_output=True, text=True,
                          cwd=str(workdir), check=False)
    result = json.loads(proc.stdout)
    if result.get("failed"):
        raise SystemExit("%s failed: %s" % (name, result.get("msg")))
    return result


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- 1. hub bytes per fleet size -----------------------------------------------------------

def fleet_bytes(base, sizes=(1, 2, 4)):
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import run_playbook  # noqa: E402  (the tests' ansible-playbook runner)

    repo = base / "fleet-repo"
    make_repo(repo, shards=8, shard_bytes=2_000_000)
    snapshot_bytes = sum(p.stat().st_size for p in repo.iterdir())
    wheels = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fleet-vllm" / "wheels-hub-2.4.0"
    if not any(wheels.glob("huggingface_hub-2.4.0-*.whl")):
        wheels.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--dest", str(wheels), "huggingface_hub==2.4.0"],
                       check=True)
    hub_venv = base / "hub-venv"
    subprocess.run([sys.executable, "-m", "venv", str(hub_venv)], check=True)
    subprocess.run([str(hub_venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", "--no-index",
                    "--find-links", str(wheels), "huggingface_hub==2.4.0"], check=True)
    rows = []
    for source in ("peer", "hub"):
        for n in sizes:
            if source == "hub" and n == 1:
                continue
            hub = FakeHub().start()
            hub.add_repo(REPO, str(repo))
            daemons, hosts = [], {}
            work = base / ("fleet-%s-%d" % (source, n))
            for i in range(n):
                name = "node%d" % (i + 1)
                root = work / name
                (root / "pristine").mkdir(parents=True)
                port = free_port()
                conf = work / ("%s.conf" % name)
                conf.write_text("uid = root\ngid = root\nuse chroot = no\nread only = yes\n[fleet-vllm-models]\n"
                                "path = %s\nhosts allow = 127.0.0.1\n" % (root / "pristine"))
                daemons.append(subprocess.Popen(["rsync", "--daemon", "--no-detach", "--address=127.0.0.1",
                                                 "--port=%d" % port, "--config=%s" % conf]))
                hosts[name] = dict(ansible_connection="local", ansible_python_interpreter=sys.executable,
                                   fleet_vllm_models_root=str(root), vllm_weights_peer_port=port,
                                   vllm_weights_peer_address="127.0.0.1", vllm_weights_peer_serve=False,
                                   vllm_weights_state_dir=str(root / "state"),
                                   vllm_weights_hub_venv=str(hub_venv),
                                   vllm_weights_hub_python=sys.executable)
            inventory = work / "hosts.json"
            inventory.write_text(json.dumps({"all": {"children": {"vllm_servers": {"hosts": hosts}}, "vars": dict(
                fleet_vllm_hub_endpoint=hub.url, vllm_weights_source=source, vllm_weights_progress_every=5,
                vllm_weights_pip_extra_args=["--no-index", "--find-links", str(wheels)])}}))
            started = time.monotonic()
            run = run_playbook(ROOT / "tests" / "integration" / "playbooks" / "vllm_weights.yml", "-i", inventory)
            seconds = time.monotonic() - started
            for proc in daemons:
                proc.terminate()
            served = sum(r["bytes_sent"] for r in hub.requests if r["method"] == "GET" and "/resolve/" in r["path"])
            hub.stop()
            if run.rc != 0:
                raise SystemExit("the %s fleet of %d failed:\n%s" % (source, n, run.stdout[-3000:]))
            rows.append((source, n, served, served / snapshot_bytes, seconds))
    print("\n1. Bytes the hub served for the whole fleet (snapshot %s)" % snap.human_bytes(snapshot_bytes))
    print("   %-6s %5s %14s %10s %10s" % ("source", "hosts", "hub bytes", "x snapshot", "seconds"))
    for source, n, served, ratio, seconds in rows:
        print("   %-6s %5d %14d %9.2fx %10.1f" % (source, n, served, ratio, seconds))
    print("   goal: peer 1.00x for every N (naive hub: N x)")


# ---- 2. throughput vs a plain HTTP client --------------------------------------------------------

def plain_fetch(url_base, commit, files, dest, workers=8):
    dest.mkdir(parents=True)

    def one(item):
        with urllib.request.urlopen("%s/%s/resolve/%s/%s" % (url_base, REPO, commit, item["path"])) as resp, \
                open(dest / item["path"], "wb") as out:
            shutil.copyfileobj(resp, out, 1 << 20)

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, files))


def throughput(base, gigabytes, link_mb):
    repo = base / "big-repo"
    make_repo(repo, shards=4, shard_bytes=262144)
    shard_size = int(gigabytes * 1e9 / 8)
    for i in range(8):
        with open(repo / ("model-big-%d.safetensors" % i), "wb") as handle:
            handle.truncate(shard_size)  # sparse on the server side; real bytes on the wire and on disk
    hub = FakeHub(rate_limit_bytes_per_second=link_mb * 1e6).start()
    commit = hub.add_repo(REPO, str(repo))
    files = [dict(path=p.name, size=p.stat().st_size) for p in repo.iterdir()]
    total = sum(f["size"] for f in files)
    results = {}
    for attempt in ("plain", "module", "plain2", "module2"):
        target = base / ("tp-" + attempt)
        started = time.monotonic()
        if attempt.startswith("plain"):
            plain_fetch(hub.url, commit, files, target)
        else:
            run_module("hf_snapshot", dict(repo_id=REPO, revision=commit, dest=str(target), endpoint=hub.url,
                                           python=sys.executable, max_workers=8), base)
        results.setdefault(attempt.rstrip("2"), []).append(time.monotonic() - started)
        shutil.rmtree(target)
    hub.stop()
    plain, module = min(results["plain"]), min(results["module"])
    print("\n2. Download throughput, %s over a %d MB/s link (server-side limit), best of two" % (snap.human_bytes(total), link_mb))
    print("   plain HTTP client (urllib, 8 threads): %6.1f s  %s/s" % (plain, snap.human_bytes(total / plain)))
    print("   fleet.vllm.hf_snapshot (8 workers):    %6.1f s  %s/s" % (module, snap.human_bytes(total / module)))
    print("   ratio module / plain: %.2fx (goal >= 0.9x)" % (plain / module))


# ---- 3. verification of a 540 GB sparse snapshot ----------------------------------------------------

def verification(base):
    directory = base / "sparse" / ("0" * 40)
    directory.mkdir(parents=True)
    shard = 540 * 10**9 // 119
    files = []
    weight_map = {}
    for i in range(1, 120):
        name = "model-%05d-of-00119.safetensors" % i
        with open(directory / name, "wb") as handle:
            handle.truncate(shard)
        files.append(dict(path=name, size=shard, sha256="0" * 64))
        weight_map["layer.%d.weight" % i] = name
    index = json.dumps(dict(metadata=dict(total_size=shard * 119), weight_map=weight_map)).encode()
    (directory / "model.safetensors.index.json").write_bytes(index)
    files.append(dict(path="model.safetensors.index.json", size=len(index)))
    timings = []
    for dummy in range(5):
        started = time.perf_counter()
        result = snap.check(str(directory), files)
        timings.append(time.perf_counter() - started)
    assert result["complete"], result
    sample = base / "hash-sample"
    with open(sample, "wb") as handle:
        handle.write(os.urandom(1 << 20) * 512)  # 512 MiB of real bytes, in the page cache
    started = time.perf_counter()
    snap.sha256_of(str(sample))
    rate = (512 << 20) / (time.perf_counter() - started)
    print("\n3. Verification of a 119-shard snapshot of %s (sparse files), best of 5" % snap.human_bytes(shard * 119))
    print("   sizes + safetensors index: %.4f s (goal < 1 s)" % min(timings))
    print("   a full sha256 pass at this machine's %s/s (from cache; disks are slower): %.0f s (%.1f h)"
          % (snap.human_bytes(rate), shard * 119 / rate, shard * 119 / rate / 3600))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-fleet", action="store_true", help="skip part 1 (runs ansible-playbook 5 times)")
    parser.add_argument("--only-fleet", action="store_true", help="run part 1 only")
    parser.add_argument("--gb", type=float, default=2.0, help="size of the throughput download (default 2 GB)")
    parser.add_argument("--link-mb", type=int, default=50,
                        help="link speed the server allows, MB/s (default 50: on a 2-core machine the server and the "
                        "client share the CPUs, and above ~150 MB/s both clients measure Python, not the transfer)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="fleet-vllm-bench-"))
    try:
        if not args.only_fleet:
            verification(base)
            throughput(base, args.gb, args.link_mb)
        if not args.skip_fleet:
            fleet_bytes(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
