#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: hf_snapshot
short_description: Download a Hugging Face model snapshot at a pinned commit, verified complete, resumable and watched
version_added: "0.1.0"
description:
  - Puts the files of one revision of a model repository in C(O(dest)/<commit sha>/) with
    huggingface_hub's C(snapshot_download(local_dir=...)) (never the shared cache layout, so no
    file is a link into a blob), and decides itself whether the snapshot is complete.
  - The revision (a branch, a tag or a commit) is resolved to its commit sha, which names the
    directory and is returned; a new revision is a new directory.
  - Before any byte is written, the revision's files and sizes are listed and the module fails
    when the free space at O(dest) is less than what is missing plus O(disk_margin_percent).
    Partial downloads a killed run left behind (huggingface_hub's C(.incomplete) files) are
    removed, and so are files whose size is wrong (huggingface_hub itself would keep a truncated
    file whose mtime is older than its metadata).
  - A file that arrives with a size other than the listing's fails the run at once (another
    attempt would fetch the same bytes), naming the file and both sizes; a full disk fails at
    once too, removes the partial and wrong-sized files and says how much to free.
  - After downloading, and on every run, the snapshot is checked - every file of the listing
    present with its exact size, every shard named by a C(*.safetensors.index.json) present, and
    every file's content against the hub's listing of the commit (the sha256 of LFS files, the git
    blob sha1 of the others - config, tokenizer and the C(*.py) code that C(--trust-remote-code)
    runs). A partial snapshot is never reported as a success.
  - The listing is the only allow-list. A snapshot that holds anything it does not name as a regular file - an
    unlisted C(processor_config.json) or C(*.py), a link, even at a listed name - is not complete; with V(present)
    each such entry is moved out of the snapshot, its relative path kept, into
    C(O(dest)/.fleet-vllm-rejected/<commit>/unlisted-<time>-<pid>/) (mode 0700, never deleted) and named in
    RV(unlisted), RV(msg) and a warning. Only C(.fleet-vllm-snapshot.json) and C(.cache/) (huggingface_hub's and
    rsync's bookkeeping) are the collection's own. A download asks for the listed files only (by name, whatever
    the mirror's own listing of the commit says), a copy from a peer too (C(rsync --files-from)).
  - The listing is then kept as a
    manifest (C(.fleet-vllm-snapshot.json)) in the snapshot, so that a run with a commit sha checks
    a complete snapshot without a single request.
  - The listing comes from the hub or the site mirror only - O(listing) (fetched by the caller, for
    example once by the controller), the manifest this module wrote from such a listing, or a
    request to O(endpoint) - never from a peer. A file whose content differs from it is moved out
    of the snapshot into C(O(dest)/.fleet-vllm-rejected/<commit>/) (mode 0700) and the run fails
    naming the file, both digests and where it came from.
  - With O(verified_record), what was verified is recorded (size, mtime, inode and digest of every
    file), and a later run hashes only the files that changed since; without it, every run with
    V(present) or V(verified) reads every byte.
  - The snapshot's directories and files get modes 0755 and 0644 whatever the umask they were
    written with, so that the service user can read them.
  - The download runs in a child process with the Python of O(python). A child that writes no
    byte for O(stall_timeout) seconds is killed and the download retried (after a stall, with Xet
    disabled - plain HTTP); 429, 5xx and dropped connections are retried with exponential backoff
    (C(Retry-After) respected) up to O(retries) times. Unknown repositories and revisions, gated
    repositories without a token and a full disk fail at once.
  - Progress (bytes done and total, rate, ETA, attempt) is written to O(progress_file) every few
    seconds, so that a caller running the module asynchronously can report it.
author:
  - fleet.vllm developers (@fleet-vllm)
attributes:
  check_mode:
    description:
      - Writes nothing and asks no peer. Lists the revision, checks the snapshot (sizes and
        digests) and the free space, and reports what would be downloaded (RV(would_download));
        huggingface_hub's own dry run is not used, as it creates directories in a partial snapshot.
  diff_mode:
    description: Model files are not shown as a diff; RV(would_download) lists what changes.
  platform:
    description: Runs on the host that keeps the model files.
extends_documentation_fragment: [fleet.vllm.attributes, fleet.vllm.attributes.changes_without_diff]
options:
  repo_id:
    description: The model repository, C(owner/name), for example C(nvidia/Kimi-K2.5-NVFP4).
    type: str
    required: true
  revision:
    description:
      - A branch, a tag or a 40-character commit sha. With a commit sha and a complete snapshot
        the module makes no request at all.
    type: str
    default: main
  dest:
    description:
      - The directory that holds the snapshots of this repository, one C(<commit sha>)
        subdirectory each. Created when missing (mode 0755).
    type: path
    required: true
  state:
    description:
      - V(present) downloads what is missing and fails unless the snapshot ends up complete.
      - V(verified) never writes (shared storage) and fails unless the snapshot is complete.
      - V(queried) never writes and never fails for an incomplete snapshot; RV(complete) says.
    type: str
    choices: [present, verified, queried]
    default: present
  endpoint:
    description:
      - The hub to download from - the Hugging Face Hub or a site mirror such as olah.
    type: str
    default: https://huggingface.co
  token:
    description:
      - A Hugging Face token, for gated and private repositories. Given to huggingface_hub in its
        environment (C(HF_TOKEN)), never on a command line, and sent only to O(endpoint).
      - Without it no token is sent, even one saved on the host (C(HF_HUB_DISABLE_IMPLICIT_TOKEN)).
    type: str
  allow_patterns:
    description: Only files matching one of these glob patterns (huggingface_hub's rules).
    type: list
    elements: str
  ignore_patterns:
    description: Leave out files matching one of these glob patterns.
    type: list
    elements: str
  max_workers:
    description: Files downloaded at once.
    type: int
    default: 8
  disable_xet:
    description:
      - Download over plain HTTP from the start (C(HF_HUB_DISABLE_XET=1)). After a stall the
        module switches to plain HTTP anyway.
    type: bool
    default: false
  python:
    description:
      - The Python interpreter that has huggingface_hub (1.0 or later), for example the venv the
        fleet.vllm.vllm_weights role installs. Default - the interpreter running the module.
    type: path
  peer:
    description:
      - Copy the snapshot from a peer host of the fleet instead of the hub - the C(rsync://) URL of
        the directory that holds the peer's snapshots of this repository (the fleet.vllm.vllm_weights
        role serves it read-only with an rsync daemon), for example
        C(rsync://gpu-node-01:8873/fleet-vllm-models/nvidia--Kimi-K2.5-NVFP4); or several such URLs,
        the candidates in the order to try them.
      - O(revision) must then be a commit sha. The file list and digests come from O(listing) (or
        the hub), never from the peer; the files through C(rsync) with its partial files kept (an
        interrupted copy resumes), under the same stall watchdog, retries, progress record and
        verification against the hub's listing as a hub download. With O(listing) the hub is not
        contacted.
      - A candidate copies only once its manifest is there (it completed the snapshot). One that
        refuses for capacity (rsync C(max connections) reached, or the socket's connection limit) is
        tried again after a backoff, the others in between, for up to O(peer_wait) seconds; one that
        refuses this host (not in its C(hosts allow)), cannot be reached, or lacks the snapshot while
        no candidate is busy is left out, with the reason in RV(peer_problems).
    type: list
    elements: str
  peer_fallback:
    description:
      - When no candidate of O(peer) will serve the snapshot (each refused, unreachable or without
        it), download it from O(endpoint) instead of failing; RV(peer_problems) and RV(msg) say why.
      - Candidates that are only busy are waited for (O(peer_wait)), never replaced by the hub.
    type: bool
    default: false
  peer_wait:
    description:
      - Seconds to wait in all for candidates of O(peer) that refuse for capacity, before the copy fails
        (the hosts that finish a copy serve the next ones, so a wait ends when any candidate has a slot).
    type: int
    default: 3600
  offline:
    description:
      - Never contact the hub. O(revision) must then be a commit sha whose manifest is in the
        snapshot (a snapshot this module completed or copied from a peer).
    type: bool
    default: false
  deep:
    description:
      - Hash every file again, even those O(verified_record) shows unchanged since they were
        verified. Reads every byte (see docs/evidence.md for the cost on 540 GB).
    type: bool
    default: false
  listing:
    description:
      - The hub's (or the site mirror's) listing of the commit O(revision) names, as the caller
        fetched it - C(path), C(size), and C(sha256) for LFS files or C(git_sha1) (the git blob id)
        for the others; filter P(fleet.vllm.weights_listing#filter) makes it from the Hub's tree API.
      - Every file of the snapshot is checked against it. O(revision) must be a commit sha.
    type: list
    elements: dict
  verified_record:
    description:
      - A file (outside O(dest)) recording every verified file's size, mtime, inode and digest, so
        that a later run hashes only what changed. Written 0644 after a successful check.
      - With V(queried), files it does not show unchanged make RV(complete) false (RV(unverified)),
        without reading a byte.
    type: path
  disk_margin_percent:
    description: Free space required beyond the missing bytes, in percent of them.
    type: int
    default: 5
  retries:
    description: Further attempts after a failed or stalled download.
    type: int
    default: 5
  retry_delay:
    description:
      - Seconds before the first retry; doubled for each further one, up to 300 (a
        C(Retry-After) header from the hub counts when it is longer).
    type: float
    default: 10
  stall_timeout:
    description: Seconds without a byte written after which a download is killed and retried.
    type: int
    default: 300
  request_timeout:
    description: Seconds huggingface_hub waits for an answer to one request (C(HF_HUB_DOWNLOAD_TIMEOUT), C(HF_HUB_ETAG_TIMEOUT)).
    type: int
    default: 60
  progress_file:
    description:
      - A JSON record of the progress, rewritten every O(progress_interval) seconds and at the end
        (C(state) V(running), V(done) or V(failed); C(bytes_done), C(bytes_total),
        C(rate_bytes_per_second), C(eta_seconds), C(attempt), C(line)).
    type: path
  progress_interval:
    description: Seconds between two progress records.
    type: int
    default: 10
  variable_prefix:
    description:
      - When set, messages name the role variables (C(<prefix>hf_token), C(<prefix>revision), ...)
        instead of the module's options.
    type: str
    default: ""
  variables:
    description:
      - The name the messages give an option whose variable is not O(variable_prefix) and the option's name (option
        name to variable name), such as C(token=fleet_vllm_hf_token) for a setting the roles share.
        M(fleet.vllm.vllm_weights) passes the shared settings it reads.
    type: dict
    default: {}
notes:
  - The snapshot directory is keyed by commit; old commits are left in place (remove them when
    no served directory links to them any more).
  - Two runs for the same commit on one host do not download at once. A run that finds a
    download of the same commit still running (one an interrupted run left in the background - a
    Ctrl-C on the controller, a failed play) takes it over - it says so in a warning and in
    RV(took_over), waits for it to end (its progress record stays and goes on), then checks and
    fetches what is left.
requirements:
  - huggingface_hub 1.0 or later for the Python of O(python) (the module itself needs only the standard library).
  - C(rsync) on the host, with O(peer).
seealso:
  - module: fleet.vllm.served_model
  - name: huggingface_hub download guide
    description: How snapshot_download works, and its local_dir layout.
    link: https://huggingface.co/docs/huggingface_hub/guides/download
"""

EXAMPLES = r"""
- name: Download Kimi-K2.5 NVFP4 at a pinned commit from a site mirror
  fleet.vllm.hf_snapshot:
    repo_id: nvidia/Kimi-K2.5-NVFP4
    revision: 0123456789abcdef0123456789abcdef01234567
    dest: /srv/vllm/models/pristine/nvidia--Kimi-K2.5-NVFP4
    endpoint: http://hf-mirror.site.example:8090
    python: /opt/fleet-vllm/hub/bin/python
    progress_file: /var/lib/fleet-vllm/weights-progress.json
  register: weights

- name: Verify a snapshot on shared storage (never writes)
  fleet.vllm.hf_snapshot:
    repo_id: nvidia/Kimi-K2.5-NVFP4
    revision: "{{ weights.commit }}"
    dest: /nfs/models/nvidia--Kimi-K2.5-NVFP4
    state: verified
    offline: true
"""

RETURN = r"""
path:
  description: The snapshot directory, C(O(dest)/<commit>).
  returned: success
  type: str
  sample: /srv/vllm/models/pristine/nvidia--Kimi-K2.5-NVFP4/0123456789abcdef0123456789abcdef01234567
commit:
  description: The commit sha the revision resolved to.
  returned: success
  type: str
  sample: 0123456789abcdef0123456789abcdef01234567
revision:
  description: The revision asked for.
  returned: always
  type: str
complete:
  description: Whether every file of the revision is on disk with its size and the content the hub's listing gives it.
  returned: success
  type: bool
files:
  description: Number of files in the revision (after O(allow_patterns) and O(ignore_patterns)).
  returned: success
  type: int
total_bytes:
  description: Bytes of those files.
  returned: success
  type: int
downloaded_bytes:
  description: Bytes of the snapshot written by this run (0 when nothing was downloaded).
  returned: success
  type: int
missing:
  description: Files absent, of the wrong size or hash (before the download, or now with V(verified) and V(queried)).
  returned: success
  type: list
  elements: str
would_download:
  description: In check mode, the files that would be downloaded or copied, with their sizes.
  returned: check mode
  type: list
  elements: dict
removed:
  description: Partial downloads and wrong-sized files removed.
  returned: success
  type: list
  elements: str
requests:
  description: How many hub processes the run started (0 for a complete pinned snapshot).
  returned: always
  type: int
attempts:
  description: Download attempts made (0 when nothing was missing).
  returned: success
  type: int
xet_fallback:
  description: Whether a stall made the module fall back from Xet to plain HTTP.
  returned: success
  type: bool
peer_used:
  description: The O(peer) candidate the snapshot was copied from (null when nothing was copied from a peer).
  returned: success
  type: str
peer_problems:
  description: Why candidates of O(peer) were left out or waited for, one line each (empty when the first one served).
  returned: success
  type: list
  elements: str
hashed_bytes:
  description: Bytes read to check files against the hub's listing (0 when the verified record covered every file).
  returned: success
  type: int
verified_files:
  description: Files whose content matches the hub's listing.
  returned: success
  type: int
unverified:
  description: Files of the right size not checked against the hub's listing (a query without a record of them).
  returned: success
  type: list
  elements: str
unlisted:
  description:
    - What the snapshot held that the hub's listing of the commit does not name as a regular file (an unlisted file,
      a link, a fifo ...), each with C(path), C(size) (null but for a file), C(kind) (C(file), C(link), C(fifo),
      C(socket), C(device)) and C(moved_to) (where it was moved; null in check mode and with V(queried) or
      V(verified), which never write).
  returned: when the snapshot held any
  type: list
  elements: dict
rejected:
  description: Where files whose content differed from the hub's listing were moved.
  returned: when a file was rejected
  type: list
  elements: str
took_over:
  description: The running download this run waited for (C(holder), C(waited_seconds)).
  returned: when a download of the same commit was running
  type: dict
msg:
  description: What was found or done, in one line; on failure, what went wrong and what to set.
  returned: always
  type: str
"""

import glob
import os
import threading
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.fleet.vllm.plugins.module_utils import _snapshot as snap
from ansible_collections.fleet.vllm.plugins.module_utils._child_transport import MAX_DELAY, ChildTransport, StallWatchdog, backoff
from ansible_collections.fleet.vllm.plugins.module_utils._credentials import secrets_in
from ansible_collections.fleet.vllm.plugins.module_utils._peer_copy import PeerCopy
from ansible_collections.fleet.vllm.plugins.module_utils._snapshot_run import Failure, SnapshotRun
from ansible_collections.fleet.vllm.plugins.module_utils._snapshot_state import REJECTED_DIR, SnapshotState, bad_files

REPO_ID_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."


class HfSnapshot(SnapshotRun):
    """The steps of a run: the options checked, the revision listed, the snapshot checked, then downloaded or copied
    (with the children of self.child, the candidates of self.peers, the files of self.disk) and checked again."""

    def __init__(self, module):
        super(HfSnapshot, self).__init__(module)
        self.child = ChildTransport(self)
        self.peers = PeerCopy(self, self.child)
        self.disk = SnapshotState(self)

    def check_params(self):
        p = self.params
        problems = []
        owner, _sep, repo = p["repo_id"].partition("/")
        if not owner or not repo or "/" in repo or any(c not in REPO_ID_CHARS for c in owner + repo):
            problems.append("%s is %r: set it to owner/name, such as nvidia/Kimi-K2.5-NVFP4" % (self.name("repo_id"), p["repo_id"]))
        if not p["revision"] or p["revision"] != p["revision"].strip():
            problems.append("%s is %r: set a branch, a tag or a commit sha" % (self.name("revision"), p["revision"]))
        if not p["offline"] and not (p["endpoint"].startswith("http://") or p["endpoint"].startswith("https://")):
            problems.append("%s is %r: set the http(s) URL of the hub or of the site mirror" % (self.name("endpoint"), p["endpoint"]))
        for url in p["peer"] or []:
            if not url.startswith("rsync://") or len(url.rstrip("/")) <= len("rsync://"):
                problems.append("%s has %r: set the rsync:// URL of a peer's snapshots" % (self.name("peer"), url))
        if p["peer_fallback"] and p["offline"]:
            problems.append("%s needs the hub, which offline excludes: set one of them" % self.name("peer_fallback"))
        if (p["offline"] or p["peer"] or p["listing"] is not None) and not snap.is_commit_sha(p["revision"]):
            problems.append("%s is %r: offline or from a peer, the revision must be a 40-character commit sha"
                            % (self.name("revision"), p["revision"]))
        if p["verified_record"] and p["verified_record"].startswith(self.dest.rstrip("/") + "/"):
            problems.append("%s is %s, inside %s: keep it outside the snapshots (peers copy them)" % (
                self.name("verified_record"), p["verified_record"], self.name("dest")))
        for option, low in (("max_workers", 1), ("retries", 0), ("stall_timeout", 5), ("request_timeout", 1),
                            ("disk_margin_percent", 0), ("progress_interval", 1), ("peer_wait", 0)):
            if p[option] < low:
                problems.append("%s is %d: set it to %d or more" % (self.name(option), p[option], low))
        if p["retry_delay"] < 0:
            problems.append("%s is %s: set it to 0 or more" % (self.name("retry_delay"), p["retry_delay"]))
        if problems:
            raise Failure("; ".join(problems))

    def listing(self):
        """(commit, files, manifest, trusted): the files of the revision and whether their digests come from the hub.

        From O(listing) (the hub's listing the caller fetched), from the manifest when pinned and present, else from
        the hub. Never from a peer: a peer's manifest only says that the peer completed the snapshot."""
        p = self.params
        revision = p["revision"]
        manifest = None
        if snap.is_commit_sha(revision):
            directory = snap.snapshot_dir(self.dest, revision)
            try:
                manifest = snap.read_manifest(directory)
            except snap.SnapshotError as exc:
                if p["offline"] and p["listing"] is None:
                    raise Failure(str(exc))
                manifest = None
            if manifest is not None and (manifest.get("repo_id") != p["repo_id"] or manifest.get("commit") != revision):
                raise Failure("%s belongs to %s at %s, not %s: check %s and %s" % (
                    snap.manifest_path(directory), manifest.get("repo_id"), manifest.get("commit"), p["repo_id"],
                    self.name("dest"), self.name("repo_id")))
        if p["listing"] is not None:
            try:
                files = snap.normalise_files(p["listing"])
            except snap.SnapshotError as exc:
                raise Failure("%s: %s; pass the hub's listing of the commit" % (self.name("listing"), exc))
            undigested = [item["path"] for item in files if not snap.expected_digest(item)]
            if not files or undigested:
                what = "it is empty" if not files else "these have neither: %s" % ", ".join(undigested[:5])
                raise Failure("%s must give every file a sha256 (LFS files) or a git_sha1 (the others), as the hub's "
                              "listing does; %s" % (self.name("listing"), what))
            return revision, files, manifest, True
        if manifest is not None:
            same_patterns = (manifest.get("allow_patterns") or None) == (p["allow_patterns"] or None) and \
                (manifest.get("ignore_patterns") or None) == (p["ignore_patterns"] or None)
            trusted = snap.manifest_trusted(manifest)
            if same_patterns and (trusted or p["offline"]):
                return revision, manifest["files"], manifest, trusted
            if not same_patterns and p["offline"]:
                raise Failure("the manifest in %s was written for other allow/ignore patterns; offline, the "
                              "revision cannot be listed again: run once online" % snap.snapshot_dir(self.dest, revision))
        elif p["offline"]:
            if p["state"] == "queried":
                return revision, None, None, False
            raise Failure("no complete snapshot of %s at %s in %s (no %s): offline, nothing can be listed or downloaded; "
                          "fetch it first (fleet.vllm.vllm_weights) or check %s" % (
                              p["repo_id"], revision, self.dest, snap.MANIFEST_NAME, self.name("dest")))
        question = dict(op="resolve", repo_id=p["repo_id"], revision=revision,
                        allow_patterns=p["allow_patterns"], ignore_patterns=p["ignore_patterns"])
        delay = float(p["retry_delay"])
        for attempt in range(p["retries"] + 1):
            answer = self.child.run_child(question, "resolve-%d" % attempt)
            error = answer.get("error")
            if not error or error.get("fatal") or attempt == p["retries"]:
                break
            time.sleep(backoff(delay, error))
            delay = min(delay * 2 if delay else 1.0, MAX_DELAY)
        if "error" in answer:
            raise Failure("cannot list %s: %s" % (p["repo_id"], self.child.explain(answer["error"])))
        commit = answer.get("commit")
        if not snap.is_commit_sha(commit or ""):
            raise Failure("the hub at %s answered no commit sha for %s at %s (got %r)" % (p["endpoint"], p["repo_id"], revision, commit))
        if not answer.get("files"):
            raise Failure("%s at %s has no file matching the allow/ignore patterns: check %s and %s" % (
                p["repo_id"], revision, self.name("allow_patterns"), self.name("ignore_patterns")))
        try:
            files = snap.normalise_files(answer["files"])
        except snap.SnapshotError as exc:
            raise Failure("the listing of %s at %s from %s: %s" % (p["repo_id"], commit, p["endpoint"], exc))
        if commit != revision:
            try:
                manifest = snap.read_manifest(snap.snapshot_dir(self.dest, commit))
            except snap.SnapshotError:
                manifest = None
        return commit, files, manifest, True

    def download(self, commit, files, directory, state, record):
        p = self.params
        total, missing_bytes = state["total_bytes"], state["missing_bytes"]
        self.disk.arrived = dict(record)
        removed = self.disk.remove(snap.incomplete_files(directory))
        self.disk.reject(commit, directory, state["wrong_hash"])
        removed += self.disk.remove(bad_files(directory, state))
        start_bytes = snap.bytes_on_disk(directory)
        attempt, delay = 0, float(p["retry_delay"])
        history = []
        while True:
            attempt += 1
            self.write_progress(state="running", bytes_done=start_bytes, bytes_total=total, attempt=attempt,
                                transport="http" if self.child.xet_disabled else "auto", rate_bytes_per_second=None,
                                message="")
            error = self.one_attempt(commit, files, directory, attempt, total)
            if self.peers.turned_away(commit, error):
                # Not the transfer failing: this peer will not serve now, and another source does.
                attempt -= 1
                continue
            if error is not None and snap.is_disk_full(error.get("message")):
                self.disk.disk_full(commit, directory, files, removed, self.child.explain(error))
            if error is None:
                state = self.listed_only(commit, directory, files, snap.check(directory, files))
                if state["wrong_size"]:
                    # The listing and what the hub (or the peer) sends disagree: another attempt fetches the same bytes.
                    source = self.peers.peer or p["endpoint"]
                    removed += self.disk.remove(bad_files(directory, dict(state, wrong_hash=[])))
                    self.result["removed"] = removed
                    raise Failure("%s at %s: %s from %s, which another attempt cannot change: %s. They were removed. "
                                  "Check that %s serves the commit its listing describes (a mirror with a stale or "
                                  "truncated copy, a proxy that cuts files), or that the filesystem at %s is not full, "
                                  "then re-run" % (
                                      p["repo_id"], commit, "size differs from the hub's listing" if len(
                                          state["wrong_size"]) == 1 else "sizes differ from the hub's listing",
                                      source, "; ".join("%s: the listing says %d bytes, %s arrived" % (
                                          item["path"], item["expected"], "no file" if item["size"] is None
                                          else "%d bytes" % item["size"]) for item in state["wrong_size"][:5]),
                                      self.name("peer") if self.peers.peer else self.name("endpoint"), directory))
                state = self.disk.verify(directory, files, state, True, dict(record, **self.disk.arrived), fresh=True)
                if state["wrong_digest"]:
                    source = "the peer %s" % self.peers.peer if self.peers.peer else p["endpoint"]
                    moved = self.disk.reject(commit, directory, state["wrong_hash"])
                    self.disk.remove(bad_files(directory, dict(state, wrong_size=[])))
                    self.write_progress(state="failed", message="content differs from the hub's listing")
                    raise Failure("%s at %s: %s sent %d file(s) whose content differs from the hub's listing of the "
                                  "commit: %s. They were moved out of the snapshot (%s) and are not served. %s" % (
                                      p["repo_id"], commit, source, len(state["wrong_digest"]), "; ".join(
                                          "%s is %s, the listing says %s" % (item["path"], item["actual"],
                                                                             item["expected"])
                                          for item in state["wrong_digest"][:5]), ", ".join(moved[:5]),
                                      "Repair or take that peer out of %s (its copy is damaged or altered), then re-run"
                                      % "vllm_weights_peer_group" if self.peers.peer else
                                      "Check the mirror %s (%s): it serves other bytes than its listing names" % (
                                          p["endpoint"], self.name("endpoint"))))
                if state["complete"]:
                    break
                error = dict(type="IncompleteSnapshot", status=None, retry_after=None, fatal=False,
                             message="huggingface_hub finished, but %s" % snap.describe_problems(state))
            history.append("attempt %d: %s" % (attempt, self.child.explain(error)))
            if error.get("fatal") or attempt > p["retries"]:
                removed += self.disk.remove(snap.incomplete_files(directory))
                self.write_progress(state="failed", message=history[-1])
                self.result["removed"] = removed
                if error.get("fatal"):
                    raise Failure("cannot download %s: %s" % (p["repo_id"], self.child.explain(error)))
                raise Failure("%s at %s is still incomplete after %d attempt(s) - %s. Re-run to resume (complete files are kept)"
                              % (p["repo_id"], commit, attempt, " | ".join(history[-3:])))
            wait = backoff(delay, error)
            self.write_progress(state="running", message="%s; retrying in %ds" % (history[-1], wait))
            time.sleep(wait)
            delay = min(delay * 2 if delay else 1.0, MAX_DELAY)
            removed += self.disk.remove(snap.incomplete_files(directory))
        self.result.update(attempts=attempt, removed=removed, downloaded_bytes=missing_bytes, retries_log=history)
        self.write_progress(state="done", bytes_done=total, message="complete")
        return state

    def one_attempt(self, commit, files, directory, attempt, total):
        """Runs one download process under the stall watchdog. None on success, else an error dict."""
        p = self.params
        if self.peers.peer:
            question = self.peers.question(commit, directory, files)
        else:
            # The listed files only, by name (huggingface_hub matches allow_patterns with fnmatch: escaped), whatever
            # else the mirror's own listing of the commit names.
            question = dict(op="download", repo_id=p["repo_id"], revision=commit, local_dir=directory,
                            allow_patterns=[glob.escape(item["path"]) for item in files],
                            ignore_patterns=p["ignore_patterns"], max_workers=p["max_workers"])
        watchdog = StallWatchdog(self, directory, total)
        hashing = threading.Event()
        hasher = threading.Thread(target=self.disk.hash_arrivals, args=(directory, files, hashing))
        hasher.daemon = True
        hasher.start()
        try:
            answer = self.child.run_child(question, "download-%d" % attempt, watchdog=watchdog)
        finally:
            hashing.set()
            hasher.join()
        if watchdog.stalled:
            fallback = not self.child.xet_disabled and not self.peers.peer
            if fallback:
                self.child.xet_disabled = True
                self.result["xet_fallback"] = True
            return dict(type="Stall", status=None, retry_after=None, fatal=False,
                        message="no byte written for %d s (stall_timeout); the download was killed%s" % (
                            p["stall_timeout"], ", next attempts over plain HTTP" if fallback else ""))
        return answer.get("error")

    def listed_only(self, commit, directory, files, state):
        """check()'s state of a snapshot with what the listing does not name moved out of it (SnapshotState.quarantine)
        and checked again."""
        if not state["unlisted"]:
            return state
        self.disk.quarantine(commit, directory, state["unlisted"], files)
        return snap.check(directory, files)

    def run(self):
        result = self.fetch()
        moved = [entry for entry in result.get("unlisted") or [] if entry.get("moved_to")]
        if moved:
            result["msg"] += "; %d file(s) not in the hub's listing of the commit were moved out of the snapshot, never " \
                "served: %s (into %s/)" % (len(moved), snap.describe_unlisted(moved),
                                           os.path.join(self.dest, REJECTED_DIR, result["commit"]))
        return result

    def fetch(self):
        p = self.params
        self.check_params()
        commit, files, manifest, trusted = self.listing()
        directory = snap.snapshot_dir(self.dest, commit)
        if files is None:
            self.result.update(commit=commit, path=directory, complete=False, missing=[], files=0, total_bytes=0,
                               downloaded_bytes=0, attempts=0, removed=[], xet_fallback=False, verified_files=0,
                               hashed_bytes=0, unverified=[], msg="no complete snapshot of %s at %s in %s (no manifest)"
                               % (p["repo_id"], commit, self.dest))
            return self.result
        record = self.disk.read_record(commit, directory)
        state = snap.check(directory, files)
        if p["state"] == "present" and trusted and not self.module.check_mode:
            state = self.listed_only(commit, directory, files, state)
        elif state["unlisted"]:
            self.result["unlisted"] = [dict(entry, path=snap.shown(entry["path"]), moved_to=None)
                                       for entry in state["unlisted"]]
        state = self.disk.verify(directory, files, state, trusted, record, hash_files=p["state"] != "queried")
        self.result.update(commit=commit, path=directory, files=len(files), total_bytes=state["total_bytes"],
                           downloaded_bytes=0, attempts=0, removed=[], xet_fallback=False,
                           hashed_bytes=state["hashed_bytes"], verified_files=len(state["verified"]),
                           unverified=state["unverified"])
        missing = state["missing"] + [item["path"] for item in state["wrong_size"]] + state["wrong_hash"]
        self.result["missing"] = missing
        self.result["complete"] = state["complete"]
        if state["complete"]:
            if p["state"] != "queried":
                self.disk.save_record(commit, directory, state, record)
            if p["state"] == "present" and (manifest is None or not snap.manifest_trusted(manifest)
                                            or manifest.get("files") != files):
                if not self.module.check_mode:
                    snap.write_manifest(directory, snap.make_manifest(p["repo_id"], commit, files, p["revision"],
                                                                      p["allow_patterns"], p["ignore_patterns"]))
                self.result["changed"] = True
            if p["state"] == "present" and snap.fix_modes(directory, files, check_mode=self.module.check_mode):
                self.result["changed"] = True
            if p["state"] == "present":
                self.write_progress(state="done", bytes_done=state["total_bytes"], bytes_total=state["total_bytes"],
                                    message="complete")
            self.result["msg"] = "%s at %s: complete, %d files, %s, every file as the hub's listing says%s" % (
                p["repo_id"], commit[:12], len(files), snap.human_bytes(state["total_bytes"]),
                " (%s hashed)" % snap.human_bytes(state["hashed_bytes"]) if state["hashed_bytes"] else "")
            return self.result
        problems = snap.describe_problems(state)
        if p["state"] == "queried":
            self.result["msg"] = "%s at %s is not complete in %s: %s" % (p["repo_id"], commit[:12], directory, problems)
            return self.result
        if p["state"] == "verified":
            if state["unverified"] and not trusted:
                raise Failure("%s at %s in %s: %s - its manifest was not written from the hub's listing, so the files "
                              "cannot be checked offline. Run fleet.vllm.vllm_weights (it lists the commit from the hub "
                              "and checks every file)" % (p["repo_id"], commit, directory, problems))
            raise Failure("%s at %s is not complete in %s: %s. This is a verify-only run (shared storage): complete the "
                          "snapshot where it is written" % (p["repo_id"], commit, directory, problems))
        if not trusted:
            raise Failure("%s at %s in %s: %s; pass the hub's listing (%s) or run online" % (
                p["repo_id"], commit, directory, problems, self.name("listing")))
        if state["index_problems"] and not (state["missing"] or state["wrong_size"] or state["wrong_hash"]):
            raise Failure("%s at %s: every listed file is here, but %s; the repository itself is inconsistent"
                          % (p["repo_id"], commit, "; ".join(state["index_problems"])))
        self.disk.check_space(commit, directory, state)
        if self.module.check_mode:
            # From this module's own check of the files (sizes, digests): nothing on the host is touched, and no
            # request changes anything (huggingface_hub's dry run would create directories in the snapshot).
            sizes = dict((item["path"], item["size"]) for item in files)
            would = [dict(path=path, size=sizes[path], will_download=True) for path in missing]
            self.result.update(changed=True, would_download=would, msg="%s at %s: would %s %d file(s), %s%s" % (
                p["repo_id"], commit[:12], "copy" if self.peers.candidates else "download", len(would),
                snap.human_bytes(sum(item.get("size") or 0 for item in would)),
                "; %d file(s) differ from the hub's listing and would be moved out of the snapshot" % len(
                    state["wrong_hash"]) if state["wrong_hash"] else "") + (
                "; %d file(s) not in the hub's listing would be moved out of the snapshot, never served: %s" % (
                    len(state["unlisted"]), snap.describe_unlisted(state["unlisted"])) if state["unlisted"] else ""))
            return self.result
        if not os.path.isdir(directory):
            self.disk.make_dirs(directory)
        handle = self.disk.lock(commit)
        try:
            if "took_over" in self.result:
                # The download this run waited for may have fetched everything: look again.
                state = self.disk.verify(directory, files, self.listed_only(commit, directory, files, snap.check(
                    directory, files)), True, record)
            record = dict(record, **state["verified"])
            if not state["complete"]:
                if self.peers.candidates and self.peers.peer is None and not self.peers.find(commit):
                    self.peers.leave(commit)
                state = self.download(commit, files, directory, state, record)
            else:
                self.write_progress(state="done", bytes_done=state["total_bytes"], bytes_total=state["total_bytes"],
                                    message="complete")
            snap.write_manifest(directory, snap.make_manifest(p["repo_id"], commit, files, p["revision"],
                                                              p["allow_patterns"], p["ignore_patterns"]))
            snap.fix_modes(directory, files)
            self.disk.save_record(commit, directory, state, {})
        finally:
            handle.close()
        took = self.result.get("took_over")
        before = ("took over the download %s left running by an earlier run: waited %d s for it to end; then " % (
            took["holder"], took["waited_seconds"])) if took else ""
        self.result.update(changed=True, complete=True, peer_used=self.peers.peer, hashed_bytes=state["hashed_bytes"],
                           verified_files=len(state["verified"]), unverified=[],
                           msg="%s at %s: %s%s %s%s in %d attempt(s); complete, %d files, %s, every file as the hub's "
                               "listing says" % (
                               p["repo_id"], commit[:12], before, "copied" if self.peers.peer else "downloaded",
                               snap.human_bytes(self.result["downloaded_bytes"]), self.peers.origin(),
                               self.result["attempts"], len(files), snap.human_bytes(state["total_bytes"])))
        return self.result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            repo_id=dict(type="str", required=True),
            revision=dict(type="str", default="main"),
            dest=dict(type="path", required=True),
            state=dict(type="str", choices=["present", "verified", "queried"], default="present"),
            endpoint=dict(type="str", default="https://huggingface.co"),
            token=dict(type="str", no_log=True),
            allow_patterns=dict(type="list", elements="str"),
            ignore_patterns=dict(type="list", elements="str"),
            max_workers=dict(type="int", default=8),
            disable_xet=dict(type="bool", default=False),
            python=dict(type="path"),
            peer=dict(type="list", elements="str"),
            peer_fallback=dict(type="bool", default=False),
            peer_wait=dict(type="int", default=3600),
            offline=dict(type="bool", default=False),
            deep=dict(type="bool", default=False),
            disk_margin_percent=dict(type="int", default=5),
            retries=dict(type="int", default=5),
            retry_delay=dict(type="float", default=10),
            stall_timeout=dict(type="int", default=300),
            request_timeout=dict(type="int", default=60),
            listing=dict(type="list", elements="dict"),
            verified_record=dict(type="path"),
            progress_file=dict(type="path"),
            progress_interval=dict(type="int", default=10),
            variable_prefix=dict(type="str", default=""),
            variables=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    # Credentials in the endpoint (https://user:password@mirror) are hidden wherever a message shows it.
    module.no_log_values.update(secrets_in(module.params["endpoint"]))
    runner = HfSnapshot(module)
    try:
        result = runner.run()
    except Failure as exc:
        runner.result["msg"] = to_native(exc)
        runner.result["changed"] = False
        runner.write_progress(state="failed", message=runner.result["msg"])
        module.fail_json(**runner.result)
    except snap.SnapshotError as exc:
        runner.result["msg"] = to_native(exc)
        module.fail_json(**runner.result)
    result.pop("retries_log", None)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
