# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a Hugging Face checkpoint declares its KV-cache quantization, and what vLLM makes of it.

The rules mirror vLLM (late 2026), see docs/kv-cache.md and the sources named there:

* ``vllm.transformers_utils.config.get_config``: the quantization config is ``config.json``'s
  ``quantization_config`` when present (ModelOpt >= 0.31), otherwise the whole of
  ``hf_quant_config.json`` (ModelOpt <= 0.29).
* ``ModelArchConfigConvertorBase._normalize_quantization_config``: a config whose producer is
  ModelOpt gets ``quant_method`` from its ``quantization.quant_algo`` (FP8 -> modelopt,
  NVFP4 -> modelopt_fp4, MIXED_PRECISION -> modelopt_mixed).
* ``vllm.utils.torch_utils.get_kv_cache_quant_algo_string``: for ``modelopt*`` methods the first
  truthy of ``quantization.kv_cache_scheme``, ``kv_cache_scheme``,
  ``quantization.kv_cache_quant_algo``, ``kv_cache_quant_algo``; a dict
  ``{dynamic: false, num_bits: 8, type: float}`` is FP8, ``{num_bits: 4, type: float}`` NVFP4,
  and the names map through ``{"fp8": "fp8_e4m3", "nvfp4": "nvfp4"}``; anything else is
  ``auto`` (with a warning in vLLM).
* ``vllm.model_executor.layers.attention.attention``: other methods (compressed-tensors) with a
  ``kv_cache_scheme`` get an ``fp8`` KV cache when the dtype is ``auto``.

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

CONFIG_FILE = "config.json"
HF_QUANT_FILE = "hf_quant_config.json"
KV_KEYS = ("kv_cache_scheme", "kv_cache_quant_algo")

# Objects that can hold a quantization config, per file, as key paths from the document root.
# text_config covers multimodal wrappers that keep the language model's config nested.
QUANT_CONTAINERS = {
    CONFIG_FILE: (("quantization_config",), ("text_config", "quantization_config")),
    HF_QUANT_FILE: ((),),
}

_MODELOPT_KV_MAP = {"fp8": "fp8_e4m3", "nvfp4": "nvfp4"}
_MODELOPT_ALGO_TO_METHOD = {
    "FP8": "modelopt",
    "FP8_PER_CHANNEL_PER_TOKEN": "modelopt",
    "FP8_PB_WO": "modelopt",
    "NVFP4": "modelopt_fp4",
    "MIXED_PRECISION": "modelopt_mixed",
}


class QuantConfigError(ValueError):
    """A quantization config of a shape vLLM cannot read."""


def get_path(doc, path):
    """The value at ``path`` (a sequence of keys) in nested dicts, or None."""
    node = doc
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def declaration_sites(file_name, doc):
    """Yield ``(container_path, key)`` for every KV-cache declaration vLLM could read in ``doc``.

    A declaration is a key of KV_KEYS with a truthy value (vLLM skips null, {} and "") in a
    quantization container or in that container's nested ``quantization`` object. Raises
    QuantConfigError for a container of a type vLLM cannot read.
    """
    for container_path in QUANT_CONTAINERS[file_name]:
        container = get_path(doc, container_path) if container_path else doc
        if container is None:
            continue
        if not isinstance(container, dict):
            raise QuantConfigError(
                "%s: %s is a JSON %s, expected an object (or null)"
                % (file_name, ".".join(container_path) or "the document", _json_type(container))
            )
        inner = container.get("quantization")
        if inner is not None and not isinstance(inner, dict):
            raise QuantConfigError(
                "%s: %s is a JSON %s, expected an object"
                % (file_name, ".".join(container_path + ("quantization",)), _json_type(inner))
            )
        for sub_path, obj in ((container_path, container), (container_path + ("quantization",), inner)):
            if not obj:
                continue
            for key in KV_KEYS:
                if obj.get(key):
                    yield list(sub_path), key


def effective_quant_config(config_doc, hf_quant_doc):
    """The quantization config vLLM uses: config.json's, else hf_quant_config.json's, or None.

    Returns a normalised copy (quant_method set as vLLM's convertor sets it).
    """
    quant_cfg = config_doc.get("quantization_config") if isinstance(config_doc, dict) else None
    if quant_cfg is None:
        quant_cfg = hf_quant_doc
    if quant_cfg is None:
        return None
    if not isinstance(quant_cfg, dict):
        raise QuantConfigError(
            "%s: quantization_config is a JSON %s, expected an object (or null)"
            % (CONFIG_FILE, _json_type(quant_cfg))
        )
    quant_cfg = dict(quant_cfg)
    producer = quant_cfg.get("producer")
    inner = quant_cfg.get("quantization", {})
    is_legacy = isinstance(inner, dict) and "modelopt_quant_config" in inner
    if (isinstance(producer, dict) and producer.get("name") == "modelopt") or is_legacy:
        algo = inner.get("quant_algo") if isinstance(inner, dict) else None
        if algo is not None:
            method = _MODELOPT_ALGO_TO_METHOD.get(str(algo).upper())
            if method is None:
                raise QuantConfigError("unknown ModelOpt quant_algo %r (vLLM refuses it too)" % (algo,))
            quant_cfg["quant_method"] = method
    method = quant_cfg.get("quant_method") or ""
    quant_cfg["quant_method"] = str(method).lower().replace("compressed_tensors", "compressed-tensors")
    return quant_cfg


def resolve_kv_cache_dtype(config_doc, hf_quant_doc, requested="auto"):
    """The KV-cache dtype vLLM resolves for ``--kv-cache-dtype requested`` on this checkpoint.

    ``auto`` means an unquantized KV cache in the model's dtype (bf16 for these models).
    """
    if requested != "auto":
        return requested
    quant_cfg = effective_quant_config(config_doc, hf_quant_doc)
    if quant_cfg is None:
        return "auto"
    method = quant_cfg["quant_method"]
    if method.startswith("modelopt"):
        inner = quant_cfg.get("quantization", quant_cfg)
        if not isinstance(inner, dict):
            inner = quant_cfg
        algo = (
            inner.get("kv_cache_scheme")
            or quant_cfg.get("kv_cache_scheme")
            or inner.get("kv_cache_quant_algo")
            or quant_cfg.get("kv_cache_quant_algo")
        )
        if isinstance(algo, dict):
            if algo.get("dynamic") is False and algo.get("num_bits") == 8 and algo.get("type") == "float":
                algo = "fp8"
            elif algo.get("num_bits") == 4 and algo.get("type") == "float":
                algo = "nvfp4"
            else:
                return "auto"
        if isinstance(algo, str):
            return _MODELOPT_KV_MAP.get(algo.lower(), "auto")
        return "auto"
    if quant_cfg.get("kv_cache_scheme") is not None:
        return "fp8"
    return "auto"


def _json_type(value):
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if value is None:
        return "null"
    return "object"
