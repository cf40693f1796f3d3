"""The limits any host sets a vLLM service (module_utils/_host_limits.py: free disk for the model,
/dev/shm, open files), checked in-process on the fake host trees of tests/helpers/fake_host.py,
with a stand-in for the module (its params, ``get_bin_path`` and ``run_command``) and, where the
real file system cannot be made to say it, stand-ins for statvfs and getrlimit.
tests/unit/plugins/modules/test_preflight.py runs the module with the same checks."""

from __future__ import annotations

import os
import resource
import types

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils import _host_limits
from ansible_collections.fleet.vllm.plugins.module_utils._host_limits import GB, GIB, MIB, SHM_MIN_BYTES, HostLimits, gb

from tests.helpers.fake_host import FakeHost

INF = resource.RLIM_INFINITY


class FakeModule(object):
    """params, and a systemctl that answers (rc, out, err), or none."""

    def __init__(self, params, systemctl=(0, "DefaultLimitNOFILE=524288\n", "")):
        self.params = params
        self.systemctl = systemctl
        self.commands = []

    def get_bin_path(self, name):
        assert name == "systemctl"
        return None if self.systemctl is None else "/usr/bin/systemctl"

    def run_command(self, argv, environ_update=None):
        self.commands.append((argv, environ_update))
        return self.systemctl


@pytest.fixture
def host(tmp_path):
    return FakeHost(tmp_path / "host")


def limits(host, systemctl=(0, "DefaultLimitNOFILE=524288\n", ""), **params):
    base = dict(variable_prefix="vllm_", model_dir=str(host.model_dir), model_size_bytes=GB, disk_margin_percent=5,
                shm_dir=str(host.shm), shm_min_bytes=None, platform="cuda", nofile_min=65536, nofile_service_limit=0,
                proc_root=str(host.proc))
    base.update(params)
    return HostLimits(FakeModule(base, systemctl))


