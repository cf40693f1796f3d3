"""roles/vllm_server/files/cleanup, run as root before each start of the vLLM unit, in the unit's
own control group: it ends what is left in that control group and removes the service user's vLLM
segments in a shm directory that no process holds. Processes of the same uid outside the control
group (another instance, a container process, an admin shell) and the files they hold survive.

The control group is a real one: a directory named like a unit's (``*.service``) in the machine's
name=systemd hierarchy (cgroup v1, as on the test hosts; on cgroup v2 the script reads the "0::"
line instead). The service user is a uid with no account, so that no real account's processes on
this machine can be hit; the other owner is nobody.

Issue 24 point 7: as root, the cleanup removes only regular files of SHM_DIR, by the directory's
descriptor, never following a link and never descending into a directory: entries of USER's that
are links to a directory of root's, or directories USER swaps for such links while the cleanup
runs, never make it remove anything outside SHM_DIR.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from conftest import ROOT, prerequisite, shared_tmpdir, snapshot

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
    # python3 -I, as the unit runs it (tests/unit/roles/test_root_commands.py); the environment is kept
    # here for FLEET_VLLM_CLEANUP_GRACE, which the unit's env -i never passes.
    return subprocess.run(prefix + [PYTHON, "-I", str(SCRIPT), str(user), str(shm)], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, FLEET_VLLM_CLEANUP_GRACE=grace), check=False,
                          preexec_fn=(lambda: (cgroup / "cgroup.procs").write_text(str(os.getpid()))) if cgroup else None)


def alive(proc):
    return proc.poll() is None


def make(path, uid, size=4096):
    path.write_bytes(b"\0" * size)
    os.chown(path, uid, uid)


def make_shm(base):
    """A shm directory as /dev/shm is: root's, world-writable and sticky."""
    shm = base / "shm"
    shm.mkdir()
    os.chmod(shm, 0o1777)
    return shm


@pytest.mark.parametrize("ptrace", [True, False], ids=["root", "root-without-cap-sys-ptrace"])
def test_cleanup_ends_the_units_leftovers_and_spares_the_same_uid_outside(world_tmp, unit_cgroup, ptrace):
    shm = make_shm(world_tmp)
    # What the unit's previous run left: segments nobody holds any more.
    left = ["psm_1a2b3c4d", "sem.mp-xyz", "vllm_offload_0"]
    for name in left:
        make(shm / name, SERVICE_UID)
    # A directory of a vLLM name: vLLM makes none (issue 24 point 7), so it is left, and what is in it.
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
            "other.file", "psm_mapped", "psm_nobody", "psm_open", "sem.mp-root", "vllm_offload_dir"], proc.stdout
        assert (shm / "vllm_offload_dir" / "blk").is_file()
        assert "kept %s: not a regular file" % (shm / "vllm_offload_dir") in proc.stdout
        for name in left:
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
    shm = make_shm(world_tmp)
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


# ---- issue 24 point 7: nothing outside SHM_DIR, whatever USER makes of its entries ----------------

VICTIM_NAMES = ["psm_%08x" % n for n in range(40)] + ["sem.mp-v%d" % n for n in range(5)] + ["vllm_offload_v%d.mmap" % n for n in range(5)]


@pytest.fixture
def victim():
    """A directory of root's outside SHM_DIR, full of files with the names the cleanup removes (most
    root's, a few USER's): what a link of USER's in SHM_DIR points at."""
    path = shared_tmpdir("fleet-vllm-victim-")
    for index, name in enumerate(VICTIM_NAMES):
        make(path / name, SERVICE_UID if index % 10 == 0 else 0, size=16)
    before = snapshot(path)
    yield path, before
    shutil.rmtree(path, ignore_errors=True)


