"""NCCL's peer-to-peer over PCIe as fleet.vllm.preflight checks it (module_utils/_nccl_p2p.py),
in-process: how NCCL reads NCCL_P2P_DISABLE and NCCL_P2P_LEVEL, and what preflight says of them on
a host whose GPUs talk over PCIe only. tests/unit/plugins/modules/test_preflight.py runs the module
on fake hosts with the same checks."""

from __future__ import annotations

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils._nccl_p2p import c_strtol, nccl_findings, nccl_p2p_level

OPTION = "vllm_nccl_env"
PCIE_X8 = {"count": 8, "pcie_only": True}
IOMMU_ON = dict(enabled=True, devices=["dmar0", "dmar1"], mode="translated")
IOMMU_OFF = dict(enabled=False, devices=[], mode=None)
ACS_OFF = dict(state="disabled", redirecting=[], unreadable=[])
HANG = ("NCCL peer-to-peer over PCIe with %s is known to hang on RTX PRO 6000 and similar GPUs (vLLM #33041, "
        "NVIDIA/nccl #1999, #2079): turn IOMMU and ACS off (IOMMU/VT-d/AMD-Vi in the BIOS, or intel_iommu=off / "
        "amd_iommu=off on the kernel command line; ACS in the BIOS or with setpci ECAP_ACS+0x6.w=0000), or set "
        "NCCL_P2P_DISABLE=1 in vllm_nccl_env")
ACROSS_SOCKETS = ("NCCL_P2P_LEVEL=%s in vllm_nccl_env lets NCCL use peer-to-peer across CPU sockets (%d SYS pairs) "
                  "with IOMMU on, which can deadlock: remove it or use NCCL_P2P_LEVEL=PHB (peer-to-peer within a "
                  "socket), or turn IOMMU off")
UNKNOWN_ACS = ("the ACS state of PCI bridge %s is unknown: reading past the first 64 bytes of PCI configuration space "
               "needs root; run the preflight with become: true")


@pytest.mark.parametrize("text, value", [
    ("1", 1), ("  \t\n42abc", 42), ("+7", 7), ("-1", -1), ("0x1F", 31), ("0XfF", 255), ("0x", 0), ("0xg", 0),
    ("010", 8), ("08", 0), ("0", 0), ("", 0), ("abc", 0), ("- 1", 0), ("9" * 20, int("9" * 20)),
])
def test_c_strtol_reads_as_c_does(text, value):
    assert c_strtol(text) == value


@pytest.mark.parametrize("env, level", [
    # old-style numbers, src/graph/paths.cc levelsOldToNew; above 5 counts as 5
    ({"NCCL_P2P_LEVEL": "0"}, "LOC"), ({"NCCL_P2P_LEVEL": "1"}, "PIX"), ({"NCCL_P2P_LEVEL": "2"}, "PXB"),
    ({"NCCL_P2P_LEVEL": "3"}, "PHB"), ({"NCCL_P2P_LEVEL": "4"}, "SYS"), ({"NCCL_P2P_LEVEL": "5"}, "SYS"),
    ({"NCCL_P2P_LEVEL": "9"}, "SYS"), ({"NCCL_P2P_LEVEL": "42"}, "SYS"),
    # strtol(str, NULL, 0): hex and octal prefixes, trailing text ignored
    ({"NCCL_P2P_LEVEL": "0x3"}, "PHB"), ({"NCCL_P2P_LEVEL": "010"}, "SYS"), ({"NCCL_P2P_LEVEL": "2abc"}, "PXB"),
    # names, compared case-sensitively; NVL has no number
    ({"NCCL_P2P_LEVEL": "NVL"}, "NVL"), ({"NCCL_P2P_LEVEL": "PXN"}, "PXN"), ({"NCCL_P2P_LEVEL": "SYS"}, "SYS"),
    ({"NCCL_P2P_LEVEL": "sys"}, None), ({"NCCL_P2P_LEVEL": "NET"}, None), ({"NCCL_P2P_LEVEL": ""}, None), ({}, None),
    # NCCL_P2P_DISABLE: strtol == 1 wins over any level
    ({"NCCL_P2P_DISABLE": "1", "NCCL_P2P_LEVEL": "SYS"}, "LOC"), ({"NCCL_P2P_DISABLE": " 1"}, "LOC"),
    ({"NCCL_P2P_DISABLE": "0x1"}, "LOC"), ({"NCCL_P2P_DISABLE": "0", "NCCL_P2P_LEVEL": "4"}, "SYS"),
    ({"NCCL_P2P_DISABLE": "2"}, None), ({"NCCL_P2P_DISABLE": "yes"}, None), ({"NCCL_P2P_DISABLE": "-1"}, None),
])
def test_p2p_level_is_read_as_nccl_reads_it(env, level):
    assert nccl_p2p_level(env)[0] == level


def findings(env, gpu_info=None, iommu=None, acs=None, sys_pairs=16):
    return nccl_findings(env, OPTION, PCIE_X8 if gpu_info is None else gpu_info, iommu or IOMMU_OFF, acs or ACS_OFF, sys_pairs)


