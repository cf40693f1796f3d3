# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST FIXTURE, NOT vLLM: the ``vllm`` console script of the simulator imitating vLLM's OpenAI server.

Imitates ``vllm --version`` / ``vllm -v`` (prints the version) and ``vllm serve [model] [flags]``
(see vllm/_simulator.py). Differs: the other subcommands of the real ``vllm`` (chat, complete,
bench, ...) do not exist; an unknown flag after ``serve`` is refused with the top-level
``vllm: error: unrecognized arguments: ...`` as vLLM 0.33 refuses it, but the usage line lists
only ``serve``.
"""

import sys


def main():
    from vllm._simulator import main as simulate
    sys.exit(simulate(sys.argv[1:], top_level=True))


if __name__ == "__main__":
    main()
