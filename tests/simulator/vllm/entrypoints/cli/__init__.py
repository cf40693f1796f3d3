# -*- coding: utf-8 -*-
"""TEST FIXTURE, NOT vLLM: package ``vllm.entrypoints.cli`` of the simulator imitating vLLM's ``vllm`` command."""
