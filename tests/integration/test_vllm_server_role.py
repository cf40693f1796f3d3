"""vllm_server: bad input fails before anything changes, naming the variable; the unit the role
renders passes systemd-analyze verify and its ExecStart carries the seed's flags, quoted."""

from __future__ import annotations

import json
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT, prerequisite, run_playbook

pytestmark = [pytest.mark.integration]
SCRIPT_CLEANUP = ROOT / "roles" / "vllm_server" / "files" / "cleanup"


def play(playbook, **extra):
    run = run_playbook(ROOT / "tests" / "integration" / "playbooks" / playbook, extra_vars=extra,
                       path=[FIXTURES / "bin"], env={"FLEET_VLLM_FAKE_GPUS": "rtx-pro-6000-x8"}, timeout=300)
    return run.rc, run.stats(), run.task_list()


@pytest.mark.parametrize("variables, words", [
    ({"vllm_server_tensor_parallel_size": 3}, ["vllm_server_tensor_parallel_size is 3", "8 GPUs"]),
    ({"vllm_server_tensor_parallel_size": 16}, ["vllm_server_tensor_parallel_size is 16", "8 GPUs"]),
    ({"vllm_server_port": 70000}, ["vllm_server_port is 70000", "1 to 65535"]),
    ({"vllm_server_port": "http"}, ["vllm_server_port is http"]),
    ({"vllm_server_kv_cache_dtype": "float16"}, ["vllm_server_kv_cache_dtype is float16", "#54338"]),
    ({"vllm_server_model_path": ""}, ["vllm_server_model_path"]),
    ({"vllm_server_extra_args": {"api_key": "s3cret"}}, ["vllm_server_extra_args", "--api-key"]),
    # An existing account that is not a system account (nobody: uid 65534, above SYS_UID_MAX) is not taken over.
    ({"vllm_server_user": "nobody"}, ["vllm_server_user is 'nobody'", "uid 65534", "not a system account",
                                      "vllm_server_adopt_existing_user"]),
    # The sandbox's variables cannot smuggle other unit settings in.
    ({"vllm_server_hardening_overrides": {"ExecStartPost": "/bin/sh"}}, ["vllm_server_hardening_overrides names ExecStartPost"]),
    ({"vllm_server_hardening_overrides": {"ProtectSystem": "full\nUser=root"}}, ["vllm_server_hardening_overrides", "line break"]),
    ({"vllm_server_device_allow": ["/dev/nvidia0 rw\nUser=root"]}, ["vllm_server_device_allow"]),
    ({"vllm_server_read_write_paths": ["var/lib/x"]}, ["vllm_server_read_write_paths", "absolute"]),
])
def test_bad_input_fails_before_anything_changes(variables, words):
    user = "fleet-vllm-test-never"
    extra = {"vllm_server_model_path": "/srv/models/kimi", "vllm_server_user": user,
             "vllm_server_env_dir": "/nonexistent-fleet-vllm/etc", "vllm_server_state_dir": "/nonexistent-fleet-vllm/state"}
    extra.update(variables)
    rc, stats, tasks = play("vllm_server.yml", **extra)
    assert rc != 0 and stats["failures"] == 1 and stats["changed"] == 0
    msg = [r for dummy, r in tasks if r.get("failed")][0]["msg"]
    assert all(word in msg for word in words), msg
    assert "s3cret" not in json.dumps(tasks)
    ran = [name for name, dummy in tasks]
    assert not any(name.startswith(("Create", "Write", "Install")) for name in ran), ran
    with pytest.raises(KeyError):
        pwd.getpwnam(user)
    assert not Path("/nonexistent-fleet-vllm").exists()


