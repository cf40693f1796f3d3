# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: gateway_backends
short_description: Group a gateway's fleet hosts into one HAProxy backend per served model
version_added: "0.4.0"
author: fleet.vllm developers (@fleet-vllm)
description:
  - Takes the fleet hosts a gateway balances across and the model name each serves (its served model name as clients
    send it in a request's C(model)), and returns the gateway's backends, one per model, in the order the hosts come.
  - With one model (every fleet of one model), one backend, C(fleet_vllm), as before helper models existed; the
    gateway does not read request bodies.
  - With several models (instances of helper models beside the fleet's model, issue 26), the backend of O(default)
    (else the first host's model) is C(fleet_vllm), the one that takes requests that name no model; every other
    model's is C(fleet_vllm:) and the model name with each C(/) written C(:) (HAProxy's proxy names take letters,
    digits, C(- _ . :)).
  - Problems (a model name HAProxy's configuration cannot carry, two models whose backend names would be the same, a
    default no host serves) are returned in C(errors), one message each, naming O(variable).
options:
  _input:
    description: The fleet hosts, in the gateway's order (its server lines' order).
    type: list
    elements: str
    required: true
  models:
    description:
      - The served model name of each host of the input, in the same order (its C(vllm_server_served_model_name)); an
        empty one is the host's O(repos) entry, else O(fallback) (vLLM serves a model under its repository's name).
    type: list
    elements: str
    required: true
  repos:
    description: The model repository of each host of the input, in the same order; empty ones are O(fallback).
    type: list
    elements: str
    default: []
  fallback:
    description: The model name of a host that sets neither.
    type: str
    default: ""
  default:
    description: The model that takes requests naming no model; empty for the first host's.
    type: str
    default: ""
  variable:
    description: The variable that sets the default, for the messages.
    type: str
    default: vllm_gateway_default_model
"""

EXAMPLES = r"""
- name: Show the gateway's backends
  ansible.builtin.debug:
    msg: "{{ ['gpu-1', 'gpu-2', 'gpu-2-embed'] | fleet.vllm.gateway_backends(['kimi', 'kimi', 'org/bge-m3']) }}"
# backends: [{name: fleet_vllm, model: kimi, servers: [gpu-1, gpu-2], default: true},
#            {name: "fleet_vllm:org:bge-m3", model: org/bge-m3, servers: [gpu-2-embed], default: false}]
# of: {gpu-1: fleet_vllm, gpu-2: fleet_vllm, gpu-2-embed: "fleet_vllm:org:bge-m3"}; routed: true; errors: []
"""

RETURN = r"""
_value:
  description: The backends and where each host is.
  type: dict
  contains:
    backends:
      description: One per model, the default's first; name, model, servers (the hosts), default (a boolean).
      type: list
      elements: dict
    of:
      description: Each host's backend name (the rolling phase drains and undrains a host there).
      type: dict
    routed:
      description: Whether the gateway routes by the request's model (more than one model).
      type: bool
    errors:
      description: What must change before the gateway can be configured; empty when nothing.
      type: list
      elements: str
"""

import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_text

BACKEND = "fleet_vllm"
# The served model names haproxy.cfg.j2 writes as one word (vllm_gateway_check_model's rule).
MODEL_NAME = re.compile(r"[A-Za-z0-9._/:-]+\Z")


def backend_name(model, default):
    return BACKEND if model == default else "%s:%s" % (BACKEND, model.replace("/", ":"))


def gateway_backends(hosts, models, repos=None, fallback="", default="", variable="vllm_gateway_default_model"):
    hosts = [to_text(host) for host in hosts or []]
    repos = list(repos or [])
    if len(models or []) != len(hosts) or len(repos) not in (0, len(hosts)):
        raise AnsibleFilterError("gateway_backends: %d hosts but %d models and %d repos"
                                 % (len(hosts), len(models or []), len(repos)))
    models = [to_text(model or (repos[i] if repos else "") or fallback) for i, model in enumerate(models)]
    default = to_text(default or "")
    order = []
    for model in models:
        if model not in order:
            order.append(model)
    errors = ["%s serves the model name %s, which HAProxy's configuration cannot carry: letters, digits, . _ / : - only"
              % (host, _shown(model)) for host, model in zip(hosts, models) if not MODEL_NAME.match(model)]
    if default and default not in order:
        errors.append("%s is %s, which no fleet host of this gateway serves (%s): set one of those, or leave it empty "
                      "for the first host's" % (variable, _shown(default), ", ".join(order) or "none"))
    chosen = default if default in order else (order[0] if order else "")
    order = [chosen] + [model for model in order if model != chosen] if order else []
    names = {}
    for model in order:
        name = backend_name(model, chosen)
        if name in names:
            errors.append("the models %s and %s would have the same gateway backend %s: serve one of them under another "
                          "name (vllm_server_served_model_name)" % (_shown(names[name]), _shown(model), name))
        names.setdefault(name, model)
    backends = [{"name": backend_name(model, chosen), "model": model, "default": model == chosen,
                 "servers": [host for host, served in zip(hosts, models) if served == model]} for model in order]
    # A gateway with no fleet host yet still has its backend (no server: it answers 503).
    backends = backends or [{"name": BACKEND, "model": to_text(fallback), "default": True, "servers": []}]
    return {"backends": backends, "of": {host: backend_name(model, chosen) for host, model in zip(hosts, models)},
            "routed": len(order) > 1, "errors": errors}


def _shown(value):
    # As JSON would quote it, so that a control character shows as an escape, never raw.
    return "\"%s\"" % value.encode("unicode_escape").decode("ascii").replace("\"", "\\\"")


class FilterModule(object):
    def filters(self):
        return {"gateway_backends": gateway_backends}