def statvfs(free, total, frsize=8):
    return lambda path: types.SimpleNamespace(f_bavail=free // frsize, f_blocks=total // frsize, f_frsize=frsize)


def test_the_helpers_name_the_options_with_their_prefix(host):
    checks = limits(host, variable_prefix="vllm_preflight_", nofile_min=4096)
    assert (checks.var("nofile_min"), checks.setting("nofile_min")) == ("vllm_preflight_nofile_min", "vllm_preflight_nofile_min=4096")
    assert checks.proc("sys", "fs", "nr_open") == str(host.proc / "sys" / "fs" / "nr_open")
    assert (checks.problems, checks.warnings, checks.measured) == ([], [], {})
    assert (gb(1500 * 1000 ** 2), gb(0)) == ("1.5 GB", "0.0 GB")
    assert (GB, GIB, MIB, SHM_MIN_BYTES) == (10 ** 9, 2 ** 30, 2 ** 20, {"cuda": 16 * 2 ** 30, "cpu": 512 * 2 ** 20})


def test_an_option_set_by_a_shared_setting_is_named_by_it(host):
    checks = limits(host, variables={"nofile_min": "fleet_vllm_nofile_min"}, nofile_min=4096)
    assert (checks.var("nofile_min"), checks.setting("nofile_min")) == ("fleet_vllm_nofile_min", "fleet_vllm_nofile_min=4096")
    assert checks.var("shm_dir") == "vllm_shm_dir"


# ---- disk -----------------------------------------------------------------------------------------


def test_a_model_that_fits(host, monkeypatch):
    monkeypatch.setattr(_host_limits.os, "statvfs", statvfs(100 * GB, 200 * GB))
    checks = limits(host, model_size_bytes=10 * GB, disk_margin_percent=10)
    checks.check_disk()
    assert checks.measured["disk"] == dict(
        model_dir=str(host.model_dir), measured_path=str(host.models.parent), free_bytes=100 * GB, total_bytes=200 * GB,
        existing_bytes=0, incomplete_bytes=0, model_size_bytes=10 * GB, margin_bytes=GB, needed_bytes=11 * GB)
    assert (checks.problems, checks.warnings) == ([], [])


def test_a_model_that_does_not_fit_says_what_is_already_there(host, monkeypatch):
    monkeypatch.setattr(_host_limits.os, "statvfs", statvfs(5 * GB, 200 * GB))
    host.model_dir.mkdir(parents=True)
    (host.model_dir / "model-1.safetensors").write_bytes(b"x" * 3000)
    os.link(host.model_dir / "model-1.safetensors", host.model_dir / "hardlink.safetensors")  # counted once
    os.symlink("model-1.safetensors", host.model_dir / "link.safetensors")  # not a file of its own
    (host.model_dir / ".cache").mkdir()
    (host.model_dir / ".cache" / "model-2.safetensors.incomplete").write_bytes(b"x" * 600)
    (host.model_dir / ".cache" / "model-3.safetensors.incomplete").write_bytes(b"x" * 100)
    (host.model_dir / "config.json").write_bytes(b"x" * 1000)
    checks = limits(host, model_size_bytes=6 * GB)
    checks.check_disk()
    disk = checks.measured["disk"]
    assert (disk["measured_path"], disk["existing_bytes"], disk["incomplete_bytes"]) == (str(host.model_dir), 4000, 700)
    assert (disk["margin_bytes"], disk["needed_bytes"]) == (6 * GB * 5 // 100, 6 * GB - 4000 + 6 * GB * 5 // 100)
    assert checks.problems == [
        "vllm_model_dir=%s has 5.0 GB free (file system at %s), the model needs 6.3 GB there (6.0 GB, 0.0 GB already "
        "there, + 5%% margin): free space there, or point vllm_model_dir at a larger file system" % (host.model_dir, host.model_dir)]


def test_a_snapshot_in_place_needs_only_the_margin(host, monkeypatch):
    monkeypatch.setattr(_host_limits.os, "statvfs", statvfs(0, 200 * GB))
    host.model_dir.mkdir(parents=True)
    (host.model_dir / "weights").write_bytes(b"x" * 2000)
    checks = limits(host, model_size_bytes=1000, disk_margin_percent=10)
    checks.check_disk()
    assert (checks.measured["disk"]["needed_bytes"], checks.measured["disk"]["margin_bytes"]) == (100, 100)
    assert "(0.0 GB, 0.0 GB already there, + 10% margin)" in checks.problems[0]
    checks = limits(host, model_size_bytes=2000, disk_margin_percent=0)
    checks.check_disk()
    assert checks.measured["disk"]["needed_bytes"] == 0 and checks.problems == []


def test_the_margin_is_whole_bytes(host, monkeypatch):
    monkeypatch.setattr(_host_limits.os, "statvfs", statvfs(100 * GB, 200 * GB))
    checks = limits(host, model_size_bytes=1001, disk_margin_percent=5)
    checks.check_disk()
    assert (checks.measured["disk"]["margin_bytes"], checks.measured["disk"]["needed_bytes"]) == (50, 1051)
    assert isinstance(checks.measured["disk"]["margin_bytes"], int)


def test_the_nearest_existing_directory_is_measured(host, tmp_path):
    checks = limits(host, model_dir=str(tmp_path / "a" / "b" / "c"))
    checks.check_disk()
    assert checks.measured["disk"]["measured_path"] == str(tmp_path)
    st = os.statvfs(str(tmp_path))
    assert checks.measured["disk"]["total_bytes"] == st.f_blocks * st.f_frsize


def test_a_model_dir_that_is_a_file(host):
    host.models.mkdir()
    host.model_dir.write_text("")
    checks = limits(host)
    checks.check_disk()
    assert checks.problems == ["vllm_model_dir=%s is not a directory: point vllm_model_dir at a directory" % host.model_dir]
    assert checks.measured["disk"] == dict(
        model_dir=str(host.model_dir), measured_path=str(host.model_dir), free_bytes=None, total_bytes=None, existing_bytes=0,
        incomplete_bytes=0, model_size_bytes=GB, margin_bytes=None, needed_bytes=None)


def test_a_file_system_that_cannot_be_measured(host, monkeypatch):
    def refuse(path):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(_host_limits.os, "statvfs", refuse)
    checks = limits(host)
    checks.check_disk()
    assert checks.problems == ["cannot measure the free space at %s for vllm_model_dir=%s: [Errno 5] Input/output error"
                               % (host.models.parent, host.model_dir)]
    assert checks.measured["disk"]["needed_bytes"] is None


def test_an_unknown_size_is_not_checked(host, monkeypatch):
    monkeypatch.setattr(_host_limits.os, "statvfs", statvfs(0, GB))
    checks = limits(host, model_size_bytes=0)
    checks.check_disk()
    assert checks.problems == []
    assert checks.warnings == ["the model's size is not known (model_size_bytes=0), so the free disk at vllm_model_dir=%s "
                               "is not checked" % host.model_dir]
    assert (checks.measured["disk"]["margin_bytes"], checks.measured["disk"]["needed_bytes"]) == (None, None)


def gone_while_counted(monkeypatch, suffix):
    """An os.lstat that no longer finds the file whose path ends with suffix (removed while it is counted)."""
    real_lstat = os.lstat

    def lstat(path):
        if path.endswith(suffix):
            raise FileNotFoundError(path)
        return real_lstat(path)

    monkeypatch.setattr(_host_limits.os, "lstat", lstat)


def test_a_file_gone_while_counting_is_skipped(host, monkeypatch):
    host.model_dir.mkdir(parents=True)
    (host.model_dir / "a").write_bytes(b"x" * 10)
    (host.model_dir / "b").write_bytes(b"x" * 20)
    gone_while_counted(monkeypatch, "/a")
    monkeypatch.setattr(_host_limits.os, "walk", lambda top: iter([(top, [], ["a", "b"])]))  # the gone file first
    assert limits(host).bytes_under(str(host.model_dir)) == (20, 0)


# ---- /dev/shm -------------------------------------------------------------------------------------------


def test_shm_large_enough(host, monkeypatch):
    monkeypatch.setattr(_host_limits.os, "statvfs", statvfs(20 * GIB, 32 * GIB))
    checks = limits(host)
    checks.check_shm()
    assert checks.measured["shm"] == dict(path=str(host.shm), exists=True, total_bytes=32 * GIB, free_bytes=20 * GIB,
                                          min_bytes=16 * GIB, leftover_files=0, leftover_bytes=0)
    assert checks.problems == []


@pytest.mark.parametrize("platform, shm_min_bytes, wanted", [
    ("cuda", None, "17.2 GB (what the cuda engine needs; vllm_shm_min_bytes not set)"),
    ("cpu", None, "0.5 GB (what the cpu engine needs; vllm_shm_min_bytes not set)"),
    ("cpu", 2 * GB, "2.0 GB (vllm_shm_min_bytes=2000000000)"),
])
def test_shm_smaller_than_the_engine_needs(host, monkeypatch, platform, shm_min_bytes, wanted):
    monkeypatch.setattr(_host_limits.os, "statvfs", statvfs(64 * MIB, 64 * MIB))
    checks = limits(host, platform=platform, shm_min_bytes=shm_min_bytes)
    checks.check_shm()
    assert checks.problems == [
        "%s is 0.1 GB, below the %s that vLLM's workers and NCCL need: enlarge it (mount -o remount,size=... and the same "
        "in /etc/fstab; in a container --shm-size or --ipc=host), or lower vllm_shm_min_bytes" % (host.shm, wanted)]
    assert checks.measured["shm"]["min_bytes"] == (shm_min_bytes or SHM_MIN_BYTES[platform])


def test_shm_exactly_as_large_as_needed(host, monkeypatch):
    monkeypatch.setattr(_host_limits.os, "statvfs", statvfs(GB, GB))
    checks = limits(host, shm_min_bytes=GB)
    checks.check_shm()
    assert checks.problems == []


def test_a_full_shm_names_what_earlier_runs_left(host, monkeypatch):
    monkeypatch.setattr(_host_limits.os, "statvfs", statvfs(GB, 32 * GIB))
    for name, size in (("psm_3f9a1c2e", 3000), ("sem.mp-abc", 32), ("vllm_offload_0", 7 * 10 ** 8), ("other", 999)):
        (host.shm / name).write_bytes(b"x" * size)
    checks = limits(host, shm_min_bytes=2 * GB)
    checks.check_shm()
    assert (checks.measured["shm"]["leftover_files"], checks.measured["shm"]["leftover_bytes"]) == (3, 3032 + 7 * 10 ** 8)
    assert checks.problems == [
        "%s has 1.0 GB free of 34.4 GB, below the 2.0 GB (vllm_shm_min_bytes=2000000000) that vLLM's workers and NCCL "
        "need: 3 files left by earlier vLLM runs (psm_*, sem.mp-*, vllm_offload_*) take 0.7 GB: stop the vLLM service "
        "and remove them; free space there" % host.shm]


def test_a_full_shm_without_leftovers(host, monkeypatch):
    monkeypatch.setattr(_host_limits.os, "statvfs", statvfs(GB, 32 * GIB))
    (host.shm / "other").write_bytes(b"x")
    checks = limits(host, shm_min_bytes=2 * GB)
    checks.check_shm()
    assert checks.problems == ["%s has 1.0 GB free of 34.4 GB, below the 2.0 GB (vllm_shm_min_bytes=2000000000) that "
                               "vLLM's workers and NCCL need: free space there" % host.shm]


def test_a_missing_shm(host):
    checks = limits(host, shm_dir=str(host.root / "no-shm"))
    checks.check_shm()
    assert checks.problems == ["vllm_shm_dir=%s does not exist: vLLM's workers and NCCL need a shared memory file system "
                               "there (mount a tmpfs; in a container, --ipc=host or --shm-size)" % (host.root / "no-shm")]
    assert checks.measured["shm"] == dict(path=str(host.root / "no-shm"), exists=False, total_bytes=None, free_bytes=None,
                                          min_bytes=16 * GIB, leftover_files=0, leftover_bytes=0)


def test_a_shm_that_cannot_be_measured_or_listed(host, monkeypatch):
    def refuse(path):
        raise OSError(13, "Permission denied")

    with monkeypatch.context() as patch:
        patch.setattr(_host_limits.os, "statvfs", refuse)
        checks = limits(host)
        checks.check_shm()
    assert checks.problems == ["cannot measure vllm_shm_dir=%s: [Errno 13] Permission denied" % host.shm]
    (host.shm / "psm_1").write_bytes(b"x")
    with monkeypatch.context() as patch:
        patch.setattr(_host_limits.os, "statvfs", statvfs(32 * GIB, 32 * GIB))
        patch.setattr(_host_limits.os, "listdir", refuse)
        checks = limits(host)
        checks.check_shm()
    assert checks.measured["shm"]["leftover_files"] == 0 and checks.problems == []


def test_a_leftover_gone_while_counting_is_skipped(host, monkeypatch):
    (host.shm / "psm_1").write_bytes(b"x" * 10)
    (host.shm / "psm_2").write_bytes(b"x" * 20)
    gone_while_counted(monkeypatch, "psm_1")
    monkeypatch.setattr(_host_limits.os, "listdir", lambda path: ["psm_1", "psm_2"])  # the gone file first
    checks = limits(host)
    checks.check_shm()
    assert (checks.measured["shm"]["leftover_files"], checks.measured["shm"]["leftover_bytes"]) == (1, 20)


# ---- open files ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("systemctl, answer", [
    ((0, "DefaultLimitNOFILE=524288\n", ""), ("524288", None)),
    ((0, "  DefaultLimitNOFILE=infinity  \n", ""), ("infinity", None)),
    ((0, "Other=1\nDefaultLimitNOFILE=1024\n", ""), ("1024", None)),
    ((0, "DefaultLimitNOFILE=\n", ""), (None, "systemctl show printed no DefaultLimitNOFILE: DefaultLimitNOFILE=")),
    ((0, "DefaultLimitNOFILE=1k\n", ""), (None, "systemctl show printed no DefaultLimitNOFILE: DefaultLimitNOFILE=1k")),
    ((0, "DefaultLimitNOFILE 1024\n", ""), (None, "systemctl show printed no DefaultLimitNOFILE: DefaultLimitNOFILE 1024")),
    ((0, "x" * 300, ""), (None, "systemctl show printed no DefaultLimitNOFILE: " + "x" * 200)),
    ((1, "", "System has not been booted with systemd as init system (PID 1).\n  Can't operate.\n"),
     (None, "systemctl show exited with 1: System has not been booted with systemd as init system (PID 1). Can't operate.")),
    ((1, "Failed to connect to bus\n", ""), (None, "systemctl show exited with 1: Failed to connect to bus")),
    ((3, "", "\n"), (None, "systemctl show exited with 3: (no output)")),
    (None, (None, "no systemctl")),
])
def test_systemds_default_open_file_limit(host, systemctl, answer):
    checks = limits(host, systemctl=systemctl)
    assert checks.systemd_default_nofile() == answer
    if systemctl is not None:
        assert checks.module.commands == [(["/usr/bin/systemctl", "show", "--property", "DefaultLimitNOFILE"], {"LC_ALL": "C"})]


