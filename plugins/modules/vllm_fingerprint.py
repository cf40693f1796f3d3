#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_fingerprint
short_description: Compare the staged state of a vLLM service with the one it runs, and record what it runs
version_added: "0.1.0"
description:
  - Computes the fingerprint of the state a vLLM service would start with - checksums of the staged
    O(files) (its unit and environment files, by name), the venv and served directory the O(links)
    point at, and the served model directory O(model_path) (checksums of its small files, names and
    sizes of its large ones, such as the safetensors shards).
  - Compares it with the one stored in O(state_file) after the last verified start, and with what is
    in place - whether each file's live copy equals the staged one and each link points at its
    target. From that and the service's state (O(unit)) it says what the rolling phase of a deploy
    must do - RV(action).
  - An interrupted rollout leaves the service restarted on the staged state without a record. The
    record O(record=pending), stored just before a restart, lets a later run see that - the service
    started after it, on this boot, with the files in place - and adopt the running service
    (RV(action=adopt)) instead of restarting it again.
  - With O(record=running), stores the fingerprint in O(state_file) (root-only, written atomically)
    and drops the pending record.
author:
  - fleet.vllm developers (@fleet-vllm)
attributes:
  check_mode:
    support: full
    description: Reads in check mode as without it; with O(record) reports what it would store and writes nothing.
  diff_mode:
    support: none
    description: The fingerprint holds checksums of secret files; it is not shown as a diff.
  platform:
    support: full
    platforms: posix
    description: Runs on the host of the service.
options:
  state_file:
    description: Where the fingerprint of the last verified start is kept. The pending record is O(state_file) with C(.pending) appended.
    type: path
    required: true
  files:
    description:
      - The files the service reads, by name - C(path) is the staged copy the next start will read (what counts),
        C(live) where the service reads it (compared with C(path) to tell whether the switch was made). A missing
        file counts as missing.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: A name for the file in the fingerprint (for example V(unit)); staged and live copies compare under it.
        type: str
        required: true
      path:
        description: The staged copy.
        type: path
        required: true
      live:
        description: The live copy. Default O(files[].path) (the file is not staged).
        type: path
  links:
    description:
      - Links the service's paths go through, by name - C(path) is the link (for example C(/opt/vllm/current)),
        C(target) where the next start needs it to point. What counts is where C(target) resolves to.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: A name for the link in the fingerprint.
        type: str
        required: true
      path:
        description: The link.
        type: path
        required: true
      target:
        description: Where it must point.
        type: path
        required: true
  model_path:
    description: The served model directory the next start reads. Files up to O(small_file_bytes) count by checksum, larger ones by name and size.
    type: path
  small_file_bytes:
    description: Size up to which a model file counts by its checksum.
    type: int
    default: 16777216
  unit:
    description: The systemd unit of the service. Without it, RV(service) is empty and RV(action) ignores the service.
    type: str
  record:
    description:
      - V(pending) stores the staged fingerprint with this boot and this moment, just before a restart.
      - V(running) stores it as what the service runs, after it was verified, and drops the pending record.
      - V(none) only compares.
    type: str
    choices: [none, pending, running]
    default: none
"""

EXAMPLES = r"""
- name: Compare the staged state with the one that runs
  fleet.vllm.vllm_fingerprint:
    state_file: /var/lib/fleet-vllm/vllm.fingerprint
    files:
      - {name: unit, path: /var/lib/fleet-vllm/staged/vllm.service, live: /etc/systemd/system/vllm.service}
      - {name: nccl, path: /var/lib/fleet-vllm/staged/nccl.env, live: /etc/fleet-vllm/nccl.env}
    links:
      - {name: venv, path: /opt/vllm/current, target: /opt/vllm/venvs/pypi-0.33.0}
    model_path: /srv/vllm/models/served/nvidia--Kimi-K2.5-NVFP4/variants/0123456789ab-pypi-0.33.0
    unit: vllm.service
  register: fingerprint
