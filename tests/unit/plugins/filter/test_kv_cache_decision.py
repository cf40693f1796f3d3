"""The KV-cache decision filter: policy x checkpoint dtype x what vLLM answered."""

from __future__ import annotations

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
