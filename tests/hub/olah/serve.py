"""Run olah (inside its own venv) with a request log of our own.

    <olah-venv>/bin/python tests/hub/olah/serve.py --config CONFIG.toml --log-dir DIR \
        --request-log FILE

Same as ``olah-cli --config CONFIG.toml --log-path DIR``, plus an ASGI middleware that appends
one line per HTTP request to FILE, written just before the last body bytes are sent (so a
client that has its answer finds the line), or when the request ends otherwise:

    METHOD TARGET STATUS BYTES CLIENT

TARGET is the raw path with its query string, STATUS the HTTP status sent (500 when the app
raised before answering, 499 when nothing was sent), BYTES the body bytes sent, CLIENT the
peer's address. Lines are flushed as they are written. olah's own log (olah.log under the log
dir: its messages and uvicorn's access log, rotated hourly, with stdout/stderr folded in) is
left as it is; this file is the one to parse.
"""

from __future__ import annotations

import argparse
import sys


class RequestLog:
    """Pure ASGI middleware: one line per HTTP request into an append-only file."""

    def __init__(self, app, path: str) -> None:
        self.app = app
        self.fh = open(path, "a", buffering=1, encoding="utf-8")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = {"status": 0, "bytes": 0, "logged": False}

        def write(failed=False):
            if state["logged"]:
                return
            state["logged"] = True
            status = state["status"] or (500 if failed else 499)
            target = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
            if scope.get("query_string"):
                target += "?" + scope["query_string"].decode("latin-1")
            client = scope.get("client") or ("-", 0)
            self.fh.write("%s %s %d %d %s\n" % (scope["method"], target, status, state["bytes"], client[0]))

        async def logged_send(message):
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
            elif message["type"] == "http.response.body":
                state["bytes"] += len(message.get("body", b""))
                if not message.get("more_body", False):
                    # Before the last bytes go out: a client that has its answer finds the line.
                    write()
            await send(message)

        failed = False
        try:
            await self.app(scope, receive, logged_send)
        except BaseException:
            failed = True
            raise
        finally:
            write(failed)


def main() -> None:
    parser = argparse.ArgumentParser(description="olah with a request log")
    parser.add_argument("--config", required=True)
    parser.add_argument("--log-dir", required=True)
    parser.add_argument("--request-log", required=True)
    args = parser.parse_args()

    from olah import server

    # olah parses sys.argv itself; give it only what olah-cli would get.
    sys.argv = [sys.argv[0], "--config", args.config, "--log-path", args.log_dir]
    olah_args = server.init()
    server.app.add_middleware(RequestLog, path=args.request_log)
    server.run_server(olah_args)


if __name__ == "__main__":
    main()
