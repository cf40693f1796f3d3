# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The completion that proves a vLLM engine serves, and how its answer is judged: one definition
for the readiness check of vllm_server_wait (and so verify.yml), the endpoint probe of
vllm_diagnose and the gateways' HAProxy check (the filter fleet.vllm.probe_body).

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

# The first token comes out of the prefill, the second out of a decode step, which reads the KV
# cache through the decode attention kernel. One token is not enough: with an FP8 KV cache its
# decode kernel cannot read, the real CPU engine answers a one-token completion and dies at the
# second token (docs/evidence.md section 5). Two tokens are not enough either when the model's
# first token is its end-of-sequence (or a stop) token: the completion ends after the prefill and
# no decode step runs. vLLM's sampling parameters min_tokens (EOS and stop token ids are masked
# until that many tokens are out) and ignore_eos (an EOS does not end the sequence, nor do the
# generation config's extra EOS ids) force the second token; both are fields of vLLM's
# ChatCompletionRequest (vllm/entrypoints/openai/chat_completion/protocol.py in 0.16.0 and 0.33.0)
# and reach SamplingParams as they are.
PROBE_MAX_TOKENS = 2
PROBE_PROMPT = "Say OK."
PROBE_PATH = "/v1/chat/completions"


def probe_request(model):
    """The body of the probe's chat completion for the served model name ``model``."""
    if not isinstance(model, str) or not model.strip():
        raise ValueError("the probe's model (the served model name) must be a non-empty string, got %r" % (model,))
    return {
        "model": model,
        "messages": [{"role": "user", "content": PROBE_PROMPT}],
        "max_tokens": PROBE_MAX_TOKENS,
        "min_tokens": PROBE_MAX_TOKENS,
        "ignore_eos": True,
        "temperature": 0,
    }


def probe_shortfall(answer):
    """Why a probe's answer (the parsed JSON of a 200) does not prove a decode step, or None: fewer
    completion tokens than asked (an engine that ignored min_tokens and ignore_eos, or stopped
    early). An answer without usage cannot tell and passes."""
    usage = answer.get("usage") if isinstance(answer, dict) else None
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens < PROBE_MAX_TOKENS:
        return ("the completion has %d token(s) (usage.completion_tokens), not the %d that max_tokens and min_tokens ask "
                "for: no decode step ran, so it does not prove that the engine decodes" % (tokens, PROBE_MAX_TOKENS))
    return None