def nofile(host, monkeypatch, nr_open="1048576\n", rlimit=(1024, 524288), **params):
    if nr_open is None:
        (host.proc / "sys" / "fs" / "nr_open").unlink()
    else:
        host.write(host.proc / "sys" / "fs" / "nr_open", nr_open)
    monkeypatch.setattr(_host_limits.resource, "getrlimit", lambda which: rlimit if which == resource.RLIMIT_NOFILE else None)
    checks = limits(host, **params)
    checks.check_nofile()
    return checks


def test_open_files_by_systemds_default(host, monkeypatch):
    checks = nofile(host, monkeypatch)
    assert checks.measured["nofile"] == dict(
        nr_open=1048576, systemd_default="524288", systemd_error=None, process_soft=1024, process_hard=524288,
        service_limit=0, effective=524288, source="systemd DefaultLimitNOFILE", min=65536)
    assert checks.problems == []


def test_open_files_by_the_units_limit(host, monkeypatch):
    checks = nofile(host, monkeypatch, nofile_service_limit=2 ** 21, rlimit=(INF, INF))
    n = checks.measured["nofile"]
    assert (n["effective"], n["source"], n["process_soft"], n["process_hard"]) == (2 ** 21, "the vLLM unit's LimitNOFILE", -1, -1)
    assert checks.problems == ["vllm_nofile_service_limit=2097152 is above the kernel's fs.nr_open (1048576), so systemd "
                               "cannot apply it: lower it or raise fs.nr_open"]
    checks = nofile(host, monkeypatch, nofile_service_limit=1024)
    assert checks.problems == ["the vLLM service would get at most 1024 open files (the vLLM unit's LimitNOFILE), below "
                               "vllm_nofile_min=65536: raise LimitNOFILE in the vLLM unit, and vllm_nofile_service_limit "
                               "with it, or lower vllm_nofile_min"]
    assert nofile(host, monkeypatch, nofile_service_limit=1048576).problems == []


