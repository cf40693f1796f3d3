#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_state
short_description: Read in one module run what the fleet.vllm roles look at before they act
version_added: "0.3.0"
description:
  - An info module. It reads, in one run on the host, the things the fleet.vllm roles check before
    deciding whether a task must run at all - which files exist, the groups that own some device
    nodes, accounts, the host's network addresses and the state of systemd units - so that a rerun
    with nothing to change costs one module run instead of one per thing looked at (each module run
    costs a Python start and the compilation of its code on the host).
  - Given the O(directories) and O(files) a M(fleet.vllm.managed_files) task would write (the same
    options, compared the same way), it lists in RV(out_of_place) those that task would change, so
    that the task can be skipped when the list is empty. O(files[].validate) is not used here. The
    contents are compared on the host and never returned.
  - Given O(fingerprint), it compares the staged state of a vLLM service with the one recorded after
    its last verified start, as M(fleet.vllm.vllm_fingerprint) does without its
    O(fleet.vllm.vllm_fingerprint#module:record), and returns that module's answer in RV(fingerprint) - valid
    while nothing it covers is written after this look.
  - It never changes anything and runs the same in check mode.
author:
  - fleet.vllm developers (@fleet-vllm)
options:
  paths:
    description: Paths whose existence and type are reported in RV(paths). Symbolic links are followed.
    type: list
    elements: path
    default: []
  checksums:
    description:
      - Files whose SHA-256 is reported in RV(checksums) (V(null) for a file that does not exist), so that a
        task can tell whether what it would write is already there without running.
    type: list
    elements: path
    default: []
  device_globs:
    description:
      - Shell patterns of device nodes (such as C(/dev/nvidia*)); RV(device_groups) lists the groups that own
        the matching entries, root excluded.
    type: list
    elements: str
    default: []
  accounts:
    description: User names whose accounts are reported in RV(accounts).
    type: list
    elements: str
    default: []
  groups:
    description: Group names reported in RV(groups).
    type: list
    elements: str
    default: []
  interfaces:
    description:
      - Report the host's network addresses in RV(interfaces), in the shape of the network facts of
        M(ansible.builtin.setup) (one entry per interface with C(device), C(ipv4), C(ipv4_secondaries) and
        C(ipv6)). Read with C(ip -json address) (iproute2).
    type: bool
    default: false
  units:
    description: systemd unit names whose state is reported in RV(units).
    type: list
    elements: str
    default: []
  reachable:
    description:
      - Paths another account must reach (the service user its venv and served model, the peers' rsync daemon the
        snapshots and its gate). RV(out_of_reach) lists those it cannot, with the first entry in the way. Each
        directory above the path must let the account through (x) and the path itself be readable (r, and x for a
        directory), along the path as given and along the one its links resolve to. Only what exists is looked at.
      - Judged from the mode bits, the owner and the groups of the account (V(null) O(reachable[].user), or an
        account that does not exist yet, is in none of the groups, so the "other" bits decide, as for a unit's
        C(DynamicUser=)); an entry with a POSIX ACL is taken as passable.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The path.
        type: path
        required: true
      user:
        description: The account; V(null) for any account in none of the groups.
        type: str
  storage:
    description:
      - A model directory; RV(storage) reports the file system its C(*.safetensors) files are on (their links
        followed), their total size and the host's memory, for the decision of vLLM's
        C(--safetensors-load-strategy) (filter P(fleet.vllm.load_strategy#filter)).
    type: path
  fingerprint:
    description:
      - The options of M(fleet.vllm.vllm_fingerprint) but O(fleet.vllm.vllm_fingerprint#module:record) - compare,
        record nothing.
    type: dict
    suboptions:
      state_file:
        description: As M(fleet.vllm.vllm_fingerprint)'s O(fleet.vllm.vllm_fingerprint#module:state_file).
        type: path
        required: true
      files:
        description: As M(fleet.vllm.vllm_fingerprint)'s O(fleet.vllm.vllm_fingerprint#module:files).
        type: list
        elements: dict
        default: []
        suboptions:
          name:
            description: A name for the file in the fingerprint.
            type: str
            required: true
          path:
            description: The staged copy.
            type: path
            required: true
          live:
            description: The live copy.
            type: path
      links:
        description: As M(fleet.vllm.vllm_fingerprint)'s O(fleet.vllm.vllm_fingerprint#module:links).
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
        description: As M(fleet.vllm.vllm_fingerprint)'s O(fleet.vllm.vllm_fingerprint#module:model_path).
        type: path
      small_file_bytes:
        description: As M(fleet.vllm.vllm_fingerprint)'s O(fleet.vllm.vllm_fingerprint#module:small_file_bytes).
        type: int
        default: 16777216
      unit:
        description: As M(fleet.vllm.vllm_fingerprint)'s O(fleet.vllm.vllm_fingerprint#module:unit).
        type: str
extends_documentation_fragment:
  - fleet.vllm.managed_paths
  - fleet.vllm.attributes
  - fleet.vllm.attributes.read_only
seealso:
  - module: ansible.builtin.stat
  - module: ansible.builtin.setup
  - module: ansible.builtin.getent
"""

EXAMPLES = r"""
- name: Look at the host before deciding what to install
  fleet.vllm.host_state:
    paths: [/usr/bin/rsync]
    interfaces: true
    units: [fleet-vllm-rsyncd.socket]
  register: host

- name: Install rsync only when it is missing
  ansible.builtin.package:
    name: rsync
  when: not host.paths['/usr/bin/rsync'].exists

- name: Look at a configuration before writing it
  fleet.vllm.host_state:
    files:
      - path: /etc/fleet-vllm/rsyncd.conf
        content: "{{ rsyncd_conf }}"
        mode: "0644"
  register: look

- name: Write it only when it is not already as it should be
  fleet.vllm.managed_files:
    files:
      - path: /etc/fleet-vllm/rsyncd.conf
        content: "{{ rsyncd_conf }}"
        mode: "0644"
  when: look.out_of_place | length > 0
"""

RETURN = r"""
paths:
  description: For each path of O(paths), whether it exists and its type (V(file), V(directory), V(other), V(null)).
  returned: always
  type: dict
  sample: {"/usr/bin/rsync": {"exists": true, "type": "file"}}
checksums:
  description: For each file of O(checksums), the SHA-256 of its content, or V(null) when it does not exist.
  returned: always
  type: dict
  sample: {"/var/lib/fleet-vllm/staged/vllm.service": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}
device_groups:
  description: The groups (other than root) owning the entries matching O(device_globs), sorted.
  returned: always
  type: list
  elements: str
  sample: [video]
accounts:
  description:
    - For each name of O(accounts), V(null) when there is no such account, else its C(uid), C(group) (the
      primary group's name), C(groups) (supplementary groups, sorted), C(home), C(shell) and C(system), true
      for a system account - a uid at most C(SYS_UID_MAX) of C(/etc/login.defs) (when that is not set,
      C(UID_MIN) - 1, and 999 without either, as useradd(8) of shadow counts them).
  returned: always
  type: dict
  sample: {"vllm": {"uid": 998, "group": "vllm", "groups": ["video"], "home": "/var/lib/vllm", "shell": "/usr/sbin/nologin", "system": true}}
groups:
  description: For each name of O(groups), V(null) when there is no such group, else its C(gid).
  returned: always
  type: dict
  sample: {"vllm": {"gid": 998}}
interfaces:
  description: The host's interfaces in the shape of M(ansible.builtin.setup)'s network facts; empty unless O(interfaces).
  returned: always
  type: dict
  sample: {"eth0": {"device": "eth0", "ipv4": {"address": "10.20.0.5", "prefix": "16"}, "ipv4_secondaries": [], "ipv6": []}}
units:
  description:
    - For each unit of O(units), its C(load_state), C(active_state) and C(unit_file_state) as C(systemctl show) says, and
      C(exec_start), the words of the loaded unit's first C(ExecStart=) command (systemctl joins its arguments with blanks
      and quotes none; empty for a unit without one, or not loaded).
  returned: always
  type: dict
  sample: {"vllm.service": {"load_state": "loaded", "active_state": "active", "unit_file_state": "enabled",
                            "exec_start": ["/opt/vllm/current/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--uds",
                                           "/run/fleet-vllm/vllm/engine.sock"]}}
out_of_place:
  description:
    - The paths of O(directories) and O(files) that M(fleet.vllm.managed_files) would change - missing, of another type,
      with another owner, group or mode, or (files) with other content; empty when all are in place.
  returned: always
  type: list
  elements: str
  sample: ["/etc/fleet-vllm/rsyncd.conf"]
out_of_reach:
  description:
    - The items of O(reachable) whose account cannot reach the path, each with C(blocked), the first entry in the way
      (C(path), C(mode), C(owner), C(group)); empty when every account can.
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/srv/vllm/models/pristine/nvidia--Kimi-K2.5-NVFP4", "user": null,
            "blocked": {"path": "/srv", "mode": "0750", "owner": "root", "group": "root"}}]
storage:
  description:
    - For O(storage), V(null) when not asked. C(fs_type) and C(mount_point) come from the kernel's mount table
      (C(/proc/self/mountinfo)), for the real path of the directory's first C(*.safetensors) file (the directory's
      own when it has none); C(fs_type) is V(null) when the table names no mount for it.
    - C(mem_total_bytes) is C(MemTotal) of C(/proc/meminfo), not the memory available now, so that a decision
      made from it does not change between two runs.
  returned: always
  type: dict
  sample: {"path": "/srv/vllm/models/served/nvidia--Kimi-K2.5-NVFP4", "exists": true, "real_path": "/srv/vllm/models/blobs/0f3c",
           "mount_point": "/srv/vllm", "fs_type": "ext4", "safetensors_files": 119, "safetensors_bytes": 579820000000,
           "mem_total_bytes": 2163324321792}
fingerprint:
  description:
    - With O(fingerprint), M(fleet.vllm.vllm_fingerprint)'s return (C(digest), C(recorded_digest), C(matches),
      C(in_place), C(differences), C(drift), C(service), C(action), C(reason)); V(null) without it, or when
      O(fingerprint.model_path) does not exist (yet).
  returned: always
  type: dict
  sample: {"action": "none", "reason": "the service runs the staged state, verified", "matches": true, "in_place": true}
