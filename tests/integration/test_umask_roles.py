"""Issue 24, point 9: the roles under a CIS umask (027), run by ansible-playbook on this machine (connection local,
so the modules run with that umask as they would on a host whose root has it), into directories whose parents do not
exist yet. Then an unprivileged account (nobody, standing in for the service user and the peers' transient rsync
user: other accounts, in none of root's groups) runs the venv's Python and reads the served model, as the service
does. Before the fix python -m venv and pip made the venv 0750/0640 and os.makedirs the missing parents 0750.
The modules' own tests: tests/unit/plugins/modules/test_vllm_venv.py, test_managed_files.py."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import time

import pytest
import yaml

from conftest import FIXTURES, NOBODY, ROOT, run_playbook, shared_tmpdir, unreadable_reason

pytestmark = [pytest.mark.integration]

CIS_UMASK = 0o027
REPO = "nvidia/Kimi-K2.5-NVFP4"
# The base interpreter of the venv: nobody must be able to run it too (a pyenv Python under /root is not).
BASE_PYTHON = "/usr/bin/python3"

if os.geteuid() != 0 or not shutil.which("setpriv") or not os.access(BASE_PYTHON, os.X_OK):
    pytest.skip("needs root (an unprivileged account reads what the roles wrote), setpriv and %s" % BASE_PYTHON,
                allow_module_level=True)


def as_nobody(argv):
    """argv run as nobody (no groups), as the service user runs what the roles installed."""
    return subprocess.run([shutil.which("setpriv"), "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups",
                           "--"] + [str(a) for a in argv], capture_output=True, text=True, timeout=120, check=False,
                          cwd="/")


@pytest.fixture
def shared():
    """Where the roles write: a directory every account can enter, as / is on a host."""
    path = shared_tmpdir("fleet-vllm-umask-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_runtime_role_under_umask_027_leaves_a_venv_the_service_user_can_run(shared, tmp_path):
    from test_vllm_runtime_role import build_vllm_wheel  # pylint: disable=import-outside-toplevel

    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    build_vllm_wheel(wheelhouse, "0.16.0")
    base = shared / "opt" / "vllm"  # opt/ is missing: the module creates it
    run = run_playbook(ROOT / "tests" / "integration" / "playbooks" / "vllm_runtime.yml", extra_vars={
        "fleet_vllm_runtime_dir": str(base), "vllm_runtime_source": "wheelhouse", "vllm_runtime_installer": "pip",
        "vllm_runtime_version": "0.16.0", "vllm_runtime_wheelhouse": str(wheelhouse), "vllm_runtime_python": BASE_PYTHON,
    }, umask=CIS_UMASK, timeout=300)
    assert run.rc == 0, run.stdout[-3000:]
    python = base / "current" / "bin" / "python"
    ran = as_nobody([python, "-I", "-c", "import vllm; print(vllm.__version__)"])
    assert ran.returncode == 0 and ran.stdout.strip() == "0.16.0", (ran.stderr, unreadable_reason(python))
    assert (shared / "opt").stat().st_mode & 0o777 == 0o755
    again = run_playbook(ROOT / "tests" / "integration" / "playbooks" / "vllm_runtime.yml", extra_vars={
        "fleet_vllm_runtime_dir": str(base), "vllm_runtime_source": "wheelhouse", "vllm_runtime_installer": "pip",
        "vllm_runtime_version": "0.16.0", "vllm_runtime_wheelhouse": str(wheelhouse), "vllm_runtime_python": BASE_PYTHON,
    }, umask=CIS_UMASK, timeout=300)
    assert again.rc == 0 and again.stats()["changed"] == 0, again.stdout[-3000:]


def test_the_weights_role_under_umask_027_serves_a_model_the_service_user_can_read(shared, tmp_path, hub_wheels):
    """The whole role as deploy.yml runs it (its downloader venv, the snapshot from a hub, the served directory) into
    /srv/vllm/models and /var/lib/fleet-vllm that do not exist yet."""
    from tests.hub.fakehub import FakeHub  # pylint: disable=import-outside-toplevel
    from tests.hub.synthetic_repo import make_repo  # pylint: disable=import-outside-toplevel

    repo = tmp_path / "repo"
    make_repo(repo, shards=2, shard_bytes=200_000)
    hub = FakeHub().start()
    try:
        commit = hub.add_repo(REPO, str(repo))
        root = shared / "srv" / "vllm" / "models"
        inventory = tmp_path / "hosts.yml"
        inventory.write_text(yaml.safe_dump({"all": {"children": {"vllm_servers": {"hosts": {"node1": dict(
            ansible_connection="local", ansible_python_interpreter=sys.executable,
            fleet_vllm_models_root=str(root), fleet_vllm_hub_endpoint=hub.url, vllm_weights_source="hub",
            vllm_weights_state_dir=str(shared / "var" / "lib" / "fleet-vllm" / "weights"),
            vllm_weights_hub_venv=str(shared / "opt" / "fleet-vllm" / "hub"), vllm_weights_hub_python=BASE_PYTHON,
            vllm_weights_pip_extra_args=["--no-index", "--find-links", str(hub_wheels)],
            vllm_weights_retry_delay=1, fleet_vllm_model_revision=commit, fleet_vllm_trust_remote_code=False)}}}}}))
        started = time.monotonic()
        run = run_playbook(ROOT / "tests" / "integration" / "playbooks" / "vllm_weights.yml", "-i", inventory,
                           umask=CIS_UMASK, timeout=600)
        assert run.rc == 0, run.stdout[-4000:]
        served = root / "served" / REPO.replace("/", "--") / "variants" / commit[:12]
        shard = served / "model-00001-of-00002.safetensors"
        assert shard.is_symlink()
        for path in (served / "config.json", shard):
            assert unreadable_reason(path) is None, unreadable_reason(path)
        read = as_nobody(["/usr/bin/cat", served / "config.json"])
        assert read.returncode == 0 and read.stdout == (repo / "config.json").read_text(), read.stderr
        # wc reads every byte of the shard, through the served link into the snapshot.
        size = as_nobody(["/usr/bin/wc", "-c", shard])
        assert size.returncode == 0 and int(size.stdout.split()[0]) == (repo / shard.name).stat().st_size, size.stderr
        for parent in (shared / "srv", shared / "srv" / "vllm", root):
            assert parent.stat().st_mode & 0o777 == 0o755, parent
        again = run_playbook(ROOT / "tests" / "integration" / "playbooks" / "vllm_weights.yml", "-i", inventory,
                             umask=CIS_UMASK, timeout=600)
        assert again.rc == 0 and again.stats("node1")["changed"] == 0, again.stdout[-3000:]
        assert time.monotonic() - started < 300
    finally:
        hub.stop()


def test_the_server_role_refuses_a_closed_directory_it_did_not_create_before_anything_changes(shared):
    """An operator's /opt made 0750 under the CIS umask: the service user (created later, so in no group) could not
    run its Python. The role stops at its look, naming the directory, its mode and owner; nothing changes, no
    account is made, and the directory keeps its mode."""
    opt = shared / "opt"
    python = opt / "vllm" / "venvs" / "pypi-0.16.0" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.symlink_to(BASE_PYTHON)
    os.chmod(opt, 0o750)
    user = "fleet-vllm-umask-never"
    run = run_playbook(ROOT / "tests" / "integration" / "playbooks" / "vllm_server.yml", extra_vars={
        "fleet_vllm_python": str(python), "fleet_vllm_served_model_path": str(shared / "srv" / "served" / "kimi"),
        "fleet_vllm_pristine_dir": str(shared / "srv" / "pristine"), "vllm_server_user": user,
        "vllm_server_env_dir": str(shared / "etc" / "fleet-vllm"), "fleet_vllm_state_dir": str(shared / "var" / "fleet-vllm"),
    }, path=[FIXTURES / "bin"], env={"FLEET_VLLM_FAKE_GPUS": "rtx-pro-6000-x8"}, umask=CIS_UMASK, timeout=300)
    assert run.rc != 0 and run.stats()["changed"] == 0, run.stdout[-3000:] + run.stderr[-3000:]
    failed = [(name, r) for name, r in run.task_list() if r.get("failed")]
    assert failed and failed[0][0] == "Fail when the service user could not reach its Python or the model", [
        (name, sorted(r)) for name, r in run.task_list()][-3:]
    msg = failed[0][1]["msg"]
    assert "%s (mode 0750, owner root:root) does not let %s through to %s" % (opt, user, python) in msg, msg
    assert "fleet_vllm_runtime_dir" in msg and "Nothing was changed" in msg
    assert opt.stat().st_mode & 0o777 == 0o750 and sorted(p.name for p in shared.iterdir()) == ["opt"]
    with pytest.raises(KeyError):
        pwd.getpwnam(user)


SYSTEMCTL_SHOW = """#!/bin/sh
# A stand-in for systemctl show (this machine's PID 1 is not systemd): every unit asked for is not loaded. Anything
# else fails, so that a role that goes on to start a unit stops there.
[ "$1" = show ] || { echo "stand-in systemctl: only show" >&2; exit 1; }
for arg; do
  case "$arg" in
    show|--*) ;;
    *) printf 'Id=%s\\nLoadState=not-found\\nActiveState=inactive\\nUnitFileState=\\n\\n' "$arg" ;;
  esac