@prerequisite(shutil.which("systemd-analyze"), reason="systemd-analyze is not installed (Debian: systemd)")
def test_rendered_unit_passes_systemd_analyze_verify(tmp_path):
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.symlink_to(sys.executable)
    unit = tmp_path / "render" / "vllm.service"
    unit.parent.mkdir()
    rc, stats, tasks = play("vllm_server_unit.yml", unit_dest=str(unit), vllm_server_python=str(python),
                            vllm_server_model_path="/srv/models/Kimi K2.5 100%",
                            vllm_server_extra_args={"hf_overrides": {"note": "a $b"}})
    assert rc == 0, tasks
    text = unit.read_text()
    assert text.startswith("#") and "Ansible managed" in text
    exec_start = [line for line in text.splitlines() if line.startswith("ExecStart=")][0]
    assert exec_start == (
        'ExecStart=%s -m vllm.entrypoints.openai.api_server --model "/srv/models/Kimi K2.5 100%%%%" '
        "--tensor-parallel-size 8 --tool-call-parser kimi_k2 --reasoning-parser kimi_k2 "
        "--enable-auto-tool-choice --trust-remote-code --served-model-name nvidia/Kimi-K2.5-NVFP4 "
        '--host 0.0.0.0 --port 8000 --hf-overrides "{\\"note\\":\\"a $$b\\"}"' % python)
    assert "--disable-log-requests" not in text and "api-key" not in text
    assert "ExecStartPre=+/usr/bin/python3 /usr/local/libexec/fleet-vllm/cleanup vllm /dev/shm" in text
    # The sandbox (README "Sandbox"): writable only the home, a private /tmp and /dev/shm; the GPUs' devices only.
    for line in ("NoNewPrivileges=yes", "CapabilityBoundingSet=", "ProtectSystem=strict", "ReadWritePaths=/var/lib/vllm",
                 "ProtectHome=yes", "PrivateTmp=yes", "DevicePolicy=closed", "DeviceAllow=char-nvidia* rw",
                 "SystemCallFilter=@system-service", "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
                 "Wants=modprobe@nvidia.service modprobe@nvidia_uvm.service"):
        assert line in text.splitlines(), line
    for line in ("EnvironmentFile=/etc/fleet-vllm/nccl.env", "EnvironmentFile=/etc/fleet-vllm/vllm-secrets.env",
                 "Restart=on-failure", "StartLimitBurst=3", "TimeoutStartSec=3600", "KillMode=mixed", "User=vllm"):
        assert line in text.splitlines(), line
    # The cleanup script must exist for verify; point the unit at the role's copy.
    checked = tmp_path / "check" / "vllm.service"
    checked.parent.mkdir()
    checked.write_text(text.replace("/usr/local/libexec/fleet-vllm/cleanup",
                                    str(ROOT / "roles" / "vllm_server" / "files" / "cleanup")).replace("User=vllm", "User=root")
                       .replace("Group=vllm", "Group=root"))
    proc = subprocess.run(["systemd-analyze", "verify", "%s:vllm.service" % checked], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0 and proc.stderr.strip() == "", proc.stderr


@prerequisite(shutil.which("systemd-analyze"), reason="systemd-analyze is not installed (Debian: systemd)")
def test_sandbox_settings_render_and_verify(tmp_path):
    """The sandbox's variables: more device groups and writable paths, a directive replaced, one left out."""
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.symlink_to(sys.executable)
    unit = tmp_path / "render" / "vllm.service"
    unit.parent.mkdir()
    rc, stats, tasks = play("vllm_server_unit.yml", unit_dest=str(unit), vllm_server_python=str(python),
                            vllm_server_model_path="/srv/models/kimi",
                            vllm_server_device_allow=["char-nvidia* rw", "/dev/infiniband/uverbs0 rw"],
                            vllm_server_read_write_paths=["/srv/cache", "-/var/cache/vllm"],
                            vllm_server_hardening_overrides={"SystemCallFilter": None, "ProtectProc": "noaccess",
                                                             "RestrictAddressFamilies": ["AF_UNIX", "AF_INET"]})
    assert rc == 0, tasks
    lines = unit.read_text().splitlines()
    assert [line for line in lines if line.startswith(("DeviceAllow=", "ReadWritePaths=", "RestrictAddressFamilies="))] == [
        "ReadWritePaths=/var/lib/vllm", "ReadWritePaths=/srv/cache", "ReadWritePaths=-/var/cache/vllm",
        "DeviceAllow=char-nvidia* rw", "DeviceAllow=/dev/infiniband/uverbs0 rw",
        "RestrictAddressFamilies=AF_UNIX", "RestrictAddressFamilies=AF_INET"]
    assert "ProtectProc=noaccess" in lines and "ProtectProc=invisible" not in lines
    assert not [line for line in lines if line.startswith("SystemCallFilter=")]
    assert "SystemCallErrorNumber=EPERM" in lines
    checked = tmp_path / "check" / "vllm.service"
    checked.parent.mkdir()
    checked.write_text("\n".join(lines).replace("/usr/local/libexec/fleet-vllm/cleanup", str(SCRIPT_CLEANUP))
                       .replace("User=vllm", "User=root").replace("Group=vllm", "Group=root") + "\n")
    proc = subprocess.run(["systemd-analyze", "verify", "%s:vllm.service" % checked], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0 and proc.stderr.strip() == "", proc.stderr
