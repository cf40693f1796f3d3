# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: kv_cache_decision
short_description: Decide whether a checkpoint's KV-cache quantization must be stripped
version_added: "0.1.0"
author: fleet.vllm developers (@fleet-vllm)
description:
  - Turns the KV-cache policy, the dtype the checkpoint asks for and what the installed vLLM
    answered (the result of M(fleet.vllm.vllm_probe)) into the state for
    M(fleet.vllm.kv_cache_config) and a one-line explanation.
  - With policy V(auto) the checkpoint's quantized KV cache is kept (V(present)) when at least
    one attention backend of the installed vLLM accepts it on the platform the engine runs on (the
    GPU's compute capability, or vLLM's CPU platform, as the probe's C(platform) says), and
    stripped (V(absent)) otherwise; a backend the probe could not judge counts as not accepting.
    V(keep) and V(strip) force the outcome. A checkpoint that declares no KV-cache quantization
    needs nothing (V(none)).
options:
  _input:
    description: The policy, V(auto), V(keep) or V(strip).
    type: str
    required: true
  checkpoint_dtype:
    description: The KV-cache dtype the checkpoint declares (RV(fleet.vllm.kv_cache_config#module:kv_cache_dtype_checkpoint)).
    type: str
    required: true
  probe:
    description: The registered result of M(fleet.vllm.vllm_probe) for that dtype; needed for policy V(auto).
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Decide
  ansible.builtin.set_fact:
    decision: "{{ 'auto' | fleet.vllm.kv_cache_decision(checkpoint_dtype='fp8_e4m3', probe=probe_result) }}"
# decision.state == 'absent' when no backend accepts fp8_e4m3, decision.line explains why
"""

RETURN = r"""
_value:
  description: The decision.
  type: dict
  contains:
    state:
      description: V(present), V(absent) or V(none) (nothing to manage).
      type: str
    reason:
      description: Why, in a few words.
      type: str
    line:
      description: Policy, evidence and outcome in one line, for the play output.
      type: str
"""

import hashlib
import json
import os

from ansible.errors import AnsibleFilterError

# The code a KV-cache decision comes from (paths from the collection's root): a change to any of
# them changes every decision key, so that a collection upgrade decides again.
_RULES_SOURCES = (
    "plugins/filter/kv_cache_decision.py",
    "plugins/modules/vllm_probe.py",
    "plugins/modules/kv_cache_config.py",
    "plugins/module_utils/_kv_cache.py",
    "plugins/module_utils/_vllm_support.py",
    "plugins/module_utils/_vllm_probe_payload.py",
    # the weighing of the build's answers against the CPU platform's pick and the table (out of vllm_probe)
    "plugins/module_utils/_vllm_probe_verdict.py",
)
_COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

POLICIES = ("auto", "keep", "strip")


def _backend_summary(probe, limit=4):
    parts = []
    for backend in (probe.get("backends") or [])[:limit]:
        reasons = backend.get("reasons") or []
        verdict = "accepts" if backend.get("accepts") else "; ".join(str(r) for r in reasons) or "rejects"
        parts.append("%s: %s" % (backend.get("name", "?"), verdict))
    return ", ".join(parts)


def kv_cache_decision(policy, checkpoint_dtype, probe=None):
    if policy not in POLICIES:
        raise AnsibleFilterError(
            "vllm_kv_cache_policy is %r; use one of %s" % (policy, ", ".join(POLICIES))
        )
    probe = probe or {}
    if checkpoint_dtype in (None, "", "auto"):
        return dict(state="none", reason="the checkpoint declares no KV-cache quantization",
                    line="policy %s: the checkpoint declares no KV-cache quantization (bf16 KV cache); nothing to do" % policy)
    if policy == "strip":
        return dict(state="absent", reason="policy strip",
                    line="policy strip: checkpoint asks for %s -> strip (bf16 KV cache, half the context)" % checkpoint_dtype)
    if policy == "keep":
        return dict(state="present", reason="policy keep",
                    line="policy keep: checkpoint asks for %s -> keep it" % checkpoint_dtype)
    if "backend_available" not in probe or probe.get("failed"):
        raise AnsibleFilterError(
            "policy auto needs the result of fleet.vllm.vllm_probe for %s; got %r"
            % (checkpoint_dtype, probe.get("msg", probe))
        )
    if probe["backend_available"] is None:
        raise AnsibleFilterError(
            "policy auto needs fleet.vllm.vllm_probe to ask the attention backends about %s, and it did not "
            "(no compute_capability given): %s" % (checkpoint_dtype, probe.get("msg") or "no answer")
        )
    if probe.get("platform") == "cpu":
        where = "the CPU platform%s" % (
            " (it picks %s)" % probe["cpu_backend_selected"] if probe.get("cpu_backend_selected") else "")
    else:
        where = "compute capability %s" % (probe.get("compute_capability") or "?")
    evidence = "vLLM %s (%s) on %s: %s" % (
        probe.get("vllm_version") or "?",
        probe.get("decided_by") or "?",
        where,
        _backend_summary(probe) or "no backend answered",
    )
    if probe["backend_available"]:
        return dict(state="present", reason="an attention backend accepts %s" % checkpoint_dtype,
                    line="policy auto: checkpoint asks for %s; %s -> keep it" % (checkpoint_dtype, evidence))
    return dict(state="absent", reason="no %s attention backend accepts %s" % (probe.get("attention_kind") or "", checkpoint_dtype),
                line="policy auto: checkpoint asks for %s; %s -> strip (bf16 KV cache, half the context)" % (checkpoint_dtype, evidence))


# kv_cache_decision_key is documented in kv_cache_decision_key.yml next to this file.
def kv_cache_decision_key(inputs):
    """SHA-256 of the decision's inputs (a dict) and of the code of the rules that decide."""
    if not isinstance(inputs, dict):
        raise AnsibleFilterError("kv_cache_decision_key: expects a dict of the decision's inputs, got %r" % (type(inputs),))
    digest = hashlib.sha256()
    try:
        digest.update(json.dumps(inputs, sort_keys=True, default=str).encode("utf-8"))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("kv_cache_decision_key: the inputs cannot be serialised: %s" % exc)
    for name in _RULES_SOURCES:
        with open(os.path.join(_COLLECTION_ROOT, name), "rb") as handle:
            digest.update(b"\0" + name.encode("ascii") + b"\0" + handle.read())
    return digest.hexdigest()


class FilterModule(object):
    def filters(self):
        return {"kv_cache_decision": kv_cache_decision, "kv_cache_decision_key": kv_cache_decision_key}
