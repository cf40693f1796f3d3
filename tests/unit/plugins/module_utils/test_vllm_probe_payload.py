"""The program fleet.vllm.vllm_probe runs in a vLLM venv (module_utils/_vllm_probe_payload.py),
imported here and asked in-process: its helpers, the platform, the KV-cache dtype and the
backends. test_vllm_probe_payload_answer.py has the parser, the whole answer and how the module
sends it.

vLLM is not installed in the test venv: each test puts small stand-in modules in ``sys.modules``
(the ``fake`` fixture, tests/helpers/fake_vllm.py) that have the shapes the probe reads in the
real builds; the same program against the real 0.33.0 and 0.16.0 is tested in
tests/unit/plugins/modules/test_vllm_probe.py (the tests marked ``vllm``).
"""

from __future__ import annotations

import collections
import sys
import types

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils import _vllm_probe_payload as payload

from tests.helpers.fake_vllm import (
    MLA_ATTENTION,
    SELECTOR_FIELDS,
    Backend,
    DeviceCapability,
    SelectorConfig,
    backends_host,
    cpu_platform,
    cuda_host,
    kv_functions,
    torch_module,
)


# ---- small helpers -----------------------------------------------------------------------------


@pytest.mark.parametrize("exc, line", [
    (ValueError("bad  value\n  here"), "ValueError: bad value here"),
    (KeyError("X"), "KeyError: 'X'"),
    (RuntimeError(), "RuntimeError"),
    (ValueError("x" * 600), "ValueError: " + "x" * 600),
    (ValueError("x" * 601), "ValueError: " + "x" * 600 + "..."),
])
def test_one_line(exc, line):
    assert payload.one_line(exc) == line


def test_commit_of_reads_the_version_module_first(fake):
    vllm = fake("vllm", __commit__="from-init")
    fake("vllm._version", __commit_id__="4ba787ec9", commit_id="other")
    assert payload.commit_of(vllm) == "4ba787ec9"
    fake("vllm._version", __commit_id__="", commit_id="89a77b108")
    assert payload.commit_of(vllm) == "89a77b108"
    fake("vllm._version", commit_id=None)
    assert payload.commit_of(vllm) == "from-init"
    vllm.__commit__ = None
    fake("vllm.version", __commit__=123)
    assert payload.commit_of(vllm) == "123"
    sys.modules["vllm.version"].__commit__ = ""
    assert payload.commit_of(vllm) is None


def test_commit_of_imports_what_is_not_imported_yet(fake, tmp_path):
    """vllm._version is imported when vllm did not import it; a module that cannot be imported is skipped."""
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")
    (tmp_path / "vllm" / "_version.py").write_text("commit_id = 'abc1234'\n")
    sys.path.insert(0, str(tmp_path))
    import vllm  # noqa: F401  (the stand-in on tmp_path)

    try:
        assert payload.commit_of(sys.modules["vllm"]) == "abc1234"
        (tmp_path / "vllm" / "_version.py").write_text("raise RuntimeError('broken build')\n")
        del sys.modules["vllm._version"]
        assert payload.commit_of(sys.modules["vllm"]) is None
        sys.modules["vllm"].__commit__ = "def5678"
        assert payload.commit_of(sys.modules["vllm"]) == "def5678"
    finally:
        for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
            del sys.modules[name]


def test_server_error_text():
    assert payload.server_error_text("usage: vllm serve [-h]\n\nvllm serve: error: unrecognized arguments: --x\n"
                                     "  more\n") == "vllm serve: error: unrecognized arguments: --x more"
    assert payload.server_error_text("a\n\nb\n c \nd\n") == "b c d"
    assert payload.server_error_text("") == ""


# ---- the platform the parser needs ---------------------------------------------------------------


class CpuPlatform(object):
    device_type = "cpu"


def test_an_unspecified_platform_gets_vllms_cpu_platform(fake):
    platforms = fake("vllm.platforms", current_platform=types.SimpleNamespace(is_unspecified=lambda: True),
                     _current_platform=None)
    fake("vllm.platforms.cpu", CpuPlatform=CpuPlatform)
    notes = []
    payload.use_cpu_platform_if_unspecified(notes)
    assert isinstance(platforms._current_platform, CpuPlatform)
    assert notes == ["no accelerator platform detected: vLLM's CpuPlatform was set for the parser"]


