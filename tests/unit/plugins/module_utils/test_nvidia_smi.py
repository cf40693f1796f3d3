"""The nvidia-smi parsers of fleet.vllm, on outputs in the real tool's formats.

Texts marked "verbatim" are as real nvidia-smi versions printed them (tabs, escapes and
padding included), for the hosts named; the others are edited from them to break one thing."""

from __future__ import annotations

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils._nvidia_smi import (
    QUERY_FIELDS,
    NvidiaSmiParseError,
    link_class,
    models_by_index,
    parse_gpu_query,
    parse_summary_header,
    parse_topology,
    parse_version,
    query_argv,
    strip_ansi,
    summarise,
    topology_argv,
    version_argv,
)

# ---- --query-gpu ---------------------------------------------------------------------------

H100_ROW = "0, NVIDIA H100 80GB HBM3, GPU-00000000-0000-0000-0000-000000000000, 00000000:00:09.0, 9.0, 81559, 590.48.01, 5, 5, 16, 16"
PRO_ROW = ("3, NVIDIA RTX PRO 6000 Blackwell Server Edition, GPU-0856f067-669f-59e6-a511-70cade1abdc0, "
           "00000000:61:00.0, 12.0, 97887, 580.95.05, 5, 1, 16, 16")


def test_query_argv_is_what_the_module_documents():
    assert query_argv("/usr/bin/nvidia-smi") == [
        "/usr/bin/nvidia-smi",
        "--query-gpu=index,name,uuid,pci.bus_id,compute_cap,memory.total,driver_version,pcie.link.gen.max,"
        "pcie.link.gen.current,pcie.link.width.max,pcie.link.width.current",
        "--format=csv,noheader,nounits",
    ]
    assert version_argv("nvidia-smi") == ["nvidia-smi", "--version"]
    assert topology_argv("nvidia-smi") == ["nvidia-smi", "topo", "-m"]


def test_query_rows_become_typed_gpus_sorted_by_index():
    gpus = parse_gpu_query(PRO_ROW + "\n" + H100_ROW + "\n\n")
    assert [g["index"] for g in gpus] == [0, 3]
    h100, pro = gpus
    assert h100 == dict(
        index=0, name="NVIDIA H100 80GB HBM3", uuid="GPU-00000000-0000-0000-0000-000000000000",
        pci_bus_id="00000000:00:09.0", compute_capability="9.0", compute_capability_major=9,
        compute_capability_minor=0, memory_total_mib=81559, driver_version="590.48.01",
        pcie_link_gen_max=5, pcie_link_gen_current=5, pcie_link_width_max=16, pcie_link_width_current=16,
    )
    assert pro["compute_capability"] == "12.0"
    assert (pro["compute_capability_major"], pro["compute_capability_minor"]) == (12, 0)
    assert pro["pcie_link_gen_current"] == 1 and pro["pcie_link_gen_max"] == 5
    assert pro["memory_total_mib"] == 97887


def test_not_available_pcie_values_are_none():
    """In a VM without a passed-through root port the tool prints [N/A] for PCIe link values."""
    row = "0, NVIDIA L40S, GPU-1, 00000000:01:00.0, 8.9, 46068, 595.80, [N/A], [N/A], [N/A], [Not Supported]"
    gpu = parse_gpu_query(row)[0]
    assert (gpu["pcie_link_gen_max"], gpu["pcie_link_gen_current"]) == (None, None)
    assert (gpu["pcie_link_width_max"], gpu["pcie_link_width_current"]) == (None, None)
    assert gpu["compute_capability"] == "8.9" and gpu["memory_total_mib"] == 46068


def test_empty_query_output_is_no_gpu():
    assert parse_gpu_query("") == []
    assert parse_gpu_query("\n\n") == []


