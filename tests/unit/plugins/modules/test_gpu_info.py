"""fleet.vllm.gpu_info against the test-fixture nvidia-smi, run as Ansible runs a module.

tests/fixtures/bin/nvidia-smi prints what the real tool prints for the host of a scenario
(tests/fixtures/nvidia-smi/<scenario>/); FLEET_VLLM_FAKE_GPUS picks the scenario."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils._nvidia_smi import parse_gpu_query, parse_topology, summarise
from ansible_collections.fleet.vllm.plugins.modules.gpu_info import GpuInfo
from conftest import FIXTURES

FAKE_BIN = FIXTURES / "bin"
FAKE_SMI = FAKE_BIN / "nvidia-smi"
SCENARIOS = FIXTURES / "nvidia-smi"

PRO_SE = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
PRO_WS = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
RTX_5090 = "NVIDIA GeForce RTX 5090"
DRIVER_MESSAGE = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                  "Make sure that the latest NVIDIA driver is installed and running.")
QUERY = ("--query-gpu=index,name,uuid,pci.bus_id,compute_cap,memory.total,driver_version,"
         "pcie.link.gen.max,pcie.link.gen.current,pcie.link.width.max,pcie.link.width.current "
         "--format=csv,noheader,nounits")
EMPTY_FACTS = {
    "count": 0, "gpus": [], "models": [], "model": None, "compute_capabilities": [],
    "memory_total_mib_min": None, "driver_version": None, "cuda_version": None,
    "interconnect": None, "pcie_only": None,
    "topology": {"pairs": [], "link_types": [], "matrix": {}, "nics": {}},
}


def fake_env(scenario, path_first=None, **extra):
    path = os.pathsep.join(p for p in (path_first, str(FAKE_BIN), os.environ.get("PATH", "")) if p)
    env = {"PATH": path, "FLEET_VLLM_FAKE_GPUS": scenario}
    env.update(extra)
    return env


def captured_rows(scenario):
    """The scenario's query-gpu.csv read independently of the module: {index: {field: value}}."""
    lines = (SCENARIOS / scenario / "query-gpu.csv").read_text(encoding="utf-8").splitlines()
    fields = [title.split(" [")[0] for title in lines[0].split(", ")]
    rows = [dict(zip(fields, line.split(", "))) for line in lines[1:] if line]
    return {int(row["index"]): row for row in rows}


# scenario, count, model, capability (major, minor), MiB, interconnect, GPU-GPU links, driver,
# CUDA, CPU affinity of the first and the last GPU, NUMA node of the first and last, NICs
CASES = [
    pytest.param(
        "rtx-pro-6000-x8", 8, PRO_SE, (12, 0), 97887, "pcie", ["NODE", "SYS"], "580.95.05", "13.0",
        ("0-31,64-95", "32-63,96-127"), (0, 1), {"NIC0": "mlx5_0", "NIC1": "mlx5_1"},
        id="8x-rtx-pro-6000-pcie",
    ),
    pytest.param(
        "h100-sxm-x8", 8, "NVIDIA H100 80GB HBM3", (9, 0), 81559, "nvlink", ["NV18"], "570.172.08", "12.8",
        ("0-47,96-143", "48-95,144-191"), (0, 1), {},
        id="8x-h100-sxm-nvlink",
    ),
    pytest.param(
        "b200-x8", 8, "NVIDIA B200", (10, 0), 183359, "nvlink", ["NV18"], "580.105.08", "13.0",
        ("0-55,112-167", "56-111,168-223"), (0, 1), {"NIC%d" % n: "mlx5_%d" % n for n in range(8)},
        id="8x-b200-nvlink-with-nics",
    ),
    pytest.param(
        "rtx-pro-6000-ws-x4", 4, PRO_WS, (12, 0), 97887, "pcie", ["NODE", "PHB"], "610.57.04", "13.3",
        ("0-127", "0-127"), (0, 0), {},
        id="4x-workstation-driver-610-umd-labels",
    ),
]