@pytest.mark.parametrize("platform, has_private, changed", [
    (types.SimpleNamespace(is_unspecified=lambda: False), True, False),
    (types.SimpleNamespace(device_type=""), True, True),  # a build without is_unspecified
    (types.SimpleNamespace(device_type="cuda"), True, False),
    (types.SimpleNamespace(is_unspecified=lambda: True), False, False),  # nowhere to set it
])
def test_a_specified_platform_is_left_alone(fake, platform, has_private, changed):
    platforms = fake("vllm.platforms", current_platform=platform)
    if has_private:
        platforms._current_platform = "before"
    fake("vllm.platforms.cpu", CpuPlatform=CpuPlatform)
    notes = []
    payload.use_cpu_platform_if_unspecified(notes)
    assert (getattr(platforms, "_current_platform", None) != "before") is (changed or not has_private)
    assert bool(notes) is changed


def test_a_platform_that_cannot_be_read_is_a_note(fake):
    fake("vllm")  # no vllm.platforms
    notes = []
    payload.use_cpu_platform_if_unspecified(notes)
    assert len(notes) == 1 and notes[0].startswith("cannot read vLLM's platform: ModuleNotFoundError: No module named ")


# ---- the KV-cache dtype --------------------------------------------------------------------------


def test_resolve_kv_reads_the_quantization_through_the_convertor(fake):
    calls = kv_functions(fake)
    assert payload.resolve_kv("/m", "auto") == {"resolved": "fp8_e4m3", "by": "vllm.utils.torch_utils.resolve_kv_cache_dtype_string"}
    assert calls == [("get_config", "/m", False), ("convertor", "DeepSeek", "text"), ("resolve", "auto")]


def test_resolve_kv_without_convertors(fake):
    """Builds before the model-arch convertors: the dtype resolves from the config as read."""
    calls = kv_functions(fake, convertors=False)
    assert payload.resolve_kv("/m", "auto")["resolved"] == "auto"
    assert payload.resolve_kv("/m", "fp8")["resolved"] == "fp8"
    assert [c[0] for c in calls] == ["get_config", "resolve", "get_config", "resolve"]


def test_resolve_kv_uses_the_base_convertor_for_other_models(fake):
    calls = kv_functions(fake)
    sys.modules["vllm.transformers_utils.model_arch_config_convertor"].MODEL_ARCH_CONFIG_CONVERTORS = {}
    assert payload.resolve_kv("/m", "auto")["resolved"] == "fp8_e4m3"
    assert ("convertor", "Base", "text") in calls


# ---- validate_configuration's arguments -----------------------------------------------------------


def test_selector_kwargs_as_vllms_selector_passes_them(fake):
    torch_module(fake)
    fake("vllm.v1.attention.selector", AttentionSelectorConfig=SelectorConfig)
    kwargs, why_not = payload.selector_kwargs(Backend, dict(MLA_ATTENTION, dtype="float16"), "fp8", DeviceCapability(12, 0))
    assert why_not is None
    assert kwargs == dict(head_size=576, dtype="torch.float16", kv_cache_dtype="fp8", block_size=None, use_mla=True,
                          has_sink=False, use_sparse=False, use_mm_prefix=False, use_per_head_quant_scales=False,
                          attn_type="decoder", device_capability=(12, 0))


def test_selector_kwargs_without_the_selector_config(fake):
    """Builds without AttentionSelectorConfig: the known arguments, only those the signature names."""
    torch_module(fake)

    class Narrow(Backend):
        @classmethod
        def validate_configuration(cls, head_size, kv_cache_dtype, device_capability, use_mla=False):
            return []

    kwargs, why_not = payload.selector_kwargs(Narrow, dict(MLA_ATTENTION, dtype=None), "auto", None)
    assert (kwargs, why_not) == (dict(head_size=576, kv_cache_dtype="auto", use_mla=True, device_capability=None), None)
    kwargs, dummy = payload.selector_kwargs(Narrow, dict(MLA_ATTENTION, dtype="no_such_dtype"), "auto", None)
    assert "dtype" not in kwargs

    class Open(Backend):
        @classmethod
        def validate_configuration(cls, head_size, **rest):
            return []

    kwargs, dummy = payload.selector_kwargs(Open, dict(MLA_ATTENTION, dtype="no_such_dtype"), "auto", None)
    assert kwargs["dtype"] == "torch.bfloat16" and kwargs["attn_type"] == "decoder" and len(kwargs) == 11


