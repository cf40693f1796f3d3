# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What fleet.vllm.preflight reads of a host's PCI devices, under a sysfs (and procfs) root.

The sysfs name of each GPU, the IOMMU state (its units, the kernel command line, the type of the
GPUs' IOMMU groups), and the ACS control register of the PCI bridges above the GPUs, read from
their PCI configuration space. These functions only read and describe; preflight judges what
they found (module_utils/_nccl_p2p.py says when it hangs NCCL).

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

import errno
import os
import re
import struct

from ansible.module_utils.common.text.converters import to_native

PCI_ADDRESS_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")

# PCI configuration space: the first 64 bytes are the header that every user may read, the
# extended capabilities start at 0x100 (PCI Express), each with a 32-bit header: ID in bits
# 0-15, version in 16-19, offset of the next one in 20-31.
PCI_HEADER_BYTES = 64
PCI_EXT_CAP_START = 0x100
PCI_EXT_CAP_ID_ACS = 0x000D
PCI_CLASS_BRIDGE = 0x06
PCI_SUBCLASS_PCI_BRIDGE = 0x04
# ACS control register (ACS capability + 6), named as lspci names them.
ACS_CONTROL_BITS = (
    ("SrcValid", 0x0001),
    ("TransBlk", 0x0002),
    ("ReqRedir", 0x0004),
    ("CmpltRedir", 0x0008),
    ("UpstreamFwd", 0x0010),
    ("EgressCtrl", 0x0020),
    ("DirectTrans", 0x0040),
)
# NCCL's documented test: any of these set means ACS is on and may send P2P to the root complex.
ACS_REDIRECT_MASK = 0x0001 | 0x0004 | 0x0008

IOMMU_CMDLINE_KEYS = ("iommu", "intel_iommu", "amd_iommu", "iommu.passthrough", "iommu.strict")


def read_text(path):
    """The text of a (sysfs, procfs) file, or None when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            return to_native(handle.read(), errors="surrogate_or_strict")
    except (IOError, OSError):
        return None


def sysfs_pci_address(bus_id):
    """nvidia-smi's ``00000000:01:00.0`` as sysfs names it: ``0000:01:00.0``."""
    domain, sep, rest = (bus_id or "").strip().lower().partition(":")
    if not sep:
        return None
    try:
        address = "%04x:%s" % (int(domain, 16), rest)
    except ValueError:
        return None
    return address if PCI_ADDRESS_RE.match(address) else None


def find_ext_capability(config, cap_id):
    """Offset of extended capability ``cap_id`` in a configuration space, or None."""
    offset, seen = PCI_EXT_CAP_START, set()
    while PCI_EXT_CAP_START <= offset and offset + 4 <= len(config) and offset not in seen:
        seen.add(offset)
        header = struct.unpack_from("<I", config, offset)[0]
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == cap_id:
            return offset
        offset = (header >> 20) & 0xFFC
    return None


def read_acs(config):
    """(acs, control) of one device's configuration space: acs is enabled, disabled, absent or unknown."""
    if len(config) <= PCI_HEADER_BYTES:
        return "unknown", None
    offset = find_ext_capability(config, PCI_EXT_CAP_ID_ACS)
    if offset is None or offset + 8 > len(config):
        return "absent", None
    control = struct.unpack_from("<H", config, offset + 6)[0]
    return ("enabled" if control & ACS_REDIRECT_MASK else "disabled"), control


def is_pci_bridge(config):
    return len(config) > 0x0B and config[0x0B] == PCI_CLASS_BRIDGE and config[0x0A] == PCI_SUBCLASS_PCI_BRIDGE


def gpu_addresses(sysfs_root, gpus):
    """The sysfs addresses of the GPUs (gpu_info's ``gpus``) that sysfs has."""
    addresses = []
    for gpu in gpus:
        address = sysfs_pci_address(gpu.get("pci_bus_id"))
        if address and os.path.exists(os.path.join(sysfs_root, "bus", "pci", "devices", address)):
            addresses.append(address)
    return addresses


def iommu_state(sysfs_root, proc_root, gpu_addresses):
    """preflight's measured ``iommu``: enabled, the IOMMU units, the mode (passthrough or
    translated, from the GPUs' group types, else from the kernel command line), the group types
    and the IOMMU flags of the command line."""
    try:
        devices = sorted(os.listdir(os.path.join(sysfs_root, "class", "iommu")))
    except OSError:
        devices = []
    cmdline = (read_text(os.path.join(proc_root, "cmdline")) or "").split()
    flags = [arg for arg in cmdline if arg.partition("=")[0] in IOMMU_CMDLINE_KEYS]
    group_types = {}
    for address in gpu_addresses:
        text = read_text(os.path.join(sysfs_root, "bus", "pci", "devices", address, "iommu_group", "type"))
        if text and text.strip():
            group_types[address] = text.strip()
    mode = None
    if devices:
        if group_types:
            mode = "passthrough" if all(t == "identity" for t in group_types.values()) else "translated"
        else:
            passthrough = "iommu=pt" in flags or "iommu.passthrough=1" in flags or "iommu.passthrough=on" in flags
            mode = "passthrough" if passthrough else "translated"
    return dict(enabled=bool(devices), devices=devices, mode=mode, group_types=group_types, cmdline=flags)


def acs_state(sysfs_root, gpu_addresses):
    """preflight's measured ``acs``: the ACS of the PCI bridges above the GPUs (every bridge when
    sysfs has none of the GPUs), which redirect and which could not be read (without root only
    the header of the configuration space can)."""
    base = os.path.join(sysfs_root, "bus", "pci", "devices")
    try:
        devices = sorted(os.listdir(base))
    except OSError:
        devices = []
    scope, candidates = "all_bridges", devices
    if gpu_addresses:
        scope, upstream = "gpu_paths", set()
        for address in gpu_addresses:
            real = os.path.realpath(os.path.join(base, address))
            for part in real.split(os.sep)[:-1]:
                if PCI_ADDRESS_RE.match(part):
                    upstream.add(part)
        candidates = sorted(upstream)
    bridges = []
    for address in candidates:
        try:
            with open(os.path.join(base, address, "config"), "rb") as handle:
                config = handle.read()
        except (IOError, OSError) as exc:
            if exc.errno in (errno.EACCES, errno.EPERM):
                bridges.append(dict(address=address, acs="unknown", control=None, flags=[]))
            continue
        if not is_pci_bridge(config):
            continue
        acs, control = read_acs(config)
        flags = [name for name, bit in ACS_CONTROL_BITS if control is not None and control & bit]
        bridges.append(dict(address=address, acs=acs, control=control, flags=flags))
    redirecting = [b["address"] for b in bridges if b["acs"] == "enabled"]
    unreadable = [b["address"] for b in bridges if b["acs"] == "unknown"]
    state = "enabled" if redirecting else "unknown" if unreadable else "disabled"
    return dict(state=state, scope=scope, bridges=bridges, redirecting=redirecting, unreadable=unreadable)
