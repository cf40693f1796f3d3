"""kv_auto, step 2: after a downgrade to a nightly without FP8 MLA on SM120, the served copy is
stripped (vLLM would refuse to start otherwise) and the server restarted on it."""

from __future__ import annotations

import fleet_hosts as fleet

testinfra_hosts = fleet.testinfra_hosts()


def test_fp8_kv_cache_stripped(host):
    fleet.assert_kv_stripped(fleet.facts(host))


def test_previous_venv_kept_for_a_rollback(host):
    assert "link" in (fleet.facts(host)["files"]["/opt/vllm/previous"] or {})


def test_restarted_and_serving_the_old_nightly(host):
    fleet.assert_restarted_and_serving(host, fleet.OLD_VERSION)
