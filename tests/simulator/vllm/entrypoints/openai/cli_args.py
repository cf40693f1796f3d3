# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST FIXTURE, NOT vLLM: ``make_arg_parser`` of the simulator imitating vLLM's OpenAI server.

Imitates ``vllm.entrypoints.openai.cli_args.make_arg_parser`` (0.16; ``vllm.entrypoints.common``
in 0.33): it adds vLLM's server options to a parser. The options are not typed here: they come
from vllm/flags.json, written by tools/extract-vllm-flags.py from the real vLLM's parser, one
list per vLLM version. This build uses the list of its own release when there is one (a
pre-release or nightly of 0.16.0 uses 0.16.0's), else the latest listed release before it, else
the earliest list.

The collection's probe (module_utils/_vllm_probe_payload.py, ``check_server_args``) finds this
module and checks a server command line against the same list the simulator enforces; it finds
no attention backend registry here and falls back to its version table for backends, and no
``vllm.transformers_utils`` for the KV dtype (it falls back to module_utils/_kv_cache.py, the
code the simulator runs too).

Differs from vLLM: option values are checked only for argparse's int/float types and recorded
choices (vLLM's own type functions are not run); defaults are None/False rather than vLLM's.
"""

from __future__ import annotations

import argparse
import json
import os
import re

from vllm import __version__

FLAGS_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "flags.json")
_TYPES = {"int": int, "float": float}


def _release(version):
    match = re.match(r"^\s*v?([0-9]+(?:\.[0-9]+)*)", version)
    parts = tuple(int(p) for p in match.group(1).split(".")) if match else (0,)
    return parts + (0,) * (3 - len(parts))


def flag_table(version=__version__):
    """(listed version, its entry of flags.json) for a vLLM version."""
    with open(FLAGS_FILE, encoding="utf-8") as handle:
        versions = json.load(handle)["versions"]
    ordered = sorted(versions, key=_release)
    mine = _release(version)
    chosen = ordered[0]
    for listed in ordered:
        if _release(listed) <= mine:
            chosen = listed
    return chosen, versions[chosen]


class _Switch(argparse.Action):
    """vLLM's on/off pairs (BooleanOptionalAction, EnableDisableAction) and plain switches."""

    def __init__(self, option_strings, dest, value_when_given=True, **kwargs):
        self.value_when_given = value_when_given
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        negative = option_string.startswith(("--no-", "--disable-")) and len(self.option_strings) > 1
        setattr(namespace, self.dest, (not self.value_when_given) if negative else self.value_when_given)


def add_option(parser, entry):
    strings = entry["option_strings"]
    kind = entry["action"]
    common = dict(dest=entry["dest"])
    if kind == "_HelpAction":
        if any(s in parser._option_string_actions for s in strings):
            return None  # the parser has its own -h/--help
        return parser.add_argument(*strings, action="help", help="show this help message and exit")
    if kind == "_VersionAction":
        return parser.add_argument(*strings, action="version", version=__version__)
    if not entry["takes_value"]:
        if kind == "_StoreFalseAction":
            return parser.add_argument(*strings, action=_Switch, value_when_given=False, default=None, **common)
        if kind in ("_StoreConstAction", "_AppendConstAction", "_CountAction"):
            return parser.add_argument(*strings, action="store_const", const=entry.get("const", True), **common)
        return parser.add_argument(*strings, action=_Switch, default=None, **common)
    kwargs = dict(common)
    if entry["nargs"] is not None:
        kwargs["nargs"] = entry["nargs"]
    if entry["choices"] is not None:
        kwargs["choices"] = entry["choices"]
    if entry["type"] in _TYPES:
        kwargs["type"] = _TYPES[entry["type"]]
    if kind == "_AppendAction":
        kwargs["action"] = "append"
    return parser.add_argument(*strings, **kwargs)


def make_arg_parser(parser):
    """Add the server options of this build's vLLM version (from flags.json) to ``parser``."""
    dummy, table = flag_table()
    parser.add_argument("model_tag", type=str, nargs="?", help="The model tag to serve")
    for entry in table["options"]:
        add_option(parser, entry)
    return parser


def validate_parsed_serve_args(args):
    """The check of vLLM's validate_parsed_serve_args that the simulator imitates."""
    if getattr(args, "enable_auto_tool_choice", False) and not getattr(args, "tool_call_parser", None):
        raise TypeError("Error: --enable-auto-tool-choice requires --tool-call-parser")
