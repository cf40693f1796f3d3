# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The hardware-under-load gate's readers and verdict, on the fixture nvidia-smi and kernel logs.

Samples come from running tests/fixtures/bin/nvidia-smi with the argument list the collection uses
(FLEET_VLLM_FAKE_GPUS picks the scenario, FLEET_VLLM_FAKE_GPUS_BUSY=1 its reading under load);
kernel logs are tests/fixtures/kernel-log/*.txt, Xid lines in NVIDIA's wording."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils._gpu_load import (
    LOAD_FIELDS,
    hardware_verdict,
    load_query_argv,
    parse_load_sample,
    reason_names,
    xid_events,
)
from ansible_collections.fleet.vllm.plugins.module_utils._nvidia_smi import NvidiaSmiParseError

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
FAKE_SMI = FIXTURES / "bin" / "nvidia-smi"
SCENARIOS = FIXTURES / "nvidia-smi"
KERNEL_LOG = FIXTURES / "kernel-log"

BUS_IDS = ["00000000:01:00.0", "00000000:21:00.0", "00000000:41:00.0", "00000000:61:00.0",
           "00000000:81:00.0", "00000000:A1:00.0", "00000000:C1:00.0", "00000000:E1:00.0"]
NOT_SEEN = "not seen under load: its link was not checked"


def smi_text(scenario, busy):
    env = dict(os.environ, FLEET_VLLM_FAKE_GPUS=scenario, FLEET_VLLM_FAKE_GPUS_BUSY="1" if busy else "0", LC_ALL="C")
    proc = subprocess.run(load_query_argv(str(FAKE_SMI)), capture_output=True, text=True, env=env, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def sample(scenario, busy=True):
    return parse_load_sample(smi_text(scenario, busy))


def kernel_log(name):
    return (KERNEL_LOG / name).read_text(encoding="utf-8")


# ---- reading a sample ------------------------------------------------------------------------


def test_load_query_argv_asks_the_real_field_names():
    argv = load_query_argv("/usr/bin/nvidia-smi")
    assert argv == ["/usr/bin/nvidia-smi", "--query-gpu=" + ",".join(LOAD_FIELDS), "--format=csv,noheader,nounits"]
    assert "clocks_event_reasons.active" in LOAD_FIELDS and "remapped_rows.pending" in LOAD_FIELDS


def test_busy_reading_of_rtx_pro_6000_parses_to_numbers():
    gpus = sample("rtx-pro-6000-x8")
    assert [g["index"] for g in gpus] == list(range(8))
    assert [g["pci_bus_id"] for g in gpus] == BUS_IDS
    first = gpus[0]
    assert first == dict(
        index=0, uuid="GPU-2c3e7876-b74a-57b3-94a4-1b4d866fd427", pci_bus_id="00000000:01:00.0",
        name="NVIDIA RTX PRO 6000 Blackwell Server Edition", utilization_gpu=96, pcie_link_gen_current=5,
        pcie_link_gen_max=5, pcie_link_width_current=16, pcie_link_width_max=16, clocks_sm=2842, clocks_max_sm=3090,
        clock_event_reasons=0, ecc_uncorrected_volatile=0, retired_pages_pending=None, remapped_rows_pending=False,
    )
    assert gpus[2]["clock_event_reasons"] == 0x4


def test_idle_reading_shows_the_link_trained_down_and_the_idle_reason():
    gpus = sample("rtx-pro-6000-x8", busy=False)
    assert {(g["utilization_gpu"], g["pcie_link_gen_current"], g["pcie_link_gen_max"], g["clocks_sm"],
             g["clock_event_reasons"]) for g in gpus} == {(0, 1, 5, 180, 0x1)}


@pytest.mark.parametrize("scenario", sorted(p.parent.name for p in SCENARIOS.glob("*/query-gpu.csv")))
def test_every_scenario_answers_the_load_query_idle_and_busy(scenario):
    idle, busy = sample(scenario, busy=False), sample(scenario, busy=True)
    assert [(g["index"], g["uuid"], g["pci_bus_id"]) for g in idle] == [(g["index"], g["uuid"], g["pci_bus_id"]) for g in busy]
    # A GPU in MIG mode has no utilization of its own ([N/A]: NVIDIA's MIG User Guide); the MIG scenario has one.
    assert all(g["utilization_gpu"] in (0, None) and g["clock_event_reasons"] == 0x1 for g in idle)
    assert sum(g["utilization_gpu"] is None for g in idle) == (1 if scenario.endswith("-mig") else 0)
    if (SCENARIOS / scenario / "query-gpu-busy.csv").exists():
        assert all(g["utilization_gpu"] >= 90 and g["clock_event_reasons"] != 0x1 for g in busy)
    else:  # no reading under load: the fixture answers as the GPUs idle
        assert busy == idle


