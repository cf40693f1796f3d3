#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: served_model
short_description: Build the served model directory - links to a pristine snapshot plus patchable copies of its small files
version_added: "0.1.0"
description:
  - Makes O(path) the directory vLLM serves from a pristine snapshot O(source) (as
    M(fleet.vllm.hf_snapshot) leaves it) - every file of the snapshot's listing appears in O(path)
    as a symbolic link to the pristine file, except files matching O(copy_patterns) (the small JSON
    files later steps may patch, such as C(config.json) and C(hf_quant_config.json)), which are
    real copies.
  - The files served are those of the snapshot's manifest (C(.fleet-vllm-snapshot.json), written by
    M(fleet.vllm.hf_snapshot) from the hub's listing of the commit), never what a walk of O(source)
    finds. A file of O(source) the manifest does not name - an unlisted C(processor_config.json),
    C(chat_template.jinja) or C(*.py) - is not served, and is named in RV(unlisted) and a warning; a
    listed name that is not a regular file in O(source) (a link, or below one) fails the run.
  - The pristine snapshot is never written, so a patch (M(fleet.vllm.kv_cache_config)) never
    reaches a download, and a re-download never undoes a patch.
  - A copy is made once per content of its pristine file; later runs leave it alone, patched or
    not. When the pristine file changes (a new revision), the copy is made again and the files
    named by O(reset_files) (the KV-cache record) are removed, so that the next step decides
    again for the new files.
  - Links to files that are no longer in the source (the previous revision's) are removed, and
    so are copies this module made of such files. Other files in O(path) are left alone.
  - Every change is atomic (a new link or file next to the old one, then a rename); a
    C(.fleet-vllm-served.json) record in O(path) remembers the source and what was copied.
author:
  - fleet.vllm developers (@fleet-vllm)
attributes:
  check_mode:
    description: Reports what would be linked, copied and removed, and writes nothing.
  diff_mode:
    description: Shows the directory's listing (each entry as a link or a copy) before and after.
  platform:
    description: Runs on the host that keeps the model files.
extends_documentation_fragment: [fleet.vllm.attributes, fleet.vllm.attributes.changes_with_diff]
options:
  source:
    description: The pristine snapshot directory. Read only.
    type: path
    required: true
  path:
    description: The served model directory. Created when missing (mode 0755).
    type: path
    required: true
  copy_patterns:
    description:
      - Glob patterns (on the path relative to O(source)) of the files to copy instead of link.
    type: list
    elements: str
    default: ['*.json']
  reset_files:
    description: Files of O(path) removed whenever a copy is made again from a changed source.
    type: list
    elements: str
    default: ['.fleet-vllm-kv-cache.json']
notes:
  - Bookkeeping files of the source (C(.cache/), C(.fleet-vllm-snapshot.json)) are not linked.
  - A source without the manifest is refused - it is not a snapshot M(fleet.vllm.hf_snapshot) completed.
seealso:
  - module: fleet.vllm.hf_snapshot
  - module: fleet.vllm.kv_cache_config
"""

EXAMPLES = r"""
- name: Serve the pinned snapshot from a directory of links plus patchable JSON copies
  fleet.vllm.served_model:
    source: /srv/vllm/models/pristine/nvidia--Kimi-K2.5-NVFP4/0123456789abcdef0123456789abcdef01234567
    path: /srv/vllm/models/served/nvidia--Kimi-K2.5-NVFP4
"""

RETURN = r"""
links:
  description: Number of files served as links.
  returned: success
  type: int
copies:
  description: Number of files served as copies.
  returned: success
  type: int
created:
  description: Entries made or remade by this run (relative paths).
  returned: success
  type: list
  elements: str
removed:
  description: Entries removed (stale links and copies, O(reset_files)).
  returned: success
  type: list
  elements: str
unlisted:
  description: Files and links of O(source) that its manifest does not name, and that are therefore not served.
  returned: success
  type: list
  elements: str
msg:
  description: What was done, in one line.
  returned: always
  type: str
"""

import errno
import fnmatch
import json
import os
import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.fleet.vllm.plugins.module_utils import _snapshot as snap

RECORD_NAME = ".fleet-vllm-served.json"
RECORD_VERSION = 1


class Failure(Exception):
    pass


class NotComplete(Failure):
    """The source is not a complete snapshot (yet): no manifest, or listed files that are not regular files there."""


def source_files(source):
    """(listed, unlisted, absent): the files of the source's manifest - the hub's listing of the commit, the only files
    served -, what else the source holds (never served), and the listed names that are not a regular file reached
    through real directories there. Fails (NotComplete) when there is no manifest."""
    try:
        manifest = snap.read_manifest(source)
    except snap.SnapshotError as exc:
        raise Failure("source %s: %s" % (source, exc))
    if manifest is None:
        raise NotComplete("source %s has no %s: it is not a snapshot fleet.vllm.hf_snapshot completed, and only the files "
                          "of the hub's listing are served; fetch it with fleet.vllm.hf_snapshot (fleet.vllm.vllm_weights)"
                          % (source, snap.MANIFEST_NAME))
    listed = [item["path"] for item in manifest["files"]]
    found = snap.scan(source)
    absent = [rel for rel in listed if rel not in found[0]]
    return listed, [snap.shown(entry["path"]) for entry in snap.unlisted_entries(source, manifest["files"], found)], absent


class ServedModel(object):
    def __init__(self, module):
        self.module = module
        self.source = os.path.abspath(module.params["source"])
        self.path = os.path.abspath(module.params["path"])
        self.created, self.removed, self.unlisted = [], [], []

    def read_record(self):
        record_path = os.path.join(self.path, RECORD_NAME)
        try:
            with open(record_path) as handle:
                record = json.load(handle)
        except (IOError, OSError) as exc:
            if exc.errno == errno.ENOENT:
                return dict(copies={})
            raise Failure("cannot read %s: %s" % (record_path, exc.strerror))
        except ValueError:
            self.module.warn("%s is not valid JSON; the copies are made again from the source" % record_path)
            return dict(copies={})
        if not isinstance(record, dict) or not isinstance(record.get("copies"), dict):
            return dict(copies={})
        return record

    def entry(self, rel):
        """How rel is served now: ('link', target) | ('file', None) | ('other', None) | (None, None)."""
        full = os.path.join(self.path, rel)
        if os.path.islink(full):
            return "link", os.readlink(full)
        if os.path.isfile(full):
            return "file", None
        if os.path.lexists(full):
            return "other", None
        return None, None

    def plan(self):
        if not os.path.isdir(self.source):
            raise Failure("source %s is not a directory: fetch the snapshot first (fleet.vllm.hf_snapshot)" % self.source)
        if self.path == self.source or self.path.startswith(self.source + os.sep) or self.source.startswith(self.path + os.sep):
            raise Failure("path %s and source %s must not contain each other: the served directory is separate from the "
                          "pristine snapshot" % (self.path, self.source))
        if os.path.lexists(self.path) and not os.path.isdir(self.path):
            raise Failure("path %s exists and is not a directory: move it away or choose another path" % self.path)
        patterns = self.module.params["copy_patterns"]
        record = self.read_record()
        wanted = {}
        listed, self.unlisted, absent = source_files(self.source)
        if absent and not self.module.check_mode:
            raise NotComplete("source %s: %s listed but not a regular file there (absent, a link, or below a link): the "
                              "served directory was left as it was; run fleet.vllm.hf_snapshot (fleet.vllm.vllm_weights) "
                              "to complete the snapshot" % (self.source, ", ".join(snap.shown(rel) for rel in absent[:5])))
        for rel in listed:
            if rel in absent:
                # Check mode before the download or the move aside that this run would make: planned as it will be.
                matched = any(fnmatch.fnmatch(rel, pattern) for pattern in patterns)
                wanted[rel] = ("copy", None) if matched else ("link", os.path.join(self.source, rel))
            elif any(fnmatch.fnmatch(rel, pattern) for pattern in patterns):
                full = os.path.join(self.source, rel)
                if rel.endswith(".json"):
                    try:
                        with open(full, "rb") as handle:
                            json.loads(handle.read().decode("utf-8"))
                    except ValueError as exc:
                        raise Failure("%s is not valid JSON (%s): the served directory was left as it was; fix or "
                                      "re-fetch the snapshot" % (full, exc))
                wanted[rel] = ("copy", snap.sha256_of(full))
            else:
                wanted[rel] = ("link", os.path.join(self.source, rel))
        if not wanted:
            raise Failure("source %s has no files" % self.source)
        actions = []  # (kind, rel, detail)
        refreshed = False
        for rel, (kind, detail) in sorted(wanted.items()):
            state, target = self.entry(rel)
            if kind == "link":
                if state == "link" and target == detail:
                    continue
                if state == "other":
                    raise Failure("%s is neither a file nor a link: remove it" % os.path.join(self.path, rel))
                actions.append(("link", rel, detail))
            else:
                known = record["copies"].get(rel)
                if state == "file" and known == detail:
                    continue
                if state == "file" and known is None and snap.sha256_of(os.path.join(self.path, rel)) == detail:
                    actions.append(("adopt", rel, detail))
                    continue
                if state == "other":
                    raise Failure("%s is neither a file nor a link: remove it" % os.path.join(self.path, rel))
                actions.append(("copy", rel, detail))
                refreshed = True
        for rel, sha in sorted(record["copies"].items()):
            if rel not in wanted and self.entry(rel)[0] == "file":
                actions.append(("remove", rel, "copy of a file the source no longer has"))
        for base, _dirs, names in os.walk(self.path) if os.path.isdir(self.path) else []:
            for name in names:
                rel = os.path.relpath(os.path.join(base, name), self.path)
                full = os.path.join(base, name)
                if rel not in wanted and os.path.islink(full):
                    actions.append(("remove", rel, "link to %s" % os.readlink(full)))
        if refreshed:
            for rel in self.module.params["reset_files"]:
                if os.path.lexists(os.path.join(self.path, rel)):
                    actions.append(("remove", rel, "record of the previous copies"))
        return wanted, record, actions

    def listing(self, wanted=None):
        lines = []
        if wanted is None:
            for base, _dirs, names in sorted(os.walk(self.path)) if os.path.isdir(self.path) else []:
                for name in sorted(names):
                    rel = os.path.relpath(os.path.join(base, name), self.path)
                    if rel == RECORD_NAME:
                        continue
                    kind, target = self.entry(rel)
                    lines.append("%s -> %s" % (rel, target) if kind == "link" else "%s (file)" % rel)
        else:
            for rel, (kind, detail) in sorted(wanted.items()):
                lines.append("%s -> %s" % (rel, detail) if kind == "link" else "%s (copy)" % rel)
        return "\n".join(sorted(lines)) + "\n"

    @staticmethod
    def makedirs(path):
        """Creates path and its missing parents with mode 0755 whatever the umask (a CIS umask of 027 would leave
        them closed to the service user)."""
        missing = []
        while path and not os.path.isdir(path):
            missing.append(path)
            path = os.path.dirname(path)
        for directory in reversed(missing):
            os.mkdir(directory, 0o755)
            os.chmod(directory, 0o755)

    def apply(self, wanted, record, actions):
        if not os.path.isdir(self.path):
            self.makedirs(self.path)
        tmp_suffix = ".fleet-vllm-%d.tmp" % os.getpid()
        for kind, rel, detail in actions:
            full = os.path.join(self.path, rel)
            parent = os.path.dirname(full)
            if kind in ("link", "copy") and not os.path.isdir(parent):
                self.makedirs(parent)
            tmp = full + tmp_suffix
            if kind == "link":
                os.symlink(detail, tmp)
                os.rename(tmp, full)
                self.created.append(rel)
            elif kind == "copy":
                shutil.copyfile(os.path.join(self.source, rel), tmp)
                os.chmod(tmp, 0o644)
                with open(tmp, "rb") as handle:
                    os.fsync(handle.fileno())
                os.rename(tmp, full)
                self.created.append(rel)
            elif kind == "remove":
                os.unlink(full)
                self.removed.append(rel)
        copies = dict((rel, detail) for rel, (kind, detail) in wanted.items() if kind == "copy")
        record_path = os.path.join(self.path, RECORD_NAME)
        with open(record_path + tmp_suffix, "w") as handle:
            json.dump(dict(version=RECORD_VERSION, source=self.source, copies=copies), handle, indent=1, sort_keys=True)
            handle.write("\n")
        os.rename(record_path + tmp_suffix, record_path)

    def run(self):
        try:
            wanted, record, actions = self.plan()
        except NotComplete as exc:
            if not self.module.check_mode:
                raise
            # Check mode before the download this run would make: nothing to compare yet.
            return dict(changed=True, links=0, copies=0, created=[], removed=[], unlisted=[],
                        msg="check mode: %s; once it is complete its listed files are served from %s" % (exc, self.path))
        record_stale = record.get("source") != self.source or record.get("version") != RECORD_VERSION
        changed = bool(actions) or record_stale
        links = sum(1 for kind, _detail in wanted.values() if kind == "link")
        copies = len(wanted) - links
        result = dict(changed=changed, links=links, copies=copies, created=[], removed=[], unlisted=self.unlisted)
        if self.unlisted:
            self.module.warn("%s holds %d file(s) its manifest (the hub's listing) does not name, not served: %s" % (
                self.source, len(self.unlisted), ", ".join(self.unlisted[:5])))
        if changed and self.module._diff:
            result["diff"] = dict(before_header=self.path, after_header=self.path, before=self.listing(),
                                  after=self.listing(wanted))
        if changed and not self.module.check_mode:
            try:
                self.apply(wanted, record, actions)
            except (IOError, OSError) as exc:
                raise Failure("cannot update %s: %s (%s)" % (self.path, exc.strerror or exc, getattr(exc, "filename", "")))
            result.update(created=self.created, removed=self.removed)
        else:
            result.update(created=[rel for kind, rel, _d in actions if kind in ("link", "copy")],
                          removed=[rel for kind, rel, _d in actions if kind == "remove"])
        result["msg"] = "%s serves %s: %d links, %d copies; %d made, %d removed" % (
            self.path, self.source, links, copies, len(result["created"]), len(result["removed"])) + (
            "; %d file(s) of the source not in its manifest (the hub's listing), not served: %s" % (
                len(self.unlisted), ", ".join(self.unlisted[:5])) if self.unlisted else "")
        return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            source=dict(type="path", required=True),
            path=dict(type="path", required=True),
            copy_patterns=dict(type="list", elements="str", default=["*.json"]),
            reset_files=dict(type="list", elements="str", default=[".fleet-vllm-kv-cache.json"]),
        ),
        supports_check_mode=True,
    )
    try:
        module.exit_json(**ServedModel(module).run())
    except Failure as exc:
        module.fail_json(msg=to_native(exc))


if __name__ == "__main__":
    main()