def test_a_level_nccl_ignores_is_a_problem_on_any_host():
    measured, problems, warnings = findings({"NCCL_P2P_LEVEL": "sys", "NCCL_PROTO": None}, gpu_info={"count": 1})
    assert measured == dict(env={"NCCL_P2P_LEVEL": "sys", "NCCL_PROTO": ""}, p2p_disabled=False, p2p_level=None)
    assert problems == [
        "NCCL_P2P_LEVEL=sys in vllm_nccl_env is not a value NCCL reads: it takes a path type by its exact upper-case name "
        "(LOC, NVL, NVB, C2C, PIX, PXB, P2C, PXN, PHB, SYS) or a number (0=LOC, 1=PIX, 2=PXB, 3=PHB, 4 and above=SYS), "
        "and ignores anything else, choosing its own level; write one of those, or remove the key"]
    assert warnings == []


def test_no_settings_no_findings():
    assert findings(None) == (dict(env={}, p2p_disabled=False, p2p_level=None), [], [])
    assert findings({}, gpu_info={"count": 2, "pcie_only": False}, iommu=IOMMU_ON) == (
        dict(env={}, p2p_disabled=False, p2p_level=None), [], [])


def test_two_gpus_over_pcie_are_enough_for_the_hang():
    assert findings({}, gpu_info={"count": 2, "pcie_only": True}, iommu=IOMMU_ON)[2] == [HANG % "IOMMU on (dmar0, dmar1, translated)"]


def test_a_level_that_starts_with_neither_a_name_nor_a_digit_is_ignored():
    assert nccl_p2p_level({"NCCL_P2P_LEVEL": "X"}) == (None, "X")


@pytest.mark.parametrize("gpu_info", [{"count": 1, "pcie_only": True}, {"count": None, "pcie_only": True},
                                      {"count": 8, "pcie_only": False}, {"count": 8}])
def test_the_hang_needs_two_gpus_over_pcie(gpu_info):
    acs = dict(state="unknown", redirecting=["0000:00:01.1"], unreadable=["0000:00:01.1"])
    assert findings({"NCCL_P2P_LEVEL": "SYS"}, gpu_info=gpu_info, iommu=IOMMU_ON, acs=acs)[2] == []


def test_iommu_and_acs_on_warn_of_the_known_hang():
    acs = dict(state="enabled", redirecting=["0000:00:01.1", "0000:80:01.1"], unreadable=[])
    dummy, problems, warnings = findings({}, iommu=IOMMU_ON, acs=acs)
    assert problems == []
    assert warnings == [HANG % "IOMMU on (dmar0, dmar1, translated) and ACS redirecting on PCI bridge 0000:00:01.1, 0000:80:01.1"]
    assert findings({}, acs=acs)[2] == [HANG % "ACS redirecting on PCI bridge 0000:00:01.1, 0000:80:01.1"]
    assert findings({}, iommu=dict(IOMMU_ON, devices=["ivhd0"], mode="passthrough"))[2] == [HANG % "IOMMU on (ivhd0, passthrough)"]


@pytest.mark.parametrize("env", [{"NCCL_P2P_DISABLE": "1"}, {"NCCL_P2P_DISABLE": "0x1", "NCCL_P2P_LEVEL": "SYS"}])
def test_p2p_disabled_is_the_fix(env):
    acs = dict(state="unknown", redirecting=["0000:00:01.1"], unreadable=["0000:80:01.1"])
    measured, problems, warnings = findings(env, iommu=IOMMU_ON, acs=acs)
    assert (measured["p2p_disabled"], measured["p2p_level"], problems, warnings) == (True, "LOC", [], [])


@pytest.mark.parametrize("value, shown", [("SYS", "SYS"), ("4", "4 (SYS)"), ("0x5", "0x5 (SYS)")])
def test_p2p_across_sockets_with_iommu_on_can_deadlock(value, shown):
    dummy, problems, warnings = findings({"NCCL_P2P_LEVEL": value}, iommu=IOMMU_ON, sys_pairs=3)
    assert problems == []
    assert warnings == [HANG % "IOMMU on (dmar0, dmar1, translated)", ACROSS_SOCKETS % (shown, 3)]


@pytest.mark.parametrize("env, iommu, sys_pairs", [
    ({"NCCL_P2P_LEVEL": "PHB"}, IOMMU_ON, 16), ({"NCCL_P2P_LEVEL": "SYS"}, IOMMU_OFF, 16),
    ({"NCCL_P2P_LEVEL": "SYS"}, IOMMU_ON, 0), ({}, IOMMU_ON, 16),
])
def test_no_deadlock_without_all_its_conditions(env, iommu, sys_pairs):
    warnings = findings(env, iommu=iommu, sys_pairs=sys_pairs)[2]
    assert not any("across CPU sockets" in w for w in warnings), warnings


def test_an_unknown_acs_state_says_root_is_needed():
    acs = dict(state="unknown", redirecting=[], unreadable=["0000:00:01.1", "0000:80:01.1"])
    assert findings({}, acs=acs)[2] == [UNKNOWN_ACS % "0000:00:01.1, 0000:80:01.1"]
