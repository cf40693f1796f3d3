# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: probe_body
short_description: The JSON body of the collection's readiness completion for a served model
version_added: "0.3.0"
author: fleet.vllm developers (@fleet-vllm)
description:
  - The chat completion that proves a vLLM engine serves, as one JSON text - the same request that
    M(fleet.vllm.vllm_server_wait) and M(fleet.vllm.vllm_diagnose) send (one definition, in the
    collection's module_utils).
  - Two tokens (C(max_tokens) 2) with vLLM's C(min_tokens) 2 and C(ignore_eos), so that the second
    token comes out of a decode step even when the model's first token is its end-of-sequence token.
  - For the gateways' HAProxy check (fleet.vllm.vllm_gateway), which sends it as a string.
options:
  _input:
    description: The served model name (vLLM's C(--served-model-name)).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: The body of the gateways' completion check
  ansible.builtin.set_fact:
    check_body: "{{ 'kimi-k2.5' | fleet.vllm.probe_body }}"
# {"model": "kimi-k2.5", "messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 2, "min_tokens": 2, ...}
"""

RETURN = r"""
_value:
  description: The request body as JSON text.
  type: str
"""

import json

from ansible.errors import AnsibleFilterError

from ansible_collections.fleet.vllm.plugins.module_utils._readiness import probe_request


def probe_body(model):
    try:
        return json.dumps(probe_request(model))
    except ValueError as exc:
        raise AnsibleFilterError("fleet.vllm.probe_body: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"probe_body": probe_body}
