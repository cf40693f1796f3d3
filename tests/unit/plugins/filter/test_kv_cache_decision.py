"""The KV-cache decision filter: policy x checkpoint dtype x what vLLM answered."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.fleet.vllm.plugins.filter.kv_cache_decision import kv_cache_decision

OLD = {
    "vllm_version": "0.16.0", "decided_by": "introspection", "compute_capability": "12.0",
    "attention_kind": "mla", "backend_available": False,
    "backends": [
        {"name": "TRITON_MLA", "accepts": False, "reasons": ["kv_cache_dtype not supported"]},
        {"name": "FLASHMLA", "accepts": False, "reasons": ["compute capability not supported"]},
    ],
}
NEW = dict(OLD, vllm_version="0.33.0", backend_available=True,
           backends=[{"name": "TRITON_MLA", "accepts": True, "reasons": []}])


@pytest.mark.parametrize(
    "policy, dtype, probe, state",
    [
        ("auto", "fp8_e4m3", OLD, "absent"),
        ("auto", "fp8_e4m3", NEW, "present"),
        ("auto", "auto", None, "none"),
        ("keep", "fp8_e4m3", None, "present"),
        ("keep", "auto", None, "none"),
        ("strip", "fp8_e4m3", None, "absent"),
        ("strip", "nvfp4", NEW, "absent"),
        ("strip", "auto", None, "none"),
    ],
)
def test_decision_table(policy, dtype, probe, state):
    assert kv_cache_decision(policy, dtype, probe)["state"] == state


def test_line_carries_the_evidence():
    line = kv_cache_decision("auto", "fp8_e4m3", OLD)["line"]
    assert line.startswith("policy auto: checkpoint asks for fp8_e4m3; vLLM 0.16.0 (introspection) on compute capability 12.0")
    assert "TRITON_MLA: kv_cache_dtype not supported" in line
    assert "FLASHMLA: compute capability not supported" in line
    assert line.endswith("-> strip (bf16 KV cache, half the context)")
    assert "TRITON_MLA: accepts" in kv_cache_decision("auto", "fp8_e4m3", NEW)["line"]


@pytest.mark.parametrize("probe", [None, {}, {"failed": True, "msg": "vllm not importable"}])
def test_auto_without_probe_answer_is_an_error(probe):
    with pytest.raises(AnsibleFilterError, match="needs the result of fleet.vllm.vllm_probe"):
        kv_cache_decision("auto", "fp8_e4m3", probe)


def test_a_failed_probe_never_strips():
    """vllm_probe fails with every return key, backend_available included (False once computed):
    a failed run must stop the play, not strip the checkpoint silently."""
    failed = dict(OLD, failed=True, msg="the probe run with /opt/vllm/current/bin/python did not answer within 300 s")
    with pytest.raises(AnsibleFilterError, match="did not answer within 300 s"):
        kv_cache_decision("auto", "fp8_e4m3", failed)


def test_a_probe_that_did_not_ask_the_backends_is_an_error():
    unasked = dict(OLD, backend_available=None, backends=[], msg="vLLM 0.16.0")
    with pytest.raises(AnsibleFilterError, match="did not \\(no compute_capability given\\): vLLM 0.16.0"):
        kv_cache_decision("auto", "fp8_e4m3", unasked)


def test_unknown_policy_names_the_variable():
    with pytest.raises(AnsibleFilterError, match="vllm_kv_cache_policy is 'sometimes'"):
        kv_cache_decision("sometimes", "fp8_e4m3", None)


# ---------------------------------------------------------------------------- kv_cache_decision_key

INPUTS = {"policy": "auto", "model_path": "/srv/served/v1", "python": "/opt/vllm/venvs/pypi-0.33.0/bin/python",
          "compute_capability": "12.0", "method": "auto", "environment": {}}


def test_the_decision_key_changes_with_every_input_and_not_with_their_order():
    from ansible_collections.fleet.vllm.plugins.filter.kv_cache_decision import kv_cache_decision_key

    key = kv_cache_decision_key(INPUTS)
    assert len(key) == 64 and key == kv_cache_decision_key(dict(reversed(list(INPUTS.items()))))
    changed = {kv_cache_decision_key(dict(INPUTS, **{name: value})) for name, value in (
        ("policy", "keep"), ("model_path", "/srv/served/v2"), ("python", "/opt/vllm/venvs/pypi-0.34.0/bin/python"),
        ("compute_capability", "10.0"), ("method", "table"), ("environment", {"VLLM_TARGET_DEVICE": "cpu"}))}
    assert len(changed) == 6 and key not in changed


def test_the_decision_key_changes_with_the_code_of_the_rules(tmp_path, monkeypatch):
    """A collection upgrade that changes how the KV cache is decided decides again."""
    from ansible_collections.fleet.vllm.plugins.filter import kv_cache_decision as module

    root = tmp_path / "collection"
    for name in module._RULES_SOURCES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes((Path(module._COLLECTION_ROOT) / name).read_bytes())
    monkeypatch.setattr(module, "_COLLECTION_ROOT", str(root))
    key = module.kv_cache_decision_key(INPUTS)
    for name in module._RULES_SOURCES:
        original = (root / name).read_bytes()
        (root / name).write_bytes(original + b"\n# changed\n")
        assert module.kv_cache_decision_key(INPUTS) != key, name
        (root / name).write_bytes(original)
    assert module.kv_cache_decision_key(INPUTS) == key


def test_the_decision_key_needs_a_dict():
    from ansible_collections.fleet.vllm.plugins.filter.kv_cache_decision import kv_cache_decision_key

    with pytest.raises(AnsibleFilterError, match=r"^kv_cache_decision_key: expects a dict of the decision's inputs, got <class 'str'>$"):
        kv_cache_decision_key("auto")


# Issue 11: the platform the engine runs on. The same checkpoint and build, two platforms: on
# compute capability 12.0 vLLM 0.33.0's TRITON_MLA takes an FP8 KV cache; on the CPU, the backend
# vLLM's CPU platform picks (CPU_MLA) does not, and the engine would die at the first completion
# (docs/evidence.md section 5).
CPU = {
    "vllm_version": "0.33.0", "decided_by": "introspection", "compute_capability": None, "platform": "cpu",
    "cpu_backend_selected": "CPU_MLA", "attention_kind": "mla", "backend_available": False,
    "backends": [
        {"name": "CPU_MLA", "accepts": False, "reasons": ["kv_cache_dtype not supported"]},
        {"name": "AMX_MLA", "accepts": False, "reasons": ["kv_cache_dtype not supported"]},
    ],
}
CUDA = dict(NEW, platform="cuda", cpu_backend_selected=None)


@pytest.mark.parametrize("probe, state, where", [
    (CPU, "absent", "vLLM 0.33.0 (introspection) on the CPU platform (it picks CPU_MLA): CPU_MLA: kv_cache_dtype not "
                    "supported, AMX_MLA: kv_cache_dtype not supported -> strip"),
    (CUDA, "present", "vLLM 0.33.0 (introspection) on compute capability 12.0: TRITON_MLA: accepts -> keep it"),
    # a CPU answer from the table, without the platform's pick
    (dict(CPU, cpu_backend_selected=None, decided_by="table"), "absent",
     "vLLM 0.33.0 (table) on the CPU platform: CPU_MLA"),
    # a later CPU build whose picked backend takes FP8: kept, as on a GPU
    (dict(CPU, backend_available=True, backends=[{"name": "CPU_MLA", "accepts": True, "reasons": []}]), "present",
     "on the CPU platform (it picks CPU_MLA): CPU_MLA: accepts -> keep it"),
])
def test_the_decision_follows_the_platform_the_probe_asked_about(probe, state, where):
    decision = kv_cache_decision("auto", "fp8_e4m3", probe)
    assert decision["state"] == state
    assert where in decision["line"]
    assert ("compute capability" in decision["line"]) is (probe.get("platform") != "cpu")


def test_the_decision_key_is_the_digest_of_the_inputs_then_each_rules_file():
    """The key, computed here as the filter documents it: the inputs as sorted JSON (a value JSON
    has no type for as its text), then each rules file framed by NUL, its name, NUL."""
    import hashlib
    import json
    from pathlib import PurePosixPath

    from ansible_collections.fleet.vllm.plugins.filter import kv_cache_decision as module

    digest = hashlib.sha256(json.dumps(INPUTS, sort_keys=True).encode("utf-8"))
    for name in module._RULES_SOURCES:
        digest.update(b"\0" + name.encode("ascii") + b"\0" + (Path(module._COLLECTION_ROOT) / name).read_bytes())
    assert module.kv_cache_decision_key(INPUTS) == digest.hexdigest()
    as_path = dict(INPUTS, model_path=PurePosixPath(INPUTS["model_path"]))
    assert module.kv_cache_decision_key(as_path) == digest.hexdigest()


# What the modules that decide import but that does not decide (a change to it needs no new decision).
NOT_RULES = {
    "plugins/module_utils/_vllm_probe_cache.py": "where answers are kept, not what they are",
    "plugins/module_utils/_json_edit.py": "how a JSON file is rewritten, not what is stripped",
}


def test_every_module_util_that_decides_is_in_the_decision_key():
    """A split of vllm_probe moved the weighing of the answers into _vllm_probe_verdict: a change
    there changes decisions, so it must change the key (it was missing after the split)."""
    import re

    from ansible_collections.fleet.vllm.plugins.filter import kv_cache_decision as module

    root = Path(module._COLLECTION_ROOT)
    pending, seen = ["plugins/modules/vllm_probe.py", "plugins/modules/kv_cache_config.py"], set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for util in re.findall(r"^from ansible_collections\.fleet\.vllm\.plugins\.module_utils\.(\w+) import",
                               (root / name).read_text(), re.M):
            pending.append("plugins/module_utils/%s.py" % util)
    deciding = sorted(seen - set(NOT_RULES))
    assert [name for name in deciding if name not in module._RULES_SOURCES] == []