@pytest.mark.parametrize(
    "scenario, count, model, capability, mib, interconnect, links, driver, cuda, cpus, numa, nics", CASES
)
def test_scenario_facts(run_module, scenario, count, model, capability, mib, interconnect, links, driver, cuda,
                        cpus, numa, nics):
    run = run_module("gpu_info", {}, env=fake_env(scenario))
    assert not run.failed, run
    assert run.result["changed"] is False
    assert run.result["nvidia_smi"] == str(FAKE_SMI)
    facts = run.result["gpu_info"]

    assert facts["count"] == count
    assert [gpu["index"] for gpu in facts["gpus"]] == list(range(count))
    assert facts["models"] == [model] and facts["model"] == model
    capability_text = "%d.%d" % capability
    assert facts["compute_capabilities"] == [capability_text]
    assert facts["memory_total_mib_min"] == mib
    assert facts["driver_version"] == driver
    assert facts["cuda_version"] == cuda

    captured = captured_rows(scenario)
    for gpu in facts["gpus"]:
        row = captured[gpu["index"]]
        assert gpu["name"] == model
        assert gpu["uuid"] == row["uuid"] and gpu["uuid"].startswith("GPU-")
        assert gpu["pci_bus_id"] == row["pci.bus_id"]
        assert gpu["compute_capability"] == capability_text
        assert (gpu["compute_capability_major"], gpu["compute_capability_minor"]) == capability
        assert gpu["memory_total_mib"] == mib
        assert gpu["driver_version"] == driver
        assert gpu["pcie_link_gen_max"] == 5 and gpu["pcie_link_width_max"] == 16
        assert gpu["pcie_link_gen_current"] == int(row["pcie.link.gen.current"])
        assert gpu["pcie_link_width_current"] == 16
        assert gpu["gpu_numa_id"] is None
    assert len({gpu["uuid"] for gpu in facts["gpus"]}) == count
    first, last = facts["gpus"][0], facts["gpus"][-1]
    assert (first["cpu_affinity"], last["cpu_affinity"]) == cpus
    assert (first["numa_node"], last["numa_node"]) == numa

    assert facts["interconnect"] == interconnect
    assert facts["pcie_only"] is (interconnect == "pcie")
    topology = facts["topology"]
    assert topology["link_types"] == links
    assert len(topology["pairs"]) == count * (count - 1) // 2
    assert [p["gpus"] for p in topology["pairs"]][:2] == [[0, 1], [0, 2]]
    for pair in topology["pairs"]:
        assert pair["type"] == interconnect
        assert pair["nvlinks"] == (18 if interconnect == "nvlink" else 0)
    assert topology["nics"] == nics
    assert sorted(topology["matrix"]) == sorted(["GPU%d" % i for i in range(count)] + list(nics))
    assert topology["matrix"]["GPU0"]["GPU0"] == "X"
    assert "%dx %s (compute capability %s, %d MiB)" % (count, model, capability_text, mib) in run.result["msg"]
    assert "driver %s, CUDA %s" % (driver, cuda) in run.result["msg"]


def test_rtx_pro_6000_topology_is_the_captured_one(run_module):
    """Same socket NODE, across sockets SYS, the NICs on socket 0; every pair exactly once."""
    facts = run_module("gpu_info", {}, env=fake_env("rtx-pro-6000-x8")).result["gpu_info"]
    links = {tuple(p["gpus"]): p["link"] for p in facts["topology"]["pairs"]}
    assert links[(0, 3)] == "NODE" and links[(4, 7)] == "NODE"
    assert links[(0, 4)] == "SYS" and links[(3, 7)] == "SYS"
    assert sum(1 for link in links.values() if link == "SYS") == 16
    matrix = facts["topology"]["matrix"]
    assert matrix["NIC0"]["NIC1"] == "PIX"
    assert matrix["GPU2"]["NIC0"] == "NODE" and matrix["GPU6"]["NIC1"] == "SYS"


def test_message_names_pcie_only_and_links(run_module):
    run = run_module("gpu_info", {}, env=fake_env("rtx-pro-6000-x8"))
    assert run.result["msg"] == (
        "8x %s (compute capability 12.0, 97887 MiB), PCIe only (NODE, SYS), driver 580.95.05, CUDA 13.0" % PRO_SE
    )
    nvlink = run_module("gpu_info", {}, env=fake_env("h100-sxm-x8"))
    assert "NVLink between all GPUs (NV18)" in nvlink.result["msg"]


