"""Benchmark: peer copy throughput (issue 12). Prints its figures; asserts nothing in CI.

    .venv/bin/python benchmarks/peer_copy.py              # as root; 4 GB, two network namespaces
    .venv/bin/python benchmarks/peer_copy.py --gb 8 --runs 3
    .venv/bin/python benchmarks/peer_copy.py --loopback   # without namespaces: both ends on 127.0.0.1
    .venv/bin/python benchmarks/peer_copy.py --link-mbps 200   # the link slower than the CPUs, as on a fleet

A snapshot of --gb GB (generated files: --fill random writes random bytes once, the default
sparse reads as zeros - both are read and sent in full, nothing is compressed) is copied from a
"seed" to a "copier" twice per run, over the same path, into an empty directory each time:

- **role**: fleet.vllm.hf_snapshot with peer=rsync://SEED:PORT/..., against the daemon the
  vllm_weights role configures (its rsyncd.conf and handshake gate, socket-activated per
  connection by systemd's systemd-socket-activate as fleet-vllm-rsyncd.socket does), the module
  run as Ansible runs it (a process with its arguments file), including its manifest read,
  watchdog, verification (sizes, safetensors index, and every file's digest against the listing
  the role gets from the hub: it reads every byte it copied once more) and manifest write;
- **raw**: a Python socket stream of the same files over the same path (read 1 MiB, sendall;
  recv_into, write), what `nc` would do, into files on the same filesystem.

The two ends are two network namespaces joined by a veth pair (10.213.12.1 <-> .2), each end
a process in its namespace; --loopback puts both on 127.0.0.1 instead; --link-mbps limits the link
(a token bucket on the seed's end) so that the network, not this machine's two cores, bounds both
copies, as a fleet's 25 GbE does its hosts (which have cores to spare for hashing). Goal: role /
raw >= 0.8.
The machine's page cache holds the source after the first read; both copies write to the same
disk, and each is timed until its bytes are on disk (sync before it starts, and at its end, so
that neither pays for the other's writeback). Best of --runs; the order alternates.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jinja2

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "collections")]

from ansible_collections.fleet.vllm.plugins.module_utils import _snapshot as snap  # noqa: E402
from ansible_collections.fleet.vllm.plugins.filter.config_value import config_value  # noqa: E402

REPO = "nvidia/Kimi-K2.5-NVFP4"
REPO_DIR = "nvidia--Kimi-K2.5-NVFP4"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
MODULE = "fleet-vllm-models"
ROLE = ROOT / "roles" / "vllm_weights"
NS = ("fvbench12-seed", "fvbench12-copier")
ADDR = ("10.213.12.1", "10.213.12.2")
PORT = 18873
RAW_PORT = 18874
CHUNK = 1 << 20

RAW_SENDER = r'''
import os, socket, struct, sys
directory, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind((host, port))
server.listen(1)
print("ready", flush=True)
conn, _ = server.accept()
for name in sorted(os.listdir(directory)):
    path = os.path.join(directory, name)
    if not os.path.isfile(path):
        continue
    size = os.path.getsize(path)
    encoded = name.encode()
    conn.sendall(struct.pack("!HQ", len(encoded), size) + encoded)
    with open(path, "rb") as handle:
        while True:
            block = handle.read(%d)
            if not block:
                break
            conn.sendall(block)
conn.sendall(struct.pack("!HQ", 0, 0))
conn.close()
''' % CHUNK

RAW_RECEIVER = r'''
import os, socket, struct, sys
dest, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
conn = socket.create_connection((host, port))
buffer = bytearray(%d)
view = memoryview(buffer)
def exactly(n):
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise SystemExit("stream ended early")
        data += chunk
    return data
total = 0
while True:
    length, size = struct.unpack("!HQ", exactly(10))
    if not length:
        break
    name = exactly(length).decode()
    with open(os.path.join(dest, name), "wb") as handle:
        left = size
        while left:
            got = conn.recv_into(view[:min(left, len(buffer))])
            if not got:
                raise SystemExit("stream ended early")
            handle.write(view[:got])
            left -= got
    total += size
print(total)
''' % CHUNK


def sh(*argv, check=True):
    return subprocess.run(argv, check=check, capture_output=True, text=True)


class Ends:
    """Where the seed and the copier run: two network namespaces joined by veth, or loopback."""

    def __init__(self, loopback, link_mbps=0):
        self.loopback = loopback
        self.link_mbps = link_mbps
        self.seed_addr, self.copier_addr = ("127.0.0.1", "127.0.0.1") if loopback else ADDR

    def __enter__(self):
        if not self.loopback:
            self.down()
            for ns in NS:
                sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", "fvb12-s", "type", "veth", "peer", "name", "fvb12-c")
            for link, ns, addr in (("fvb12-s", NS[0], ADDR[0]), ("fvb12-c", NS[1], ADDR[1])):
                sh("ip", "link", "set", link, "netns", ns)
                sh("ip", "-n", ns, "addr", "add", addr + "/24", "dev", link)
                sh("ip", "-n", ns, "link", "set", link, "up")
                sh("ip", "-n", ns, "link", "set", "lo", "up")
            if self.link_mbps:
                # A link slower than this machine's CPUs can feed, as a fleet's network is to its hosts' cores:
                # a token bucket on the seed's side of the pair (tc-tbf(8)), for both copies alike.
                sh("ip", "netns", "exec", NS[0], "tc", "qdisc", "add", "dev", "fvb12-s", "root", "tbf",
                   "rate", "%dmbit" % (self.link_mbps * 8), "burst", "4mb", "latency", "100ms")
        return self

    def __exit__(self, *exc):
        if not self.loopback:
            self.down()

    @staticmethod
    def down():
        for ns in NS:
            sh("ip", "netns", "del", ns, check=False)

    def argv(self, end, argv):
        return list(argv) if self.loopback else ["ip", "netns", "exec", NS[end]] + list(argv)

    def describe(self):
        if self.loopback:
            return "loopback (127.0.0.1), one machine"
        mtu = sh("ip", "-n", NS[0], "-o", "link", "show", "fvb12-s").stdout.split(" mtu ")[1].split()[0]
        link = ", link limited to %d MB/s (tbf)" % self.link_mbps if self.link_mbps else ""
        return "two network namespaces over a veth pair (%s -> %s, MTU %s%s)" % (ADDR[0], ADDR[1], mtu, link)


def make_snapshot(base, gb, fill):
    directory = base / "seed" / "pristine" / REPO_DIR / COMMIT
    directory.mkdir(parents=True)
    shards = max(2, int(gb * 2))
    size = int(gb * (1 << 30)) // shards
    files = []
    block = os.urandom(CHUNK) if fill == "random" else None
    for index in range(1, shards + 1):
        name = "model-%05d-of-%05d.safetensors" % (index, shards)
        with open(directory / name, "wb") as handle:
            if block is None:
                handle.truncate(size)
            else:
                left = size
                while left:
                    # A fresh block per MiB would cost more than the copy; rotate one random block instead.
                    piece = block[left % 4096:] + block[:left % 4096]
                    handle.write(piece[:min(left, CHUNK)])
                    left -= min(left, CHUNK)
        files.append(dict(path=name, size=size))
    (directory / "config.json").write_text('{"architectures": ["DeepseekV3ForCausalLM"]}\n')
    files.append(dict(path="config.json", size=(directory / "config.json").stat().st_size))
    # The hub's listing gives every file its digest (sha256 of LFS files, git blob sha1 of the others); the copy is
    # checked against it, as the role's copies are.
    for item in files:
        kind = "sha256" if item["path"].endswith(".safetensors") else "git-sha1"
        item["sha256" if kind == "sha256" else "git_sha1"] = snap.digest_of(
            str(directory / item["path"]), kind, item["size"]).split(":", 1)[1]
    snap.write_manifest(str(directory), snap.make_manifest(REPO, COMMIT, files, COMMIT))
    for path in [base, *(base / "seed").rglob("*"), base / "seed"]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return directory, sum(f["size"] for f in files), files


def start_daemon(ends, base):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(ROLE / "templates")), undefined=jinja2.StrictUndefined)
    env.filters["dirname"] = os.path.dirname
    env.filters["fleet.vllm.config_value"] = config_value
    conf = base / "rsyncd.conf"
    conf.write_text(env.get_template("rsyncd.conf.j2").render(
        ansible_managed="benchmarks/peer_copy.py", vllm_weights_peer_max_connections=16,
        __vllm_weights_rsyncd_lock=str(base / "rsyncd.lock"), __vllm_weights_rsync_module=MODULE,
        fleet_vllm_pristine_dir=str(base / "seed" / "pristine" / REPO_DIR),
        __vllm_weights_peer_networks=["127.0.0.0/8", "10.213.12.0/24"]))
    proc = subprocess.Popen(ends.argv(0, [
        shutil.which("systemd-socket-activate"), "--listen=%s:%d" % (ends.seed_addr, PORT), "--accept", "--inetd",
        "/usr/bin/python3", str(ROLE / "files" / "rsync-handshake-gate"), "20", shutil.which("rsync"), "--daemon", "--config=%s" % conf]),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    return proc


ROLE_HASHED = []


def role_copy(ends, base, run, listing):
    work = base / ("role-%d" % run)
    work.mkdir()
    args = dict(repo_id=REPO, revision=COMMIT, dest=str(work / "pristine"), retries=0, listing=listing,
                peer=["rsync://%s:%d/%s/%s" % (ends.seed_addr, PORT, MODULE, REPO_DIR)],
                progress_file=str(work / "progress.json"), _ansible_remote_tmp=str(work), _ansible_check_mode=False)
    (work / "args.json").write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    os.sync()
    start = time.monotonic()
    proc = subprocess.run(ends.argv(1, [sys.executable, str(ROOT / "plugins" / "modules" / "hf_snapshot.py"),
                                        str(work / "args.json")]),
                          env=dict(os.environ, PYTHONPATH=str(ROOT / "collections")), capture_output=True, text=True,
                          cwd=str(work), check=False)
    os.sync()
    seconds = time.monotonic() - start
    result = json.loads(proc.stdout)
    if result.get("failed") or not result.get("complete"):
        raise SystemExit("hf_snapshot failed: %s" % result.get("msg"))
    shutil.rmtree(work)
    ROLE_HASHED.append(result.get("hashed_bytes"))
    return seconds


def raw_copy(ends, base, source, run):
    dest = base / ("raw-%d" % run)
    dest.mkdir()
    sender = subprocess.Popen(ends.argv(0, [sys.executable, "-c", RAW_SENDER, str(source), ends.seed_addr,
                                            str(RAW_PORT)]), stdout=subprocess.PIPE, text=True)
    sender.stdout.readline()
    os.sync()
    start = time.monotonic()
    receiver = subprocess.run(ends.argv(1, [sys.executable, "-c", RAW_RECEIVER, str(dest), ends.seed_addr,
                                            str(RAW_PORT)]), capture_output=True, text=True, check=False)
    os.sync()
    seconds = time.monotonic() - start
    sender.wait(30)
    if receiver.returncode:
        raise SystemExit("raw stream failed: %s" % receiver.stderr[-500:])
    shutil.rmtree(dest)
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=4.0)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--fill", choices=["sparse", "random"], default="sparse")
    parser.add_argument("--loopback", action="store_true")
    parser.add_argument("--link-mbps", type=int, default=0,
                        help="limit the veth link to this many MB/s (a network slower than the CPUs, as on a fleet)")
    parser.add_argument("--dir", default="/var/tmp", help="where the snapshot and the copies go (same filesystem)")
    opts = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("peer_copy.py: run as root (network namespaces; the daemon switches to nobody)")
    base = Path(tempfile.mkdtemp(prefix="fleet-vllm-peer-copy-", dir=opts.dir))
    os.chmod(base, 0o755)
    daemon = None
    try:
        with Ends(opts.loopback, opts.link_mbps) as ends:
            source, total, listing = make_snapshot(base, opts.gb, opts.fill)
            daemon = start_daemon(ends, base)
            rsync_version = sh("rsync", "--version").stdout.split("\n")[0]
            print("Peer copy throughput: %s snapshot (%d files, %s), %s; %s; best of %d" % (
                snap.human_bytes(total), len(os.listdir(source)) - 1, opts.fill, ends.describe(), rsync_version,
                opts.runs))
            # Warm the page cache, so that the first measured copy does not pay the first read.
            raw_copy(ends, base, source, 0)
            raw_times, role_times = [], []
            for run in range(1, opts.runs + 1):
                if run % 2:
                    raw_times.append(raw_copy(ends, base, source, run))
                    role_times.append(role_copy(ends, base, run, listing))
                else:
                    role_times.append(role_copy(ends, base, run, listing))
                    raw_times.append(raw_copy(ends, base, source, run))
                print("  run %d: raw %.1f s, role %.1f s (%s bytes hashed after the copy ended)" % (
                    run, raw_times[-1], role_times[-1], ROLE_HASHED[-1]), flush=True)
            raw, role = min(raw_times), min(role_times)
            mb = total / 1e6
            print("  raw socket stream (Python, 1 MiB read/sendall):  %6.1f s  %7.1f MB/s" % (raw, mb / raw))
            print("  fleet.vllm.hf_snapshot from the role's daemon:   %6.1f s  %7.1f MB/s" % (role, mb / role))
            print("  ratio role / raw: %.2fx (goal >= 0.8x)" % (raw / role))
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(10)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
