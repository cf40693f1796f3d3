"""Benchmark: what checking a snapshot against the hub's listing costs (issue 14, point 1). Prints its
figures; asserts nothing in CI.

    .venv/bin/python benchmarks/hash_throughput.py             # 2 files of 1 GiB in a temporary directory
    .venv/bin/python benchmarks/hash_throughput.py --gib 2 --dir /srv/vllm/models

fleet.vllm.hf_snapshot checks every file of a snapshot against the hub's listing: the sha256 of LFS
files (the shards), the git blob sha1 (sha1 of "blob <size>\\0" + content) of the others. This
measures both with the module's own code (plugins/module_utils/_snapshot.py: digest_of,
verify_digests), on one core and with the module's worker count (files hashed at once), from the
page cache (the files are read once before timing: the CPU cost; a disk slower than that is the
limit instead), and prints what that means for a 540 GB snapshot.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.fleet.vllm.plugins.module_utils import _snapshot as snap  # noqa: E402

SNAPSHOT_BYTES = 540 * 10**9


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0, help="size of each of the files hashed (GiB)")
    parser.add_argument("--files", type=int, default=2, help="files (the parallel run hashes them at once)")
    parser.add_argument("--dir", default=None, help="where to write them (default: a temporary directory)")
    parser.add_argument("--runs", type=int, default=2, help="best of")
    opts = parser.parse_args()
    size = int(opts.gib * (1 << 30))
    workers = max(1, min(4, os.cpu_count() or 1))
    with tempfile.TemporaryDirectory(dir=opts.dir) as base:
        files = []
        block = os.urandom(1 << 20)
        for index in range(opts.files):
            path = os.path.join(base, "model-%05d.safetensors" % (index + 1))
            with open(path, "wb") as handle:
                for _i in range(size >> 20):
                    handle.write(block)
            files.append(dict(path=os.path.basename(path), size=os.path.getsize(path)))
        total = sum(item["size"] for item in files)
        for item in files:  # into the page cache
            snap.digest_of(os.path.join(base, item["path"]), "sha256", item["size"])
        print("machine: %d CPU(s), Python %s; %d file(s) of %.1f GiB from the page cache, best of %d"
              % (os.cpu_count() or 1, sys.version.split()[0], len(files), opts.gib, opts.runs))
        rates = {}
        for kind in ("sha256", "git-sha1"):
            best = None
            for _run in range(opts.runs):
                start = time.monotonic()
                snap.digest_of(os.path.join(base, files[0]["path"]), kind, files[0]["size"])
                seconds = time.monotonic() - start
                best = seconds if best is None else min(best, seconds)
            rates[(kind, 1)] = files[0]["size"] / best
            listing = [dict(item, **({"sha256": "0" * 64} if kind == "sha256" else {"git_sha1": "0" * 40}))
                       for item in files]
            best = None
            for _run in range(opts.runs):
                start = time.monotonic()
                found = snap.verify_digests(base, listing, workers=workers)
                seconds = time.monotonic() - start
                assert found["hashed_bytes"] == total
                best = seconds if best is None else min(best, seconds)
            rates[(kind, workers)] = total / best
        for (kind, count), rate in sorted(rates.items()):
            print("  %-8s %d worker(s): %6.2f GB/s   540 GB: %5.0f s (%.1f min)" % (
                kind, count, rate / 1e9, SNAPSHOT_BYTES / rate, SNAPSHOT_BYTES / rate / 60))
        print("  (the shards are LFS files: a snapshot is almost all sha256; a disk slower than these rates is the "
              "limit instead)")


if __name__ == "__main__":
    main()
