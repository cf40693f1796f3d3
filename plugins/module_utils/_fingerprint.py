# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fingerprint of the state a vLLM service would start with, compared with the one recorded
after its last verified start: fleet.vllm.vllm_fingerprint compares and records it, and
fleet.vllm.host_state compares it in the same module run as its look (option fingerprint), so that
a rerun that writes nothing needs no module run of its own for it."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time

from ansible.module_utils.common.text.converters import to_native

from ansible_collections.fleet.vllm.plugins.module_utils._units import parse_properties

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


def compute(module, params):
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
            if module.check_mode or params.get("model_not_built") == "restart":
                # A check-mode deploy of a new pin: the run would build this directory (fleet.vllm.vllm_weights, served)
                # before it compares; not there, it is not what runs, and the comparison says so.
                drift.append("model directory %s (not built yet)" % params["model_path"])
                fingerprint["model"] = {"path": os.path.realpath(params["model_path"]), "files": {}}
                return fingerprint, drift
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
    return parse_properties(out)


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


_ITEM = dict(name=dict(type="str", required=True), path=dict(type="path", required=True))

# vllm_fingerprint's options but record (host_state's fingerprint suboptions).
OPTIONS = dict(
    state_file=dict(type="path", required=True),
    files=dict(type="list", elements="dict", default=[], options=dict(_ITEM, live=dict(type="path"))),
    links=dict(type="list", elements="dict", default=[], options=dict(_ITEM, target=dict(type="path", required=True))),
    model_path=dict(type="path"),
    small_file_bytes=dict(type="int", default=16777216),
    unit=dict(type="str"),
)


def evaluate(module, params):
    """The comparison (vllm_fingerprint's return but changed), the fingerprint, the recorded and the
    pending records."""
    for kind in ("files", "links"):
        names = [item["name"] for item in params[kind]]
        if len(set(names)) != len(names):
            module.fail_json(msg="%s: each name may appear once (%s)" % (kind, ", ".join(names)))
    fingerprint, drift = compute(module, params)
    digest = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode("utf-8")).hexdigest()
    recorded = read_json(module, params["state_file"])
    pending = read_json(module, params["state_file"] + ".pending")
    recorded_digest = recorded.get("digest") if recorded else None
    matches = recorded_digest == digest
    in_place = not drift
    service = service_state(module, params["unit"])
    action, reason = decide(matches, in_place, service, pending, digest)
    result = dict(digest=digest, recorded_digest=recorded_digest, matches=matches, in_place=in_place,
                  differences=[] if matches else differences(recorded.get("fingerprint") if recorded else None, fingerprint),
                  drift=drift, service=service, action=action, reason=reason)
    return result, fingerprint, pending
