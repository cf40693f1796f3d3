"""fleet.vllm.vllm_venv without installing anything: the marker decides "installed" without an
interpreter or an index, check mode creates nothing, bad pins are refused. Real installs are in
tests/integration/test_vllm_runtime_role.py."""

from __future__ import annotations

import json
import os

import pytest

from conftest import snapshot

SHA = "0123456789abcdef0123456789abcdef01234567"


def fake_venv(venvs, key, marker):
    venv = venvs / key
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text("#!/bin/sh\nexit 1\n")
    os.chmod(python, 0o755)
    if marker is not None:
        (venv / ".fleet-vllm-runtime.json").write_text(json.dumps(marker))
    return venv


@pytest.mark.parametrize("marker, changed", [
    ({"pin": {"source": "nightly", "commit": SHA}, "version": "0.16.0rc2.dev313+g0123456789ab", "installer": "uv"}, False),
    ({"pin": {"source": "nightly", "commit": SHA}, "version": "0.16.0", "installer": "uv"}, True),  # wrong build recorded
    ({"pin": {"source": "nightly", "commit": "f" * 40}, "version": "0.16.0+gffffffffffff"}, True),  # another pin
    (None, True),  # interrupted install: no marker
])
def test_marker_decides_without_network_or_interpreter(run_module, tmp_path, marker, changed):
    venvs = tmp_path / "venvs"
    fake_venv(venvs, "nightly-0123456789ab", marker)
    before = snapshot(tmp_path)
    # check mode: an install that is needed is only reported; the interpreter exists (sys python).
    res = run_module("vllm_venv", {"venvs_dir": str(venvs), "source": "nightly", "commit": SHA,
                                   "python": "/bin/sh", "installer": "uv"}, check=True)
    assert not res.failed, res
    assert res.result["changed"] is changed
    assert res.result["key"] == "nightly-0123456789ab"
    if changed:
        assert res.result["rebuilt"] is True and res.result["installer"] == "uv"
        assert "--extra-index-url" in res.result["cmd"] and "https://wheels.vllm.ai/" + SHA in res.result["cmd"]
    else:
        assert res.result["cmd"] == [] and res.result["version"] == marker["version"]
    assert snapshot(tmp_path) == before


def test_installed_venv_needs_no_interpreter(run_module, tmp_path):
    venvs = tmp_path / "venvs"
    fake_venv(venvs, "pypi-0.16.0", {"pin": {"source": "pypi", "version": "0.16.0"}, "version": "0.16.0"})
    res = run_module("vllm_venv", {"venvs_dir": str(venvs), "source": "pypi", "version": "0.16.0",
                                   "python": str(tmp_path / "no-such-python")})
    assert not res.failed and res.result["changed"] is False, res


@pytest.mark.parametrize("args, message", [
    ({"source": "nightly", "commit": SHA[:12]}, "full 40-hex commit sha"),
    ({"source": "nightly", "commit": SHA, "installer": "pip"}, "needs uv"),
    ({"source": "pypi", "version": ""}, "version must be"),
    ({"source": "index", "version": "0.16.0"}, "index_url is required"),
    ({"source": "pypi", "version": "0.16.0", "python": "/no/such/python3.12"}, "cannot find the Python"),
])
def test_refusals_create_nothing(run_module, tmp_path, args, message):
    venvs = tmp_path / "venvs"
    res = run_module("vllm_venv", dict(args, venvs_dir=str(venvs)))
    assert res.failed and message in res.result["msg"], res
    assert not venvs.exists()


def test_base_dir_and_venvs_dir_get_their_owner_and_mode_in_the_same_run(run_module, tmp_path):
    """The role's base directory and directory of venvs are mended by the install check's own module
    run: a rerun with nothing to do is one module run on the host."""
    base = tmp_path / "opt-vllm"
    venvs = base / "venvs"
    marker = {"pin": {"source": "pypi", "version": "0.16.0"}, "version": "0.16.0"}
    fake_venv(venvs, "pypi-0.16.0", marker)
    os.chmod(base, 0o700)
    os.chmod(venvs, 0o750)
    args = {"base_dir": str(base), "venvs_dir": str(venvs), "source": "pypi", "version": "0.16.0",
            "owner": "root", "group": "root"}
    before = snapshot(tmp_path)
    planned = run_module("vllm_venv", args, check=True)
    assert not planned.failed and planned.result["changed"] is True, planned
    assert planned.result["changed_directories"] == [str(base), str(venvs)]
    assert snapshot(tmp_path) == before
    mended = run_module("vllm_venv", args)
    assert not mended.failed and mended.result["changed"] is True, mended
    assert mended.result["msg"] == "vLLM 0.16.0 is installed in %s (%s, %s: owner, group or mode set)" % (
        venvs / "pypi-0.16.0", base, venvs)
    assert (os.stat(base).st_mode & 0o7777, os.stat(venvs).st_mode & 0o7777) == (0o755, 0o755)
    again = run_module("vllm_venv", args)
    assert not again.failed and again.result["changed"] is False and again.result["changed_directories"] == [], again


def test_base_dir_must_be_above_venvs_dir(run_module, tmp_path):
    args = {"base_dir": str(tmp_path / "elsewhere"), "venvs_dir": str(tmp_path / "venvs"), "source": "pypi",
            "version": "0.16.0"}
    before = snapshot(tmp_path)
    res = run_module("vllm_venv", args)
    assert res.failed
    assert res.result["msg"] == ("base_dir %s is not a directory above venvs_dir %s: set base_dir to a parent of "
                                 "venvs_dir, or leave it unset" % (tmp_path / "elsewhere", tmp_path / "venvs"))
    assert snapshot(tmp_path) == before
