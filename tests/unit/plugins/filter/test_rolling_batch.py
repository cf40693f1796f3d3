"""rolling_batch: fleet_vllm_serial (a count or a percentage of the hosts to roll) capped at
fleet_vllm_max_down; bad input names the variable."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.fleet.vllm.plugins.filter.rolling_batch import rolling_batch


@pytest.mark.parametrize("serial, max_down, hosts, expected", [
    (1, 1, 32, 1),
    ("1", "1", 32, 1),
    (4, 2, 32, 2),          # never more down than max_down
    (2, 8, 32, 2),
    ("25%", 8, 32, 8),
    ("25%", 4, 32, 4),
    ("25%", 8, 3, 1),       # a percentage rounds down, but a batch takes one host at least
    ("100%", 64, 10, 10),
    ("12.5%", 10, 16, 2),
    (" 50 % ", 10, 4, 2),
    (10, 10, 3, 10),        # Ansible caps a batch at the hosts left; the number itself is not changed
])
def test_batch_sizes(serial, max_down, hosts, expected):
    assert rolling_batch(serial, max_down=max_down, hosts=hosts) == expected


@pytest.mark.parametrize("serial, max_down, words", [
    (0, 1, "fleet_vllm_serial is 0"),
    ("0%", 1, "fleet_vllm_serial is '0%'"),
    ("150%", 1, "fleet_vllm_serial is '150%'"),
    ("half", 1, "fleet_vllm_serial is 'half'"),
    (True, 1, "fleet_vllm_serial is True"),
    (1, 0, "fleet_vllm_max_down is 0"),
    (1, "25%", "fleet_vllm_max_down is '25%'"),
    (1, "", "fleet_vllm_max_down is ''"),
])
def test_bad_input_names_the_variable(serial, max_down, words):
    with pytest.raises(AnsibleFilterError) as err:
        rolling_batch(serial, max_down=max_down, hosts=8)
    assert words in str(err.value)
