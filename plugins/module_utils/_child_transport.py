# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The child processes of fleet.vllm.hf_snapshot: the huggingface_hub payload (_hf_snapshot_payload)
with the Python of O(python), or rsync for a copy from a peer - how each is started (its argv, its
environment: no secret on a command line), what its exit and output mean, how a hub failure reads
as one line naming the variable to set, how long to wait before another attempt, and the watchdog
that kills a child that writes no byte for stall_timeout seconds. Standard library only.

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from ansible.module_utils.common.text.converters import to_text

from ansible_collections.fleet.vllm.plugins.module_utils import _hf_snapshot_payload as payload
from ansible_collections.fleet.vllm.plugins.module_utils import _snapshot as snap
from ansible_collections.fleet.vllm.plugins.module_utils._snapshot_run import POLL_SECONDS, Failure

MAX_DELAY = 300.0
RATE_WINDOW = 30.0


def backoff(delay, error):
    """Seconds to wait before the next attempt: the delay, or the hub's Retry-After when longer."""
    wait = delay
    try:
        wait = max(wait, float(error.get("retry_after") or 0))
    except (TypeError, ValueError):
        pass
    return min(wait, MAX_DELAY)


class ChildTransport(object):
    """Runs the children of a SnapshotRun. ``xet_disabled``: whether the next hub child downloads over plain HTTP."""

    def __init__(self, run):
        self.run = run
        self.xet_disabled = run.params["disable_xet"]

    def python(self):
        python = self.run.params["python"]
        if not python:
            return sys.executable
        if not os.path.isfile(python) or not os.access(python, os.X_OK):
            raise Failure("%s %s is not an executable file: set it to the Python that has huggingface_hub (the "
                          "fleet.vllm.vllm_weights role installs one)" % (self.run.name("python"), python))
        return python

    def environment(self):
        """Sets the children's environment in this (the module's) process, which run_command passes on: the hub,
        the timeouts, no telemetry, the token only when given, and none inherited."""
        params = self.run.params
        env = os.environ
        for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_DISABLE_XET", "HF_HUB_ENABLE_HF_TRANSFER",
                     "HF_HUB_DISABLE_IMPLICIT_TOKEN"):
            env.pop(name, None)
        env.update(
            HF_ENDPOINT=params["endpoint"].rstrip("/"),
            HF_HOME=os.path.join(self.run.dest, ".hf-home"),
            HF_HUB_DISABLE_TELEMETRY="1",
            HF_HUB_DISABLE_PROGRESS_BARS="1",
            HF_HUB_DISABLE_SYMLINKS_WARNING="1",
            HF_HUB_ETAG_TIMEOUT=str(params["request_timeout"]),
            HF_HUB_DOWNLOAD_TIMEOUT=str(params["request_timeout"]),
            HF_XET_CHUNK_CACHE_SIZE_BYTES="0",
            PYTHONIOENCODING="utf-8",
            PYTHONDONTWRITEBYTECODE="1",
            LC_ALL="C",
        )
        if params["token"]:
            env["HF_TOKEN"] = params["token"]
        else:
            env["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "1"
        if self.xet_disabled:
            env["HF_HUB_DISABLE_XET"] = "1"

    def run_child(self, question, tag, watchdog=None):
        """Runs the child for one question - huggingface_hub, or rsync for a copy from a peer - and returns its answer.
        watchdog(process, stop) runs in a thread while the child runs, and may kill it."""
        module = self.run.module
        if question["op"] == "rsync":
            argv, what = list(question["argv"]), "rsync"
            # The payload ends itself with the module (see _hf_snapshot_payload); rsync through setpriv.
            setpriv = module.get_bin_path("setpriv")
            if setpriv:
                argv = [setpriv, "--pdeathsig", "TERM", "--"] + argv
        else:
            question_file = os.path.join(module.tmpdir, "hf-snapshot-%s.json" % tag)
            with open(question_file, "w") as handle:
                json.dump(dict(payload=payload.source(), question=question), handle)
            argv, what = [self.python(), "-c", payload.BOOTSTRAP, question_file], "%s %s" % (
                self.run.name("python"), self.python())
            self.run.result["requests"] += 1
        self.environment()
        stop = threading.Event()
        threads = []

        def started(process):
            if watchdog is not None:
                thread = threading.Thread(target=watchdog, args=(process, stop))
                thread.daemon = True
                thread.start()
                threads.append(thread)

        try:
            rc, out, err = module.run_command(argv, cwd="/", expand_user_and_vars=False, errors="surrogate_or_replace",
                                              before_communicate_callback=started, handle_exceptions=False)
        except OSError as exc:
            raise Failure("cannot run %s: %s" % (what, exc.strerror or exc))
        finally:
            stop.set()
            for thread in threads:
                thread.join(30)
        return self.answer_of(rc, out, err, rsync=question["op"] == "rsync", peer=question.get("peer"))

    def answer_of(self, rc, stdout, stderr, rsync=False, peer=None):
        stdout = to_text(stdout or "", errors="surrogate_or_replace")
        stderr = to_text(stderr or "", errors="surrogate_or_replace").strip()
        if rsync:
            return {} if rc == 0 else dict(error=snap.rsync_error(rc, stderr, peer))
        lines = [line for line in stdout.splitlines() if line.strip()]
        try:
            answer = json.loads(lines[-1]) if lines else None
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            tail = stderr[-1500:] or "(no output)"
            answer = dict(error=dict(type="ChildFailed", status=None, retry_after=None, fatal=rc in (126, 127),
                                     message="%s exited with code %s without an answer: %s" % (self.python(), rc, tail)))
        return answer

    def explain(self, error):
        """A failure of the hub, as one line naming the variable to set."""
        p, name = self.run.params, self.run.name
        kind, status, message = error.get("type"), error.get("status"), error.get("message", "")
        if kind == "rsync":
            return message
        where = "%s at %s" % (p["repo_id"], p["endpoint"])
        if kind == "RepositoryNotFoundError":
            return ("repository %s not found (HTTP %s): check %s; a private repository also needs %s"
                    % (where, status, name("repo_id"), name("token")))
        if kind == "GatedRepoError" or status in (401, 403):
            if p["token"]:
                return ("the hub refused the token for %s (HTTP %s): %s. Check that %s belongs to an account that has "
                        "accepted the model's terms on its page" % (where, status, message, name("token")))
            return ("%s is gated or private and no token was given (HTTP %s): set %s to a token of an account that has "
                    "accepted the model's terms (keep it in a vault)" % (where, status, name("token")))
        if kind == "RevisionNotFoundError":
            return "revision %r does not exist in %s: check %s (%s)" % (p["revision"], where, name("revision"), message)
        if status == 404:
            return ("repository %s not found (%s): check %s, and %s for a private repository"
                    % (where, message, name("repo_id"), name("token")))
        if kind == "ImportError":
            return "%s; set %s to the Python that has huggingface_hub" % (message, name("python"))
        if status is None and ("connect" in message.lower() or "resolve" in message.lower()
                               or kind in ("ConnectError", "ConnectTimeout", "LocalEntryNotFoundError")):
            return "cannot reach %s (%s: %s): check %s and that the hub or mirror is up" % (
                p["endpoint"], kind, message, name("endpoint"))
        return "%s%s: %s" % (kind, " (HTTP %s)" % status if status else "", message)


class StallWatchdog(object):
    """run_child's watchdog for a download or copy into ``directory``: writes the progress record every
    progress_interval seconds (bytes on disk, the rate over the last RATE_WINDOW seconds, the ETA), and kills the
    child once no byte arrived for stall_timeout seconds (``stalled`` then holds when)."""

    def __init__(self, run, directory, total):
        self.run = run
        self.directory = directory
        self.total = total
        self.stalled = []

    def __call__(self, process, stop):
        p = self.run.params
        last_bytes = snap.bytes_on_disk(self.directory)
        last_change = last_report = time.time()
        samples = [(last_change, last_bytes)]
        while not stop.wait(POLL_SECONDS):
            now = time.time()
            current = snap.bytes_on_disk(self.directory)
            if current != last_bytes:
                last_bytes, last_change = current, now
            samples.append((now, current))
            while len(samples) > 2 and samples[1][0] < now - RATE_WINDOW:
                samples.pop(0)
            if now - last_report >= p["progress_interval"]:
                span = samples[-1][0] - samples[0][0]
                rate = (samples[-1][1] - samples[0][1]) / span if span > 0 else None
                self.run.write_progress(bytes_done=min(current, self.total),
                                        rate_bytes_per_second=rate if rate and rate > 0 else None,
                                        eta_seconds=int((self.total - current) / rate) if rate and rate > 0 else None)
                last_report = now
            if now - last_change >= p["stall_timeout"]:
                self.stalled.append(now)
                try:
                    process.kill()
                except OSError:
                    pass
                return
