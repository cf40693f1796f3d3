# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The limits any host sets a vLLM service, as fleet.vllm.preflight checks them on either platform.

Free disk for the model under its directory (what is already there counts, interrupted downloads
do not), the size and free space of /dev/shm (and what earlier vLLM runs left there), and the
open-file limit the service will get (fs.nr_open, systemd's DefaultLimitNOFILE, the unit's
LimitNOFILE, the hard limit of processes started here). ``HostLimits`` holds what the checks find
- problems, warnings and what was measured - and names the module's options in its messages;
the module's class adds the GPU checks to it.

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

import os
import resource
import stat

from ansible.module_utils.common.text.converters import to_native

from ansible_collections.fleet.vllm.plugins.module_utils._pci_sysfs import read_text

GB = 1000 ** 3
GIB = 1024 ** 3
MIB = 1024 ** 2
# What the platform's engine needs of /dev/shm when shm_min_bytes is not set (preflight's documentation says why).
SHM_MIN_BYTES = {"cuda": 16 * GIB, "cpu": 512 * MIB}
SHM_LEFTOVER_PREFIXES = ("psm_", "sem.mp-", "vllm_offload_")


def gb(value):
    return "%.1f GB" % (value / float(GB))


class HostLimits(object):
    """problems, warnings and measured of the checks of disk, /dev/shm and open files."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.prefix = self.params["variable_prefix"]
        self.problems = []
        self.warnings = []
        self.measured = {}

    # ------------------------------------------------------------------ helpers

    def var(self, option):
        """The variable that sets ``option``, as the user knows it."""
        return self.params.get("variables", {}).get(option) or self.prefix + option

    def setting(self, option):
        return "%s=%s" % (self.var(option), self.params[option])

    def proc(self, *parts):
        return os.path.join(self.params["proc_root"], *parts)

    # ------------------------------------------------------------------ disk

    def check_disk(self):
        p = self.params
        model_dir = p["model_dir"]
        disk = self.measured["disk"] = dict(
            model_dir=model_dir, measured_path=None, free_bytes=None, total_bytes=None, existing_bytes=0,
            incomplete_bytes=0, model_size_bytes=p["model_size_bytes"], margin_bytes=None, needed_bytes=None)

        measured = model_dir
        while not os.path.exists(measured) and os.path.dirname(measured) != measured:
            measured = os.path.dirname(measured)
        disk["measured_path"] = measured
        if os.path.exists(model_dir) and not os.path.isdir(model_dir):
            self.problems.append("%s is not a directory: point %s at a directory" % (self.setting("model_dir"), self.var("model_dir")))
            return
        try:
            st = os.statvfs(measured)
        except OSError as exc:
            self.problems.append("cannot measure the free space at %s for %s: %s" % (measured, self.setting("model_dir"), to_native(exc)))
            return
        disk["free_bytes"] = st.f_bavail * st.f_frsize
        disk["total_bytes"] = st.f_blocks * st.f_frsize
        if os.path.isdir(model_dir):
            disk["existing_bytes"], disk["incomplete_bytes"] = self.bytes_under(model_dir)

        size = p["model_size_bytes"]
        if not size:
            self.warnings.append("the model's size is not known (model_size_bytes=0), so the free disk at %s is not "
                                 "checked" % self.setting("model_dir"))
            return
        disk["margin_bytes"] = size * p["disk_margin_percent"] // 100
        disk["needed_bytes"] = max(0, size - disk["existing_bytes"]) + disk["margin_bytes"]
        if disk["free_bytes"] < disk["needed_bytes"]:
            self.problems.append(
                "%s has %s free (file system at %s), the model needs %s there (%s, %s already there, + %d%% margin): "
                "free space there, or point %s at a larger file system"
                % (self.setting("model_dir"), gb(disk["free_bytes"]), measured, gb(disk["needed_bytes"]), gb(size),
                   gb(min(size, disk["existing_bytes"])), p["disk_margin_percent"], self.var("model_dir")))

    def bytes_under(self, top):
        seen, total, incomplete = set(), 0, 0
        for root, dummy, files in os.walk(top):
            for name in files:
                try:
                    st = os.lstat(os.path.join(root, name))
                except OSError:
                    continue
                if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
                if name.endswith(".incomplete"):
                    incomplete += st.st_size
                else:
                    total += st.st_size
        return total, incomplete

    # ------------------------------------------------------------------ /dev/shm

    def check_shm(self):
        p = self.params
        path = p["shm_dir"]
        need = p["shm_min_bytes"] if p["shm_min_bytes"] is not None else SHM_MIN_BYTES[p["platform"]]
        shm = self.measured["shm"] = dict(path=path, exists=os.path.isdir(path), total_bytes=None, free_bytes=None,
                                          min_bytes=need, leftover_files=0, leftover_bytes=0)
        if not shm["exists"]:
            self.problems.append("%s does not exist: vLLM's workers and NCCL need a shared memory file system there "
                                 "(mount a tmpfs; in a container, --ipc=host or --shm-size)" % self.setting("shm_dir"))
            return
        try:
            st = os.statvfs(path)
        except OSError as exc:
            self.problems.append("cannot measure %s: %s" % (self.setting("shm_dir"), to_native(exc)))
            return
        shm["total_bytes"] = st.f_blocks * st.f_frsize
        shm["free_bytes"] = st.f_bavail * st.f_frsize
        try:
            names = os.listdir(path)
        except OSError:
            names = []
        for name in names:
            if name.startswith(SHM_LEFTOVER_PREFIXES):
                try:
                    shm["leftover_bytes"] += os.lstat(os.path.join(path, name)).st_size
                    shm["leftover_files"] += 1
                except OSError:
                    continue
        if p["shm_min_bytes"] is not None:
            wanted = "%s (%s)" % (gb(need), self.setting("shm_min_bytes"))
        else:
            wanted = "%s (what the %s engine needs; %s not set)" % (gb(need), p["platform"], self.var("shm_min_bytes"))
        if shm["total_bytes"] < need:
            self.problems.append(
                "%s is %s, below the %s that vLLM's workers and NCCL need: enlarge it (mount -o remount,size=... and "
                "the same in /etc/fstab; in a container --shm-size or --ipc=host), or lower %s"
                % (path, gb(shm["total_bytes"]), wanted, self.var("shm_min_bytes")))
        elif shm["free_bytes"] < need:
            leftovers = ""
            if shm["leftover_files"]:
                leftovers = (" %d files left by earlier vLLM runs (psm_*, sem.mp-*, vllm_offload_*) take %s: stop the "
                             "vLLM service and remove them;" % (shm["leftover_files"], gb(shm["leftover_bytes"])))
            self.problems.append(
                "%s has %s free of %s, below the %s that vLLM's workers and NCCL need:%s free space there"
                % (path, gb(shm["free_bytes"]), gb(shm["total_bytes"]), wanted, leftovers))

    # ------------------------------------------------------------------ open files

    def systemd_default_nofile(self):
        """(value as systemd prints it or None, why not)."""
        systemctl = self.module.get_bin_path("systemctl")
        if not systemctl:
            return None, "no systemctl"
        rc, out, err = self.module.run_command([systemctl, "show", "--property", "DefaultLimitNOFILE"],
                                               environ_update=dict(LC_ALL="C"))
        out, err = to_native(out), to_native(err)
        if rc != 0:
            said = " ".join(line.strip() for line in (err or out).splitlines() if line.strip())
            return None, "systemctl show exited with %d: %s" % (rc, said or "(no output)")
        for line in out.splitlines():
            key, sep, value = line.strip().partition("=")
            if key == "DefaultLimitNOFILE" and sep and (value.isdigit() or value == "infinity"):
                return value, None
        return None, "systemctl show printed no DefaultLimitNOFILE: %s" % out.strip()[:200]

    def check_nofile(self):
        p = self.params
        text = read_text(self.proc("sys", "fs", "nr_open"))
        nr_open = int(text.strip()) if text and text.strip().isdigit() else None
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        systemd_default, systemd_error = self.systemd_default_nofile()
        ceiling = nr_open if nr_open is not None else float("inf")

        if p["nofile_service_limit"]:
            effective, source = p["nofile_service_limit"], "the vLLM unit's LimitNOFILE"
        elif systemd_default is not None:
            effective = ceiling if systemd_default == "infinity" else int(systemd_default)
            source = "systemd DefaultLimitNOFILE"
        else:
            effective = ceiling if hard == resource.RLIM_INFINITY else hard
            source = "hard RLIMIT_NOFILE of processes started here"
        self.measured["nofile"] = dict(
            nr_open=nr_open, systemd_default=systemd_default, systemd_error=systemd_error,
            process_soft=-1 if soft == resource.RLIM_INFINITY else soft,
            process_hard=-1 if hard == resource.RLIM_INFINITY else hard,
            service_limit=p["nofile_service_limit"],
            effective=None if effective == float("inf") else effective, source=source, min=p["nofile_min"])

        need = p["nofile_min"]
        if nr_open is not None and nr_open < need:
            self.problems.append(
                "the kernel allows no process more than %d open files (fs.nr_open), below %s: raise it (sysctl "
                "fs.nr_open=1048576, and the same in /etc/sysctl.d/) or lower %s" % (nr_open, self.setting("nofile_min"), self.var("nofile_min")))
        elif p["nofile_service_limit"] and nr_open is not None and p["nofile_service_limit"] > nr_open:
            self.problems.append(
                "%s is above the kernel's fs.nr_open (%d), so systemd cannot apply it: lower it or raise fs.nr_open"
                % (self.setting("nofile_service_limit"), nr_open))
        if effective < need:
            if p["nofile_service_limit"]:
                fix = "raise LimitNOFILE in the vLLM unit, and %s with it" % self.var("nofile_service_limit")
            elif systemd_default is not None:
                fix = ("set LimitNOFILE=%d in the vLLM unit (and %s to it) or raise DefaultLimitNOFILE in "
                       "/etc/systemd/system.conf" % (need, self.var("nofile_service_limit")))
            else:
                fix = ("raise the hard nofile limit where vLLM is started (/etc/security/limits.conf, the container "
                       "runtime's --ulimit nofile)")
            self.problems.append("the vLLM service would get at most %d open files (%s), below %s: %s, or lower %s"
                                 % (effective, source, self.setting("nofile_min"), fix, self.var("nofile_min")))
