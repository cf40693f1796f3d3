# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NCCL's peer-to-peer between GPUs over PCIe, as fleet.vllm.preflight checks it.

How NCCL reads NCCL_P2P_DISABLE and NCCL_P2P_LEVEL, and what it risks on a host whose GPUs talk
over PCIe only: a known hang with the IOMMU on or ACS redirecting on the bridges above the GPUs,
a deadlock across CPU sockets with the IOMMU on.

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

import re

# How NCCL reads NCCL_P2P_LEVEL (ncclGetLevel in src/graph/paths.cc, NCCL master 5067397c of 2026-06-11):
# the name of a path type up to SYS, compared case-sensitively (topoPathTypeStr in src/graph/topo.cc), or,
# when the value starts with a digit, an old-style number read with strtol(value, NULL, 0) through
# levelsOldToNew (0=LOC, 1=PIX, 2=PXB, 3=PHB, 4=SYS, 5=SYS, larger numbers count as 5; NVL has no number).
# Anything else is ignored and NCCL picks its own level. NCCL_P2P_DISABLE set to a number equal to 1
# (strtol) means LOC and wins over NCCL_P2P_LEVEL.
NCCL_P2P_LEVEL_NAMES = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")
NCCL_P2P_LEVEL_NUMBERS = ("LOC", "PIX", "PXB", "PHB", "SYS", "SYS")
_C_LONG = re.compile(r"^[ \t\n\v\f\r]*([+-]?)(0[xX](?=[0-9a-fA-F])[0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")


def c_strtol(text):
    """What C's strtol(text, NULL, 0) returns (leading white space, a sign, 0x for hex, 0 for octal,
    digits up to the first that does not fit), as NCCL reads its numeric variables; 0 when nothing parses."""
    match = _C_LONG.match(text)
    if not match:
        return 0
    sign, digits = match.groups()
    value = int(digits, 16) if digits[:2].lower() == "0x" else int(digits, 8) if digits.startswith("0") else int(digits)
    return -value if sign == "-" else value


def nccl_p2p_level(env):
    """(level, ignored) as NCCL reads NCCL_P2P_DISABLE / NCCL_P2P_LEVEL from ``env`` (strings).

    ``level`` is the path type NCCL uses as the P2P limit (None when unset: NCCL's own choice);
    ``ignored`` is an NCCL_P2P_LEVEL value NCCL does not understand and ignores, else None.
    """
    disable = env.get("NCCL_P2P_DISABLE")
    if disable is not None and c_strtol(disable) == 1:
        return "LOC", None
    value = env.get("NCCL_P2P_LEVEL")
    if value is None or value == "":
        return None, None
    if value in NCCL_P2P_LEVEL_NAMES:
        return value, None
    if value[0] in "0123456789":
        number = c_strtol(value)
        return NCCL_P2P_LEVEL_NUMBERS[min(number, len(NCCL_P2P_LEVEL_NUMBERS) - 1)], None
    return None, value


def nccl_findings(nccl_env, option, gpu_info, iommu, acs, sys_pairs):
    """(measured, problems, warnings): how NCCL reads the settings ``nccl_env`` (the option named
    ``option`` in the messages), and what they risk on this host - gpu_info's, with the IOMMU and
    ACS state module_utils/_pci_sysfs.py read and the number of GPU pairs across CPU sockets."""
    env = dict((str(k), "" if v is None else str(v)) for k, v in (nccl_env or {}).items())
    level, ignored = nccl_p2p_level(env)
    disabled = level == "LOC"
    measured = dict(env=env, p2p_disabled=disabled, p2p_level=level)
    problems, warnings = [], []
    if ignored is not None:
        problems.append(
            "NCCL_P2P_LEVEL=%s in %s is not a value NCCL reads: it takes a path type by its exact upper-case "
            "name (%s) or a number (0=LOC, 1=PIX, 2=PXB, 3=PHB, 4 and above=SYS), and ignores anything else, "
            "choosing its own level; write one of those, or remove the key"
            % (ignored, option, ", ".join(NCCL_P2P_LEVEL_NAMES)))
    shown = env.get("NCCL_P2P_LEVEL") if env.get("NCCL_P2P_LEVEL") == level else "%s (%s)" % (
        env.get("NCCL_P2P_LEVEL"), level)

    if not gpu_info.get("pcie_only") or (gpu_info.get("count") or 0) < 2:
        return measured, problems, warnings
    causes = []
    if iommu["enabled"]:
        causes.append("IOMMU on (%s, %s)" % (", ".join(iommu["devices"]), iommu["mode"]))
    if acs["redirecting"]:
        causes.append("ACS redirecting on PCI bridge %s" % ", ".join(acs["redirecting"]))
    if causes and not disabled:
        warnings.append(
            "NCCL peer-to-peer over PCIe with %s is known to hang on RTX PRO 6000 and similar GPUs (vLLM #33041, "
            "NVIDIA/nccl #1999, #2079): turn IOMMU and ACS off (IOMMU/VT-d/AMD-Vi in the BIOS, or intel_iommu=off / "
            "amd_iommu=off on the kernel command line; ACS in the BIOS or with setpci ECAP_ACS+0x6.w=0000), or set "
            "NCCL_P2P_DISABLE=1 in %s" % (" and ".join(causes), option))
    if level == "SYS" and sys_pairs and iommu["enabled"]:
        warnings.append(
            "NCCL_P2P_LEVEL=%s in %s lets NCCL use peer-to-peer across CPU sockets (%d SYS pairs) with IOMMU on, "
            "which can deadlock: remove it or use NCCL_P2P_LEVEL=PHB (peer-to-peer within a socket), or turn "
            "IOMMU off" % (shown, option, sys_pairs))
    if acs["state"] == "unknown" and not disabled:
        warnings.append(
            "the ACS state of PCI bridge %s is unknown: reading past the first 64 bytes of PCI configuration "
            "space needs root; run the preflight with become: true" % ", ".join(acs["unreadable"]))
    return measured, problems, warnings
