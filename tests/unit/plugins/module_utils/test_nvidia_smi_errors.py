"""What the nvidia-smi parsers say when the output is not what they expect, and the whole facts.

gpu_info fails with the error's text, and callers read its ``what`` (which command's output),
``reason``, ``line`` and ``line_number``: each case here compares all of them, so that an
operator is pointed at the right command, line and value. test_nvidia_smi.py covers the formats.
"""

from __future__ import annotations

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils._nvidia_smi import (
    NvidiaSmiParseError,
    parse_gpu_query,
    parse_summary_header,
    parse_topology,
    parse_version,
    summarise,
)

QUERY = "nvidia-smi --query-gpu output"
TOPO = "nvidia-smi topo -m output"
FIELDS = ("index, name, uuid, pci.bus_id, compute_cap, memory.total, driver_version, pcie.link.gen.max, "
          "pcie.link.gen.current, pcie.link.width.max, pcie.link.width.current")
ROW = "3, NVIDIA RTX PRO 6000 Blackwell Server Edition, GPU-0856f067, 00000000:61:00.0, 12.0, 97887, 580.95.05, 5, 1, 16, 8"


def error_of(parse, text):
    with pytest.raises(NvidiaSmiParseError) as caught:
        parse(text)
    error = caught.value
    return error.what, error.reason, error.line, error.line_number, str(error)


def bad_row(old, new):
    row = ROW.replace(old, new, 1)
    assert row != ROW
    return row


@pytest.mark.parametrize("row, reason", [
    (bad_row(", 8", ""), "10 values, expected 11 (%s)" % FIELDS),
    (bad_row("3, ", "GPU3, "), "index is 'GPU3', expected a whole number"),
    (bad_row("3, ", "[N/A], "), "index is '[N/A]'"),
    (bad_row("NVIDIA RTX PRO 6000 Blackwell Server Edition", "[Unknown Error]"), "name is '[Unknown Error]'"),
    (bad_row("12.0", "12"), "compute_cap is '12', expected MAJOR.MINOR such as 12.0"),
    (bad_row("97887", "97887 MiB"), "memory.total is '97887 MiB', expected a whole number"),
    (bad_row("97887", "N/A"), "memory.total is 'N/A', expected MiB"),
    (bad_row("580.95.05", "[N/A]"), "driver_version is '[N/A]'"),
    (bad_row(", 5, 1,", ", x5, 1,"), "pcie.link.gen.max is 'x5', expected a whole number"),
    (bad_row(", 5, 1,", ", 5, x1,"), "pcie.link.gen.current is 'x1', expected a whole number"),
    (bad_row(", 16, 8", ", x16, 8"), "pcie.link.width.max is 'x16', expected a whole number"),
    (bad_row(", 16, 8", ", 16, x8"), "pcie.link.width.current is 'x8', expected a whole number"),
], ids=["count", "index", "index-na", "name", "capability", "units", "memory-na", "driver", "gen-max", "gen-current",
        "width-max", "width-current"])
def test_query_errors_in_full(row, reason):
    """The bad row is the second line of the output (after a blank one): its number is 2."""
    assert error_of(parse_gpu_query, "\n" + row + "\n") == (
        QUERY, reason, row, 2, "%s line 2 %r: %s" % (QUERY, row, reason))


def test_repeated_indexes_name_no_line():
    assert error_of(parse_gpu_query, ROW + "\n" + ROW) == (
        QUERY, "GPU indexes repeat: 3, 3", "", None, "nvidia-smi --query-gpu output: GPU indexes repeat: 3, 3")


def test_a_row_in_full_with_values_the_gpu_does_not_have():
    row = "0, NVIDIA L40S, [N/A], [N/A], 8.9, 46068, 595.80, [N/A], 4, [N/A], 16"
    assert parse_gpu_query(row) == [dict(
        index=0, name="NVIDIA L40S", uuid=None, pci_bus_id=None, compute_capability="8.9", compute_capability_major=8,
        compute_capability_minor=9, memory_total_mib=46068, driver_version="595.80", pcie_link_gen_max=None,
        pcie_link_gen_current=4, pcie_link_width_max=None, pcie_link_width_current=16)]


# ---- versions ------------------------------------------------------------------------------

VERSION = "nvidia-smi --version output"


