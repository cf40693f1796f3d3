"""fleet.vllm.environment_file_lines in process: the lines of the NCCL environment file and of the
server's secrets file, and the errors the vllm_nccl and vllm_server roles fail with. The role tests
render the same filter through Ansible; these compare whole results."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.fleet.vllm.plugins.filter.environment_file_lines import environment_file_lines

NCCL_DEFAULTS = {"NCCL_PROTO": "LL", "NCCL_P2P_LEVEL": "SYS"}
SECRETS = {"NCCL_IB_PASSWORD": "keep secrets out of the NCCL file"}


def nccl(env, **kwargs):
    kwargs = dict(dict(defaults=NCCL_DEFAULTS, allowed=["NCCL_*", "CUDA_DEVICE_MAX_CONNECTIONS"], denied=SECRETS,
                       variable="fleet_vllm_nccl_env"), **kwargs)
    return environment_file_lines(env, **kwargs)


def nccl_error(env, **kwargs):
    with pytest.raises(AnsibleFilterError) as caught:
        nccl(env, **kwargs)
    return str(caught.value)


def test_the_documented_example():
    assert nccl({"NCCL_P2P_LEVEL": None, "NCCL_P2P_DISABLE": 1}) == ['NCCL_P2P_DISABLE="1"', 'NCCL_PROTO="LL"']


def test_values_are_quoted_for_systemd_and_the_shell():
    assert nccl({"NCCL_DEBUG": True, "NCCL_IB_DISABLE": False, "NCCL_SOCKET_IFNAME": 'a\\b"c$d`e f',
                 "CUDA_DEVICE_MAX_CONNECTIONS": 1.5}) == [
        'CUDA_DEVICE_MAX_CONNECTIONS="1.5"', 'NCCL_DEBUG="1"', 'NCCL_IB_DISABLE="0"', 'NCCL_P2P_LEVEL="SYS"',
        'NCCL_PROTO="LL"', 'NCCL_SOCKET_IFNAME="a\\\\b\\"c\\$d\\`e f"']


def test_only_the_four_special_characters_are_escaped():
    assert environment_file_lines({"X": "eXt0 'a' \\X"}) == ['X="eXt0 \'a\' \\\\X"']


def test_without_defaults_or_allowed_list_every_valid_name_is_taken():
    assert environment_file_lines({"HF_TOKEN": "hf_x", "VLLM_API_KEY": "", "_X": 0}) == [
        'HF_TOKEN="hf_x"', 'VLLM_API_KEY=""', '_X="0"']
    assert environment_file_lines({}) == []


def test_an_allowed_name_needs_the_whole_name_or_a_prefix_pattern():
    assert nccl_error({"NCCL": 1, "CUDA_DEVICE_MAX_CONNECTIONSX": 2}) == (
        "fleet_vllm_nccl_env holds CUDA_DEVICE_MAX_CONNECTIONSX, NCCL, which is not allowed here: use names matching NCCL_*, "
        "CUDA_DEVICE_MAX_CONNECTIONS (add a documented variable to the allowed list if it is really needed)")


@pytest.mark.parametrize("env, message", [
    (["NCCL_DEBUG=INFO"], "fleet_vllm_nccl_env must be a dict of NAME: value, got ['NCCL_DEBUG=INFO']"),
    ({"NCCL-DEBUG": 1, "1NCCL": 2, "NCCL DEBUG": 3},
     "fleet_vllm_nccl_env holds 1NCCL, NCCL DEBUG, NCCL-DEBUG: an environment variable name is letters, digits and "
     "underscores, not starting with a digit"),
    ({"NCCL_IB_PASSWORD": "x"}, "fleet_vllm_nccl_env holds NCCL_IB_PASSWORD: keep secrets out of the NCCL file"),
    ({"NCCL_DEBUG": ["INFO"]}, "fleet_vllm_nccl_env: NCCL_DEBUG is ['INFO']; give a single value"),
    ({"NCCL_DEBUG": {"a": 1}}, "fleet_vllm_nccl_env: NCCL_DEBUG is {'a': 1}; give a single value"),
    ({"NCCL_DEBUG": ("INFO",)}, "fleet_vllm_nccl_env: NCCL_DEBUG is ('INFO',); give a single value"),
    ({"NCCL_DEBUG": "a\nb"}, "fleet_vllm_nccl_env: NCCL_DEBUG contains a line break or NUL, which an environment file cannot carry"),
    ({"NCCL_DEBUG": "a\rb"}, "fleet_vllm_nccl_env: NCCL_DEBUG contains a line break or NUL, which an environment file cannot carry"),
    ({"NCCL_DEBUG": "a\x00b"}, "fleet_vllm_nccl_env: NCCL_DEBUG contains a line break or NUL, which an environment file cannot carry"),
])
def test_errors_in_full(env, message):
    assert nccl_error(env) == message


def test_a_denied_name_set_to_null_is_no_error():
    assert nccl({"NCCL_IB_PASSWORD": None}) == ['NCCL_P2P_LEVEL="SYS"', 'NCCL_PROTO="LL"']


def test_the_default_variable_name():
    with pytest.raises(AnsibleFilterError) as caught:
        environment_file_lines("NCCL_DEBUG=INFO")
    assert str(caught.value) == "the environment must be a dict of NAME: value, got 'NCCL_DEBUG=INFO'"
