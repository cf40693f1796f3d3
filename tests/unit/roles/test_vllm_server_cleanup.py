"""roles/vllm_server/files/cleanup, run as root before each start: ends the service user's
leftover processes and removes its vLLM leftovers in a shm directory; other owners' files and
processes are untouched. The service user here is a uid with no account (so no real account's
processes on this machine can be hit); the "other user" is nobody."""

from __future__ import annotations

import os
import subprocess
import time

from conftest import ROOT, prerequisite

SCRIPT = ROOT / "roles" / "vllm_server" / "files" / "cleanup"
SERVICE_UID = 54321
NOBODY = 65534

pytestmark = prerequisite(os.geteuid() == 0, reason="needs root to own files and run processes as other users")


def as_uid(uid):
    def preexec():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    return preexec


def alive(proc):
    return proc.poll() is None


def test_cleanup_removes_only_the_service_users_leftovers(world_tmp):
    shm = world_tmp / "shm"
    shm.mkdir()
    mine = ["psm_1a2b", "sem.mp-xyz", "vllm_offload_0"]
    for name in mine + ["other.file"]:
        (shm / name).write_text("x")
        os.chown(shm / name, SERVICE_UID, SERVICE_UID)
    (shm / "vllm_offload_dir").mkdir()
    (shm / "vllm_offload_dir" / "blk").write_text("x")
    os.chown(shm / "vllm_offload_dir", SERVICE_UID, SERVICE_UID)
    for name, uid in (("psm_nobody", NOBODY), ("sem.mp-root", 0)):
        (shm / name).write_text("x")
        os.chown(shm / name, uid, uid)

    orphan = subprocess.Popen(["sleep", "300"], preexec_fn=as_uid(SERVICE_UID))
    stubborn = subprocess.Popen(["sh", "-c", "trap '' TERM; while :; do sleep 1; done"], preexec_fn=as_uid(SERVICE_UID))
    bystander = subprocess.Popen(["sleep", "300"], preexec_fn=as_uid(NOBODY))
    try:
        time.sleep(0.3)
        proc = subprocess.run([str(SCRIPT), str(SERVICE_UID), str(shm)], capture_output=True, text=True,
                              env=dict(os.environ, FLEET_VLLM_CLEANUP_GRACE="2"), timeout=60, check=False)
        assert proc.returncode == 0, proc.stderr
        time.sleep(0.3)
        orphan.poll()
        stubborn.poll()
        assert not alive(orphan) and not alive(stubborn), proc.stdout
        assert alive(bystander)
        assert "SIGTERM" in proc.stdout  # the stubborn one needed SIGKILL
        assert sorted(p.name for p in shm.iterdir()) == ["other.file", "psm_nobody", "sem.mp-root"]
        for name in mine:
            assert "removed %s" % (shm / name) in proc.stdout
    finally:
        for p in (orphan, stubborn, bystander):
            if alive(p):
                p.kill()
            p.wait()
        time.sleep(1.5)  # the stubborn shell's last "sleep 1" child ends on its own


def test_cleanup_with_nothing_to_do_and_refusing_root(world_tmp):
    proc = subprocess.run([str(SCRIPT), str(SERVICE_UID), str(world_tmp / "missing")], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout == ""
    proc = subprocess.run([str(SCRIPT), "root", str(world_tmp)], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1 and "refusing" in proc.stderr
    proc = subprocess.run([str(SCRIPT), "no-such-user-fleet", str(world_tmp)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 1 and "no user" in proc.stderr
