#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: venv_link
short_description: Switch the active-version link of a directory of venvs atomically, keep the previous one, roll back, prune
version_added: "0.1.0"
description:
  - Manages two symbolic links next to each other, O(path) (for example C(/opt/vllm/current)) and
    O(previous_path) (C(/opt/vllm/previous)), that point at venvs in a directory of venvs
    (C(/opt/vllm/venvs/<key>)). Links are written relative (C(venvs/<key>)).
  - With O(state=present), O(path) is made to point at O(target). When it pointed somewhere else,
    that venv becomes the previous one (O(previous_path) points at it), the rollback target.
  - With O(state=rollback), O(path) and O(previous_path) swap, so O(path) points at the previous venv
    again; a second rollback rolls forward. Fails when no previous venv is recorded or it is gone.
  - Each link is replaced atomically. A new link is made under a temporary name in the same directory
    and renamed over the old one, as C(mv -T) does, so a reader of O(path) sees either the old or the
    new venv, never no link. M(ansible.builtin.file) with C(state=link) and C(force=true) removes the
    old link first.
  - With O(keep) above 0, removes the oldest venvs of O(prune_dir) (by modification time of the venv
    directory, which the install's marker file, written last, sets) until O(keep) are left; the venvs
    O(path) and O(previous_path) point at are never removed, so at least those two stay.
author:
  - fleet.vllm developers (@fleet-vllm)
attributes:
  check_mode:
    description:
      - Reports the links and the pruning it would do; touches nothing.
      - A missing O(target) is accepted in check mode (an install in check mode does not create it).
  diff_mode:
    description: Shows where the two links point before and after.
  platform:
    description: Runs on the host of the venvs.
extends_documentation_fragment: [fleet.vllm.attributes, fleet.vllm.attributes.changes_with_diff]
options:
  path:
    description: The active link, such as C(/opt/vllm/current). Must be a symbolic link or absent.
    type: path
    required: true
  target:
    description: The venv O(path) must point at. Required for O(state=present). Must be a directory (except in check mode).
    type: path
  previous_path:
    description: The link that records the previous venv. Default C(previous) next to O(path).
    type: path
  state:
    description: V(present) points O(path) at O(target); V(rollback) swaps O(path) and O(previous_path).
    type: str
    choices: [present, rollback]
    default: present
  keep:
    description: How many venvs to keep in O(prune_dir), the current and the previous included; V(0) prunes nothing.
    type: int
    default: 0
  prune_dir:
    description: The directory of venvs to prune. Default the directory of O(target) (of the current venv for O(state=rollback)).
    type: path
"""

EXAMPLES = r"""
- name: Make the new venv the active one, keeping two venvs
  fleet.vllm.venv_link:
    path: /opt/vllm/current
    target: /opt/vllm/venvs/nightly-0123456789ab
    keep: 2

- name: Go back to the previous venv
  fleet.vllm.venv_link:
    path: /opt/vllm/current
    state: rollback
"""

RETURN = r"""
target:
  description: The venv O(path) points at after the task (or would, in check mode); empty when none.
  returned: always
  type: str
  sample: /opt/vllm/venvs/nightly-0123456789ab
previous:
  description: The venv O(previous_path) points at after the task; empty when none.
  returned: always
  type: str
  sample: /opt/vllm/venvs/pypi-0.16.0
before:
  description: Where the links pointed before the task.
  returned: always
  type: dict
  contains:
    target:
      description: The venv O(path) pointed at; empty when none.
      type: str
    previous:
      description: The venv O(previous_path) pointed at; empty when none.
      type: str
switched:
  description: Whether O(path) changed (or would change).
  returned: always
  type: bool
pruned:
  description: The venvs removed (or that would be removed) to keep O(keep).
  returned: always
  type: list
  elements: str
"""

import os
import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native


class Links(object):
    def __init__(self, module):
        self.module = module
        p = module.params
        self.path = p["path"].rstrip("/")
        self.base = os.path.dirname(self.path)
        self.previous_path = (p["previous_path"] or os.path.join(self.base, "previous")).rstrip("/")

    def read(self, link):
        """Absolute, normalised target of ``link``; "" when absent; fails when it is not a link."""
        if not os.path.lexists(link):
            return ""
        if not os.path.islink(link):
            self.module.fail_json(msg="%s exists and is not a symbolic link: move it away, the venv links are managed here" % link)
        text = os.readlink(link)
        return os.path.normpath(os.path.join(os.path.dirname(link), text))

    def relative(self, link, target):
        return os.path.relpath(target, os.path.dirname(link))

    def replace(self, link, target):
        """Point ``link`` at ``target`` atomically: a temporary link renamed over it (rename(2) replaces the name)."""
        tmp = os.path.join(os.path.dirname(link), ".%s.tmp-%d" % (os.path.basename(link), os.getpid()))
        try:
            if os.path.lexists(tmp):
                os.unlink(tmp)
            os.symlink(self.relative(link, target), tmp)
            os.rename(tmp, link)
        except OSError as e:
            if os.path.lexists(tmp):
                os.unlink(tmp)
            self.module.fail_json(msg="cannot point %s at %s: %s" % (link, target, to_native(e)))


def prune_candidates(prune_dir, keep, protected):
    """The venvs of ``prune_dir`` to remove, oldest first, so that ``keep`` stay; never ``protected``."""
    try:
        names = os.listdir(prune_dir)
    except OSError:
        return []
    dirs = []
    for name in names:
        full = os.path.join(prune_dir, name)
        if os.path.isdir(full) and not os.path.islink(full):
            dirs.append((os.stat(full).st_mtime, name, full))
    dirs.sort()
    excess = len(dirs) - keep
    doomed = []
    for _mtime, _name, full in dirs:
        if excess <= 0:
            break
        if os.path.normpath(full) in protected:
            continue
        doomed.append(full)
        excess -= 1
    return doomed


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            target=dict(type="path"),
            previous_path=dict(type="path"),
            state=dict(type="str", default="present", choices=["present", "rollback"]),
            keep=dict(type="int", default=0),
            prune_dir=dict(type="path"),
        ),
        required_if=[("state", "present", ["target"])],
        supports_check_mode=True,
    )
    p = module.params
    links = Links(module)
    if p["keep"] < 0:
        module.fail_json(msg="keep must be 0 (prune nothing) or more, got %d" % p["keep"])

    current, previous = links.read(links.path), links.read(links.previous_path)
    before = dict(target=current, previous=previous)

    if p["state"] == "present":
        target = os.path.normpath(p["target"])
        if not os.path.isdir(target) and not module.check_mode:
            module.fail_json(msg="%s is not a directory: there is no venv to point %s at" % (target, links.path))
        new_current = target
        new_previous = current if current and current != target else previous
    else:
        if not previous:
            module.fail_json(msg="no previous venv is recorded at %s: %s has never been switched from another venv, "
                                 "there is nothing to roll back to" % (links.previous_path, links.path))
        if not os.path.isdir(previous):
            module.fail_json(msg="the previous venv %s (recorded at %s) is gone: there is nothing to roll back to"
                                 % (previous, links.previous_path))
        new_current, new_previous = previous, current

    prune_dir = p["prune_dir"] or os.path.dirname(new_current)
    protected = set(os.path.normpath(x) for x in (new_current, new_previous) if x)
    pruned = prune_candidates(prune_dir, p["keep"], protected) if p["keep"] > 0 else []

    switched = new_current != current
    changed = switched or new_previous != previous or bool(pruned)
    result = dict(changed=changed, target=new_current, previous=new_previous or "", before=before,
                  switched=switched, pruned=pruned)
    if module._diff:
        def show(cur, prev):
            return "%s -> %s\n%s -> %s\n" % (links.path, cur or "(none)", links.previous_path, prev or "(none)")
        result["diff"] = dict(before=show(current, previous), after=show(new_current, new_previous),
                              before_header="venv links", after_header="venv links")

    if not module.check_mode:
        if new_previous and new_previous != previous:
            links.replace(links.previous_path, new_previous)
        if switched:
            links.replace(links.path, new_current)
        for path in pruned:
            try:
                shutil.rmtree(path)
            except OSError as e:
                module.fail_json(msg="cannot remove the old venv %s: %s" % (path, to_native(e)), **result)

    if switched:
        msg = "%s now points at %s (previous: %s)" % (links.path, new_current, new_previous or "none")
    else:
        msg = "%s already points at %s" % (links.path, new_current)
    if pruned:
        msg += "; removed %s" % ", ".join(pruned)
    module.exit_json(msg=msg, **result)


if __name__ == "__main__":
    main()
