# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The copy of a snapshot from a peer host of the fleet, for fleet.vllm.hf_snapshot's O(peer): which
candidate serves (the first whose manifest is there and that has a free slot), waiting for busy
ones and leaving out the others with the reason, and the rsync command lines of the copy. The
file list and digests never come from a peer: its manifest only says that it completed the
snapshot. docs/peer-copy.md describes the protocol. Standard library only.

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

import os
import random
import time

from ansible_collections.fleet.vllm.plugins.module_utils import _snapshot as snap
from ansible_collections.fleet.vllm.plugins.module_utils._snapshot_run import Failure

# Longest wait between two rounds of asking busy peers.
MAX_PEER_DELAY = 60.0
# What a peer answered that is not the transfer failing: the peer will not serve now.
TURNED_AWAY = ("busy", "refused", "unreachable", "absent")


class PeerCopy(object):
    """The candidates of O(peer) for a SnapshotRun, their children run by ``child`` (a ChildTransport)."""

    def __init__(self, run, child):
        self.run = run
        self.child = child
        # Peers: the candidates in order, the one copying now (None: the hub), what each answered, time waited.
        self.candidates = [url.rstrip("/") for url in run.params["peer"] or []]
        self.peer = None
        self.files = None
        self.problems = []
        self.waited = 0.0
        run.result.update(peer_used=None, peer_problems=self.problems)

    def rsync_argv(self, *paths, **options):
        """rsync's command line; options: recursive (default True)."""
        rsync = self.run.module.get_bin_path("rsync")
        if not rsync:
            raise Failure("rsync is not installed on this host; it copies the snapshot from %s (install the rsync package)"
                          % self.run.name("peer"))
        recursive = ["--recursive"] if options.get("recursive", True) else []
        return [rsync] + recursive + ["--times", "--chmod=D0755,F0644", "--partial-dir=.cache/rsync-partial",
                                      "--contimeout=30", "--timeout=%d" % self.run.params["stall_timeout"]] + list(paths)

    def url(self, commit, path="", peer=None):
        return "%s/%s/%s" % (peer or self.peer, commit, path)

    def question(self, commit, directory, files):
        """The child's question for one attempt at copying the snapshot from the serving peer into directory: the files
        of the listing only (``files``, the hub's listing), named one by one (--files-from, NUL-separated), never a
        recursive copy of what the peer has - a peer cannot push a file the listing does not name (what arrives is
        checked again: SnapshotState.quarantine).

        The names are given from the rsync module's root, ``<path in the module>/<commit>/./<file>`` (``/./``: what
        --relative, which --files-from implies, keeps of it): an rsync 3.5.0 daemon answered "file has vanished" to
        every name of a --files-from whose source was a directory below the module's root (docs/peer-copy.md). A
        name never starts with '#' or ';' (rsync's comments) this way: it starts with the path or the commit."""
        root, _sep, below = self.peer.partition("://")[2].partition("/")
        module, _sep, below = below.partition("/")
        prefix = "/".join(part for part in (below.strip("/"), commit) if part) + "/./"
        names = os.path.join(self.run.module.tmpdir, "peer-files")
        with open(names, "wb") as handle:
            for item in files:
                handle.write((prefix + item["path"]).encode("utf-8", "surrogateescape") + b"\0")
        return dict(op="rsync", peer=self.peer, argv=self.rsync_argv(
            "--files-from=%s" % names, "--from0", "rsync://%s/%s/" % (root, module), directory + "/", recursive=False))

    def manifest(self, commit, peer):
        """(files, None) from the peer's manifest (it completed and verified the snapshot), or (None, error)."""
        tmpdir = self.run.module.tmpdir
        target = os.path.join(tmpdir, "peer-%d" % len(os.listdir(tmpdir)))
        os.mkdir(target)
        answer = self.child.run_child(dict(op="rsync", peer=peer, argv=self.rsync_argv(
            self.url(commit, snap.MANIFEST_NAME, peer), target + "/")), "peer-manifest")
        if "error" in answer:
            return None, answer["error"]
        repo_id = self.run.params["repo_id"]
        try:
            manifest = snap.read_manifest(target)
        except snap.SnapshotError as exc:
            return None, dict(kind="refused", message="the peer %s: %s" % (peer, exc))
        if manifest is None or manifest.get("repo_id") != repo_id or manifest.get("commit") != commit:
            return None, dict(kind="refused", message="the peer %s has no manifest of %s at %s" % (peer, repo_id, commit))
        return manifest["files"], None

    def note(self, line):
        if line not in self.problems:
            self.problems.append(line)

    def find(self, commit, last=None):
        """Picks the first candidate that has the complete snapshot and a free slot, in the candidates' order (last
        tried last). Busy candidates are asked again after a backoff, the snapshot's absence too while any candidate is
        busy (a host that finishes its copy serves the next ones); the others are left out. Sets self.peer and
        self.files and returns True, or returns False when no candidate will serve (self.problems says why).
        Fails when busy candidates made it wait more than peer_wait seconds in all."""
        p = self.run.params
        delay = max(float(p["retry_delay"]), 1.0)
        while True:
            order = [url for url in self.candidates if url != last] + [url for url in self.candidates if url == last]
            busy, absent = [], []
            for url in order:
                files, error = self.manifest(commit, url)
                if error is None:
                    self.peer, self.files = url, files
                    return True
                kind = error.get("kind")
                if kind == "busy":
                    busy.append(url)
                elif kind == "absent":
                    absent.append(url)
                else:
                    self.candidates.remove(url)
                self.note("%s: %s" % (url, error["message"] if kind != "absent" else
                                      "no complete snapshot of %s at %s there (no manifest) yet" % (p["repo_id"], commit)))
            if not busy:
                self.candidates = [url for url in self.candidates if url not in absent]
                return False
            if self.waited + delay > p["peer_wait"]:
                raise Failure("every peer that may have %s at %s stayed busy (at its connection limit) for %d s "
                              "(%s): re-run later, raise %s, or let the peers take more copies at once "
                              "(vllm_weights_peer_max_connections). %s" % (
                                  p["repo_id"], commit, int(self.waited), ", ".join(busy), self.run.name("peer_wait"),
                                  " | ".join(self.problems[-4:])))
            # Jittered, so that copiers turned away together do not all come back together.
            wait = delay * random.uniform(0.5, 1.0)
            self.run.write_progress(state="running", message="%d peer(s) busy (%s), asking again in %ds" % (
                len(busy), ", ".join(busy[:3]), wait))
            time.sleep(wait)
            self.waited += wait
            delay = min(delay * 1.5, MAX_PEER_DELAY)
            last = None

    def leave(self, commit):
        """No candidate will serve: the hub when peer_fallback says so, else a failure naming each candidate's answer."""
        p = self.run.params
        reasons = " | ".join(self.problems) or "no candidate"
        if not p["peer_fallback"]:
            raise Failure("no peer will serve %s at %s: %s. Does a peer have the complete snapshot? (a peer has it once a "
                          "run completed it there); allow the hub with %s" % (
                              p["repo_id"], commit, reasons, self.run.name("peer_fallback")))
        self.peer, self.files = None, None
        self.run.module.warn("no peer will serve %s at %s, downloading it from %s instead: %s" % (
            p["repo_id"], commit, p["endpoint"], reasons))

    def turned_away(self, commit, error):
        """Whether the serving peer's error (one attempt's) says it will not serve now rather than the transfer
        failing. If so, another candidate now serves, or this one after a backoff when it is busy, or the hub when
        none will serve and peer_fallback allows it: the attempt does not count."""
        if error is None or not self.peer or error.get("kind") not in TURNED_AWAY:
            return False
        p = self.run.params
        self.note("%s: %s" % (self.peer, error["message"]))
        last = self.peer
        if error["kind"] == "busy":
            wait = max(float(p["retry_delay"]), 1.0)
            if self.waited + wait > p["peer_wait"]:
                raise Failure("%s stayed busy: %s. Re-run later or raise %s" % (
                    self.peer, error["message"], self.run.name("peer_wait")))
            time.sleep(wait)
            self.waited += wait
        else:
            self.candidates.remove(self.peer)
        if not self.find(commit, last=last):
            self.leave(commit)
        return True

    def origin(self):
        """Where the snapshot came from, for the message of a run that fetched it: '' for the hub when no peer was
        asked."""
        if self.peer:
            return " from %s" % self.peer
        if self.run.params["peer"]:
            return " from %s, as no peer would serve it (%s)" % (self.run.params["endpoint"], " | ".join(self.problems))
        return ""
