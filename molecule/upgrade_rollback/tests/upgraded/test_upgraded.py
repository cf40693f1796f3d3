"""upgrade_rollback, step 2: vllm_runtime_version 0.33.0 rolled one host at a time."""

from __future__ import annotations

import fleet_hosts as fleet

testinfra_hosts = fleet.testinfra_hosts()


def test_rolled_one_host_at_a_time():
    fleet.assert_rolled_one_at_a_time(fleet.load_run("upgrade"), fleet.instances())


def test_new_venv_and_previous_kept(host):
    data = fleet.facts(host)
    assert data["version"] == fleet.NEW_VERSION
    previous = data["files"]["/opt/vllm/previous"]
    assert previous and previous["link"] != data["files"]["/opt/vllm/current"]["link"]


def test_fp8_kv_cache_restored(host):
    """0.33.0 supports FP8 MLA on SM120: the served copies are the pristine files again."""
    fleet.assert_kv_kept(fleet.facts(host))


def test_restarted_and_serving(host):
    fleet.assert_restarted_and_serving(host, fleet.NEW_VERSION)