done
"""


def run_serving_weights_role(shared, tmp_path, gate, **host_vars):
    """The weights role of a host that serves its peers (source peer, the daemon's files rendered), run through
    ansible-playbook under the CIS umask with a stand-in systemctl that answers only show (no systemd here). The
    daemon's files go where this test can look (role constants; the extra vars outrank them)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(SYSTEMCTL_SHOW)
    os.chmod(bin_dir / "systemctl", 0o755)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"vllm_servers": {"hosts": {"node1": dict(
        ansible_connection="local", ansible_python_interpreter=sys.executable,
        fleet_vllm_models_root=str(shared / "srv" / "vllm" / "models"), fleet_vllm_hub_endpoint="http://127.0.0.1:9",
        fleet_vllm_model_revision="0123456789abcdef0123456789abcdef01234567", vllm_weights_source="peer",
        fleet_vllm_trust_remote_code=False,
        vllm_weights_peer_networks=["127.0.0.0/8"], vllm_weights_peer_address="127.0.0.1",
        # What vllm_preflight read in deploy.yml (the daemon's files are rendered from it before the look).
        vllm_preflight_interfaces={"lo": {"device": "lo", "ipv4": {"address": "127.0.0.1", "prefix": "8"},
                                          "ipv4_secondaries": [], "ipv6": []}},
        vllm_weights_state_dir=str(shared / "state"), vllm_weights_hub_venv=str(shared / "hub"), **host_vars)}}}}}))
    return run_playbook(ROOT / "tests" / "integration" / "playbooks" / "vllm_weights.yml", "-i", inventory, extra_vars={
        "__vllm_weights_rsync_gate": str(gate),
        "__vllm_weights_rsyncd_config": str(shared / "etc" / "fleet-vllm" / "rsyncd.conf"),
        "__vllm_weights_rsyncd_socket": str(shared / "systemd" / "fleet-vllm-rsyncd.socket"),
        "__vllm_weights_rsyncd_service": str(shared / "systemd" / "fleet-vllm-rsyncd@.service"),
    }, path=[bin_dir], umask=CIS_UMASK, timeout=300)


