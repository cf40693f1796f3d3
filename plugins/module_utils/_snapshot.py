# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A model snapshot on disk: its manifest, its completeness, its leftovers.

Used by fleet.vllm.hf_snapshot (and its tests and benchmark). Standard library only: this runs
with the host's Python, where huggingface_hub need not be installed.

A snapshot directory is ``<dest>/<commit sha>/`` as huggingface_hub's ``snapshot_download(
local_dir=...)`` fills it, plus the manifest ``.fleet-vllm-snapshot.json`` written once the
snapshot was found complete: the repository, the commit, and every file of the revision's listing
with its size (and the sha256 of LFS files). Completeness is decided from sizes and the
safetensors index, never from huggingface_hub's own metadata (which a truncated file with an old
mtime satisfies): one ``stat`` per file, whatever the files weigh.

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import time

MANIFEST_NAME = ".fleet-vllm-snapshot.json"
MANIFEST_VERSION = 1
LOCK_NAME = ".fleet-vllm-snapshot.lock"
HF_DIR = os.path.join(".cache", "huggingface")
INDEX_SUFFIX = ".safetensors.index.json"
SHA_RE = re.compile(r"^[0-9a-f]{40}$")
HASH_CHUNK = 8 * 1024 * 1024


class SnapshotError(Exception):
    """A problem with the snapshot on disk that the caller reports as is."""


def is_commit_sha(revision):
    return bool(revision) and SHA_RE.match(revision) is not None


def snapshot_dir(dest, commit):
    return os.path.join(dest, commit)


def manifest_path(directory):
    return os.path.join(directory, MANIFEST_NAME)


def is_private_path(path):
    """Files of the listing that are ours or huggingface_hub's bookkeeping, never model files."""
    return path == MANIFEST_NAME or path == LOCK_NAME or path.startswith(".cache/")


def normalise_files(files):
    """Listing entries -> sorted [{path, size, sha256?}] with the types checked."""
    result = []
    for entry in files:
        path = entry.get("path")
        size = entry.get("size")
        if not isinstance(path, str) or not path or path.startswith("/") or ".." in path.split("/"):
            raise SnapshotError("the listing has a file with an unsafe or empty path: %r" % (path,))
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise SnapshotError("the listing gives %s no valid size (%r)" % (path, size))
        item = dict(path=path, size=size)
        sha256 = entry.get("sha256")
        if sha256:
            item["sha256"] = sha256
        result.append(item)
    return sorted(result, key=lambda item: item["path"])


def make_manifest(repo_id, commit, files, revision=None, allow_patterns=None, ignore_patterns=None):
    return dict(
        version=MANIFEST_VERSION,
        repo_id=repo_id,
        commit=commit,
        revision=revision or commit,
        allow_patterns=allow_patterns or None,
        ignore_patterns=ignore_patterns or None,
        files=normalise_files(files),
        total_bytes=sum(item["size"] for item in files),
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )


def read_manifest(directory):
    """The manifest of a snapshot directory, or None when there is none. Raises SnapshotError when it is
    unreadable or not ours."""
    path = manifest_path(directory)
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read().decode("utf-8"))
    except (IOError, OSError) as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise SnapshotError("cannot read the snapshot manifest %s: %s" % (path, exc.strerror or exc))
    except ValueError as exc:
        raise SnapshotError("the snapshot manifest %s is not valid JSON (%s): remove it, the next run "
                            "lists the revision again and rewrites it" % (path, exc))
    if not isinstance(data, dict) or data.get("version") != MANIFEST_VERSION or not isinstance(data.get("files"), list):
        raise SnapshotError("%s is not a fleet.vllm snapshot manifest (version %d): remove it, the next run "
                            "lists the revision again and rewrites it" % (path, MANIFEST_VERSION))
    data["files"] = normalise_files(data["files"])
    return data


def write_manifest(directory, manifest):
    """Atomically (temporary file in the same directory, then rename)."""
    path = manifest_path(directory)
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(tmp, 0o644)
    os.rename(tmp, path)


