#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kv_cache_config
short_description: Strip or restore the KV-cache quantization a Hugging Face checkpoint declares
version_added: "0.1.0"
description:
  - Manages the KV-cache quantization declaration (C(kv_cache_scheme), C(kv_cache_quant_algo))
    of a Hugging Face model directory, in C(config.json)'s C(quantization_config) (flat and
    nested under C(quantization)) and in C(hf_quant_config.json), the places vLLM reads when
    it resolves C(--kv-cache-dtype auto).
  - With O(state=absent) every declaration is removed, so vLLM falls back to an unquantized KV
    cache in the model's dtype (bf16). This is the fix for a vLLM build that has no attention
    backend for an FP8 KV cache on the GPU, for example MLA models such as Kimi-K2.5-NVFP4 on
    compute capability 12.0 before vLLM commit a1257fd1ea93. It halves the context that fits,
    so do it only when needed.
  - What was removed is recorded in a small JSON file in the model directory, so that
    O(state=present) puts back exactly the same text at the same place in each file.
  - Every other byte of the files is kept, key order, indentation, trailing newline, unicode
    escapes and number spellings included. Edits go to a temporary file in the same directory and are
    moved into place atomically, keeping the file's mode and owner.
  - A file that is a symbolic link (the Hugging Face cache layout links snapshot files to
    shared blobs) is replaced by a patched regular file; the file it pointed to is never
    written.
  - Reports the KV-cache dtype vLLM resolves for C(--kv-cache-dtype auto) before and after,
    computed with vLLM's rules (C(fp8_e4m3), C(nvfp4), C(fp8), or C(auto) for no KV-cache
    quantization).
author:
  - fleet.vllm developers (@fleet-vllm)
attributes:
  diff_mode:
    description: Shows the before and after text of each file that changes, including the record file.
  platform:
    description: Runs on the host that holds the model directory.
extends_documentation_fragment: [fleet.vllm.attributes, fleet.vllm.attributes.changes_with_diff]
options:
  path:
    description:
      - The model directory, holding C(config.json) and possibly C(hf_quant_config.json).
    type: path
    required: true
  state:
    description:
      - V(absent) removes the KV-cache quantization declaration and records what was removed.
      - V(present) restores what an earlier V(absent) removed and deletes the record. Fails
        when nothing is recorded and the checkpoint declares nothing.
    type: str
    choices: [absent, present]
    default: absent
  backup:
    description:
      - Before changing a file, keep a copy of it next to it with a timestamp in its name.
      - Only files that really change are backed up.
    type: bool
    default: false
  record_name:
    description:
      - Name of the record file, in O(path), that holds what O(state=absent) removed.
    type: str
    default: .fleet-vllm-kv-cache.json
  decision_file:
    description:
      - Where the caller's decision for this directory is recorded (outside O(path), such as a file under
        C(/var/lib/fleet-vllm)), with O(decision_key). Every run reads it and returns its RV(decision) when it was
        recorded with this O(decision_key) and the model's JSON files and the record of O(record_name) are still what
        they were then; a run that is given O(decision) (and not in check mode) records it after its change.
      - So a rerun with the same inputs and untouched files needs no other question (such as the installed vLLM's,
        M(fleet.vllm.vllm_probe)) and no second run of this module.
    type: path
  decision_key:
    description:
      - A digest of everything the caller's decision depends on (its policy, the GPU, the vLLM venv, the code of its
        rules). Required with O(decision_file).
    type: str
  decision:
    description: The caller's decision to record in O(decision_file) (any JSON object), such as the M(fleet.vllm.kv_cache_decision) filter's result.
    type: dict
  vllm_version:
    description:
      - The version of the vLLM that will serve the model (C(vllm.__version__)), for the
        RV(kv_cache_dtype_before), RV(kv_cache_dtype_after) and RV(kv_cache_dtype_checkpoint) reports, which
        follow the collection's copy of vLLM's rules (C(module_utils/_kv_cache.py)); those changed between
        releases (NVFP4 KV from 0.20.0, C(MIXED_PRECISION) from 0.33.0, a nested C(text_config) declaration
        read for C(kimi_k25) before 0.32.0).
      - Unset, or a pre-release or nightly, the reports predict a quantized KV cache wherever any release would.
        They are a report and a question to ask - the installed vLLM's own answer (M(fleet.vllm.vllm_probe))
        decides whether a backend takes it. Which declarations are removed does not depend on it.
    type: str
