"""module_utils/_kv_cache.py: the collection's copy of vLLM's KV-cache dtype rules, by release.

Each case names the release whose wheel shows the rule (docs/vllm-support.md); without a version
(or for a nightly) the copy predicts a quantized KV cache wherever any release read would.
tests/unit/plugins/modules/test_kv_cache_config_vllm.py checks the fixtures against the real
0.16.0 and 0.33.0.
"""

from __future__ import annotations

import copy

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils._kv_cache import (
    QuantConfigError,
    declaration_sites,
    effective_quant_config,
    is_mla,
    resolve_kv_cache_dtype,
    rules_release,
)

MLA = {"model_type": "deepseek_v3", "kv_lora_rank": 512, "qk_rope_head_dim": 64}
STANDARD = {"model_type": "llama", "head_dim": 128}
FP8_SCHEME = {"dynamic": False, "num_bits": 8, "type": "float"}
FP4_SCHEME = {"dynamic": False, "num_bits": 4, "type": "float"}


def modelopt(algo, **kv):
    return dict(quant_method="modelopt", producer={"name": "modelopt", "version": "0.41.0"},
                quantization=dict(quant_algo=algo), **kv)


def config(base, quant=None, **extra):
    doc = dict(copy.deepcopy(base), **extra)
    if quant is not None:
        doc["quantization_config"] = quant
    return doc


def compressed_tensors(**kv):
    return dict(quant_method="compressed-tensors", format="float-quantized", **kv)


@pytest.mark.parametrize("version, expected", [
    (None, None), ("", None), ("main", None), ("0.17.1rc1.dev106+ga1257fd1e", None), ("0.18.0rc1", None),
    ("0.16.0", (0, 16, 0)), ("0.33.0+cu129", (0, 33, 0)), ("0.8.5.post1", (0, 8, 5)), ("0.21", (0, 21, 0)),
])
def test_rules_release(version, expected):
    assert rules_release(version) == expected


@pytest.mark.parametrize("doc, version, expected", [
    # ModelOpt FP8 KV: every release
    (config(MLA, modelopt("NVFP4", kv_cache_scheme=FP8_SCHEME)), "0.14.0", "fp8_e4m3"),
    (config(MLA, modelopt("NVFP4", kv_cache_scheme="FP8")), "0.33.0", "fp8_e4m3"),
    (config(MLA, modelopt("NVFP4", kv_cache_quant_algo="fp8")), None, "fp8_e4m3"),
    # a dict that is neither FP8 nor FP4: auto
    (config(MLA, modelopt("NVFP4", kv_cache_scheme={"num_bits": 8, "type": "int"})), None, "auto"),
    # NVFP4 KV: nvfp4 from 0.20.0 (MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP gains it); auto before
    (config(MLA, modelopt("NVFP4", kv_cache_scheme=FP4_SCHEME)), "0.19.1", "auto"),
    (config(MLA, modelopt("NVFP4", kv_cache_scheme=FP4_SCHEME)), "0.20.0", "nvfp4"),
    (config(MLA, modelopt("NVFP4", kv_cache_quant_algo="NVFP4")), "0.19.1", "auto"),
    (config(MLA, modelopt("NVFP4", kv_cache_quant_algo="NVFP4")), "0.20.0", "nvfp4"),
    (config(MLA, modelopt("NVFP4", kv_cache_quant_algo="NVFP4")), None, "nvfp4"),
    (config(MLA, modelopt("NVFP4", kv_cache_quant_algo="NVFP4")), "0.21.0rc1.dev3", "nvfp4"),
    # MIXED_PRECISION: read from 0.33.0 on
    (config(MLA, modelopt("MIXED_PRECISION", kv_cache_scheme=FP8_SCHEME)), "0.33.0", "fp8_e4m3"),
    (config(MLA, modelopt("MIXED_PRECISION", kv_cache_scheme=FP8_SCHEME)), None, "fp8_e4m3"),
    # compressed-tensors kv_cache_scheme: fp8 in the standard attention layer from 0.15.0 on;
    # never in the MLA layer
    (config(STANDARD, compressed_tensors(kv_cache_scheme=FP8_SCHEME)), "0.14.1", "auto"),
    (config(STANDARD, compressed_tensors(kv_cache_scheme=FP8_SCHEME)), "0.15.0", "fp8"),
    (config(STANDARD, compressed_tensors(kv_cache_scheme=FP8_SCHEME)), None, "fp8"),
    (config(STANDARD, {"quant_method": "compressed_tensors", "kv_cache_scheme": FP8_SCHEME}), "0.33.0", "fp8"),
    (config(MLA, compressed_tensors(kv_cache_scheme=FP8_SCHEME)), "0.33.0", "auto"),
    (config(MLA, compressed_tensors(kv_cache_scheme=FP8_SCHEME)), None, "auto"),
    (config(STANDARD, compressed_tensors()), None, "auto"),
    # no quantization
    (config(MLA), None, "auto"),
    (config(MLA, None, quantization_config=None), "0.33.0", "auto"),
])
def test_resolve_by_release(doc, version, expected):
    assert resolve_kv_cache_dtype(doc, None, "auto", vllm_version=version) == expected


