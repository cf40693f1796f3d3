"""This machine's HAProxy (Debian's package, the one the roles install) run in the foreground
with a configuration a test rendered from the role's template, until the test is done."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time

HAPROXY = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin")


@contextlib.contextmanager
def running(config, port, timeout=30):
    """``haproxy -db -f CONFIG``, once it listens on 127.0.0.1:PORT; stopped on leaving."""
    proc = subprocess.Popen([HAPROXY, "-db", "-f", str(config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stdout.read().decode()
                assert time.monotonic() < deadline, "HAProxy did not listen on %d" % port
                time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def ask(sock, command):
    """One command on HAProxy's runtime API, its whole answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(10)
        conn.connect(str(sock))
        conn.sendall(command.encode() + b"\n")
        chunks = []
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                return b"".join(chunks).decode()
            chunks.append(chunk)