def _index_shards(directory, index_name, problems):
    path = os.path.join(directory, index_name)
    try:
        with open(path, "rb") as handle:
            index = json.loads(handle.read().decode("utf-8"))
    except (IOError, OSError) as exc:
        problems.append("%s: cannot read it (%s)" % (index_name, exc.strerror or exc))
        return set()
    except ValueError as exc:
        problems.append("%s: not valid JSON (%s)" % (index_name, exc))
        return set()
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        problems.append("%s: has no weight_map" % index_name)
        return set()
    base = os.path.dirname(index_name)
    return set(os.path.join(base, shard) if base else shard for shard in weight_map.values() if isinstance(shard, str))


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(HASH_CHUNK)
            if not chunk:
                break
            digest.update(chunk)
    return digest.hexdigest()


def check(directory, files, deep=False):
    """Compare a directory with the revision's files.

    Returns a dict: ``complete`` (bool), ``missing`` (paths absent), ``wrong_size`` ([{path, size,
    expected}]), ``wrong_hash`` (paths, deep only), ``index_problems`` (shards the safetensors
    index names that are not in the listing or not on disk, unreadable index), ``present_bytes``
    (bytes of the listed files that are on disk with the right size), ``missing_bytes``, ``total_bytes``,
    ``hashed_bytes``.
    """
    files = normalise_files(files)
    listed = set(item["path"] for item in files)
    missing, wrong_size, wrong_hash, index_problems = [], [], [], []
    present_bytes = missing_bytes = hashed_bytes = 0
    good = set()
    for item in files:
        full = os.path.join(directory, item["path"])
        try:
            st = os.stat(full)
        except OSError:
            missing.append(item["path"])
            missing_bytes += item["size"]
            continue
        if not os.path.isfile(full):
            wrong_size.append(dict(path=item["path"], size=None, expected=item["size"]))
            missing_bytes += item["size"]
            continue
        if st.st_size != item["size"]:
            wrong_size.append(dict(path=item["path"], size=st.st_size, expected=item["size"]))
            missing_bytes += item["size"]
            continue
        if deep and item.get("sha256"):
            hashed_bytes += item["size"]
            if sha256_of(full) != item["sha256"]:
                wrong_hash.append(item["path"])
                missing_bytes += item["size"]
                continue
        present_bytes += item["size"]
        good.add(item["path"])
    for index_name in sorted(path for path in listed if path.endswith(INDEX_SUFFIX)):
        if index_name not in good:
            continue
        for shard in sorted(_index_shards(directory, index_name, index_problems)):
            if shard not in listed:
                index_problems.append("%s names %s, which the revision does not have" % (index_name, shard))
            elif shard not in good:
                index_problems.append("%s names %s, which is not complete on disk" % (index_name, shard))
    return dict(
        complete=not (missing or wrong_size or wrong_hash or index_problems),
        missing=missing,
        wrong_size=wrong_size,
        wrong_hash=wrong_hash,
        index_problems=index_problems,
        present_bytes=present_bytes,
        missing_bytes=missing_bytes,
        total_bytes=sum(item["size"] for item in files),
        hashed_bytes=hashed_bytes,
    )


def describe_problems(result, limit=5):
    """One line naming what is wrong with a snapshot (check()'s result)."""
    parts = []
    if result["missing"]:
        parts.append("%d file(s) missing (%s%s)" % (len(result["missing"]), ", ".join(result["missing"][:limit]),
                                                    ", ..." if len(result["missing"]) > limit else ""))
    if result["wrong_size"]:
        parts.append("%d file(s) with the wrong size (%s)" % (len(result["wrong_size"]), ", ".join(
            "%s: %s bytes, expected %d" % (item["path"], "not a file" if item["size"] is None else item["size"],
                                           item["expected"]) for item in result["wrong_size"][:limit])))
    if result["wrong_hash"]:
        parts.append("%d file(s) whose sha256 differs from the listing (%s)" % (
            len(result["wrong_hash"]), ", ".join(result["wrong_hash"][:limit])))
    parts.extend(result["index_problems"][:limit])
    return "; ".join(parts)


