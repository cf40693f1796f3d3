# -*- coding: utf-8 -*-
"""TEST FIXTURE, NOT vLLM: vllm/_version.py of the simulator, rewritten by build-wheel.py.

Imitates the file setuptools-scm writes into vLLM wheels (``__version__``, ``__commit_id__``:
the ``g<sha>`` of a nightly's local version, else None).
"""

__version__ = version = "0+unbuilt"
__commit_id__ = commit_id = None
