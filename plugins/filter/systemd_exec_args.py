# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: systemd_exec_args
short_description: Quote an argv list for a systemd Exec line
version_added: "0.1.0"
author: fleet.vllm developers (@fleet-vllm)
description:
  - Gives the text of a systemd C(ExecStart=) (or other C(Exec*=)) value that systemd splits back
    into exactly the given argument list, following systemd.service(5) "Command lines" and
    systemd.syntax(7) "Quoting".
  - A word made only of letters, digits and C(_./:=,+@-) is written as it is. Any other word is
    double-quoted with C escapes for C(\\), C(") and control characters.
  - In every word C(%) becomes C(%%) (systemd expands specifiers such as C(%h)) and C($) becomes
    C($$) (systemd substitutes C($VAR) and C(${VAR}) from the environment), so values reach the
    program literally. A quoted C(;) is an argument, not a command separator.
options:
  _input:
    description: The argument list; the first item is the program, an absolute path.
    type: list
    elements: str
    required: true
seealso:
  - name: systemd.service(5), Command lines
    description: How systemd splits and expands Exec lines.
    link: https://www.freedesktop.org/software/systemd/man/latest/systemd.service.html#Command%20lines
"""

EXAMPLES = r"""
- name: Write a unit line
  ansible.builtin.set_fact:
    exec_start: "{{ ['/usr/bin/echo', 'a b', '100%', '$HOME'] | fleet.vllm.systemd_exec_args }}"
# /usr/bin/echo "a b" 100%% "$$HOME"
"""

RETURN = r"""
_value:
  description: The quoted command line.
  type: str
"""

import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_text

from collections.abc import Sequence

# systemd.service(5) "Command lines" and systemd.syntax(7) "Quoting": a word is split on
# whitespace unless quoted; inside double quotes, backslash starts a C escape; "%" starts a
# specifier everywhere ("%%" is a literal "%"); "$" starts an environment variable reference,
# expanded when the command runs ("$$" is a literal "$"); an unquoted lone ";" separates commands.
# fullmatch, not "$": "$" also matches before a trailing newline, which would leave a word such as
# "--x\n" unquoted and end the Exec line there (the next word would start a directive of its own).
_SAFE_WORD = re.compile(r"[A-Za-z0-9_./:=,+@-]+")
_C_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r", "\a": "\\a",
              "\b": "\\b", "\f": "\\f", "\v": "\\v"}


def _systemd_word(word):
    word = to_text(word)
    word = word.replace("%", "%%").replace("$", "$$")
    if _SAFE_WORD.fullmatch(word):
        return word
    out = []
    for char in word:
        if char in _C_ESCAPES:
            out.append(_C_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append("\\x%02x" % ord(char))
        else:
            out.append(char)
    return '"%s"' % "".join(out)


def systemd_exec_args(argv):
    """argv (list) -> the text of a systemd Exec*= line that gives exactly that argv."""
    if isinstance(argv, (str, bytes)) or not isinstance(argv, Sequence):
        raise AnsibleFilterError("systemd_exec_args expects a list of arguments, got %r" % (argv,))
    words = [to_text(word) for word in argv]
    if not words or not words[0].startswith("/"):
        raise AnsibleFilterError("the command of a systemd Exec line must be an absolute path, got %r" % (words[:1],))
    if any("\x00" in word for word in words):
        raise AnsibleFilterError("an argument contains a NUL character, which no command line can carry")
    return " ".join(_systemd_word(word) for word in words)


class FilterModule(object):
    def filters(self):
        return {"systemd_exec_args": systemd_exec_args}