def test_gpus_without_ecc_read_none_not_zero():
    gpus = {g["name"]: g for g in sample("mixed", busy=False)}
    geforce = gpus["NVIDIA GeForce RTX 5090"]
    assert (geforce["ecc_uncorrected_volatile"], geforce["retired_pages_pending"], geforce["remapped_rows_pending"]) == (
        None, None, None)


def _line(**values):
    """One --query-gpu line of GPU 0 under load, with some fields replaced."""
    row = dict(zip(LOAD_FIELDS, smi_text("rtx-pro-6000-x8", True).splitlines()[0].split(", ")))
    row.update(values)
    return ", ".join(row[field] for field in LOAD_FIELDS) + "\n"


@pytest.mark.parametrize("text, message", [
    ("0, GPU-1, 00000000:01:00.0, NVIDIA X, 96\n",
     "nvidia-smi --query-gpu output line 1 '0, GPU-1, 00000000:01:00.0, NVIDIA X, 96': 5 values, expected 15"),
    (_line(**{"clocks_event_reasons.active": "Active"}), "clocks_event_reasons.active is 'Active', expected a mask"),
    (_line(**{"remapped_rows.pending": "Maybe"}), "remapped_rows.pending is 'Maybe', expected Yes or No"),
    (_line(**{"utilization.gpu": "96 %"}), "utilization.gpu is '96 %', expected a whole number"),
    (_line(index="[N/A]"), "index is '[N/A]'"),
    (_line() + _line(), "GPU indexes repeat: 0, 0"),
])
def test_malformed_samples_are_refused_with_the_field(text, message):
    with pytest.raises(NvidiaSmiParseError) as caught:
        parse_load_sample(text)
    assert message in str(caught.value)


def test_not_available_values_read_as_none():
    text = _line(**{"utilization.gpu": "[N/A]", "pcie.link.gen.current": "[N/A]", "clocks.sm": "N/A",
                    "clocks_event_reasons.active": "[Not Supported]", "ecc.errors.uncorrected.volatile.total": "[N/A]",
                    "remapped_rows.pending": "[Not Supported]", "pci.bus_id": "[N/A]"})
    (gpu,) = parse_load_sample(text)
    assert [gpu[k] for k in ("utilization_gpu", "pcie_link_gen_current", "clocks_sm", "clock_event_reasons",
                             "ecc_uncorrected_volatile", "remapped_rows_pending", "pci_bus_id")] == [None] * 7
    assert gpu["pcie_link_gen_max"] == 5


# ---- the verdict -----------------------------------------------------------------------------


def test_healthy_host_under_load_has_no_failure_and_the_power_cap_is_a_note():
    verdict = hardware_verdict([sample("rtx-pro-6000-x8")] * 3, xid_events(kernel_log("healthy.txt")))
    assert verdict == dict(
        failures=[],
        notes=["GPU 2 (00000000:41:00.0) held its power limit under load (SW power cap), which lowers clocks by "
               "design: not a fault"],
        gpus_under_load=8,
        samples=3,
    )


