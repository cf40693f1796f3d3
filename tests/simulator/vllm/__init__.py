# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST FIXTURE, NOT vLLM: the ``vllm`` package of the fleet.vllm engine simulator.

It imitates vLLM's OpenAI-compatible server on hosts without a GPU (see vllm/_simulator.py for
what it imitates and where it differs). tests/simulator/build-wheel.py writes the version into
this file and into vllm/_version.py (as setuptools-scm does for vLLM), so ``vllm.__version__``
is the version the wheel was built as. Importing it loads nothing: no torch, no CUDA.
"""

__version__ = "0+unbuilt"
__version_tuple__ = (0, "unbuilt")
