#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read the option list of a real vLLM's OpenAI server parser into JSON (for the test simulator).

Run it with the Python of a venv holding the real vLLM, on a host without a GPU with
VLLM_TARGET_DEVICE=cpu, once per version; each run adds (or replaces) that version's entry in
the output file::

    VLLM_TARGET_DEVICE=cpu /root/.cache/fleet-vllm/vllm-0.33.0-py3.12/bin/python \
        tools/extract-vllm-flags.py tests/simulator/vllm/flags.json
    VLLM_TARGET_DEVICE=cpu /root/.cache/fleet-vllm/vllm-0.16.0-py3.12/bin/python \
        tools/extract-vllm-flags.py tests/simulator/vllm/flags.json

The parser is built the way vLLM's own ``python -m vllm.entrypoints.openai.api_server`` builds
it (and the way module_utils/_vllm_probe_payload.py does): ``make_arg_parser`` from
``vllm.entrypoints.common.cli_args`` (0.33) or ``vllm.entrypoints.openai.cli_args`` (0.16) on a
``FlexibleArgumentParser``; builds up to 0.16 get vLLM's CpuPlatform first. Nothing is typed
by hand: every argparse action of that parser is written out with its option strings, whether
it takes a value, nargs, choices, the name of its type function and its dest.

The output is test data: tests/simulator builds the simulator's argparse parser from it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

HEADER = (
    "GENERATED DATA, do not edit by hand. Written by tools/extract-vllm-flags.py from the argument "
    "parser of the real vLLM (make_arg_parser(FlexibleArgumentParser()), the parser of "
    "`python -m vllm.entrypoints.openai.api_server` and `vllm serve`), run with each listed "
    "version's own venv Python and VLLM_TARGET_DEVICE=cpu. Used by the fleet.vllm test "
    "simulator (tests/simulator) to accept exactly the flags that version accepts."
)


def build_parser():
    sys.path[:] = [p for p in sys.path if p not in ("", ".", os.path.dirname(os.path.abspath(__file__)))]
    import vllm
    try:
        from vllm import platforms
        current = platforms.current_platform
        unspecified = current.is_unspecified() if hasattr(current, "is_unspecified") else not current.device_type
        if unspecified and hasattr(platforms, "_current_platform"):
            from vllm.platforms.cpu import CpuPlatform
            platforms._current_platform = CpuPlatform()
    except Exception as exc:  # the parser may still build; say why the platform was not set
        print("note: cannot set vLLM's platform: %s" % exc, file=sys.stderr)
    try:
        from vllm.entrypoints.common import cli_args
    except ImportError:
        from vllm.entrypoints.openai import cli_args
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    parser = cli_args.make_arg_parser(FlexibleArgumentParser(description="vLLM OpenAI-Compatible RESTful API server."))
    return vllm, cli_args, parser


def jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(item) for item in value]
    return str(getattr(value, "value", value))


def describe(action):
    kind = type(action).__name__
    takes_value = action.nargs != 0 and kind not in (
        "_StoreTrueAction", "_StoreFalseAction", "_StoreConstAction", "_AppendConstAction",
        "_CountAction", "_HelpAction", "_VersionAction", "BooleanOptionalAction")
    type_name = None
    if action.type is not None:
        type_name = getattr(action.type, "__name__", None) or type(action.type).__name__
    entry = dict(
        option_strings=list(action.option_strings),
        dest=action.dest,
        action=kind,
        takes_value=bool(takes_value),
        nargs=action.nargs,
        choices=jsonable(list(action.choices)) if action.choices is not None else None,
        type=type_name,
        required=bool(action.required),
    )
    if kind in ("_StoreTrueAction", "_StoreFalseAction", "_StoreConstAction"):
        entry["const"] = jsonable(action.const)
    return entry


def main():
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("output", help="the JSON file to add this vLLM's entry to")
    args = cli.parse_args()
    vllm, cli_args, parser = build_parser()
    actions = [describe(action) for action in parser._actions]
    version = str(vllm.__version__)
    try:
        with open(args.output, encoding="utf-8") as handle:
            document = json.load(handle)
    except FileNotFoundError:
        document = {}
    document["_header"] = HEADER
    versions = document.setdefault("versions", {})
    versions[version] = dict(
        extracted=datetime.date.today().isoformat(),
        python=sys.version.split()[0],
        parser="%s.make_arg_parser(FlexibleArgumentParser())" % cli_args.__name__,
        options=[entry for entry in actions if entry["option_strings"]],
        positionals=[entry for entry in actions if not entry["option_strings"]],
    )
    document["versions"] = dict(sorted(versions.items()))
    tmp = args.output + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1, sort_keys=False)
        handle.write("\n")
    os.replace(tmp, args.output)
    count = sum(len(entry["option_strings"]) for entry in versions[version]["options"])
    print("vLLM %s: %d options (%d option strings) written to %s" % (
        version, len(versions[version]["options"]), count, args.output), file=sys.stderr)


if __name__ == "__main__":
    main()