@pytest.mark.parametrize(
    "text, message",
    [
        (H100_ROW + "\n" + H100_ROW.replace(", 9.0,", ", 9,"),
         "nvidia-smi --query-gpu output line 2 %r: compute_cap is '9', expected MAJOR.MINOR such as 12.0"
         % H100_ROW.replace(", 9.0,", ", 9,")),
        (H100_ROW.replace("NVIDIA H100", "NVIDIA, H100"), "line 1 '0, NVIDIA, H100 80GB HBM3, GPU-"),
        (H100_ROW.replace(", 5, 5, 16, 16", ", 5, 5, 16"), "10 values, expected 11 (index, name, uuid,"),
        (H100_ROW.replace(", 81559,", ", 81559 MiB,"), "memory.total is '81559 MiB', expected a whole number"),
        (H100_ROW.replace(", 81559,", ", [N/A],"), "memory.total is '[N/A]', expected MiB"),
        (H100_ROW.replace("0, NVIDIA", "GPU0, NVIDIA"), "index is 'GPU0', expected a whole number"),
        (H100_ROW.replace(", 590.48.01,", ", [N/A],"), "driver_version is '[N/A]'"),
        (H100_ROW.replace(", 5, 5,", ", 5, x5,"), "pcie.link.gen.current is 'x5', expected a whole number"),
        (H100_ROW + "\n" + H100_ROW, "nvidia-smi --query-gpu output: GPU indexes repeat: 0, 0"),
    ],
    ids=["capability", "comma-in-name", "missing-value", "units", "memory-na", "index", "driver", "pcie", "repeat"],
)
def test_query_errors_name_the_line(text, message):
    with pytest.raises(NvidiaSmiParseError) as caught:
        parse_gpu_query(text)
    assert message in str(caught.value)


def test_parse_error_keeps_the_line_for_callers():
    bad = H100_ROW.replace(", 9.0,", ", nine,")
    with pytest.raises(NvidiaSmiParseError) as caught:
        parse_gpu_query("\n" + bad)
    assert caught.value.line == bad
    assert caught.value.line_number == 2
    assert caught.value.reason.startswith("compute_cap is 'nine'")


def test_other_field_lists_can_be_parsed():
    fields = ("index", "name", "uuid", "pci.bus_id", "compute_cap", "memory.total", "driver_version",
              "pcie.link.gen.max", "pcie.link.gen.current", "pcie.link.width.max", "pcie.link.width.current")
    assert fields == QUERY_FIELDS
    with pytest.raises(NvidiaSmiParseError, match="11 values, expected 3"):
        parse_gpu_query(H100_ROW, fields=("index", "name", "uuid"))


# ---- versions ------------------------------------------------------------------------------

VERSION_590 = """NVIDIA-SMI version  : 590.48.01
NVML version        : 590.48
DRIVER version      : 590.48.01
CUDA Version        : 13.1
"""  # verbatim, H100 host
VERSION_610 = """NVIDIA-SMI version  : 610.57.04
NVML version        : 610.57
DRIVER version      : Deprecated, see "KMD version" instead
CUDA version        : Deprecated, see "CUDA UMD version" instead
KMD version         : 610.57.04
CUDA UMD version    : 13.3
"""  # verbatim, GeForce RTX 2080 SUPER host


@pytest.mark.parametrize(
    "text, expected",
    [
        (VERSION_590, ("590.48.01", "13.1")),
        (VERSION_610, ("610.57.04", "13.3")),
        (VERSION_590.replace("CUDA Version        : 13.1\n", ""), ("590.48.01", None)),
        (VERSION_590.replace(": 13.1", ": Not Found"), ("590.48.01", None)),
    ],
    ids=["590", "610-kmd-umd", "no-cuda-line", "cuda-not-found"],
)
def test_version(text, expected):
    assert parse_version(text) == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("ERROR: Option --version is not recognized. Please run 'nvidia-smi -h'.\n", "no 'NVIDIA-SMI version' line"),
        ("Segmentation fault\n", "expected KEY : VALUE"),
        ("", "no 'NVIDIA-SMI version' line"),
    ],
)
def test_version_errors(text, message):
    with pytest.raises(NvidiaSmiParseError, match=message):
        parse_version(text)


