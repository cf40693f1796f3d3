# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The acceptance run (issue 23): vLLM's own benchmark client against a host's front door, what it
measured, and the fleet's verdicts.

* The client is ``vllm.benchmarks.serve`` of the host's installed vLLM, run with the venv's Python
  (``add_cli_args`` and ``main``: vLLM's ``vllm bench serve`` console script fails under the CPU
  build, docs/evidence.md section 18). The key reaches it through ``OPENAI_API_KEY`` in its
  environment (vllm/benchmarks/lib/endpoint_request_func.py), never through its argv.
* Its ``--save-result`` JSON (vllm/benchmarks/serve.py, 0.32.0 and 0.33.0): ``completed``,
  ``failed``, ``output_throughput``, ``request_throughput``, ``duration``, ``errors`` and, per
  selected metric and percentile, ``p50_ttft_ms``, ``p99_ttft_ms``, ``p50_itl_ms``...
* A verdict compares a host only with results measured under the same identity: the vLLM pin, the
  model and its revision, the KV-cache dtype, the parallel sizes, the platform, the GPUs and the
  profile. Results under another identity are never compared.

Used by the module fleet.vllm.vllm_acceptance (on the host), the filter
fleet.vllm.acceptance_verdicts (on the controller) and benchmarks/acceptance.py. Standard library
only, Python 3.8 or later.

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

import hashlib
import json

# The program the host's venv Python runs: vLLM's benchmark client, as ``vllm bench serve`` would
# run it. FlexibleArgumentParser moved from vllm.utils to vllm.utils.argparse_utils (0.11).
CLIENT_PROGRAM = (
    "import sys\n"
    "try:\n"
    "    from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "except ImportError:\n"
    "    from vllm.utils import FlexibleArgumentParser\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "parser = FlexibleArgumentParser(prog='vllm bench serve')\n"
    "add_cli_args(parser)\n"
    "main(parser.parse_args(sys.argv[1:]))\n"
)

# The profile's settings, their bounds, and the client flag each becomes.
PROFILE_SETTINGS = (
    # name, minimum, maximum, flag
    ("input_tokens", 1, 1000000, "--random-input-len"),
    ("output_tokens", 1, 100000, "--random-output-len"),
    ("requests", 1, 100000, "--num-prompts"),
    ("concurrency", 1, 10000, "--max-concurrency"),
    ("warmup_requests", 0, 10000, "--num-warmups"),
    ("seed", 0, 2 ** 31 - 1, "--seed"),
)

# The figures a result holds, as the client's JSON names them.
METRICS = (
    # ours, the client's, unit
    ("output_tokens_per_s", "output_throughput", "tokens/s"),
    ("requests_per_s", "request_throughput", "requests/s"),
    ("ttft_p50_ms", "p50_ttft_ms", "ms"),
    ("ttft_p99_ms", "p99_ttft_ms", "ms"),
    ("itl_p50_ms", "p50_itl_ms", "ms"),
    ("itl_p99_ms", "p99_itl_ms", "ms"),
    ("completed", "completed", "requests"),
    ("failed", "failed", "requests"),
    ("duration_s", "duration", "s"),
)

# What a result depends on: two results are compared only when all of these are equal.
IDENTITY_FIELDS = ("vllm_version", "model", "model_revision", "kv_cache_dtype", "tensor_parallel_size",
                   "pipeline_parallel_size", "platform", "gpus", "profile")

VERDICTS = ("accepted", "failed", "not_measured")


def profile_errors(profile, name="vllm_acceptance_profile"):
    """What is wrong with a profile (a dict of PROFILE_SETTINGS), each naming the setting; [] when
    nothing is."""
    if not isinstance(profile, dict):
        return ["%s is %s: set a mapping of %s" % (name, json.dumps(profile, default=str),
                                                   ", ".join(s[0] for s in PROFILE_SETTINGS))]
    errors = []
    known = set(s[0] for s in PROFILE_SETTINGS)
    for key in sorted(set(profile) - known):
        errors.append("%s.%s is not a setting of the profile: use %s" % (name, key, ", ".join(sorted(known))))
    for key, low, high, _flag in PROFILE_SETTINGS:
        if key not in profile:
            errors.append("%s.%s is missing: set a whole number from %d to %d" % (name, key, low, high))
            continue
        value = profile[key]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            shown = json.dumps(value, default=str)
            errors.append("%s.%s is %s: set a whole number from %d to %d" % (name, key, shown, low, high))
    if not errors and profile["concurrency"] > profile["requests"]:
        errors.append("%s.concurrency (%d) is above its requests (%d): the profile never reaches that concurrency"
                      % (name, profile["concurrency"], profile["requests"]))
    return errors


