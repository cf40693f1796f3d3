"""A stand-in for vLLM on loopback, as far as a front door sees it (a TEST FIXTURE: it serves no
model): every path answers 200 with JSON naming the path; /v1/models lists the served model name;
/v1/chat/completions and /v1/completions report one completion token. For tests of what sits in
front of the engine (HAProxy's front door, the harnesses' probes), not of the engine."""

from __future__ import annotations

import json
import os
import socket
import socketserver
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class UnixHTTPServer(ThreadingHTTPServer):
    """An HTTP server on an AF_UNIX stream socket, as vLLM's ``--uds PATH`` binds one."""

    address_family = socket.AF_UNIX
    daemon_threads = True

    def server_bind(self):
        socketserver.TCPServer.server_bind(self)  # HTTPServer's would look up a host name in the path
        self.server_name, self.server_port = "localhost", 0


class StandInEngine(object):
    """On 127.0.0.1 and a free port (``port``), or on the Unix socket ``unix_socket`` (vLLM's --uds; mode 0777 so
    that a front door running as another user may connect). ``seen`` lists (method, path, headers) of each request."""

    def __init__(self, model="kimi-k2.5", unix_socket=None):
        seen = self.seen = []

        class Handler(BaseHTTPRequestHandler):
            def answer(self):
                seen.append((self.command, self.path, dict(self.headers.items())))
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                body = {"path": self.path}
                if self.path == "/v1/models":
                    body.update(object="list", data=[{"id": model, "object": "model"}])
                elif self.path in ("/v1/chat/completions", "/v1/completions"):
                    body.update(object="chat.completion" if "chat" in self.path else "text_completion",
                                usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2})
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = answer  # noqa: N815 (http.server's names)

            def log_message(self, *args):
                pass

            def address_string(self):
                return str(self.client_address or "unix")

        if unix_socket is None:
            self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            self.port = self.server.server_address[1]
        else:
            self.server = UnixHTTPServer(str(unix_socket), Handler)
            os.chmod(str(unix_socket), 0o777)
            self.port = None
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
