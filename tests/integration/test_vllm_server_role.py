"""vllm_server: bad input fails before anything changes, naming the variable; the unit the role
renders passes systemd-analyze verify and its ExecStart carries the seed's flags, quoted."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT, prerequisite, run_cases, run_playbook

pytestmark = [pytest.mark.integration]
SCRIPT_CLEANUP = ROOT / "roles" / "vllm_server" / "files" / "cleanup"


# The test-fixture nvidia-smi on PATH, printing 8x RTX PRO 6000: how every run here sees the GPUs.
FAKE_GPUS = {"path": [FIXTURES / "bin"], "env": {"FLEET_VLLM_FAKE_GPUS": "rtx-pro-6000-x8"}}


def play(playbook, **extra):
    run = run_playbook(ROOT / "tests" / "integration" / "playbooks" / playbook, extra_vars=extra, timeout=300, **FAKE_GPUS)
    return run.rc, run.stats(), run.task_list()


# Each bad input, with what its message must say. All of them run in one ansible-playbook run, one
# inventory host per case (bad_input_run): a run per case cost about 2.5 s, for 44 cases.
BAD_INPUTS = [
    ({"fleet_vllm_tensor_parallel_size": 3}, ["fleet_vllm_tensor_parallel_size is 3", "8 GPUs"]),
    ({"fleet_vllm_tensor_parallel_size": 16}, ["fleet_vllm_tensor_parallel_size is 16", "8 GPUs"]),
    ({"vllm_server_port": 70000}, ["vllm_server_port is 70000", "1 to 65535"]),
    # (typed int: fleet.vllm.check_inputs stops it first, named)
    ({"vllm_server_port": "http"}, ["argument 'vllm_server_port'", "convert to int"]),
    ({"fleet_vllm_kv_cache_dtype": "float16"}, ["fleet_vllm_kv_cache_dtype is float16", "#54338"]),
    ({"fleet_vllm_served_model_path": ""}, ["fleet_vllm_served_model_path"]),
    ({"vllm_server_extra_args": {"api_key": "s3cret"}}, ["vllm_server_extra_args", "--api-key"]),
    # Issue 24 point 2: the role makes the socket's directory the service user's; only one of its own below
    # /run/fleet-vllm may be named, never a path that climbs out of it or one too long for a Unix socket.
    ({"fleet_vllm_engine_socket": "/run/fleet-vllm/../etc/x.sock"}, ["fleet_vllm_engine_socket is", "/run/fleet-vllm/DIR/NAME"]),
    ({"fleet_vllm_engine_socket": "/etc/vllm.sock"}, ["fleet_vllm_engine_socket is", "/run/fleet-vllm/DIR/NAME"]),
    ({"fleet_vllm_engine_socket": "/run/fleet-vllm/.x/e.sock"}, ["fleet_vllm_engine_socket is", "neither starting with a dot"]),
    ({"fleet_vllm_engine_socket": "/run/fleet-vllm/v/" + "e" * 90}, ["fleet_vllm_engine_socket is", "107 characters at most"]),
    # An existing account that is not a system account (nobody: uid 65534, above SYS_UID_MAX) is not taken over.
    ({"vllm_server_user": "nobody"}, ["vllm_server_user is 'nobody'", "uid 65534", "not a system account",
                                      "vllm_server_adopt_existing_user"]),
    # The sandbox's variables cannot smuggle other unit settings in.
    ({"vllm_server_hardening_overrides": {"ExecStartPost": "/bin/sh"}}, ["vllm_server_hardening_overrides names ExecStartPost"]),
    ({"vllm_server_hardening_overrides": {"ProtectSystem": "full\nUser=root"}}, ["vllm_server_hardening_overrides", "line break"]),
    ({"vllm_server_device_allow": ["/dev/nvidia0 rw\nUser=root"]}, ["vllm_server_device_allow"]),
    ({"vllm_server_read_write_paths": ["var/lib/x"]}, ["vllm_server_read_write_paths", "absolute"]),
    ({"vllm_server_extra_args": ["--api-k", "s3cret"]}, ["vllm_server_extra_args", "--api-key", "vllm_server_api_key"]),
    # Issue 14 point 5: values that reach the unit may not add lines to it.
    ({"vllm_server_served_model_name": "kimi\nExecStartPost=+/bin/touch /tmp/pwned"},
     ["vllm_server_served_model_name", "control character"]),
    ({"fleet_vllm_nccl_env_file": "/etc/fleet-vllm/nccl.env\nExecStartPost=+/bin/true"},
     ["fleet_vllm_nccl_env_file", "control character"]),
    ({"vllm_server_restart_sec": "30\nExecStartPost=+/bin/true"}, ["vllm_server_restart_sec"]),
    ({"vllm_server_group": "vllm\nExecStartPost=+/bin/true"}, ["vllm_server_group is"]),
    ({"vllm_server_user": "vllm\n"}, ["vllm_server_user is"]),
    ({"vllm_server_port": "8000\n"}, ["vllm_server_port is"]),
    # Issue 24 point 12: vLLM answers /invocations without a key; the network reaches the front door, not vLLM.
    ({"vllm_server_host": "0.0.0.0"}, ["vllm_server_host is \"0.0.0.0\"", "vllm_server_allow_non_loopback_host: true"]),
    ({"vllm_server_host": "::"}, ["vllm_server_host is \"::\"", "not a loopback address"]),
    ({"vllm_server_host": "0"}, ["vllm_server_host is \"0\"", "not a loopback address"]),
    ({"vllm_server_host": "192.168.1.20"}, ["vllm_server_host is", "not a loopback address"]),
    ({"vllm_server_host": "gpu-a.example.com"}, ["vllm_server_host is", "not a loopback address"]),
    ({"vllm_server_host": "127.0.0.1\n"}, ["vllm_server_host is", "not a loopback address"]),
    # ... nor through vllm_server_extra_args, however argparse would read --host.
    ({"vllm_server_extra_args": {"hos": "0.0.0.0"}}, ["vllm_server_extra_args sets --host (as --hos)", "vllm_server_host"]),
    ({"vllm_server_extra_args": ["--ho", "0.0.0.0"]}, ["vllm_server_extra_args sets --host (as --ho)", "vllm_server_host"]),
    ({"vllm_server_extra_args": ["--host=0.0.0.0"]}, ["vllm_server_extra_args sets --host", "vllm_server_host"]),
    # Issue 24: nor through a file of engine arguments (vLLM's --config YAML, argparse's @FILE).
    ({"vllm_server_extra_args": {"config": "/etc/vllm/args.yaml"}}, ["vllm_server_extra_args sets --config", "YAML file"]),
    ({"vllm_server_extra_args": ["--conf=/etc/vllm/args.yaml"]}, ["vllm_server_extra_args sets --config (as --conf)"]),
    ({"vllm_server_extra_args": ["@/etc/vllm/args"]}, ["vllm_server_extra_args has an argument starting with @"]),
    # Issue 24 points 5 and 15: the unit's network stays loopback plus what vllm_server_ip_address_allow lists, never a
    # link-local address (the cloud's metadata service) - an allow entry wins over IPAddressDeny= in systemd.
    ({"vllm_server_ip_address_allow": ["localhost", "any"]}, ["vllm_server_ip_address_allow has \"any\"", "169.254.0.0/16"]),
    ({"vllm_server_ip_address_allow": ["169.254.169.254"]}, ["vllm_server_ip_address_allow has \"169.254.169.254\""]),
    ({"vllm_server_ip_address_allow": ["128.0.0.0/1"]}, ["vllm_server_ip_address_allow has \"128.0.0.0/1\"", "metadata"]),
    ({"vllm_server_ip_address_allow": ["10.0.0.0/8\nExecStartPost=+/bin/true"]}, ["vllm_server_ip_address_allow"]),
    ({"vllm_server_hardening_overrides": {"IPAddressDeny": None}}, ["vllm_server_hardening_overrides names IPAddressDeny",
                                                                    "vllm_server_ip_address_allow"]),
    ({"vllm_server_hardening_overrides": {"IPAddressAllow": "any"}}, ["vllm_server_hardening_overrides names IPAddressAllow"]),
    ({"vllm_server_allowed_media_domains": ["https://images.example.com"]}, ["vllm_server_allowed_media_domains has"]),
    ({"vllm_server_allowed_media_domains": ["*.example.com"]}, ["vllm_server_allowed_media_domains has", "wildcard"]),
    # Issue 23 point 4: one word of --safetensors-load-strategy, or auto/default; never a second line in the unit.
    ({"vllm_server_load_strategy": "prefetch\nExecStartPost=+/bin/touch /tmp/pwned"}, ["vllm_server_load_strategy is",
                                                                                       "one value of --safetensors-load-strategy"]),
    ({"vllm_server_load_strategy": ["prefetch"]}, ["vllm_server_load_strategy"]),
    ({"vllm_server_extra_args": ["--allowed-media-domains", "evil.example"]},
     ["vllm_server_extra_args sets --allowed-media-domains", "vllm_server_allowed_media_domains"]),
]
BAD_INPUT_USER = "fleet-vllm-test-never"


@pytest.fixture(scope="module")
def bad_input_run(tmp_path_factory):
    """tests/integration/playbooks/vllm_server.yml on one local host per bad input (case-N: that
    case's variables over the same harmless rest), each failing or not on its own."""
    common = {"fleet_vllm_served_model_path": "/srv/models/kimi", "vllm_server_user": BAD_INPUT_USER,
              "vllm_server_env_dir": "/nonexistent-fleet-vllm/etc", "fleet_vllm_state_dir": "/nonexistent-fleet-vllm/state"}
    return run_cases(ROOT / "tests" / "integration" / "playbooks" / "vllm_server.yml",
                     [variables for variables, dummy in BAD_INPUTS], tmp_path_factory.mktemp("bad-input"), common,
                     timeout=600, **FAKE_GPUS)


@pytest.mark.parametrize("case", range(len(BAD_INPUTS)),
                         ids=["%d-%s" % (i, next(iter(v))) for i, (v, dummy) in enumerate(BAD_INPUTS)])
def test_bad_input_fails_before_anything_changes(bad_input_run, case):
    words = BAD_INPUTS[case][1]
    host = "case-%d" % case
    stats, tasks = bad_input_run.stats(host), bad_input_run.task_list(host)
    assert bad_input_run.rc != 0 and stats["failures"] == 1 and stats["changed"] == 0, (stats, tasks)
    msg = [r for dummy, r in tasks if r.get("failed")][0]["msg"]
    assert all(word in msg for word in words), msg
    assert "s3cret" not in json.dumps(tasks)
    assert not Path("/tmp/pwned").exists()
    ran = [name for name, dummy in tasks]
    assert not any(name.startswith(("Create", "Write", "Install")) for name in ran), ran
    with pytest.raises(KeyError):
        pwd.getpwnam(BAD_INPUT_USER)
    assert not Path("/nonexistent-fleet-vllm").exists()


@pytest.mark.parametrize("host, allow", [("::1", False), ("localhost", False), ("127.0.0.2", False), ("0.0.0.0", True)])
def test_a_loopback_host_or_the_opt_in_passes_the_host_check(host, allow):
    """The check after it fails instead (a tensor-parallel size that does not divide the 8 GPUs): the host passed."""
    extra = {"fleet_vllm_served_model_path": "/srv/models/kimi", "vllm_server_user": "fleet-vllm-test-never",
             "vllm_server_host": host, "vllm_server_allow_non_loopback_host": allow, "fleet_vllm_tensor_parallel_size": 3}
    rc, stats, tasks = play("vllm_server.yml", **extra)
    msg = [r for dummy, r in tasks if r.get("failed")][0]["msg"]
    assert rc != 0 and stats["changed"] == 0 and "fleet_vllm_tensor_parallel_size is 3" in msg, msg


def render_unit(tmp_path, **variables):
    """The unit as the role renders it (tests/integration/playbooks/vllm_server_unit.yml), with a venv Python that
    exists; its text."""
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.symlink_to(sys.executable)
    unit = tmp_path / "render" / "vllm.service"
    unit.parent.mkdir()
    rc, dummy, tasks = play("vllm_server_unit.yml", unit_dest=str(unit), fleet_vllm_python=str(python), **variables)
    assert rc == 0, tasks
    return unit.read_text()


def systemd_verify(tmp_path, text, replace=()):
    """systemd-analyze verify of a rendered unit, run as root with the role's own cleanup script (verify needs the
    files a unit names to exist), after the replacements given ((old text, new text) pairs)."""
    text = text.replace("/usr/local/libexec/fleet-vllm/cleanup", str(SCRIPT_CLEANUP))
    text = text.replace("User=vllm", "User=root").replace("Group=vllm", "Group=root")
    for old, new in replace:
        text = text.replace(old, new)
    checked = tmp_path / "check" / "vllm.service"
    checked.parent.mkdir()
    checked.write_text(text if text.endswith("\n") else text + "\n")
    proc = subprocess.run(["systemd-analyze", "verify", "%s:vllm.service" % checked], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0 and proc.stderr.strip() == "", proc.stderr


@prerequisite(shutil.which("systemd-analyze"), reason="systemd-analyze is not installed (Debian: systemd)")
def test_rendered_unit_passes_systemd_analyze_verify(tmp_path):
    text = render_unit(tmp_path, fleet_vllm_served_model_path="/srv/models/Kimi K2.5 100%",
                       vllm_server_extra_args={"hf_overrides": {"note": "a $b"}})
    python = tmp_path / "venv" / "bin" / "python"
    assert text.startswith("#") and "Ansible managed" in text
    exec_start = [line for line in text.splitlines() if line.startswith("ExecStart=")][0]
    assert exec_start == (
        'ExecStart=%s -m vllm.entrypoints.openai.api_server --model "/srv/models/Kimi K2.5 100%%%%" '
        "--tensor-parallel-size 8 --tool-call-parser kimi_k2 --reasoning-parser kimi_k2 "
        "--enable-auto-tool-choice --trust-remote-code --served-model-name nvidia/Kimi-K2.5-NVFP4 "
        '--uds /run/fleet-vllm/vllm/engine.sock --allowed-media-domains "no media URLs" --hf-overrides "{\\"note\\":\\"a $$b\\"}"'
        % python)
    assert "--disable-log-requests" not in text and "api-key" not in text and "--host" not in text and "--port" not in text
    # Issue 24 point 2: the engine's socket, in a directory it may write (the stale socket of its last run removed, as
    # the service user, before it binds), group-writable for the front door's group that may pass that directory.
    assert "ExecStartPre=/bin/rm -f -- /run/fleet-vllm/vllm/engine.sock" in text.splitlines()
    assert "ReadWritePaths=/run/fleet-vllm/vllm" in text.splitlines() and "UMask=0007" in text.splitlines()
    # Issue 24 point 1: the root cleanup gets no environment of the unit's and an isolated Python
    # (tests/unit/roles/test_root_commands.py).
    assert "ExecStartPre=+/usr/bin/env -i /usr/bin/python3 -I /usr/local/libexec/fleet-vllm/cleanup vllm /dev/shm" in text
    # The sandbox (README "Sandbox"): writable only the home, a private /tmp and /dev/shm; the GPUs' devices only.
    for line in ("NoNewPrivileges=yes", "CapabilityBoundingSet=", "ProtectSystem=strict", "ReadWritePaths=/var/lib/vllm",
                 "ProtectHome=yes", "PrivateTmp=yes", "DevicePolicy=closed", "DeviceAllow=char-nvidia* rw",
                 "SystemCallFilter=@system-service", "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
                 "Wants=modprobe@nvidia.service modprobe@nvidia_uvm.service"):
        assert line in text.splitlines(), line
    # Issue 24 points 5 and 15: loopback only, in and out; no media URL fetched, no redirect followed.
    assert [line for line in text.splitlines() if line.startswith("IPAddress")] == ["IPAddressDeny=any", "IPAddressAllow=localhost"]
    assert "Environment=VLLM_MEDIA_URL_ALLOW_REDIRECTS=0" in text.splitlines()
    for line in ("EnvironmentFile=/etc/fleet-vllm/nccl.env", "EnvironmentFile=/etc/fleet-vllm/vllm-secrets.env",
                 "Restart=on-failure", "StartLimitBurst=3", "TimeoutStartSec=3600", "KillMode=mixed", "User=vllm"):
        assert line in text.splitlines(), line
    systemd_verify(tmp_path, text)


@prerequisite(shutil.which("systemd-analyze"), reason="systemd-analyze is not installed (Debian: systemd)")
def test_sandbox_settings_render_and_verify(tmp_path):
    """The sandbox's variables: more device groups and writable paths, a directive replaced, one left out."""
    lines = render_unit(
        tmp_path,
        fleet_vllm_served_model_path="/srv/models/kimi",
        vllm_server_device_allow=["char-nvidia* rw", "/dev/infiniband/uverbs0 rw"],
        vllm_server_read_write_paths=["/srv/cache", "-/var/cache/vllm"],
        vllm_server_hardening_overrides={"SystemCallFilter": None, "ProtectProc": "noaccess",
                                         "RestrictAddressFamilies": ["AF_UNIX", "AF_INET"]}).splitlines()
    assert [line for line in lines if line.startswith(("DeviceAllow=", "ReadWritePaths=", "RestrictAddressFamilies="))] == [
        "ReadWritePaths=/var/lib/vllm", "ReadWritePaths=/run/fleet-vllm/vllm", "ReadWritePaths=/srv/cache",
        "ReadWritePaths=-/var/cache/vllm",
        "DeviceAllow=char-nvidia* rw", "DeviceAllow=/dev/infiniband/uverbs0 rw",
        "RestrictAddressFamilies=AF_UNIX", "RestrictAddressFamilies=AF_INET"]
    assert "ProtectProc=noaccess" in lines and "ProtectProc=invisible" not in lines
    assert not [line for line in lines if line.startswith("SystemCallFilter=")]
    assert "SystemCallErrorNumber=EPERM" in lines
    systemd_verify(tmp_path, "\n".join(lines))


@prerequisite(shutil.which("systemd-analyze"), reason="systemd-analyze is not installed (Debian: systemd)")
def test_network_settings_render_and_verify(tmp_path):
    """Issue 24 points 5 and 15: a serving group's members and a media host opened, each on a line of its own; the
    media domains on the command line; systemd reads it all."""
    lines = render_unit(
        tmp_path,
        fleet_vllm_served_model_path="/srv/models/kimi",
        vllm_server_ip_address_allow=["localhost", "10.20.0.0/24", "fd12:3456::/48", "203.0.113.7"],
        vllm_server_allowed_media_domains=["images.example.com", "cdn.example.org"]).splitlines()
    assert [line for line in lines if line.startswith("IPAddress")] == [
        "IPAddressDeny=any", "IPAddressAllow=localhost", "IPAddressAllow=10.20.0.0/24", "IPAddressAllow=fd12:3456::/48",
        "IPAddressAllow=203.0.113.7"]
    exec_start = [line for line in lines if line.startswith("ExecStart=")][0]
    assert exec_start.endswith("--uds /run/fleet-vllm/vllm/engine.sock --allowed-media-domains images.example.com cdn.example.org"), exec_start
    assert "no media URLs" not in exec_start
    systemd_verify(tmp_path, "\n".join(lines))


@prerequisite(shutil.which("systemd-analyze"), reason="systemd-analyze is not installed (Debian: systemd)")
def test_a_named_instance_renders_its_own_gpus_socket_files_and_shared_memory(tmp_path):
    """Issue 26 point 3: a machine's named instance (fleet_vllm_instance): its GPUs by UUID, its socket, NCCL file
    and secrets, and a shared-memory directory of its own bound over /dev/shm, which its cleanup alone reads."""
    gpus = ["GPU-9bb2460f-3aa9-59ed-962e-8ecd72cfc046", "MIG-ae7facef-2874-54c6-8a16-decae44ba7fd"]
    lines = render_unit(tmp_path, fleet_vllm_served_model_path="/srv/models/kimi", fleet_vllm_instance="embed",
                        fleet_vllm_instance_gpus=gpus, fleet_vllm_instance_port_base=20000,
                        fleet_vllm_tensor_parallel_size=2).splitlines()
    assert "Environment=CUDA_VISIBLE_DEVICES=%s" % ",".join(gpus) in lines
    for line in ("EnvironmentFile=/etc/fleet-vllm/nccl@embed.env", "EnvironmentFile=/etc/fleet-vllm/vllm@embed-secrets.env",
                 "ExecStartPre=+/usr/bin/env -i /usr/bin/python3 -I /usr/local/libexec/fleet-vllm/cleanup vllm /dev/shm/fleet-vllm@embed",
                 "ExecStartPre=/bin/rm -f -- /run/fleet-vllm/vllm-embed/engine.sock", "BindPaths=/dev/shm/fleet-vllm@embed:/dev/shm",
                 "ReadWritePaths=/run/fleet-vllm/vllm-embed"):
        assert line in lines, line
    exec_start = [line for line in lines if line.startswith("ExecStart=")][0]
    assert "--uds /run/fleet-vllm/vllm-embed/engine.sock" in exec_start, exec_start
    systemd_verify(tmp_path, "\n".join(lines), replace=[("/dev/shm/fleet-vllm@embed:", "/dev/shm:")])


@prerequisite(shutil.which("systemd-analyze"), reason="systemd-analyze is not installed (Debian: systemd)")
def test_an_engine_on_its_port_has_no_socket_to_prepare(tmp_path):
    """fleet_vllm_engine_socket "": vLLM on vllm_server_host:vllm_server_port as before 0.4.0, private umask, no
    socket directory to write or clean."""
    lines = render_unit(tmp_path, fleet_vllm_served_model_path="/srv/models/kimi", fleet_vllm_engine_socket="").splitlines()
    exec_start = [line for line in lines if line.startswith("ExecStart=")][0]
    assert "--host 127.0.0.1 --port 8000 " in exec_start and "--uds" not in exec_start, exec_start
    assert "UMask=0077" in lines and [line for line in lines if line.startswith("ReadWritePaths=")] == ["ReadWritePaths=/var/lib/vllm"]
    assert not [line for line in lines if "/bin/rm" in line or "/run/fleet-vllm" in line]
    systemd_verify(tmp_path, "\n".join(lines))


@prerequisite(shutil.which("systemd-analyze"), reason="systemd-analyze is not installed (Debian: systemd)")
def test_odd_values_reach_the_unit_literally(tmp_path):
    """Issue 14 point 5: %, $, quotes, backslash and unicode in the served model name and an environment file path.
    systemd expands specifiers in Description= and EnvironmentFile=: "%q" left alone is an unknown specifier,
    which systemd-analyze verify reports; escaped it is "%%q"."""
    nccl = tmp_path / "etc 100%q" / "nccl.env"
    nccl.parent.mkdir()
    nccl.write_text("NCCL_PROTO=LL\n")
    name = 'Kimi "K2.5" 100%q $HOME \\back ünïcode'
    lines = render_unit(tmp_path, vllm_server_served_model_name=name, fleet_vllm_nccl_env_file=str(nccl)).splitlines()
    assert "Description=vLLM OpenAI-compatible server (%s)" % name.replace("%", "%%") in lines
    assert "EnvironmentFile=%s" % str(nccl).replace("%", "%%") in lines
    exec_start = [line for line in lines if line.startswith("ExecStart=")][0]
    assert '--served-model-name "Kimi \\"K2.5\\" 100%%q $$HOME \\\\back ünïcode"' in exec_start, exec_start
    # The secrets file must exist for verify too: the NCCL file stands in for it.
    systemd_verify(tmp_path, "\n".join(lines), replace=[
        ("EnvironmentFile=/etc/fleet-vllm/vllm-secrets.env", "EnvironmentFile=%s" % str(nccl).replace("%", "%%"))])


def test_a_newline_never_reaches_the_unit(tmp_path):
    """The template refuses by itself, naming the variable, even where the role's checks did not run."""
    unit = tmp_path / "vllm.service"
    rc, stats, tasks = play("vllm_server_unit.yml", unit_dest=str(unit), fleet_vllm_python="/opt/vllm/bin/python",
                            vllm_server_served_model_name="kimi\nExecStartPost=+/bin/true")
    assert rc != 0 and not unit.exists()
    msg = [r for dummy, r in tasks if r.get("failed")][0]["msg"]
    assert "vllm_server_served_model_name" in msg and "newline" in msg, msg


def _switch_playbook(tmp_path):
    """The rolling phase's task that puts the staged files in place, exactly as roles/vllm_server/tasks/roll.yml has
    it, in a playbook of its own with the role's variables pointing into tmp_path (the rest of roll.yml needs
    systemd as PID 1)."""
    import yaml
    tasks = yaml.safe_load((ROOT / "roles" / "vllm_server" / "tasks" / "roll.yml").read_text())
    task = [t for t in tasks if t["name"] == "Copy the staged unit and environment files over the live ones"][0]
    staged, live = tmp_path / "staged", tmp_path / "etc"
    staged.mkdir(mode=0o700)
    live.mkdir(mode=0o755)
    os.chmod(live, 0o755)
    files = [{"name": name, "path": str(staged / base), "live": str(live / base)}
             for name, base in (("unit", "vllm.service"), ("nccl", "nccl.env"), ("secrets", "vllm-secrets.env"))]
    playbook = tmp_path / "switch.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Switch", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars": {"_vllm_server_read_files": files, "_vllm_server_live_modes": {"unit": "0644", "nccl": "0644", "secrets": "0600"},
                 "vllm_server_rollout": {"action": "restart"}},
        "tasks": [task]}]))
    return playbook, staged, live


