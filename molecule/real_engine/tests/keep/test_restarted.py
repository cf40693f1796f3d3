"""real_engine, step 2 (keep.yml): the changes restarted the real engine - policy keep stopped the serving one, and
the repair with a shorter context started the one that serves now; the first engine's /dev/shm segments are gone and
the new one serves with the new flag."""

from __future__ import annotations

import json
import os

import fleet_hosts as fleet
import real_engine as real

testinfra_hosts = fleet.testinfra_hosts()


def test_the_change_restarted_the_engine(host):
    real.assert_run_restarted_it(host, "repair")


def test_the_new_engine_serves_with_the_new_context(host):
    real.assert_real_engine_serving(host, "0.32.0", 128)


def test_the_old_engines_shared_memory_is_gone(host):
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "shm-before-restart.json"), encoding="utf-8") as handle:
        before = json.load(handle)[fleet.name_of(host)]  # keep.yml: each host's segments, by name
    # the engine had its segments (multiprocessing shared memory, psm_*) before the restart
    assert [name for name in before if name.startswith("psm_")], before
    now = real.read(host)["shm"]
    assert not set(before) & set(now), (before, now)
    assert [name for name in now if name.startswith("psm_")], now
