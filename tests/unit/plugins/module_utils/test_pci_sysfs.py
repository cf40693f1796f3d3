"""What fleet.vllm.preflight reads of the PCI devices (module_utils/_pci_sysfs.py), in-process, on
the fake host trees of tests/helpers/fake_host.py: configuration spaces written byte by byte, the
sysfs links the kernel makes, IOMMU units and group types, the kernel command line.
tests/unit/plugins/modules/test_preflight.py runs the module on the same trees."""

from __future__ import annotations

import errno
import struct

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils import _pci_sysfs
from ansible_collections.fleet.vllm.plugins.module_utils._pci_sysfs import (
    acs_state,
    find_ext_capability,
    gpu_addresses,
    iommu_state,
    is_pci_bridge,
    read_acs,
    read_text,
    sysfs_pci_address,
)

from tests.helpers.fake_host import (
    ACS_AS_BIOS_LEAVES_IT,
    ACS_REQ_REDIR,
    ACS_SRC_VALID,
    ACS_TRANS_BLK,
    GPU0,
    GPU0_PORT,
    OTHER_PORT,
    FakeHost,
    bridge_config,
    gpu_config,
    pci_config,
)

GPUS = [{"index": 0, "pci_bus_id": "00000000:01:00.0"}]


@pytest.fixture
def host(tmp_path):
    return FakeHost(tmp_path / "host")


@pytest.mark.parametrize("bus_id, address", [
    ("00000000:01:00.0", "0000:01:00.0"),
    (" 00000000:C1:00.7\n", "0000:c1:00.7"),
    ("00000001:81:00.0", "0001:81:00.0"),
    ("00000010:01:00.0", "0010:01:00.0"),  # the domain is hex
    ("0000:01:00.0", "0000:01:00.0"),
    ("00000000:01:00.8", None),  # functions go to 7
    ("00000000:1:00.0", None),
    ("10000:01:00.0", None),
    ("zz:01:00.0", None),
    ("01:00.0", None),
    ("no-colon", None),
    ("", None),
    (None, None),
])
def test_sysfs_pci_address(bus_id, address):
    assert sysfs_pci_address(bus_id) == address


def with_header(config, offset, header):
    config = bytearray(config)
    struct.pack_into("<I", config, offset, header)
    return bytes(config)


def test_find_ext_capability_follows_the_chain():
    assert find_ext_capability(bridge_config(acs_control=0), 0x000D) == 0x148
    assert find_ext_capability(bridge_config(acs_control=0), 0x0001) == 0x100
    assert find_ext_capability(bridge_config(), 0x000D) is None  # the chain ends at AER
    assert find_ext_capability(bridge_config(acs_control=0), 0x0002) is None


@pytest.mark.parametrize("header", [0, 0xFFFFFFFF])
def test_an_empty_or_unreadable_capability_header_ends_the_chain(header):
    assert find_ext_capability(with_header(bridge_config(acs_control=0), 0x100, header), 0x000D) is None


def test_a_chain_that_loops_or_leaves_the_space_ends():
    looping = with_header(bridge_config(), 0x100, 0x0001 | (1 << 16) | (0x100 << 20))
    assert find_ext_capability(looping, 0x000D) is None
    backwards = with_header(bridge_config(), 0x100, 0x0001 | (1 << 16) | (0x040 << 20))
    assert find_ext_capability(backwards, 0x000D) is None, "extended capabilities live from 0x100 on"
    assert find_ext_capability(bridge_config(acs_control=0, size=0x14B), 0x000D) is None
    assert find_ext_capability(bridge_config(acs_control=0, size=0x14C), 0x000D) == 0x148
    assert find_ext_capability(bridge_config(size=0x103), 0x0001) is None
    # the next offset's low two bits are reserved
    odd = with_header(bridge_config(acs_control=0), 0x100, 0x0001 | (1 << 16) | (0x14B << 20))
    assert find_ext_capability(odd, 0x000D) == 0x148


