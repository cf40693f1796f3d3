# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every part of one fleet.vllm.hf_snapshot run shares: the module and its options, the result
being built, the names messages give the options, the progress record, and Failure.

The parts - the child processes (_child_transport), the copy from a peer (_peer_copy), the snapshot
on disk (_snapshot_state) - each hold the SnapshotRun they work for; the module's HfSnapshot is one
and orders the steps. Standard library only.

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time

from ansible_collections.fleet.vllm.plugins.module_utils import _snapshot as snap
from ansible_collections.fleet.vllm.plugins.module_utils._credentials import mask_all

# Options whose role variable is not <prefix><option>.
VARIABLE_NAMES = dict(token="hf_token", repo_id="repo")
# How often a run looks at the snapshot directory while a child writes into it.
POLL_SECONDS = 1.0


class Failure(Exception):
    """What went wrong and what to set, in one line: the module fails with it, and the progress record says failed."""


class SnapshotRun(object):
    """One run of the module: ``module`` is the AnsibleModule (or what tests give in its place: params,
    check_mode, warn(), and for the children tmpdir, run_command(), get_bin_path())."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.dest = os.path.abspath(self.params["dest"])
        self.result = dict(changed=False, revision=self.params["revision"], requests=0, msg="")
        self.progress_state = {}
        self.progress_lock = threading.Lock()

    def name(self, option):
        """The variable that sets ``option``, as the user knows it: the role's name for a setting the
        roles share (``variables``), else the role's prefix and the option, else the option itself."""
        named = (self.params.get("variables") or {}).get(option)
        if named:
            return named
        prefix = self.params["variable_prefix"]
        return prefix + VARIABLE_NAMES.get(option, option) if prefix else option

    def write_progress(self, **fields):
        """Rewrite the progress record. Called from several threads at once (the hashing workers'
        progress callback, the watchdog, the main loop): one writer at a time, each through a
        temporary file of its own - with one name per process, a second writer truncated the
        first one's file and found it renamed away ("[Errno 2] No such file or directory")."""
        path = self.params["progress_file"]
        with self.progress_lock:
            self.progress_state.update(fields, updated=time.time())
            self.progress_state["line"] = snap.progress_line(self.progress_state)
            if not path or self.module.check_mode:
                return
            directory = os.path.dirname(path) or "/"
            tmp = None
            try:
                if not os.path.isdir(directory):
                    os.makedirs(directory, 0o755)
                fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), suffix=".tmp", dir=directory)
                # The record is world-readable (whatever the umask): an endpoint's credentials stay out of it.
                os.fchmod(fd, 0o644)
                with os.fdopen(fd, "w") as handle:
                    json.dump(mask_all(self.progress_state), handle, sort_keys=True)
                os.rename(tmp, path)
            except (IOError, OSError) as exc:
                if tmp is not None:
                    try:
                        os.unlink(tmp)
                    except OSError:
                        pass
                self.module.warn("cannot write the progress record %s: %s" % (path, exc))
