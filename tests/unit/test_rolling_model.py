# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""benchmarks/rolling_upgrade.py's model of a rolling upgrade, on hand-made inputs: batches as
roll.yml makes them (a percentage rounds down, at least 1, capped at max-down), canaries first and
the acceptance run after them, the capacity kept, and the reading of the json callback's output."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "rolling_upgrade.py"


@pytest.fixture(scope="module")
def model():
    spec = importlib.util.spec_from_file_location("rolling_upgrade", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("hosts, serial, max_down, expected", [
    (10, 3, 3, [3, 3, 3, 1]),           # the last batch takes what is left
    (100, "5%", 10, [5] * 20),
    (30, "10%", 10, [3] * 10),
    (15, "10%", 10, [1] * 15),          # 1.5 rounds down to 1 (Ansible's serial), never 0
    (100, "10%", 4, [4] * 25),          # capped at max-down
    (1000, "10%", 100, [100] * 10),
    (8, 1, 1, [1] * 8),
    (0, 1, 1, []),
])
def test_batches(model, hosts, serial, max_down, expected):
    assert model.batches(hosts, serial, max_down) == expected


@pytest.mark.parametrize("value, hosts, max_down, expected", [
    ("1%", 1000, 10, 10), ("1%", 100, 10, 1), ("1%", 8, 1, 1),  # a percentage rounds down, at least one host
    ("1.5%", 100, 10, 1), ("2%", 100, 10, 2), (2, 100, 10, 2), ("0%", 100, 10, 0), (0, 100, 10, 0),
    ("5%", 1000, 10, 10), ("1%", 1000, 1, 1), (5, 3, 10, 3),  # capped at max-down, and at the hosts
])
def test_canary_count(model, value, hosts, max_down, expected):
    assert model.canary_count(value, hosts, max_down) == expected


def test_time_to_roll_without_canary(model):
    r = model.time_to_roll(10, 2, 0, {"stop": 5, "load": 30}, drain_s=10, per_host_overhead_s=5, acceptance_s=600)
    assert r["per_batch_s"] == 50
    assert r["batches"] == [2] * 5 and r["canary_batches"] == []
    assert r["seconds"] == 250          # no canary gate: no acceptance run
    assert r["capacity_min"] == pytest.approx(0.8)
    assert r["capacity_avg"] == pytest.approx(0.8)


def test_canaries_roll_first_then_acceptance_then_the_rest(model):
    r = model.time_to_roll(10, 2, 1, {"restart": 40}, drain_s=5, per_host_overhead_s=5, acceptance_s=100)
    assert r["canaries"] == 1 and r["canary_batches"] == [1]
    assert r["batches"] == [2, 2, 2, 2, 1]
    assert r["seconds"] == 6 * 50 + 100
    assert r["capacity_min"] == pytest.approx(0.8)
    # The canary stays out of rotation through its acceptance run: 1 host for 150 s, 9 for 50 s each.
    assert r["capacity_avg"] == pytest.approx(1 - (150 + 9 * 50) / (10 * 400))


def test_canary_percentage_and_batch_of_the_rest(model):
    r = model.time_to_roll(1000, "5%", "1%", {"restart": 100}, drain_s=0, per_host_overhead_s=0, acceptance_s=600,
                           max_down=20)
    assert r["canaries"] == 10 and r["canary_batches"] == [10]
    # The batch is 5 % of all 1,000 hosts to roll (tasks/rolling.yml), 50, capped at max-down 20: 990 = 49 x 20 + 10.
    assert r["batches"] == [20] * 49 + [10]
    assert r["seconds"] == 51 * 100 + 600
    assert r["capacity_min"] == pytest.approx(0.98)
    # 5 % of 100 hosts stays 5 with a canary: the serial is sized on every host to roll, not on the rest.
    assert model.time_to_roll(100, "5%", 1, {"restart": 1}, 0, 0, 0, max_down=10)["batches"] == [5] * 19 + [4]


def test_max_down_caps_the_batch(model):
    capped = model.time_to_roll(100, "50%", 0, {"restart": 10}, 0, 0, 0, max_down=1)
    assert capped["batches"] == [1] * 100 and capped["seconds"] == 1000
    assert capped["capacity_min"] == pytest.approx(0.99)
    assert model.time_to_roll(100, "50%", 0, {"restart": 10}, 0, 0, 0)["batches"] == [50, 50]  # no max-down: no cap
    # The canaries are one batch, never more than max-down.
    assert model.time_to_roll(100, 1, 5, {"restart": 10}, 0, 0, 0, max_down=2)["canary_batches"] == [2]


def test_contention_adds_overhead_per_further_host_of_a_batch(model):
    # Per batch: 10 s overhead + 20 s restart; a batch of 3 pays 2 x 50 % of the overhead again.
    r = model.time_to_roll(6, 3, 0, {"restart": 20}, 0, 10, 0, contention=0.5)
    assert r["seconds"] == 2 * (30 + 10)
    assert model.time_to_roll(6, 1, 0, {"restart": 20}, 0, 10, 0, contention=0.5)["seconds"] == 6 * 30


def test_a_batch_larger_than_the_forks_pays_the_overhead_per_wave(model):
    # A batch of 40 with 16 forks: 3 waves, the overhead (10 s) three times; the restart (100 s) once.
    r = model.time_to_roll(40, 40, 0, {"restart": 100}, 0, 10, 0, forks=16)
    assert r["seconds"] == 100 + 3 * 10
    assert model.time_to_roll(16, 16, 0, {"restart": 100}, 0, 10, 0, forks=16)["seconds"] == 110


def test_calibration_reads_the_smallest_rolls(model):
    measured = {"load_seconds": 10, "sizes": [
        {"hosts": 2, "rolls": [{"batch": 1, "batches": 2, "seconds": 80.0,
                                "phases": {"drain": 2, "undrain": 2, "restart": 4, "wait": 24, "other": 48}}]},
        {"hosts": 4, "rolls": [{"batch": 1, "batches": 4, "seconds": 160.0, "phases": {}},
                               {"batch": 2, "batches": 2, "seconds": 128.0, "phases": {}}]}]}
    cal = model.calibrate(measured)
    assert cal["overhead_s"] == 24 and cal["drain_s"] == 2
    assert cal["restart"] == {"restart (systemctl)": 2, "load (stated)": 10, "wait, less the load": 2}
    # Batch 2 of 4 hosts: 2 x 40 s without contention, measured 128 s: 48 s more over 2 batches, 24 s each.
    assert cal["contention"] == pytest.approx(1.0)
    rows = {(r["hosts"], r["batch"]): r for r in model.check(measured, cal)}
    assert rows[(4, 1)]["model_s"] == 160 and not rows[(4, 1)]["calibration"]
    assert rows[(4, 2)]["calibration"] and rows[(4, 2)]["error"] == 0


def test_capacity_against_a_larger_fleet(model):
    # Rolling 4 of 10 serving hosts, one at a time: 90 % at the lowest.
    r = model.time_to_roll(4, 1, 0, {"restart": 10}, 0, 0, 0, serving=10)
    assert r["capacity_min"] == pytest.approx(0.9)
    assert r["capacity_avg"] == pytest.approx(0.9)


def test_real_restart_and_load_cases(model):
    cases = model.load_cases()
    assert cases["cold page cache, NVMe 3 GB/s"] == pytest.approx(180.0)
    assert any(k.startswith("prefetch") for k in cases)
    phases = model.real_restart(180.0)
    assert sum(phases.values()) == pytest.approx(model.STOP_S + model.PRE_LOAD_S + 180.0 + model.POST_LOAD_S)


def test_stage_weights_doubles_the_holders_each_round(model):
    # 540 GB: the download at 10 Gbit/s (1.25 GB/s) 432 s; each copy at min(25 Gbit/s, 3 GB/s) = 3 GB/s, 180 s.
    assert model.stage_weights(1, 10, 25, 3.0) == pytest.approx(432.0)
    assert model.stage_weights(8, 10, 25, 3.0) == pytest.approx(432.0 + 3 * 180.0)
    assert model.stage_weights(1000, 10, 25, 3.0) == pytest.approx(432.0 + 10 * 180.0)
    assert model.stage_weights(0, 10, 25, 3.0) == 0.0


def _task(name, path, start, end, hosts):
    duration = {"start": f"2026-12-05T10:00:{start:02d}.000000Z", "end": f"2026-12-05T10:00:{end:02d}.000000Z"}
    return {"task": {"name": name, "path": path, "duration": duration}, "hosts": {h: {} for h in hosts}}


def test_roll_figures_from_the_json_callback(model):
    tasks = []
    for host, t in (("h1", 0), ("h2", 20)):
        tasks += [
            _task("Stop sending new requests", "/x/roles/vllm_gateway/tasks/drain.yml:4", t, t + 1, [host]),
            _task("Start or restart the service for a new pin", "/x/roles/vllm_server/tasks/roll.yml:90", t + 2, t + 4,
                  [host]),
            _task("Wait for /health", "/x/roles/vllm_server/tasks/verify.yml:2", t + 4, t + 14, [host]),
            _task("Put this host back", "/x/roles/vllm_gateway/tasks/undrain.yml:5", t + 14, t + 17, [host]),
        ]
    # With serial, the json callback writes each batch as a play of its own.
    roll = "Roll the hosts whose staged state differs, in batches"
    report = {"plays": [{"play": {"name": "Stage"}, "tasks": []}, {"play": {"name": roll}, "tasks": tasks[:4]},
                        {"play": {"name": roll}, "tasks": tasks[4:]}, {"play": {"name": "Configure"}, "tasks": []}]}
    figures = model.roll_figures(report, ["h1", "h2"], 1)
    assert figures["seconds"] == 37 and figures["batches"] == 2
    assert figures["phases"] == {"drain": 2.0, "restart": 4.0, "wait": 20.0, "undrain": 6.0, "other": 5.0}