SUMMARY_590 = (  # verbatim, H100 host; the date line ends in spaces
    "Tue Jul 14 08:12:38 2026       \n"
    "+-----------------------------------------------------------------------------------------+\n"
    "| NVIDIA-SMI 590.48.01              Driver Version: 590.48.01      CUDA Version: 13.1     |\n"
    "+-----------------------------------------+------------------------+----------------------+\n"
)
SUMMARY_610 = "| NVIDIA-SMI 610.57.04              KMD Version: 610.57.04     CUDA UMD Version: 13.3     |\n"
SUMMARY_VGPU_HOST = "| NVIDIA-SMI 580.105.06             Driver Version: 580.105.06     CUDA Version: Not Found  |\n"
SUMMARY_331 = "| NVIDIA-SMI 331.62     Driver Version: 331.62         |                       \n"


@pytest.mark.parametrize(
    "text, expected",
    [
        (SUMMARY_590, ("590.48.01", "13.1")),
        (SUMMARY_610, ("610.57.04", "13.3")),
        (SUMMARY_VGPU_HOST, ("580.105.06", None)),
        (SUMMARY_331, ("331.62", None)),
    ],
    ids=["590", "610-kmd-umd", "vgpu-host-not-found", "331-no-cuda"],
)
def test_summary_header(text, expected):
    assert parse_summary_header(text) == expected


def test_summary_without_header_shows_the_first_line():
    with pytest.raises(NvidiaSmiParseError) as caught:
        parse_summary_header("\nNo devices were found\n")
    assert str(caught.value) == (
        "nvidia-smi output 'No devices were found': no 'NVIDIA-SMI ... Driver Version: ...' header"
    )
    with pytest.raises(NvidiaSmiParseError, match="names no driver version"):
        parse_summary_header("| NVIDIA-SMI 590.48.01     |\n")


# ---- topo -m -------------------------------------------------------------------------------

LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""
# verbatim, one H100 (590 driver)
TOPO_ONE = "\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\nGPU0\t X \t0-19\t0\t\tN/A\n" + LEGEND
# verbatim (as quoted in an issue, no escapes), 3x RTX A6000, two joined by an NVLink bridge, older columns
TOPO_BRIDGED = (
    "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n"
    "GPU0\t X \tNV4\tNODE\t0-31,64-95\t0\n"
    "GPU1\tNV4\t X \tNODE\t0-31,64-95\t0\n"
    "GPU2\tNODE\tNODE\t X \t0-31,64-95\t0\n" + LEGEND
)
# 2x A100 and two NICs: the layout of a DGX A100 quoted in NVIDIA/nccl issues, cut to two GPUs
TOPO_NICS = (
    "\t\x1b[4mGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV12\tPXB\tSYS\t48-63,176-191\t3\t\tN/A\n"
    "GPU1\tNV12\t X \tPXB\tSYS\t48-63,176-191\t3\t\tN/A\n"
    "NIC0\tPXB\tPXB\t X \tSYS\t\t\t\n"
    "NIC1\tSYS\tSYS\tSYS\t X \t\t\t\n" + LEGEND + "\nNIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_bond_0\n\n"
)


def test_strip_ansi():
    assert strip_ansi("\t\x1b[4mGPU0\tGPU1\x1b[0m") == "\tGPU0\tGPU1"


def test_topology_of_one_gpu():
    topology = parse_topology(TOPO_ONE)
    assert topology == dict(
        devices=["GPU0"],
        matrix={"GPU0": {"GPU0": "X"}},
        affinity={"GPU0": {"CPU Affinity": "0-19", "NUMA Affinity": "0", "GPU NUMA ID": "N/A"}},
        nics={},
    )


