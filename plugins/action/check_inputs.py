# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""fleet.vllm.check_inputs: the type of every variable set for a role of the collection, checked
on the controller against every entry point's argument spec (plugins/modules/check_inputs.py
documents it; module_utils/_input_spec.py holds the logic)."""

from __future__ import annotations

import os

import yaml

from ansible.errors import AnsibleError, AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.parameters import remove_values
from ansible.plugins.action import ActionBase

from ansible_collections.fleet.vllm.plugins.module_utils._input_spec import entry_points, merge, no_log_values, report


def role_inputs(roles_dir):
    """The merged types of every entry point of every role under ``roles_dir``."""
    entries = []
    for role in sorted(os.listdir(roles_dir)):
        path = os.path.join(roles_dir, role, "meta", "argument_specs.yml")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                entries.extend(entry_points(role, yaml.safe_load(handle)))
    if not entries:
        raise ValueError("no role with a meta/argument_specs.yml under %s" % roles_dir)
    return merge(entries)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(("roles_dir",))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        roles_dir = self._task.args.get("roles_dir")
        if not isinstance(roles_dir, str) or not roles_dir:
            raise AnsibleActionFail("fleet.vllm.check_inputs: roles_dir, the collection's roles directory, is required")
        try:
            spec = role_inputs(os.path.realpath(roles_dir))
        except (OSError, ValueError, yaml.YAMLError) as exc:
            raise AnsibleActionFail("fleet.vllm.check_inputs: %s" % exc) from exc
        # Each variable is evaluated alone: a derived default that a wrong value breaks (a combine
        # over a list) must not hide which value is wrong.
        values, unresolved = {}, []
        for name in sorted(spec):
            if name in task_vars:
                try:
                    values[name] = self._templar.template(task_vars[name])
                except AnsibleError:
                    unresolved.append(name)
        validation = ArgumentSpecValidator(spec).validate(values, validate_role_argument_spec=True)
        errors = [remove_values(message, no_log_values(spec, values)) for message in validation.error_messages]
        result.update(report(sorted(values), unresolved, errors))
        return result
