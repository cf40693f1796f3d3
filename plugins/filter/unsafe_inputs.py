# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: unsafe_inputs
short_description: Name the inputs, and the elements of them, that would end a line or a word of a configuration file
version_added: "0.3.0"
author: fleet.vllm developers (@fleet-vllm)
description:
  - Takes a dict of inputs (variable name - value, as the roles' checks build it) and returns, for each string
    anywhere inside a value - the value itself, every element of a list, every key and value of a dict, however
    deep - that holds what O(kind) refuses, where it is (C(NAME), C(NAME[2]), C(NAME.Key[0])) and what it holds.
    An empty list says every value is safe.
  - Per element, because a check of a list's or a dict's text (its repr) never sees a newline - the repr writes
    it as the two characters C(\n) - while the template writes the element itself (issue 24 point 11 - a list
    value of a hardening override wrote a root C(ExecStartPost=) into a unit).
  - O(kind=line) refuses a control character (U+0000 to U+001F, U+007F) - in a systemd unit, an rsyncd.conf and
    an HAProxy configuration a line break starts a directive of its own.
  - O(kind=token) refuses besides whitespace, C(#), quotes and a backslash - what ends or changes a word of
    HAProxy's configuration (a blank separates arguments, C(#) starts a comment, quotes and backslashes are
    HAProxy's own quoting), for a value written as one word of it.
  - Numbers, booleans and null are safe; any other value is checked as its text.
options:
  _input:
    description: The inputs, name - value.
    type: dict
    required: true
  kind:
    description: What the values must not hold.
    type: str
    choices: [line, token]
    default: line
"""

EXAMPLES = r"""
- name: Refuse a line break anywhere in the overrides
  ansible.builtin.assert:
    that: __found | length == 0
    fail_msg: "{{ __found | join(', ') }}: give each value on one line"
  vars:
    __found: "{{ {'vllm_server_hardening_overrides': vllm_server_hardening_overrides} | fleet.vllm.unsafe_inputs }}"
# vllm_server_hardening_overrides.ExecPaths[1] (a newline): give each value on one line
"""

RETURN = r"""
_value:
  description: Each unsafe string as C(WHERE (WHAT)), in the order of the inputs; empty when all are safe.
  type: list
  elements: str
"""

import re

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_text

_REFUSED = {
    "line": re.compile(r"[\x00-\x1f\x7f]"),
    "token": re.compile(r"[\x00-\x20\x7f#'\"\\]|\s"),
}
_NAMES = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", "\x00": "a NUL", " ": "a blank",
          "#": "a #", "'": "a quote", '"': "a quote", "\\": "a backslash"}


def _what(char):
    if char in _NAMES:
        return _NAMES[char]
    return "a control character" if re.match(r"[\x00-\x1f\x7f]", char) else "whitespace"


def _walk(where, value, refused, found):
    if value is None or isinstance(value, (bool, int, float)):
        return
    if isinstance(value, Mapping):
        for key in value:
            _walk("%s (a key)" % where, key, refused, found)
            _walk("%s.%s" % (where, to_text(key)), value[key], refused, found)
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _walk("%s[%d]" % (where, index), item, refused, found)
        return
    bad = refused.search(to_text(value))
    if bad:
        found.append("%s (%s)" % (where, _what(bad.group(0))))


def unsafe_inputs(inputs, kind="line"):
    if not isinstance(inputs, Mapping):
        raise AnsibleFilterError("unsafe_inputs expects a dict of inputs, name - value, got %s" % type(inputs).__name__)
    if kind not in _REFUSED:
        raise AnsibleFilterError("unsafe_inputs: kind is line or token, not %r" % (kind,))
    found = []
    for name in inputs:
        _walk(to_text(name), inputs[name], _REFUSED[kind], found)
    return found


class FilterModule(object):
    def filters(self):
        return {"unsafe_inputs": unsafe_inputs}