notes:
  - An explicit C(--kv-cache-dtype bfloat16) is the alternative to editing the checkpoint, but it
    has failed in some vLLM versions; never use C(float16) for a bf16 model.
  - The record file is what makes O(state=present) possible. Deleting it loses the way back,
    short of copying the files again from the pristine download.
seealso:
  - name: vLLM quantized KV cache
    description: How vLLM uses the checkpoint's KV-cache scales.
    link: https://docs.vllm.ai/en/latest/features/quantization/quantized_kvcache.html
"""

EXAMPLES = r"""
- name: Let vLLM fall back to a bf16 KV cache on a build without FP8 MLA support for this GPU
  fleet.vllm.kv_cache_config:
    path: /srv/models/served/nvidia--Kimi-K2.5-NVFP4
    state: absent
  register: kv_fix

- name: Show what vLLM will resolve now
  ansible.builtin.debug:
    msg: "KV cache {{ kv_fix.kv_cache_dtype_before }} -> {{ kv_fix.kv_cache_dtype_after }}"

- name: Give the checkpoint its FP8 KV cache back once vLLM supports it, keeping backups
  fleet.vllm.kv_cache_config:
    path: /srv/models/served/nvidia--Kimi-K2.5-NVFP4
    state: present
    backup: true
"""

RETURN = r"""
decision:
  description:
    - The decision recorded in O(decision_file) when it holds O(decision_key) and the files it was recorded with are
      unchanged (read before this run acts); V(null) otherwise, or without O(decision_file).
  returned: always
  type: dict
decision_recorded:
  description: Whether this run wrote O(decision_file) (or would, in check mode).
  returned: always
  type: bool
state:
  description: The state asked for.
  returned: always
  type: str
  sample: absent
kv_cache_dtype_before:
  description: KV-cache dtype vLLM resolves for C(--kv-cache-dtype auto) before this task.
  returned: always
  type: str
  sample: fp8_e4m3
kv_cache_dtype_after:
  description: KV-cache dtype vLLM resolves for C(--kv-cache-dtype auto) after this task (or would, in check mode).
  returned: always
  type: str
  sample: auto
kv_cache_dtype_checkpoint:
  description:
    - KV-cache dtype the checkpoint asks for as downloaded, what vLLM resolves with every
      declaration in place. Taken from the record when the declarations are stripped, so it
      is the input for deciding whether the installed vLLM can serve it.
  returned: always
  type: str
  sample: fp8_e4m3
declared:
  description: The KV-cache declarations found in the files before this task, as C(file:dotted.path).
  returned: always
  type: list
  elements: str
  sample: ["config.json:quantization_config.kv_cache_scheme", "hf_quant_config.json:quantization.kv_cache_quant_algo"]
removed:
  description: Declarations removed by this task (or that would be, in check mode).
  returned: always
  type: list
  elements: str
  sample: ["config.json:quantization_config.kv_cache_scheme"]
restored:
  description: Declarations put back by this task (or that would be, in check mode).
  returned: always
  type: list
  elements: str
  sample: []
files_changed:
  description: Files written or deleted by this task (or that would be, in check mode), the record file included.
  returned: always
  type: list
  elements: str
  sample: ["/srv/models/served/m/.fleet-vllm-kv-cache.json", "/srv/models/served/m/config.json"]
record_file:
  description: Path of the record file. It exists after O(state=absent) removed something.
  returned: always
  type: str
  sample: /srv/models/served/nvidia--Kimi-K2.5-NVFP4/.fleet-vllm-kv-cache.json
backup_files:
  description: Backup copies made by this task, one per changed file when O(backup=true).
  returned: always
  type: list
  elements: str
  sample: ["/srv/models/served/m/config.json.12345.2026-11-29@21:30:00~"]
msg:
  description: What was done, in one line.
  returned: always
  type: str
  sample: "stripped 2 KV-cache declaration(s): vLLM now resolves kv-cache-dtype auto to auto (was fp8_e4m3)"
