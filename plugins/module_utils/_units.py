# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the modules that watch a vLLM service read of it: its systemd unit's properties
(``systemctl show``), its journal (``journalctl -u UNIT -o cat``) and the HTTP endpoint it serves,
for vllm_server_wait and vllm_diagnose. Each caller decides what a failure means; these helpers
only run the command or send the request and return what came back.

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

import errno
import json
import socket
import time

from http.client import HTTPException
from urllib.error import HTTPError, URLError

from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.urls import open_url

# systemd's words, not the host's language: the callers match them.
C_LOCALE = dict(LANG="C", LC_ALL="C", LC_MESSAGES="C")


# ---- systemd and the journal ----------------------------------------------------------------


def run_c(module, argv):
    """``module.run_command`` in the C locale; bytes that are not UTF-8 (a journal line can hold
    any) do not stop it. Returns (rc, stdout, stderr)."""
    return module.run_command(argv, environ_update=C_LOCALE, errors="surrogate_or_replace")


def show_argv(systemctl, unit, properties):
    """The command that prints the unit's ``properties`` (names) as KEY=VALUE lines."""
    return [systemctl, "show", unit, "-p", ",".join(properties), "--no-pager"]


def parse_properties(text):
    """``systemctl show``'s KEY=VALUE lines -> dict; a value may hold "=" itself."""
    props = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[key] = value
    return props


def journal_argv(journalctl, unit, lines):
    """The command that prints the last ``lines`` lines of the unit's journal, messages only (as
    the failure catalogue reads them)."""
    return [journalctl, "-u", unit, "-n", str(lines), "--no-pager", "-o", "cat"]


# ---- HTTP to the engine -----------------------------------------------------------------------


def headers(api_key, json_body):
    """What the engine is sent with each request: its API key as a bearer token (vLLM's
    --api-key, VLLM_API_KEY), and the JSON type of a body."""
    sent = {"Accept": "application/json"}
    if api_key:
        sent["Authorization"] = "Bearer %s" % api_key
    if json_body:
        sent["Content-Type"] = "application/json"
    return sent


class Answer(object):
    """What one request came back with. ``status``: the HTTP status, None when nothing answered.
    ``body``: its bytes (an HTTP error's too). ``reason``: None for an answer of 2xx or 3xx, else
    the HTTP reason phrase or what the connection said (refused, timed out). ``timed_out``: no
    answer within the timeout. ``seconds``: how long it took."""

    __slots__ = ("status", "body", "reason", "timed_out", "seconds")

    def __init__(self, status, body, reason, timed_out, seconds):
        self.status = status
        self.body = body
        self.reason = reason
        self.timed_out = timed_out
        self.seconds = seconds

    @property
    def http_error(self):
        """The server answered with an error status (4xx, 5xx)."""
        return self.status is not None and self.reason is not None

    def json(self):
        """The body parsed as JSON, or None when it is empty or is not JSON."""
        if not self.body:
            return None
        try:
            return json.loads(to_text(self.body))
        except ValueError:
            return None


def _error_body(exc):
    """An HTTP error's body, or b"" when it cannot be read."""
    try:
        return exc.read() if hasattr(exc, "read") else b""
    except (HTTPException, OSError):
        return b""


def where(url, unix_socket=None):
    """How a request's target is named in messages: the URL, and the Unix socket it went over."""
    return "%s over unix:%s" % (url, unix_socket) if unix_socket else url


def _unix_socket_reason(exc, unix_socket):
    """What a connection to the Unix socket ``unix_socket`` that failed says, from the OSError of
    the connect (ansible's UnixHTTPConnection re-raises it as "Invalid Socket File (PATH): ...",
    without its errno; the original is its ``__context__``). A path where nothing is (ENOENT) reads
    as a refused connection, as a TCP port where nothing listens: the server is not up there."""
    cause = exc
    while cause is not None and getattr(cause, "errno", None) is None:
        cause = cause.__context__
    if cause is None:
        return to_text(exc)
    if cause.errno == errno.ENOENT:
        return "Connection refused: no socket at unix:%s ([Errno %d] %s)" % (unix_socket, cause.errno, to_text(cause.strerror))
    return "[Errno %d] %s: unix:%s" % (cause.errno, to_text(cause.strerror or cause), unix_socket)


def request(url, body=None, api_key=None, timeout=30, unix_socket=None, **options):
    """GET ``url``, or POST ``body`` (an object, sent as JSON) to it, within ``timeout`` seconds.
    With ``unix_socket`` (a path) the connection goes to that Unix socket and the URL's host is
    only the Host header. ``options`` go to open_url (validate_certs, use_proxy,
    follow_redirects). Never raises for what the network or the server does: returns an Answer."""
    data = json.dumps(body).encode("utf-8") if body is not None else None
    if unix_socket:
        options["unix_socket"] = unix_socket
    start = time.monotonic()
    status, payload, reason, timed_out = None, b"", None, False
    try:
        response = open_url(url, data=data, headers=headers(api_key, body is not None),
                            method="POST" if body is not None else "GET", timeout=timeout, **options)
        payload = response.read()
        status = response.getcode()
    except HTTPError as exc:
        status = exc.code
        reason = to_text(exc.reason)
        payload = _error_body(exc)
    except URLError as exc:
        timed_out = isinstance(exc.reason, socket.timeout)
        reason = to_text(exc.reason)
        if unix_socket and not timed_out and isinstance(exc.reason, OSError):
            reason = _unix_socket_reason(exc.reason, unix_socket)
    except socket.timeout as exc:
        timed_out = True
        reason = to_text(exc) or "timed out"
    except (HTTPException, OSError) as exc:
        reason = to_text(exc) or exc.__class__.__name__
        if unix_socket and not isinstance(exc, HTTPException):
            reason = _unix_socket_reason(exc, unix_socket)
    return Answer(status, payload, reason, timed_out, round(time.monotonic() - start, 3))
