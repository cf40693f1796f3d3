"""fleet.vllm.kv_cache_decision, whole decisions: the state, the reason and the line the
vllm_kv_cache role prints for each policy, and the errors that stop a play. test_kv_cache_decision.py
covers the decision table."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.fleet.vllm.plugins.filter.kv_cache_decision import kv_cache_decision

STRIP = "strip (bf16 KV cache, half the context)"


def probe(available, backends, **fields):
    return dict(dict(vllm_version="0.16.0", decided_by="table", compute_capability="12.0", attention_kind="mla",
                     backend_available=available, backends=backends), **fields)


@pytest.mark.parametrize("policy, dtype, expected", [
    ("auto", None, dict(state="none", reason="the checkpoint declares no KV-cache quantization",
                        line="policy auto: the checkpoint declares no KV-cache quantization (bf16 KV cache); nothing to do")),
    ("keep", "", dict(state="none", reason="the checkpoint declares no KV-cache quantization",
                      line="policy keep: the checkpoint declares no KV-cache quantization (bf16 KV cache); nothing to do")),
    ("strip", "fp8", dict(state="absent", reason="policy strip",
                          line="policy strip: checkpoint asks for fp8 -> " + STRIP)),
    ("keep", "fp8_e4m3", dict(state="present", reason="policy keep",
                              line="policy keep: checkpoint asks for fp8_e4m3 -> keep it")),
])
def test_decisions_without_a_probe_in_full(policy, dtype, expected):
    assert kv_cache_decision(policy, dtype) == expected


def test_keep_decision_in_full():
    backends = [dict(name="TRITON_MLA", accepts=True, reasons=[])]
    assert kv_cache_decision("auto", "fp8_e4m3", probe(True, backends, decided_by="introspection")) == dict(
        state="present", reason="an attention backend accepts fp8_e4m3",
        line="policy auto: checkpoint asks for fp8_e4m3; vLLM 0.16.0 (introspection) on compute capability 12.0: "
             "TRITON_MLA: accepts -> keep it")


def test_strip_decision_in_full_names_four_backends_at_most():
    backends = [dict(name="TRITON_MLA", accepts=False, reasons=["kv_cache_dtype not supported", "x"]),
                dict(name="FLASHMLA", accepts=False, reasons=[]),
                dict(accepts=False, reasons=["compute capability not supported"]),
                dict(name="CUTLASS_MLA", accepts=True),
                dict(name="FLASH_ATTN_MLA", accepts=False, reasons=["never shown"])]
    assert kv_cache_decision("auto", "fp8", probe(False, backends)) == dict(
        state="absent", reason="no mla attention backend accepts fp8",
        line="policy auto: checkpoint asks for fp8; vLLM 0.16.0 (table) on compute capability 12.0: TRITON_MLA: "
             "kv_cache_dtype not supported; x, FLASHMLA: rejects, ?: compute capability not supported, CUTLASS_MLA: "
             "accepts -> " + STRIP)


def test_a_probe_that_names_nothing():
    answer = dict(backend_available=False)
    assert kv_cache_decision("auto", "fp8", answer) == dict(
        state="absent", reason="no  attention backend accepts fp8",
        line="policy auto: checkpoint asks for fp8; vLLM ? (?) on compute capability ?: no backend answered -> " + STRIP)


def test_errors_in_full():
    with pytest.raises(AnsibleFilterError) as caught:
        kv_cache_decision("sometimes", "fp8")
    assert str(caught.value) == "vllm_kv_cache_policy is 'sometimes'; use one of auto, keep, strip"
    with pytest.raises(AnsibleFilterError) as caught:
        kv_cache_decision("auto", "fp8", {"failed": True, "msg": "no python"})
    assert str(caught.value) == "policy auto needs the result of fleet.vllm.vllm_probe for fp8; got 'no python'"
    with pytest.raises(AnsibleFilterError) as caught:
        kv_cache_decision("auto", "fp8", {"changed": False})
    assert str(caught.value) == "policy auto needs the result of fleet.vllm.vllm_probe for fp8; got {'changed': False}"
    with pytest.raises(AnsibleFilterError) as caught:
        kv_cache_decision("auto", "fp8", {"backend_available": None})
    assert str(caught.value) == ("policy auto needs fleet.vllm.vllm_probe to ask the attention backends about fp8, and it "
                                 "did not (no compute_capability given): no answer")
