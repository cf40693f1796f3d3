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
    description: Reads in check mode as without it; with O(record) reports what it would store and writes nothing.
  diff_mode:
    description: The fingerprint holds checksums of secret files; it is not shown as a diff.
  platform:
    description: Runs on the host of the service.
extends_documentation_fragment: [fleet.vllm.attributes, fleet.vllm.attributes.changes_without_diff]
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
  model_not_built:
    description:
      - What a missing O(model_path) is - V(fail) (the default, an error) or V(restart) (the service would restart on
        a directory this run has not built yet - the server's stage in check mode, where the new pin's served directory
        is not made - said in RV(drift)). In check mode it is always V(restart).
    type: str
    choices: [fail, restart]
    default: fail
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

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.fleet.vllm.plugins.module_utils._fingerprint import (
    OPTIONS,
    boot_id,
    evaluate,
    monotonic_usec,
    write_json,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(OPTIONS, record=dict(type="str", choices=["none", "pending", "running"], default="none"),
                           model_not_built=dict(type="str", choices=["fail", "restart"], default="fail")),
        supports_check_mode=True,
    )
    params = module.params
    state_file = params["state_file"]
    pending_file = state_file + ".pending"
    result, fingerprint, pending = evaluate(module, params)
    digest, matches = result["digest"], result["matches"]
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
    module.exit_json(changed=changed, **result)


if __name__ == "__main__":
    main()
