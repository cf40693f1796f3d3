"""Start olah offline over local git repositories: the site mirror of fleet.vllm's tests and demo.

Stdlib only (runs with any Python 3.9+); olah itself runs from its own venv, built by
tests/hub/olah/setup.sh (.cache/olah-venv), through tests/hub/olah/serve.py, which adds a request
log (one line per request: ``METHOD TARGET STATUS BYTES CLIENT``).

From Python (pytest)::

    url, proc = start_olah(mirrors_dir, port)     # port 0 = a free port
    ...                                           # HF_ENDPOINT=url
    read_request_log(proc.request_log)            # [(method, target, status), ...]
    stop_olah(proc)

``mirrors_dir`` holds ``models/<org>/<repo>`` git repositories (tests/hub/synthetic_repo.py
``make_mirror`` writes the Kimi-shaped one, tests/hub/tiny_mla.py ``make_mirror`` the tiny MLA
checkpoints the real CPU engine serves). From a shell::

    python tests/hub/olah/run.py [--port 8090] [--mirrors DIR] [--state-dir DIR]

builds the synthetic mirror when --mirrors is not given, prints the URL on stdout and serves
until interrupted. ``--render-config`` only prints the rendered configs.toml (mirror.sh uses it).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import socket
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
SETUP = HERE / "setup.sh"
SERVE = HERE / "serve.py"
TEMPLATE = HERE / "configs.toml.in"
REQUIREMENTS = HERE / "requirements.txt"
DEFAULT_VENV = Path(os.environ.get("FLEET_VLLM_OLAH_VENV", ROOT / ".cache" / "olah-venv"))


class OlahUnavailable(RuntimeError):
    """olah's venv is missing or could not be built (the message says how to build it)."""


def requirements_hash() -> str:
    return hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]


def olah_python(venv=None) -> Path:
    """The Python of a ready olah venv (built from the current requirements.txt)."""
    venv = Path(venv or DEFAULT_VENV)
    python = venv / "bin" / "python"
    stamp = venv / ".fleet-vllm-requirements"
    if not python.exists() or not stamp.exists() or stamp.read_text().strip() != requirements_hash():
        raise OlahUnavailable("olah venv %s is missing or stale: run %s" % (venv, SETUP.relative_to(ROOT)))
    return python


def ensure_olah(venv=None) -> Path:
    """Build olah's venv if needed (tests/hub/olah/setup.sh: PyPI on first use, then cached)."""
    try:
        return olah_python(venv)
    except OlahUnavailable:
        pass
    env = dict(os.environ)
    if venv:
        env["FLEET_VLLM_OLAH_VENV"] = str(venv)
    result = subprocess.run([str(SETUP)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True, check=False)
    if result.returncode:
        raise OlahUnavailable("%s failed (rc=%d): %s" % (SETUP.relative_to(ROOT), result.returncode,
                                                         result.stderr.strip()[-2000:]))
    return olah_python(venv)


def render_config(host: str, port: int, mirrors_dir, repos_path, mirror_netloc=None) -> str:
    """configs.toml for olah offline over ``mirrors_dir`` (see configs.toml.in)."""
    return string.Template(TEMPLATE.read_text()).substitute(
        host=host, port=int(port), mirrors_path=str(mirrors_dir), repos_path=str(repos_path),
        mirror_netloc=mirror_netloc or "%s:%d" % (host, int(port)))


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def start_olah(mirrors_dir, port: int = 0, host: str = "127.0.0.1", state_dir=None, venv=None,
               timeout: float = 60.0):
    """Start olah offline on ``host:port`` over ``mirrors_dir``; return ``(url, process)`` once it
    accepts connections (a TCP connect, so the request log stays empty until the caller asks).

    ``process`` is a ``subprocess.Popen`` with extra attributes: ``url``, ``state_dir`` (config,
    olah's logs, its stdout/stderr in olah.out), ``request_log`` (Path of the request log).
    Raises OlahUnavailable when the venv is not built, RuntimeError when olah does not come up.
    """
    python = olah_python(venv)
    if not port:
        port = free_port(host)
    state = Path(state_dir) if state_dir else Path(tempfile.mkdtemp(prefix="fleet-vllm-olah-"))
    state.mkdir(parents=True, exist_ok=True)
    config = state / "configs.toml"
    config.write_text(render_config(host, port, Path(mirrors_dir).resolve(), state / "repos"))
    request_log = state / "requests.log"
    request_log.touch()
    out = open(state / "olah.out", "ab")
    try:
        proc = subprocess.Popen(
            [str(python), str(SERVE), "--config", str(config), "--log-dir", str(state / "logs"),
             "--request-log", str(request_log)],
            cwd=str(state), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env={k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))})
    finally:
        out.close()
    url = "http://%s:%d" % (host, port)
    proc.url = url
    proc.state_dir = state
    proc.request_log = request_log
    deadline = time.monotonic() + timeout
    while not _listening(host, port):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_olah(proc)
            tail = (state / "olah.out").read_text(errors="replace")[-3000:]
            raise RuntimeError("olah did not start on %s (rc=%s):\n%s" % (url, proc.returncode, tail))
        time.sleep(0.1)
    return url, proc