def test_selector_kwargs_knows_every_argument_vllms_selector_gives(fake):
    """Without AttentionSelectorConfig (builds before it) a signature that names all of them is still satisfied."""
    torch_module(fake)
    kwargs, why_not = payload.selector_kwargs(Backend, MLA_ATTENTION, "auto", DeviceCapability(12, 0))
    assert why_not is None
    assert sorted(kwargs) == sorted(["head_size", "dtype", "kv_cache_dtype", "block_size", "use_mla", "has_sink", "use_sparse",
                                     "use_mm_prefix", "use_per_head_quant_scales", "attn_type", "device_capability"])


def test_selector_kwargs_refuses_an_argument_it_cannot_give(fake):
    torch_module(fake)
    fake("vllm.v1.attention.selector", AttentionSelectorConfig=SelectorConfig)

    class Future(Backend):
        @classmethod
        def validate_configuration(cls, head_size, kv_layout_plan, tile_shape, attn_type, optional=None, *args, **kw):
            return []

    assert payload.selector_kwargs(Future, MLA_ATTENTION, "auto", None) == (
        None, "validate_configuration needs kv_layout_plan, tile_shape, which the probe cannot give")

    class Unreadable(Backend):
        validate_configuration = 42

    kwargs, why_not = payload.selector_kwargs(Unreadable, MLA_ATTENTION, "auto", None)
    assert kwargs is None and why_not.startswith("validate_configuration has no readable signature: TypeError: ")


def test_selector_kwargs_take_a_field_of_the_selector_config_as_known(fake):
    """A required argument that is a field of AttentionSelectorConfig is given from it."""
    torch_module(fake)
    config = collections.namedtuple("AttentionSelectorConfig", SELECTOR_FIELDS + " has_sliding_window")
    config.__new__.__defaults__ = (False,)
    fake("vllm.v1.attention.selector", AttentionSelectorConfig=config)

    class Sliding(Backend):
        @classmethod
        def validate_configuration(cls, head_size, has_sliding_window, device_capability):
            return []

    assert payload.selector_kwargs(Sliding, MLA_ATTENTION, "auto", None) == (
        dict(head_size=576, has_sliding_window=False, device_capability=None), None)


# ---- the host's GPU and what its kernels allow ------------------------------------------------------


@pytest.mark.parametrize("capability, expected", [((12, 0), [12, 0]), ((9, 0), [9, 0]), (None, None)])
def test_host_capability(fake, capability, expected):
    cuda_host(fake, capability)
    assert payload.host_capability() == expected


def test_host_capability_of_a_cuda_platform_without_a_gpu_or_a_platform(fake):
    platform = cuda_host(fake, (12, 0))
    platform.get_device_capability = lambda: None
    assert payload.host_capability() is None
    platform.get_device_capability = lambda: 1 / 0
    assert payload.host_capability() is None
    del sys.modules["vllm.platforms"]
    fake("vllm")
    assert payload.host_capability() is None


def test_combination_reason(fake):
    class Refusing(Backend):
        host_reason = "FlashMLA kernels are not built for this GPU"

    kwargs = dict(head_size=576, dtype="torch.bfloat16", kv_cache_dtype="fp8", block_size=None, use_mla=True,
                  has_sink=False, use_sparse=False, use_mm_prefix=False, device_capability=(9, 0), extra="not passed")
    assert payload.combination_reason(Refusing, kwargs) == "FlashMLA kernels are not built for this GPU"
    assert payload.combination_reason(Backend, kwargs) is None

    class Without(object):
        pass

    assert payload.combination_reason(Without, kwargs) is None

    class Failing(Backend):
        @classmethod
        def supports_combination(cls, head_size):
            raise RuntimeError("no GPU")

    assert payload.combination_reason(Failing, kwargs) is None


