"""kv_auto, step 3: upgraded to 0.33.0 again, the FP8 KV cache comes back: the served copies are
byte for byte the pristine files again."""

from __future__ import annotations

import fleet_hosts as fleet

testinfra_hosts = fleet.testinfra_hosts()


def test_fp8_kv_cache_restored_byte_for_byte(host):
    fleet.assert_kv_kept(fleet.facts(host))


def test_pristine_untouched(host):
    fleet.assert_pristine_untouched(fleet.facts(host))


def test_restarted_and_serving_0_33(host):
    fleet.assert_restarted_and_serving(host, fleet.NEW_VERSION)
