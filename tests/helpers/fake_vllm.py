"""Stand-ins for vLLM's modules, in sys.modules, for in-process tests of the program
fleet.vllm.vllm_probe runs in a vLLM venv (plugins/module_utils/_vllm_probe_payload.py).

They have the shapes the probe reads in the real builds - vLLM 0.33.0's
``AttentionBackendEnum[NAME].get_class()`` / ``.get_path()``, the ``DeviceCapability`` and
``AttentionSelectorConfig`` named tuples, backend classes with ``supported_kv_cache_dtypes``,
``supports_compute_capability``, ``validate_configuration`` (keyword arguments, a list of reasons)
and ``supports_combination``, ``CpuPlatform.get_attn_backend_cls(selected_backend,
attn_selector_config)``, the ``vllm serve`` parser's module ``cli_args``, the config functions that
resolve the KV-cache dtype. The same program against the real 0.33.0 and 0.16.0 is tested in
tests/unit/plugins/modules/test_vllm_probe.py (the tests marked ``vllm``).
"""

from __future__ import annotations

import argparse
import collections
import enum
import logging
import sys
import types

MLA_ATTENTION = {"use_mla": True, "head_size": 576, "dtype": "bfloat16", "capability": [12, 0]}
SELECTOR_FIELDS = ("head_size dtype kv_cache_dtype block_size use_mla has_sink use_sparse use_mm_prefix "
                   "use_per_head_quant_scales attn_type")


def modules(monkeypatch):
    """The body of the ``fake`` fixture (tests/unit/plugins/module_utils/conftest.py):
    fake("vllm.platforms", current_platform=...) puts a stand-in module (and its parents, as empty modules) in sys.modules
    for this test and returns it; later calls add attributes. Any vllm module imported before is
    hidden for the test, and vLLM's logging is enabled again after it."""
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


def kv_functions(fake, convertors=True):
    """vLLM's config functions: get_config returns a config of model_type deepseek_v3 whose
    quantization the convertor (when there is one) must read before the dtype resolves."""
    calls = []

    def get_config(path, trust_remote_code):
        calls.append(("get_config", path, trust_remote_code))
        return types.SimpleNamespace(model_type="deepseek_v3", quantized=False, text_config="text")

    def resolve(requested, model_config):
        calls.append(("resolve", requested))
        if requested == "auto":
            return "fp8_e4m3" if model_config.hf_config.quantized else "auto"
        return requested

    fake("vllm.config")
    fake("vllm.transformers_utils.config", get_config=get_config, get_hf_text_config=lambda c: c.text_config)
    fake("vllm.utils.torch_utils", resolve_kv_cache_dtype_string=resolve)
    if convertors:
        class Base(object):
            def __init__(self, hf_config, text_config):
                calls.append(("convertor", type(self).__name__, text_config))
                self.hf_config = hf_config

            def get_quantization_config(self):
                self.hf_config.quantized = True

        class DeepSeek(Base):
            pass

        fake("vllm.transformers_utils.model_arch_config_convertor",
             MODEL_ARCH_CONFIG_CONVERTORS={"deepseek_v3": DeepSeek}, ModelArchConfigConvertorBase=Base)
    return calls


def backends_host(fake, classes, host=None, selector=True):
    torch_module(fake)
    cuda_host(fake, host)
    if selector:
        fake("vllm.v1.attention.selector", AttentionSelectorConfig=SelectorConfig)
    registry(fake, classes)


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
    paths = {"CPU_MLA": "vllm.v1.attention.backends.mla.cpu_mla", "AMX_MLA": "vllm.v1.attention.backends.mla.amx_mla"}
    registry(fake, {"CPU_MLA": Backend, "AMX_MLA": Backend}, paths=paths)
    return asked


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


def a_build(fake, version="0.33.0"):
    """A build that answers everything: version, commit, KV resolution, backends, the CPU pick, the
    parser. Returns what its config functions and its CPU platform were asked."""
    fake("vllm", __version__=version, __file__="/venv/lib/python3.12/site-packages/vllm/__init__.py")
    fake("vllm._version", __commit_id__="4ba787ec9")
    kv_calls = kv_functions(fake)
    backends_host(fake, {"CPU_MLA": Backend, "AMX_MLA": Backend})
    cpu_asked = cpu_platform(fake, pick="cpu_mla")
    serve_parser_modules(fake)
    return types.SimpleNamespace(kv_calls=kv_calls, cpu_asked=cpu_asked)
