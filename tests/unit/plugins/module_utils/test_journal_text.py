"""A vLLM service's journal read as lines (plugins/module_utils/_journal_text.py): the vLLM prefix
of each line, the starts of the unit, the lines that matter, the state the journal shows, the
first error and its traceback. test_failures.py reads the fixtures' journals through diagnose();
these tests give each function its own few lines."""

from __future__ import annotations

from ansible_collections.fleet.vllm.plugins.module_utils import _journal_text
from ansible_collections.fleet.vllm.plugins.module_utils._journal_text import (
    TAIL_LINES, TAIL_TRACEBACK_LINES, journal_says_stopped, journal_stopped, journal_tail, parse, relevant, root_error, runs,
    traceback_of,
)

STARTED = "Started vllm.service - vLLM OpenAI-compatible server."
READY = "(APIServer pid=10) INFO 11-29 10:00:30 [launcher.py:46] Application startup complete."
EXITED = "vllm.service: Main process exited, code=exited, status=1/FAILURE"


def raws(lines):
    return [line.raw for line in lines]


def test_prefixes_are_read():
    line = _journal_text.Line(0, "(Worker_TP4_EP4 pid=2532) ERROR 12-29 15:21:11 [multiproc_executor.py:751] ValueError: x")
    assert (line.proc, line.level, line.msg, line.exception) == ("Worker_TP4_EP4 pid=2532", "ERROR", "ValueError: x", "ValueError")
    old = _journal_text.Line(0, "INFO 07-24 08:26:01 multiproc_worker_utils.py:226] hello")
    assert (old.proc, old.level, old.msg) == (None, "INFO", "hello")
    raw = _journal_text.Line(0, "(EngineCore_DP0 pid=1)   File \"/x.py\", line 1, in f")
    assert (raw.proc, raw.level, raw.msg, raw.exception) == ("EngineCore_DP0 pid=1", None, '  File "/x.py", line 1, in f', None)
    systemd = _journal_text.Line(0, "vllm.service: Failed with result 'exit-code'.")
    assert systemd.systemd and systemd.exception is None


def test_parse_numbers_the_lines_and_drops_journalctls_markers():
    lines = parse("-- No entries --\n\n%s  \n-- Boot 0123abcd --\n%s\n" % (STARTED, READY))
    assert raws(lines) == [STARTED, READY]
    assert [line.index for line in lines] == [0, 1]
    assert parse(None) == [] and parse("") == []


def test_runs_split_at_each_start():
    lines = parse("\n".join(["before", STARTED, "a", EXITED, "Starting vllm.service - vLLM.", "b"]))
    assert [raws(run) for run in runs(lines)] == [["before"], [STARTED, "a", EXITED], ["Starting vllm.service - vLLM.", "b"]]
    assert runs([]) == []


def test_relevant_lines_since_the_last_start_that_reached_readiness():
    text = "\n".join([STARTED, "ValueError: fixed since", EXITED, STARTED, READY, STARTED, "loading"])
    lines = parse(text)
    assert raws(relevant(lines, since_last_start=True)) == [STARTED, "loading"]
    assert raws(relevant(lines, since_last_start=False)) == [STARTED, READY, STARTED, "loading"]
    # No start reached readiness: every line read counts (a crash loop shows the error of the start before).
    never = parse("\n".join([STARTED, "ValueError: x", EXITED, STARTED]))
    assert raws(relevant(never, since_last_start=False)) == raws(never)
    assert relevant([], since_last_start=False) == []


def test_the_journal_says_whether_the_last_start_ended():
    assert journal_stopped("\n".join([STARTED, READY])) is False
    assert journal_stopped("\n".join([STARTED, READY, EXITED])) is True
    assert journal_stopped("\n".join([STARTED, EXITED, STARTED])) is False  # only the last start counts
    assert journal_stopped(READY) is None  # no line of systemd's
    assert journal_says_stopped([]) is None


def test_the_root_error_is_the_first_one_that_is_no_wrapper():
    lines = parse("\n".join([
        STARTED, "(EngineCore_DP0 pid=5) ValueError: old start", EXITED, STARTED,
        "(Worker_TP0 pid=7) RuntimeError: Worker failed with error 'CUDA error'",
        "(EngineCore_DP0 pid=5) RuntimeError: Engine core initialization failed. See root cause above.",
    ]))
    assert root_error(lines).msg == "RuntimeError: Worker failed with error 'CUDA error'"
    wrappers = parse("\n".join([STARTED, "EngineDeadError: dead", "RuntimeError: Engine core initialization failed."]))
    assert root_error(wrappers).msg == "EngineDeadError: dead"  # the first wrapper, when that is all
    assert root_error(parse(STARTED)) is None


def test_the_traceback_of_an_error_is_its_process_own():
    lines = parse("\n".join([
        "(Worker pid=1) Traceback (most recent call last):",
        "(Other pid=2) Traceback (most recent call last):",
        "(Worker pid=1)   File \"/x.py\", line 1, in f",
        "(Other pid=2) KeyError: 'y'",
        "(Worker pid=1) ValueError: x",
    ]))
    assert traceback_of(lines, lines[-1]) == ["(Worker pid=1) Traceback (most recent call last):",
                                              "(Worker pid=1)   File \"/x.py\", line 1, in f", "(Worker pid=1) ValueError: x"]
    # The lines read start inside the traceback: what is there of it.
    assert traceback_of(lines[2:], lines[-1]) == ["(Worker pid=1)   File \"/x.py\", line 1, in f", "(Worker pid=1) ValueError: x"]


def test_the_journal_tail_is_the_traceback_or_the_error_lines_or_the_last_lines():
    frames = ["(Worker pid=1)   File \"/x.py\", line %d, in f" % number for number in range(TAIL_TRACEBACK_LINES + 5)]
    traceback = parse("\n".join(["(Worker pid=1) Traceback (most recent call last):"] + frames + ["(Worker pid=1) ValueError: x"]))
    assert journal_tail(traceback) == raws(traceback)[-TAIL_TRACEBACK_LINES:]
    errors = ["(APIServer pid=3) ERROR 11-29 10:00:%02d [x.py:1] failed %d" % (number, number) for number in range(TAIL_LINES + 3)]
    noise = parse("\n".join([STARTED] + errors + ["(APIServer pid=3) INFO 11-29 10:01:00 [x.py:1] fine", EXITED]))
    assert journal_tail(noise) == (errors + [EXITED])[-TAIL_LINES:]
    quiet = ["(APIServer pid=3) INFO 11-29 10:00:00 [x.py:1] line %d" % number for number in range(TAIL_LINES + 3)]
    assert journal_tail(parse("\n".join(quiet))) == quiet[-TAIL_LINES:]