# fingerprint.action: none | start | restart | adopt

- name: Record it after the new state was verified
  fleet.vllm.vllm_fingerprint:
    state_file: /var/lib/fleet-vllm/vllm.fingerprint
    files:
      - {name: unit, path: /var/lib/fleet-vllm/staged/vllm.service, live: /etc/systemd/system/vllm.service}
    record: running
"""

RETURN = r"""
digest:
  description: SHA-256 of the staged fingerprint.
  returned: always
  type: str
recorded_digest:
  description: The digest stored in O(state_file) before this run; V(null) when there was none.
  returned: always
  type: str
matches:
  description: Whether the staged fingerprint equals the recorded one (what runs was verified with this state).
  returned: always
  type: bool
in_place:
  description: Whether every live file equals its staged copy and every link points at its target.
  returned: always
  type: bool
differences:
  description: What differs between the staged fingerprint and the recorded one, one item per file, link or model file.
  returned: always
  type: list
  elements: str
  sample: ["file nccl", "link venv", "model config.json"]
drift:
  description: The live files and links that differ from the staged ones (empty once the switch was made).
  returned: always
  type: list
  elements: str
  sample: ["file unit (/etc/systemd/system/vllm.service)"]
service:
  description: The unit's ActiveState, SubState, Result, UnitFileState, LoadState, NeedDaemonReload and InvocationID; empty without O(unit).
  returned: always
  type: dict
action:
  description:
    - What the rolling phase must do - V(none) (the service runs the staged state, verified), V(start) (the staged
      state was verified but the service is not running, or is not enabled), V(restart) (switch to the staged state
      and restart), V(adopt) (an interrupted rollout already restarted the service on the staged state - verify it
      and record it, without restarting).
  returned: always
  type: str
reason:
  description: Why RV(action), in a few words.
  returned: always
  type: str
