# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: config_value
short_description: Check and escape a value for one line of a systemd unit or an rsyncd.conf
version_added: "0.2.0"
author: fleet.vllm developers (@fleet-vllm)
description:
  - Gives the text to write after C(NAME=) in a systemd unit file (systemd.syntax(7)) or after
    C(name =) in an rsyncd.conf(5), such that the program reads back exactly O(_input), or fails
    with an error naming O(variable) when no text can carry it.
  - Refused, because both formats are line based and would read the rest as new directives or
    another value - a control character (newline, carriage return, NUL, tab, ... U+0000 to
    U+001F and U+007F); a trailing backslash (both read it as a line continuation); leading or
    trailing whitespace (both strip it, so another value would be read).
  - For O(syntax=systemd), C(%) becomes C(%%) - systemd expands specifiers (C(%h), C(%n)) in
    C(Description=), C(User=), C(WorkingDirectory=), C(EnvironmentFile=) and most other settings,
    and reads C(%%) as a literal C(%).
  - For O(syntax=rsyncd), a C(%) followed by a capital letter and, later, another C(%) is refused -
    rsyncd replaces C(%VAR%) with the variable from its environment and has no escape for it (its
    C(expand_vars) copies every other C(%), C(%%) included, as it is; rsync 3.5.0 loadparm.c).
  - Everything else (quotes, C($), backslashes inside the value, unicode) is taken literally by the
    settings this collection writes with it. For a command line use P(fleet.vllm.systemd_exec_args#filter),
    which also quotes; for an environment file P(fleet.vllm.environment_file_lines#filter).
options:
  _input:
    description: The value.
    type: raw
    required: true
  variable:
    description: The variable the value comes from, for error messages.
    type: str
    default: the value
  syntax:
    description: The file the value goes to.
    type: str
    choices: [systemd, rsyncd]
    default: systemd
seealso:
  - name: systemd.syntax(7)
    description: Line continuation, whitespace and comments in unit files.
    link: https://www.freedesktop.org/software/systemd/man/latest/systemd.syntax.html
  - name: systemd.unit(5), Specifiers
    description: The settings in which C(%) starts a specifier.
    link: https://www.freedesktop.org/software/systemd/man/latest/systemd.unit.html#Specifiers
  - name: rsyncd.conf(5)
    description: File format, C(%VAR%) references and C(%%).
    link: https://download.samba.org/pub/rsync/rsyncd.conf.5
"""

EXAMPLES = r"""
- name: Write a unit's description
  ansible.builtin.set_fact:
    description: "{{ 'kimi 100%' | fleet.vllm.config_value(variable='vllm_server_served_model_name') }}"
# kimi 100%%
"""

RETURN = r"""
_value:
  description: The escaped value.
  type: str
"""

import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_text

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# rsync's expand_vars: "%" + an upper-case letter ... "%" names an environment variable.
_RSYNC_VAR = re.compile(r"%[A-Z][^%]*%")
_NAMES = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", "\x00": "a NUL"}


def config_value(value, variable="the value", syntax="systemd"):
    """value -> the text of one unit or rsyncd.conf value that reads back as exactly value."""
    if value is None or isinstance(value, (dict, list, tuple)):
        raise AnsibleFilterError("%s is %r: give a single value" % (variable, value))
    text = to_text(value)
    bad = _CONTROL.search(text)
    if bad:
        char = bad.group(0)
        raise AnsibleFilterError(
            "%s holds %s (%r): a configuration line ends there and the rest would be read as a directive of its "
            "own; remove it" % (variable, _NAMES.get(char, "a control character"), char))
    if text.endswith("\\"):
        raise AnsibleFilterError("%s ends with a backslash, which continues the configuration line onto the next "
                                 "one: remove it" % variable)
    if text != text.strip():
        raise AnsibleFilterError("%s starts or ends with whitespace, which systemd and rsyncd strip (another value "
                                 "would be read): remove it" % variable)
    if syntax == "rsyncd":
        if _RSYNC_VAR.search(text):
            raise AnsibleFilterError("%s holds %s, which rsyncd would replace with an environment variable (rsyncd.conf has "
                                     "no escape for it): rename the directory" % (variable, _RSYNC_VAR.search(text).group(0)))
        return text
    if syntax != "systemd":
        raise AnsibleFilterError("config_value: syntax must be systemd or rsyncd, got %r" % (syntax,))
    return text.replace("%", "%%")


class FilterModule(object):
    def filters(self):
        return {"config_value": config_value}
