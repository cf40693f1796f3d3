# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST FIXTURE, NOT vLLM: the simulator's copy of the behaviour of vLLM's FlexibleArgumentParser.

Imitates what ``vllm.utils.argparse_utils.FlexibleArgumentParser.parse_args`` does to a command
line before argparse sees it: ``--key_name`` becomes ``--key-name`` (before any ``=`` or
``.``), and with ``serve`` a ``--model X`` moves to the positional model tag. Differs: no
``--config`` YAML files, no ``-O`` shorthand, no ``--help=keyword`` search, no JSON/dotted
``--a.b`` nested values.
"""

from __future__ import annotations

import argparse
import re
import sys

_KEY = re.compile(r"(?<=--)[^\.]*")


class FlexibleArgumentParser(argparse.ArgumentParser):
    """argparse with vLLM's spelling rules for option names."""

    def parse_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        if args[:1] == ["serve"]:
            for index, arg in enumerate(args):
                if re.match(r"^--model(=.+|$)", arg):
                    if arg == "--model" and index + 1 < len(args):
                        tag, rest = args[index + 1], index + 2
                    else:
                        tag, rest = arg[len("--model="):], index + 1
                    args = ["serve", tag] + args[1:index] + args[rest:]
                    break
        processed = []
        for arg in args:
            if arg.startswith("--"):
                key, sep, value = arg.partition("=")
                processed.append(_KEY.sub(lambda m: m.group(0).replace("_", "-"), key, count=1) + sep + value)
            else:
                processed.append(arg)
        return super().parse_args(processed, namespace)