"""

import hashlib
import json
import os
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

SERVICE_PROPERTIES = ("ActiveState", "SubState", "Result", "UnitFileState", "LoadState", "NeedDaemonReload",
                      "InvocationID", "ExecMainStartTimestampMonotonic")


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_digest(module, path):
    try:
        return sha256(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        module.fail_json(msg="cannot read %s: %s" % (path, to_native(exc)))


def model_entries(root, small):
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
    drift = []
    for item in params["files"]:
        staged = file_digest(module, item["path"])
        fingerprint["files"][item["name"]] = staged
        live = item.get("live") or item["path"]
        if live != item["path"] and file_digest(module, live) != staged:
            drift.append("file %s (%s)" % (item["name"], live))
    for item in params["links"]:
        target = os.path.realpath(item["target"]) if os.path.lexists(item["target"]) else None
        fingerprint["links"][item["name"]] = target
        actual = os.path.realpath(item["path"]) if os.path.lexists(item["path"]) else None
        if actual != target:
            drift.append("link %s (%s)" % (item["name"], item["path"]))
    if params["model_path"]:
        if not os.path.isdir(params["model_path"]):
            module.fail_json(msg="the model directory %s does not exist" % params["model_path"])
        fingerprint["model"] = {"path": os.path.realpath(params["model_path"]),
                                "files": model_entries(params["model_path"], params["small_file_bytes"])}
    return fingerprint, drift


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


def read_json(module, path):
    try:
        with open(path) as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) else None
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        module.warn("ignoring the unreadable record %s: %s" % (path, to_native(exc)))
        return None


def write_json(module, path, data):
    directory = os.path.dirname(path) or "."
    try:
        if not os.path.isdir(directory):
            os.makedirs(directory, 0o700)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".fingerprint.")
        module.add_cleanup_file(tmp)
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(data, sort_keys=True, indent=1) + "\n")
    except OSError as exc:
        module.fail_json(msg="cannot write %s: %s" % (path, to_native(exc)))
    # mkstemp made it 0600; a rename keeps that (atomic_move would apply the umask's default mode)
    try:
        os.rename(tmp, path)
    except OSError as exc:
        module.fail_json(msg="cannot write %s: %s" % (path, to_native(exc)))


def boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip()
    except OSError:
        return None


def monotonic_usec():
    # systemd's *TimestampMonotonic values are CLOCK_MONOTONIC in microseconds, as time.monotonic() is.
    return int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1000000)


def service_state(module, unit):
    if not unit:
        return {}
    systemctl = module.get_bin_path("systemctl", required=True)
    argv = [systemctl, "show", unit, "--property=" + ",".join(SERVICE_PROPERTIES)]
    rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C", "SYSTEMD_PAGER": ""})
    if rc != 0:
        module.fail_json(msg="systemctl show %s failed (rc %d): %s" % (unit, rc, err.strip()), cmd=argv)
    state = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            state[key] = value
    return state


def decide(matches, in_place, service, pending, digest):
    """What the rolling phase must do, and why."""
    if not service:
        return ("none", "the staged state was verified") if matches and in_place else ("restart", "the staged state differs")
    active = service.get("ActiveState") == "active"
    enabled = service.get("UnitFileState") == "enabled"
    if matches and in_place:
        if active and enabled:
            return "none", "the service runs the staged state, verified"
        return "start", "the service is %s and %s" % (service.get("ActiveState"), service.get("UnitFileState") or "not installed")
    if in_place and active and pending and pending.get("digest") == digest and service.get("NeedDaemonReload") != "yes":
        try:
            started = int(service.get("ExecMainStartTimestampMonotonic") or 0)
        except ValueError:
            started = 0
        if pending.get("boot_id") == boot_id() and started > int(pending.get("monotonic_usec") or 0):
            return "adopt", "the service was restarted on the staged state by an interrupted run"
    return "restart", "the staged state differs from what runs"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state_file=dict(type="path", required=True),
            files=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True),
                path=dict(type="path", required=True),
                live=dict(type="path"),
            )),
            links=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True),
                path=dict(type="path", required=True),
                target=dict(type="path", required=True),
            )),
            model_path=dict(type="path"),
            small_file_bytes=dict(type="int", default=16777216),
            unit=dict(type="str"),
            record=dict(type="str", choices=["none", "pending", "running"], default="none"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    for kind in ("files", "links"):
        names = [item["name"] for item in params[kind]]
        if len(set(names)) != len(names):
            module.fail_json(msg="%s: each name may appear once (%s)" % (kind, ", ".join(names)))
    state_file = params["state_file"]
    pending_file = state_file + ".pending"
    fingerprint, drift = compute(module)
    digest = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode("utf-8")).hexdigest()
    recorded = read_json(module, state_file)
    pending = read_json(module, pending_file)
    recorded_digest = recorded.get("digest") if recorded else None
    matches = recorded_digest == digest
    in_place = not drift
    service = service_state(module, params["unit"])
    action, reason = decide(matches, in_place, service, pending, digest)
    changed = False
    if params["record"] == "pending":
        changed = not (pending and pending.get("digest") == digest)
        if not module.check_mode:
            # Always rewritten: the moment counts, not only the digest.
            write_json(module, pending_file, {"digest": digest, "boot_id": boot_id(), "monotonic_usec": monotonic_usec()})
    elif params["record"] == "running":
        changed = not matches or pending is not None
        if not module.check_mode:
            if not matches:
                write_json(module, state_file, {"digest": digest, "fingerprint": fingerprint})
            if pending is not None:
                try:
                    os.unlink(pending_file)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    module.fail_json(msg="cannot remove %s: %s" % (pending_file, to_native(exc)))
    module.exit_json(changed=changed, digest=digest, recorded_digest=recorded_digest, matches=matches,
                     in_place=in_place, differences=[] if matches else differences(
                         recorded.get("fingerprint") if recorded else None, fingerprint),
                     drift=drift, service=service, action=action, reason=reason)


if __name__ == "__main__":
    main()