# ---- the backends -------------------------------------------------------------------------------------


def entry(name, **fields):
    base = {"name": name, "accepts": False, "reasons": [], "kv_cache_dtypes": None,
            "compute_capability_supported": None, "answered": False, "undetermined": None}
    base.update(fields)
    return base


def test_ask_backends_on_the_gpu_asked_about(fake):
    class Fp8(Backend):
        supported_kv_cache_dtypes = ["auto", "bfloat16", "fp8", "fp8_e4m3"]

    backends_host(fake, {"TRITON_MLA": Fp8, "FLASHMLA": Backend, "CUTLASS_MLA": KeyError("CUTLASS_MLA"),
                         "FLASH_ATTN_MLA": ImportError("libcuda.so.1: cannot open shared object file")}, host=(12, 0))
    results = payload.ask_backends(["TRITON_MLA", "FLASHMLA", "CUTLASS_MLA", "FLASH_ATTN_MLA"], MLA_ATTENTION, "fp8_e4m3")
    assert results == [
        entry("TRITON_MLA", accepts=True, kv_cache_dtypes=["auto", "bfloat16", "fp8", "fp8_e4m3"],
              compute_capability_supported=True, answered=True),
        entry("FLASHMLA", reasons=["kv_cache_dtype not supported"], kv_cache_dtypes=["auto", "bfloat16"],
              compute_capability_supported=True, answered=True),
        entry("CUTLASS_MLA", reasons=["not a backend of this vLLM build: KeyError: 'CUTLASS_MLA'"]),
        # the host has the GPU asked about: a backend that cannot load here is refused, not undetermined
        entry("FLASH_ATTN_MLA", reasons=["cannot be imported on this host: ImportError: libcuda.so.1: cannot open "
                                         "shared object file"]),
    ]
    assert Fp8.seen == dict(head_size=576, dtype="torch.bfloat16", kv_cache_dtype="fp8_e4m3", block_size=None, use_mla=True,
                            has_sink=False, use_sparse=False, use_mm_prefix=False, use_per_head_quant_scales=False,
                            device_capability=(12, 0), attn_type="decoder", has_sliding_window=False)


def test_ask_backends_about_another_gpu_than_this_hosts(fake):
    """A GPU-less build host asked about 9.0: what only its kernels refuse is undetermined here."""
    class HostBound(Backend):
        host_reason = "vllm._flashmla_C is not available"

    class Refusing(HostBound):
        supported_kv_cache_dtypes = ["auto"]

    backends_host(fake, {"FLASHMLA": HostBound, "TRITON_MLA": Refusing, "CUTLASS_MLA": ImportError("no libcuda")})
    results = payload.ask_backends(["FLASHMLA", "TRITON_MLA", "CUTLASS_MLA"], dict(MLA_ATTENTION, capability=[9, 0]), "auto")
    assert results[0] == entry("FLASHMLA", reasons=["vllm._flashmla_C is not available"], kv_cache_dtypes=["auto", "bfloat16"],
                               compute_capability_supported=True, answered=True,
                               undetermined="cannot be used on this host: vllm._flashmla_C is not available")
    # refused for the dtype too: not undetermined
    assert results[1]["reasons"] == ["vllm._flashmla_C is not available"] and results[1]["undetermined"] is not None
    assert results[2] == entry("CUTLASS_MLA", reasons=["cannot be imported on this host: ImportError: no libcuda"],
                               undetermined="cannot be imported on this host: ImportError: no libcuda")
    results = payload.ask_backends(["TRITON_MLA"], dict(MLA_ATTENTION, capability=[9, 0]), "fp8")
    assert results[0]["reasons"] == ["kv_cache_dtype not supported", "vllm._flashmla_C is not available"]
    assert results[0]["undetermined"] is None and results[0]["accepts"] is False


def test_a_refusal_of_another_gpu_that_the_kernels_do_not_explain_is_a_refusal(fake):
    class Other(Backend):
        host_reason = "kernels"

        @classmethod
        def supports_combination(cls, **kwargs):
            return "something else"

    backends_host(fake, {"FLASHMLA": Other})
    results = payload.ask_backends(["FLASHMLA"], dict(MLA_ATTENTION, capability=[9, 0]), "auto")
    assert results[0]["reasons"] == ["kernels"] and results[0]["undetermined"] is None


