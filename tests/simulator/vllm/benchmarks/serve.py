# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST FIXTURE, NOT vLLM: a stand-in for ``vllm.benchmarks.serve``, vLLM's benchmark client, in the
engine simulator's wheel, so that fleet.vllm.vllm_acceptance runs "the installed vLLM's client" on a
simulator host as it does on a real one.

Imitates (vllm/benchmarks/serve.py, 0.32.0 and 0.33.0): ``add_cli_args(parser)`` and ``main(args)``
with the options fleet.vllm passes (``--backend openai-chat``, ``--base-url``, ``--endpoint``,
``--model``, ``--served-model-name``, ``--dataset-name random``, ``--random-input-len``,
``--random-output-len``, ``--num-prompts``, ``--max-concurrency``, ``--num-warmups``, ``--seed``,
``--ignore-eos``, ``--save-result``, ``--result-dir``, ``--result-filename``,
``--percentile-metrics``, ``--metric-percentiles``); the key from ``OPENAI_API_KEY``; streamed
chat completions with ``stream_options.include_usage``, time to first token and inter-token
latency measured per request from the stream's events; the result JSON's names (``completed``,
``failed``, ``output_throughput``, ``request_throughput``, ``duration``, ``errors``,
``p50_ttft_ms``...). It really loads the server: the figures are measured, not made up.

Differs: no tokenizer (a prompt is ``--random-input-len`` random words, and an output token is a
streamed word, as the simulator counts them), threads instead of asyncio, no other dataset or
backend (anything else exits 2, as an unknown option would).
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
import urllib.error
import urllib.request

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike".split()


def add_cli_args(parser):
    add = parser.add_argument
    add("--backend", default="openai")
    add("--base-url")
    add("--host", default="127.0.0.1")
    add("--port", type=int, default=8000)
    add("--endpoint", default="/v1/completions")
    add("--model", required=True)
    add("--served-model-name")
    add("--tokenizer")
    add("--trust-remote-code", action="store_true")
    add("--dataset-name", default="random")
    add("--random-input-len", type=int, default=1024)
    add("--random-output-len", type=int, default=128)
    add("--num-prompts", type=int, default=1000)
    add("--max-concurrency", type=int)
    add("--num-warmups", type=int, default=0)
    add("--seed", type=int, default=0)
    add("--ignore-eos", action="store_true")
    add("--save-result", action="store_true")
    add("--result-dir")
    add("--result-filename")
    add("--percentile-metrics", default="ttft,tpot,itl")
    add("--metric-percentiles", default="99")
    add("--disable-tqdm", action="store_true")
    add("--ready-check-timeout-sec", type=int, default=600)


def _percentile(values, p):
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _request(url, body, key):
    """One streamed chat completion: (ttft, itls, output tokens, error)."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer %s" % key
    start = time.perf_counter()
    ttft, itls, last, tokens = None, [], None, 0
    try:
        request = urllib.request.Request(url, data=json.dumps(body).encode("utf-8"), headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=600) as answer:
            for raw in answer:
                line = raw.decode("utf-8").strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                now = time.perf_counter()
                if event.get("usage"):
                    tokens = event["usage"].get("completion_tokens", tokens)
                if not any((c.get("delta") or {}).get("content") for c in event.get("choices") or []):
                    continue
                if ttft is None:
                    ttft = now - start
                else:
                    itls.append(now - last)
                last = now
        return ttft or 0.0, itls, tokens, time.perf_counter() - start, ""
    except (urllib.error.URLError, OSError, ValueError) as exc:
        detail = exc.read().decode("utf-8", "replace")[:200] if isinstance(exc, urllib.error.HTTPError) else ""
        return None, [], 0, time.perf_counter() - start, ("%s %s" % (exc, detail)).strip()


def _run(url, model, prompts, output_len, ignore_eos, concurrency, key):
    outcomes = [None] * len(prompts)
    queue = list(range(len(prompts)))
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                index = queue.pop(0)
            body = {"model": model, "messages": [{"role": "user", "content": prompts[index]}],
                    "max_completion_tokens": output_len, "stream": True,
                    "stream_options": {"include_usage": True}, "ignore_eos": ignore_eos, "temperature": 0.0}
            outcomes[index] = _request(url, body, key)

    threads = [threading.Thread(target=worker) for unused in range(max(1, min(concurrency, len(prompts))))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def main(args):
    if args.backend != "openai-chat" or args.dataset_name != "random":
        sys.stderr.write("the simulator's benchmark client imitates --backend openai-chat --dataset-name random only\n")
        sys.exit(2)
    base = args.base_url or "http://%s:%d" % (args.host, args.port)
    url = base.rstrip("/") + args.endpoint
    key = os.environ.get("OPENAI_API_KEY")
    model = args.served_model_name or args.model
    rng = random.Random(args.seed)
    prompts = [" ".join(rng.choice(WORDS) for unused in range(args.random_input_len))
               for unused_prompt in range(args.num_prompts)]
    concurrency = args.max_concurrency or args.num_prompts
    if args.num_warmups:
        print("Warming up with %d requests..." % args.num_warmups)
        _run(url, model, prompts[:1] * args.num_warmups, args.random_output_len, args.ignore_eos, concurrency, key)
    start = time.perf_counter()
    outcomes = _run(url, model, prompts, args.random_output_len, args.ignore_eos, concurrency, key)
    duration = time.perf_counter() - start
    good = [o for o in outcomes if not o[4]]
    output_tokens = sum(o[2] for o in good)
    result = {
        "backend": args.backend, "model_id": args.model, "num_prompts": args.num_prompts,
        "max_concurrency": args.max_concurrency, "duration": duration, "completed": len(good),
        "failed": len(outcomes) - len(good), "total_input_tokens": args.random_input_len * len(good),
        "total_output_tokens": output_tokens, "request_throughput": len(good) / duration,
        "output_throughput": output_tokens / duration,
        "errors": [o[4] for o in outcomes],
    }
    percentiles = [float(p) for p in args.metric_percentiles.split(",")]
    series = {"ttft": [o[0] for o in good], "itl": [i for o in good for i in o[1]], "e2el": [o[3] for o in good],
              "tpot": [(o[3] - o[0]) / (o[2] - 1) for o in good if o[2] > 1]}
    for metric in args.percentile_metrics.split(","):
        values = series.get(metric, [])
        result["mean_%s_ms" % metric] = 1000.0 * sum(values) / len(values) if values else 0.0
        result["median_%s_ms" % metric] = 1000.0 * _percentile(values, 50)
        for p in percentiles:
            result["p%s_%s_ms" % (int(p) if int(p) == p else p, metric)] = 1000.0 * _percentile(values, p)
    print("Successful requests: %d" % len(good))
    print("Output token throughput (tok/s): %.2f" % result["output_throughput"])
    if args.save_result:
        with open(os.path.join(args.result_dir or ".", args.result_filename or "result.json"), "w",
                  encoding="utf-8") as handle:
            json.dump(result, handle)
    return result
