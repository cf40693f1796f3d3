"""fleet.vllm.unsafe_inputs: every string of an input, each element of a list and each key and value of
a dict, checked on its own (issue 24 point 11: the check of a list's repr never saw the newline of its
element, which the unit template wrote as a directive of its own)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.fleet.vllm.plugins.filter.unsafe_inputs import unsafe_inputs


@pytest.mark.parametrize("inputs, found", [
    ({"a": "x\ny"}, ["a (a newline)"]),
    ({"a": "x\ry"}, ["a (a carriage return)"]),
    ({"a": "x\x00"}, ["a (a NUL)"]),
    ({"a": "x\x1b[0m"}, ["a (a control character)"]),
    ({"a": "x\x7f"}, ["a (a control character)"]),
    # the repr of these has no newline: their elements do
    ({"o": {"ExecPaths": ["/usr", "/x\nExecStartPost=+/bin/sh"]}}, ["o.ExecPaths[1] (a newline)"]),
    ({"o": ["ok", ["deep\n"]]}, ["o[1][0] (a newline)"]),
    ({"o": {"ProtectSystem": "strict\nUser=root"}}, ["o.ProtectSystem (a newline)"]),
    ({"o": {"Key\n": "v"}}, ["o (a key) (a newline)"]),
    ({"a": "x\n", "b": ["y\r"]}, ["a (a newline)", "b[0] (a carriage return)"]),
])
def test_a_control_character_is_found_where_it_is(inputs, found):
    assert unsafe_inputs(inputs) == found
    assert unsafe_inputs(inputs, kind="token") == found


@pytest.mark.parametrize("inputs", [
    {"a": "strict", "b": "noaccess", "c": "char-nvidia* rw"},  # "n" and "r" are letters, not line breaks
    {"o": {"ProtectSystem": "strict", "ExecPaths": ["/usr", "/opt"], "PrivateTmp": None, "Nice": 5, "X": True}},
    {"a": "", "b": [], "c": {}, "d": 1.5},
    {"a": "kimi 100% 'q' \"d\" # \\"},  # a line takes blanks, quotes, # and backslashes
])
def test_what_a_line_can_carry_passes(inputs):
    assert unsafe_inputs(inputs) == []


@pytest.mark.parametrize("value, what", [
    ("127.0.0.1 ssl crt /tmp/mine.pem", "a blank"), ("*#", "a #"), ("/etc/a'b.pem", "a quote"),
    ('/etc/a"b.pem', "a quote"), ("/etc/a\\b.pem", "a backslash"), ("a\tb", "a tab"), ("a\u00a0b", "whitespace"),
])
def test_a_token_takes_no_blank_comment_or_quote(value, what):
    assert unsafe_inputs({"vllm_gateway_bind_address": value}, kind="token") == ["vllm_gateway_bind_address (%s)" % what]
    assert unsafe_inputs({"v": ["/ok", value]}, kind="token") == ["v[1] (%s)" % what]


def test_words_haproxy_takes_pass_as_tokens():
    assert unsafe_inputs({"a": "*", "b": "::", "c": "/etc/haproxy/fleet.pem", "d": ["/v1/models"], "e": 8080,
                          "f": "gpu-a.example.com", "g": "X-Session-Id", "h": "abc.DEF_~+/-=="}, kind="token") == []


@pytest.mark.parametrize("inputs, kind, message", [
    (["a\n"], "line", "unsafe_inputs expects a dict of inputs, name - value, got list"),
    ({"a": "b"}, "word", "unsafe_inputs: kind is line or token, not 'word'"),
])
def test_a_wrong_call_says_so(inputs, kind, message):
    with pytest.raises(AnsibleFilterError) as err:
        unsafe_inputs(inputs, kind=kind)
    assert str(err.value) == message
