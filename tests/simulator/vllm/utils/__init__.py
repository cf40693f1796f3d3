# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST FIXTURE, NOT vLLM: ``vllm.utils`` of the simulator imitating vLLM's OpenAI server.

Holds only ``FlexibleArgumentParser`` (re-exported as older vLLM builds did); the rest of the
real package is not imitated.
"""

from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: F401