@pytest.mark.parametrize("scenario", ["rtx-pro-6000-x8", "b200-x8", "mixed"])
def test_check_mode_reports_the_same(run_module, scenario):
    args = {"allow_mixed": True}
    real = run_module("gpu_info", args, env=fake_env(scenario))
    check = run_module("gpu_info", args, check=True, diff=True, env=fake_env(scenario))
    assert not check.failed, check
    assert check.result["changed"] is False
    assert check.result["gpu_info"]["count"] == 8
    assert check.result["gpu_info"] == real.result["gpu_info"]
    assert check.result["msg"] == real.result["msg"]
    assert "diff" not in check.result


@pytest.mark.parametrize("scenario", ["rtx-pro-6000-x8", "rtx-pro-6000-ws-x4"], ids=["cuda-version", "cuda-umd-version"])
def test_commands_run_are_the_documented_ones_in_the_c_locale(run_module, tmp_path, scenario):
    """A wrapper logs what the module runs, then lets the fixture answer. Both spellings of the
    CUDA version in --version are read there, without falling back to plain nvidia-smi."""
    log = tmp_path / "calls.log"
    wrapper = tmp_path / "nvidia-smi"
    wrapper.write_text('#!/bin/sh\nprintf "%%s|%%s\\n" "$LC_ALL" "$*" >> %s\nexec %s "$@"\n' % (log, FAKE_SMI))
    wrapper.chmod(0o755)
    run = run_module("gpu_info", {"nvidia_smi": str(wrapper)}, env=fake_env(scenario))
    assert not run.failed, run
    assert run.result["nvidia_smi"] == str(wrapper)
    assert run.result["gpu_info"]["cuda_version"] == {"rtx-pro-6000-x8": "13.0", "rtx-pro-6000-ws-x4": "13.3"}[scenario]
    assert log.read_text().splitlines() == ["C|" + QUERY, "C|--version", "C|topo -m"]


@pytest.mark.parametrize(
    "scenario, cuda", [("rtx-pro-6000-x8", "13.0"), ("rtx-pro-6000-ws-x4", "13.3")], ids=["cuda-version", "cuda-umd-version"]
)
def test_cuda_version_from_the_summary_header_when_version_option_is_unknown(run_module, tmp_path, scenario, cuda):
    """Older tools have no --version: the module falls back to the header of plain nvidia-smi."""
    log = tmp_path / "calls.log"
    wrapper = tmp_path / "nvidia-smi"
    wrapper.write_text(
        '#!/bin/sh\necho "$*" >> %s\nif [ "$1" = --version ]; then\n'
        "  echo \"ERROR: Option --version is not recognized. Please run 'nvidia-smi -h'.\"\n  exit 2\nfi\n"
        'exec %s "$@"\n' % (log, FAKE_SMI)
    )
    wrapper.chmod(0o755)
    run = run_module("gpu_info", {"nvidia_smi": str(wrapper)}, env=fake_env(scenario))
    assert not run.failed, run
    assert run.result["gpu_info"]["cuda_version"] == cuda
    assert log.read_text().splitlines()[1:] == ["--version", "", "topo -m"]


