"""A test whose prerequisite is missing skips on a developer's machine and FAILS in CI (CI=true):
a CI machine without Python 3.12, git, olah, systemd-analyze, root or the real vLLM must not
report green. Runs pytest on two small tests using the helpers of tests/conftest.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT

TESTS = '''
import pytest
from conftest import missing_prerequisite, prerequisite


@prerequisite(False, reason="frobnicator is not installed")
def test_marked():
    pass


def test_called():
    missing_prerequisite("no Python 9.9 found")


@prerequisite(True, reason="present")
def test_present():
    pass
'''


@pytest.mark.parametrize("ci, outcome", [
    ("", "1 passed, 2 skipped"),
    ("true", "1 failed, 1 passed, 1 error"),  # the marker fails the test's setup: an error
], ids=["developer", "ci"])
def test_missing_prerequisites(tmp_path, ci, outcome):
    (tmp_path / "test_needs.py").write_text(TESTS)
    env = dict(os.environ, CI=ci, PYTHONPATH=str(ROOT / "tests"))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-rsf",
                           "-o", "addopts=", "--rootdir", str(tmp_path), str(tmp_path / "test_needs.py")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False)
    out = proc.stdout
    assert outcome in out, out[-3000:]
    if ci:
        assert proc.returncode == 1
        assert "missing prerequisite in CI (CI=true): frobnicator is not installed" in out
        assert "missing prerequisite in CI (CI=true): no Python 9.9 found" in out
    else:
        assert proc.returncode == 0
        assert "frobnicator is not installed" in out and "no Python 9.9 found" in out
