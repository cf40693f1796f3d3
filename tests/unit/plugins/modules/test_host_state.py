"""fleet.vllm.host_state, run as Ansible runs a module: what it reads on a host, checked against
files, accounts and command outputs made for each test (stand-ins for ip and systemctl print what
the real tools print, captured on a Debian 12 test host)."""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import textwrap

import pytest

from ansible_collections.fleet.vllm.plugins.filter.weights_plan import weights_networks
from ansible_collections.fleet.vllm.plugins.modules import host_state

# `ip -json address show` on a test host (iproute2 6.1, Debian 12), with a secondary IPv4 address
# and a global IPv6 address added.
IP_JSON = [
    {"ifindex": 1, "ifname": "lo", "addr_info": [
        {"family": "inet", "local": "127.0.0.1", "prefixlen": 8, "scope": "host", "label": "lo"},
        {"family": "inet6", "local": "::1", "prefixlen": 128, "scope": "host"}]},
    {"ifindex": 2, "ifname": "eth0", "addr_info": [
        {"family": "inet", "local": "10.89.0.5", "prefixlen": 24, "broadcast": "10.89.0.255", "scope": "global"},
        {"family": "inet", "local": "10.90.1.7", "prefixlen": 16, "scope": "global", "secondary": True},
        {"family": "inet6", "local": "fd00:20::5", "prefixlen": 64, "scope": "global"},
        {"family": "inet6", "local": "fe80::1c2d:3eff:fe4f:5a6b", "prefixlen": 64, "scope": "link"}]},
    {"ifindex": 3, "ifname": "eth1", "addr_info": []},
]


def stand_in(directory, name, script):
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n" + textwrap.dedent(script))
    path.chmod(0o755)
    return directory


def env_with(directory):
    return {"PATH": os.pathsep.join((str(directory), os.environ.get("PATH", "")))}