def test_topology_with_nics_and_their_legend():
    topology = parse_topology(TOPO_NICS)
    assert topology["devices"] == ["GPU0", "GPU1", "NIC0", "NIC1"]
    assert topology["matrix"]["GPU0"] == {"GPU0": "X", "GPU1": "NV12", "NIC0": "PXB", "NIC1": "SYS"}
    assert topology["matrix"]["NIC1"]["NIC0"] == "SYS"
    assert topology["affinity"]["GPU1"] == {"CPU Affinity": "48-63,176-191", "NUMA Affinity": "3", "GPU NUMA ID": "N/A"}
    assert topology["affinity"]["NIC0"] == {}
    assert topology["nics"] == {"NIC0": "mlx5_0", "NIC1": "mlx5_bond_0"}


def test_topology_of_an_older_driver_without_gpu_numa_id():
    topology = parse_topology(TOPO_BRIDGED)
    assert topology["matrix"]["GPU1"] == {"GPU0": "NV4", "GPU1": "X", "GPU2": "NODE"}
    assert topology["affinity"]["GPU2"] == {"CPU Affinity": "0-31,64-95", "NUMA Affinity": "0"}


@pytest.mark.parametrize(
    "code, kind", [("X", "self"), ("NV18", "nvlink"), ("NV4", "nvlink"), ("PIX", "pcie"), ("PXB", "pcie"),
                   ("PHB", "pcie"), ("NODE", "pcie"), ("SYS", "pcie"), ("SOC", "pcie"), ("NV", None), ("QPI", None)]
)
def test_link_class(code, kind):
    assert link_class(code) == kind


@pytest.mark.parametrize(
    "text, message",
    [
        ("        GPU0    GPU1    CPU Affinity\nGPU0     X      PHB     0-63\n",
         "expected the header row, tab-separated, starting with GPU0"),
        ("", "no header row naming GPU0"),
        (TOPO_BRIDGED.replace("GPU2\tNODE\tNODE\t X ", "GPU2\tNODE\tNODE\tNV2"), "GPU2 to GPU2 is 'NV2'"),
        (TOPO_BRIDGED.replace("GPU1\tNV4\t X \tNODE", "GPU1\tNV4\t X "), "line 3 'GPU1\\tNV4\\t X \\t0-31,64-95\\t0': "),
        (TOPO_BRIDGED.replace("GPU1\tNV4\t X \tNODE", "GPU1\tNV4\t X \tNV4"),
         "the matrix is not symmetric: GPU1-GPU2 is NV4, GPU2-GPU1 is NODE"),
        (TOPO_BRIDGED.replace("GPU2\tNODE\tNODE\t X \t0-31,64-95\t0\n", ""), "column GPU2 is out of order or has no row"),
        (TOPO_BRIDGED.replace("GPU2\tNODE\tNODE\t X \t0-31,64-95\t0\n", "GPU2\tNODE\tNODE\t X \t0-31,64-95\t0\n" * 2),
         "row GPU2 appears twice"),
        (TOPO_ONE.replace("N/A\n", "N/A\tmore\n"), "more values than the columns CPU Affinity, NUMA Affinity, GPU NUMA ID"),
    ],
    ids=["spaces-not-tabs", "empty", "self-link", "short-row", "asymmetric", "missing-row", "repeated-row", "extra-values"],
)
def test_topology_errors(text, message):
    with pytest.raises(NvidiaSmiParseError) as caught:
        parse_topology(text)
    assert message in str(caught.value)


# ---- summarise -----------------------------------------------------------------------------


def gpu(index, name="NVIDIA RTX PRO 6000 Blackwell Server Edition", capability="12.0", mib=97887):
    row = "%d, %s, GPU-%d, 00000000:%02X:00.0, %s, %d, 580.95.05, 5, 1, 16, 16" % (index, name, index, index + 1, capability, mib)
    return parse_gpu_query(row)[0]


