# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""fleet.vllm.vllm_probe's verdict on the attention backends, and the line that says it.

The build's backend classes answered (the probe, _vllm_probe_payload.py); these functions weigh
those answers against what vLLM's CPU platform picks and what the version table
(_vllm_support.py) says, in the module's result: ``result["backends"]`` (one entry per backend:
name, accepts, reasons, kv_cache_dtypes, compute_capability_supported), ``result["evidence"]``
(what each step rests on), ``decided_by``, ``cpu_backend_selected`` and ``msg``.

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

from ansible_collections.fleet.vllm.plugins.module_utils._vllm_support import parse_version, table_backends


def _short(reason, size=80):
    return reason if len(reason) <= size else reason[:size - 3].rstrip() + "..."


def where(result):
    """Where the backends were asked about, in words."""
    if result["platform"] == "cpu":
        return "the CPU platform (this host)"
    return "compute capability %s" % result["compute_capability"]


def apply_cpu_choice(result, choice, kv_cache_dtype):
    """vLLM's CPU platform picks one backend per layer by the CPU and never falls back to another
    for the KV-cache dtype (docs/evidence.md section 5): only the picked backend may accept."""
    backends, evidence = result["backends"], result["evidence"]
    if choice.get("refused"):
        for entry in backends:
            entry["accepts"] = False
            entry["reasons"].append("vLLM's CPU platform has no backend for this layer: %s" % choice["refused"])
        evidence.append("vLLM's CPU platform (CpuPlatform.get_attn_backend_cls) refuses the layer with "
                        "kv_cache_dtype %s: %s" % (kv_cache_dtype, choice["refused"]))
        return
    selected = choice.get("selected")
    if selected:
        result["cpu_backend_selected"] = selected
        for entry in backends:
            if entry["name"] != selected and entry["accepts"]:
                entry["accepts"] = False
                entry["reasons"].append("not the backend vLLM's CPU platform picks on this host (%s)" % selected)
        evidence.append("vLLM's CPU platform (CpuPlatform.get_attn_backend_cls) picks %s on this host; it does "
                        "not check the KV-cache dtype at start, so %s's class decides" % (selected, selected))
        return
    refusing = [entry["name"] for entry in backends if not entry["accepts"]]
    if refusing:
        for entry in backends:
            if entry["accepts"]:
                entry["accepts"] = False
                entry["reasons"].append("the CPU platform's pick could not be asked, and %s, which it may pick, "
                                        "refuses %s" % (", ".join(refusing), kv_cache_dtype))
    evidence.append("vLLM's CPU platform could not be asked which backend it picks (%s): every backend it may "
                    "pick must accept" % (choice.get("error") or "no answer"))


def decide_undetermined(result, results, version, commit, kv_cache_dtype, kind, capability):
    """Backends the probe could not judge here (asked about another GPU than this host's, their
    kernels cannot load: vLLM 0.16.0's FLASHMLA on a GPU-less host says "vllm._flashmla_C is not
    available") are not refusals: the version table decides for them, and the evidence says so.
    ``results`` are the probe's own entries (with "undetermined")."""
    undetermined = dict((entry["name"], entry["undetermined"]) for entry in results if entry.get("undetermined"))
    if not undetermined:
        return
    evidence = result["evidence"]
    rows = {}
    if version and parse_version(version) is not None and kv_cache_dtype:
        rows = dict((row["name"], row) for row in table_backends(version, commit, kv_cache_dtype, kind, capability)[0])
    for entry in result["backends"]:
        why = undetermined.get(entry["name"])
        if why is None:
            continue
        row = rows.get(entry["name"])
        if row is None:
            entry["reasons"] = ["undetermined here (%s), and the version table has no row for it" % why]
            evidence.append("%s: undetermined on this host (%s); the version table cannot answer for it: "
                            "counted as not accepting" % (entry["name"], why))
            continue
        entry["accepts"] = row["accepts"]
        entry["reasons"] = list(row["reasons"])
        if entry["kv_cache_dtypes"] is None:
            entry["kv_cache_dtypes"] = row["kv_cache_dtypes"]
        if entry["compute_capability_supported"] is None:
            entry["compute_capability_supported"] = row["compute_capability_supported"]
        evidence.append("%s: undetermined on this host (%s), not refused; the version table decides: %s" % (
            entry["name"], why, "accepts %s on compute capability %d.%d" % ((kv_cache_dtype,) + tuple(capability))
            if row["accepts"] else "; ".join(row["reasons"])))
    result["decided_by"] = "introspection+table"


