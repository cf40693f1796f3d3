"""The bounded client of molecule/shared/traffic_client.py, for the REAL engine (test helper): the same workers, bounds,
requests, counts and output, with one difference in what counts as a complete non-streamed answer.

The real engine serves the tiny checkpoint with the fleet's reasoning parser (kimi_k2): the tiny model's tokens are
random, it rarely ends its "thinking", and vLLM then puts the answer in the message's ``reasoning`` with ``content``
null; the text of a few random tokens may even be empty (measured: 32 of 3,599 answers had neither). traffic_client.py
counts a 200 without content as truncated; here a non-streamed answer is complete when its whole body parses as a
chat.completion whose assistant message's choice has a finish_reason and whose usage counts one generated token or
more (a body cut short does not parse).
Streams are judged as traffic_client.py judges them ([DONE] after a chunk with a finish_reason).

traffic_client.one sends each request and judges a non-streamed body by ``json.loads(body)``, then the first choice's
finish_reason and its message's content. Here its ``json`` parses a non-streamed body (a choice with a message; a
stream's chunks have a delta) and stands, for that content, "complete" when the reply is complete as above, else
nothing: everything else is traffic_client.py's own.

Runs inside a test host, next to traffic_client.py (both copied there by molecule/shared/gateway_hosts.py,
start_client's judge): python3 real_client.py ARGS (traffic_client.py's).
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import traffic_client as base  # noqa: E402


def complete(reply):
    """Whether a parsed non-streamed answer is a whole chat.completion of the real engine (the header)."""
    try:
        choice = reply["choices"][0]
        return bool(reply["object"] == "chat.completion" and choice["finish_reason"]
                    and choice["message"]["role"] == "assistant" and reply["usage"]["completion_tokens"] >= 1)
    except (KeyError, IndexError, TypeError):
        return False


class _Judged:
    """The json module as traffic_client.one sees it: a non-streamed reply's message content says whether the reply
    is complete (complete()); everything else parses and dumps as json does."""

    dumps = staticmethod(json.dumps)

    @staticmethod
    def loads(text):
        reply = json.loads(text)
        try:
            message = reply["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            return reply
        message["content"] = "complete" if complete(reply) else None
        return reply


base.json = _Judged

if __name__ == "__main__":
    base.main()
