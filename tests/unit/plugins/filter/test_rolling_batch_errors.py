"""rolling_batch's errors word for word (deploy.yml fails with them before it drains a host),
and the edges of its input: counts written with spaces, 100% exactly, a fraction of a host."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.fleet.vllm.plugins.filter.rolling_batch import rolling_batch

SERIAL = ("fleet_vllm_serial is %r: set a number of hosts (2) or a percentage of the hosts to roll above 0 and up to "
          "100 (25%%)")
COUNT = "%s is %r: set a whole number of hosts, 1 or more"
MAX_DOWN = "fleet_vllm_max_down is %r: set the most hosts that may restart at once, a whole number (1 or more)"


@pytest.mark.parametrize("serial, max_down, hosts, message", [
    ("25%", 1, "many", "rolling_batch: hosts must be a number, got 'many'"),
    ("25%", 1, None, "rolling_batch: hosts must be a number, got None"),
    (0, 1, 8, COUNT % ("fleet_vllm_serial", 0)),
    ("0", 1, 8, COUNT % ("fleet_vllm_serial", "0")),
    (False, 1, 8, COUNT % ("fleet_vllm_serial", False)),
    (1, True, 8, COUNT % ("fleet_vllm_max_down", True)),
    (1, -2, 8, COUNT % ("fleet_vllm_max_down", -2)),
    (1, "two", 8, MAX_DOWN % "two"),
    (1, "2 hosts", 8, MAX_DOWN % "2 hosts"),
    ("0%", 1, 8, SERIAL % "0%"),
    ("0.0%", 1, 8, SERIAL % "0.0%"),
    ("100.5%", 1, 8, SERIAL % "100.5%"),
    ("-5%", 1, 8, SERIAL % "-5%"),
    ("25%%", 1, 8, SERIAL % "25%%"),
])
def test_errors_in_full(serial, max_down, hosts, message):
    with pytest.raises(AnsibleFilterError) as caught:
        rolling_batch(serial, max_down, hosts)
    assert str(caught.value) == message


@pytest.mark.parametrize("serial, max_down, hosts, expected", [
    ("100%", 100, 7, 7),
    ("0.5%", 100, 100, 1),
    ("1.5%", 100, 100, 1),
    ("50%", 100, "9", 4),
    (" 3 ", " 2 ", 8, 2),
    (3, 3, 8, 3),
    ("25", 30, 8, 25),
    ("2\n", 5, 8, 2),
])
def test_edges(serial, max_down, hosts, expected):
    assert rolling_batch(serial, max_down, hosts) == expected


@pytest.mark.parametrize("canary, message", [
    ("one", SERIAL.replace("fleet_vllm_serial", "fleet_vllm_canary") % "one"),
    (True, COUNT % ("fleet_vllm_canary", True)),
    ("150%", SERIAL.replace("fleet_vllm_serial", "fleet_vllm_canary") % "150%"),
])
def test_the_canary_gates_size_is_refused_by_its_own_name(canary, message):
    """The canary gate (playbooks/tasks/rolling.yml) sizes its batch with the same rules, naming fleet_vllm_canary."""
    with pytest.raises(AnsibleFilterError) as caught:
        rolling_batch(canary, 2, 8, setting="fleet_vllm_canary")
    assert str(caught.value) == message
    assert rolling_batch("10%", 4, 30, setting="fleet_vllm_canary") == 3
    assert rolling_batch(5, 2, 30, setting="fleet_vllm_canary") == 2
