"""fleet.vllm.ip_access_errors: the entries of the unit's IPAddressAllow= (vllm_server_ip_address_allow). In systemd
an allowed address is allowed even where IPAddressDeny= matches it, so no entry may reach a link-local address (the
cloud's metadata service) or another metadata address (issue 24 points 5 and 15)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.fleet.vllm.plugins.filter.ip_access_errors import ip_access_errors

# roles/vllm_server/vars/main.yml _vllm_server_ip_denied
DENIED = ["169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128", "100.100.100.200/32"]


@pytest.mark.parametrize("entries", [
    [], ["localhost"], ["multicast"], ["10.0.0.0/8", "192.168.1.20", "172.16.0.0/12"], ["fd12:3456::/48", "2001:db8::1"],
    ["169.253.255.255", "169.255.0.0/16", "fec0::/10", "100.100.100.201"], ["192.0.0.0/2", "0.0.0.0/2"],
])
def test_entries_that_leave_the_denied_addresses_out_pass(entries):
    assert ip_access_errors(entries, denied=DENIED) == []


@pytest.mark.parametrize("entry, reached", [
    ("any", "169.254.0.0/16"), ("any", "fe80::/10"), ("link-local", "169.254.0.0/16"), ("link-local", "fe80::/10"),
    ("0.0.0.0/0", "169.254.0.0/16"), ("128.0.0.0/1", "169.254.0.0/16"), ("169.254.169.254", "169.254.0.0/16"),
    ("169.254.169.254/32", "169.254.0.0/16"), ("169.0.0.0/8", "169.254.0.0/16"), ("::/0", "fe80::/10"),
    ("fe80::1", "fe80::/10"), ("fc00::/7", "fd00:ec2::254/128"), ("fd00:ec2::254", "fd00:ec2::254/128"),
    ("100.64.0.0/10", "100.100.100.200/32"), ("169.254.0.5/24", "169.254.0.0/16"),
])
def test_an_entry_that_reaches_a_denied_address_is_refused(entry, reached):
    errors = ip_access_errors(["localhost", entry], denied=DENIED)
    assert len(errors) == 1, errors
    assert errors[0].startswith('vllm_server_ip_address_allow has "%s", which reaches ' % entry), errors
    assert reached in errors[0] and "metadata service" in errors[0]


@pytest.mark.parametrize("entry", [
    "10.0.0.0/8\nExecStartPost=+/bin/sh", "10.0.0.0/8 169.254.169.254", " 10.0.0.1", "gpu-a.example.com", "10.0.0.0/33",
    "", "localhost\n", "any ", "10.0.0.0/8,169.254.0.0/16",
])
def test_an_entry_that_is_not_one_address_or_prefix_is_refused(entry):
    errors = ip_access_errors([entry], denied=DENIED, variable="v_allow")
    assert len(errors) == 1 and errors[0].startswith("v_allow has ") and "not an address" in errors[0], errors
    assert "\n" not in errors[0]


@pytest.mark.parametrize("entries", ["localhost", None, {"a": 1}])
def test_a_value_that_is_not_a_list_is_an_error(entries):
    with pytest.raises(AnsibleFilterError):
        ip_access_errors(entries, denied=DENIED)
