"""roles/vllm_server/files/cleanup, run as root before each start of the vLLM unit, in the unit's
own control group: it ends what is left in that control group and removes the service user's vLLM
segments in a shm directory that no process holds. Processes of the same uid outside the control
group (another instance, a container process, an admin shell) and the files they hold survive.

The control group is a real one: a directory named like a unit's (``*.service``) in the machine's
name=systemd hierarchy (cgroup v1, as on the test hosts; on cgroup v2 the script reads the "0::"
line instead). The service user is a uid with no account, so that no real account's processes on
this machine can be hit; the other owner is nobody.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from conftest import ROOT, prerequisite

SCRIPT = ROOT / "roles" / "vllm_server" / "files" / "cleanup"
PYTHON = "/usr/bin/python3"
SERVICE_UID = 54321
NOBODY = 65534
HIERARCHY = Path("/sys/fs/cgroup/systemd")
if not HIERARCHY.is_dir():  # cgroup v2: the unified hierarchy
    HIERARCHY = Path("/sys/fs/cgroup")

pytestmark = prerequisite(os.geteuid() == 0, reason="needs root to make control groups and run processes as other users")


@pytest.fixture
def unit_cgroup():
    """A control group named like a unit's; whatever is left in it is killed afterwards."""
    path = HIERARCHY / ("fleet-vllm-test-%s.service" % uuid.uuid4().hex[:12])
    path.mkdir()
    yield path
    for _attempt in range(50):
        procs = (path / "cgroup.procs").read_text().split()
        for pid in procs:
            try:
                os.kill(int(pid), 9)
            except ProcessLookupError:
                pass
        if not procs:
            break
        time.sleep(0.1)
    path.rmdir()


def start(argv, uid, cgroup=None):
    """argv as uid, first moved into cgroup (as root) when given."""
    def preexec():
        if cgroup is not None:
            (cgroup / "cgroup.procs").write_text(str(os.getpid()))
        if uid:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
    return subprocess.Popen(argv, preexec_fn=preexec, stdin=subprocess.DEVNULL)


def run_cleanup(cgroup, user, shm, grace="2", ptrace=True):
    """The cleanup as root in cgroup; without CAP_SYS_PTRACE (as root in a container) when not ptrace:
    then it cannot read another uid's /proc/PID/fd and must look as the service user."""
    prefix = [] if ptrace else ["setpriv", "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace"]
    return subprocess.run(prefix + [PYTHON, str(SCRIPT), str(user), str(shm)], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, FLEET_VLLM_CLEANUP_GRACE=grace), check=False,
                          preexec_fn=(lambda: (cgroup / "cgroup.procs").write_text(str(os.getpid()))) if cgroup else None)


def alive(proc):
    return proc.poll() is None


def make(path, uid, size=4096):
    path.write_bytes(b"\0" * size)
    os.chown(path, uid, uid)


@pytest.mark.parametrize("ptrace", [True, False], ids=["root", "root-without-cap-sys-ptrace"])
def test_cleanup_ends_the_units_leftovers_and_spares_the_same_uid_outside(world_tmp, unit_cgroup, ptrace):
    shm = world_tmp / "shm"
    shm.mkdir()
    # What the unit's previous run left: segments nobody holds any more.
    left = ["psm_1a2b3c4d", "sem.mp-xyz", "vllm_offload_0"]
    for name in left:
        make(shm / name, SERVICE_UID)
    (shm / "vllm_offload_dir").mkdir()
    make(shm / "vllm_offload_dir" / "blk", SERVICE_UID)
    os.chown(shm / "vllm_offload_dir", SERVICE_UID, SERVICE_UID)
    # Not vLLM's, or not the service user's: never touched.
    make(shm / "other.file", SERVICE_UID)
    make(shm / "psm_nobody", NOBODY)
    make(shm / "sem.mp-root", 0)
    # Held by processes of the same uid outside the unit: one open, one only mapped.
    make(shm / "psm_open", SERVICE_UID)
    make(shm / "psm_mapped", SERVICE_UID)

    procs = {
        # Leftovers of the unit: one ends on SIGTERM, one needs SIGKILL.
        "orphan": start(["sleep", "300"], SERVICE_UID, unit_cgroup),
        "stubborn": start(["sh", "-c", "trap '' TERM; while :; do sleep 1; done"], SERVICE_UID, unit_cgroup),
        # The same uid outside the unit (another instance, an admin shell), holding its segments.
        "holder": start(["sh", "-c", "exec sleep 300 3<>%s" % (shm / "psm_open")], SERVICE_UID),
        "mapper": start([PYTHON, "-c", "import mmap, os, time\n"
                                       "fd = os.open(%r, os.O_RDWR)\n"
                                       "m = mmap.mmap(fd, 4096)\n"
                                       "os.close(fd)\n"
                                       "time.sleep(300)\n" % str(shm / "psm_mapped")], SERVICE_UID),
        "bystander": start(["sleep", "300"], NOBODY),
    }
    try:
        time.sleep(0.5)
        in_unit = {int(p) for p in (unit_cgroup / "cgroup.procs").read_text().split()}
        # The two, and the stubborn shell's current "sleep 1".
        assert {procs["orphan"].pid, procs["stubborn"].pid} <= in_unit
        proc = run_cleanup(unit_cgroup, SERVICE_UID, shm, ptrace=ptrace)
        assert proc.returncode == 0, proc.stderr
        time.sleep(0.3)
        assert not alive(procs["orphan"]) and not alive(procs["stubborn"]), proc.stdout
        assert "ignored SIGTERM: %d" % procs["stubborn"].pid in proc.stdout
        for name in ("holder", "mapper", "bystander"):
            assert alive(procs[name]), (name, proc.stdout)
        assert sorted(p.name for p in shm.iterdir()) == [
            "other.file", "psm_mapped", "psm_nobody", "psm_open", "sem.mp-root"], proc.stdout
        for name in left + ["vllm_offload_dir"]:
            assert "removed %s" % (shm / name) in proc.stdout
        assert "kept %s: a process holds it" % (shm / "psm_open") in proc.stdout
        assert "kept %s: a process holds it" % (shm / "psm_mapped") in proc.stdout
        # Only the cleanup itself was left in the control group, and it has ended.
        assert (unit_cgroup / "cgroup.procs").read_text().split() == []
    finally:
        for p in procs.values():
            if alive(p):
                p.kill()
            p.wait()


def test_cleanup_outside_a_units_control_group_ends_nothing(world_tmp):
    """By hand from a shell (not in a *.service control group), no process is a leftover."""
    shm = world_tmp / "shm"
    shm.mkdir()
    make(shm / "psm_gone", SERVICE_UID)
    same_uid = start(["sleep", "300"], SERVICE_UID)
    try:
        time.sleep(0.3)
        proc = run_cleanup(None, SERVICE_UID, shm)
        assert proc.returncode == 0, proc.stderr
        assert "no process ended" in proc.stdout
        assert alive(same_uid)
        assert not (shm / "psm_gone").exists()
    finally:
        same_uid.kill()
        same_uid.wait()


def test_cleanup_with_nothing_to_do_and_refusing_root(world_tmp, unit_cgroup):
    proc = run_cleanup(unit_cgroup, SERVICE_UID, world_tmp / "missing")
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout
    proc = run_cleanup(unit_cgroup, "root", world_tmp)
    assert proc.returncode == 1 and "refusing" in proc.stderr
    proc = run_cleanup(unit_cgroup, "no-such-user-fleet", world_tmp)
    assert proc.returncode == 1 and "no user" in proc.stderr
