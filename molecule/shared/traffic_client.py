"""A bounded client of an OpenAI-compatible endpoint (test helper, not part of the collection).

Runs inside a test host (python3, standard library only) or on this machine against 127.0.0.1,
and stops by itself: after --requests requests, after --seconds seconds, or as soon as the file
--stop-file exists, whichever comes first. --workers threads each send, one after the other,
chat completions of the served model, every other one streamed. Each answer is classified:

  ok         200, and complete: a JSON chat.completion with a choice that has a finish_reason,
             or an event stream whose chunks parse and that ends with a finish_reason and
             "data: [DONE]";
  truncated  200 but incomplete (a stream cut before [DONE], a body cut short);
  failed     anything else: connection refused or reset, a timeout, a status other than 200.

Prints one JSON object: {"sent", "ok", "failed", "truncated", "seconds", "errors" (the first 20,
with their time), "latencies_ms" (p50, p90, p99 of the ok ones), "streamed"}.

    TRAFFIC_KEY=KEY python3 traffic_client.py --url http://127.0.0.1:8080 --model kimi-k2.5 \
        --requests 100000 --seconds 600 --stop-file /tmp/stop --workers 4 --pause 0.05

An https URL is sent over TLS, the server's certificate verified (--ca-file CA, else the system's).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import ssl
import threading
import time
import urllib.parse


def one(url, key, model, stream, timeout, context=None):
    """(outcome, detail) of one chat completion (an https URL: over TLS, verified with CONTEXT)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(parts.hostname, parts.port or 443, timeout=timeout, context=context)
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    body = json.dumps({"model": model, "max_tokens": 8, "stream": stream,
                       "messages": [{"role": "user", "content": "Say hello"}]})
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    try:
        conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
    except (OSError, http.client.HTTPException) as exc:
        return "failed", "%s: %s" % (type(exc).__name__, exc)
    finally:
        conn.close()
    if response.status != 200:
        return "failed", "HTTP %d %s" % (response.status, data[:200].decode("utf-8", "replace"))
    text = data.decode("utf-8", "replace")
    try:
        if not stream:
            reply = json.loads(text)
            if reply["choices"][0]["finish_reason"] and reply["choices"][0]["message"]["content"]:
                return "ok", None
            return "truncated", text[:200]
        events = [line[len("data: "):] for line in text.split("\n") if line.startswith("data: ")]
        if not events or events[-1] != "[DONE]":
            return "truncated", "stream without [DONE]: %s" % text[-200:]
        chunks = [json.loads(event) for event in events[:-1]]
        if chunks and chunks[-1]["choices"][0]["finish_reason"]:
            return "ok", None
        return "truncated", "stream without a finish_reason"
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        return "truncated", "%s: %s" % (type(exc).__name__, text[:200])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    # The key from the environment (TRAFFIC_KEY), not the command line, unless given here.
    parser.add_argument("--key", default=os.environ.get("TRAFFIC_KEY", ""))
    parser.add_argument("--model", required=True)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--stop-file", default="")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=30)
    parser.add_argument("--pause", type=float, default=0.0, help="seconds each worker waits between two requests")
    parser.add_argument("--ca-file", default="", help="with an https URL: the CA to verify the server's certificate with")
    args = parser.parse_args()
    context = ssl.create_default_context(cafile=args.ca_file or None)

    lock = threading.Lock()
    counts = {"sent": 0, "ok": 0, "failed": 0, "truncated": 0, "streamed": 0}
    errors = []
    latencies = []
    start = time.monotonic()
    deadline = start + args.seconds

    def worker():
        while True:
            with lock:
                if counts["sent"] >= args.requests or time.monotonic() >= deadline:
                    return
                if args.stop_file and os.path.exists(args.stop_file):
                    return
                counts["sent"] += 1
                stream = counts["sent"] % 2 == 0
                counts["streamed"] += stream
            began = time.monotonic()
            outcome, detail = one(args.url, args.key, args.model, stream, args.timeout, context)
            took = time.monotonic() - began
            if args.pause:
                time.sleep(args.pause)
            with lock:
                counts[outcome] += 1
                if outcome == "ok":
                    latencies.append(took)
                elif len(errors) < 20:
                    errors.append([round(began - start, 2), outcome, detail])

    threads = [threading.Thread(target=worker, daemon=True) for dummy in range(args.workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    latencies.sort()

    def quantile(q):
        return round(1000 * latencies[min(len(latencies) - 1, int(q * len(latencies)))], 2) if latencies else None

    print(json.dumps(dict(counts, seconds=round(time.monotonic() - start, 2), errors=errors,
                          latencies_ms={"p50": quantile(0.5), "p90": quantile(0.9), "p99": quantile(0.99)})))


if __name__ == "__main__":
    main()
