"""upgrade_rollback, step 3: playbooks/rollback.yml returned each host to the previous venv,
one host at a time, and the KV-cache decision followed (stripped again)."""

from __future__ import annotations

import fleet_hosts as fleet

testinfra_hosts = fleet.testinfra_hosts()


def test_rolled_back_one_host_at_a_time():
    fleet.assert_rolled_one_at_a_time(fleet.load_run("rollback"), fleet.instances())


def test_current_and_previous_swapped(host):
    before = fleet.load_record()[fleet.name_of(host)]["files"]
    now = fleet.facts(host)["files"]
    assert now["/opt/vllm/current"]["link"] == before["/opt/vllm/previous"]["link"]
    assert now["/opt/vllm/previous"]["link"] == before["/opt/vllm/current"]["link"]


def test_fp8_kv_cache_stripped_again(host):
    fleet.assert_kv_stripped(fleet.facts(host))


def test_restarted_and_serving_the_previous_version(host):
    fleet.assert_restarted_and_serving(host, fleet.OLD_VERSION)