def _secrets_written(playbook, trace, env):
    """Runs the playbook under strace; the modes files were given by path (chmod, fchmodat) or descriptor (fchmod)."""
    # --seccomp-bpf: strace stops the traced processes at these two calls only, not at every one (Python starts
    # several; without it this one test took minutes).
    proc = subprocess.run(["strace", "-f", "--seccomp-bpf", "-qq", "-y", "-e", "trace=chmod,fchmodat,fchmod", "-o", str(trace),
                           str(Path(sys.executable).parent / "ansible-playbook"), str(playbook)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@prerequisite(shutil.which("strace"), reason="strace is not installed (Debian: strace)")
def test_the_live_secrets_file_is_never_readable_by_others(tmp_path):
    """Issue 14 point 8: ansible.builtin.copy with remote_src renamed a new live secrets file into place, chmod'ed it
    0644 (atomic_move, for a file it creates) and only then 0600. Seen with strace on every chmod of the live path,
    at its first creation and at a replacement: never wider than 0600, and it ends 0600 with the staged content."""
    import re
    import stat
    playbook, staged, live = _switch_playbook(tmp_path)
    env = dict(os.environ, ANSIBLE_INJECT_FACT_VARS="false", ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    os.umask(0o022)
    secrets = live / "vllm-secrets.env"
    for round_, key in enumerate(("s3cret-one", "s3cret-two")):
        (staged / "vllm.service").write_text("[Service]\nExecStart=/bin/true\n")
        (staged / "nccl.env").write_text('NCCL_PROTO="LL"\n')
        staged_secrets = staged / "vllm-secrets.env"
        staged_secrets.touch(mode=0o600)
        os.chmod(staged_secrets, 0o600)
        staged_secrets.write_text('VLLM_API_KEY="%s"\n' % key)
        trace = tmp_path / ("strace-%d.txt" % round_)
        proc = _secrets_written(playbook, trace, env)
        assert key not in proc.stdout
        # By path (chmod, fchmodat) or by descriptor (fchmod; strace -y names the file): the live path, or a
        # temporary file in its directory that is renamed over it (.vllm-secrets.env.*).
        by_path = r'chmod(?:at)?\((?:AT_FDCWD, )?"%s", (0[0-7]+)\)' % re.escape(str(secrets))
        by_fd = r'fchmod\([0-9]+<%s(?:\.[^>]*)?>, (0[0-7]+)\)' % re.escape(str(live / ".vllm-secrets.env"))
        text = trace.read_text()
        modes = [int(m, 8) for m in re.findall(by_path, text) + re.findall(by_fd, text)]
        assert modes, "no mode change of the live secrets file was seen: %s" % text[-2000:]
        assert all(m & 0o077 == 0 for m in modes), "the live secrets file was given mode(s) %s" % [oct(m) for m in modes]
        assert stat.S_IMODE(secrets.stat().st_mode) == 0o600 and secrets.read_text() == 'VLLM_API_KEY="%s"\n' % key
        assert stat.S_IMODE((live / "vllm.service").stat().st_mode) == 0o644


def test_the_server_gets_a_token_only_when_asked(tmp_path):
    """Issue 14 point 10: the server reads only local files; the shared token (fleet_vllm_hf_token, which the
    downloader uses) does not reach its environment. vllm_server_hf_token is the explicit request."""
    python = tmp_path / "python"
    python.symlink_to(sys.executable)
    # The key only for an engine on a port (fleet_vllm_engine_socket ""): on its socket the front door checks it and
    # strips it, and the engine holds none (issue 24 point 2).
    for extra, expected in (({"fleet_vllm_hf_token": "hf_shared_token"}, ['']),
                            ({"fleet_vllm_hf_token": "hf_shared_token", "fleet_vllm_engine_socket": ""}, ['VLLM_API_KEY="k"']),
                            ({"fleet_vllm_hf_token": "hf_shared_token", "vllm_server_hf_token": "hf_asked"},
                             ['HF_TOKEN="hf_asked"']),
                            ({"fleet_vllm_hf_token": "hf_shared_token", "vllm_server_hf_token": "hf_asked",
                              "fleet_vllm_engine_socket": ""}, ['HF_TOKEN="hf_asked"', 'VLLM_API_KEY="k"'])):
        secrets = tmp_path / "secrets.env"
        rc, stats, tasks = play("vllm_server_unit.yml", unit_dest=str(tmp_path / "vllm.service"), secrets_dest=str(secrets),
                                fleet_vllm_python=str(python), vllm_server_api_key="k", **extra)
        assert rc == 0, tasks
        assert secrets.read_text().splitlines() == expected
