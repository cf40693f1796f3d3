"""The collection's one readiness completion (plugins/module_utils/_readiness.py), which
vllm_server_wait, vllm_diagnose and the gateways' HAProxy check (the filter fleet.vllm.probe_body)
send, and how its answer is judged."""

from __future__ import annotations

import json

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.fleet.vllm.plugins.filter.probe_body import probe_body
from ansible_collections.fleet.vllm.plugins.module_utils import _failures
from ansible_collections.fleet.vllm.plugins.module_utils._readiness import (
    PROBE_MAX_TOKENS, PROBE_PATH, PROBE_PROMPT, probe_request, probe_shortfall,
)


def test_the_probe_asks_for_a_prefill_and_a_decode_step_even_past_an_eos():
    assert (PROBE_MAX_TOKENS, PROBE_PROMPT, PROBE_PATH) == (2, "Say OK.", "/v1/chat/completions")
    assert probe_request("kimi-k2.5") == {
        "model": "kimi-k2.5",
        "messages": [{"role": "user", "content": "Say OK."}],
        "max_tokens": 2,
        "min_tokens": 2,
        "ignore_eos": True,
        "temperature": 0,
    }


@pytest.mark.parametrize("model", ["", "  ", None, 7, ["kimi"]])
def test_the_probe_needs_a_model_name(model):
    with pytest.raises(ValueError) as caught:
        probe_request(model)
    assert str(caught.value) == "the probe's model (the served model name) must be a non-empty string, got %r" % (model,)


def test_the_gateways_check_sends_the_same_body():
    assert json.loads(probe_body("kimi-k2.5")) == probe_request("kimi-k2.5")
    with pytest.raises(AnsibleFilterError, match=r"^fleet\.vllm\.probe_body: the probe's model \(the served model name\) must"):
        probe_body("")


@pytest.mark.parametrize("tokens", [0, 1])
def test_an_answer_of_fewer_tokens_proves_no_decode_step(tokens):
    assert probe_shortfall({"usage": {"completion_tokens": tokens}}) == (
        "the completion has %d token(s) (usage.completion_tokens), not the 2 that max_tokens and min_tokens ask for: no "
        "decode step ran, so it does not prove that the engine decodes" % tokens)


@pytest.mark.parametrize("answer", [
    {"usage": {"completion_tokens": 2}},
    {"usage": {"completion_tokens": 3}},
    {"choices": [{"message": {"content": "OK"}}]},  # no usage: cannot tell
    {"usage": None},
    {"usage": {"completion_tokens": "1"}},
    {"usage": {"completion_tokens": True}},  # a bool is no count
    None,
    ["not", "a", "dict"],
])
def test_an_answer_that_cannot_tell_or_has_the_tokens_passes(answer):
    assert probe_shortfall(answer) is None


def test_the_failure_catalogue_still_offers_the_probe():
    """Callers import the probe from _failures, where it was defined before it had a module of its own."""
    assert _failures.probe_request is probe_request and _failures.probe_shortfall is probe_shortfall
    assert (_failures.PROBE_MAX_TOKENS, _failures.PROBE_PROMPT) == (PROBE_MAX_TOKENS, PROBE_PROMPT)
