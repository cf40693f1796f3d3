"""fleet.vllm.vllm_probe's verdict (module_utils/_vllm_probe_verdict.py), in-process: the build's
backend answers weighed against vLLM's CPU platform's pick and the version table, and the module's
one-line message. The rows of the table are those of vLLM 0.33.0 (commit 4ba787ec9), as
module_utils/_vllm_support.py gives them."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils._vllm_probe_verdict import (
    apply_cpu_choice,
    compare_with_table,
    decide_undetermined,
    message,
    where,
)

NEW = ("0.33.0", "4ba787ec9")


def backend(name, accepts=False, reasons=(), dtypes=None, capability=None):
    return dict(name=name, accepts=accepts, reasons=list(reasons), kv_cache_dtypes=dtypes,
                compute_capability_supported=capability)


def result(backends, platform="cuda", **fields):
    base = dict(platform=platform, compute_capability="12.0" if platform == "cuda" else None, backends=backends,
                evidence=[], decided_by="introspection", cpu_backend_selected=None, vllm_version="0.33.0",
                vllm_commit="4ba787ec9", kv_cache_dtype="auto", kv_cache_dtype_resolved="fp8_e4m3", attention_kind="mla",
                backend_available=None, server_args_accepted=None, server_args_error=None)
    base.update(fields)
    return base


def test_where():
    assert where(result([])) == "compute capability 12.0"
    assert where(result([], compute_capability="9.0")) == "compute capability 9.0"
    assert where(result([], platform="cpu")) == "the CPU platform (this host)"


# ---- the CPU platform's pick ------------------------------------------------------------------


def cpu_backends():
    return [backend("CPU_MLA", accepts=True, dtypes=["auto"]), backend("AMX_MLA", accepts=True, dtypes=["auto", "bfloat16"])]


def test_a_layer_the_cpu_platform_refuses_is_refused_by_every_backend():
    r = result(cpu_backends(), platform="cpu")
    r["backends"][0]["reasons"] = ["kv_cache_dtype not supported"]
    apply_cpu_choice(r, {"refused": "ValueError: no FP8 for MLA on CPU", "selected": "CPU_MLA"}, "fp8_e4m3")
    assert [(b["accepts"], b["reasons"]) for b in r["backends"]] == [
        (False, ["kv_cache_dtype not supported", "vLLM's CPU platform has no backend for this layer: ValueError: no FP8 for MLA on CPU"]),
        (False, ["vLLM's CPU platform has no backend for this layer: ValueError: no FP8 for MLA on CPU"])]
    assert r["evidence"] == ["vLLM's CPU platform (CpuPlatform.get_attn_backend_cls) refuses the layer with kv_cache_dtype "
                             "fp8_e4m3: ValueError: no FP8 for MLA on CPU"]
    assert r["cpu_backend_selected"] is None


def test_only_the_backend_the_cpu_platform_picks_may_accept():
    r = result(cpu_backends(), platform="cpu")
    apply_cpu_choice(r, {"selected": "AMX_MLA", "refused": None, "error": None}, "bfloat16")
    assert r["cpu_backend_selected"] == "AMX_MLA"
    assert [(b["accepts"], b["reasons"]) for b in r["backends"]] == [
        (False, ["not the backend vLLM's CPU platform picks on this host (AMX_MLA)"]), (True, [])]
    assert r["evidence"] == ["vLLM's CPU platform (CpuPlatform.get_attn_backend_cls) picks AMX_MLA on this host; it does not "
                             "check the KV-cache dtype at start, so AMX_MLA's class decides"]


def test_a_refusing_backend_that_is_not_picked_keeps_its_own_reasons():
    r = result(cpu_backends(), platform="cpu")
    r["backends"][1].update(accepts=False, reasons=["kv_cache_dtype not supported"])
    apply_cpu_choice(r, {"selected": "CPU_MLA"}, "auto")
    assert [(b["accepts"], b["reasons"]) for b in r["backends"]] == [(True, []), (False, ["kv_cache_dtype not supported"])]


def test_without_the_pick_every_backend_it_may_pick_must_accept():
    r = result(cpu_backends(), platform="cpu")
    r["backends"][0].update(accepts=False, reasons=["kv_cache_dtype not supported"])
    apply_cpu_choice(r, {"selected": None, "error": "the CPU platform picks x, which is none of CPU_MLA, AMX_MLA"}, "bfloat16")
    assert [(b["accepts"], b["reasons"]) for b in r["backends"]] == [
        (False, ["kv_cache_dtype not supported"]),
        (False, ["the CPU platform's pick could not be asked, and CPU_MLA, which it may pick, refuses bfloat16"])]
    assert r["evidence"] == ["vLLM's CPU platform could not be asked which backend it picks (the CPU platform picks x, which "
                             "is none of CPU_MLA, AMX_MLA): every backend it may pick must accept"]
    assert r["cpu_backend_selected"] is None


def test_without_the_pick_backends_that_all_accept_stay():
    r = result(cpu_backends(), platform="cpu")
    apply_cpu_choice(r, {}, "auto")
    assert [(b["accepts"], b["reasons"]) for b in r["backends"]] == [(True, []), (True, [])]
    assert r["evidence"] == ["vLLM's CPU platform could not be asked which backend it picks (no answer): every backend it "
                             "may pick must accept"]


# ---- backends undetermined on this host --------------------------------------------------------


def probed(name, undetermined=None):
    return dict(backend(name), undetermined=undetermined)


def test_the_table_decides_for_a_backend_undetermined_here():
    r = result([backend("TRITON_MLA", accepts=True, dtypes=["auto", "fp8_e4m3"], capability=True),
                backend("FLASHMLA", reasons=["cannot be imported on this host: ImportError: x"]),
                backend("FLASH_ATTN_MLA", reasons=["z"], dtypes=["auto"], capability=True),
                backend("NO_ROW", reasons=["y"])], compute_capability="9.0")
    results = [probed("TRITON_MLA"), probed("FLASHMLA", "cannot be imported on this host: ImportError: x"),
               probed("FLASH_ATTN_MLA", "cannot be used on this host: kernels"), probed("NO_ROW", "cannot load")]
    decide_undetermined(r, results, *NEW, kv_cache_dtype="fp8_e4m3", kind="mla", capability=(9, 0))
    triton, flashmla, flash_attn, no_row = r["backends"]
    assert (triton["accepts"], triton["reasons"]) == (True, [])
    assert flashmla == backend("FLASHMLA", accepts=True, dtypes=["auto", "fp8", "fp8_e4m3", "bfloat16", "float16"], capability=True)
    # what the build's class said stays; the table's verdict replaces the reasons
    assert flash_attn == backend("FLASH_ATTN_MLA", reasons=["kv_cache_dtype not supported: FLASH_ATTN_MLA takes auto, bfloat16, "
                                                            "float16 in vLLM 0.33.0"], dtypes=["auto"], capability=True)
    assert no_row == backend("NO_ROW", reasons=["undetermined here (cannot load), and the version table has no row for it"])
    assert r["evidence"] == [
        "FLASHMLA: undetermined on this host (cannot be imported on this host: ImportError: x), not refused; the version "
        "table decides: accepts fp8_e4m3 on compute capability 9.0",
        "FLASH_ATTN_MLA: undetermined on this host (cannot be used on this host: kernels), not refused; the version table "
        "decides: kv_cache_dtype not supported: FLASH_ATTN_MLA takes auto, bfloat16, float16 in vLLM 0.33.0",
        "NO_ROW: undetermined on this host (cannot load); the version table cannot answer for it: counted as not accepting"]
    assert r["decided_by"] == "introspection+table"


def test_a_backend_refused_for_two_reasons_is_shown_with_both():
    r = result([backend("FLASH_ATTN_MLA", reasons=["x"])])
    decide_undetermined(r, [probed("FLASH_ATTN_MLA", "cannot load")], *NEW, kv_cache_dtype="fp8_e4m3", kind="mla", capability=(12, 0))
    assert r["evidence"][0].endswith("the version table decides: kv_cache_dtype not supported: FLASH_ATTN_MLA takes auto, "
                                     "bfloat16, float16 in vLLM 0.33.0; compute capability not supported: FLASH_ATTN_MLA "
                                     "runs on 9.x, this is 12.0")
    assert r["backends"][0]["compute_capability_supported"] is False


def test_nothing_undetermined_leaves_the_result_alone():
    r = result([backend("TRITON_MLA", accepts=True)])
    before = copy.deepcopy(r)
    decide_undetermined(r, [probed("TRITON_MLA")], *NEW, kv_cache_dtype="fp8_e4m3", kind="mla", capability=(12, 0))
    assert r == before


@pytest.mark.parametrize("version, kv_cache_dtype", [(None, "fp8_e4m3"), ("", "fp8"), ("not-a-version", "fp8"), ("0.33.0", None)])
def test_without_a_version_the_table_has_no_row(version, kv_cache_dtype):
    r = result([backend("FLASHMLA")])
    decide_undetermined(r, [probed("FLASHMLA", "cannot load")], version, None, kv_cache_dtype, "mla", (9, 0))
    assert r["backends"][0]["reasons"] == ["undetermined here (cannot load), and the version table has no row for it"]
    assert r["decided_by"] == "introspection+table"


# ---- where the table disagrees with the build ------------------------------------------------------


def test_where_the_table_disagrees_the_evidence_says_so():
    r = result([backend("TRITON_MLA", dtypes=["auto", "bfloat16"], capability=True),
                backend("FLASHMLA", dtypes=["auto", "fp8_e4m3"], capability=True),
                backend("CUTLASS_MLA", dtypes=["auto", "fp8_e4m3"], capability=False),
                backend("FLASHINFER_MLA", dtypes=None, capability=True),
                backend("FLASH_ATTN_MLA", dtypes=["auto"], capability=None),
                backend("NOT_IN_TABLE", dtypes=["auto"], capability=True)])
    before = copy.deepcopy(r["backends"])
    compare_with_table(r, *NEW, kv_cache_dtype="fp8_e4m3", kind="mla", capability=(12, 0))
    assert r["evidence"] == [
        "the version table disagrees for TRITON_MLA (kv_cache_dtype fp8_e4m3 supported: build False, table True; compute "
        "capability supported: build True, table True): the build's own answer is used",
        "the version table disagrees for FLASHMLA (kv_cache_dtype fp8_e4m3 supported: build True, table True; compute "
        "capability supported: build True, table False): the build's own answer is used"]
    assert r["backends"] == before, "the build's answer is used"


@pytest.mark.parametrize("version, kv_cache_dtype", [(None, "fp8_e4m3"), ("x.y", "fp8_e4m3"), ("0.33.0", "")])
def test_nothing_to_compare_without_a_version_or_a_dtype(version, kv_cache_dtype):
    r = result([backend("TRITON_MLA", dtypes=["auto"], capability=False)])
    compare_with_table(r, version, None, kv_cache_dtype, "mla", (12, 0))
    assert r["evidence"] == []


# ---- the message ------------------------------------------------------------------------------------


def test_the_message_of_a_build_only():
    assert message(result([], kv_cache_dtype_resolved=None), for_model=False) == "vLLM 0.33.0 (commit 4ba787ec9)"
    assert message(result([], kv_cache_dtype_resolved=None, vllm_commit=None), for_model=False) == "vLLM 0.33.0"


def test_the_message_names_the_accepting_backends():
    r = result([backend("TRITON_MLA", accepts=True), backend("FLASHMLA", reasons=["compute capability not supported"])],
               backend_available=True, server_args_accepted=True)
    assert message(r, for_model=True) == (
        "vLLM 0.33.0 (commit 4ba787ec9); kv-cache-dtype auto resolves to fp8_e4m3 for this model; MLA backend TRITON_MLA "
        "accepts it on compute capability 12.0 (introspection); server args accepted")
    r["backends"][1]["accepts"] = True
    r["attention_kind"] = "standard"
    assert "; standard backends TRITON_MLA, FLASHMLA accept it on compute capability 12.0 (introspection);" in message(r, False)
    assert "resolves to fp8_e4m3;" in message(r, False)


def test_the_message_when_no_backend_accepts_says_what_to_do():
    reason = "kv_cache_dtype not supported: TRITON_MLA takes auto, bfloat16 in vLLM 0.16.0 (TRITON_MLA fp8 KV cache (commit a1257fd1ea93)"
    r = result([backend("TRITON_MLA", reasons=[reason, "second"]), backend("FLASHMLA", reasons=["compute capability not supported"])],
               backend_available=False, decided_by="table", vllm_version="0.16.0", vllm_commit=None)
    assert len(reason) > 80
    assert message(r, for_model=True) == (
        "vLLM 0.16.0; kv-cache-dtype auto resolves to fp8_e4m3 for this model; no MLA backend accepts fp8_e4m3 on compute "
        "capability 12.0 (table): TRITON_MLA: %s...; FLASHMLA: compute capability not supported - vLLM would stop with 'No "
        "valid attention backend found'; strip the checkpoint's FP8 KV declaration (fleet.vllm.kv_cache_config "
        "state=absent) or use vLLM 0.18.0 or later" % reason[:77].rstrip())
    r["platform"], r["compute_capability"] = "cpu", None
    assert message(r, True).endswith(
        "on the CPU platform (this host) (table): TRITON_MLA: %s...; FLASHMLA: compute capability not supported - vLLM's CPU "
        "platform would start and the engine die at the first completion; strip the checkpoint's FP8 KV declaration "
        "(fleet.vllm.kv_cache_config state=absent)" % reason[:77].rstrip())
    r["kv_cache_dtype_resolved"] = "bfloat16"
    assert message(r, True).endswith("FLASHMLA: compute capability not supported")
    r.update(platform="cuda", compute_capability="12.0", attention_kind="standard", kv_cache_dtype_resolved="fp8")
    assert message(r, True).endswith("no standard backend accepts fp8 on compute capability 12.0 (table): TRITON_MLA: %s...; "
                                     "FLASHMLA: compute capability not supported" % reason[:77].rstrip())


def test_a_reason_of_80_characters_is_shown_whole():
    r = result([backend("TRITON_MLA", reasons=["x" * 80])], backend_available=False, kv_cache_dtype_resolved="auto")
    assert message(r, False).endswith("TRITON_MLA: " + "x" * 80)
    r["backends"][0]["reasons"] = ["x" * 76 + "   y" + "z"]
    assert message(r, False).endswith("TRITON_MLA: " + "x" * 76 + "...")


@pytest.mark.parametrize("accepted, error, tail", [
    (False, "vllm serve: error: unrecognized arguments: --x", "; server args rejected: vllm serve: error: unrecognized arguments: --x"),
    (None, "cannot build vLLM's argument parser: ImportError", "; server args not checked: cannot build vLLM's argument parser: ImportError"),
    (None, None, "(commit 4ba787ec9)"),
])
def test_the_message_of_the_server_args(accepted, error, tail):
    r = result([], kv_cache_dtype_resolved=None, server_args_accepted=accepted, server_args_error=error)
    assert message(r, False).endswith(tail)


# ---- what the mutation run found unasserted ------------------------------------------------------------


NIGHTLY = ("0.17.1rc1.dev200", "a1257fd1ea93")  # the table knows its FP8 by the commit alone


def test_the_table_decides_by_the_commit_too():
    r = result([backend("TRITON_MLA", reasons=["cannot load"])])
    decide_undetermined(r, [probed("TRITON_MLA", "cannot load")], *NIGHTLY, kv_cache_dtype="fp8_e4m3", kind="mla", capability=(12, 0))
    assert (r["backends"][0]["accepts"], r["backends"][0]["reasons"]) == (True, [])
    r = result([backend("TRITON_MLA", dtypes=["auto", "bfloat16"], capability=True)])
    compare_with_table(r, *NIGHTLY, kv_cache_dtype="fp8_e4m3", kind="mla", capability=(12, 0))
    assert r["evidence"] == [
        "the version table disagrees for TRITON_MLA (kv_cache_dtype fp8_e4m3 supported: build False, table True; compute "
        "capability supported: build True, table True): the build's own answer is used"]


def test_every_backend_is_looked_at_whatever_comes_before_it():
    r = result([backend("NO_ROW"), backend("TRITON_MLA", accepts=True), backend("FLASHMLA", reasons=["x"])], compute_capability="9.0")
    decide_undetermined(r, [probed("NO_ROW", "cannot load"), probed("TRITON_MLA"), probed("FLASHMLA", "cannot load")], *NEW,
                        kv_cache_dtype="fp8_e4m3", kind="mla", capability=(9, 0))
    assert [b["accepts"] for b in r["backends"]] == [False, True, True]
    r = result([backend("FLASHINFER_MLA", dtypes=None, capability=True), backend("NOT_IN_TABLE", dtypes=["auto"], capability=True),
                backend("TRITON_MLA", dtypes=["auto"], capability=True)])
    compare_with_table(r, *NEW, kv_cache_dtype="fp8_e4m3", kind="mla", capability=(12, 0))
    assert len(r["evidence"]) == 1 and "disagrees for TRITON_MLA" in r["evidence"][0]


def test_without_the_pick_every_refusing_backend_is_named():
    r = result([backend("CPU_MLA", reasons=["a"]), backend("AMX_MLA", reasons=["b"]), backend("OTHER", accepts=True)], platform="cpu")
    apply_cpu_choice(r, {}, "fp8")
    assert r["backends"][2]["reasons"] == [
        "the CPU platform's pick could not be asked, and CPU_MLA, AMX_MLA, which it may pick, refuses fp8"]


def test_a_long_reason_is_cut_at_77_characters():
    r = result([backend("TRITON_MLA", reasons=["x" * 81])], backend_available=False, kv_cache_dtype_resolved="auto")
    assert message(r, False).endswith("TRITON_MLA: " + "x" * 77 + "...")