def test_idle_readings_only_fail_nothing_and_pass_no_link():
    verdict = hardware_verdict([sample("rtx-pro-6000-x8", busy=False)] * 2, [])
    assert verdict["failures"] == [] and verdict["gpus_under_load"] == 0 and verdict["samples"] == 2
    assert verdict["notes"] == [
        "GPU %d (%s) %s, nor its clocks (its utilization peaked at 0 %% in 2 samples; under load is 50 %% or more)" % (
            index, bus_id, NOT_SEEN)
        for index, bus_id in enumerate(BUS_IDS)
    ]


def test_only_busy_samples_count_for_the_link():
    idle, busy = sample("rtx-pro-6000-x8", busy=False), sample("rtx-pro-6000-x8")
    verdict = hardware_verdict([idle, busy, idle], [])
    assert verdict["failures"] == [] and verdict["gpus_under_load"] == 8
    assert not any(NOT_SEEN in note for note in verdict["notes"])


def test_a_link_at_gen2_under_load_names_that_gpu_its_bus_and_both_links():
    verdict = hardware_verdict([sample("rtx-pro-6000-x8-gen2")] * 3, [])
    assert verdict["failures"] == [dict(
        gpu=5, bus_id="00000000:A1:00.0", check="pcie_link", observed="Gen2 x16", expected="Gen5 x16",
        message="GPU 5 (00000000:A1:00.0) runs its PCIe link at Gen2 x16 under load; its maximum is Gen5 x16",
    )]
    assert verdict["gpus_under_load"] == 8


def test_the_best_link_seen_under_load_counts():
    # The link retrains between samples: one busy sample at Gen5 shows what the slot can do.
    verdict = hardware_verdict([sample("rtx-pro-6000-x8-gen2"), sample("rtx-pro-6000-x8")], [])
    assert verdict["failures"] == []


def test_a_narrow_link_fails_too():
    text = smi_text("rtx-pro-6000-x8", True).replace("00000000:E1:00.0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 97, 5, 5, 16",
                                                     "00000000:E1:00.0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 97, 5, 5, 8")
    (failure,) = hardware_verdict([parse_load_sample(text)], [])["failures"]
    assert failure["message"] == "GPU 7 (00000000:E1:00.0) runs its PCIe link at Gen5 x8 under load; its maximum is Gen5 x16"


def test_hardware_thermal_slowdown_names_the_gpu_the_reasons_and_the_clocks():
    verdict = hardware_verdict([sample("rtx-pro-6000-x8-throttled")] * 2, [])
    assert verdict["failures"] == [dict(
        gpu=3, bus_id="00000000:61:00.0", check="clocks",
        observed="HW slowdown, HW thermal slowdown (0x0000000000000048) at SM clock 1245 MHz",
        expected="no hardware or thermal slowdown; SM clock up to 3090 MHz",
        message="GPU 3 (00000000:61:00.0) is slowed down under load by HW slowdown, HW thermal slowdown (clock event "
                "reasons 0x0000000000000048) in 2 of 2 busy samples: its SM clock 1245 MHz, its maximum 3090 MHz",
    )]


def test_uncorrected_ecc_errors_and_pending_remaps_fail_the_gpu():
    failures = hardware_verdict([sample("rtx-pro-6000-x8-ecc")], [])["failures"]
    assert [(f["gpu"], f["bus_id"], f["check"], f["observed"], f["expected"]) for f in failures] == [
        (2, "00000000:41:00.0", "ecc", "2 uncorrected ECC errors", "0"),
        (2, "00000000:41:00.0", "pages", "row remapping pending", "none pending"),
    ]
    assert failures[0]["message"].startswith("GPU 2 (00000000:41:00.0) has 2 uncorrected ECC errors since the driver loaded")


def test_the_busy_threshold_is_inclusive():
    text = smi_text("rtx-pro-6000-x8-gen2", True)
    at = parse_load_sample(text.replace("A1:00.0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 93,",
                                        "A1:00.0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 50,"))
    below = parse_load_sample(text.replace("A1:00.0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 93,",
                                           "A1:00.0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 49,"))
    assert [f["gpu"] for f in hardware_verdict([at], [])["failures"]] == [5]
    low = hardware_verdict([below], [])
    assert low["failures"] == [] and low["gpus_under_load"] == 7
    assert "GPU 5 (00000000:A1:00.0) %s, nor its clocks (its utilization peaked at 49 %% in 1 sample; " % NOT_SEEN in low["notes"][-1]