@pytest.mark.parametrize("text, expected", [
    ("Segmentation fault\n", (VERSION, "expected KEY : VALUE", "Segmentation fault", None,
                              "nvidia-smi --version output 'Segmentation fault': expected KEY : VALUE")),
    ("\n  NVML version : 590.48\n", (
        VERSION, "no 'NVIDIA-SMI version' line", "NVML version : 590.48", None,
        "nvidia-smi --version output 'NVML version : 590.48': no 'NVIDIA-SMI version' line")),
    ("", (VERSION, "no 'NVIDIA-SMI version' line", "", None, "nvidia-smi --version output: no 'NVIDIA-SMI version' line")),
], ids=["not-key-value", "no-smi-line", "empty"])
def test_version_errors_in_full(text, expected):
    assert error_of(parse_version, text) == expected


def test_version_lines_after_a_blank_line_are_read():
    assert parse_version("\nNVIDIA-SMI version  : 590.48.01\n\nDRIVER version      : 590.48.01\nCUDA Version : 13.1\n") == (
        "590.48.01", "13.1")


def test_version_without_driver_or_cuda_values():
    text = "NVIDIA-SMI version : 610.57.04\nDRIVER version : Deprecated, see \"KMD version\" instead\n"
    assert parse_version(text) == (None, None)


@pytest.mark.parametrize("text, expected", [
    ("| NVIDIA-SMI 590.48.01     |\n", ("nvidia-smi output", "the NVIDIA-SMI header names no driver version",
                                        "| NVIDIA-SMI 590.48.01     |", None,
                                        "nvidia-smi output '| NVIDIA-SMI 590.48.01     |': the NVIDIA-SMI header names no "
                                        "driver version")),
    ("", ("nvidia-smi output", "no 'NVIDIA-SMI ... Driver Version: ...' header", "", None,
          "nvidia-smi output: no 'NVIDIA-SMI ... Driver Version: ...' header")),
], ids=["no-driver", "empty"])
def test_summary_header_errors_in_full(text, expected):
    assert error_of(parse_summary_header, text) == expected


# ---- topo -m -------------------------------------------------------------------------------

HEADER = "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity"
ROWS = ["GPU0\t X \tNV4\tNODE\t0-31\t0", "GPU1\tNV4\t X \tNODE\t0-31\t0", "GPU2\tNODE\tNODE\t X \t32-63\t1"]


def topo(rows=None, header=HEADER, before=""):
    return before + header + "\n" + "\n".join(ROWS if rows is None else rows) + "\n\nLegend:\n\n  X    = Self\n"


def row_error(rows, number, reason):
    line = rows[number - 2]
    return (TOPO, reason, line, number, "%s line %d %r: %s" % (TOPO, number, line, reason))


@pytest.mark.parametrize("rows, number, reason", [
    (ROWS + ["GPU3\tNODE\tNODE\tNODE\t32-63\t1"], 5, "row GPU3 is not a column of the header"),
    (ROWS[:1] + [ROWS[0]] + ROWS[1:], 3, "row GPU0 appears twice"),
    ([ROWS[0], "GPU1\tNV4\t X ", ROWS[2]], 3, "2 link cells, expected 3"),
    ([ROWS[0], "GPU1\tNV4\t X \tQPI\t0-31\t0", ROWS[2]], 3, "unknown link type 'QPI' between GPU1 and GPU2"),
    ([ROWS[0], "GPU1\tNV4\tPIX\tNODE\t0-31\t0", ROWS[2]], 3, "GPU1 to GPU1 is 'PIX'"),
    ([ROWS[0], "GPU1\tNV4\t X \tNODE\t0-31\t0\t7", ROWS[2]], 3, "more values than the columns CPU Affinity, NUMA Affinity"),
], ids=["unknown-row", "repeated-row", "short-row", "unknown-link", "self-link", "extra-values"])
def test_topology_row_errors_in_full(rows, number, reason):
    assert error_of(parse_topology, topo(rows)) == row_error(rows, number, reason)


def test_values_after_a_matrix_without_affinity_columns():
    rows = ["GPU0\t X \tPIX", "GPU1\tPIX\t X \t0-31"]
    assert error_of(parse_topology, topo(rows, "\tGPU0\tGPU1")) == row_error(rows, 3, "values after the matrix")


def test_topology_header_errors_in_full():
    assert error_of(parse_topology, "Failed to initialize NVML\n" + topo()) == (
        TOPO, "expected the header row, tab-separated, starting with GPU0", "Failed to initialize NVML", 1,
        "nvidia-smi topo -m output line 1 'Failed to initialize NVML': expected the header row, tab-separated, starting "
        "with GPU0")
    no_header = (TOPO, "no header row naming GPU0", "", None, "nvidia-smi topo -m output: no header row naming GPU0")
    assert error_of(parse_topology, "\n\n") == no_header
    assert error_of(parse_topology, "") == no_header
    header = "\tGPU0\tGPU1\tGPU2\tCPU Affinity"
    rows = [ROWS[0], ROWS[2]]
    assert error_of(parse_topology, topo(rows, header, "\n")) == (
        TOPO, "column GPU1 is out of order or has no row", header, 2,
        "%s line 2 %r: column GPU1 is out of order or has no row" % (TOPO, header))


