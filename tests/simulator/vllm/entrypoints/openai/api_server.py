# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST FIXTURE, NOT vLLM: ``python -m vllm.entrypoints.openai.api_server`` of the simulator.

Imitates vLLM's OpenAI-compatible API server entry point, the command fleet.vllm's systemd unit
runs: same flags (argparse program name ``api_server.py``, as with the real module), same KV
dtype resolution, same refusal, same endpoints; see vllm/_simulator.py for what it imitates and
where it differs (no model, no GPU work, fixed replies). Unlike vLLM 0.33 it prints no
deprecation warning for the ``-m`` form.
"""

import sys

if __name__ == "__main__":
    from vllm._simulator import main

    sys.exit(main(sys.argv[1:], top_level=False))