@pytest.mark.parametrize("config, expected", [
    (bridge_config(acs_control=ACS_AS_BIOS_LEAVES_IT), ("enabled", ACS_AS_BIOS_LEAVES_IT)),
    (bridge_config(acs_control=ACS_TRANS_BLK), ("disabled", ACS_TRANS_BLK)),
    (bridge_config(acs_control=0), ("disabled", 0)),
    (bridge_config(acs_control=0x0008), ("enabled", 0x0008)),
    (bridge_config(acs_control=0x0070), ("disabled", 0x0070)),
    (bridge_config(acs_control=0x8004), ("enabled", 0x8004)),  # the register is unsigned
    (bridge_config(acs_control=0x0004, size=0x150), ("enabled", 0x0004)),
    (bridge_config(acs_control=0x0004, size=0x14F), ("absent", None)),  # the control register is cut off
    (bridge_config(), ("absent", None)),
    (bridge_config(acs_control=0x0004, size=64), ("unknown", None)),  # what a non-root reader gets
    (bridge_config(acs_control=0x0004, size=65), ("absent", None)),
])
def test_read_acs(config, expected):
    assert read_acs(config) == expected


def test_is_pci_bridge():
    assert is_pci_bridge(bridge_config()) is True
    assert is_pci_bridge(gpu_config()) is False
    assert is_pci_bridge(pci_config(0x06, 0x00)) is False  # a host bridge
    assert is_pci_bridge(pci_config(0x0C, 0x04)) is False
    assert is_pci_bridge(bridge_config(size=0x0C)) is True
    assert is_pci_bridge(bridge_config(size=0x0B)) is False


def test_read_text(tmp_path):
    (tmp_path / "type").write_bytes(b"identity\n")
    assert read_text(str(tmp_path / "type")) == "identity\n"
    (tmp_path / "cmdline").write_bytes(b"root=/dev/sda1 label=\xff\n")  # not UTF-8: read all the same
    assert read_text(str(tmp_path / "cmdline")) == "root=/dev/sda1 label=\udcff\n"
    assert read_text(str(tmp_path / "missing")) is None
    assert read_text(str(tmp_path)) is None


def test_gpu_addresses_are_those_sysfs_has(host):
    host.gpu_behind_port()
    gpus = GPUS + [{"index": 1, "pci_bus_id": "00000000:02:00.0"}, {"index": 2, "pci_bus_id": "bad"}, {"index": 3}]
    assert gpu_addresses(str(host.sys), gpus) == [GPU0]
    assert gpu_addresses(str(host.sys), []) == []


def test_no_iommu(host):
    host.gpu_behind_port(group_type="DMA-FQ")
    assert iommu_state(str(host.sys), str(host.proc), [GPU0]) == dict(
        enabled=False, devices=[], mode=None, group_types={GPU0: "DMA-FQ"}, cmdline=[])


@pytest.mark.parametrize("group_types, mode", [
    (["identity", "identity"], "passthrough"), (["identity", "DMA-FQ"], "translated"), (["DMA"], "translated"),
])
def test_the_iommu_mode_of_the_gpus_groups(host, group_types, mode):
    host.iommu("dmar1", "dmar0")
    addresses = []
    for number, group_type in enumerate(group_types):
        address = "0000:%02x:00.0" % (number + 1)
        host.pci_device(address, gpu_config())
        host.write(host.sys / "bus" / "pci" / "devices" / address / "iommu_group" / "type", " %s\n" % group_type)
        addresses.append(address)
    state = iommu_state(str(host.sys), str(host.proc), addresses)
    assert (state["enabled"], state["devices"], state["mode"]) == (True, ["dmar0", "dmar1"], mode)
    assert state["group_types"] == dict(zip(addresses, group_types))


@pytest.mark.parametrize("cmdline, flags, mode", [
    ("ro quiet iommu=pt intel_iommu=on", ["iommu=pt", "intel_iommu=on"], "passthrough"),
    ("iommu.passthrough=1 iommu.strict=0", ["iommu.passthrough=1", "iommu.strict=0"], "passthrough"),
    ("iommu.passthrough=on", ["iommu.passthrough=on"], "passthrough"),
    ("iommu.passthrough=0 amd_iommu=on", ["iommu.passthrough=0", "amd_iommu=on"], "translated"),
    ("quiet splash iommu_pt=1", [], "translated"),
    ("iommu=pt=1", ["iommu=pt=1"], "translated"),  # the key is what comes before the first =
])
def test_without_group_types_the_kernel_command_line_tells_the_mode(host, cmdline, flags, mode):
    host.iommu("ivhd0")
    host.gpu_behind_port(group_type="  ")
    host.write(host.proc / "cmdline", cmdline + "\n")
    state = iommu_state(str(host.sys), str(host.proc), [GPU0])
    assert (state["mode"], state["cmdline"], state["group_types"]) == (mode, flags, {})


