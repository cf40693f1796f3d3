"""onboard: the hosts that were serving before the new node joined were not touched."""

from __future__ import annotations

import fleet_hosts as fleet

testinfra_hosts = [f"podman://{name}" for name in fleet.instances()
                   if name not in fleet.instances("fleet_vllm_newcomers")]


def test_not_restarted_and_nothing_changed(host):
    before = fleet.load_record()[fleet.name_of(host)]
    assert before["unit"]["InvocationID"], "the host was not serving when recorded"
    assert fleet.diff(before, fleet.facts(host)) == []


def test_still_serving(host):
    fleet.assert_serving(host, fleet.facts(host), fleet.OLD_VERSION)
