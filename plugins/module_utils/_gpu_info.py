# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read the GPUs of a host with nvidia-smi, for fleet.vllm.gpu_info and fleet.vllm.preflight (which
reads them itself when it is not given them, one module run instead of two)."""

from __future__ import annotations

import os
import shlex

from ansible.module_utils.common.text.converters import to_native

from ansible_collections.fleet.vllm.plugins.module_utils._nvidia_smi import (
    NvidiaSmiParseError,
    models_by_index,
    parse_gpu_query,
    parse_summary_header,
    parse_topology,
    parse_version,
    query_argv,
    summarise,
    summary_argv,
    topology_argv,
    version_argv,
)

DRIVER_NOT_LOADED_RC = 9
NOT_FOUND_RC = 6
DRIVER_NOT_LOADED_TEXT = "couldn't communicate with the NVIDIA driver"
NO_DEVICES_TEXT = "No devices were found"


def empty_facts():
    return dict(
        count=0,
        gpus=[],
        models=[],
        model=None,
        compute_capabilities=[],
        memory_total_mib_min=None,
        driver_version=None,
        cuda_version=None,
        interconnect=None,
        pcie_only=None,
        topology=dict(pairs=[], link_types=[], matrix={}, nics={}),
    )


def command_line(argv):
    return " ".join(shlex.quote(arg) for arg in argv)


class GpuInfo(object):
    def __init__(self, module):
        self.module = module
        self.result = dict(changed=False, nvidia_smi="", gpu_info=empty_facts(), msg="")

    def fail(self, msg):
        self.result["msg"] = msg
        self.module.fail_json(**self.result)

    def find_nvidia_smi(self):
        path = self.module.params["nvidia_smi"]
        if path:
            if not os.path.exists(path):
                self.fail("nvidia_smi=%s does not exist: install the NVIDIA driver (it brings nvidia-smi), "
                          "or set nvidia_smi to where nvidia-smi is" % path)
            if os.path.isdir(path) or not os.access(path, os.X_OK):
                self.fail("nvidia_smi=%s is not an executable file: set nvidia_smi to the nvidia-smi program" % path)
            return path
        path = self.module.get_bin_path("nvidia-smi", required=False)
        if not path:
            self.fail("nvidia-smi was not found on PATH (%s) nor in the system directories: install the NVIDIA "
                      "driver, which brings nvidia-smi, or set nvidia_smi to its path"
                      % os.environ.get("PATH", ""))
        return path

    def run(self, argv):
        rc, out, err = self.module.run_command(argv, environ_update=dict(LC_ALL="C"))
        return rc, to_native(out), to_native(err)

    def run_checked(self, argv):
        rc, out, err = self.run(argv)
        if rc != 0:
            self.fail_tool(argv, rc, out, err)
        return out

    def fail_tool(self, argv, rc, out, err):
        said = " ".join(line.strip() for line in (out + "\n" + err).splitlines() if line.strip())
        command = command_line(argv)
        if rc == DRIVER_NOT_LOADED_RC or DRIVER_NOT_LOADED_TEXT in said:
            self.fail("the NVIDIA driver is not loaded: `%s` exited with %d: %s Load it (modprobe nvidia, or "
                      "reboot after installing the driver or a new kernel) and look for NVRM errors in dmesg"
                      % (command, rc, said))
        if rc == NOT_FOUND_RC or NO_DEVICES_TEXT in said:
            self.fail("no NVIDIA GPU found: `%s` exited with %d: %s Check that the host sees its GPUs "
                      "(lspci -d 10de:) and that the installed driver supports them (NVRM messages in dmesg)"
                      % (command, rc, said))
        self.fail("`%s` failed with exit code %d: %s" % (command, rc, said or "(no output)"))

    def fail_parse(self, argv, exc):
        self.fail("cannot read the output of `%s`: %s; is %s the nvidia-smi of an NVIDIA driver "
                  "(535 or later)?" % (command_line(argv), to_native(exc), argv[0]))

    def cuda_version(self, nvidia_smi):
        argv = version_argv(nvidia_smi)
        rc, out, dummy = self.run(argv)
        if rc == 0:
            try:
                dummy, cuda = parse_version(out)
            except NvidiaSmiParseError:
                cuda = None
            if cuda:
                return cuda
        # Older drivers have no --version, or print no CUDA version there: read the header.
        argv = summary_argv(nvidia_smi)
        out = self.run_checked(argv)
        try:
            dummy, cuda = parse_summary_header(out)
        except NvidiaSmiParseError as exc:
            self.fail_parse(argv, exc)
        return cuda

    def run_module(self):
        nvidia_smi = self.result["nvidia_smi"] = self.find_nvidia_smi()

        argv = query_argv(nvidia_smi)
        out = self.run_checked(argv)
        try:
            gpus = parse_gpu_query(out)
        except NvidiaSmiParseError as exc:
            self.fail_parse(argv, exc)
        if not gpus:
            self.fail("no NVIDIA GPU found: `%s` listed none. Check that the host sees its GPUs (lspci -d 10de:)"
                      % command_line(argv))

        cuda = self.cuda_version(nvidia_smi)

        argv = topology_argv(nvidia_smi)
        out = self.run_checked(argv)
        try:
            facts = summarise(gpus, cuda, parse_topology(out))
        except NvidiaSmiParseError as exc:
            self.fail_parse(argv, exc)
        self.result["gpu_info"] = facts

        if len(facts["models"]) > 1 and not self.module.params["allow_mixed"]:
            self.fail("this host mixes GPU models: %s. vLLM splits a model evenly over identical GPUs: serve "
                      "from GPUs of one model (CUDA_VISIBLE_DEVICES), or set allow_mixed=true to only report "
                      "them" % models_by_index(facts["gpus"]))
        self.result["msg"] = self.message(facts)
        return self.result

    @staticmethod
    def message(facts):
        if facts["model"]:
            gpus = "%dx %s (compute capability %s, %d MiB)" % (
                facts["count"], facts["model"], ", ".join(facts["compute_capabilities"]), facts["memory_total_mib_min"])
        else:
            gpus = "%d GPUs: %s" % (facts["count"], models_by_index(facts["gpus"]))
        links = ", ".join(facts["topology"]["link_types"])
        if facts["interconnect"] == "nvlink":
            link = "NVLink between all GPUs (%s)" % links
        elif facts["interconnect"] == "none":
            link = "a single GPU"
        elif facts["pcie_only"]:
            link = "PCIe only (%s)" % links
        else:
            link = "NVLink between some GPUs only (%s)" % links
        return "%s, %s, driver %s, CUDA %s" % (gpus, link, facts["driver_version"], facts["cuda_version"] or "unknown")