def test_explicit_path_works_without_nvidia_smi_on_path(run_module, tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    run = run_module("gpu_info", {"nvidia_smi": str(FAKE_SMI)},
                     env={"PATH": str(empty), "FLEET_VLLM_FAKE_GPUS": "h100-sxm-x8"})
    assert not run.failed, run
    assert run.result["gpu_info"]["count"] == 8
    assert run.result["gpu_info"]["interconnect"] == "nvlink"


# ---- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("check", [False, True], ids=["real", "check-mode"])
def test_driver_not_loaded_passes_the_tools_message_on(run_module, check):
    run = run_module("gpu_info", {}, check=check, env=fake_env("driver-not-loaded"))
    assert run.failed, run
    msg = run.result["msg"]
    assert msg.startswith("the NVIDIA driver is not loaded: `%s %s` exited with 9: " % (FAKE_SMI, QUERY))
    assert DRIVER_MESSAGE in msg
    assert "modprobe nvidia" in msg
    assert run.result["gpu_info"] == EMPTY_FACTS
    assert run.result["changed"] is False
    assert run.result["nvidia_smi"] == str(FAKE_SMI)


def test_no_devices(run_module):
    run = run_module("gpu_info", {}, env=fake_env("no-devices"))
    assert run.failed, run
    msg = run.result["msg"]
    assert msg.startswith("no NVIDIA GPU found: `%s %s` exited with 6: No devices were found " % (FAKE_SMI, QUERY))
    assert "lspci -d 10de:" in msg
    assert run.result["gpu_info"] == EMPTY_FACTS


def test_no_nvidia_smi_on_path(run_module, tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    assert shutil.which("nvidia-smi", path=os.pathsep.join([str(empty), "/sbin", "/usr/sbin", "/usr/local/sbin"])) is None
    run = run_module("gpu_info", {}, env={"PATH": str(empty), "FLEET_VLLM_FAKE_GPUS": "rtx-pro-6000-x8"})
    assert run.failed, run
    assert run.result["msg"] == (
        "nvidia-smi was not found on PATH (%s) nor in the system directories: install the NVIDIA driver, "
        "which brings nvidia-smi, or set nvidia_smi to its path" % empty
    )
    assert run.result["nvidia_smi"] == ""
    assert run.result["gpu_info"] == EMPTY_FACTS


def test_nvidia_smi_option_missing_or_not_executable(run_module, tmp_path):
    gone = tmp_path / "nope" / "nvidia-smi"
    run = run_module("gpu_info", {"nvidia_smi": str(gone)}, env=fake_env("rtx-pro-6000-x8"))
    assert run.failed
    assert run.result["msg"].startswith("nvidia_smi=%s does not exist: install the NVIDIA driver" % gone)
    plain = tmp_path / "nvidia-smi"
    plain.write_text("not a program\n")
    plain.chmod(0o644)
    if os.geteuid() == 0:
        # root may execute any file that has an execute bit; this one has none
        assert not plain.stat().st_mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    run = run_module("gpu_info", {"nvidia_smi": str(plain)}, env=fake_env("rtx-pro-6000-x8"))
    assert run.failed
    assert run.result["msg"] == "nvidia_smi=%s is not an executable file: set nvidia_smi to the nvidia-smi program" % plain
    assert run.result["gpu_info"] == EMPTY_FACTS


def test_mixed_models_fail_naming_the_model_of_each_index(run_module):
    run = run_module("gpu_info", {}, env=fake_env("mixed"))
    assert run.failed, run
    assert run.result["msg"] == (
        "this host mixes GPU models: %s (GPU 0, 1, 4, 5); %s (GPU 2, 3, 6, 7). vLLM splits a model evenly over "
        "identical GPUs: serve from GPUs of one model (CUDA_VISIBLE_DEVICES), or set allow_mixed=true to only "
        "report them" % (PRO_WS, RTX_5090)
    )
    facts = run.result["gpu_info"]
    assert facts["count"] == 8
    assert facts["models"] == [PRO_WS, RTX_5090]
    assert facts["model"] is None


def test_mixed_models_reported_when_allowed(run_module):
    run = run_module("gpu_info", {"allow_mixed": True}, env=fake_env("mixed"))
    assert not run.failed, run
    facts = run.result["gpu_info"]
    assert facts["models"] == [PRO_WS, RTX_5090]
    assert [g["name"] for g in facts["gpus"]] == [PRO_WS, PRO_WS, RTX_5090, RTX_5090] * 2
    assert facts["compute_capabilities"] == ["12.0"]
    assert [g["memory_total_mib"] for g in facts["gpus"]] == [97887, 97887, 32607, 32607] * 2
    assert facts["memory_total_mib_min"] == 32607
    assert facts["interconnect"] == "pcie" and facts["pcie_only"] is True
    assert run.result["msg"].startswith("8 GPUs: %s (GPU 0, 1, 4, 5); %s (GPU 2, 3, 6, 7), PCIe only" % (PRO_WS, RTX_5090))


@pytest.fixture
def broken_scenario(tmp_path):
    """A copy of rtx-pro-6000-x8 with one file edited: ``broken_scenario(file, old, new)`` gives
    the environment that selects it."""

    def make(file_name, old, new):
        data = tmp_path / "scenarios"
        shutil.copytree(SCENARIOS / "rtx-pro-6000-x8", data / "broken")
        path = data / "broken" / file_name
        text = path.read_text(encoding="utf-8")
        assert old in text, (old, file_name)
        path.write_text(text.replace(old, new, 1), encoding="utf-8")
        return fake_env("broken", FLEET_VLLM_FAKE_GPUS_DATA=str(data))

    return make


def query_answered_with(tmp_path, text):
    """An nvidia-smi that prints TEXT for --query-gpu and lets the fixture answer the rest."""
    answer = tmp_path / "query-answer.txt"
    answer.write_text(text)
    wrapper = tmp_path / "nvidia-smi"
    wrapper.write_text('#!/bin/sh\ncase "$1" in --query-gpu=*) cat %s; exit 0;; esac\nexec %s "$@"\n' % (answer, FAKE_SMI))
    wrapper.chmod(0o755)
    return wrapper


GOOD_ROW = "0, %s, GPU-2c3e7876-b74a-57b3-94a4-1b4d866fd427, 00000000:01:00.0, 12.0, 97887, 580.95.05, 5, 1, 16, 16" % PRO_SE

UNPARSABLE_QUERY = [
    pytest.param(
        GOOD_ROW + "\n" + GOOD_ROW.replace("0, ", "1, ", 1).replace(", 12.0,", ", twelve,") + "\n",
        "line 2 '1, %s, GPU-2c3e7876-b74a-57b3-94a4-1b4d866fd427, 00000000:01:00.0, twelve, 97887" % PRO_SE,
        "compute_cap is 'twelve', expected MAJOR.MINOR such as 12.0",
        id="capability",
    ),
    pytest.param(
        GOOD_ROW.replace("Blackwell Server", "Blackwell, Server") + "\n",
        "line 1 '0, NVIDIA RTX PRO 6000 Blackwell, Server Edition, GPU-",
        "12 values, expected 11 (index, name, uuid, pci.bus_id, compute_cap, memory.total, driver_version, "
        "pcie.link.gen.max, pcie.link.gen.current, pcie.link.width.max, pcie.link.width.current)",
        id="column-count",
    ),
    pytest.param(
        GOOD_ROW.replace(", 97887,", ", 97887 MiB,") + "\n",
        "line 1 '0, ",
        "memory.total is '97887 MiB', expected a whole number",
        id="units-despite-nounits",
    ),
    pytest.param(
        GOOD_ROW + "\n" + GOOD_ROW + "\n",
        "nvidia-smi --query-gpu output",
        "GPU indexes repeat: 0, 0",
        id="repeated-index",
    ),
]


@pytest.mark.parametrize("text, where, reason", UNPARSABLE_QUERY)
def test_unparsable_query_output_shows_the_line(run_module, tmp_path, text, where, reason):
    wrapper = query_answered_with(tmp_path, text)
    run = run_module("gpu_info", {"nvidia_smi": str(wrapper)}, env=fake_env("rtx-pro-6000-x8"))
    assert run.failed, run
    msg = run.result["msg"]
    assert msg.startswith("cannot read the output of `%s %s`: nvidia-smi --query-gpu output" % (wrapper, QUERY))
    assert where in msg
    assert reason in msg
    assert msg.endswith("; is %s the nvidia-smi of an NVIDIA driver (535 or later)?" % wrapper)
    assert run.result["gpu_info"] == EMPTY_FACTS


def test_empty_query_output_is_no_gpu(run_module, tmp_path):
    wrapper = query_answered_with(tmp_path, "")
    run = run_module("gpu_info", {"nvidia_smi": str(wrapper)}, env=fake_env("rtx-pro-6000-x8"))
    assert run.failed, run
    assert run.result["msg"] == "no NVIDIA GPU found: `%s %s` listed none. Check that the host sees its GPUs (lspci -d 10de:)" % (
        wrapper, QUERY)


UNPARSABLE_TOPOLOGY = [
    pytest.param(
        "GPU5\tSYS\tSYS\tSYS\tSYS\tNODE", "GPU5\tSYS\tSYS\tSYS\tSYS\tNV4",
        "nvidia-smi topo -m output: the matrix is not symmetric: GPU4-GPU5 is NODE, GPU5-GPU4 is NV4",
        id="asymmetric",
    ),
    pytest.param(
        "GPU2\tNODE\tNODE\t X \tNODE", "GPU2\tNODE\tQPI\t X \tNODE",
        "nvidia-smi topo -m output line 4 'GPU2\\tNODE\\tQPI\\t X \\tNODE\\tSYS",
        id="unknown-link",
    ),
    pytest.param(
        "GPU6\tGPU7\tNIC0", "GPU6\tNIC0",
        "nvidia-smi topo -m output line 2 'GPU0\\t X \\tNODE",
        id="gpu-missing-from-header",
    ),
    pytest.param(
        "\t\x1b[4mGPU0", "GPUs\t\x1b[4mGPU0",
        "nvidia-smi topo -m output line 1 'GPUs\\tGPU0\\tGPU1",
        id="header-shifted",
    ),
]
TOPOLOGY_REASONS = {
    "asymmetric": "the matrix is not symmetric",
    "unknown-link": "unknown link type 'QPI' between GPU2 and GPU1",
    "gpu-missing-from-header": "more values than the columns CPU Affinity, NUMA Affinity, GPU NUMA ID",
    "header-shifted": "column GPU0 is out of order or has no row",
}


@pytest.mark.parametrize("old, new, where", UNPARSABLE_TOPOLOGY)
def test_unparsable_topology_shows_the_line(run_module, broken_scenario, request, old, new, where):
    run = run_module("gpu_info", {}, env=broken_scenario("topo-matrix.txt", old, new))
    assert run.failed, run
    msg = run.result["msg"]
    assert msg.startswith("cannot read the output of `%s topo -m`: " % FAKE_SMI)
    assert where in msg
    assert TOPOLOGY_REASONS[request.node.callspec.id] in msg
    assert msg.endswith("; is %s the nvidia-smi of an NVIDIA driver (535 or later)?" % FAKE_SMI)
    assert run.result["gpu_info"] == EMPTY_FACTS


def test_unparsable_summary_header_after_version_without_cuda(run_module, broken_scenario, tmp_path):
    env = broken_scenario("version.txt", "CUDA Version        : 13.0\n", "")
    (tmp_path / "scenarios" / "broken" / "summary.txt").write_text("Segmentation fault\n")
    run = run_module("gpu_info", {}, env=env)
    assert run.failed, run
    assert run.result["msg"].startswith(
        "cannot read the output of `%s`: nvidia-smi output 'Segmentation fault': no 'NVIDIA-SMI ... Driver "
        "Version: ...' header" % FAKE_SMI
    )


def test_topology_with_fewer_gpus_than_the_query(run_module, broken_scenario, tmp_path):
    env = broken_scenario("topo-matrix.txt", "GPU0", "GPU0")
    (tmp_path / "scenarios" / "broken" / "topo-matrix.txt").write_text(
        "\t\x1b[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
        "GPU0\t X \tNODE\t0-31,64-95\t0\t\tN/A\nGPU1\tNODE\t X \t0-31,64-95\t0\t\tN/A\n"
    )
    run = run_module("gpu_info", {}, env=env)
    assert run.failed, run
    assert ("the matrix shows GPU0, GPU1 but --query-gpu listed GPU0, GPU1, GPU2, GPU3, GPU4, GPU5, GPU6, GPU7"
            in run.result["msg"])


def test_other_tool_failure_is_reported_with_its_output(run_module, tmp_path):
    wrapper = tmp_path / "nvidia-smi"
    wrapper.write_text("#!/bin/sh\necho 'Failed to initialize NVML: Driver/library version mismatch'\n"
                       "echo 'NVML library version: 580.95'\nexit 18\n")
    wrapper.chmod(0o755)
    run = run_module("gpu_info", {"nvidia_smi": str(wrapper)}, env=fake_env("rtx-pro-6000-x8"))
    assert run.failed, run
    assert run.result["msg"] == (
        "`%s %s` failed with exit code 18: Failed to initialize NVML: Driver/library version mismatch "
        "NVML library version: 580.95" % (wrapper, QUERY)
    )


# ---- the fixture itself --------------------------------------------------------------------


def fake(args, scenario="rtx-pro-6000-x8", **env):
    environ = dict(os.environ, FLEET_VLLM_FAKE_GPUS=scenario, LC_ALL="C", **env)
    return subprocess.run([str(FAKE_SMI)] + args, capture_output=True, text=True, env=environ, check=False, timeout=60)


def test_fixture_rejects_what_it_does_not_imitate_like_the_real_tool():
    unknown = fake(["--gpu-reset"])
    assert unknown.returncode == 2
    assert unknown.stdout == "ERROR: Option --gpu-reset is not recognized. Please run 'nvidia-smi -h'.\n"
    assert "fleet.vllm test fixture" in unknown.stderr
    field = fake(["--query-gpu=index,bogus", "--format=csv"])
    assert field.returncode == 2
    assert field.stdout == 'Field "bogus" is not a valid field to query.\n\n'
    no_format = fake(["--query-gpu=index"])
    assert no_format.returncode == 2
    assert no_format.stdout == "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
    missing = fake(["--query-gpu=temperature.gpu", "--format=csv"])
    assert missing.returncode == 2 and missing.stdout == ""
    assert "no captured value for temperature.gpu" in missing.stderr
    unknown_scenario = fake([], scenario="nope")
    assert unknown_scenario.returncode == 2
    assert "no such scenario" in unknown_scenario.stderr and "rtx-pro-6000-x8" in unknown_scenario.stderr


def test_fixture_query_formats():
    full = fake(["--query-gpu=index,gpu_name,memory.total,power.limit", "--format=csv"])
    assert full.returncode == 0
    lines = full.stdout.splitlines()
    assert lines[0] == "index, name, memory.total [MiB], power.limit [W]"
    assert lines[1] == "0, %s, 97887 MiB, 600.00 W" % PRO_SE
    assert len(lines) == 9
    bare = fake(["--query-gpu=memory.total,index", "--format=csv,noheader,nounits"], scenario="b200-x8")
    assert bare.stdout.splitlines() == ["183359, %d" % i for i in range(8)]
    listed = fake(["-L"], scenario="h100-sxm-x8")
    assert listed.stdout.splitlines()[0].startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-")
    assert fake(["topo", "-m"]).stdout.startswith("\t\x1b[4mGPU0\tGPU1\t")
    assert fake([]).stdout.splitlines()[2].startswith("| NVIDIA-SMI 580.95.05")


def test_fixture_defaults_to_rtx_pro_6000_x8():
    environ = {k: v for k, v in os.environ.items() if k != "FLEET_VLLM_FAKE_GPUS"}
    if os.path.exists("/etc/fleet-vllm-test/gpus"):
        pytest.skip("/etc/fleet-vllm-test/gpus chooses the scenario on this machine")
    proc = subprocess.run([str(FAKE_SMI), "--query-gpu=count,name", "--format=csv,noheader"],
                          capture_output=True, text=True, env=environ, check=False, timeout=60)
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[0] == "8, %s" % PRO_SE


@pytest.mark.parametrize("scenario, rc", [("driver-not-loaded", 9), ("no-devices", 6)])
def test_fixture_failure_scenarios_fail_every_query(scenario, rc):
    for args in ([], ["--version"], ["topo", "-m"], ["-L"], ["--query-gpu=index", "--format=csv"]):
        proc = fake(args, scenario=scenario)
        assert proc.returncode == rc, args
        assert proc.stdout.strip() == (SCENARIOS / scenario / "failure.txt").read_text().strip()


# ---- the one-line message for hosts no scenario has ----------------------------------------


def test_message_for_partial_nvlink_and_single_gpu():
    rows = "".join("%d, NVIDIA RTX A6000, GPU-%d, 00000000:0%d:00.0, 8.6, 49140, 570.86.15, 4, 1, 16, 16\n" % (i, i, i + 1)
                   for i in range(3))
    bridged = parse_topology("\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n"
                             "GPU0\t X \tNV4\tNODE\t0-31,64-95\t0\nGPU1\tNV4\t X \tNODE\t0-31,64-95\t0\n"
                             "GPU2\tNODE\tNODE\t X \t0-31,64-95\t0\n")
    assert GpuInfo.message(summarise(parse_gpu_query(rows), "12.8", bridged)) == (
        "3x NVIDIA RTX A6000 (compute capability 8.6, 49140 MiB), NVLink between some GPUs only (NODE, NV4), "
        "driver 570.86.15, CUDA 12.8"
    )
    single = parse_topology("\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\nGPU0\t X \t0-19\t0\t\tN/A\n")
    assert GpuInfo.message(summarise(parse_gpu_query(rows.splitlines()[0]), None, single)) == (
        "1x NVIDIA RTX A6000 (compute capability 8.6, 49140 MiB), a single GPU, driver 570.86.15, CUDA unknown"
    )
