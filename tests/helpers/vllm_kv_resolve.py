"""Ask the REAL vLLM which KV-cache dtype it resolves for model directories.

Run with the Python of a venv that has vLLM installed (tools/vllm-cpu-venv.sh), on a machine
without a GPU:  VLLM_TARGET_DEVICE=cpu python vllm_kv_resolve.py [--kv-cache-dtype D] MODEL_DIR...
Prints, as its last line, one JSON object: {"vllm_version": ..., "kv_cache_dtype": D,
"models": {MODEL_DIR: {"resolved": ...} or {"error": ...}}}.

The question is answered by resolve_kv of the program fleet.vllm.vllm_probe runs in the venv
(plugins/module_utils/_vllm_probe_payload.py): vLLM's own get_config (config.json, else
hf_quant_config.json), its model-arch convertor (ModelOpt quant_method) and
resolve_kv_cache_dtype_string, as `vllm serve` does. Imported as a module, so that one process
answers for every directory: importing vLLM takes about half a minute.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

COLLECTIONS = Path(__file__).resolve().parents[2] / "collections"


def main() -> int:
    argv = sys.argv[1:]
    requested = "auto"
    if argv[:1] == ["--kv-cache-dtype"]:
        requested, argv = argv[1], argv[2:]
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.disable(logging.WARNING)

    sys.path.insert(0, str(COLLECTIONS))
    from ansible_collections.fleet.vllm.plugins.module_utils._vllm_probe_payload import answer_stream, resolve_kv

    answer = answer_stream()  # before vLLM is imported: what it prints goes to stderr
    import vllm

    models = {}
    for model_dir in argv:
        try:
            models[model_dir] = {"resolved": resolve_kv(model_dir, requested)["resolved"]}
        except Exception as exc:  # report per directory; the caller asserts on it
            models[model_dir] = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps({"vllm_version": vllm.__version__, "kv_cache_dtype": requested, "models": models}),
          file=answer, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
