"""A stand-in for vLLM on loopback, as far as a front door sees it (a TEST FIXTURE: it serves no
model): every path answers 200 with JSON naming the path; /v1/models lists the served model name;
/v1/chat/completions and /v1/completions report one completion token. For tests of what sits in
front of the engine (HAProxy's front door, the harnesses' probes), not of the engine. With
strict_model, a request whose JSON body names another model is answered 404 as vLLM answers it
(its OpenAI server's check of the served model names), so that whatever routes by model is seen
to send each request to its own."""

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

    def __init__(self, model="kimi-k2.5", unix_socket=None, strict_model=False):
        seen = self.seen = []
        # The "model" of each JSON body (None where the body names none), in the order received.
        models = self.models = []

        class Handler(BaseHTTPRequestHandler):
            def answer(self):
                seen.append((self.command, self.path, dict(self.headers.items())))
                length = int(self.headers.get("Content-Length") or 0)
                named = None
                if length:
                    try:
                        named = json.loads(self.rfile.read(length)).get("model")
                    except (ValueError, AttributeError):
                        named = None
                    models.append(named)
                body = {"path": self.path}
                if strict_model and named is not None and named != model:
                    body = {"object": "error", "message": "The model `%s` does not exist." % named, "type": "NotFoundError",
                            "code": 404}
                    self.send_json(404, body)
                    return
                if self.path == "/v1/models":
                    body.update(object="list", data=[{"id": model, "object": "model"}])
                elif self.path in ("/v1/chat/completions", "/v1/completions"):
                    body.update(object="chat.completion" if "chat" in self.path else "text_completion",
                                usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2})
                self.send_json(200, body)

            def send_json(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
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
