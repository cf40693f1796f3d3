"""failures, step 4: a unit that systemd stopped after a crash loop (left failed) is cleared
with systemctl reset-failed by the next deploy, which says so, and starts serving again."""

from __future__ import annotations

import fleet_hosts as fleet

testinfra_hosts = [f"podman://{fleet.instances()[1]}"]


def test_deploy_reset_the_failed_unit_and_said_so():
    run = fleet.load_run("crash_loop")
    assert run["rc"] == 0, run["output_tail"][-3000:]
    output = run["output_tail"]
    assert "start: the service is failed" in output, output[-3000:]
    assert "had stopped in the failed state (Result=" in output, output[-3000:]
    assert "ran systemctl reset-failed" in output


def test_serving_again(host):
    data = fleet.facts(host)
    assert data["unit"]["ActiveState"] == "active", data["unit"]
    fleet.assert_serving(host, data, fleet.OLD_VERSION)