def test_not_available_values_neither_crash_nor_fail_the_host():
    mig_like = _line(**{"utilization.gpu": "[N/A]"})
    verdict = hardware_verdict([parse_load_sample(mig_like)], [])
    assert verdict["failures"] == [] and verdict["gpus_under_load"] == 0
    assert verdict["notes"] == ["GPU 0 (00000000:01:00.0) %s, nor its clocks (nvidia-smi reported no utilization in 1 "
                                "sample; under load is 50 %% or more)" % NOT_SEEN]

    unreported = _line(**{"pcie.link.gen.current": "[N/A]", "pcie.link.width.max": "[Not Supported]",
                          "clocks_event_reasons.active": "[Not Supported]", "ecc.errors.uncorrected.volatile.total": "[N/A]",
                          "remapped_rows.pending": "[N/A]"})
    verdict = hardware_verdict([parse_load_sample(unreported)], [])
    assert verdict["failures"] == [] and verdict["gpus_under_load"] == 1
    assert verdict["notes"] == [
        "GPU 0 (00000000:01:00.0): nvidia-smi did not report the link's generation or maximum width under load; that part "
        "was not checked",
        "GPU 0 (00000000:01:00.0): nvidia-smi did not report its clock event reasons under load; its clocks were not checked",
    ]


def test_a_gpu_missing_from_a_sample_and_no_sample_at_all_are_notes():
    full, partial = sample("rtx-pro-6000-x8"), sample("rtx-pro-6000-x8")[:7]
    verdict = hardware_verdict([full, partial, full], [])
    assert "GPU 7 (00000000:E1:00.0) answered in 2 of 3 samples" in verdict["notes"]
    assert hardware_verdict([], []) == dict(
        failures=[], notes=["no sample of nvidia-smi was taken: no GPU was checked under load"], gpus_under_load=0, samples=0)


# ---- the kernel log --------------------------------------------------------------------------


def test_a_healthy_kernel_log_has_no_xid():
    assert xid_events(kernel_log("healthy.txt")) == []


def test_xid_79_fails_the_gpu_at_that_bus_by_its_index():
    events = xid_events(kernel_log("xid-79.txt"))
    line = ("2026-11-30T11:42:53+00:00 fleet-gpu-01 kernel: NVRM: Xid (PCI:0000:c1:00): 79, pid='<unknown>', "
            "name=<unknown>, GPU has fallen off the bus.")
    assert events == [dict(bus_id="00000000:C1:00.0", xid=79, line=line)]
    verdict = hardware_verdict([sample("rtx-pro-6000-x8")], events)
    assert verdict["failures"] == [dict(
        gpu=6, bus_id="00000000:C1:00.0", check="xid", observed="Xid 79 (GPU has fallen off the bus)", expected="no Xid",
        message="GPU 6 (00000000:C1:00.0) logged Xid 79 (GPU has fallen off the bus) in the kernel log: " + line,
    )]


def test_xid_48_and_63_are_counted_per_gpu_and_code():
    failures = hardware_verdict([sample("rtx-pro-6000-x8-ecc")], xid_events(kernel_log("xid-48.txt")))["failures"]
    assert [(f["gpu"], f["check"], f["observed"]) for f in failures] == [
        (2, "ecc", "2 uncorrected ECC errors"),
        (2, "pages", "row remapping pending"),
        (2, "xid", "Xid 48 (double-bit ECC error)"),
        (2, "xid", "Xid 63 (ECC page retirement or row remapping recording event)"),
    ]
    assert failures[2]["message"].startswith("GPU 2 (00000000:41:00.0) logged Xid 48 (double-bit ECC error) in the kernel log 2 times: ")
    assert "An uncorrectable double bit error (DBE) has been detected on GPU" in failures[2]["message"]


