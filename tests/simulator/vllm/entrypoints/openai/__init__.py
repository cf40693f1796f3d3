# -*- coding: utf-8 -*-
"""TEST FIXTURE, NOT vLLM: package ``vllm.entrypoints.openai`` of the simulator imitating vLLM's OpenAI server."""
