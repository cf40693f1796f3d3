#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_fingerprint
short_description: Fingerprint what a vLLM service reads, and compare it with the one of its last start
version_added: "0.1.0"
description:
  - Computes a fingerprint of what a service reads - checksums of O(files) (its unit, its
    environment files), where each of O(links) resolves to (the venv's C(current) link), and the
    served model directory O(model_path) (checksums of its small files, names and sizes of its
    large ones, such as the safetensors shards).
  - Compares it with the one stored in O(state_file) after the last successful start, and says
    what differs. Restarting a server that loads 500 GB only when this differs keeps reruns from
    causing downtime.
  - With O(record=true) stores the fingerprint in O(state_file) (root-only, written atomically).
author:
  - fleet.vllm developers (@fleet-vllm)
attributes:
  check_mode:
    support: full
    description: Reads in check mode as without it; with O(record=true) reports what it would store and writes nothing.
  diff_mode:
    support: none
    description: The fingerprint holds checksums of secret files; it is not shown as a diff.
  platform:
    support: full
    platforms: posix
    description: Runs on the host of the service.
options:
  state_file:
    description: Where the fingerprint of the last successful start is kept.
    type: path
    required: true
  files:
    description: Files whose content counts. A missing file counts as missing.
    type: list
    elements: path
    default: []
  links:
    description: Paths whose resolved location counts (C(realpath)), such as the venv link.
    type: list
    elements: path
    default: []
  model_path:
    description: The served model directory. Files up to O(small_file_bytes) count by checksum, larger ones by name and size.
    type: path
  small_file_bytes:
    description: Size up to which a model file counts by its checksum.
    type: int
    default: 16777216
  record:
    description: Store the fingerprint in O(state_file).
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Compare what the service reads with its last start
  fleet.vllm.vllm_fingerprint:
    state_file: /var/lib/fleet-vllm/vllm.fingerprint
    files: [/etc/systemd/system/vllm.service, /etc/fleet-vllm/nccl.env]
    links: [/opt/vllm/current]
    model_path: /srv/vllm/models/served/nvidia--Kimi-K2.5-NVFP4
  register: fingerprint

- name: Record it after a successful start
  fleet.vllm.vllm_fingerprint:
    state_file: /var/lib/fleet-vllm/vllm.fingerprint
    files: [/etc/systemd/system/vllm.service, /etc/fleet-vllm/nccl.env]
    links: [/opt/vllm/current]
    model_path: /srv/vllm/models/served/nvidia--Kimi-K2.5-NVFP4
    record: true
"""

RETURN = r"""
digest:
  description: SHA-256 of the fingerprint.
  returned: always
  type: str
recorded_digest:
  description: The digest stored in O(state_file) before this run; V(null) when there was none.
  returned: always
  type: str
matches:
  description: Whether the fingerprint equals the recorded one.
  returned: always
  type: bool
differences:
  description: What differs from the recorded fingerprint, one item per file, link or model file.
  returned: always
  type: list
  elements: str
  sample: ["file /etc/fleet-vllm/nccl.env", "model config.json"]
"""

import hashlib
import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def model_entries(module, root, small):
    entries = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            try:
                st = os.stat(path)
                entries[rel] = ("sha256:" + sha256(path)) if st.st_size <= small else ("size:%d" % st.st_size)
            except OSError as exc:
                # a dangling link to a shard: the model is broken, and that differs from before
                entries[rel] = "unreadable:%s" % exc.strerror
    return entries


def compute(module):
    params = module.params
    fingerprint = {"files": {}, "links": {}, "model": None}
    for path in params["files"]:
        try:
            fingerprint["files"][path] = sha256(path)
        except FileNotFoundError:
            fingerprint["files"][path] = None
        except OSError as exc:
            module.fail_json(msg="cannot read %s: %s" % (path, to_native(exc)))
    for path in params["links"]:
        fingerprint["links"][path] = os.path.realpath(path) if os.path.lexists(path) else None
    if params["model_path"]:
        if not os.path.isdir(params["model_path"]):
            module.fail_json(msg="the model directory %s does not exist" % params["model_path"])
        fingerprint["model"] = {"path": os.path.realpath(params["model_path"]),
                                "files": model_entries(module, params["model_path"], params["small_file_bytes"])}
    return fingerprint


def differences(old, new):
    if not old:
        return ["no fingerprint recorded"]
    out = []
    for kind in ("files", "links"):
        for key in sorted(set(old.get(kind) or {}) | set(new[kind])):
            if (old.get(kind) or {}).get(key) != new[kind].get(key):
                out.append("%s %s" % (kind[:-1], key))
    old_model, new_model = old.get("model") or {}, new["model"] or {}
    if old_model.get("path") != new_model.get("path"):
        out.append("model directory %s" % new_model.get("path"))
    old_files, new_files = old_model.get("files") or {}, new_model.get("files") or {}
    for key in sorted(set(old_files) | set(new_files)):
        if old_files.get(key) != new_files.get(key):
            out.append("model %s" % key)
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state_file=dict(type="path", required=True),
            files=dict(type="list", elements="path", default=[]),
            links=dict(type="list", elements="path", default=[]),
            model_path=dict(type="path"),
            small_file_bytes=dict(type="int", default=16777216),
            record=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    state_file = module.params["state_file"]
    fingerprint = compute(module)
    text = json.dumps(fingerprint, sort_keys=True)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    recorded = None
    try:
        with open(state_file) as handle:
            recorded = json.load(handle)
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as exc:
        module.warn("ignoring the unreadable fingerprint in %s: %s" % (state_file, to_native(exc)))
    recorded_digest = recorded.get("digest") if isinstance(recorded, dict) else None
    diffs = differences(recorded.get("fingerprint") if isinstance(recorded, dict) else None, fingerprint)
    matches = recorded_digest == digest
    changed = False
    if module.params["record"] and not matches:
        changed = True
        if not module.check_mode:
            directory = os.path.dirname(state_file) or "."
            try:
                if not os.path.isdir(directory):
                    os.makedirs(directory, 0o700)
                fd, tmp = tempfile.mkstemp(dir=directory, prefix=".fingerprint.")
                module.add_cleanup_file(tmp)
                with os.fdopen(fd, "w") as handle:
                    handle.write(json.dumps({"digest": digest, "fingerprint": fingerprint}, sort_keys=True, indent=1) + "\n")
            except OSError as exc:
                module.fail_json(msg="cannot write %s: %s" % (state_file, to_native(exc)))
            module.atomic_move(tmp, state_file)
            module.set_mode_if_different(state_file, "0600", False)
    module.exit_json(changed=changed, digest=digest, recorded_digest=recorded_digest, matches=matches,
                     differences=diffs if not matches else [])


if __name__ == "__main__":
    main()
