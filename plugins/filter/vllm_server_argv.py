# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: vllm_server_argv
short_description: Render vLLM engine arguments to an argv list
version_added: "0.1.0"
author: fleet.vllm developers (@fleet-vllm)
description:
  - Turns a dict of vLLM engine arguments (names as in C(vllm serve --help), with underscores or
    dashes, without the leading C(--)) into the argument list of the server, in the order given.
  - V(true) gives the bare flag (C(--trust-remote-code)); V(false), V(null) and V("") leave the
    flag out; a list gives the flag followed by each item (C(--served-model-name a b)); a dict
    gives the flag followed by its JSON text (C(--hf-overrides {"a":1})), as one argument; anything else gives
    the flag and its text.
  - O(extra) adds more arguments after them - a dict rendered the same way, or a list of strings
    taken as they are. Extra arguments may not repeat a flag of O(_input), nor carry a secret
    (C(--api-key), C(--hf-token)), nor use C(--disable-log-requests) (deprecated, rejected by
    some builds, and redundant - request logging is off by default).
  - "A secret flag is refused however vLLM would still read it (its FlexibleArgumentParser over
    argparse): any prefix of it (argparse takes an unambiguous abbreviation, C(--api-k)), with
    C(_) for C(-) (C(--api_key)), with C(=value) (C(--api-ke=...)), or with a dotted JSON key
    (C(--api-key.x)). Refusing every prefix is a superset of what one vLLM build accepts; the
    prefixes it does not take as the secret flag are ambiguous or unknown there, errors either way."
  - "C(--config FILE) is refused in O(extra) the same way, however spelled: vLLM reads engine arguments from that YAML
    file, where no check of the role sees them. So is an argument starting with C(@), which an argparse parser with
    C(fromfile_prefix_chars) reads as a file of arguments (vLLM's parser has none)."
  - "A flag that O(_input) sets is refused in O(extra) the same way, however spelled (C(--hos 0.0.0.0) is
    C(--host 0.0.0.0) to argparse): the role's own variable sets it, and its checks apply (C(--host) is
    loopback unless C(vllm_server_allow_non_loopback_host))."
  - Companion filter P(fleet.vllm.systemd_exec_args#filter) quotes the list for a systemd
    C(ExecStart=) line.
options:
  _input:
    description: The engine arguments, in order.
    type: dict
    required: true
  extra:
    description: More arguments, a dict (rendered like O(_input)) or a list of strings.
    type: raw
    default: {}
  variable:
    description: The variable O(extra) comes from, for error messages.
    type: str
    default: vllm_server_extra_args
"""

EXAMPLES = r"""
- name: Render the server's arguments
  ansible.builtin.set_fact:
    argv: >-
      {{ {'model': '/srv/models/kimi', 'tensor_parallel_size': 8, 'trust_remote_code': true}
         | fleet.vllm.vllm_server_argv(extra={'max_num_seqs': 64}) }}
# ['--model', '/srv/models/kimi', '--tensor-parallel-size', '8', '--trust-remote-code', '--max-num-seqs', '64']
"""

RETURN = r"""
_value:
  description: The argument list, every item a string.
  type: list
  elements: str
"""

import json
import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_text

from collections.abc import Mapping, Sequence

FLAG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
# Flags an extra argument may not set: secrets belong in the EnvironmentFile, never on argv. These
# are the flags of vLLM's serve parser that take a secret (vLLM 0.16.0 and 0.33.0; docs/evidence.md
# section 2): every other flag takes a setting, a path or a JSON config.
SECRET_FLAGS = {"--api-key": "vllm_server_api_key", "--hf-token": "vllm_server_hf_token"}
# What to set instead of a flag of the role's own, where a word more than "its variable" helps.
OWN_FLAG_HINTS = {
    "--allowed-media-domains": "set vllm_server_allowed_media_domains (and the hosts' addresses in "
                               "vllm_server_ip_address_allow)",
}
# Flags that read engine arguments from a file: vLLM's --config (FlexibleArgumentParser, 0.16.0 and 0.33.0,
# vllm/utils/argparse_utils.py _pull_args_from_config) reads a YAML file whose keys set any engine argument, past
# every check of this filter and of the role (issue 24: the next attack on the sink of point 12).
FILE_FLAGS = {"--config": "it reads engine arguments from a YAML file, past the checks of the role (the flags it "
                          "sets, secrets, the network settings); give the arguments in vllm_server_extra_args itself"}
# Flags the role owns even where it leaves them out: --trust-remote-code runs the model repository's code, which
# the inventory pins (fleet_vllm_trust_remote_code, fleet_vllm_remote_code_sha256; issue 24 point 6); given in the
# extra arguments while the role's setting is false, it would run that code past every check of the pins.
ALWAYS_OWN_FLAGS = {
    # Where the engine listens (issue 24 point 2): a Unix socket only the front door's group may open
    # (fleet_vllm_engine_socket), else vllm_server_host:vllm_server_port. With --uds vLLM ignores --host and --port,
    # so each of the three is refused whichever the role writes.
    "--uds": "set fleet_vllm_engine_socket (empty: vLLM on vllm_server_host:vllm_server_port instead)",
    "--host": "set vllm_server_host, with fleet_vllm_engine_socket empty (an address other than loopback also needs "
              "vllm_server_allow_non_loopback_host: true; the front door is what the network reaches)",
    "--port": "set vllm_server_port, with fleet_vllm_engine_socket empty",
    "--trust-remote-code": "set fleet_vllm_trust_remote_code (the code files then pinned in fleet_vllm_remote_code_sha256)",
}
REFUSED_FLAGS = {
    "--disable-log-requests": "it is deprecated (vLLM PR #21739), rejected by some builds, and "
                              "request logging is already off by default",
}


def _flag(name):
    name = to_text(name)
    if not FLAG_NAME.fullmatch(name):
        raise ValueError("%r is not an engine argument name (use names such as tensor_parallel_size)" % name)
    return "--" + name.replace("_", "-").lower()


def _scalar(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return to_text(value)


def _render(args):
    argv = []
    for name, value in args.items():
        flag = _flag(name)
        if value is None or value is False or (isinstance(value, str) and value == ""):
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, Mapping):
            argv.extend([flag, json.dumps(dict(value), sort_keys=True, separators=(",", ":"))])
        elif isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
            if not value:
                continue
            argv.append(flag)
            argv.extend(_scalar(item) for item in value)
        else:
            argv.extend([flag, _scalar(value)])
    return argv


def _flags_in(argv):
    return {arg.split("=", 1)[0].replace("_", "-") for arg in argv if arg.startswith("--")}


def _option_name(arg):
    """The option an argument names as vLLM's FlexibleArgumentParser reads it (vLLM 0.33.0,
    vllm/utils/argparse_utils.py): the part before "=" and before the first "." (a dotted key of a
    JSON flag), with "_" read as "-" after the leading "--"."""
    name = arg.split("=", 1)[0].split(".", 1)[0].lower()
    return "--" + name[2:].replace("_", "-") if name.startswith("--") else name


def resolved_flag(arg, flags):
    """The flag of ``flags`` an argument would set in vLLM however it is spelled, or None. argparse
    (allow_abbrev, on in vLLM's parser) takes any unambiguous prefix of a long option; a prefix of
    several of ``flags`` is taken for the first, sorted (vLLM refuses it as ambiguous either way)."""
    name = _option_name(to_text(arg))
    if len(name) <= 2 or not name.startswith("--"):
        return None
    for flag in sorted(flags):
        if flag.startswith(name):
            return flag
    return None


def secret_flag(arg):
    """The secret flag an argument would set in vLLM however it is spelled, or None."""
    return resolved_flag(arg, SECRET_FLAGS)


def vllm_server_argv(args, extra=None, variable="vllm_server_extra_args"):
    if not isinstance(args, Mapping):
        raise AnsibleFilterError("vllm_server_argv expects a dict of engine arguments, got %s" % type(args).__name__)
    try:
        argv = _render(args)
    except ValueError as exc:
        raise AnsibleFilterError("engine arguments: %s" % exc)
    extra = {} if extra is None else extra
    if isinstance(extra, Mapping):
        try:
            more = _render(extra)
        except ValueError as exc:
            raise AnsibleFilterError("%s: %s" % (variable, exc))
    elif isinstance(extra, Sequence) and not isinstance(extra, (str, bytes)):
        more = [to_text(item) for item in extra]
    else:
        raise AnsibleFilterError("%s must be a dict of engine arguments or a list of strings, got %r" % (variable, extra))
    for arg in more:
        flag = secret_flag(arg)
        if flag:
            raise AnsibleFilterError(
                "%s sets %s (as %s): secrets never go on the command line (it is visible to every user in ps "
                "and lands in the world-readable unit); set %s, which goes to the root-only environment file"
                % (variable, flag, _option_name(arg), SECRET_FLAGS[flag]))
    for arg in more:
        flag = resolved_flag(arg, FILE_FLAGS)
        if flag:
            raise AnsibleFilterError("%s sets %s (as %s): leave it out, %s" % (variable, flag, _option_name(arg), FILE_FLAGS[flag]))
        # argparse reads "@FILE" as the arguments in FILE where a parser has fromfile_prefix_chars="@"; vLLM's has
        # none (0.16.0, 0.33.0), and an argument starting with @ is refused in case a build turns it on.
        if arg.startswith("@"):
            raise AnsibleFilterError(
                "%s has an argument starting with @: argparse can read it as a file of more arguments, past the "
                "checks of the role; give the arguments themselves" % variable)
    for flag in sorted(_flags_in(more)):
        if flag in REFUSED_FLAGS:
            raise AnsibleFilterError("%s sets %s: leave it out, %s" % (variable, flag, REFUSED_FLAGS[flag]))
    # A flag of the role's is refused however abbreviated (issue 24 point 12: "--hos 0.0.0.0" passed an
    # exact-name comparison and argparse read it as --host, past the loopback check of vllm_server_host).
    own = _flags_in(argv) | set(ALWAYS_OWN_FLAGS)
    twice = dict((resolved_flag(arg, own), _option_name(arg)) for arg in reversed(more) if arg.startswith("--"))
    twice.pop(None, None)
    if twice:
        flags = sorted(twice)
        hints = [dict(OWN_FLAG_HINTS, **ALWAYS_OWN_FLAGS)[flag] for flag in flags if flag in OWN_FLAG_HINTS or flag in ALWAYS_OWN_FLAGS]
        raise AnsibleFilterError(
            "%s sets %s, which the role already sets from its own variables: change those instead%s"
            % (variable, ", ".join(flag if twice[flag] == flag else "%s (as %s)" % (flag, twice[flag]) for flag in flags),
               "".join("; " + hint for hint in hints)))
    return argv + more


class FilterModule(object):
    def filters(self):
        return {"vllm_server_argv": vllm_server_argv}
