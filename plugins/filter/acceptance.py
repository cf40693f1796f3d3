# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The acceptance run's filters: the fleet's verdicts and table, and the check of a profile
(plugins/module_utils/_acceptance.py holds the logic)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.fleet.vllm.plugins.module_utils._acceptance import canary_verdict, profile_errors, table, verdicts


def acceptance_verdicts(results, tolerance):
    """{"verdicts": {host: verdict}, "table": [lines]} from {host: what fleet.vllm.vllm_acceptance returned}."""
    if not isinstance(results, dict):
        raise AnsibleFilterError("acceptance_verdicts: expects a mapping of host to result, got %r" % (results,))
    try:
        tolerance = float(tolerance)
    except (TypeError, ValueError):
        raise AnsibleFilterError("vllm_acceptance_tolerance is %r: set a percentage above 0 and below 100" % (tolerance,))
    decided = verdicts(results, tolerance)
    return {"verdicts": decided, "table": table(results, decided)}


def acceptance_canary(measured, reference, tolerance):
    """A canary's verdict on its new state against its reference (what it made on the state it ran before)."""
    if not isinstance(measured, dict) or not isinstance(reference, dict) \
            or not isinstance(reference.get("output_tokens_per_s"), (int, float)):
        raise AnsibleFilterError("acceptance_canary: expects the module's result and a reference with output_tokens_per_s,"
                                 " got %r and %r" % (measured, reference))
    try:
        tolerance = float(tolerance)
    except (TypeError, ValueError):
        raise AnsibleFilterError("vllm_acceptance_tolerance is %r: set a percentage above 0 and below 100" % (tolerance,))
    return canary_verdict(measured, reference, tolerance)


def acceptance_profile_errors(profile, name="vllm_acceptance_profile"):
    """What is wrong with an acceptance profile, each naming the setting; [] when nothing is."""
    return profile_errors(profile, name)


class FilterModule(object):
    def filters(self):
        return {"acceptance_verdicts": acceptance_verdicts, "acceptance_canary": acceptance_canary,
                "acceptance_profile_errors": acceptance_profile_errors}
