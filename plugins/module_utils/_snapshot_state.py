# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What one fleet.vllm.hf_snapshot run finds and changes in the snapshot on disk, beside the
functions of _snapshot: the download lock (and taking over a download left running), the
leftovers it removes, the files it moves out of the snapshot because their content differs from
the hub's listing, the digests it checks (with the verified record, and while a download runs),
and the free space it needs. Standard library only.

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time

from ansible_collections.fleet.vllm.plugins.module_utils import _snapshot as snap
from ansible_collections.fleet.vllm.plugins.module_utils._snapshot_run import POLL_SECONDS, Failure

# How often a run waiting for a running download of the same commit tries the lock again.
LOCK_POLL_SECONDS = 2.0
# Files hashed at once (hashlib releases the GIL: two cores hash two files at twice the speed).
HASH_WORKERS = max(1, min(4, os.cpu_count() or 1))
# Where files whose content differs from the hub's listing are moved (never served, never copied to a peer).
REJECTED_DIR = ".fleet-vllm-rejected"


def bad_files(directory, state):
    """Files to delete before (re)downloading: wrong size, with huggingface_hub's metadata (which would otherwise
    make it keep them); of files whose content differs from the listing, the metadata only (reject() moves them)."""
    result = []
    for item in state["wrong_size"]:
        result.append(os.path.join(directory, item["path"]))
        result.append(snap.hf_metadata_path(directory, item["path"]))
    for path in state["wrong_hash"]:
        result.append(snap.hf_metadata_path(directory, path))
    return result


