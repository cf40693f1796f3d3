# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: renamed_settings
short_description: The shared settings an inventory still sets under a role's old name, with a deprecation warning
version_added: "0.3.0"
author: fleet.vllm developers (@fleet-vllm)
description:
  - The roles read a setting several of them share by its one name, C(fleet_vllm_*). Until release 0.3.0 each role
    had its own name for it as well (C(vllm_server_platform), C(vllm_preflight_platform) and
    C(vllm_kv_cache_platform) for C(fleet_vllm_platform)), and tasks read one or the other, so that a setting reached
    some of its readers and not the others.
  - Takes the old names an inventory sets, with their values, and returns the values under the new names, so that
    M(fleet.vllm.fleet_vllm) sets the new ones from them for the release after the rename; each old name found gets a
    deprecation warning naming the new one.
  - Two old names of one setting set to different values are an error naming both (one setting has one value).
options:
  _input:
    description: The old names an inventory sets, with their values.
    type: dict
    required: true
  renamed:
    description: Each old name and the new name that replaces it.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: The new names of the renamed settings set
  ansible.builtin.debug:
    msg: "{{ {'vllm_server_platform': 'cpu'} | fleet.vllm.renamed_settings({'vllm_server_platform': 'fleet_vllm_platform'}) }}"
# {"fleet_vllm_platform": "cpu"}, and a deprecation warning
"""

RETURN = r"""
_value:
  description: The new name of each old name set, with its value.
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

display = Display()


def renamed_settings(settings, renamed):
    if not isinstance(settings, dict) or not isinstance(renamed, dict):
        raise AnsibleFilterError("fleet.vllm.renamed_settings: the old names and the renames must be mappings")
    values, source = {}, {}
    for old in sorted(settings):
        if old not in renamed:
            raise AnsibleFilterError("fleet.vllm.renamed_settings: %s is not a renamed setting" % old)
        new = renamed[old]
        if new in values and values[new] != settings[old]:
            # The values themselves are not shown: one of them may be a token.
            raise AnsibleFilterError(
                "%s and %s are both set, to different values, and both are old names of %s: set %s only"
                % (source[new], old, new, new))
        values[new], source[new] = settings[old], source.get(new, old)
        display.deprecated("%s is renamed %s, which every role of fleet.vllm reads: set %s instead (until then the "
                           "value of %s is used as %s, for every role)" % (old, new, new, old, new),
                           version="0.4.0", collection_name="fleet.vllm")
    return values


class FilterModule:
    def filters(self):
        return {"renamed_settings": renamed_settings}