def test_the_weights_role_refuses_a_closed_libexec_before_a_copier_waits_for_its_gate(shared, tmp_path):
    """/usr/local/libexec made 0750 by someone else under the CIS umask: the peers' daemon (a transient user) could not
    run the handshake gate, and copiers took the closed connections for a busy peer for vllm_weights_peer_wait (an
    hour). The serving host's role stops at its look, naming it; nothing is written."""
    libexec = shared / "usr" / "local" / "libexec"
    libexec.mkdir(parents=True)
    os.chmod(libexec, 0o750)
    gate = libexec / "fleet-vllm" / "rsync-handshake-gate"
    run = run_serving_weights_role(shared, tmp_path, gate, vllm_weights_pip_extra_args=["--no-index"])
    assert run.rc != 0 and run.stats("node1")["changed"] == 0, run.stdout[-3000:]
    failed = [(name, r) for name, r in run.task_list("node1") if r.get("failed")]
    assert failed and failed[0][0] == "Fail when the peers' rsync daemon could not reach the snapshots or its gate", [
        r.get("msg") for name, r in failed]
    msg = failed[0][1]["msg"]
    assert "%s (mode 0750, owner root:root) does not let other accounts through to %s" % (libexec, gate) in msg, msg
    assert libexec.stat().st_mode & 0o777 == 0o750
    assert sorted(p.name for p in shared.iterdir()) == ["usr"]


def test_the_weights_role_under_umask_027_writes_a_gate_the_peers_daemon_can_run(shared, tmp_path, hub_wheels):
    """A serving host's role under umask 027 with /usr/local/libexec missing: it creates it, writes the handshake gate,
    and then stops where it starts the socket unit (no systemd here: the stand-in systemctl answers only show). The
    gate is then run as nobody, as the daemon's transient user runs it, on a real TCP connection that sends an rsync
    greeting: it passes the connection on to the program named (here echo). Before the fix libexec came out 0750 and
    the gate could not be opened: the connection closed without an answer, which copiers took for a busy peer."""
    import socket  # pylint: disable=import-outside-toplevel

    (shared / "usr" / "local").mkdir(parents=True)
    (shared / "systemd").mkdir()  # /etc/systemd/system, which exists on a host
    gate = shared / "usr" / "local" / "libexec" / "fleet-vllm" / "rsync-handshake-gate"
    run = run_serving_weights_role(shared, tmp_path, gate, vllm_weights_hub_python=BASE_PYTHON,
                                   vllm_weights_pip_extra_args=["--no-index", "--find-links", str(hub_wheels)])
    failed = [name for name, r in run.task_list("node1") if r.get("failed")]
    assert failed == ["Listen for peers (socket activation; a connection starts one rsync)"], [
        (name, r.get("msg")) for name, r in run.task_list("node1") if r.get("failed")]
    assert (shared / "usr" / "local" / "libexec").stat().st_mode & 0o777 == 0o755
    # rsyncd.conf is written later, by the export step once the commit is known (tasks/export.yml, fleet.vllm.managed_files
    # with mode 0644 and 0755 parents: tests/unit/plugins/modules/test_managed_files.py); the gate is written here.
    assert unreadable_reason(gate) is None
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        conn, _address = server.accept()
        with client, conn:
            client.sendall(b"@RSYNCD: 31.0\n")
            ran = subprocess.run([shutil.which("setpriv"), "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups",
                                  "--", BASE_PYTHON, "-I", str(gate), "10", "/bin/echo", "gate passed"], stdin=conn,
                                 capture_output=True, text=True, timeout=60, check=False, cwd="/")
    assert ran.returncode == 0 and ran.stdout == "gate passed\n", (ran.returncode, ran.stderr)