def test_systemds_infinity_is_the_kernels_ceiling(host, monkeypatch):
    checks = nofile(host, monkeypatch, systemctl=(0, "DefaultLimitNOFILE=infinity\n", ""))
    assert checks.measured["nofile"]["effective"] == 1048576
    checks = nofile(host, monkeypatch, nr_open=None, systemctl=(0, "DefaultLimitNOFILE=infinity\n", ""))
    assert (checks.measured["nofile"]["nr_open"], checks.measured["nofile"]["effective"], checks.problems) == (None, None, [])


def test_a_low_systemd_default_says_where_to_raise_it(host, monkeypatch):
    checks = nofile(host, monkeypatch, systemctl=(0, "DefaultLimitNOFILE=1024\n", ""), nofile_min=4096)
    assert checks.problems == [
        "the vLLM service would get at most 1024 open files (systemd DefaultLimitNOFILE), below vllm_nofile_min=4096: set "
        "LimitNOFILE=4096 in the vLLM unit (and vllm_nofile_service_limit to it) or raise DefaultLimitNOFILE in "
        "/etc/systemd/system.conf, or lower vllm_nofile_min"]
    assert nofile(host, monkeypatch, systemctl=(0, "DefaultLimitNOFILE=4096\n", ""), nofile_min=4096).problems == []


