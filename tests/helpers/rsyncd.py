"""A real rsync daemon on loopback (Debian's rsync, the one the weights role runs as its peer daemon), started in
the foreground from a configuration a test wrote, and handed back only once it accepts connections.

A fixed sleep after the start is not enough: on a loaded two-core CI machine the daemon was not yet listening 0.5 s
after it was started, and the test's first connection was refused (CI of 2026-12-04)."""

from __future__ import annotations

import pathlib
import socket
import subprocess
import time


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(config, port=None, timeout=30):
    """``rsync --daemon --no-detach --config=CONFIG`` on 127.0.0.1; returns (process, port) once it listens.

    With no port, a free one is picked, and picked again if another process took it between the pick and the
    daemon's bind (the daemon then exits at once)."""
    log = pathlib.Path("%s.stderr" % config)
    for _attempt in range(5):
        chosen = port or _free_port()
        with log.open("wb") as err:  # a file, not a pipe: a pipe nobody reads would stall a chatty daemon
            proc = subprocess.Popen(["rsync", "--daemon", "--no-detach", "--address=127.0.0.1",
                                     "--port=%d" % chosen, "--config=%s" % config], stderr=err)
        deadline = time.monotonic() + timeout
        while proc.poll() is None:
            try:
                # A connection that names no module takes none of the daemon's "max connections" slots.
                socket.create_connection(("127.0.0.1", chosen), timeout=1).close()
                return proc, chosen
            except OSError:
                if time.monotonic() > deadline:
                    proc.kill()
                    proc.wait(10)
                    raise AssertionError("rsync --daemon did not listen on 127.0.0.1:%d in %d s" % (chosen, timeout))
                time.sleep(0.05)
        error = log.read_text(errors="replace")
        if port:
            raise AssertionError("rsync --daemon exited (%s): %s" % (proc.returncode, error))
    raise AssertionError("rsync --daemon found no free port: %s" % error)


def stop(proc):
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
