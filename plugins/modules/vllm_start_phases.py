#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_start_phases
short_description: Read how long one start of a vLLM unit took to become ready, phase by phase
version_added: "0.1.0"
description:
  - Reads the journal of one start of the vLLM systemd unit (one C(InvocationID)) with the time of each
    line (C(journalctl -o short-unix)) and returns, in seconds since the process started (systemd's
    C(Started) line), when the weights were loaded, when the engine was ready (KV cache allocated, graphs
    captured or compiled, the model warmed up), when the API server listened, and when the first
    completion answered.
  - "The lines read: C(Model loading took ... seconds) or else C(Loading weights took ... seconds) (weights),
    C(init engine (profile, create kv cache, warmup model) took ...) (engine), C(Application startup complete.)
    or else C(Starting vLLM API server ... on)/C(Starting vLLM server on) (API). The first completion's time is
    not in the journal: it is O(first_completion_at), such as the time M(fleet.vllm.vllm_server_wait) returned."
  - A phase whose line is not in the journal is V(null) and named in RV(missing) with the reason; no
    number is made up.
  - Only reads; it changes nothing.
author:
  - fleet.vllm developers (@fleet-vllm)
attributes:
  check_mode:
    description: Reads the journal as without it.
  platform:
    description: Runs on the host of the service; needs C(systemctl) and C(journalctl).
extends_documentation_fragment: [fleet.vllm.attributes, fleet.vllm.attributes.read_only]
options:
  unit:
    description: The systemd unit of the engine, such as C(vllm.service).
    type: str
    required: true
  invocation_id:
    description:
      - The C(InvocationID) of the start to read (32 hexadecimal digits, as C(systemctl show -p InvocationID)
        prints it).
      - Not set, the unit's current one, the start now running or the last one.
    type: str
  first_completion_at:
    description:
      - The unix time (seconds, fractions allowed) at which the first completion of this start answered,
        such as the readiness probe's. Not set, RV(phases.first_completion) is V(null).
    type: float
"""

EXAMPLES = r"""
- name: Wait for the engine and its first completion
  fleet.vllm.vllm_server_wait:
    unit: vllm.service
    served_model_name: kimi-k2.5
  register: __wait

# vllm_server_wait's last step is the completion: the time just after it stands for its answer (on
# the controller's clock, which should agree with the host's).
- name: Read how long this start took, phase by phase
  fleet.vllm.vllm_start_phases:
    unit: vllm.service
    first_completion_at: "{{ now().timestamp() }}"
  register: __phases

- name: Read the phases of an earlier start
  fleet.vllm.vllm_start_phases:
    unit: vllm.service
    invocation_id: 0d7e3a3ad6a54e0d9bc3f0a8b1e5c2f4
"""

RETURN = r"""
invocation_id:
  description: The C(InvocationID) of the start read.
  returned: always
  type: str
  sample: 0d7e3a3ad6a54e0d9bc3f0a8b1e5c2f4
started_at:
  description: The unix time of systemd's C(Started) line of that start (else its first line); V(null) when the journal holds no line of it.
  returned: always
  type: float
  sample: 1796392736.138826
started_from:
  description: Which line stands for the process start.
  returned: always
  type: str
  sample: systemd's Started line
phases:
  description: Seconds since RV(started_at) at which each phase was reached; V(null) when its line is missing.
  returned: always
  type: dict
  contains:
    weights_loaded:
      description: The weights were read (and processed).
      type: float
    engine_ready:
      description: The engine core had profiled memory, allocated the KV cache, captured or compiled its graphs and warmed up.
      type: float
    api_ready:
      description: The API server listened.
      type: float
    first_completion:
      description: The first completion answered (from O(first_completion_at)).
      type: float
  sample: {"weights_loaded": 43.638, "engine_ready": 47.413, "api_ready": 49.678, "first_completion": 50.21}
durations:
  description: >-
    Seconds between consecutive phases (C(start_to_weights), C(weights_to_engine), C(engine_to_api),
    C(api_to_first_completion)); V(null) where either end is missing.
  returned: always
  type: dict
  sample: {"start_to_weights": 43.638, "weights_to_engine": 3.775, "engine_to_api": 2.265, "api_to_first_completion": 0.532}
missing:
  description: The phases not found, each with why (C(phase), C(why)).
  returned: always
  type: list
  elements: dict
  sample: [{"phase": "first_completion", "why": "no first completion time given (first_completion_at)"}]
reported:
  description: >-
    What vLLM's own lines state, by its own timers (C(loading_weights_seconds), C(model_loading_seconds),
    C(model_loading_gib), C(init_engine_seconds), C(compilation_seconds), C(graph_capture_seconds),
    C(torch_compile_seconds), C(kv_cache_tokens), C(kv_cache_pool)), those present.
  returned: always
  type: dict
  sample: {"loading_weights_seconds": 0.04, "init_engine_seconds": 2.79, "kv_cache_tokens": 466032, "kv_cache_pool": "CPU"}
"""

import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fleet.vllm.plugins.module_utils import _start_phases, _units

_INVOCATION_ID_RE = re.compile(r"^[0-9a-f]{32}$")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            unit=dict(type="str", required=True),
            invocation_id=dict(type="str"),
            first_completion_at=dict(type="float"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    result = dict(changed=False, invocation_id=None, started_at=None, started_from=None,
                  phases=dict((name, None) for name in _start_phases.PHASES),
                  durations=dict((name, None) for name, dummy, dummy2 in _start_phases.DURATIONS), missing=[], reported={})
    invocation_id = params["invocation_id"]
    if invocation_id is None:
        systemctl = module.get_bin_path("systemctl", required=True)
        rc, out, err = _units.run_c(module, _units.show_argv(systemctl, params["unit"], ("InvocationID",)))
        if rc != 0:
            module.fail_json(msg="cannot read the InvocationID of %s: %s" % (params["unit"], err.strip()), **result)
        invocation_id = _units.parse_properties(out).get("InvocationID", "")
        if not invocation_id:
            module.fail_json(msg="%s has no InvocationID: it has not been started since boot, so there is no start to "
                                 "read" % params["unit"], **result)
    invocation_id = invocation_id.strip().lower().replace("-", "")
    if not _INVOCATION_ID_RE.match(invocation_id):
        module.fail_json(msg="invocation_id %r is not an InvocationID (32 hexadecimal digits)" % invocation_id, **result)
    result["invocation_id"] = invocation_id
    journalctl = module.get_bin_path("journalctl", required=True)
    rc, out, err = _units.run_c(module, _start_phases.invocation_journal_argv(journalctl, invocation_id))
    if rc != 0:
        module.fail_json(msg="journalctl could not read the start %s of %s: %s" % (invocation_id, params["unit"], err.strip()),
                         **result)
    phases = _start_phases.start_phases(out, params["first_completion_at"])
    for key in ("started_at", "started_from", "phases", "durations", "missing", "reported"):
        result[key] = phases[key]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