def load_cleanup():
    """The script as a module (it has no .py name), to run its clean_shm() in this process."""
    loader = importlib.machinery.SourceFileLoader("fleet_vllm_cleanup_under_test", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def link(path, target, uid=SERVICE_UID):
    os.symlink(target, path)
    os.lchown(path, uid, uid)


class Adversary:
    """USER winning every race, deterministically: its directory ``target`` below SHM_DIR is a real
    directory whenever the cleanup lists the directory above it, and a link to ``victim`` whenever the
    cleanup lists ``target`` itself (what the issue did with renameat2 exchanges, timed perfectly).
    It acts on every os.scandir/os.listdir of a path; one of a descriptor (the fixed cleanup's) is
    left alone, as it names the directory opened, not a path USER can re-point."""

    def __init__(self, target, victim, monkeypatch):
        self.target, self.victim, self.swaps, self.active = target, victim, 0, True
        self.hidden = target.parent / ".real-dir"  # where the real directory waits (not a vLLM name)
        for name in ("scandir", "listdir"):
            monkeypatch.setattr(os, name, self.wrap(getattr(os, name)))

    def wrap(self, real):
        def listing(*args, **kwargs):
            path = args[0] if args else kwargs.get("path")
            if self.active and isinstance(path, (str, bytes, os.PathLike)):
                where = os.path.normpath(os.fsdecode(path))
                if where == str(self.target):
                    self.to_link()
                elif where == str(self.target.parent):
                    self.to_directory()
            return real(*args, **kwargs)
        return listing

    def to_link(self):
        if os.path.isdir(self.target) and not os.path.islink(self.target):
            os.rename(self.target, self.hidden)
            link(self.target, self.victim)
            self.swaps += 1

    def to_directory(self):
        if os.path.islink(self.target) and os.path.isdir(self.hidden):
            os.unlink(self.target)
            os.rename(self.hidden, self.target)


def test_cleanup_follows_no_link_out_of_shm_dir(world_tmp, victim, monkeypatch, capsys):
    """Links of USER's with vLLM names (to root's directory, to one of root's files), and a directory of
    USER's whose subdirectory is swapped for a link to root's directory right before the cleanup would
    list it: nothing outside SHM_DIR goes, the links stay (links, not regular files: removed by USER, if
    anyone), and the regular leftovers of the same run still are removed."""
    victim_dir, before = victim
    shm = make_shm(world_tmp)
    leftovers = ["psm_1a2b3c4d", "sem.mp-xyz", "vllm_offload_0.mmap"]
    for name in leftovers:
        make(shm / name, SERVICE_UID)
    link(shm / "psm_todir", victim_dir)
    link(shm / "sem.mp-tofile", victim_dir / VICTIM_NAMES[1])
    link(shm / "vllm_offload_todir", victim_dir)
    outer = shm / "vllm_offload_dir"
    (outer / "sub").mkdir(parents=True)
    for path in (outer, outer / "sub"):
        os.chown(path, SERVICE_UID, SERVICE_UID)
    for name in VICTIM_NAMES[:5]:
        make(outer / "sub" / name, SERVICE_UID, size=16)
    cleanup = load_cleanup()
    adversary = Adversary(outer / "sub", victim_dir, monkeypatch)
    try:
        cleanup.clean_shm(str(shm), SERVICE_UID)
    finally:
        adversary.active = False
    out = capsys.readouterr().out
    assert snapshot(victim_dir) == before, "files outside SHM_DIR were removed (%d swaps):\n%s" % (adversary.swaps, out)
    assert sorted(p.name for p in shm.iterdir()) == ["psm_todir", "sem.mp-tofile", "vllm_offload_dir", "vllm_offload_todir"], out
    for name in ("psm_todir", "sem.mp-tofile", "vllm_offload_todir"):
        assert (shm / name).is_symlink() and "kept %s: not a regular file" % (shm / name) in out, out
    # Never listed below SHM_DIR, so never swapped: USER's directory is as it was, left to USER.
    assert adversary.swaps == 0 and sorted(p.name for p in (outer / "sub").iterdir()) == sorted(VICTIM_NAMES[:5]), out
    for name in leftovers:
        assert "removed %s" % (shm / name) in out


def test_cleanup_of_a_shm_dir_that_is_a_link_removes_nothing(world_tmp, victim, capsys):
    """SHM_DIR itself is opened without following a link (O_NOFOLLOW): a link there is not looked into."""
    victim_dir, before = victim
    shm = world_tmp / "shm"
    link(shm, victim_dir, uid=0)
    load_cleanup().clean_shm(str(shm), SERVICE_UID)
    assert snapshot(victim_dir) == before
    assert "is a link" in capsys.readouterr().out


RENAME_EXCHANGE = 2  # linux/fs.h
AT_FDCWD = -100
RACE_RUNS = 50


def _exchange(libc, a, b):
    """renameat2(2) RENAME_EXCHANGE, as the issue's process swapped a directory and a link atomically;
    an error (a name the cleanup has removed meanwhile) is ignored, as the attacker would."""
    libc.renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE)


def test_cleanup_races_a_swapping_process_and_removes_nothing_outside(world_tmp, victim):
    """The issue's attack, for real: while the cleanup (run as the unit runs it) works, a thread swaps a
    directory of USER's below SHM_DIR, and one inside it, with links to root's directory, as fast as it
    can, RACE_RUNS times. Whatever the interleaving, nothing of root's directory goes, and each run's
    regular leftover does. (No timing is asserted: the fixed cleanup never lists below SHM_DIR nor
    follows a link, so no interleaving can lead it out.)"""
    victim_dir, before = victim
    libc = ctypes.CDLL(None, use_errno=True)
    if not hasattr(libc, "renameat2"):
        pytest.skip("this C library has no renameat2")
    shm = make_shm(world_tmp)
    top, top_alt = shm / "vllm_offload_race", shm / ".race-alt"
    sub, sub_alt = top / "sub", top / ".sub-alt"
    for run in range(RACE_RUNS):
        for path in (top, top_alt):
            if path.is_symlink():
                path.unlink()
            elif path.exists():
                shutil.rmtree(path)
        sub.mkdir(parents=True)
        for path in (top, sub):
            os.chown(path, SERVICE_UID, SERVICE_UID)
        for name in VICTIM_NAMES[:10]:
            make(sub / name, SERVICE_UID, size=16)
        link(sub_alt, victim_dir)
        link(top_alt, victim_dir)
        make(shm / ("psm_left%04d" % run), SERVICE_UID)
        stop = threading.Event()

        def swap():
            while not stop.is_set():
                _exchange(libc, sub, sub_alt)
                _exchange(libc, top, top_alt)

        swapper = threading.Thread(target=swap, daemon=True)
        swapper.start()
        try:
            proc = run_cleanup(None, SERVICE_UID, shm)
        finally:
            stop.set()
            swapper.join()
        assert proc.returncode == 0, proc.stderr
        assert snapshot(victim_dir) == before, "run %d removed files outside SHM_DIR:\n%s" % (run, proc.stdout)
        assert not (shm / ("psm_left%04d" % run)).exists(), proc.stdout
