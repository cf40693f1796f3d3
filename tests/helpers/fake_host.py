"""A fake host tree for fleet.vllm.preflight and the module_utils it reads the host with.

Real files under a root directory: a sysfs tree (IOMMU entries, PCI devices whose ``config``
holds a PCI configuration space with or without the ACS extended capability, written byte by
byte with struct), a procfs tree (``cmdline``, ``sys/fs/nr_open``), a ``systemctl`` script that
answers ``show --property DefaultLimitNOFILE`` like systemd's (standing in for a host booted with
systemd), the model directory and a shared-memory directory on the real file system of the root.
"""

from __future__ import annotations

import os
import struct

GB = 1000 ** 3
MIB = 1024 ** 2
PREFIX = "vllm_preflight_"

GPU0 = "0000:01:00.0"            # GPU 0 of the fixture scenarios (nvidia-smi: 00000000:01:00.0)
GPU0_PORT = "0000:00:01.1"       # the root port above it
OTHER_PORT = "0000:00:1c.0"      # a root port above no GPU (a NIC's, say)

ACS_SRC_VALID, ACS_TRANS_BLK, ACS_REQ_REDIR, ACS_CMPLT_REDIR, ACS_UPSTREAM_FWD = 0x01, 0x02, 0x04, 0x08, 0x10
ACS_AS_BIOS_LEAVES_IT = ACS_SRC_VALID | ACS_REQ_REDIR | ACS_CMPLT_REDIR | ACS_UPSTREAM_FWD


def pci_config(base_class, sub_class, size=4096, acs_control=None):
    """A PCI configuration space of ``size`` bytes (64 is what a non-root reader gets).

    Extended capabilities from 0x100: Advanced Error Reporting (ID 0x0001), then, when
    ``acs_control`` is given, ACS (ID 0x000D) at 0x148 with that control register."""
    config = bytearray(max(size, 0x200))
    struct.pack_into("<HH", config, 0, 0x8086 if base_class == 0x06 else 0x10DE, 0x1234)
    config[0x0A], config[0x0B] = sub_class, base_class
    config[0x0E] = 0x01 if base_class == 0x06 else 0x00
    next_cap = 0x148 if acs_control is not None else 0
    struct.pack_into("<I", config, 0x100, 0x0001 | (1 << 16) | (next_cap << 20))
    if acs_control is not None:
        struct.pack_into("<I", config, 0x148, 0x000D | (1 << 16))
        struct.pack_into("<HH", config, 0x14C, 0x005F, acs_control)  # capability, control
    return bytes(config[:size])


def bridge_config(acs_control=None, size=4096):
    return pci_config(0x06, 0x04, size=size, acs_control=acs_control)


def gpu_config():
    return pci_config(0x03, 0x02)  # 3D controller


class FakeHost(object):
    def __init__(self, root):
        self.root = root
        self.sys = root / "sys"
        self.proc = root / "proc"
        self.bin = root / "bin"
        self.shm = root / "shm"
        self.models = root / "models"
        self.model_dir = self.models / "nvidia--Kimi-K2.5-NVFP4"
        for path in (self.sys / "bus" / "pci" / "devices", self.proc / "sys" / "fs", self.bin, self.shm):
            path.mkdir(parents=True)
        self.write(self.proc / "sys" / "fs" / "nr_open", "1048576\n")
        self.write(self.proc / "cmdline", "BOOT_IMAGE=/vmlinuz-6.8.0 root=UUID=0b1c ro quiet splash\n")
        self.systemctl("DefaultLimitNOFILE=524288\n")

    @staticmethod
    def write(path, text):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def systemctl(self, stdout, rc=0, stderr=""):
        """A systemctl that answers `show --property DefaultLimitNOFILE` with stdout, stderr and rc."""
        (self.bin / "systemctl.out").write_text(stdout)
        (self.bin / "systemctl.err").write_text(stderr)
        script = self.bin / "systemctl"
        script.write_text(
            "#!/bin/sh\n"
            "# Test stand-in for systemd's systemctl: answers one command line only.\n"
            '[ "$*" = "show --property DefaultLimitNOFILE" ] || { echo "unexpected: $*" >&2; exit 64; }\n'
            'here=$(dirname "$0")\n'
            'cat "$here/systemctl.out"; cat "$here/systemctl.err" >&2\n'
            "exit %d\n" % rc)
        script.chmod(0o755)

    def iommu(self, *names):
        for name in names:
            (self.sys / "class" / "iommu" / name).mkdir(parents=True)

    def pci_device(self, address, config, parents=()):
        """The device under /sys/devices/pci0000:00/<parents...>/<address>, linked from
        /sys/bus/pci/devices/<address> with a relative link, as the kernel does."""
        real = self.sys / "devices" / "pci0000:00"
        for parent in parents:
            real = real / parent
        real = real / address
        real.mkdir(parents=True)
        (real / "config").write_bytes(config)
        link = self.sys / "bus" / "pci" / "devices" / address
        link.symlink_to(os.path.relpath(real, link.parent))
        return real

    def gpu_behind_port(self, port_acs=None, port_config_size=4096, group_type=None):
        self.pci_device(GPU0_PORT, bridge_config(port_acs, size=port_config_size))
        gpu = self.pci_device(GPU0, gpu_config(), parents=(GPU0_PORT,))
        if group_type:
            self.write(gpu / "iommu_group" / "type", group_type + "\n")

    def args(self, gpu_info, **overrides):
        args = dict(
            gpu_info=gpu_info,
            tensor_parallel_size=8,
            model_dir=str(self.model_dir),
            model_size_bytes=GB,
            shm_dir=str(self.shm),
            shm_min_bytes=MIB,
            variable_prefix=PREFIX,
            sysfs_root=str(self.sys),
            proc_root=str(self.proc),
        )
        args.update(overrides)
        return args

    def env(self):
        return {"PATH": os.pathsep.join((str(self.bin), os.environ.get("PATH", "")))}