def test_ask_backends_on_the_cpu_platform(fake):
    """No capability (the CPU platform's backends have none): the host is not "elsewhere"."""
    seen = []

    class Cpu(Backend):
        supported_kv_cache_dtypes = ["auto"]
        host_reason = "would be undetermined elsewhere"

        @classmethod
        def supports_compute_capability(cls, capability):
            seen.append(capability)
            return True

    backends_host(fake, {"CPU_MLA": Cpu})
    results = payload.ask_backends(["CPU_MLA"], dict(MLA_ATTENTION, capability=None), "auto")
    assert seen[0] is None
    assert results == [entry("CPU_MLA", reasons=["would be undetermined elsewhere"], kv_cache_dtypes=["auto"],
                             compute_capability_supported=True, answered=True)]


def test_a_backend_whose_validation_cannot_be_asked_is_judged_by_what_it_declares(fake):
    """validate_configuration with an argument no vLLM had, or none at all: the checks vLLM's
    validate_configuration makes first, from the class's declarations."""
    class Future(Backend):
        @classmethod
        def validate_configuration(cls, head_size, kv_layout_plan):
            raise AssertionError("the probe must not call this")

    class NoValidation(object):
        supported_kv_cache_dtypes = ["auto", "fp8"]

        @classmethod
        def supports_compute_capability(cls, capability):
            return False

        @classmethod
        def is_mla(cls):
            return False

    class Standard(NoValidation):
        supported_kv_cache_dtypes = None

        @classmethod
        def supports_compute_capability(cls, capability):
            return True

    backends_host(fake, {"TRITON_MLA": Future, "FLASHINFER_MLA": NoValidation, "STANDARD": Standard})
    results = payload.ask_backends(["TRITON_MLA", "FLASHINFER_MLA", "STANDARD"], MLA_ATTENTION, "fp8_e4m3")
    assert results[0] == dict(entry("TRITON_MLA", reasons=["kv_cache_dtype not supported"], kv_cache_dtypes=["auto", "bfloat16"],
                                    compute_capability_supported=True, answered=True),
                              notes=["validate_configuration needs kv_layout_plan, which the probe cannot give"])
    assert results[1]["reasons"] == ["kv_cache_dtype not supported", "compute capability not supported", "MLA not supported"]
    assert (results[2]["reasons"], results[2]["accepts"]) == (["MLA not supported"], False)
    results = payload.ask_backends(["STANDARD", "TRITON_MLA"], dict(MLA_ATTENTION, use_mla=False), "auto")
    assert results[0]["reasons"] == []
    assert results[0]["accepts"] is True and "notes" not in results[0]
    assert results[1]["reasons"] == ["non-MLA not supported"]


def test_every_backend_is_asked_whatever_comes_before_it(fake):
    class Undeclared(object):
        @classmethod
        def supports_compute_capability(cls, capability):
            return tuple(capability) == (12, 0)

    backends_host(fake, {"CUTLASS_MLA": ImportError("no libcuda"), "OLD": Undeclared, "TRITON_MLA": Backend})
    results = payload.ask_backends(["CUTLASS_MLA", "OLD", "TRITON_MLA"], dict(MLA_ATTENTION, capability=[8, 0]), "auto")
    assert [r["name"] for r in results] == ["CUTLASS_MLA", "OLD", "TRITON_MLA"]
    assert results[1] == entry("OLD", reasons=["compute capability not supported"], compute_capability_supported=False,
                               answered=True)
    assert results[2]["compute_capability_supported"] is False
    assert results[2]["reasons"] == ["compute capability not supported"]


def test_backend_methods_that_fail(fake):
    class Failing(Backend):
        @classmethod
        def supports_compute_capability(cls, capability):
            raise RuntimeError("cuda init")

        @classmethod
        def validate_configuration(cls, **kwargs):
            raise ValueError("bad arguments")

    backends_host(fake, {"TRITON_MLA": Failing})
    results = payload.ask_backends(["TRITON_MLA"], MLA_ATTENTION, "auto")
    assert results[0]["reasons"] == ["supports_compute_capability failed: RuntimeError: cuda init",
                                     "validate_configuration failed: ValueError: bad arguments"]
    assert results[0]["compute_capability_supported"] is None and results[0]["answered"] is True
    assert results[0]["accepts"] is False


