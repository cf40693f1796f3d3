"""module_utils/_kv_cache.py: the errors kv_cache_config and vllm_probe fail with, word for word,
and the shapes of quantization configs that test_kv_cache.py does not cover (legacy ModelOpt
files, schemes nested under ``quantization``, dynamic schemes, unknown algorithms)."""

from __future__ import annotations

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils._kv_cache import (
    QuantConfigError,
    declaration_sites,
    effective_quant_config,
    is_mla,
    resolve_kv_cache_dtype,
)

MLA = {"model_type": "deepseek_v3", "kv_lora_rank": 512}
STANDARD = {"model_type": "llama", "head_dim": 128}


def error(call, *args):
    with pytest.raises(QuantConfigError) as caught:
        call(*args)
    return str(caught.value)


@pytest.mark.parametrize("name, doc, message", [
    ("config.json", {"quantization_config": [1]},
     "config.json: quantization_config is a JSON array, expected an object (or null)"),
    ("config.json", {"text_config": {"quantization_config": True}},
     "config.json: text_config.quantization_config is a JSON boolean, expected an object (or null)"),
    ("config.json", {"quantization_config": {"quantization": 3.5}},
     "config.json: quantization_config.quantization is a JSON number, expected an object"),
    ("hf_quant_config.json", "text", "hf_quant_config.json: the document is a JSON string, expected an object (or null)"),
    ("hf_quant_config.json", {"quantization": ["a"]},
     "hf_quant_config.json: quantization is a JSON array, expected an object"),
])
def test_declaration_errors_in_full(name, doc, message):
    assert error(lambda: list(declaration_sites(name, doc))) == message


def test_a_value_of_no_json_type_is_named_by_its_type():
    assert error(lambda: list(declaration_sites("config.json", {"quantization_config": ("a",)}))) == (
        "config.json: quantization_config is a JSON tuple, expected an object (or null)")


def test_declarations_of_hf_quant_config():
    doc = {"kv_cache_quant_algo": "FP8", "quantization": {"kv_cache_quant_algo": "FP8", "kv_cache_scheme": None}}
    assert list(declaration_sites("hf_quant_config.json", doc)) == [
        ([], "kv_cache_quant_algo"), (["quantization"], "kv_cache_quant_algo")]
    assert list(declaration_sites("hf_quant_config.json", None)) == []
    assert list(declaration_sites("config.json", {"quantization_config": {}})) == []


def test_quantization_config_errors_in_full():
    assert error(effective_quant_config, {"quantization_config": "fp8"}, None) == (
        "config.json: quantization_config is a JSON string, expected an object (or null)")
    # The file the bad value is in is named: hf_quant_config.json's document, config.json's text_config.
    assert error(effective_quant_config, {"quantization_config": None}, ["fp8"]) == (
        "hf_quant_config.json: the document is a JSON array, expected an object (or null)")
    assert error(effective_quant_config, {"text_config": {"quantization_config": 8}}, None) == (
        "config.json: text_config.quantization_config is a JSON number, expected an object (or null)")
    modelopt = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "int3"}}
    assert error(effective_quant_config, {"quantization_config": modelopt}, None) == (
        "unknown ModelOpt quant_algo 'int3' (vLLM refuses it too)")
    mixed = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "MIXED_PRECISION"}}
    assert error(effective_quant_config, {"quantization_config": mixed}, None, "0.32.0") == (
        "ModelOpt quant_algo 'MIXED_PRECISION' is refused by vLLM 0.32.0 (\"Unknown ModelOpt quant algo\"): vLLM reads it "
        "from 0.33.0 on")


def test_a_legacy_modelopt_file_is_read_as_modelopt():
    """hf_quant_config.json as older ModelOpt wrote it: no producer, a modelopt_quant_config marker."""
    legacy = {"quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "modelopt_quant_config": {}}}
    assert effective_quant_config(None, legacy) == dict(legacy, quant_method="modelopt_fp4")
    assert resolve_kv_cache_dtype(MLA, legacy) == "fp8_e4m3"
    unmarked = {"quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}}
    assert effective_quant_config(None, unmarked) == dict(unmarked, quant_method="")


def test_a_modelopt_producer_without_an_algorithm_keeps_its_method():
    doc = {"quantization_config": {"producer": {"name": "modelopt"}, "quant_method": "ModelOpt", "kv_cache_quant_algo": "fp8"}}
    assert effective_quant_config(doc, None) == dict(doc["quantization_config"], quant_method="modelopt")
    assert resolve_kv_cache_dtype(doc, None) == "fp8_e4m3"


@pytest.mark.parametrize("kv, version, expected", [
    ({"kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"}}, None, "fp8_e4m3"),
    ({"kv_cache_scheme": {"dynamic": True, "num_bits": 8, "type": "float"}}, None, "auto"),
    ({"kv_cache_scheme": {"dynamic": False, "num_bits": 4, "type": "float"}}, "0.20.0", "nvfp4"),
    ({"kv_cache_scheme": {"dynamic": False, "num_bits": 4, "type": "float"}}, "0.19.1", "auto"),
    ({"kv_cache_scheme": {"dynamic": False, "num_bits": 4, "type": "int"}}, None, "auto"),
    ({"kv_cache_quant_algo": "INT8"}, None, "auto"),
    ({"kv_cache_quant_algo": "NVFP4"}, "0.19.1", "auto"),
    ({"kv_cache_quant_algo": 8}, None, "auto"),
])
def test_modelopt_kv_schemes_nested_under_quantization(kv, version, expected):
    quant = {"producer": {"name": "modelopt"}, "quantization": dict({"quant_algo": "NVFP4"}, **kv)}
    assert resolve_kv_cache_dtype(dict(MLA, quantization_config=quant), None, "auto", version) == expected


def test_is_mla_only_for_objects():
    assert [is_mla(doc) for doc in (None, ["kv_lora_rank"], "kv_lora_rank", MLA, STANDARD)] == [
        False, False, False, True, False]
