# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a Hugging Face checkpoint declares its KV-cache quantization, and what vLLM makes of it.

This is the collection's copy of vLLM's rules. It is a fallback and a report: where the installed
vLLM can be asked (fleet.vllm.vllm_probe runs vLLM's own functions), its answer wins, and the
probe says so when this copy disagrees. The rules changed between releases; given a final
``vllm_version``, the copy follows that release (sources in docs/vllm-support.md, read from the
wheels on PyPI); without one, or for a pre-release or nightly whose history is not proven, it
predicts a quantized KV cache wherever any release read would (a wrong "quantized" costs a strip,
a wrong "not quantized" a crash):

* ``vllm.transformers_utils.config.get_config``: the quantization config is ``config.json``'s
  ``quantization_config`` when present (ModelOpt >= 0.31), otherwise the whole of
  ``hf_quant_config.json`` (ModelOpt <= 0.29), otherwise, for ``kimi_k25`` before 0.32.0 (vLLM's
  own ``KimiK25Config``), ``text_config.quantization_config``.
* ``ModelArchConfigConvertorBase._normalize_quantization_config``: a config whose producer is
  ModelOpt gets ``quant_method`` from its ``quantization.quant_algo`` (FP8 -> modelopt,
  NVFP4 -> modelopt_fp4; MIXED_PRECISION -> modelopt_mixed from 0.33.0 on, earlier releases
  refuse it: "Unknown ModelOpt quant algo").
* ``vllm.utils.torch_utils.get_kv_cache_quant_algo_string``: for ``modelopt*`` methods the first
  truthy of ``quantization.kv_cache_scheme``, ``kv_cache_scheme``,
  ``quantization.kv_cache_quant_algo``, ``kv_cache_quant_algo``; a dict
  ``{dynamic: false, num_bits: 8, type: float}`` is FP8, and the names map through
  ``{"fp8": "fp8_e4m3"}``; from 0.20.0 on also ``{num_bits: 4, type: float}`` and ``"nvfp4"``
  to ``nvfp4`` (earlier releases resolve them to ``auto``); anything else is ``auto``.
* ``vllm.model_executor.layers.attention.attention.Attention`` (``vllm.attention.layer`` before
  0.16): from 0.15.0 on, other methods (compressed-tensors) with a ``kv_cache_scheme`` get an
  ``fp8`` KV cache when the dtype is ``auto``. Only the standard attention layer does this: the
  MLA layer (``MLAAttention``, DeepSeek-V2/V3 family) keeps ``auto``.

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

import re

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

# The first release with each rule (docs/vllm-support.md). vLLM's own KimiK25Config (0.16.0 to
# 0.21.0 read) copies text_config.quantization_config to the top; 0.32.0 and 0.33.0 use
# transformers' class, which does not.
NVFP4_KV_RELEASE = (0, 20, 0)
MIXED_PRECISION_RELEASE = (0, 33, 0)
COMPRESSED_TENSORS_KV_RELEASE = (0, 15, 0)
NESTED_QUANT_MODEL_TYPES = ("kimi_k25",)
NESTED_QUANT_UNTIL = (0, 32, 0)  # releases before this one promote the nested config


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
        container = get_path(doc, container_path)  # the document itself for the empty path
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


# A final release as vLLM writes it (0.16.0, 0.33.0+cu129, 0.8.5.post1); nothing else.
# (No import of _vllm_support.parse_version: the engine simulator ships this file alone.)
_FINAL_RE = re.compile(r"^\s*v?([0-9]+(?:\.[0-9]+)*)(?:[-_.]?post[0-9]+)?(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?\s*$",
                       re.IGNORECASE)


def rules_release(vllm_version=None):
    """The release whose rules the copy follows for ``vllm_version``: a final release's own; None
    for anything else (not given, not a version, a pre-release, a nightly), meaning the rules of
    any release read, predicting a quantized KV cache wherever one of them would."""
    match = _FINAL_RE.match(vllm_version or "")
    if not match:
        return None
    release = tuple(int(part) for part in match.group(1).split("."))
    return release + (0,) * (3 - len(release))


def _has_rule(release, first):
    return release is None or release >= first


def is_mla(config_doc):
    """Whether vLLM builds MLA attention for this config.json (a ``kv_lora_rank``, under
    ``text_config`` for multimodal wrappers), as fleet.vllm.vllm_probe tells it."""
    if not isinstance(config_doc, dict):
        return False
    text = config_doc.get("text_config")
    return (text if isinstance(text, dict) else config_doc).get("kv_lora_rank") is not None


def effective_quant_config(config_doc, hf_quant_doc, vllm_version=None):
    """The quantization config vLLM uses: config.json's, else hf_quant_config.json's, or None.

    Returns a normalised copy (quant_method set as vLLM's convertor sets it).
    """
    release = rules_release(vllm_version)
    quant_cfg = config_doc.get("quantization_config") if isinstance(config_doc, dict) else None
    where = "%s: quantization_config" % CONFIG_FILE
    if quant_cfg is None:
        quant_cfg = hf_quant_doc
        where = "%s: the document" % HF_QUANT_FILE
    if quant_cfg is None and isinstance(config_doc, dict) and isinstance(config_doc.get("text_config"), dict) and (
            release is None or (config_doc.get("model_type") in NESTED_QUANT_MODEL_TYPES and release < NESTED_QUANT_UNTIL)):
        quant_cfg = config_doc["text_config"].get("quantization_config")
        where = "%s: text_config.quantization_config" % CONFIG_FILE
    if quant_cfg is None:
        return None
    if not isinstance(quant_cfg, dict):
        raise QuantConfigError("%s is a JSON %s, expected an object (or null)" % (where, _json_type(quant_cfg)))
    quant_cfg = dict(quant_cfg)
    producer = quant_cfg.get("producer")
    inner = quant_cfg.get("quantization")
    is_legacy = isinstance(inner, dict) and "modelopt_quant_config" in inner
    if (isinstance(producer, dict) and producer.get("name") == "modelopt") or is_legacy:
        algo = inner.get("quant_algo") if isinstance(inner, dict) else None
        if algo is not None:
            method = _MODELOPT_ALGO_TO_METHOD.get(str(algo).upper())
            if method is None:
                raise QuantConfigError("unknown ModelOpt quant_algo %r (vLLM refuses it too)" % (algo,))
            if method == "modelopt_mixed" and not _has_rule(release, MIXED_PRECISION_RELEASE):
                raise QuantConfigError(
                    "ModelOpt quant_algo %r is refused by vLLM %s (\"Unknown ModelOpt quant algo\"): vLLM reads it "
                    "from 0.33.0 on" % (algo, vllm_version))
            quant_cfg["quant_method"] = method
    method = quant_cfg.get("quant_method") or ""
    quant_cfg["quant_method"] = str(method).lower().replace("compressed_tensors", "compressed-tensors")
    return quant_cfg


def resolve_kv_cache_dtype(config_doc, hf_quant_doc, requested="auto", vllm_version=None):
    """The KV-cache dtype vLLM resolves for ``--kv-cache-dtype requested`` on this checkpoint,
    by the rules of ``vllm_version`` (see rules_release), for the checkpoint's attention kind.

    ``auto`` means an unquantized KV cache in the model's dtype (bf16 for these models).
    """
    if requested != "auto":
        return requested
    release = rules_release(vllm_version)
    quant_cfg = effective_quant_config(config_doc, hf_quant_doc, vllm_version)
    if quant_cfg is None:
        return "auto"
    method = quant_cfg["quant_method"]
    if method.startswith("modelopt"):
        inner = quant_cfg.get("quantization")
        if not isinstance(inner, dict):
            inner = quant_cfg
        algo = (
            inner.get("kv_cache_scheme")
            or quant_cfg.get("kv_cache_scheme")
            or inner.get("kv_cache_quant_algo")
            or quant_cfg.get("kv_cache_quant_algo")
        )
        nvfp4 = _has_rule(release, NVFP4_KV_RELEASE)
        if isinstance(algo, dict):  # a compressed-tensors style scheme
            if algo.get("dynamic") is False and algo.get("num_bits") == 8 and algo.get("type") == "float":
                return _MODELOPT_KV_MAP["fp8"]
            if nvfp4 and algo.get("num_bits") == 4 and algo.get("type") == "float":
                return _MODELOPT_KV_MAP["nvfp4"]
            return "auto"
        if isinstance(algo, str):
            resolved = _MODELOPT_KV_MAP.get(algo.lower(), "auto")
            return "auto" if resolved == "nvfp4" and not nvfp4 else resolved
        return "auto"
    # compressed-tensors and other methods: only the standard attention layer turns a
    # kv_cache_scheme into an fp8 KV cache; the MLA layer keeps auto.
    if quant_cfg.get("kv_cache_scheme") is not None and not is_mla(config_doc) \
            and _has_rule(release, COMPRESSED_TENSORS_KV_RELEASE):
        return "fp8"
    return "auto"


def _json_type(value):
    """The JSON name of what stands where an object should (never an object, never null: both
    are accepted where these errors are raised)."""
    for kind, name in ((bool, "boolean"), ((int, float), "number"), (str, "string"), (list, "array")):
        if isinstance(value, kind):
            return name
    return type(value).__name__
