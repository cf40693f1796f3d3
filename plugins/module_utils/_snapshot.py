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
import stat
import threading
import time

MANIFEST_NAME = ".fleet-vllm-snapshot.json"
MANIFEST_VERSION = 1
LOCK_NAME = ".fleet-vllm-snapshot.lock"
HF_DIR = os.path.join(".cache", "huggingface")
INDEX_SUFFIX = ".safetensors.index.json"
SHA_RE = re.compile(r"^[0-9a-f]{40}$")
HASH_CHUNK = 8 * 1024 * 1024
SHA1_RE = re.compile(r"^[0-9a-f]{40}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
# Where the listing of a manifest came from: only a manifest written from the hub's (or the site mirror's)
# own listing of the commit is trusted for the files' digests; one a peer sent is not.
DIGESTS_FROM = "hub"
RECORD_VERSION = 1
# Modes the snapshot is given whatever the umask (a CIS umask of 027 would leave it unreadable to the service).
DIR_MODE = 0o755
FILE_MODE = 0o644


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


def is_bookkeeping(rel):
    """An entry of a snapshot directory that is this collection's or huggingface_hub's bookkeeping, never a model file
    and never served or copied to a peer: the manifest, and ``.cache/`` (huggingface_hub's metadata and partial
    downloads, rsync's partial files). Everything else must be in the listing."""
    return rel in (MANIFEST_NAME, LOCK_NAME, ".cache") or rel.startswith(".cache/")


def shown(rel):
    """A path as a message or a result shows it: a name that is not UTF-8 (os.walk's surrogate escapes) with U+FFFD."""
    return rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def scan(directory):
    """Every entry under directory, by lstat, never following a link, the bookkeeping left out (is_bookkeeping).

    Returns (regular, other, directories): ``regular`` {relative path: size} of the regular files reached through real
    directories only; ``other`` {relative path: kind} of what is neither a regular file nor a real directory ('link' -
    to a directory too -, 'fifo', 'socket', 'device'); ``directories`` the set of the real directories. A file below a
    link to a directory is in none: it is not in the snapshot."""
    regular, other, directories = {}, {}, set()
    for base, dirs, names in os.walk(directory):
        prefix = os.path.relpath(base, directory)
        prefix = "" if prefix == "." else prefix + "/"
        descend = []
        for name in dirs + names:
            rel = prefix + name
            if is_bookkeeping(rel):
                continue
            try:
                st = os.lstat(os.path.join(base, name))
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                descend.append(name)
                directories.add(rel)
            elif stat.S_ISREG(st.st_mode):
                regular[rel] = st.st_size
            else:
                other[rel] = "link" if stat.S_ISLNK(st.st_mode) else "fifo" if stat.S_ISFIFO(st.st_mode) else \
                    "socket" if stat.S_ISSOCK(st.st_mode) else "device"
        dirs[:] = sorted(descend)
    return regular, other, directories


def unlisted_entries(directory, files, found=None):
    """What a snapshot directory holds that its listing does not name as a regular file: unlisted files, and links,
    fifos, sockets or devices whatever their name ([{path, size, kind}], sorted). ``found``: scan()'s result."""
    listed = set(item["path"] for item in files)
    regular, other = (found if found is not None else scan(directory))[:2]
    entries = [dict(path=rel, size=size, kind="file") for rel, size in regular.items() if rel not in listed]
    entries += [dict(path=rel, size=None, kind=kind) for rel, kind in other.items()]
    return sorted(entries, key=lambda entry: entry["path"])


def describe_unlisted(entries, limit=5):
    """'processor_config.json (412 bytes), evil.py (a link)' for unlisted_entries()."""
    return ", ".join("%s (%s)" % (shown(entry["path"]), "%d bytes" % entry["size"] if entry["kind"] == "file"
                                  else "a %s" % entry["kind"]) for entry in entries[:limit]) + (
        ", ..." if len(entries) > limit else "")


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
            if not isinstance(sha256, str) or not SHA256_RE.match(sha256):
                raise SnapshotError("the listing gives %s an invalid sha256 (%r)" % (path, sha256))
            item["sha256"] = sha256
        git_sha1 = entry.get("git_sha1")
        if git_sha1 and not sha256:
            if not isinstance(git_sha1, str) or not SHA1_RE.match(git_sha1):
                raise SnapshotError("the listing gives %s an invalid git blob sha1 (%r)" % (path, git_sha1))
            item["git_sha1"] = git_sha1
        result.append(item)
    return sorted(result, key=lambda item: item["path"])


def make_manifest(repo_id, commit, files, revision=None, allow_patterns=None, ignore_patterns=None):
    """Written only from the hub's (or the mirror's) listing of the commit, never from a peer's manifest."""
    return dict(
        digests=DIGESTS_FROM,
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
    os.chmod(tmp, FILE_MODE)
    os.rename(tmp, path)


def manifest_trusted(manifest):
    """Whether a manifest's digests come from the hub's listing (this collection wrote it from one)."""
    return bool(manifest) and manifest.get("digests") == DIGESTS_FROM and all(
        item.get("sha256") or item.get("git_sha1") for item in manifest.get("files") or [])


# ---- digests: what the hub's listing says of each file ----------------------------------------
# The Hub's tree listing gives every file its git blob id (``oid``: sha1 of ``blob <size>\0<content>``),
# and LFS files also ``lfs.oid``, the sha256 of their content (huggingface_hub: RepoFile.blob_id,
# RepoFile.lfs.sha256). An LFS file's blob id is that of its pointer, not of its content: LFS files are
# checked by sha256, the others by their git blob sha1.

def expected_digest(item):
    """'sha256:<hex>' or 'git-sha1:<hex>' for a listing entry, or None when the listing gives neither."""
    if item.get("sha256"):
        return "sha256:" + item["sha256"]
    if item.get("git_sha1"):
        return "git-sha1:" + item["git_sha1"]
    return None


def digest_of(path, kind, size=None):
    """The digest of a file as expected_digest() names it ('sha256' or 'git-sha1')."""
    if kind == "sha256":
        digest = hashlib.sha256()
    else:
        digest = hashlib.sha1()
        if size is None:
            size = os.stat(path).st_size
        digest.update(b"blob %d\0" % size)
    buffer = bytearray(HASH_CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while True:
            count = handle.readinto(buffer)
            if not count:
                break
            digest.update(view[:count])
    return "%s:%s" % (kind, digest.hexdigest())


def file_key(st):
    """What says a file has not changed since it was hashed: size, mtime (ns), inode, device."""
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev]


def read_record(path):
    """The verified record (path -> {key, digest}) or {} when there is none or it is not ours."""
    if not path:
        return {}
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read().decode("utf-8"))
    except (IOError, OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != RECORD_VERSION or not isinstance(data.get("files"), dict):
        return {}
    return data


def write_record(path, repo_id, commit, directory, files):
    """Atomically, 0644: every file verified, with its key and digest."""
    data = dict(version=RECORD_VERSION, repo_id=repo_id, commit=commit, directory=directory, files=files,
                written=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    parent = os.path.dirname(path)
    if parent and not os.path.isdir(parent):
        os.makedirs(parent, DIR_MODE)
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
        handle.write("\n")
    os.chmod(tmp, FILE_MODE)
    os.rename(tmp, path)


def whole_file(directory, item):
    """The stat of a listed file that is on disk whole (a regular file of the listed size, not a link), else None."""
    try:
        st = os.lstat(os.path.join(directory, item["path"]))
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) and st.st_size == item["size"] else None


def hash_listed(full, expected, size):
    """A file's digest of the kind ``expected`` names, and its key once read (whether it changed while it was
    read is the caller's comparison). Raises IOError/OSError."""
    actual = digest_of(full, expected.split(":", 1)[0], size)
    return actual, file_key(os.stat(full))


def verify_digests(directory, files, record_files=None, deep=False, workers=2, progress=None):
    """Hash the listed files that are on disk with their size, unless record_files (a verified record's
    ``files``) shows the same file (size, mtime, inode, device) was hashed to the expected digest before.

    Returns a dict: ``verified`` (path -> {key, digest}, the files that match, for the record),
    ``wrong_digest`` ([{path, expected, actual}]), ``unverifiable`` (paths the listing gives no digest),
    ``hashed_bytes``, ``hashed_files``. ``workers`` files are hashed at once (hashlib releases the GIL).
    progress(hashed_bytes) is called after each file."""
    record_files = record_files or {}
    verified, wrong, unverifiable, todo = {}, [], [], []
    for item in normalise_files(files):
        full = os.path.join(directory, item["path"])
        st = whole_file(directory, item)
        if st is None:
            continue
        expected = expected_digest(item)
        if expected is None:
            unverifiable.append(item["path"])
            continue
        key = file_key(st)
        known = record_files.get(item["path"])
        if not deep and isinstance(known, dict) and known.get("key") == key and known.get("digest") == expected:
            verified[item["path"]] = dict(key=key, digest=expected)
            continue
        todo.append((item, full, expected, key))
    lock = threading.Lock()
    done = dict(bytes=0, files=0)
    errors = []

    def work(queue):
        while True:
            with lock:
                if not queue:
                    return
                item, full, expected, key = queue.pop(0)
            try:
                actual, after = hash_listed(full, expected, item["size"])
            except (IOError, OSError) as exc:
                with lock:
                    errors.append("%s: %s" % (full, exc.strerror or exc))
                continue
            with lock:
                done["bytes"] += item["size"]
                done["files"] += 1
                if actual == expected and after == key:
                    verified[item["path"]] = dict(key=key, digest=expected)
                elif actual != expected:
                    wrong.append(dict(path=item["path"], expected=expected, actual=actual))
                hashed = done["bytes"]
            if progress is not None:
                progress(hashed)

    # Largest first: the parallel hashes end together.
    queue = sorted(todo, key=lambda entry: -entry[0]["size"])
    threads = [threading.Thread(target=work, args=(queue,)) for _i in range(max(1, min(workers, len(queue))))]
    for thread in threads:
        thread.daemon = True
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise SnapshotError("cannot read %s" % "; ".join(errors[:3]))
    return dict(verified=verified, wrong_digest=sorted(wrong, key=lambda entry: entry["path"]),
                unverifiable=unverifiable, hashed_bytes=done["bytes"], hashed_files=done["files"])


def recorded(directory, files, record_files):
    """Without reading a byte: the listed files the verified record shows unchanged (size, mtime, inode, device)
    since they matched the digest the listing gives them now (path -> {key, digest})."""
    verified = {}
    for item in normalise_files(files):
        known = (record_files or {}).get(item["path"])
        expected = expected_digest(item)
        if not isinstance(known, dict) or expected is None or known.get("digest") != expected:
            continue
        st = whole_file(directory, item)
        if st is not None and file_key(st) == known.get("key"):
            verified[item["path"]] = dict(key=file_key(st), digest=expected)
    return verified


def fix_modes(directory, files, check_mode=False):
    """Give the snapshot directory, the directories of its files and its files the modes the service user needs
    (0755, 0644) whatever the umask they were written with. Returns the paths changed (or to change)."""
    changed = []
    dirs = set([directory])
    for item in files:
        parent = os.path.dirname(item["path"])
        while parent:
            dirs.add(os.path.join(directory, parent))
            parent = os.path.dirname(parent)
    targets = [(path, DIR_MODE) for path in sorted(dirs)] + [
        (os.path.join(directory, item["path"]), FILE_MODE) for item in files]
    for path, mode in targets:
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode) or stat.S_IMODE(st.st_mode) == mode:
            continue
        if not check_mode:
            os.chmod(path, mode)
        changed.append(path)
    return changed


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
    """Compare a directory with the revision's files: sizes and the safetensors index (digests:
    verify_digests(), which the caller merges into ``wrong_hash``; ``deep`` is kept for callers).

    Returns a dict: ``complete`` (bool), ``missing`` (paths absent), ``wrong_size`` ([{path, size,
    expected}]), ``wrong_hash`` (paths, deep only), ``index_problems`` (shards the safetensors
    index names that are not in the listing or not on disk, unreadable index), ``present_bytes``
    (bytes of the listed files that are on disk with the right size), ``missing_bytes``, ``total_bytes``,
    ``hashed_bytes``, ``unlisted`` (unlisted_entries(): what the listing does not name as a regular file; the
    snapshot is not complete while there is any). A listed path that is a link, or below a link, is
    missing (and the link unlisted).
    """
    files = normalise_files(files)
    listed = set(item["path"] for item in files)
    found = scan(directory)
    regular, directories = found[0], found[2]
    missing, wrong_size, wrong_hash, index_problems = [], [], [], []
    present_bytes = missing_bytes = hashed_bytes = 0
    good = set()
    for item in files:
        size = regular.get(item["path"])
        if size is None and item["path"] in directories:
            wrong_size.append(dict(path=item["path"], size=None, expected=item["size"]))
            missing_bytes += item["size"]
            continue
        if size is None:
            missing.append(item["path"])
            missing_bytes += item["size"]
            continue
        if size != item["size"]:
            wrong_size.append(dict(path=item["path"], size=size, expected=item["size"]))
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
    unlisted = unlisted_entries(directory, files, found)
    return dict(
        complete=not (missing or wrong_size or wrong_hash or index_problems or unlisted),
        unlisted=unlisted,
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
    if result.get("wrong_digest"):
        parts.append("%d file(s) whose content differs from the hub's listing (%s)" % (
            len(result["wrong_digest"]), ", ".join("%s: %s, the listing says %s" % (
                item["path"], item["actual"], item["expected"]) for item in result["wrong_digest"][:limit])))
    elif result["wrong_hash"]:
        parts.append("%d file(s) whose content differs from the listing (%s)" % (
            len(result["wrong_hash"]), ", ".join(result["wrong_hash"][:limit])))
    if result.get("unverified"):
        parts.append("%d file(s) not verified against the hub's listing yet (%s%s)" % (
            len(result["unverified"]), ", ".join(result["unverified"][:limit]),
            ", ..." if len(result["unverified"]) > limit else ""))
    parts.extend(result["index_problems"][:limit])
    if result.get("unlisted"):
        parts.append("%d file(s) not in the hub's listing of the commit, never served (%s)" % (
            len(result["unlisted"]), describe_unlisted(result["unlisted"], limit)))
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


def partial_files(directory):
    """rsync's partial files of an interrupted copy from a peer (``--partial-dir=.cache/rsync-partial``)."""
    found = []
    for base, _dirs, names in os.walk(os.path.join(directory, ".cache", "rsync-partial")):
        for name in names:
            found.append(os.path.join(base, name))
    return sorted(found)


def is_disk_full(message):
    """Whether a child's error says the filesystem is full (ENOSPC) or the quota is exhausted (EDQUOT)."""
    text = message or ""
    return "No space left on device" in text or "Errno 28" in text or "Disk quota exceeded" in text or "Errno 122" in text


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
# rsync exit codes another attempt cannot fix: usage, protocol/module errors, file selection. Exit 5 is fatal only
# when the peer refused this host (its hosts allow); "max connections reached" is retried (see rsync_kind).
RSYNC_FATAL = {1: "syntax or usage error", 2: "protocol incompatibility", 3: "errors selecting input/output files",
               4: "requested action not supported", 5: "error starting the client-server protocol"}
RSYNC_KIND_TEXT = dict(
    busy="the peer is at its connection limit",
    refused="the peer refused this host: its vllm_weights_peer_networks (rsyncd hosts allow) does not include this "
            "host's address, or it serves no module of that name",
    unreachable="the peer cannot be reached", absent="the peer does not have it", other="transfer interrupted")


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


def rsync_error(rc, stderr, peer):
    """The error of an rsync from ``peer`` that exited with ``rc`` (not 0): its kind, whether another attempt can
    help (fatal), and one line saying what it means, ending with what rsync said."""
    message = " ".join(stderr.split())[-800:] or "(no output)"
    kind = rsync_kind(rc, stderr)
    meaning = RSYNC_KIND_TEXT[kind] if kind != "other" else RSYNC_FATAL.get(rc, RSYNC_KIND_TEXT[kind])
    return dict(type="rsync", status=rc, retry_after=None, kind=kind,
                fatal=kind == "refused" or (rc in RSYNC_FATAL and kind == "other"),
                message="rsync from %s exited with code %s (%s): %s" % (peer, rc, meaning, message))