def test_without_a_command_line(host):
    (host.proc / "cmdline").unlink()
    host.iommu("dmar0")
    assert iommu_state(str(host.sys), str(host.proc), [])["mode"] == "translated"


def test_acs_on_the_bridges_above_the_gpus(host):
    host.gpu_behind_port(port_acs=ACS_AS_BIOS_LEAVES_IT)
    host.pci_device(OTHER_PORT, bridge_config(ACS_SRC_VALID))  # above no GPU: does not count
    assert acs_state(str(host.sys), [GPU0]) == dict(
        state="enabled", scope="gpu_paths", redirecting=[GPU0_PORT], unreadable=[],
        bridges=[dict(address=GPU0_PORT, acs="enabled", control=ACS_AS_BIOS_LEAVES_IT,
                      flags=["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"])])


def test_acs_of_every_bridge_when_sysfs_has_no_gpu(host):
    host.pci_device(GPU0_PORT, bridge_config(0))
    host.pci_device(OTHER_PORT, bridge_config(ACS_TRANS_BLK | ACS_REQ_REDIR))
    host.pci_device("0000:00:14.0", pci_config(0x0C, 0x03))  # a USB controller: not a bridge
    host.pci_device("0000:00:15.0", bridge_config())  # no ACS capability
    (host.sys / "bus" / "pci" / "devices" / "0000:00:16.0").mkdir()  # no config file
    state = acs_state(str(host.sys), [])
    assert (state["state"], state["scope"], state["redirecting"], state["unreadable"]) == (
        "enabled", "all_bridges", [OTHER_PORT], [])
    assert state["bridges"] == [
        dict(address=GPU0_PORT, acs="disabled", control=0, flags=[]),
        dict(address="0000:00:15.0", acs="absent", control=None, flags=[]),
        dict(address=OTHER_PORT, acs="enabled", control=ACS_TRANS_BLK | ACS_REQ_REDIR, flags=["TransBlk", "ReqRedir"])]


def test_acs_off_everywhere(host):
    host.gpu_behind_port(port_acs=0)
    assert acs_state(str(host.sys), [GPU0])["state"] == "disabled"


def test_without_sysfs_there_is_nothing_to_read(tmp_path):
    assert acs_state(str(tmp_path), []) == dict(state="disabled", scope="all_bridges", bridges=[], redirecting=[],
                                                unreadable=[])
    assert iommu_state(str(tmp_path), str(tmp_path), []) == dict(enabled=False, devices=[], mode=None, group_types={},
                                                                 cmdline=[])


@pytest.mark.parametrize("code", [errno.EACCES, errno.EPERM])
def test_a_configuration_space_that_cannot_be_read_is_unknown(host, monkeypatch, code):
    """Without the permission to read it (tests run as root: the refusal is made here)."""
    host.gpu_behind_port(port_acs=0)
    real_open = open

    def refusing_open(path, *args, **kwargs):
        if path.endswith("config"):
            raise OSError(code, "Permission denied", path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(_pci_sysfs, "open", refusing_open, raising=False)
    assert acs_state(str(host.sys), [GPU0]) == dict(
        state="unknown", scope="gpu_paths", redirecting=[], unreadable=[GPU0_PORT],
        bridges=[dict(address=GPU0_PORT, acs="unknown", control=None, flags=[])])


def test_a_redirecting_bridge_outweighs_an_unreadable_one(host):
    host.gpu_behind_port(port_acs=ACS_REQ_REDIR, port_config_size=4096)
    host.pci_device(OTHER_PORT, bridge_config(ACS_REQ_REDIR, size=64))
    state = acs_state(str(host.sys), [])
    assert (state["state"], state["redirecting"], state["unreadable"]) == ("enabled", [GPU0_PORT], [OTHER_PORT])
    (host.sys / "bus" / "pci" / "devices" / GPU0_PORT / "config").write_bytes(bridge_config(0))
    assert acs_state(str(host.sys), [])["state"] == "unknown"