"""

import json
import os
import shutil
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.fleet.vllm.plugins.module_utils._json_edit import (
    JsonDocError,
    insert_member,
    parse,
    remove_member,
)
from ansible_collections.fleet.vllm.plugins.module_utils._kv_cache import (
    CONFIG_FILE,
    HF_QUANT_FILE,
    QuantConfigError,
    declaration_sites,
    get_path,
    resolve_kv_cache_dtype,
)

RECORD_FORMAT = 1
MODEL_FILES = (CONFIG_FILE, HF_QUANT_FILE)


def _site_name(file_name, container, key):
    return "%s:%s" % (file_name, ".".join(list(container) + [key]))


class KvCacheConfig(object):
    def __init__(self, module):
        self.module = module
        self.path = module.params["path"]
        self.record_path = os.path.join(self.path, module.params["record_name"])
        # file name -> dict(path=, text=, doc=, root=) for the files that exist
        self.files = {}
        self.record_text = ""
        self.result = dict(
            changed=False,
            state=module.params["state"],
            kv_cache_dtype_before="auto",
            kv_cache_dtype_after="auto",
            kv_cache_dtype_checkpoint="auto",
            declared=[],
            removed=[],
            restored=[],
            files_changed=[],
            record_file=self.record_path,
            backup_files=[],
            decision=None,
            decision_recorded=False,
            msg="",
        )

    def fail(self, msg, **kwargs):
        result = dict(self.result, **kwargs)
        result["msg"] = msg
        result["changed"] = False
        self.module.fail_json(**result)

    # ---- reading -------------------------------------------------------------------------

    def read_text(self, path, label):
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except (IOError, OSError) as exc:
            self.fail("cannot read %s: %s" % (path, to_native(exc.strerror or exc)))
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.fail("%s is not UTF-8 text (byte %d): %s is expected to be JSON" % (path, exc.start, label))

    def load(self):
        if not os.path.exists(self.path):
            self.fail("model directory %s does not exist; set path to the served model directory" % self.path)
        if not os.path.isdir(self.path):
            self.fail("path %s is not a directory; set path to the model directory that holds config.json" % self.path)
        for name in MODEL_FILES:
            file_path = os.path.join(self.path, name)
            if not os.path.lexists(file_path):
                if name == CONFIG_FILE:
                    self.fail(
                        "%s has no config.json: it is not a Hugging Face model directory, or the "
                        "download is incomplete" % self.path
                    )
                continue
            if os.path.islink(file_path) and not os.path.exists(file_path):
                self.fail("%s is a symbolic link to %s, which does not exist" % (file_path, os.readlink(file_path)))
            text = self.read_text(file_path, name)
            try:
                doc, root = parse(text, file_path)
            except JsonDocError as exc:
                self.fail(to_native(exc))
            if not isinstance(doc, dict):
                self.fail("%s holds a JSON %s at the top level, expected an object" % (file_path, type(doc).__name__))
            self.files[name] = dict(path=file_path, text=text, doc=doc, root=root)

    def load_record(self):
        if not os.path.lexists(self.record_path):
            return None
        text = self.record_text = self.read_text(self.record_path, "the record of stripped declarations")
        try:
            record, dummy = parse(text, self.record_path)
        except JsonDocError as exc:
            self.fail("%s; it records what state=absent removed: restore it from a backup, or copy the "
                      "model's JSON files again from the pristine download and delete it" % to_native(exc))
        entries = record.get("removed") if isinstance(record, dict) else None
        valid = isinstance(entries, list) and all(
            isinstance(e, dict)
            and e.get("file") in MODEL_FILES
            and isinstance(e.get("container"), list)
            and e.get("key")
            and isinstance(e.get("edit"), dict)
            and isinstance(e["edit"].get("text"), str)
            for e in entries
        )
        if not valid or record.get("format") != RECORD_FORMAT:
            self.fail("%s is not a record written by fleet.vllm.kv_cache_config (format %d); "
                      "move it away if it belongs to something else" % (self.record_path, RECORD_FORMAT))
        return record

    def resolve(self, files):
        config = files[CONFIG_FILE]["doc"]
        hf_quant = files[HF_QUANT_FILE]["doc"] if HF_QUANT_FILE in files else None
        try:
            return resolve_kv_cache_dtype(config, hf_quant, vllm_version=self.module.params["vllm_version"])
        except QuantConfigError as exc:
            self.fail("%s: %s" % (self.path, to_native(exc)))

    def sites(self, files):
        found = []
        for name in MODEL_FILES:
            if name not in files:
                continue
            try:
                found.extend((name, container, key) for container, key in declaration_sites(name, files[name]["doc"]))
            except QuantConfigError as exc:
                self.fail("%s: %s" % (self.path, to_native(exc)))
        return found

    # ---- planning ------------------------------------------------------------------------

    @staticmethod
    def reparse(entry, text):
        doc, root = parse(text, entry["path"])
        return dict(entry, text=text, doc=doc, root=root)

    def plan_absent(self, record):
        """New file states and record after removing every declaration."""
        new_files = dict(self.files)
        removals = []
        for name, container, key in self.sites(self.files):
            entry = new_files[name]
            value = get_path(entry["doc"], container + [key])
            text, edit = remove_member(entry["text"], entry["root"], container, key)
            new_files[name] = self.reparse(entry, text)
            removals.append(dict(file=name, container=container, key=key, value=value, edit=edit))
        if not removals:
            return new_files, record, removals
        kept = []
        if record:
            # A re-copied file brought declarations back: the new removal replaces the old entry.
            fresh = set((r["file"], tuple(r["container"]), r["key"]) for r in removals)
            kept = [e for e in record["removed"] if (e["file"], tuple(e["container"]), e["key"]) not in fresh]
        new_record = dict(
            format=RECORD_FORMAT,
            written_by="fleet.vllm.kv_cache_config",
            kv_cache_dtype_before=(record or {}).get("kv_cache_dtype_before") or self.result["kv_cache_dtype_before"],
            removed=kept + removals,
        )
        return new_files, new_record, removals

    def plan_present(self, record):
        """New file states after putting back what the record holds (in reverse order)."""
        new_files = dict(self.files)
        restored = []
        for entry in reversed(record["removed"]):
            name = entry["file"]
            if name not in new_files:
                self.fail("%s records a declaration in %s, which is gone from %s; copy the model's files "
                          "again from the pristine download" % (self.record_path, name, self.path))
            current = new_files[name]
            container = entry["container"]
            path = container + [entry["key"]]
            site = _site_name(name, container, entry["key"])
            existing = get_path(current["doc"], container)
            if isinstance(existing, dict) and entry["key"] in existing:
                if existing[entry["key"]] == entry.get("value"):
                    continue  # already back (for example a re-copied file)
                self.fail("cannot restore %s: the file now has %s = %s, the record %s; decide which is "
                          "right, fix the file and delete %s" % (
                              site, ".".join(path), json.dumps(existing[entry["key"]]),
                              json.dumps(entry.get("value")), self.record_path))
            try:
                text = insert_member(current["text"], current["root"], container, entry["key"], entry["edit"])
                new_files[name] = self.reparse(current, text)
            except JsonDocError as exc:
                self.fail("cannot restore %s in %s: %s" % (site, current["path"], to_native(exc)))
            restored.append(site)
        restored.reverse()
        return new_files, restored

    # ---- writing -------------------------------------------------------------------------

    def check_writable(self, file_path):
        directory = os.path.dirname(file_path)
        try:
            readonly_fs = bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
        except OSError:
            readonly_fs = False
        if readonly_fs:
            self.fail("%s is on a read-only file system; serve the model from a writable copy "
                      "(the fleet.vllm.vllm_weights role makes one)" % file_path)
        if not os.access(directory, os.W_OK | os.X_OK):
            self.fail("cannot write %s: the directory %s is not writable by this user; run the task "
                      "with become, or fix the directory's owner" % (file_path, directory))
        if os.path.exists(file_path) and not os.path.islink(file_path) and not os.access(file_path, os.W_OK):
            self.fail("cannot write %s: the file is read-only for this user; run the task with become, "
                      "or make it writable" % file_path)

    def write_atomic(self, dest, text):
        fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(dest), suffix=".tmp", dir=os.path.dirname(dest))
        self.module.add_cleanup_file(tmp)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(text.encode("utf-8"))
                handle.flush()
                os.fsync(handle.fileno())
        except (IOError, OSError) as exc:
            self.fail("cannot write a temporary file next to %s: %s" % (dest, to_native(exc)))
        # atomic_move gives the temporary file the mode and owner of dest (of what dest points to
        # when it is a link), then renames it over dest: a link is replaced by the regular file
        # and the shared blob it pointed to is never opened for writing.
        self.module.atomic_move(tmp, dest)

    def backup(self, path):
        """A date-marked copy of what path holds (basename.PID.YYYY-MM-DD@HH:MM:SS~, as
        AnsibleModule.backup_local names it), beside path.

        Not backup_local itself: on ansible-core 2.16 its preserved_copy hands the source's file
        attributes to chattr even when lsattr has none to report, and lsattr reports none for a
        symbolic link - the Hugging Face cache layout, where config.json links into blobs/ - so the
        backup failed with "chattr failed ... Operation not supported" (2.16's
        set_attributes_if_different runs chattr for an empty attribute string; 2.17.0 skips it). The
        copy follows the link (the content is what a restore needs), keeps the mode and times
        (copy2) and the owner of what path resolves to; file attributes are not copied."""
        dest = "%s.%s.%s" % (path, os.getpid(), time.strftime("%Y-%m-%d@%H:%M:%S~", time.localtime()))
        try:
            shutil.copy2(path, dest)
            source = os.stat(path)
            if (os.stat(dest).st_uid, os.stat(dest).st_gid) != (source.st_uid, source.st_gid):
                os.chown(dest, source.st_uid, source.st_gid)
        except (IOError, OSError, shutil.Error) as exc:
            self.fail("cannot back up %s to %s: %s (no file of the checkpoint was changed; backup: false makes no copy)" % (
                path, dest, to_native(exc)))
        return dest

    def diff_entry(self, file_path, before, after):
        return dict(before_header=file_path, after_header=file_path, before=before, after=after)

    # ---- the recorded decision -------------------------------------------------------------

    def file_checksums(self):
        """SHA-256 of the model's JSON files and of the record, as they are on disk now (null: absent)."""
        found = {}
        for name in MODEL_FILES + (os.path.basename(self.record_path),):
            file_path = os.path.join(self.path, name)
            found[name] = self.module.sha256(file_path) if os.path.isfile(file_path) else None
        return found

    def read_decision(self):
        params = self.module.params
        if not params["decision_file"] or not os.path.exists(params["decision_file"]):
            return None
        try:
            with open(params["decision_file"], "rb") as handle:
                data = json.loads(handle.read().decode("utf-8"))
        except (IOError, OSError, ValueError):
            return None  # unreadable or not ours: decided again and rewritten
        if (not isinstance(data, dict) or data.get("format") != RECORD_FORMAT or data.get("key") != params["decision_key"]
                or data.get("files") != self.file_checksums() or not isinstance(data.get("decision"), dict)):
            return None
        return data["decision"]

    def record_decision(self):
        params = self.module.params
        if not params["decision_file"] or params["decision"] is None:
            return
        text = json.dumps(dict(format=RECORD_FORMAT, key=params["decision_key"], decision=params["decision"],
                               files=self.file_checksums()), indent=2, sort_keys=True) + "\n"
        try:
            with open(params["decision_file"], "rb") as handle:
                if handle.read().decode("utf-8") == text:
                    return
        except (IOError, OSError, ValueError):
            pass
        self.result["decision_recorded"] = self.result["changed"] = True
        if self.module.check_mode:
            return
        directory = os.path.dirname(params["decision_file"])
        try:
            if not os.path.isdir(directory):
                os.makedirs(directory, 0o755)
        except OSError as exc:
            self.fail("cannot create %s for decision_file: %s" % (directory, to_native(exc)))
        self.write_atomic(params["decision_file"], text)
        os.chmod(params["decision_file"], 0o644)

    # ---- main ----------------------------------------------------------------------------

    def run(self):
        state = self.module.params["state"]
        self.load()
        record = self.load_record()
        self.result["kv_cache_dtype_before"] = self.resolve(self.files)
        self.result["kv_cache_dtype_checkpoint"] = (
            (record or {}).get("kv_cache_dtype_before") or self.result["kv_cache_dtype_before"]
        )
        self.result["declared"] = [_site_name(*site) for site in self.sites(self.files)]
        self.result["decision"] = self.read_decision()

        if state == "absent":
            new_files, new_record, removals = self.plan_absent(record)
            self.result["removed"] = [_site_name(r["file"], r["container"], r["key"]) for r in removals]
            record_text = (json.dumps(new_record, indent=2, sort_keys=True) + "\n") if removals else None
        else:
            if record is None:
                if self.result["declared"]:
                    new_files, record_text = self.files, None
                else:
                    self.fail("nothing recorded to restore: %s does not exist and %s declares no KV-cache "
                              "quantization; copy the model's JSON files again from the pristine download "
                              "to get the original declaration back" % (self.record_path, self.path))
            else:
                new_files, restored = self.plan_present(record)
                self.result["restored"] = restored
                record_text = ""  # the record is deleted once everything is back
        self.result["kv_cache_dtype_after"] = self.resolve(new_files)

        changes = [name for name in MODEL_FILES if name in self.files and new_files[name]["text"] != self.files[name]["text"]]
        record_changes = record_text is not None
        diffs = []
        if record_changes:
            before = self.record_text if record else ""
            diffs.append(self.diff_entry(self.record_path, before, record_text))
            self.result["files_changed"].append(self.record_path)
        for name in changes:
            diffs.append(self.diff_entry(self.files[name]["path"], self.files[name]["text"], new_files[name]["text"]))
            self.result["files_changed"].append(self.files[name]["path"])

        self.result["changed"] = bool(changes or record_changes)
        self.result["msg"] = self.message(state, record)
        if self.module._diff and self.result["changed"]:
            self.result["diff"] = diffs

        if self.result["changed"]:
            for path in self.result["files_changed"]:
                self.check_writable(path)
        if self.module.check_mode or not self.result["changed"]:
            self.record_decision()
            return self.result

        # Write order keeps the way back at every step: on absent the record is written before
        # any declaration leaves a file; on present it is deleted only after all are back.
        # The backups come first, all of them: one that cannot be made stops the task before any
        # file has changed.
        if self.module.params["backup"]:
            for name in changes:
                self.result["backup_files"].append(self.backup(self.files[name]["path"]))
            if state == "present" and record is not None:
                self.result["backup_files"].append(self.backup(self.record_path))
        if state == "absent":
            self.write_atomic(self.record_path, record_text)
        for name in changes:
            self.write_atomic(self.files[name]["path"], new_files[name]["text"])
        if state == "present" and record is not None:
            try:
                os.unlink(self.record_path)
            except OSError as exc:
                self.fail("restored the declarations but cannot delete %s: %s" % (self.record_path, to_native(exc)))
        self.record_decision()
        return self.result

    def message(self, state, record):
        before, after = self.result["kv_cache_dtype_before"], self.result["kv_cache_dtype_after"]
        if state == "absent":
            if self.result["removed"]:
                return ("stripped %d KV-cache declaration(s): vLLM resolves kv-cache-dtype auto to %s (was %s)"
                        % (len(self.result["removed"]), after, before))
            if record:
                return "KV-cache declaration already stripped (recorded in %s); vLLM resolves auto to %s" % (
                    self.record_path, after)
            return "the checkpoint declares no KV-cache quantization: nothing to strip (vLLM resolves auto to %s)" % after
        if record is None:
            return "KV-cache declaration present, nothing recorded to restore (vLLM resolves auto to %s)" % after
        if self.result["restored"]:
            return ("restored %d KV-cache declaration(s): vLLM resolves kv-cache-dtype auto to %s (was %s)"
                    % (len(self.result["restored"]), after, before))
        return "KV-cache declarations were already back; the stale record is removed (vLLM resolves auto to %s)" % after


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            state=dict(type="str", choices=["absent", "present"], default="absent"),
            backup=dict(type="bool", default=False),
            record_name=dict(type="str", default=".fleet-vllm-kv-cache.json"),
            vllm_version=dict(type="str"),
            decision_file=dict(type="path"),
            decision_key=dict(type="str", no_log=False),
            decision=dict(type="dict"),
        ),
        required_by=dict(decision_file=["decision_key"], decision=["decision_file"]),
        supports_check_mode=True,
    )
    record_name = module.params["record_name"]
    if not record_name or "/" in record_name or record_name in (".", "..") or record_name in MODEL_FILES:
        module.fail_json(msg="record_name %r must be a plain file name other than %s" % (record_name, ", ".join(MODEL_FILES)))
    module.exit_json(**KvCacheConfig(module).run())


if __name__ == "__main__":
    main()
