#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_info
short_description: Read a host's NVIDIA GPUs, driver, CUDA version and interconnect with nvidia-smi
version_added: "0.1.0"
description:
  - Runs C(nvidia-smi) on the host and returns what vLLM's placement depends on, as
    RV(gpu_info) - the GPUs (index, name, UUID, PCI bus id, compute capability, memory, PCIe
    link generation and width), the driver version, the CUDA version the driver supports, and
    the interconnect between every pair of GPUs with the CPU and NUMA affinity of each GPU.
  - "Commands run, each as an argument list in the C locale: C(nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits)
    with the fields C(index), C(name), C(uuid), C(pci.bus_id), C(compute_cap), C(memory.total), C(driver_version),
    C(pcie.link.gen.max), C(pcie.link.gen.current), C(pcie.link.width.max) and C(pcie.link.width.current);
    C(nvidia-smi --version) for the CUDA version (C(CUDA Version), or C(CUDA UMD version) from the 610 drivers on);
    and C(nvidia-smi topo -m) for the topology. Only when C(--version) gives no CUDA version (older drivers)
    is plain C(nvidia-smi) run and the CUDA version read from its header."
  - Fails, saying what to do, when nvidia-smi is missing, when the NVIDIA driver is not loaded
    (nvidia-smi's own message is passed on), when no GPU is found, when the host mixes GPU
    models (unless O(allow_mixed=true)), and when the output cannot be parsed (the line is shown).
  - The module only reads. It changes nothing and always reports C(changed=false).
author:
  - fleet.vllm developers (@fleet-vllm)
attributes:
  platform:
    description: Runs on the GPU host, where nvidia-smi comes with the NVIDIA driver.
extends_documentation_fragment: [fleet.vllm.attributes, fleet.vllm.attributes.read_only]
options:
  nvidia_smi:
    description:
      - Path of the nvidia-smi executable.
      - When not set, C(nvidia-smi) is looked up on E(PATH) and in the usual system directories.
        It is required either way.
    type: path
  allow_mixed:
    description:
      - When V(false), a host whose GPUs are not all the same model fails, naming the model of
        each GPU index. vLLM splits a model evenly over identical GPUs with tensor parallelism.
      - When V(true), such a host is reported as it is, with every model in RV(gpu_info.models).
    type: bool
    default: false
notes:
  - This is an C(_info) module - it returns RV(gpu_info) and sets no facts. Register the result,
    or keep it for later plays with M(ansible.builtin.set_fact).
  - C(pcie_link_gen_current) drops (often to 1) while a GPU idles and power-saves; compare
    C(pcie_link_gen_max) and C(pcie_link_width_max) against what the slot should give.
  - The GPU indexes are nvidia-smi's, in PCI bus order. CUDA numbers the GPUs the same way only
    with E(CUDA_DEVICE_ORDER=PCI_BUS_ID).
requirements:
  - nvidia-smi, as installed with the NVIDIA driver (570 or later tested; 535 and later read).
seealso:
  - name: nvidia-smi documentation
    description: The tool's options, query fields and return codes.
    link: https://docs.nvidia.com/deploy/nvidia-smi/index.html
"""

EXAMPLES = r"""
- name: Read the GPUs of the host
  fleet.vllm.gpu_info:
  register: gpus

- name: Require eight Blackwell GPUs with compute capability 12.0
  ansible.builtin.assert:
    that:
      - gpus.gpu_info.count == 8
      - gpus.gpu_info.compute_capabilities == ["12.0"]
      - gpus.gpu_info.memory_total_mib_min >= 97000
    fail_msg: "{{ gpus.msg }}"

- name: Pick NCCL settings for a host without NVLink
  ansible.builtin.debug:
    msg: "PCIe only ({{ gpus.gpu_info.topology.link_types | join(', ') }}): use NCCL_P2P_LEVEL=SYS"
  when: gpus.gpu_info.pcie_only

- name: Report a workstation that mixes GPU models instead of failing
  fleet.vllm.gpu_info:
    nvidia_smi: /usr/bin/nvidia-smi
    allow_mixed: true
  register: gpus
"""

RETURN = r"""
nvidia_smi:
  description: Path of the nvidia-smi that was run; empty when none was found.
  returned: always
  type: str
  sample: /usr/bin/nvidia-smi
msg:
  description: What was found, in one line; on failure, what went wrong and what to do.
  returned: always
  type: str
  sample: "8x NVIDIA RTX PRO 6000 Blackwell Server Edition (compute capability 12.0, 97887 MiB), PCIe only (NODE, SYS),
    driver 580.95.05, CUDA 13.0"
gpu_info:
  description:
    - The host's GPUs. Returned on every path, failures included; the values that could not
      be read are empty lists and V(null), with RV(gpu_info.count=0).
  returned: always
  type: dict
  contains:
    count:
      description: Number of GPUs.
      type: int
      sample: 8
    gpus:
      description: One entry per GPU, by index.
      type: list
      elements: dict
      contains:
        index:
          description: nvidia-smi's index of the GPU.
          type: int
          sample: 0
        name:
          description: Product name.
          type: str
          sample: NVIDIA RTX PRO 6000 Blackwell Server Edition
        uuid:
          description: The GPU's UUID.
          type: str
          sample: GPU-5e0a1d67-93c2-4b8e-a1f4-3c7d9b2e6f01
        pci_bus_id:
          description: PCI address, C(domain:bus:device.function).
          type: str
          sample: "00000000:01:00.0"
        compute_capability:
          description: CUDA compute capability, C(MAJOR.MINOR).
          type: str
          sample: "12.0"
        compute_capability_major:
          description: Major part of the compute capability.
          type: int
          sample: 12
        compute_capability_minor:
          description: Minor part of the compute capability.
          type: int
          sample: 0
        memory_total_mib:
          description: Memory of the GPU in MiB.
          type: int
          sample: 97887
        driver_version:
          description: Driver version.
          type: str
          sample: 580.95.05
        pcie_link_gen_max:
          description: Highest PCIe generation the GPU and its slot can run at; V(null) where not available.
          type: int
          sample: 5
        pcie_link_gen_current:
          description: PCIe generation the link runs at now (lower while idle); V(null) where not available.
          type: int
          sample: 1
        pcie_link_width_max:
          description: Widest PCIe link the GPU and its slot can run; V(null) where not available.
          type: int
          sample: 16
        pcie_link_width_current:
          description: Width the PCIe link runs at now; V(null) where not available.
          type: int
          sample: 16
        cpu_affinity:
          description: CPUs close to the GPU, as C(topo -m) prints them (a cpuset list); V(null) when not given.
          type: str
          sample: 0-31,64-95
        numa_node:
          description: NUMA node close to the GPU (C(NUMA Affinity)); V(null) when not given.
          type: int
          sample: 0
        gpu_numa_id:
          description: NUMA node of the GPU's own memory (C(GPU NUMA ID), Grace systems); V(null) when none.
          type: int
          sample:
    models:
      description: The distinct GPU names, in index order.
      type: list
      elements: str
      sample: ["NVIDIA RTX PRO 6000 Blackwell Server Edition"]
    model:
      description: The GPU name when all GPUs are the same model, else V(null).
      type: str
      sample: NVIDIA RTX PRO 6000 Blackwell Server Edition
    compute_capabilities:
      description: The distinct compute capabilities, in index order.
      type: list
      elements: str
      sample: ["12.0"]
    memory_total_mib_min:
      description: Memory of the smallest GPU in MiB, what a tensor-parallel shard can use.
      type: int
      sample: 97887
    driver_version:
      description: NVIDIA driver version.
      type: str
      sample: 580.95.05
    cuda_version:
      description:
        - Highest CUDA version the driver supports (not the CUDA toolkit installed, if any).
        - V(null) when the driver reports none (a vGPU host driver prints C(Not Found)).
      type: str
      sample: "13.0"
    interconnect:
      description:
        - V(nvlink) when every pair of GPUs is linked by NVLink, V(pcie) when some pair or
          every pair talks over PCIe, V(none) for a single GPU.
        - vLLM's custom all-reduce needs every pair on NVLink; otherwise all traffic is NCCL.
      type: str
      choices: [nvlink, pcie, none]
      sample: pcie
    pcie_only:
      description: V(true) when no pair of GPUs is linked by NVLink.
      type: bool
      sample: true
    topology:
      description: The interconnect as C(nvidia-smi topo -m) shows it.
      type: dict
      contains:
        pairs:
          description: Each pair of GPUs once, lower index first.
          type: list
          elements: dict
          contains:
            gpus:
              description: The two GPU indexes.
              type: list
              elements: int
              sample: [0, 4]
            link:
              description:
                - The link as C(topo -m) names it. C(NV18) is a bonded set of 18 NVLinks; the PCIe
                  paths by growing length are C(PIX) (one PCIe bridge), C(PXB) (several bridges),
                  C(PHB) (through a host bridge), C(NODE) (between host bridges of one NUMA node),
                  C(SYS) (across the interconnect between NUMA nodes).
              type: str
              sample: SYS
            type:
              description: V(nvlink) or V(pcie).
              type: str
              sample: pcie
            nvlinks:
              description: Number of bonded NVLinks, 0 for PCIe.
              type: int
              sample: 0
        link_types:
          description: The distinct link names between GPUs, sorted.
          type: list
          elements: str
          sample: ["NODE", "SYS"]
        matrix:
          description: The whole matrix, NICs included, C(X) for a device to itself.
          type: dict
          sample: {"GPU0": {"GPU0": "X", "GPU1": "NODE", "NIC0": "NODE"}}
        nics:
          description: The NICs of the matrix, from its C(NIC Legend).
          type: dict
          sample: {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.fleet.vllm.plugins.module_utils._gpu_info import GpuInfo


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi=dict(type="path"),
            allow_mixed=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**GpuInfo(module).run_module())


if __name__ == "__main__":
    main()