def test_an_xid_of_a_gpu_no_sample_listed_still_fails():
    (failure,) = hardware_verdict([sample("rtx-pro-6000-x8")], xid_events(
        "NVRM: Xid (PCI:0000:d1:00): 119, pid=430, name=nv_queue, Timeout waiting for RPC from GSP!\n"))["failures"]
    assert (failure["gpu"], failure["bus_id"], failure["observed"]) == (None, "00000000:D1:00.0", "Xid 119 (GSP RPC timeout)")
    assert failure["message"].startswith("a GPU at 00000000:D1:00.0 that no sample of nvidia-smi listed logged Xid 119")


@pytest.mark.parametrize("line, bus_id, xid", [
    ("[155044.078590] NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.", "00000000:06:00.0", 79),
    ("NVRM: Xid (PCI:0004:01:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.", "00000004:01:00.0", 79),
    ("Feb 01 14:25:31 archbox kernel: NVRM: Xid (PCI:0000:01:00): 38, pid=1659,", "00000000:01:00.0", 38),
    ("[...] NVRM: Xid (0000:03:00): 14, Channel 00000001", "00000000:03:00.0", 14),
    ("NVRM: Xid (PCI:0000:3b:00.0): 48, pid=1234", "00000000:3B:00.0", 48),
    ("NVRM: Xid (PCI:0000:5f:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 02", "00000000:5F:00.0", 145),
    ("NVRM: Xid (PCI:0000:c1:00 GPU-I:01 GPU-CI:00): 94, pid=4242, name=python3, Contained: SM (0x1).",
     "00000000:C1:00.0", 94),
    ("NVRM: Xid (PCI:0000:c1:00 GPU-I:02): 31, pid=4242, name=python3, Ch 00000010", "00000000:C1:00.0", 31),
])
def test_xid_line_formats_of_older_and_newer_drivers(line, bus_id, xid):
    assert xid_events(line) == [dict(bus_id=bus_id, xid=xid, line=line)]


def test_lines_that_only_mention_a_gpu_are_not_xids():
    text = ("NVRM: GPU 0000:c1:00.0: GPU has fallen off the bus.\n"
            "NVRM: GPU at PCI:0000:c1:00: GPU-fb4ce638-25b5-5192-ac85-30c12e36d414\n"
            "kernel: nvidia 0000:c1:00.0: Xid lookalike without NVRM\n")
    assert xid_events(text) == []


def test_reason_names():
    assert reason_names(0x48) == ["HW slowdown", "HW thermal slowdown"]
    assert reason_names(0x1) == ["idle"]
    assert reason_names(0x604) == ["SW power cap", "0x600"]


# ---- the fixture's busy switch ---------------------------------------------------------------


def _fixture_module():
    loader = importlib.machinery.SourceFileLoader("fake_nvidia_smi", str(FAKE_SMI))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def test_the_fixture_is_busy_by_environment_or_by_file(tmp_path, monkeypatch):
    fixture = _fixture_module()
    monkeypatch.setattr(fixture, "BUSY_FILE", str(tmp_path / "gpus-busy"))
    monkeypatch.delenv("FLEET_VLLM_FAKE_GPUS_BUSY", raising=False)
    assert fixture.gpus_busy() is False
    (tmp_path / "gpus-busy").write_text("")
    assert fixture.gpus_busy() is True
    monkeypatch.setenv("FLEET_VLLM_FAKE_GPUS_BUSY", "0")
    assert fixture.gpus_busy() is False
    monkeypatch.setenv("FLEET_VLLM_FAKE_GPUS_BUSY", "1")
    (tmp_path / "gpus-busy").unlink()
    assert fixture.gpus_busy() is True
    assert fixture.BUSY_FILE != "/run/fleet-vllm-test/gpus-busy" and _fixture_module().BUSY_FILE == "/run/fleet-vllm-test/gpus-busy"