def compare_with_table(result, version, commit, kv_cache_dtype, kind, capability):
    """Note where the version table would answer otherwise than the build did: the table
    (module_utils/_vllm_support.py) then needs a new line."""
    if not version or parse_version(version) is None or not kv_cache_dtype:
        return
    table = dict((entry["name"], entry) for entry in table_backends(version, commit, kv_cache_dtype, kind, capability)[0])
    for entry in result["backends"]:
        row = table.get(entry["name"])
        if row is None or entry["kv_cache_dtypes"] is None or entry["compute_capability_supported"] is None:
            continue
        build = (kv_cache_dtype in entry["kv_cache_dtypes"], entry["compute_capability_supported"])
        listed = (kv_cache_dtype in row["kv_cache_dtypes"], row["compute_capability_supported"])
        if build != listed:
            result["evidence"].append(
                "the version table disagrees for %s (kv_cache_dtype %s supported: build %s, table %s; compute "
                "capability supported: build %s, table %s): the build's own answer is used"
                % (entry["name"], kv_cache_dtype, build[0], listed[0], build[1], listed[1]))


def message(result, for_model):
    """The module's msg: what was found, in one line (``for_model``: a model_path was given)."""
    r = result
    parts = ["vLLM %s%s" % (r["vllm_version"], " (commit %s)" % r["vllm_commit"] if r["vllm_commit"] else "")]
    if r["kv_cache_dtype_resolved"] is not None:
        parts.append("kv-cache-dtype %s resolves to %s%s" % (
            r["kv_cache_dtype"], r["kv_cache_dtype_resolved"], " for this model" if for_model else ""))
    if r["backend_available"] is not None:
        kind = "MLA" if r["attention_kind"] == "mla" else "standard"
        accepting = [b["name"] for b in r["backends"] if b["accepts"]]
        if accepting:
            parts.append("%s backend%s %s accept%s it on %s (%s)" % (
                kind, "s" if len(accepting) > 1 else "", ", ".join(accepting), "" if len(accepting) > 1 else "s",
                where(r), r["decided_by"]))
        else:
            text = "no %s backend accepts %s on %s (%s): %s" % (
                kind, r["kv_cache_dtype_resolved"], where(r), r["decided_by"],
                "; ".join("%s: %s" % (b["name"], _short(b["reasons"][0])) for b in r["backends"]))
            if r["platform"] == "cpu" and r["kv_cache_dtype_resolved"].startswith("fp8"):
                text += (" - vLLM's CPU platform would start and the engine die at the first completion; strip the "
                         "checkpoint's FP8 KV declaration (fleet.vllm.kv_cache_config state=absent)")
            elif r["attention_kind"] == "mla" and r["kv_cache_dtype_resolved"].startswith("fp8"):
                text += (" - vLLM would stop with 'No valid attention backend found'; strip the checkpoint's FP8 KV "
                         "declaration (fleet.vllm.kv_cache_config state=absent) or use vLLM 0.18.0 or later")
            parts.append(text)
    if r["server_args_accepted"] is True:
        parts.append("server args accepted")
    elif r["server_args_accepted"] is False:
        parts.append("server args rejected: %s" % r["server_args_error"])
    elif r["server_args_error"]:
        parts.append("server args not checked: %s" % r["server_args_error"])
    return "; ".join(parts)
