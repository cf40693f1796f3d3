# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: environment_file_lines
short_description: Merge, check and quote variables for a systemd EnvironmentFile
version_added: "0.1.0"
author: fleet.vllm developers (@fleet-vllm)
description:
  - Merges O(_input) over O(defaults) (a key set to V(null) in O(_input) removes the default),
    checks every name against O(allowed), and gives one C(NAME="value") line per variable,
    sorted by name.
  - Values are double-quoted with C(\\), C("), C($) and the backquote escaped by a backslash,
    which systemd's EnvironmentFile= reader (systemd.exec(5)) and a POSIX shell both read back
    as the literal value. Values with a newline or a NUL are refused.
  - Errors name O(variable), the offending keys, and what is allowed.
options:
  _input:
    description: The variables to set; V(null) removes a default.
    type: dict
    required: true
  defaults:
    description: The variables set when O(_input) does not say otherwise.
    type: dict
    default: {}
  allowed:
    description:
      - The names allowed. An item ending in C(*) allows every name starting with the rest.
      - Empty allows every valid name.
    type: list
    elements: str
    default: []
  denied:
    description: Names refused even when O(allowed) matches them, with the reason (name -> reason).
    type: dict
    default: {}
  variable:
    description: The variable O(_input) comes from, for error messages.
    type: str
    default: the environment
"""

EXAMPLES = r"""
- name: Render the NCCL environment
  ansible.builtin.set_fact:
    lines: >-
      {{ {'NCCL_P2P_LEVEL': none, 'NCCL_P2P_DISABLE': 1}
         | fleet.vllm.environment_file_lines(defaults={'NCCL_PROTO': 'LL', 'NCCL_P2P_LEVEL': 'SYS'},
                                             allowed=['NCCL_*'], variable='fleet_vllm_nccl_env') }}
# ['NCCL_P2P_DISABLE="1"', 'NCCL_PROTO="LL"']
"""

RETURN = r"""
_value:
  description: The lines of the file, without newlines, sorted by name.
  type: list
  elements: str
"""

import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_text

from collections.abc import Mapping

# fullmatch: "$" would also accept a name with a trailing newline, which splits the line.
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _allowed(name, allowed):
    if not allowed:
        return True
    for pattern in allowed:
        pattern = to_text(pattern)
        if pattern.endswith("*") and name.startswith(pattern[:-1]):
            return True
        if name == pattern:
            return True
    return False


def _value(value):
    if isinstance(value, bool):
        # systemd and NCCL read 1/0; YAML's yes/no/true would otherwise arrive as "True".
        return "1" if value else "0"
    return to_text(value)


def _quote(text):
    out = []
    for char in text:
        if char in '\\"$`':
            out.append("\\")
        out.append(char)
    return '"%s"' % "".join(out)


def environment_file_lines(env, defaults=None, allowed=None, variable="the environment", denied=None):
    if not isinstance(env, Mapping):
        raise AnsibleFilterError("%s must be a dict of NAME: value, got %r" % (variable, env))
    merged = dict(defaults or {})
    merged.update(env)
    bad_names = sorted(to_text(name) for name in merged if not NAME.fullmatch(to_text(name)))
    if bad_names:
        raise AnsibleFilterError(
            "%s holds %s: an environment variable name is letters, digits and underscores, not starting "
            "with a digit" % (variable, ", ".join(bad_names)))
    refused = sorted(to_text(name) for name in merged if not _allowed(to_text(name), allowed or []))
    if refused:
        raise AnsibleFilterError(
            "%s holds %s, which is not allowed here: use names matching %s (add a documented variable to "
            "the allowed list if it is really needed)" % (variable, ", ".join(refused), ", ".join(allowed)))
    denied = denied or {}
    for name in sorted(merged, key=to_text):
        if to_text(name) in denied and merged[name] is not None:
            raise AnsibleFilterError("%s holds %s: %s" % (variable, name, denied[to_text(name)]))
    lines = []
    for name in sorted(merged, key=to_text):
        value = merged[name]
        if value is None:
            continue
        if isinstance(value, (Mapping, list, tuple)):
            raise AnsibleFilterError("%s: %s is %r; give a single value" % (variable, name, value))
        text = _value(value)
        if "\n" in text or "\r" in text or "\x00" in text:
            raise AnsibleFilterError("%s: %s contains a line break or NUL, which an environment file cannot carry"
                                     % (variable, name))
        lines.append("%s=%s" % (name, _quote(text)))
    return lines


class FilterModule(object):
    def filters(self):
        return {"environment_file_lines": environment_file_lines}
