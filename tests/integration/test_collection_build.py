"""The built collection carries what users need and nothing of the development tree, and
installs and works outside the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("build")
    proc = subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(out), str(ROOT)],
        capture_output=True, text=True, check=False, cwd=out,
    )
    assert proc.returncode == 0, proc.stderr
    (tarball,) = out.glob("fleet-vllm-*.tar.gz")
    return tarball


def test_tarball_holds_only_what_users_need(built):
    with tarfile.open(built) as tar:
        names = set(tar.getnames())
    for required in ("MANIFEST.json", "FILES.json", "README.md", "LICENSE", "meta/runtime.yml",
                     "plugins/modules/kv_cache_config.py", "plugins/module_utils/_json_edit.py",
                     "plugins/module_utils/_kv_cache.py", "changelogs/changelog.yaml"):
        assert required in names, required
    for name in names:
        top = name.split("/")[0]
        assert top not in {"tests", "tools", ".ci", "collections", ".venv", ".cache", "molecule",
                           "benchmarks", ".git", "requirements-dev.txt", "pytest.ini", "Makefile",
                           ".ansible-lint", ".gitignore", ".config"}, name
        assert not name.startswith("inventories/demo"), name  # the local demo fleet needs the test harness
        assert "__pycache__" not in name, name


def test_installed_collection_documents_and_runs_its_module(built, tmp_path):
    dest = tmp_path / "collections"
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(dest), ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"))
    install = subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "install", "--offline", "-p", str(dest), str(built)],
        capture_output=True, text=True, env=env, cwd=tmp_path, check=False,
    )
    assert install.returncode == 0, install.stderr
    doc = subprocess.run(
        [str(BIN / "ansible-doc"), "fleet.vllm.kv_cache_config"],
        capture_output=True, text=True, env=env, cwd=tmp_path, check=False,
    )
    assert doc.returncode == 0, doc.stderr
    assert "kv_cache_dtype_before" in doc.stdout and "state" in doc.stdout