def incomplete_files(directory):
    """huggingface_hub's partial downloads (``.cache/huggingface/download/**/*.incomplete``)."""
    root = os.path.join(directory, HF_DIR, "download")
    found = []
    for base, _dirs, names in os.walk(root):
        for name in names:
            if name.endswith(".incomplete"):
                found.append(os.path.join(base, name))
    return sorted(found)


def hf_metadata_path(directory, path):
    return os.path.join(directory, HF_DIR, "download", path + ".metadata")


def bytes_on_disk(directory):
    """Bytes of every file under the snapshot directory but the manifest: the final files, huggingface_hub's
    partial downloads and rsync's temporary files alike. What the progress record and the stall watchdog
    watch: it grows while any byte arrives. One stat per file."""
    total = 0
    for base, _dirs, names in os.walk(directory):
        for name in names:
            if name == MANIFEST_NAME and base == directory:
                continue
            try:
                total += os.lstat(os.path.join(base, name)).st_size
            except OSError:
                pass
    return total


def free_bytes(path):
    """Free bytes for an unprivileged writer at path, or at its nearest existing parent."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    st = os.statvfs(probe)
    return st.f_bavail * st.f_frsize, probe


def human_bytes(value):
    value = float(value)
    for unit in ("B", "KB", "MB", "GB"):
        if abs(value) < 1000:
            return ("%d %s" % (value, unit)) if unit == "B" else ("%.1f %s" % (value, unit))
        value /= 1000.0
    return "%.1f TB" % value


def human_seconds(value):
    value = int(max(0, value))
    if value >= 3600:
        return "%dh%02dm" % (value // 3600, value % 3600 // 60)
    if value >= 60:
        return "%dm%02ds" % (value // 60, value % 60)
    return "%ds" % value


def progress_line(record):
    """'12.0 GB / 540.0 GB (2%), 95.0 MB/s, ETA 1h32m' from a progress record."""
    done, total = record.get("bytes_done", 0), record.get("bytes_total", 0)
    percent = (100.0 * done / total) if total else 100.0
    line = "%s / %s (%d%%)" % (human_bytes(done), human_bytes(total), percent)
    rate = record.get("rate_bytes_per_second")
    if rate:
        line += ", %s/s" % human_bytes(rate)
        if total > done:
            line += ", ETA %s" % human_seconds((total - done) / rate)
    return line


# ---- rsync answers from a peer -----------------------------------------------------------------
# What an rsync client's exit code and messages mean for a copy from a peer (texts from rsync's
# clientserver.c and main.c, 3.2.x to 3.5.0; see docs/peer-copy.md):
#   busy:        "@ERROR: max connections (N) reached -- try again later" (the daemon's limit, exit 5),
#                "did not see server greeting" (exit 5: the socket accepted and closed at once, as
#                systemd does past MaxConnections= / MaxConnectionsPerSource=);
#   refused:     "@ERROR: Unknown module" (a module with `list = no` answers so to an address outside
#                its `hosts allow`), "@ERROR: access denied";
#   unreachable: exit 10 (socket I/O: refused, no route, unknown name) or 35 (--contimeout);
#   absent:      the file asked for does not exist there (exit 23, "No such file or directory");
#   other:       anything else (an interrupted transfer...).
RSYNC_KINDS = ("busy", "refused", "unreachable", "absent", "other")


def rsync_kind(rc, stderr):
    text = stderr or ""
    if "max connections" in text and "reached" in text:
        return "busy"
    if rc == 5 and "did not see server greeting" in text:
        return "busy"
    if "@ERROR: Unknown module" in text or "@ERROR: access denied" in text:
        return "refused"
    if rc in (10, 35):
        return "unreachable"
    if rc == 23 and "No such file or directory" in text:
        return "absent"
    return "other"
