# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: mask_credentials
short_description: Mask the credentials inside URLs before a message shows them
version_added: "0.2.0"
author: fleet.vllm developers (@fleet-vllm)
description:
  - Replaces the user information of every URL in the text (C(https://user:password@host) becomes
    C(https://user:****@host); C(https://TOKEN@host) becomes C(https://****@host)) and the values of
    query parameters that carry a secret (C(token=), C(access_token=), C(api_key=), C(password=),
    C(sig=), C(X-Amz-Signature=), ...) by C(****).
  - For messages and results that name an index, a hub endpoint or a mirror, which an inventory may give
    with credentials.
options:
  _input:
    description: The text; anything else is returned unchanged.
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: Name the index without its password
  ansible.builtin.debug:
    msg: "installing from {{ vllm_runtime_index_url | fleet.vllm.mask_credentials }}"
# installing from https://fleet:****@pypi.example.com/simple
"""

RETURN = r"""
_value:
  description: The text with the credentials masked.
  type: raw
"""

from ansible_collections.fleet.vllm.plugins.module_utils._credentials import mask_credentials


class FilterModule(object):
    def filters(self):
        return {"mask_credentials": mask_credentials}
