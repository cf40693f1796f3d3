# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: ip_access_errors
short_description: Say what is wrong with the entries of a systemd IPAddressAllow= list
version_added: "0.3.0"
author: fleet.vllm developers (@fleet-vllm)
description:
  - Takes the entries of a systemd C(IPAddressAllow=) list (systemd.resource-control(5)) and returns, for each entry
    that is not an address, a prefix or the keyword C(localhost) or C(multicast), or that reaches an address of
    O(denied), a message naming O(variable), the entry and what to do. An empty list says every entry is fine.
  - In systemd an address that matches C(IPAddressAllow=) is allowed even where C(IPAddressDeny=) matches it too, so an
    allow list that covers O(denied) would open it whatever the deny list says. C(any) and C(link-local) are refused
    for that reason whenever O(denied) holds a link-local prefix.
options:
  _input:
    description: The entries, one address, prefix (C(ADDRESS/LENGTH)) or keyword each.
    type: list
    elements: raw
    required: true
  denied:
    description: Prefixes no entry may overlap.
    type: list
    elements: str
    default: []
  variable:
    description: The variable the entries come from, for the messages.
    type: str
    default: vllm_server_ip_address_allow
"""

EXAMPLES = r"""
- name: Refuse an allow list that reaches the cloud's metadata service
  ansible.builtin.assert:
    that: __errors | length == 0
    fail_msg: "{{ __errors | join('; ') }}"
  vars:
    __errors: "{{ ['localhost', '10.0.0.0/8', 'any'] | fleet.vllm.ip_access_errors(denied=['169.254.0.0/16', 'fe80::/10']) }}"
# vllm_server_ip_address_allow has "any", which reaches 169.254.0.0/16 ...
"""

RETURN = r"""
_value:
  description: One message per refused entry, in the order of the entries; empty when all are fine.
  type: list
  elements: str
"""

import ipaddress

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_text

from collections.abc import Sequence

# systemd.resource-control(5) of systemd 252, IPAddressAllow=: the special names and what they stand for.
KEYWORDS = {
    "any": ["0.0.0.0/0", "::/0"],
    "localhost": ["127.0.0.0/8", "::1/128"],
    "link-local": ["169.254.0.0/16", "fe80::/64"],
    "multicast": ["224.0.0.0/4", "ff00::/8"],
}


def _networks(entry):
    """The networks an entry stands for, or None when systemd would not take it as one entry."""
    if entry in KEYWORDS:
        return [ipaddress.ip_network(net) for net in KEYWORDS[entry]]
    if not entry or entry != entry.strip() or any(c.isspace() for c in entry):
        return None
    try:
        return [ipaddress.ip_network(entry, strict=False)]
    except ValueError:
        return None


def ip_access_errors(entries, denied=None, variable="vllm_server_ip_address_allow"):
    if isinstance(entries, (str, bytes)) or not isinstance(entries, Sequence):
        raise AnsibleFilterError("%s must be a list of addresses or prefixes, got %r" % (variable, entries))
    try:
        refused = [ipaddress.ip_network(to_text(net), strict=False) for net in (denied or [])]
    except ValueError as exc:
        raise AnsibleFilterError("ip_access_errors: denied: %s" % exc)
    errors = []
    for item in entries:
        entry = to_text(item)
        networks = _networks(entry)
        if networks is None:
            errors.append(
                "%s has %s, which is not an address, a prefix (ADDRESS/LENGTH) or localhost or multicast: give one "
                "of those per entry (systemd's IPAddressAllow=)" % (variable, _shown(entry)))
            continue
        hit = [str(net) for net in refused if any(own.version == net.version and own.overlaps(net) for own in networks)]
        if hit:
            errors.append(
                "%s has %s, which reaches %s: the unit denies those whatever else it allows (link-local addresses "
                "and the cloud's metadata service, which answers the host's credentials); list narrower prefixes "
                "that leave them out" % (variable, _shown(entry), ", ".join(hit)))
    return errors


def _shown(entry):
    # The entry as JSON would quote it, so that a control character shows as an escape, never raw.
    return "\"%s\"" % entry.encode("unicode_escape").decode("ascii").replace("\"", "\\\"")


class FilterModule(object):
    def filters(self):
        return {"ip_access_errors": ip_access_errors}