def test_validate_configuration_arguments_that_cannot_be_built(fake, monkeypatch):
    backends_host(fake, {"TRITON_MLA": Backend})
    monkeypatch.setattr(payload, "selector_kwargs", lambda *args: 1 / 0)
    results = payload.ask_backends(["TRITON_MLA"], MLA_ATTENTION, "auto")
    assert results[0]["notes"] == ["cannot build validate_configuration's arguments: ZeroDivisionError: division by zero"]
    assert results[0]["reasons"] == [] and results[0]["accepts"] is True


# ---- the CPU platform's pick ---------------------------------------------------------------------------


def test_the_cpu_platform_picks_a_backend(fake):
    asked = cpu_platform(fake, pick="amx_mla")
    attention = dict(MLA_ATTENTION, capability=None)
    assert payload.cpu_platform_choice(["CPU_MLA", "AMX_MLA"], attention, "auto") == dict(selected="AMX_MLA", refused=None, error=None)
    assert asked == [(None, SelectorConfig(576, "torch.bfloat16", "auto", None, True, False, False, False, False, "decoder"))]
    assert payload.cpu_platform_choice(["CPU_MLA"], attention, "auto") == dict(
        selected=None, refused=None, error="the CPU platform picks vllm.v1.attention.backends.mla.amx_mla, which is none of CPU_MLA")


@pytest.mark.parametrize("dtype, torch_dtype", [("float16", "torch.float16"), (None, "torch.bfloat16")])
def test_the_cpu_platform_is_asked_about_the_layers_dtype(fake, dtype, torch_dtype):
    asked = cpu_platform(fake, pick="cpu_mla")
    assert payload.cpu_platform_choice(["CPU_MLA"], dict(MLA_ATTENTION, dtype=dtype), "fp8")["selected"] == "CPU_MLA"
    assert (asked[0][1].dtype, asked[0][1].kv_cache_dtype) == (torch_dtype, "fp8")


def test_a_pick_that_is_none_of_the_backends_names_them_all(fake):
    cpu_platform(fake, pick="other")
    assert payload.cpu_platform_choice(["CPU_MLA", "AMX_MLA"], MLA_ATTENTION, "auto")["error"] == (
        "the CPU platform picks vllm.v1.attention.backends.mla.other, which is none of CPU_MLA, AMX_MLA")


def test_a_backend_name_the_registry_does_not_have_is_skipped(fake):
    cpu_platform(fake, pick="cpu_mla")
    assert payload.cpu_platform_choice(["NO_SUCH", "CPU_MLA"], MLA_ATTENTION, "auto")["selected"] == "CPU_MLA"


@pytest.mark.parametrize("exc, key, text", [
    (NotImplementedError("MLA is not supported on CPU."), "refused", "NotImplementedError: MLA is not supported on CPU."),
    (ValueError("--kv-cache-dtype fp8_e4m3 is not supported by MLA attention on CPU."), "refused",
     "ValueError: --kv-cache-dtype fp8_e4m3 is not supported by MLA attention on CPU."),
    (RuntimeError("no AMX"), "error", "RuntimeError: no AMX"),
])
def test_the_cpu_platform_refuses_or_fails(fake, exc, key, text):
    cpu_platform(fake, refuse=exc)
    choice = payload.cpu_platform_choice(["CPU_MLA"], MLA_ATTENTION, "fp8_e4m3")
    assert choice == dict(dict(selected=None, refused=None, error=None), **{key: text})


def test_a_cpu_platform_that_takes_no_selector_config(fake):
    cpu_platform(fake, selector_param=False)
    assert payload.cpu_platform_choice(["CPU_MLA"], MLA_ATTENTION, "auto") == dict(
        selected=None, refused=None, error="CpuPlatform.get_attn_backend_cls takes no AttentionSelectorConfig in this build")
