# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A vLLM service's journal read as lines: the vLLM process, level and message of each, the starts
of the unit, the lines that matter (since the last start, or since the last start that reached
readiness), whether the last start ended, the first error and its traceback.

Input is the journal as ``journalctl -u UNIT -o cat`` prints it (vLLM log lines such as
``(EngineCore_DP0 pid=1234) ERROR 11-29 10:00:00 [core.py:708] message``, raw tracebacks,
systemd's own lines about the unit). The failure catalogue (_failures.py) matches its findings in
these lines; vllm_server_wait names the first error of a start that died with them.

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

import re

# What journal_tail() keeps: the last lines of a traceback, or of the error lines.
TAIL_TRACEBACK_LINES = 60
TAIL_LINES = 20

# ---- reading journal lines -------------------------------------------------------------------

# "(Worker_TP0 pid=41520) ERROR 11-29 10:02:44 [multiproc_executor.py:772] message"; both parts
# optional: raw output of a vLLM process has only the process part, vLLM before 0.11 only the
# level part (and older still "INFO 07-24 08:26:01 file.py:226] message").
_PREFIX_RE = re.compile(
    r"^(?:\((?P<proc>[^()]+?) pid=(?P<pid>\d+)\) ?)?"
    r"(?:(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?[^\]\s]+\] ?)?"
)
_EXCEPTION_RE = re.compile(r"^(?P<type>(?:[A-Za-z_]\w*\.)*\w*(?:Error|Exception|Exit|Interrupt))(?::\s?(?P<text>.*))?$")
# The errors vLLM raises on top of the real one (a worker or the engine core that died of it).
GENERIC_RE = re.compile(
    r"WorkerProc initialization failed|Engine core initialization failed|EngineDeadError|EngineCore encountered"
    r"|EngineGenerateError|Worker proc \S+ died|CancelledError|KeyboardInterrupt|SystemExit"
)
_SYSTEMD_START_RE = re.compile(r"^Start(?:ed|ing) \S")
_SYSTEMD_STOP_RE = re.compile(
    r"^(?:\S+: (?:Main process exited|Failed with result|Deactivated successfully|Scheduled restart job"
    r"|State '[\w-]+' timed out|Killing process|Consumed .* CPU time)|Stopped |Failed to start )"
)
_READY_RE = re.compile(r"Application startup complete|Starting vLLM (?:API )?server (?:\d+ )?on ")


class Line(object):
    """One journal line: its position, the raw text, the vLLM process and level, the message."""

    __slots__ = ("index", "raw", "proc", "level", "msg")

    def __init__(self, index, raw):
        self.index = index
        self.raw = raw
        match = _PREFIX_RE.match(raw)
        self.proc = "%s pid=%s" % (match.group("proc"), match.group("pid")) if match.group("proc") else None
        self.level = match.group("level")
        self.msg = raw[match.end():]

    @property
    def systemd(self):
        """A line systemd wrote about the unit (no vLLM prefix)."""
        return self.proc is None and self.level is None

    @property
    def exception(self):
        match = _EXCEPTION_RE.match(self.msg)
        return match.group("type") if match else None


def parse(text):
    """Journal text -> list of Line, without journalctl's own markers ("-- No entries --")."""
    lines = []
    for raw in (text or "").splitlines():
        raw = raw.rstrip()
        if not raw or (raw.startswith("-- ") and raw.endswith(" --")):
            continue
        lines.append(Line(len(lines), raw))
    return lines


def runs(lines):
    """Split at systemd's "Started"/"Starting" lines: one list of lines per start of the unit."""
    result = [[]]
    for line in lines:
        if line.systemd and _SYSTEMD_START_RE.match(line.msg) and result[-1]:
            result.append([])
        result[-1].append(line)
    return [run for run in result if run]


def relevant(lines, since_last_start):
    """The lines to analyse: the last start only, or everything since the last start that
    reached readiness (failures before it were fixed since), or the whole window."""
    parts = runs(lines)
    if not parts:
        return []
    if since_last_start:
        return parts[-1]
    for position in range(len(parts) - 1, -1, -1):
        if any(_READY_RE.search(line.msg) for line in parts[position]):
            return [line for part in parts[position:] for line in part]
    return lines


def journal_says_stopped(lines):
    """True when systemd's lines show the last start ended, False when it started and did not
    end, None when the text holds no systemd lines."""
    parts = runs(lines)
    if not parts:
        return None
    last = parts[-1]
    if any(line.systemd and _SYSTEMD_STOP_RE.match(line.msg) for line in last):
        return True
    if any(line.systemd and _SYSTEMD_START_RE.match(line.msg) for line in last):
        return False
    return None


# ---- tracebacks and the root error -----------------------------------------------------------


def root_error(lines):
    """The first error of the latest start that failed: the first exception line that is not a
    wrapper vLLM raises on top of the real error (or the first wrapper, when that is all)."""
    for part in reversed(runs(lines)):
        errors = [line for line in part if line.exception]
        if not errors:
            continue
        for line in errors:
            if not GENERIC_RE.search(line.msg):
                return line
        return errors[0]
    return None


def traceback_of(lines, error):
    """The traceback that ends at ``error``, from the same process, as raw lines (what is left
    of it when the lines read start inside it)."""
    same = [line for line in lines if line.proc == error.proc and line.index <= error.index]
    start = None
    for position in range(len(same) - 1, -1, -1):
        if same[position].msg.startswith("Traceback (most recent call last):"):
            start = position
            break
    if start is None:
        # The window starts inside the traceback: keep the part that is there.
        start = 0
    return [line.raw for line in same[start:]]


def journal_tail(lines):
    """What to read when no finding explains the failure: the traceback of the first error of
    the latest failed start, or the last error lines, or the last lines."""
    error = root_error(lines)
    if error is not None:
        return traceback_of(lines, error)[-TAIL_TRACEBACK_LINES:]
    errors = [
        line.raw for line in lines
        if line.level in ("ERROR", "CRITICAL") or (line.systemd and _SYSTEMD_STOP_RE.match(line.msg))
    ]
    if errors:
        return errors[-TAIL_LINES:]
    return [line.raw for line in lines[-TAIL_LINES:]]


def journal_stopped(journal_text):
    """What the journal text says of the service: stopped (True), started (False), or None. Only
    the last start counts, whichever lines diagnose() would analyse."""
    return journal_says_stopped(parse(journal_text))