class SnapshotState(object):
    """The snapshot directories of a SnapshotRun (under its dest). ``arrived``: the files hash_arrivals() matched
    while a download ran (path -> {key, digest})."""

    def __init__(self, run):
        self.run = run
        # Files hashed while the download ran (hash_arrivals).
        self.arrived = {}

    def make_dirs(self, directory):
        """dest and the snapshot directory, mode 0755 whatever the umask."""
        try:
            for path in (self.run.dest, directory):
                if not os.path.isdir(path):
                    os.makedirs(path, snap.DIR_MODE)
                    os.chmod(path, snap.DIR_MODE)
        except OSError as exc:
            raise Failure("cannot create %s: %s; check %s" % (directory, exc.strerror, self.run.name("dest")))

    def lock(self, commit):
        """The download lock of this commit on this host. When a download holds it - one that an interrupted run left
        running in the background (a Ctrl-C on the controller, a failed play) - this run takes it over: it waits for
        that download to end (its progress record is kept and goes on being written), then finishes what is left."""
        path = os.path.join(self.run.dest, ".%s.lock" % commit)
        handle = open(path, "a+")
        started = time.time()
        holder = None
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except (IOError, OSError) as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if holder is None:
                handle.seek(0)
                holder = handle.read().strip() or "another process"
                self.run.module.warn("a download of %s at %s is already running on this host (%s holds %s), left by an "
                                     "earlier run: taking it over - waiting for it to end, then finishing what it left"
                                     % (self.run.params["repo_id"], commit, holder, path))
            time.sleep(LOCK_POLL_SECONDS)
        if holder is not None:
            self.run.result["took_over"] = dict(holder=holder, waited_seconds=int(time.time() - started))
        handle.seek(0)
        handle.truncate()
        handle.write("pid %d\n" % os.getpid())
        handle.flush()
        return handle

    @staticmethod
    def remove(paths):
        removed = []
        for path in paths:
            try:
                os.unlink(path)
                removed.append(path)
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    raise Failure("cannot remove %s: %s" % (path, exc.strerror))
        return removed

    def reject(self, commit, directory, paths):
        """Moves files whose content differs from the hub's listing out of the snapshot, into
        O(dest)/.fleet-vllm-rejected/<commit>/ (mode 0700: root only), so that they are neither served nor copied to a
        peer, and are kept for a look. Returns where each went."""
        moved = []
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        for rel in paths:
            source = os.path.join(directory, rel)
            target = os.path.join(self.run.dest, REJECTED_DIR, commit, "%s.%s" % (rel, stamp))
            try:
                parent = os.path.dirname(target)
                if not os.path.isdir(parent):
                    os.makedirs(parent, 0o700)
                    os.chmod(os.path.join(self.run.dest, REJECTED_DIR), 0o700)
                os.chmod(source, 0o600)
                os.rename(source, target)
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    continue
                raise Failure("cannot move %s (its content differs from the hub's listing) out of the snapshot: %s; "
                              "remove it by hand" % (source, exc.strerror))
            moved.append(target)
        self.run.result.setdefault("rejected", []).extend(moved)
        return moved

    def quarantine(self, commit, directory, entries, files):
        """Moves what the listing does not name (check()'s ``unlisted``: unlisted files, links, fifos...) out of the
        snapshot, keeping their relative paths, into O(dest)/.fleet-vllm-rejected/<commit>/unlisted-<time>-<pid>/
        (next to the snapshot, root only): never served, never copied to a peer, never deleted. A link is moved as a
        link. Directories left empty are removed, unless a listed file goes in them. Records each entry, with where it
        went, in the result's ``unlisted``, and returns the entries."""
        stamp = "unlisted-%s-%d" % (time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()), os.getpid())
        root = os.path.join(self.run.dest, REJECTED_DIR, commit, stamp)
        keep = set()
        for item in files:
            parent = os.path.dirname(item["path"])
            while parent:
                keep.add(parent)
                parent = os.path.dirname(parent)
        moved = []
        for entry in entries:
            source = os.path.join(directory, entry["path"])
            target = os.path.join(root, entry["path"])
            try:
                if not os.path.isdir(os.path.dirname(target)):
                    os.makedirs(os.path.dirname(target), 0o700)
                    os.chmod(os.path.join(self.run.dest, REJECTED_DIR), 0o700)
                os.rename(source, target)
                if entry["kind"] == "file":
                    os.chmod(target, 0o600)
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    continue
                raise Failure("cannot move %s (it is not in the hub's listing of the commit) out of the snapshot: %s; "
                              "move it away by hand" % (snap.shown(source), exc.strerror))
            moved.append(dict(entry, path=snap.shown(entry["path"]), moved_to=snap.shown(target)))
            parent = os.path.dirname(entry["path"])
            while parent and parent not in keep:
                try:
                    os.rmdir(os.path.join(directory, parent))
                except OSError:
                    break
                parent = os.path.dirname(parent)
        self.run.result.setdefault("unlisted", []).extend(moved)
        self.run.result["changed"] = True
        if moved:
            self.run.module.warn("%s at %s: %d file(s) not in the hub's listing of the commit were in the snapshot and "
                                 "were moved out of it, never served: %s, into %s" % (
                                     self.run.params["repo_id"], commit, len(moved), snap.describe_unlisted(moved, 20),
                                     root))
        return moved

    def read_record(self, commit, directory):
        params = self.run.params
        record = snap.read_record(params["verified_record"])
        if record.get("repo_id") != params["repo_id"] or record.get("commit") != commit or \
                record.get("directory") != directory:
            return {}
        return record.get("files") or {}

    def verify(self, directory, files, state, trusted, record, hash_files=True, fresh=False):
        """Adds the digest check to snap.check()'s state: wrong_digest / wrong_hash (content differs from the hub's
        listing), unverified (not hashed: a listing without the hub's digests, or hash_files false and no record of
        the file). Files the verified record shows unchanged since they matched are not read again."""
        p = self.run.params
        state.update(wrong_digest=[], unverified=[], verified={}, hashed_bytes=0)
        needed = p["verified_record"] is not None or p["state"] != "queried"
        if not needed:
            return state
        if not trusted:
            state["unverified"] = [item["path"] for item in files if item["path"] not in state["missing"]
                                   and item["path"] not in [bad["path"] for bad in state["wrong_size"]]]
        else:
            if hash_files:
                def progress(done):
                    self.run.write_progress(state="running", message="checking the files against the hub's listing: %s "
                                            "hashed" % snap.human_bytes(done))
                # deep: every file is read once in this run, not once more after a download (fresh: hashed in this run).
                found = snap.verify_digests(directory, files, record, deep=p["deep"] and not fresh, workers=HASH_WORKERS,
                                            progress=progress)
            else:
                # A query reads no byte: what the record shows unchanged is verified, the rest is not known yet.
                found = dict(verified=snap.recorded(directory, files, record), wrong_digest=[], hashed_bytes=0)
                sizes_ok = set(item["path"] for item in files) - set(state["missing"]) - set(
                    bad["path"] for bad in state["wrong_size"])
                state["unverified"] = sorted(sizes_ok - set(found["verified"]))
            state["verified"] = found["verified"]
            state["wrong_digest"] = found["wrong_digest"]
            state["hashed_bytes"] = found["hashed_bytes"]
            sizes = dict((item["path"], item["size"]) for item in files)
            for bad in found["wrong_digest"]:
                state["wrong_hash"].append(bad["path"])
                state["missing_bytes"] += sizes[bad["path"]]
                state["present_bytes"] -= sizes[bad["path"]]
        state["complete"] = state["complete"] and not (state["wrong_hash"] or state["unverified"])
        return state

    def save_record(self, commit, directory, state, record):
        params = self.run.params
        path = params["verified_record"]
        if not path or self.run.module.check_mode or state["verified"] == record:
            return
        try:
            snap.write_record(path, params["repo_id"], commit, directory, state["verified"])
        except (IOError, OSError) as exc:
            raise Failure("cannot write the verified record %s: %s; check %s" % (path, exc.strerror or exc,
                                                                                 self.run.name("verified_record")))

    def check_space(self, commit, directory, state):
        p = self.run.params
        needed = state["missing_bytes"]
        reclaim = 0
        for path in snap.incomplete_files(directory) if os.path.isdir(directory) else []:
            try:
                reclaim += os.stat(path).st_size
            except OSError:
                pass
        for item in state["wrong_size"]:
            reclaim += item["size"] or 0
        required = needed + needed * p["disk_margin_percent"] // 100
        free, where = snap.free_bytes(directory)
        if free + reclaim < required:
            raise Failure("not enough disk space for %s at %s: %s missing + %d%% margin = %s needed, %s free on %s (%s). "
                          "Free space there or point %s at a larger filesystem; nothing was downloaded"
                          % (p["repo_id"], commit, snap.human_bytes(needed), p["disk_margin_percent"],
                             snap.human_bytes(required), snap.human_bytes(free + reclaim), where, directory,
                             self.run.name("dest")))

    def disk_full(self, commit, directory, files, removed, explained):
        """The disk filled up during a download (``explained``: the child's error, explained): removes the partial and
        wrong-sized files (the complete ones are kept), then fails saying how much to free."""
        p = self.run.params
        removed += self.remove(snap.incomplete_files(directory))
        after = snap.check(directory, files)
        removed += self.remove(bad_files(directory, dict(after, wrong_hash=[])))
        removed += self.remove(snap.partial_files(directory))
        self.run.result["removed"] = removed
        free, where = snap.free_bytes(directory)
        short = after["missing_bytes"] + after["missing_bytes"] * p["disk_margin_percent"] // 100 - free
        message = ("the disk filled up while fetching %s at %s into %s: %s. %s still missing, %s free on %s. The "
                   "partial and wrong-sized files were removed (%s); the complete files are kept. Free %s there "
                   "(or point %s at a larger filesystem) and re-run: it fetches only what is missing"
                   % (p["repo_id"], commit, directory, explained,
                      snap.human_bytes(after["missing_bytes"]), snap.human_bytes(free), where,
                      ", ".join(removed[:6]) or "none",
                      "at least %s" % snap.human_bytes(short) if short > 0 else "space (something else filled it)",
                      self.run.name("dest")))
        self.run.write_progress(state="failed", message=message)
        raise Failure(message)

    def hash_arrivals(self, directory, files, stop):
        """While a download or copy runs, hashes the files that have arrived whole - at their final path with the
        listing's size (huggingface_hub and rsync write elsewhere and rename) - so that little is left to hash when it
        ends. Matches go into self.arrived (path -> {key, digest}); verify() reads a file again only when its key
        (size, mtime, inode, device) changed since, and reads every mismatch again itself."""
        pending = [item for item in files if snap.expected_digest(item) and item["path"] not in self.arrived]
        while pending and not stop.is_set():
            progressed = False
            for item in list(pending):
                if stop.is_set():
                    return
                before = snap.whole_file(directory, item)
                if before is None:
                    continue
                expected = snap.expected_digest(item)
                try:
                    actual, after = snap.hash_listed(os.path.join(directory, item["path"]), expected, item["size"])
                except (IOError, OSError):
                    continue
                if actual == expected and after == snap.file_key(before):
                    self.arrived[item["path"]] = dict(key=after, digest=expected)
                pending.remove(item)
                progressed = True
            if not progressed:
                stop.wait(POLL_SECONDS)