def stop_olah(proc, timeout: float = 10.0) -> None:
    """Stop a process started by start_olah (SIGTERM, then SIGKILL)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def read_request_log(path, start: int = 0):
    """The request log's entries from line ``start`` on: [(method, target, status), ...]."""
    entries = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh):
            if number < start:
                continue
            fields = line.split()
            if len(fields) >= 3:
                entries.append((fields[0], fields[1], int(fields[2])))
    return entries


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="olah offline over local git repos (fleet.vllm site mirror)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    parser.add_argument("--mirrors", help="mirrors dir (models/<org>/<repo> git repos); default: a synthetic one")
    parser.add_argument("--state-dir", help="config, logs, request log (default: a new temporary dir)")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--shard-bytes", type=int, default=256 * 1024)
    parser.add_argument("--render-config", action="store_true", help="print configs.toml and exit")
    parser.add_argument("--repos-path", default="/var/lib/olah/repos", help="with --render-config")
    parser.add_argument("--mirror-netloc", help="with --render-config (default host:port)")
    args = parser.parse_args(argv)

    if args.render_config:
        if not args.mirrors or not args.port:
            parser.error("--render-config needs --mirrors and --port")
        sys.stdout.write(render_config(args.host, args.port, args.mirrors, args.repos_path, args.mirror_netloc))
        return 0

    state = Path(args.state_dir or tempfile.mkdtemp(prefix="fleet-vllm-olah-"))
    mirrors = args.mirrors
    if not mirrors:
        sys.path.insert(0, str(HERE.parent))
        import synthetic_repo

        mirrors = state / "mirrors"
        summary = synthetic_repo.make_mirror(mirrors, shards=args.shards, shard_bytes=args.shard_bytes)
        print("synthetic %s at %s, main = %s" % (summary["repo_id"], summary["git_dir"], summary["sha"]),
              file=sys.stderr)
        import tiny_mla

        for summary in tiny_mla.make_mirror(mirrors).values():
            print("synthetic %s at %s, main = %s" % (summary["repo_id"], summary["git_dir"], summary["sha"]),
                  file=sys.stderr)
    try:
        ensure_olah()
        url, proc = start_olah(mirrors, port=args.port, host=args.host, state_dir=state)
    except (OlahUnavailable, RuntimeError) as exc:
        print("olah: %s" % exc, file=sys.stderr)
        return 1
    print(url, flush=True)
    print("request log: %s" % proc.request_log, file=sys.stderr)
    # The handler only signals olah: waiting for it here would deadlock with the wait below.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: proc.terminate())
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
