"""The server command line filters' errors, word for word (the vllm_server role fails with them),
and the words they render that test_vllm_server_argv.py does not pin down."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.fleet.vllm.plugins.filter.systemd_exec_args import systemd_exec_args
from ansible_collections.fleet.vllm.plugins.filter.vllm_server_argv import vllm_server_argv

ROLE_ARGS = {"port": 8000, "tensor_parallel_size": 8}


def argv_error(args, extra=None, **kwargs):
    with pytest.raises(AnsibleFilterError) as caught:
        vllm_server_argv(args, extra=extra, **kwargs)
    return str(caught.value)


@pytest.mark.parametrize("args, extra, message", [
    (["--port", "1"], None, "vllm_server_argv expects a dict of engine arguments, got list"),
    ({"bad flag": 1}, None,
     "engine arguments: 'bad flag' is not an engine argument name (use names such as tensor_parallel_size)"),
    (ROLE_ARGS, {"-x": 1},
     "vllm_server_extra_args: '-x' is not an engine argument name (use names such as tensor_parallel_size)"),
    (ROLE_ARGS, "--enforce-eager",
     "vllm_server_extra_args must be a dict of engine arguments or a list of strings, got '--enforce-eager'"),
    (ROLE_ARGS, ["--hf-token=hf_x", "--api-key", "k"],
     "vllm_server_extra_args sets --hf-token (as --hf-token): secrets never go on the command line (it is visible to "
     "every user in ps and lands in the world-readable unit); set vllm_server_hf_token, which goes to the root-only "
     "environment file"),
    (ROLE_ARGS, {"disable_log_requests": True},
     "vllm_server_extra_args sets --disable-log-requests: leave it out, it is deprecated (vLLM PR #21739), rejected by "
     "some builds, and request logging is already off by default"),
    (ROLE_ARGS, ["--tensor_parallel_size=2", "--port=8001=x"],
     "vllm_server_extra_args sets --port, --tensor-parallel-size, which the role already sets from its own variables: "
     "change those instead; set vllm_server_port, with fleet_vllm_engine_socket empty"),
])
def test_argv_errors_in_full(args, extra, message):
    assert argv_error(args, extra) == message


def test_the_variable_named_is_the_callers():
    assert argv_error(ROLE_ARGS, {"port": 1}, variable="vllm_probe_extra_args") == (
        "vllm_probe_extra_args sets --port, which the role already sets from its own variables: change those instead; "
        "set vllm_server_port, with fleet_vllm_engine_socket empty")


def test_booleans_in_lists_and_flags_after_an_empty_list():
    assert vllm_server_argv({"served_model_name": [], "flags": [True, False, 3], "port": 1}) == [
        "--flags", "true", "false", "3", "--port", "1"]
    assert vllm_server_argv({"x": 0, "y": 0.0}) == ["--x", "0", "--y", "0.0"]


def test_control_characters_are_c_escaped():
    assert systemd_exec_args(["/bin/echo", "a\x01\x1f\x7f\x80 !"]) == '/bin/echo "a\\x01\\x1f\\x7f\x80 !"'
    assert systemd_exec_args(["/bin/echo", "\a\b\f\v\r"]) == '/bin/echo "\\a\\b\\f\\v\\r"'


@pytest.mark.parametrize("argv, message", [
    ("/bin/echo hi", "systemd_exec_args expects a list of arguments, got '/bin/echo hi'"),
    ({"a": 1}, "systemd_exec_args expects a list of arguments, got {'a': 1}"),
    ([], "the command of a systemd Exec line must be an absolute path, got []"),
    (["python", "-V"], "the command of a systemd Exec line must be an absolute path, got ['python']"),
    (["/bin/echo", "a\0b"], "an argument contains a NUL character, which no command line can carry"),
    (["/bin/echo\0", "x"], "an argument contains a NUL character, which no command line can carry"),
])
def test_exec_line_errors_in_full(argv, message):
    with pytest.raises(AnsibleFilterError) as caught:
        systemd_exec_args(argv)
    assert str(caught.value) == message