def test_paths_are_reported_by_existence_and_type(run_module, tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    paths = [str(tmp_path / name) for name in ("file", "dir", "missing", "dangling", "link")]
    run = run_module("host_state", {"paths": paths})
    assert not run.failed, run
    assert run.result["changed"] is False
    assert run.result["paths"] == {
        paths[0]: {"exists": True, "type": "file"},
        paths[1]: {"exists": True, "type": "directory"},
        paths[2]: {"exists": False, "type": None},
        paths[3]: {"exists": False, "type": None},
        paths[4]: {"exists": True, "type": "file"},
    }
    assert run.result["checksums"] == {}
    assert run.result["accounts"] == {} and run.result["groups"] == {} and run.result["interfaces"] == {}
    assert run.result["units"] == {} and run.result["device_groups"] == []


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to other groups needs root")
def test_device_groups_are_the_owners_of_the_matching_nodes_except_root(run_module, tmp_path):
    video, render = grp.getgrnam("video"), grp.getgrnam("tty")
    for name, gid in (("nvidia0", video.gr_gid), ("nvidia1", video.gr_gid), ("nvidiactl", render.gr_gid),
                      ("nvidia-uvm", 0), ("other", render.gr_gid)):
        (tmp_path / name).write_text("")
        os.chown(tmp_path / name, 0, gid)
    run = run_module("host_state", {"device_globs": [str(tmp_path / "nvidia*")]})
    assert not run.failed, run
    assert run.result["device_groups"] == sorted(["tty", "video"])
    none = run_module("host_state", {"device_globs": [str(tmp_path / "absent*")]})
    assert none.result["device_groups"] == []


def test_accounts_and_groups_as_the_system_databases_have_them(run_module):
    root = pwd.getpwnam("root")
    member_of = sorted(g.gr_name for g in grp.getgrall() if "root" in g.gr_mem)
    run = run_module("host_state", {"accounts": ["root", "no-such-account-fleet"], "groups": ["root", "no-such-group-fleet"]})
    assert not run.failed, run
    assert run.result["accounts"] == {
        "root": {"uid": 0, "group": grp.getgrgid(root.pw_gid).gr_name, "groups": member_of, "home": root.pw_dir,
                 "shell": root.pw_shell, "system": True},
        "no-such-account-fleet": None,
    }
    assert run.result["groups"] == {"root": {"gid": 0}, "no-such-group-fleet": None}


def test_nobody_is_not_a_system_account(run_module):
    """nobody (65534) is above SYS_UID_MAX: the server role refuses to take such an account over."""
    run = run_module("host_state", {"accounts": ["nobody"]})
    assert not run.failed, run
    assert run.result["accounts"]["nobody"]["uid"] == 65534 and run.result["accounts"]["nobody"]["system"] is False


@pytest.mark.parametrize("text, expected", [
    ("SYS_UID_MAX 499\nUID_MIN 500\n", 499),
    ("#SYS_UID_MAX 999\nUID_MIN\t\t 1000\n", 999),  # Debian 12: SYS_UID_MAX commented out
    ("UID_MIN 2000\n", 1999),
    ("", 999),
    ("SYS_UID_MAX  59999\n", 59999),
])
def test_the_highest_system_uid_as_useradd_counts_it(text, expected):
    assert host_state.sys_uid_max(text) == expected


def test_interfaces_in_the_shape_weights_networks_reads(run_module, tmp_path):
    bin_dir = stand_in(tmp_path / "bin", "ip", """\
        [ "$*" = "-json address show" ] || { echo "unexpected: $*" >&2; exit 2; }
        cat <<'JSON'
        %s
        JSON
        """ % json.dumps(IP_JSON))
    run = run_module("host_state", {"interfaces": True}, env=env_with(bin_dir))
    assert not run.failed, run
    assert run.result["interfaces"]["eth0"] == {
        "device": "eth0",
        "ipv4": {"address": "10.89.0.5", "prefix": "24"},
        "ipv4_secondaries": [{"address": "10.90.1.7", "prefix": "16"}],
        "ipv6": [{"address": "fd00:20::5", "prefix": "64", "scope": "global"},
                 {"address": "fe80::1c2d:3eff:fe4f:5a6b", "prefix": "64", "scope": "link"}],
    }
    assert run.result["interfaces"]["eth1"] == {"device": "eth1", "ipv4": {}, "ipv4_secondaries": [], "ipv6": []}
    # What the weights role writes into the peers' hosts allow: the attached networks, no link-local, no loopback.
    assert weights_networks(run.result["interfaces"]) == ["10.89.0.0/24", "10.90.0.0/16", "fd00:20::/64"]
    assert weights_networks(run.result["interfaces"], loopback=True) == [
        "10.89.0.0/24", "10.90.0.0/16", "127.0.0.0/8", "::1/128", "fd00:20::/64"]


@pytest.mark.skipif(shutil.which("ip") is None, reason="iproute2 is not installed here")
def test_interfaces_of_this_machine_have_loopback(run_module):
    run = run_module("host_state", {"interfaces": True})
    assert not run.failed, run
    assert run.result["interfaces"]["lo"]["ipv4"] == {"address": "127.0.0.1", "prefix": "8"}


def test_an_ip_that_fails_or_prints_no_json_is_reported(run_module, tmp_path):
    failing = stand_in(tmp_path / "failing", "ip", """\
        echo "Cannot open netlink socket: Permission denied" >&2
        exit 1
        """)
    run = run_module("host_state", {"interfaces": True}, env=env_with(failing))
    assert run.failed
    assert run.result["msg"] == "ip -json address show failed (exit code 1): Cannot open netlink socket: Permission denied"
    old = stand_in(tmp_path / "old", "ip", """\
        echo 'Option "-json" is unknown, try "ip -help".'
        """)
    run = run_module("host_state", {"interfaces": True}, env=env_with(old))
    assert run.failed
    assert run.result["msg"].startswith("ip -json address show printed no JSON (") and run.result["msg"].endswith(
        "): is iproute2 older than 4.13?"), run.result["msg"]


def test_units_in_the_order_asked_with_their_states(run_module, tmp_path):
    bin_dir = stand_in(tmp_path / "bin", "systemctl", """\
        [ "$1 $2 $3" = "show --property=Id,LoadState,ActiveState,UnitFileState,ExecStart --" ] || { echo "unexpected: $*" >&2; exit 2; }
        printf 'Id=a.socket\\nLoadState=loaded\\nActiveState=active\\nUnitFileState=enabled\\n\\n'
        printf 'Id=b.service\\nLoadState=not-found\\nActiveState=inactive\\nUnitFileState=\\nExecStart=\\n\\n'
        # systemd 252's own line for a loaded service (systemctl show vllm.service on a test host)
        printf 'Id=c.service\\nLoadState=loaded\\nActiveState=active\\nUnitFileState=enabled\\n'
        printf 'ExecStart={ path=/opt/v/bin/python ; argv[]=/opt/v/bin/python -m vllm.x --uds /run/f/v/e.sock --x a b ; '
        printf 'ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }\\n'
        """)
    run = run_module("host_state", {"units": ["a.socket", "b.service", "c.service"]}, env=env_with(bin_dir))
    assert not run.failed, run
    assert run.result["units"] == {
        "a.socket": {"load_state": "loaded", "active_state": "active", "unit_file_state": "enabled", "exec_start": []},
        "b.service": {"load_state": "not-found", "active_state": "inactive", "unit_file_state": "", "exec_start": []},
        "c.service": {"load_state": "loaded", "active_state": "active", "unit_file_state": "enabled",
                      "exec_start": ["/opt/v/bin/python", "-m", "vllm.x", "--uds", "/run/f/v/e.sock", "--x", "a", "b"]},
    }


def test_a_failing_systemctl_is_reported(run_module, tmp_path):
    bin_dir = stand_in(tmp_path / "bin", "systemctl", """\
        echo "Failed to connect to bus: No such file or directory" >&2
        exit 1
        """)
    run = run_module("host_state", {"units": ["a.socket"]}, env=env_with(bin_dir))
    assert run.failed
    assert run.result["msg"] == ("systemctl show a.socket failed (exit code 1): Failed to connect to bus: "
                                 "No such file or directory")


def test_check_mode_reads_the_same(run_module, tmp_path):
    (tmp_path / "file").write_text("x")
    args = {"paths": [str(tmp_path / "file")], "accounts": ["root"]}
    assert run_module("host_state", args, check=True).result["paths"] == run_module("host_state", args).result["paths"]


def test_checksums_are_the_sha256_of_the_content_or_null(run_module, tmp_path):
    import hashlib
    (tmp_path / "unit").write_text("[Service]\nExecStart=/bin/true\n")
    (tmp_path / "dir").mkdir()
    paths = [str(tmp_path / "unit"), str(tmp_path / "missing"), str(tmp_path / "dir")]
    run = run_module("host_state", {"checksums": paths})
    assert not run.failed, run
    assert run.result["checksums"] == {
        paths[0]: hashlib.sha256(b"[Service]\nExecStart=/bin/true\n").hexdigest(),
        paths[1]: None,
        paths[2]: None,
    }


def managed(tmp_path, secret="KEY=s3cret-value\n"):
    """A managed_files argument set: two directories, a plain file, a secret file and a staged copy."""
    (tmp_path / "staged").mkdir(exist_ok=True)
    (tmp_path / "staged" / "unit").write_text("[Unit]\nDescription=staged\n")
    return {
        "directories": [{"path": str(tmp_path / "etc"), "mode": "0755"},
                        {"path": str(tmp_path / "state"), "mode": "0700", "owner": "root", "group": "root"}],
        "files": [
            {"path": str(tmp_path / "etc" / "rsyncd.conf"), "content": "[models]\npath = /srv/m%\n", "mode": "0644"},
            {"path": str(tmp_path / "state" / "secrets.env"), "secret_content": secret, "mode": "0600"},
            {"path": str(tmp_path / "etc" / "live.unit"), "src": str(tmp_path / "staged" / "unit"), "mode": "0644",
             "validate": "/bin/true %s"},
        ],
    }


def would_change(run_module, args):
    """What managed_files itself would change (check mode), in host_state's order."""
    run = run_module("managed_files", args, check=True)
    assert not run.failed, run
    return run.result["changed_directories"] + run.result["changed_files"]


def perturb(tmp_path, how):
    etc, state = tmp_path / "etc", tmp_path / "state"
    if how == "directory missing":
        for item in etc.iterdir():
            item.unlink()
        etc.rmdir()
    elif how == "directory mode":
        state.chmod(0o755)
    elif how == "directory owner":
        os.chown(state, pwd.getpwnam("nobody").pw_uid, -1)
    elif how == "file content":
        (etc / "rsyncd.conf").write_text("[models]\npath = /srv/other\n")
    elif how == "file mode":
        (state / "secrets.env").chmod(0o644)
    elif how == "file group":
        os.chown(etc / "rsyncd.conf", -1, grp.getgrnam("nogroup").gr_gid)
    elif how == "file is a link":
        (etc / "rsyncd.conf").unlink()
        (etc / "rsyncd.conf").symlink_to(tmp_path / "staged" / "unit")
    elif how == "file missing":
        (state / "secrets.env").unlink()
    elif how == "staged source changed":
        (tmp_path / "staged" / "unit").write_text("[Unit]\nDescription=new\n")


@pytest.mark.parametrize("how", [None, "directory missing", "directory mode", "directory owner", "file content",
                                 "file mode", "file group", "file is a link", "file missing", "staged source changed"])
def test_out_of_place_is_what_managed_files_would_change(run_module, tmp_path, how):
    if how in ("directory owner", "file group") and os.geteuid() != 0:
        pytest.skip("changing an owner needs root")
    args = managed(tmp_path)
    written = run_module("managed_files", args)
    assert not written.failed and written.result["changed"], written
    perturb(tmp_path, how)
    look = run_module("host_state", args)
    assert not look.failed, look
    if how == "file is a link":
        # managed_files refuses to write through a link, and says so: the look sends the role to it.
        refused = run_module("managed_files", args, check=True)
        assert refused.failed and "rsyncd.conf exists and is not a regular file" in refused.result["msg"]
        assert look.result["out_of_place"] == [args["files"][0]["path"]]
        return
    expected = would_change(run_module, args)
    assert look.result["out_of_place"] == expected
    assert (expected == []) == (how is None)
    assert "s3cret-value" not in json.dumps(look.result)


def test_out_of_place_compares_the_secret_content_without_showing_it(run_module, tmp_path):
    args = managed(tmp_path)
    run_module("managed_files", args)
    assert run_module("host_state", args).result["out_of_place"] == []
    other = managed(tmp_path, secret="KEY=an0ther-value\n")
    look = run_module("host_state", other)
    assert look.result["out_of_place"] == [str(tmp_path / "state" / "secrets.env")]
    assert "an0ther-value" not in json.dumps(look.result) and "an0ther-value" not in look.stdout


def test_an_owner_that_does_not_exist_yet_is_out_of_place_not_an_error(run_module, tmp_path):
    (tmp_path / "home").mkdir()
    args = {"directories": [{"path": str(tmp_path / "home"), "mode": "0755", "owner": "fleet-vllm-nobody-yet"}]}
    look = run_module("host_state", args)
    assert not look.failed, look
    assert look.result["out_of_place"] == [str(tmp_path / "home")]


def test_out_of_place_refuses_what_managed_files_refuses(run_module, tmp_path):
    rel = run_module("host_state", {"files": [{"path": "relative/f", "content": "x", "mode": "0644"}]})
    assert rel.failed and rel.result["msg"] == "files: relative/f is not an absolute path"
    (tmp_path / "f").write_text("x")
    bad = run_module("host_state", {"files": [{"path": str(tmp_path / "f"), "content": "x", "mode": "rw-r--r--"}]})
    assert bad.failed and "mode 'rw-r--r--' is not an octal mode such as 0644" in bad.result["msg"]
    both = run_module("host_state", {"files": [{"path": str(tmp_path / "f"), "content": "x", "secret_content": "s3cret-value",
                                                "mode": "0644"}]})
    assert both.failed and "mutually exclusive" in both.result["msg"]


# Issue 24, point 9: what another account must reach (the service user its venv and model, the peers' transient rsync
# user the snapshots and the gate), judged before anything changes; the first entry in the way is named.


def _reach(run_module, items):
    run = run_module("host_state", {"reachable": items})
    assert not run.failed, run
    return run.result["out_of_reach"]


def test_reachable_names_the_first_directory_an_account_cannot_pass(run_module, world_tmp):
    nobody = pwd.getpwuid(65534).pw_name if os.geteuid() == 0 else None
    srv = world_tmp / "srv"
    (srv / "vllm" / "models").mkdir(parents=True)
    os.chmod(srv, 0o750)  # an operator's /srv made under a CIS umask: not the collection's to open
    os.chmod(srv / "vllm", 0o700)
    target = str(srv / "vllm" / "models" / "pristine" / "repo")  # not there yet: the way to it is what counts
    blocked = {"path": str(srv), "mode": "0750", "owner": "root", "group": "root"}
    assert _reach(run_module, [{"path": target}, {"path": target, "user": nobody}]) == [
        {"path": target, "user": None, "blocked": blocked}, {"path": target, "user": nobody, "blocked": blocked}]
    # An account that does not exist yet (the service user, created later) counts as in no group.
    assert _reach(run_module, [{"path": target, "user": "fleet-vllm-test-never"}])[0]["blocked"] == blocked
    os.chmod(srv, 0o751)
    assert _reach(run_module, [{"path": target}])[0]["blocked"]["path"] == str(srv / "vllm")
    os.chmod(srv / "vllm", 0o755)
    assert _reach(run_module, [{"path": target}, {"path": str(world_tmp / "no" / "such")}]) == []


def test_reachable_judges_owner_group_files_and_links(run_module, world_tmp):
    if os.geteuid() != 0:
        pytest.skip("needs root (files owned by other accounts)")
    nobody = pwd.getpwuid(65534)
    group = grp.getgrgid(nobody.pw_gid).gr_name
    own = world_tmp / "own"
    own.mkdir(mode=0o700)
    os.chown(own, nobody.pw_uid, nobody.pw_gid)  # the account's own directory, closed to others
    by_group = world_tmp / "by-group"
    by_group.mkdir()
    os.chown(by_group, 0, nobody.pw_gid)
    os.chmod(by_group, 0o750)
    gate = world_tmp / "gate"
    gate.write_text("x\n")
    os.chmod(gate, 0o640)
    closed = world_tmp / "closed"
    (closed / "venv").mkdir(parents=True)
    os.chmod(closed, 0o700)
    link = world_tmp / "current"
    link.symlink_to(closed / "venv")
    found = _reach(run_module, [{"path": str(own / "x"), "user": nobody.pw_name}, {"path": str(own / "x")},
                                {"path": str(by_group / "x"), "user": nobody.pw_name}, {"path": str(by_group / "x")},
                                {"path": str(gate)}, {"path": str(link / "bin" / "python")}])
    assert [(item["path"], item["blocked"]["path"], item["blocked"]["mode"]) for item in found] == [
        (str(own / "x"), str(own), "0700"),
        (str(by_group / "x"), str(by_group), "0750"),
        (str(gate), str(gate), "0640"),
        (str(link / "bin" / "python"), str(closed), "0700"),
    ]
    assert found[1]["blocked"]["group"] == group and found[0]["blocked"]["owner"] == nobody.pw_name