def test_an_explicit_dtype_passes_through():
    doc = config(MLA, modelopt("NVFP4", kv_cache_scheme=FP8_SCHEME))
    assert resolve_kv_cache_dtype(doc, None, "bfloat16", vllm_version="0.16.0") == "bfloat16"


def test_mixed_precision_is_refused_before_0_33():
    doc = config(MLA, modelopt("MIXED_PRECISION", kv_cache_scheme=FP8_SCHEME))
    with pytest.raises(QuantConfigError, match=r"'MIXED_PRECISION' is refused by vLLM 0.32.0 .*from 0.33.0 on"):
        resolve_kv_cache_dtype(doc, None, vllm_version="0.32.0")


def test_unknown_modelopt_algo_is_refused():
    with pytest.raises(QuantConfigError, match="unknown ModelOpt quant_algo 'INT3'"):
        resolve_kv_cache_dtype(config(MLA, modelopt("INT3")), None)


def test_hf_quant_config_is_read_when_config_json_has_none():
    hf_quant = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}
    assert resolve_kv_cache_dtype(config(MLA), hf_quant, vllm_version="0.16.0") == "fp8_e4m3"
    # config.json's own quantization_config wins over hf_quant_config.json
    assert resolve_kv_cache_dtype(config(MLA, modelopt("NVFP4")), hf_quant, vllm_version="0.16.0") == "auto"


def kimi_k25(nested_quant, top_quant=None):
    doc = {"model_type": "kimi_k25", "text_config": dict(MLA, quantization_config=nested_quant)}
    if top_quant is not None:
        doc["quantization_config"] = top_quant
    return doc


@pytest.mark.parametrize("version, expected", [
    ("0.16.0", "fp8_e4m3"), ("0.21.0", "fp8_e4m3"), ("0.32.0", "auto"), ("0.33.0", "auto"), (None, "fp8_e4m3"),
])
def test_a_declaration_only_under_text_config(version, expected):
    """vLLM's own KimiK25Config (0.16.0 to 0.21.0) copies text_config.quantization_config to the
    top; from 0.32.0 transformers' class is used, which does not."""
    doc = kimi_k25(modelopt("NVFP4", kv_cache_scheme=FP8_SCHEME))
    assert resolve_kv_cache_dtype(doc, None, vllm_version=version) == expected
    assert is_mla(doc)


def test_the_top_level_declaration_wins_over_the_nested_one():
    doc = kimi_k25(modelopt("NVFP4", kv_cache_scheme=FP8_SCHEME), top_quant=modelopt("NVFP4"))
    assert resolve_kv_cache_dtype(doc, None, vllm_version="0.16.0") == "auto"
    other = dict(kimi_k25(modelopt("NVFP4", kv_cache_scheme=FP8_SCHEME)), model_type="llava")
    assert resolve_kv_cache_dtype(other, None, vllm_version="0.16.0") == "auto"


def test_declaration_sites_cover_text_config():
    doc = kimi_k25(modelopt("NVFP4", kv_cache_scheme=FP8_SCHEME), top_quant=modelopt("NVFP4", kv_cache_quant_algo="FP8"))
    doc["text_config"]["quantization_config"]["quantization"]["kv_cache_quant_algo"] = "FP8"
    assert sorted(declaration_sites("config.json", doc)) == [
        (["quantization_config"], "kv_cache_quant_algo"),
        (["text_config", "quantization_config"], "kv_cache_scheme"),
        (["text_config", "quantization_config", "quantization"], "kv_cache_quant_algo"),
    ]


@pytest.mark.parametrize("doc, message", [
    ({"quantization_config": [1]}, "config.json: quantization_config is a JSON array, expected an object"),
    ({"text_config": {"quantization_config": "x"}}, "config.json: text_config.quantization_config is a JSON string"),
    ({"quantization_config": {"quantization": 3}}, "config.json: quantization_config.quantization is a JSON number"),
])
def test_declaration_sites_refuse_shapes_vllm_cannot_read(doc, message):
    with pytest.raises(QuantConfigError, match=message):
        list(declaration_sites("config.json", doc))


def test_effective_quant_config_normalises_the_method():
    assert effective_quant_config(config(STANDARD, {"quant_method": "Compressed_Tensors"}), None)["quant_method"] == \
        "compressed-tensors"
    assert effective_quant_config(config(MLA, modelopt("FP8_PB_WO")), None)["quant_method"] == "modelopt"
    assert effective_quant_config(config(MLA, modelopt("nvfp4")), None)["quant_method"] == "modelopt_fp4"
    assert effective_quant_config(config(MLA), None) is None