def test_summary_of_a_partial_nvlink_host_is_pcie_but_not_pcie_only():
    gpus = [gpu(i, "NVIDIA RTX A6000", "8.6", 49140) for i in (0, 1, 2)]
    facts = summarise(gpus, "12.2", parse_topology(TOPO_BRIDGED))
    assert facts["interconnect"] == "pcie"
    assert facts["pcie_only"] is False
    assert facts["topology"]["pairs"] == [
        dict(gpus=[0, 1], link="NV4", type="nvlink", nvlinks=4),
        dict(gpus=[0, 2], link="NODE", type="pcie", nvlinks=0),
        dict(gpus=[1, 2], link="NODE", type="pcie", nvlinks=0),
    ]
    assert facts["topology"]["link_types"] == ["NODE", "NV4"]
    assert [g["cpu_affinity"] for g in facts["gpus"]] == ["0-31,64-95"] * 3
    assert [g["numa_node"] for g in facts["gpus"]] == [0, 0, 0]
    assert [g["gpu_numa_id"] for g in facts["gpus"]] == [None, None, None]
    assert facts["cuda_version"] == "12.2"
    assert facts["compute_capabilities"] == ["8.6"]


def test_summary_of_one_gpu_has_no_interconnect():
    facts = summarise([gpu(0, "NVIDIA H100 80GB HBM3", "9.0", 81559)], "13.1", parse_topology(TOPO_ONE))
    assert facts["count"] == 1
    assert facts["interconnect"] == "none"
    assert facts["pcie_only"] is True
    assert facts["topology"]["pairs"] == [] and facts["topology"]["link_types"] == []
    assert facts["gpus"][0]["cpu_affinity"] == "0-19" and facts["gpus"][0]["numa_node"] == 0
    assert facts["model"] == "NVIDIA H100 80GB HBM3"
    assert facts["memory_total_mib_min"] == 81559


def test_summary_of_nvlink_host_with_nics():
    facts = summarise([gpu(0, "NVIDIA A100-SXM4-80GB", "8.0", 81920), gpu(1, "NVIDIA A100-SXM4-80GB", "8.0", 81920)],
                      "12.4", parse_topology(TOPO_NICS))
    assert facts["interconnect"] == "nvlink" and facts["pcie_only"] is False
    assert facts["topology"]["pairs"] == [dict(gpus=[0, 1], link="NV12", type="nvlink", nvlinks=12)]
    assert facts["topology"]["nics"] == {"NIC0": "mlx5_0", "NIC1": "mlx5_bond_0"}
    assert facts["topology"]["matrix"]["GPU1"]["NIC0"] == "PXB"
    assert [g["numa_node"] for g in facts["gpus"]] == [3, 3]


def test_summary_of_mixed_models():
    gpus = [gpu(0), gpu(1, "NVIDIA GeForce RTX 5090", mib=32607), gpu(2)]
    topology = parse_topology(TOPO_BRIDGED.replace("NV4", "NODE"))
    facts = summarise(gpus, "13.0", topology)
    assert facts["models"] == ["NVIDIA RTX PRO 6000 Blackwell Server Edition", "NVIDIA GeForce RTX 5090"]
    assert facts["model"] is None
    assert facts["compute_capabilities"] == ["12.0"]
    assert facts["memory_total_mib_min"] == 32607
    assert facts["interconnect"] == "pcie" and facts["pcie_only"] is True
    assert models_by_index(facts["gpus"]) == (
        "NVIDIA RTX PRO 6000 Blackwell Server Edition (GPU 0, 2); NVIDIA GeForce RTX 5090 (GPU 1)"
    )


def test_summary_refuses_a_matrix_of_other_gpus():
    with pytest.raises(NvidiaSmiParseError) as caught:
        summarise([gpu(0), gpu(1)], "13.0", parse_topology(TOPO_ONE))
    assert str(caught.value) == "nvidia-smi topo -m output: the matrix shows GPU0 but --query-gpu listed GPU0, GPU1"
