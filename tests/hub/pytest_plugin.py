"""pytest fixtures for fakehub (tests/hub/fakehub.py), the fault-injecting Hub test server.

Register once, in tests/conftest.py (the repository root must be on sys.path first)::

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    pytest_plugins = ["tests.hub.pytest_plugin"]

Fixtures:

``fakehub``
    A started :class:`FakeHub` on 127.0.0.1 and a free port, stopped after the test.
``fakehub_env``
    The environment for a huggingface_hub client process talking to ``fakehub`` only:
    HF_ENDPOINT, HF_HOME in tmp_path, no telemetry, no Xet, and no token variables.
``hf_python``
    ``hf_python(code, *args, timeout=60, env=None)`` runs ``code`` with this Python (the venv
    that has huggingface_hub) in a fresh process with ``fakehub_env`` (plus ``env``), and returns
    the ``subprocess.CompletedProcess`` (text). A fresh process because huggingface_hub reads
    HF_ENDPOINT and friends at import.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .fakehub import FakeHub

__all__ = ["FakeHub", "fakehub", "fakehub_env", "hf_python", "run_hf_python"]

CLIENT_PYTHON = os.environ.get("FAKEHUB_CLIENT_PYTHON") or sys.executable


def run_hf_python(hub, hf_home, code, *args, timeout=60, env=None, python=None):
    """Run ``code`` (``python -c``) as a huggingface_hub client of ``hub``; CompletedProcess."""
    full_env = hub.client_env(hf_home)
    if env:
        full_env.update({k: str(v) for k, v in env.items()})
    return subprocess.run(
        [python or CLIENT_PYTHON, "-c", code, *[str(a) for a in args]],
        env=full_env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False,
    )


@pytest.fixture
def fakehub():
    hub = FakeHub().start()
    try:
        yield hub
    finally:
        hub.stop()


@pytest.fixture
def fakehub_env(fakehub, tmp_path):
    home = tmp_path / "hf-home"
    home.mkdir(exist_ok=True)
    return fakehub.client_env(home)


@pytest.fixture
def hf_python(fakehub, tmp_path):
    home = tmp_path / "hf-home"
    home.mkdir(exist_ok=True)

    def run(code, *args, timeout=60, env=None):
        return run_hf_python(fakehub, home, code, *args, timeout=timeout, env=env)

    run.hub = fakehub
    return run
