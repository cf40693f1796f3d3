"""kv_auto, step 1: vLLM 0.33.0 has an MLA backend for FP8 KV caches on SM120: keep FP8."""

from __future__ import annotations

import fleet_hosts as fleet

testinfra_hosts = fleet.testinfra_hosts()


def test_fp8_kv_cache_kept(host):
    fleet.assert_kv_kept(fleet.facts(host))


def test_pristine_untouched(host):
    fleet.assert_pristine_untouched(fleet.facts(host))


def test_serving_0_33(host):
    fleet.assert_serving(host, fleet.facts(host), fleet.NEW_VERSION)
