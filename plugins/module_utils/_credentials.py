# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Credentials inside URLs (``https://user:password@mirror/simple``, ``https://TOKEN@host``,
``?token=...``): find them, and mask them wherever a URL is shown or stored; and the origin a
credential is kept to (a token goes only where its URL's scheme, host and port are).

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

MASK = "****"
# RFC 3986 userinfo: everything between "scheme://" and "@" before the host (no "/", "?", "#").
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^\s/?#@]+)@")
# Query parameters that carry a secret (token=, access_token=, api_key=, password=, X-Amz-Signature=, sig=, ...).
_SECRET_QUERY = re.compile(
    r"(?P<key>[?&;](?:[A-Za-z0-9_.-]*(?:token|passw(?:or)?d|secret|signature|credential|api[_-]?key|auth)[A-Za-z0-9_.-]*"
    r"|key|sig)=)(?P<value>[^&#\s\"']+)", re.IGNORECASE)


def _userinfo(match):
    user, colon, dummy = match.group("userinfo").partition(":")
    # user:password keeps the user; a lone user part is often the token itself (https://TOKEN@host).
    return "%s%s@" % (match.group("scheme"), (user + ":" + MASK) if colon else MASK)


def mask_credentials(text):
    """``text`` with every URL's user information and secret query values replaced by ****."""
    if not isinstance(text, str) or ("@" not in text and "=" not in text):
        return text
    text = _USERINFO.sub(_userinfo, text)
    return _SECRET_QUERY.sub(lambda m: m.group("key") + MASK, text)


def mask_all(value):
    """mask_credentials applied to every string inside lists and dicts."""
    if isinstance(value, str):
        return mask_credentials(value)
    if isinstance(value, (list, tuple)):
        return [mask_all(item) for item in value]
    if isinstance(value, dict):
        return dict((key, mask_all(item)) for key, item in value.items())
    return value


def secrets_in(text):
    """The secret parts of the URLs in ``text`` (passwords, lone user parts, secret query values)."""
    found = []
    if not isinstance(text, str):
        return found
    for match in _USERINFO.finditer(text):
        user, colon, password = match.group("userinfo").partition(":")
        found.append(password if colon else user)
    found.extend(match.group("value") for match in _SECRET_QUERY.finditer(text))
    return [item for item in found if item]


def has_credentials(text):
    return bool(secrets_in(text))


DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url):
    """(scheme, host, port) of a URL, as a browser compares origins (RFC 6454): the scheme and host
    lowercased, the port the scheme's default when none is given, blanks around the URL ignored;
    None for a URL that has no host or whose port is not a number."""
    parts = urlsplit((url or "").strip())
    try:
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    scheme = (parts.scheme or "").lower()
    return scheme, parts.hostname.lower(), port or DEFAULT_PORTS.get(scheme)
