#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

# The documentation of the action plugin plugins/action/check_inputs.py, which does the work on
# the controller (no module is sent to the host).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: check_inputs
short_description: Check the type of every variable set for a role of the collection, before anything changes
version_added: "0.3.0"
description:
  - Reads C(meta/argument_specs.yml) of every role under O(roles_dir) and checks every variable the play sets for
    an option of any entry point of them (inventory, play vars, C(-e)) against the type, the elements, the choices
    and the sub-options declared there, on the controller.
  - ansible-core checks a role's argument spec only for the entry point that is called, when it is called; so a
    wrongly typed variable that only the rolling phase of C(deploy.yml) reads would stop the run after the download
    and the install. M(fleet.vllm.fleet_vllm) runs this first in every play (every role of the collection depends on
    it), so that such a variable stops the run, named, before anything changes.
  - Defaults and C(required) stay each entry point's own check (a role's defaults are templates only its context
    resolves). Each variable is evaluated alone; one that cannot be evaluated here (its value reads what only its
    role's context has) is left to its role's check and listed in RV(not_evaluated).
  - An option two entry points declare with different types is an error of the collection (one setting, one type).
  - Messages never show the value of an option marked C(no_log).
author:
  - fleet.vllm developers (@fleet-vllm)
options:
  roles_dir:
    description: The collection's roles directory (each role's spec is C(<roles_dir>/<role>/meta/argument_specs.yml)).
    type: path
    required: true
attributes:
  action:
    support: full
    description: An action plugin; it runs on the controller.
  platform:
    support: full
    platforms: all
    description: Runs on the controller.
extends_documentation_fragment: [fleet.vllm.attributes.read_only]
"""

EXAMPLES = r"""
- name: Check the type of every variable set for a role of the collection
  fleet.vllm.check_inputs:
    roles_dir: "{{ role_path | dirname }}"
"""

RETURN = r"""
checked:
  description: How many variables were set and checked.
  returned: always
  type: int
argument_errors:
  description: One message per wrongly typed variable, naming it.
  returned: always
  type: list
  elements: str
not_evaluated:
  description: The variables set that could not be evaluated on their own here (left to their role's own check).
  returned: always
  type: list
  elements: str
"""
