"""Issue 24, point 2, on a test host: a local user who is not the service's (nobody) trying to take the engine's
place while vllm.service is stopped. Standard library only; run inside the host.

  runuser -u nobody -- python3 squatter.py squat   # as nobody: try the engine's socket, then hold 127.0.0.1:8000
  TRAFFIC_KEY=KEY python3 squatter.py ask           # as root: a chat completion through the front door, with the key

squat writes what each attempt met to /tmp/squatter/attempts.json, then listens on 127.0.0.1:8000 (the engine's port
before it had a socket, free while it is stopped) and appends every byte any connection sends there to
/tmp/squatter/received, answering each like an engine would (a 200 completion "squatter"). ask prints
{"status": N, "body": TEXT} of one POST /v1/chat/completions to the front door (127.0.0.1:8080)."""

from __future__ import annotations

import json
import os
import socket
import sys
import urllib.error
import urllib.request

SOCKET = "/run/fleet-vllm/vllm/engine.sock"
OUT = "/tmp/squatter"
ANSWER = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "squatter"}}]}).encode()


def attempt(action):
    try:
        action()
        return "ok"
    except OSError as exc:
        return "%s: %s" % (exc.__class__.__name__, exc.strerror)


def try_socket():
    """What the engine's socket and its directory let nobody do: connect (the front door's way in), bind a socket
    beside it or in its place, replace or remove it."""
    def connect():
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(SOCKET)

    def bind(path):
        def run():
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
                server.bind(path)
        return run

    return {"uid": os.getuid(), "connect": attempt(connect), "bind_beside": attempt(bind(SOCKET + ".squat")),
            "unlink": attempt(lambda: os.unlink(SOCKET)), "bind_in_place": attempt(bind(SOCKET)),
            "list_directory": attempt(lambda: os.listdir(os.path.dirname(SOCKET)))}


def squat():
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "attempts.json"), "w", encoding="utf-8") as handle:
        json.dump(try_socket(), handle)
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 8000))
    server.listen(16)
    open(os.path.join(OUT, "listening"), "w", encoding="utf-8").close()
    while True:
        connection, _peer = server.accept()
        with connection:
            connection.settimeout(2)
            received = b""
            try:
                while b"\r\n\r\n" not in received:
                    chunk = connection.recv(65536)
                    if not chunk:
                        break
                    received += chunk
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                                   b"Connection: close\r\n\r\n%s" % (len(ANSWER), ANSWER))
            except OSError:
                pass
            with open(os.path.join(OUT, "received"), "ab") as handle:
                handle.write(received)


def ask():
    body = json.dumps({"model": os.environ["TRAFFIC_MODEL"], "max_tokens": 2,
                       "messages": [{"role": "user", "content": "the prompt a squatter must not see"}]}).encode()
    request = urllib.request.Request("http://127.0.0.1:8080/v1/chat/completions", data=body, method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Authorization": "Bearer " + os.environ["TRAFFIC_KEY"]})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = {"status": response.status, "body": response.read().decode()}
    except urllib.error.HTTPError as exc:
        answer = {"status": exc.code, "body": exc.read().decode()}
    print(json.dumps(answer))


if __name__ == "__main__":
    {"squat": squat, "ask": ask}[sys.argv[1]]()
