"""A few routes of the Hub API on 127.0.0.1, for tests of what asks the Hub from the controller
(the vllm_preflight role's listing, the fleet.vllm.hub_revision lookup): answers ``routes``
({path with query: (status, JSON body or bytes[, headers])}, "{endpoint}" in a header value is
replaced by the server's URL, for Link headers) and records each request's path and Authorization
header. tests/hub/fakehub.py is the whole Hub (downloads, faults) for huggingface_hub itself."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class HubApi(object):
    def __init__(self, routes):
        self.routes = routes
        self.requests = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                hub.requests.append((self.path, self.headers.get("Authorization")))
                status, body, headers = (hub.routes.get(self.path, (404, {"error": "Repository Not Found"})) + ({},))[:3]
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value.replace("{endpoint}", hub.endpoint))
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