"""

import glob
import grp
import os
import pwd
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.fleet.vllm.plugins.module_utils._fingerprint import OPTIONS as FINGERPRINT_OPTIONS
from ansible_collections.fleet.vllm.plugins.module_utils._fingerprint import evaluate
from ansible_collections.fleet.vllm.plugins.module_utils._interfaces import interfaces
from ansible_collections.fleet.vllm.plugins.module_utils._load_strategy import storage
from ansible_collections.fleet.vllm.plugins.module_utils._managed_files import (
    DIRECTORIES_SPEC,
    FILES_SPEC,
    Failure,
    closed_on_the_way,
    out_of_place,
)


def path_state(path):
    if not os.path.exists(path):
        return dict(exists=False, type=None)
    kind = "directory" if os.path.isdir(path) else "file" if os.path.isfile(path) else "other"
    return dict(exists=True, type=kind)


def checksum(module, path):
    if not os.path.isfile(path):
        return None
    try:
        return module.sha256(path)
    except (IOError, OSError) as exc:
        module.fail_json(msg="cannot read %s: %s" % (path, exc))


def device_groups(patterns):
    found = set()
    for pattern in patterns:
        for entry in glob.glob(pattern):
            try:
                gid = os.lstat(entry).st_gid
            except OSError:
                continue  # gone between the listing and the look
            try:
                name = grp.getgrgid(gid).gr_name
            except KeyError:
                name = str(gid)
            if name != "root":
                found.add(name)
    return sorted(found)


LOGIN_DEFS = "/etc/login.defs"


def sys_uid_max(text):
    """The highest uid of a system account, from the text of login.defs."""
    values = {}
    for line in (text or "").splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] in ("SYS_UID_MAX", "UID_MIN") and words[1].isdigit():
            values[words[0]] = int(words[1])
    if "SYS_UID_MAX" in values:
        return values["SYS_UID_MAX"]
    return values.get("UID_MIN", 1000) - 1


def read_login_defs():
    try:
        with open(LOGIN_DEFS) as handle:
            return handle.read()
    except (IOError, OSError):
        return ""


def account(name, system_max):
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    try:
        primary = grp.getgrgid(entry.pw_gid).gr_name
    except KeyError:
        primary = str(entry.pw_gid)
    groups = sorted(g.gr_name for g in grp.getgrall() if name in g.gr_mem)
    return dict(uid=entry.pw_uid, group=primary, groups=groups, home=entry.pw_dir, shell=entry.pw_shell,
                system=entry.pw_uid <= system_max)


def group(name):
    try:
        return dict(gid=grp.getgrnam(name).gr_gid)
    except KeyError:
        return None


def exec_start(value):
    """The words of the loaded unit's first ExecStart= command, from systemctl show's
    "{ path=... ; argv[]=WORD WORD ... ; ignore_errors=no ; ... }": systemctl joins the arguments with
    blanks and quotes none, so an argument holding a blank comes back as several words."""
    match = re.search(r"argv\[\]=(.*?) ;", value)
    return match.group(1).split() if match else []


def units(module, names):
    if not names:
        return {}
    systemctl = module.get_bin_path("systemctl", required=True)
    rc, out, err = module.run_command([systemctl, "show", "--property=Id,LoadState,ActiveState,UnitFileState,ExecStart", "--"] + names)
    if rc != 0:
        module.fail_json(msg="systemctl show %s failed (exit code %d): %s" % (" ".join(names), rc, err.strip()))
    blocks = out.strip().split("\n\n")
    result = {}
    for name, block in zip(names, blocks):
        fields = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        result[name] = dict(load_state=fields.get("LoadState", ""), active_state=fields.get("ActiveState", ""),
                            unit_file_state=fields.get("UnitFileState", ""), exec_start=exec_start(fields.get("ExecStart", "")))
    for name in names[len(blocks):]:
        result[name] = dict(load_state="", active_state="", unit_file_state="", exec_start=[])
    return result


def fingerprint(module, params):
    """vllm_fingerprint's comparison, or None when not asked or when its model directory is not there
    yet (check mode before the first build of it): the caller then runs vllm_fingerprint itself."""
    if not params or (params["model_path"] and not os.path.isdir(params["model_path"])):
        return None
    return evaluate(module, params)[0]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            paths=dict(type="list", elements="path", default=[]),
            checksums=dict(type="list", elements="path", default=[]),
            device_globs=dict(type="list", elements="str", default=[]),
            accounts=dict(type="list", elements="str", default=[]),
            groups=dict(type="list", elements="str", default=[]),
            interfaces=dict(type="bool", default=False),
            units=dict(type="list", elements="str", default=[]),
            directories=DIRECTORIES_SPEC,
            files=FILES_SPEC,
            storage=dict(type="path"),
            fingerprint=dict(type="dict", options=FINGERPRINT_OPTIONS),
            reachable=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="path", required=True), user=dict(type="str"))),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        differ = out_of_place(p["directories"], p["files"])
    except (Failure, OSError) as exc:
        module.fail_json(msg=to_native(exc))
    reach = [(item, closed_on_the_way(item["path"], item["user"])) for item in p["reachable"]]
    module.exit_json(
        changed=False,
        paths={path: path_state(path) for path in p["paths"]},
        checksums={path: checksum(module, path) for path in p["checksums"]},
        device_groups=device_groups(p["device_globs"]),
        accounts={name: account(name, sys_uid_max(read_login_defs())) for name in p["accounts"]},
        groups={name: group(name) for name in p["groups"]},
        interfaces=interfaces(module) if p["interfaces"] else {},
        units=units(module, p["units"]),
        out_of_place=differ,
        out_of_reach=[dict(item, blocked=blocked) for item, blocked in reach if blocked],
        storage=storage(p["storage"]) if p["storage"] else None,
        fingerprint=fingerprint(module, p["fingerprint"]),
    )


if __name__ == "__main__":
    main()
