#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: managed_files
short_description: Write several small files and their directories in one step, atomically, with their final mode from the start
version_added: "0.1.0"
description:
  - Makes each of O(directories) exist with its owner and mode, then each of O(files) hold exactly
    its O(files[].content) with its owner and mode - what M(ansible.builtin.file) and
    M(ansible.builtin.template) do, for many paths in one module run. A role that writes a unit,
    an environment file and a configuration costs one module start on the host instead of two per
    file (the template action's stat, then its copy or file), which is most of what a rerun with
    nothing to change costs.
  - A file is written to a temporary file in its directory, created with mode 0600, given its
    owner and mode, optionally checked with O(files[].validate), flushed to disk, then renamed over
    the path - a reader sees the old file or the new one, never half of one, and a secret file is
    never readable by others, not even for a moment. A file whose content is right but whose mode
    or owner is not only gets its mode or owner changed.
  - A file given as O(files[].secret_content) never shows its content - in a diff, in the result
    or in the module's logged arguments.
  - A file given as O(files[].src) gets the content of another file on the host (a staged copy put
    in place), the same way - unlike M(ansible.builtin.copy) with C(remote_src), which renames a
    new file into place with the default mode (0644 under the usual umask) and only then sets the
    mode asked for. Its content is never shown either.
author:
  - fleet.vllm developers (@fleet-vllm)
attributes:
  diff_mode:
    description: Shows each changed file's content before and after, except secret files.
extends_documentation_fragment:
  - fleet.vllm.managed_paths
  - fleet.vllm.attributes
  - fleet.vllm.attributes.changes_with_diff
"""

EXAMPLES = r"""
- name: Write the unit and its environment file
  fleet.vllm.managed_files:
    directories:
      - {path: /etc/fleet-vllm, mode: "0755"}
    files:
      - path: /etc/systemd/system/vllm.service
        content: "{{ lookup('ansible.builtin.template', 'vllm.service.j2') }}"
        mode: "0644"
        validate: /usr/bin/systemd-analyze verify %s:vllm.service
      - path: /etc/fleet-vllm/nccl.env
        content: "NCCL_PROTO=LL\n"
        mode: "0644"
      - path: /etc/fleet-vllm/vllm-secrets.env
        secret_content: "VLLM_API_KEY={{ vault_vllm_api_key }}\n"
        mode: "0600"

- name: Put a staged secrets file in place, 0600 from the start
  fleet.vllm.managed_files:
    files:
      - path: /etc/fleet-vllm/vllm-secrets.env
        src: /var/lib/fleet-vllm/staged/vllm-secrets.env
        mode: "0600"
"""

RETURN = r"""
changed_files:
  description: The files written or whose mode or owner changed.
  returned: always
  type: list
  elements: str
changed_directories:
  description: The directories created or whose mode or owner changed.
  returned: always
  type: list
  elements: str
"""

import os
import shlex
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native, to_text

from ansible_collections.fleet.vllm.plugins.module_utils._managed_files import (
    DIRECTORIES_SPEC,
    FILES_SPEC,
    Failure,
    absolute,
    current_content,
    ensure_directory,
    fix_attributes,
    ids,
    octal,
    wanted_content,
)


def ensure_file(module, item, diffs):
    path = item["path"]
    mode = octal(item["mode"], path)
    uid, gid = ids(item["owner"], item["group"], path)
    secret = item["secret_content"] is not None or item["src"] is not None
    wanted = wanted_content(item)
    if wanted is None:
        if module.check_mode:
            # An earlier task of the same run writes it; nothing to compare yet.
            return True
        raise Failure("%s: its source %s does not exist" % (path, item["src"]))
    st, current = current_content(path)
    directory = os.path.dirname(path) or "."
    if st is None and not os.path.isdir(directory) and not module.check_mode:
        raise Failure("the directory of %s does not exist: create it first (directories)" % path)
    if current == wanted:
        return fix_attributes(module, path, st, uid, gid, mode)
    if module._diff:
        hidden = "(secret content not shown)\n"
        diffs.append({
            "before_header": path if st is not None else "%s (absent)" % path,
            "after_header": path,
            "before": hidden if secret and current is not None else to_text(current or b"", errors="replace"),
            "after": hidden if secret else to_text(wanted, errors="replace"),
        })
    if module.check_mode:
        return True
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".%s." % os.path.basename(path))
    module.add_cleanup_file(tmp)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchown(handle.fileno(), uid, gid)
            os.fchmod(handle.fileno(), mode)
            handle.write(wanted)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        raise Failure("cannot write %s: %s" % (tmp, to_native(exc)))
    if item.get("validate"):
        if "%s" not in item["validate"]:
            raise Failure("%s: validate must contain %%s, the file to check" % path)
        argv = [arg.replace("%s", tmp) for arg in shlex.split(item["validate"])]
        rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
        if rc != 0:
            raise Failure("%s was not written: %s failed (rc %d): %s" % (
                path, " ".join(shlex.quote(a) for a in argv), rc, (err or out).strip()))
    try:
        os.rename(tmp, path)
    except OSError as exc:
        raise Failure("cannot replace %s: %s" % (path, to_native(exc)))
    return True


def main():
    module = AnsibleModule(
        argument_spec=dict(directories=DIRECTORIES_SPEC, files=FILES_SPEC),
        supports_check_mode=True,
    )
    changed_dirs, changed_files, diffs = [], [], []
    try:
        for item in module.params["directories"]:
            absolute("directories", item["path"])
            if ensure_directory(module, item):
                changed_dirs.append(item["path"])
        for item in module.params["files"]:
            absolute("files", item["path"])
            if ensure_file(module, item, diffs):
                changed_files.append(item["path"])
    except Failure as exc:
        module.fail_json(msg=str(exc), changed=bool(changed_dirs or changed_files), changed_files=changed_files,
                         changed_directories=changed_dirs)
    except OSError as exc:
        module.fail_json(msg=to_native(exc), changed=bool(changed_dirs or changed_files), changed_files=changed_files,
                         changed_directories=changed_dirs)
    result = dict(changed=bool(changed_dirs or changed_files), changed_files=changed_files,
                  changed_directories=changed_dirs)
    if module._diff:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
