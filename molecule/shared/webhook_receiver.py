"""TEST FIXTURE, NOT PART OF THE COLLECTION: the receiver an operator's Alertmanager would POST to (a pager, a chat
channel), on a monitoring test host. Alertmanager's webhook receiver POSTs one JSON document per notification
(version 4: status, receiver, groupLabels, alerts with their labels, status, startsAt and endsAt); this server
appends each one, with the time it arrived, as one line of --log (JSON lines), and answers 200. The tests count
what it got.

    python3 webhook_receiver.py --port 9095 --log /var/lib/fleet-vllm-test-webhook/received.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9095)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    os.makedirs(os.path.dirname(args.log), exist_ok=True)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            try:
                document = json.loads(body.decode("utf-8"))
            except ValueError:
                self.send_response(400)
                self.end_headers()
                return
            with lock, open(args.log, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"received": time.time(), "path": self.path, "body": document}) + "\n")
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    ThreadingHTTPServer((args.address, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