def profile_label(profile):
    """The profile in one short, stable line: what a result was measured with."""
    return "%d in/%d out tokens, %d requests at concurrency %d, %d warm-up, seed %d" % (
        profile["input_tokens"], profile["output_tokens"], profile["requests"], profile["concurrency"],
        profile["warmup_requests"], profile["seed"])


def client_argv(python, profile, base_url, model, tokenizer, result_dir, result_file, ready_timeout=0):
    """The argv of vLLM's benchmark client for ``profile`` against ``base_url``. No key in it."""
    argv = [python, "-c", CLIENT_PROGRAM,
            "--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
            "--base-url", base_url, "--model", model, "--served-model-name", model,
            "--tokenizer", tokenizer, "--trust-remote-code",
            "--dataset-name", "random", "--ignore-eos",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
            "--save-result", "--result-dir", result_dir, "--result-filename", result_file,
            "--disable-tqdm", "--ready-check-timeout-sec", str(int(ready_timeout))]
    for key, _low, _high, flag in PROFILE_SETTINGS:
        argv += [flag, str(profile[key])]
    return argv


def metrics_from_result(result):
    """Our figures from the client's result JSON (a dict). Raises ValueError naming what is missing."""
    if not isinstance(result, dict):
        raise ValueError("the client's result is not a JSON object")
    metrics = {}
    missing = []
    for ours, theirs, _unit in METRICS:
        value = result.get(theirs)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            missing.append(theirs)
            continue
        metrics[ours] = round(float(value), 3) if ours not in ("completed", "failed") else int(value)
    if missing:
        raise ValueError("the client's result has no number for %s" % ", ".join(missing))
    errors = [e for e in result.get("errors") or [] if e]
    return metrics, errors


def identity_key(identity):
    """A short, stable name of an identity (the fields of IDENTITY_FIELDS): equal keys, comparable
    results."""
    canonical = json.dumps(dict((f, identity.get(f)) for f in IDENTITY_FIELDS), sort_keys=True)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def _median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2.0


def _slower(value, reference, tolerance):
    """Whether value is below reference by more than tolerance percent."""
    return reference > 0 and value < reference * (1 - tolerance / 100.0)


def _percent_below(value, reference):
    return round(100.0 * (reference - value) / reference, 1) if reference > 0 else 0.0


def _entry(result, reference, where=""):
    """A verdict's start from one result: (entry, output tokens/s or None when not measured). Not measured, failed
    requests and the hardware's failures are its first reasons, the hardware's notes its notes; ``where`` says where
    they happened (" on the new state")."""
    entry = {"verdict": "not_measured", "reasons": [], "notes": [], "output_tokens_per_s": None, "fleet_median": None,
             "fleet_peers": 0, "last_accepted": reference}
    if result.get("status") != "measured":
        entry["reasons"].append("not measured%s: %s" % (where, result.get("reason") or "no reason given"))
        return entry, None
    metrics = result["metrics"]
    value = entry["output_tokens_per_s"] = metrics["output_tokens_per_s"]
    if metrics["failed"] > 0:
        errors = result.get("errors") or []
        entry["reasons"].append("%d of %d requests failed%s%s" % (
            metrics["failed"], metrics["failed"] + metrics["completed"], where,
            " (first error: %s)" % str(errors[0])[:300] if errors else ""))
    hardware = result.get("hardware") or {}
    entry["reasons"].extend(failure["message"] for failure in hardware.get("failures") or [])
    entry["notes"].extend(hardware.get("notes") or [])
    return entry, value


