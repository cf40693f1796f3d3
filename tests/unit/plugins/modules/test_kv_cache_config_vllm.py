"""kv_cache_config against the real vLLM: what vLLM itself resolves for --kv-cache-dtype auto
before a strip, after it, and after the restore, must be what the module reports."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from conftest import FIXTURES, ROOT, _vllm_venv

pytestmark = pytest.mark.vllm

MODELS = sorted(p.name for p in (FIXTURES / "models").iterdir() if p.is_dir())


def ask_vllm(venv, env, directories):
    """One vLLM process answers for all directories (importing vLLM takes about 30 s)."""
    proc = subprocess.run(
        [str(venv / "bin" / "python"), str(ROOT / "tests" / "helpers" / "vllm_kv_resolve.py")]
        + [str(d) for d in directories],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    for directory in directories:
        assert "error" not in answer["models"][str(directory)], answer["models"][str(directory)]
    return {d: answer["models"][str(d)]["resolved"] for d in directories}


@pytest.mark.parametrize("version", ["0.33.0", "0.16.0"])
def test_module_agrees_with_vllm_before_after_and_restored(run_module, tmp_path, vllm_env, version):
    """Told the installed version, the module's copy of vLLM's rules says what that build says.
    The fixtures include declarations the two builds read differently (text_config-only: 0.16.0's
    KimiK25Config reads it, 0.33.0 does not) and one no build applies (compressed-tensors on MLA)."""
    vllm_venv = _vllm_venv(version)
    original, stripped, restored, reports = {}, {}, {}, {}
    for name in MODELS:
        for kind, table in (("original", original), ("stripped", stripped), ("restored", restored)):
            table[name] = tmp_path / kind / name
            shutil.copytree(FIXTURES / "models" / name, table[name])
        strip = run_module("kv_cache_config", {"path": str(stripped[name]), "state": "absent", "vllm_version": version})
        assert not strip.failed, strip
        assert not run_module("kv_cache_config", {"path": str(restored[name]), "state": "absent"}).failed
        if strip.result["changed"]:
            back = run_module("kv_cache_config", {"path": str(restored[name]), "state": "present"})
            assert back.result["changed"] and not back.failed, back
        reports[name] = strip.result

    resolved = ask_vllm(vllm_venv, vllm_env, list(original.values()) + list(stripped.values()) + list(restored.values()))

    # The fixtures cover both outcomes: some declare an FP8 KV cache, some declare none.
    assert {resolved[original[n]] for n in MODELS} == {"fp8_e4m3", "auto"}
    for name in MODELS:
        assert resolved[original[name]] == reports[name]["kv_cache_dtype_before"], (version, name)
        assert resolved[stripped[name]] == "auto", "vLLM still quantizes the KV cache of stripped %s" % name
        assert reports[name]["kv_cache_dtype_after"] == "auto", name
        assert resolved[restored[name]] == resolved[original[name]], name