def test_asymmetric_matrix_in_full():
    rows = [ROWS[0], ROWS[1].replace("NODE", "PXB"), ROWS[2]]
    assert error_of(parse_topology, topo(rows)) == (
        TOPO, "the matrix is not symmetric: GPU1-GPU2 is PXB, GPU2-GPU1 is NODE", "", None,
        "nvidia-smi topo -m output: the matrix is not symmetric: GPU1-GPU2 is PXB, GPU2-GPU1 is NODE")


def test_a_header_without_the_leading_tab_is_read():
    assert parse_topology(topo(header=HEADER.lstrip("\t")))["devices"] == ["GPU0", "GPU1", "GPU2"]


def test_the_nic_legend_is_read_after_the_matrix():
    text = "".join(["\tGPU0\tNIC0\tCPU Affinity\n", "GPU0\t X \tPHB\t0-7\n", "NIC0\tPHB\t X \t\n",
                    "\nLegend:\n\n  X    = Self\n", "\nNIC Legend:\n\n  NIC0: mlx5_0\n"])
    assert parse_topology(text) == dict(
        devices=["GPU0", "NIC0"], matrix={"GPU0": {"GPU0": "X", "NIC0": "PHB"}, "NIC0": {"GPU0": "PHB", "NIC0": "X"}},
        affinity={"GPU0": {"CPU Affinity": "0-7"}, "NIC0": {}}, nics={"NIC0": "mlx5_0"})


# ---- summarise -----------------------------------------------------------------------------


def test_summary_in_full():
    gpus = parse_gpu_query("0, NVIDIA RTX PRO 6000 Blackwell Server Edition, GPU-a, 00000000:01:00.0, 12.0, 97887, 580.95.05, 5, 5, 16, 16\n"
                           "1, NVIDIA RTX PRO 6000 Blackwell Server Edition, GPU-b, 00000000:02:00.0, 12.0, 97000, 580.95.05, 5, 5, 16, 16\n")
    topology = parse_topology("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
                              "GPU0\t X \tSYS\t0-31\t0\t2\n"
                              "GPU1\tSYS\t X \tN/A\tN/A\tN/A\n")
    first, second = gpus
    assert summarise(gpus, "13.0", topology) == dict(
        count=2,
        gpus=[dict(first, cpu_affinity="0-31", numa_node=0, gpu_numa_id=2),
              dict(second, cpu_affinity=None, numa_node=None, gpu_numa_id=None)],
        models=["NVIDIA RTX PRO 6000 Blackwell Server Edition"],
        model="NVIDIA RTX PRO 6000 Blackwell Server Edition",
        compute_capabilities=["12.0"],
        memory_total_mib_min=97000,
        driver_version="580.95.05",
        cuda_version="13.0",
        interconnect="pcie",
        pcie_only=True,
        topology=dict(pairs=[dict(gpus=[0, 1], link="SYS", type="pcie", nvlinks=0)], link_types=["SYS"],
                      matrix=topology["matrix"], nics={}),
    )


def test_summary_of_no_gpu():
    with pytest.raises(NvidiaSmiParseError) as caught:
        summarise(parse_gpu_query(ROW), None, dict(devices=["NIC0"], matrix={}, affinity={}, nics={}))
    assert str(caught.value) == "nvidia-smi topo -m output: the matrix shows no GPU but --query-gpu listed GPU3"
    assert summarise([], None, dict(devices=[], matrix={}, affinity={}, nics={})) == dict(
        count=0, gpus=[], models=[], model=None, compute_capabilities=[], memory_total_mib_min=None, driver_version=None,
        cuda_version=None, interconnect="none", pcie_only=True,
        topology=dict(pairs=[], link_types=[], matrix={}, nics={}))


def test_summary_refuses_other_gpus_in_full():
    gpus = parse_gpu_query(ROW)
    topology = parse_topology(topo())
    with pytest.raises(NvidiaSmiParseError) as caught:
        summarise(gpus, "13.0", topology)
    assert (caught.value.what, caught.value.reason) == (
        TOPO, "the matrix shows GPU0, GPU1, GPU2 but --query-gpu listed GPU3")