def verdicts(results, tolerance):
    """The verdict of every host: ``results`` maps a host to what the module returned (status,
    reason, metrics, errors, identity, key, hardware, last_accepted); ``tolerance`` is the percent
    a host may be slower than its reference.

    Returns {host: {"verdict", "reasons": [...], "notes": [...], "output_tokens_per_s",
    "fleet_median", "fleet_peers", "last_accepted"}}: failed when a request failed, the hardware
    failed, or its output tokens/s is more than ``tolerance`` percent below the median of the
    hosts measured under the same identity (two or more) or below its own last accepted result
    under the same identity; not_measured when the client could not measure it."""
    measured = dict((h, r) for h, r in results.items() if r.get("status") == "measured")
    peers = {}
    for host, result in measured.items():
        peers.setdefault(result["key"], []).append(host)
    answer = {}
    for host in sorted(results):
        result = results[host]
        entry, value = _entry(result, None)
        answer[host] = entry
        if value is None:
            continue
        same = peers[result["key"]]
        entry["fleet_peers"] = len(same)
        if len(same) >= 2:
            median = _median([measured[h]["metrics"]["output_tokens_per_s"] for h in same])
            entry["fleet_median"] = round(median, 3)
            if _slower(value, median, tolerance):
                entry["reasons"].append(
                    "%.1f output tokens/s is %.1f%% below the median of the %d hosts measured with the same pin, model,"
                    " hardware and profile (%.1f tokens/s; tolerance %s%%)"
                    % (value, _percent_below(value, median), len(same), median, tolerance))
        last = result.get("last_accepted")
        if isinstance(last, dict) and isinstance(last.get("output_tokens_per_s"), (int, float)):
            entry["last_accepted"] = last
            if _slower(value, last["output_tokens_per_s"], tolerance):
                entry["reasons"].append(
                    "%.1f output tokens/s is %.1f%% below its own last accepted result with the same pin, model, hardware"
                    " and profile (%.1f tokens/s, %s; tolerance %s%%)"
                    % (value, _percent_below(value, last["output_tokens_per_s"]), last["output_tokens_per_s"],
                       last.get("measured_at_text") or "earlier", tolerance))
        elif len(same) < 2:
            entry["notes"].append("nothing to compare with yet: no other host and no accepted result of its own with the"
                                  " same pin, model, hardware and profile; this result becomes its reference")
        entry["verdict"] = "failed" if entry["reasons"] else "accepted"
    return answer


def canary_verdict(measured, reference, tolerance):
    """A canary's verdict after its restart on a new state: ``measured`` is what the module returned now,
    ``reference`` what the canary made on the state it ran before (its accepted result under that identity, or its
    measurement just before the roll). Failed when a request failed, its hardware failed, or its output tokens/s is
    more than ``tolerance`` percent below the reference. The same shape as a verdict of verdicts()."""
    entry, value = _entry(measured, reference, " on the new state")
    if value is None:
        return entry
    before = reference.get("output_tokens_per_s")
    if _slower(value, before, tolerance):
        now_pin = (measured.get("identity") or {}).get("vllm_version")
        before_pin = (reference.get("identity") or {}).get("vllm_version")
        when = reference.get("measured_at_text") or "measured before the roll"
        entry["reasons"].append(
            "%.1f output tokens/s on the new state (%s) is %.1f%% below %.1f tokens/s on the state it ran before (%s, %s;"
            " tolerance %s%%)" % (value, now_pin, _percent_below(value, before), before, before_pin, when, tolerance))
    else:
        entry["notes"].append("%.1f output tokens/s on the new state, %.1f before: within the tolerance of %s%%"
                              % (value, before, tolerance))
    entry["verdict"] = "failed" if entry["reasons"] else "accepted"
    return entry


def _cell(value, digits=1):
    if value is None:
        return "-"
    if isinstance(value, float):
        return "%.*f" % (digits, value)
    return str(value)


def table(results, decided):
    """The fleet table: a header and one line per host, in host order."""
    header = ("host", "verdict", "out tok/s", "req/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "failed",
              "median", "last accepted", "vLLM")
    rows = [header]
    for host in sorted(decided):
        result, verdict = results.get(host) or {}, decided[host]
        metrics = result.get("metrics") or {}
        last = verdict.get("last_accepted") or {}
        rows.append((host, verdict["verdict"], _cell(metrics.get("output_tokens_per_s")),
                     _cell(metrics.get("requests_per_s"), 2), _cell(metrics.get("ttft_p50_ms")),
                     _cell(metrics.get("ttft_p99_ms")), _cell(metrics.get("itl_p50_ms")),
                     _cell(metrics.get("itl_p99_ms")), _cell(metrics.get("failed")),
                     _cell(verdict.get("fleet_median")), _cell(last.get("output_tokens_per_s")),
                     str((result.get("identity") or {}).get("vllm_version") or "-")))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    return ["  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
