# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: load_strategy
short_description: Decide how vLLM reads the checkpoint's safetensors files (--safetensors-load-strategy)
version_added: "0.9.0"
author: fleet.vllm developers (@fleet-vllm)
description:
  - Turns the setting (V(auto), V(default) or a value), what the installed vLLM's parser takes for
    C(--safetensors-load-strategy) (RV(fleet.vllm.vllm_probe#module:server_flag_choices)) and where the model's files
    are (RV(fleet.vllm.host_state#module:storage)) into the arguments to add to the server's command line and the reason.
  - V(auto) - V(prefetch) on a local disk or a network file system where the build takes it and the checkpoint fits in
    90 % of the host's memory; V(eager) on a network file system where the build has no prefetch; nothing (vLLM's
    default) otherwise, on memory file systems and where the build has no such option. The facts and their sources
    are in the collection's docs/evidence.md, section 20.
  - V(default) never adds the option. A value is added as it is, and refused (the result's C(error)) when the
    installed build's parser does not take it.
options:
  _input:
    description: The setting (C(vllm_server_load_strategy)).
    type: str
    required: true
  choices:
    description: The probe's answer for C(--safetensors-load-strategy); V(null) or empty when it was not asked.
    type: dict
  storage:
    description: The look's storage of the served model directory; V(null) when not looked at.
    type: dict
  build:
    description: How to name the installed vLLM in the reason.
    type: str
    default: the installed vLLM
  variable:
    description: The setting's variable, named in an error.
    type: str
    default: vllm_server_load_strategy
"""

EXAMPLES = r"""
- name: Decide the load strategy
  ansible.builtin.set_fact:
    load: >-
      {{ 'auto' | fleet.vllm.load_strategy(choices=probe.server_flag_choices['--safetensors-load-strategy'],
                                            storage=look.storage) }}
# load.argv == ['--safetensors-load-strategy', 'prefetch'] on ext4 with vLLM 0.33.0; load.reason says why
"""

RETURN = r"""
_value:
  description: The decision.
  type: dict
  contains:
    argv:
      description: What to add to the server's command line (empty for vLLM's default).
      type: list
      elements: str
    strategy:
      description: The value passed, or V(null).
      type: str
    reason:
      description: Why, in one line.
      type: str
    error:
      description: Why the setting cannot be applied (then C(argv) is empty), else V(null).
      type: str
"""

import re

from ansible.errors import AnsibleFilterError

from ansible_collections.fleet.vllm.plugins.module_utils._load_strategy import FLAG, accepted_values, decide_load_strategy

# A value of the option is one lower-case word (vLLM's are eager, lazy, prefetch, torchao).
WORD = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")


def load_strategy(setting, choices=None, storage=None, build="the installed vLLM", variable="vllm_server_load_strategy"):
    if not isinstance(setting, str) or not WORD.match(setting.strip()):
        raise AnsibleFilterError("load_strategy: %s must be auto, default or a value of %s (one lower-case word), got %r"
                                 % (variable, FLAG, setting))
    setting = setting.strip()
    storage = storage or {}
    if setting == "default":
        return dict(argv=[], strategy=None, error=None,
                    reason="%s is default: %s is left out, vLLM's default applies" % (variable, FLAG))
    if setting != "auto" and not choices:
        return dict(argv=[FLAG, setting], strategy=setting, error=None, reason=(
            "%s is %s, added as it is: %s was not asked which values its parser takes (the command line is checked only "
            "with vllm_server_validate_args and an installed venv)" % (variable, setting, build)))
    if not choices:
        return dict(argv=[], strategy=None, error=None, reason=(
            "%s was not asked which values its parser takes for %s (the command line is checked only with "
            "vllm_server_validate_args and an installed venv): %s is left out, vLLM's default applies" % (build, FLAG, FLAG)))
    values, source = accepted_values(choices)
    if setting != "auto":
        if values is not None and setting in values:
            return dict(argv=[FLAG, setting], strategy=setting, error=None,
                        reason="%s is %s, which %s takes (%s)" % (variable, setting, build, source))
        takes = "takes %s (%s)" % (", ".join(values), source) if values else source
        return dict(argv=[], strategy=None, reason=None, error=(
            "%s is %s, which %s does not take for %s: %s. Set %s to auto (decided from the build and the file "
            "system), default (vLLM's own), or a value it takes." % (variable, setting, build, FLAG, takes, variable)))
    if values is None and choices.get("error"):
        return dict(argv=[], strategy=None, error=None, reason="%s: %s; %s is left out, vLLM's default applies" % (
            build, source, FLAG))
    checkpoint, memory = storage.get("safetensors_bytes"), storage.get("mem_total_bytes")
    sized = bool(checkpoint) and bool(memory)
    decided = decide_load_strategy(values, storage.get("fs_type"), build=build,
                                   checkpoint_bytes=checkpoint if sized else None,
                                   available_bytes=memory if sized else None)
    return dict(decided, error=None)


class FilterModule(object):
    def filters(self):
        return {"load_strategy": load_strategy}