def test_without_systemd_the_hard_limit_counts(host, monkeypatch):
    checks = nofile(host, monkeypatch, systemctl=None, rlimit=(1024, 4096))
    n = checks.measured["nofile"]
    assert (n["systemd_default"], n["systemd_error"], n["effective"], n["source"]) == (
        None, "no systemctl", 4096, "hard RLIMIT_NOFILE of processes started here")
    assert checks.problems == [
        "the vLLM service would get at most 4096 open files (hard RLIMIT_NOFILE of processes started here), below "
        "vllm_nofile_min=65536: raise the hard nofile limit where vLLM is started (/etc/security/limits.conf, the "
        "container runtime's --ulimit nofile), or lower vllm_nofile_min"]
    checks = nofile(host, monkeypatch, systemctl=None, rlimit=(1024, INF))
    assert (checks.measured["nofile"]["effective"], checks.problems) == (1048576, [])


@pytest.mark.parametrize("nr_open", ["4096\n", " 4096 "])
def test_a_kernel_ceiling_below_the_minimum(host, monkeypatch, nr_open):
    checks = nofile(host, monkeypatch, nr_open=nr_open, systemctl=(0, "DefaultLimitNOFILE=infinity\n", ""),
                    nofile_service_limit=8192)
    assert checks.problems == [
        "the kernel allows no process more than 4096 open files (fs.nr_open), below vllm_nofile_min=65536: raise it "
        "(sysctl fs.nr_open=1048576, and the same in /etc/sysctl.d/) or lower vllm_nofile_min",
        "the vLLM service would get at most 8192 open files (the vLLM unit's LimitNOFILE), below vllm_nofile_min=65536: "
        "raise LimitNOFILE in the vLLM unit, and vllm_nofile_service_limit with it, or lower vllm_nofile_min"]
    assert checks.measured["nofile"]["nr_open"] == 4096


def test_a_kernel_ceiling_equal_to_the_minimum_is_enough(host, monkeypatch):
    checks = nofile(host, monkeypatch, nr_open="65536\n", systemctl=(0, "DefaultLimitNOFILE=infinity\n", ""))
    assert (checks.measured["nofile"]["effective"], checks.problems) == (65536, [])


@pytest.mark.parametrize("nr_open", ["", "many\n", "-1\n"])
def test_an_unreadable_kernel_ceiling_is_none(host, monkeypatch, nr_open):
    checks = nofile(host, monkeypatch, nr_open=nr_open, nofile_service_limit=2 ** 30)
    assert checks.measured["nofile"]["nr_open"] is None and checks.problems == []
