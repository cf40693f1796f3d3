# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Surgical edits of JSON text: remove or re-insert one member of an object in place.

Model configuration files are written by different tools (transformers: indent=2 and sorted
keys; ModelOpt: indent=4, no trailing newline), carry floats such as ``1e-05`` whose text a
``json.loads``/``json.dumps`` round trip would rewrite, and may hold escaped or raw unicode.
Re-serialising them would change bytes the collection has no business changing. These helpers
locate members by their character offsets in the original text and cut or splice exactly the
member's own text, so every other byte of the file stays as it was, and a removal followed by
the matching insertion gives back the original text byte for byte.

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

import json
import re

__all__ = [
    "JsonDocError",
    "parse",
    "find_object",
    "remove_member",
    "insert_member",
]

_WS = re.compile(r"[ \t\n\r]*")
_SCALAR = re.compile(
    r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|true|false|null|NaN|-?Infinity"
)


class JsonDocError(ValueError):
    """The text is not JSON, or an edit does not fit the document."""


class _Object(object):
    """Offsets of one JSON object in the text: ``start`` at '{', ``end`` just after '}'."""

    __slots__ = ("start", "end", "members")

    def __init__(self, start):
        self.start = start
        self.end = None
        # Each member: dict(key=, key_start=, value_start=, value_end=, node=_Object or None)
        self.members = []

    def member_index(self, key):
        """Index of the member json.loads would keep for ``key`` (the last one), or None."""
        found = None
        for index, member in enumerate(self.members):
            if member["key"] == key:
                found = index
        return found


def parse(text, name="document"):
    """Return ``(value, root)``: the decoded JSON and the offset tree of its objects.

    Raises JsonDocError naming ``name`` with the line and column of the first error.
    """
    try:
        value = json.loads(text)
    except ValueError as exc:
        if isinstance(exc, json.JSONDecodeError):
            raise JsonDocError("%s is not valid JSON: %s at line %d, column %d" % (name, exc.msg, exc.lineno, exc.colno))
        raise JsonDocError("%s is not valid JSON: %s" % (name, exc))
    start = _WS.match(text, 0).end()
    node, dummy = _scan_value(text, start)
    return value, node


def _scan_value(text, pos):
    char = text[pos]
    if char == "{":
        return _scan_object(text, pos)
    if char == "[":
        return None, _scan_array(text, pos)
    if char == '"':
        return None, json.decoder.scanstring(text, pos + 1)[1]
    match = _SCALAR.match(text, pos)
    if match is None:  # json.loads accepted it, so this cannot happen; keep the error honest
        raise JsonDocError("unexpected character %r at offset %d" % (char, pos))
    return None, match.end()


def _scan_array(text, pos):
    pos = _WS.match(text, pos + 1).end()
    if text[pos] == "]":
        return pos + 1
    while True:
        dummy, pos = _scan_value(text, pos)
        pos = _WS.match(text, pos).end()
        if text[pos] == "]":
            return pos + 1
        pos = _WS.match(text, pos + 1).end()  # skip ','


def _scan_object(text, pos):
    obj = _Object(pos)
    pos = _WS.match(text, pos + 1).end()
    if text[pos] == "}":
        obj.end = pos + 1
        return obj, obj.end
    while True:
        key_start = pos
        key, pos = json.decoder.scanstring(text, pos + 1)
        pos = _WS.match(text, pos).end() + 1  # skip ':'
        value_start = _WS.match(text, pos).end()
        node, value_end = _scan_value(text, value_start)
        obj.members.append(
            dict(key=key, key_start=key_start, value_start=value_start, value_end=value_end, node=node)
        )
        pos = _WS.match(text, value_end).end()
        if text[pos] == "}":
            obj.end = pos + 1
            return obj, obj.end
        pos = _WS.match(text, pos + 1).end()  # skip ','


def find_object(root, path):
    """Follow ``path`` (a list of keys) from ``root``; the _Object there, or None."""
    node = root
    for key in path:
        if node is None:
            return None
        index = node.member_index(key)
        if index is None:
            return None
        node = node.members[index]["node"]
    return node


def remove_member(text, root, path, key):
    """Cut member ``key`` out of the object at ``path``.

    Returns ``(new_text, edit)``; ``edit`` is a JSON-serialisable description that
    insert_member() uses to splice the very same text back in.
    """
    obj = find_object(root, path)
    if obj is None:
        raise JsonDocError("no object at %s" % "/".join(path))
    index = obj.member_index(key)
    if index is None:
        raise JsonDocError("no member %r at %s" % (key, "/".join(path)))
    members = obj.members
    member = members[index]
    edit = dict(
        prev_key=members[index - 1]["key"] if index > 0 else None,
        next_key=members[index + 1]["key"] if index + 1 < len(members) else None,
    )
    if len(members) == 1:
        # The only member: empty the object, keep its braces.
        cut_start, cut_end = obj.start + 1, obj.end - 1
        edit["kind"] = "only"
    elif index + 1 < len(members):
        # Followed by another member: cut the member, its comma and the white space up to the
        # next key, so the next member takes its place and indentation.
        cut_start, cut_end = member["key_start"], members[index + 1]["key_start"]
        edit["kind"] = "before_next"
    else:
        # The last of several: cut from the end of the previous value, taking the comma with it.
        cut_start, cut_end = members[index - 1]["value_end"], member["value_end"]
        edit["kind"] = "after_prev"
    edit["text"] = text[cut_start:cut_end]
    return text[:cut_start] + text[cut_end:], edit


def insert_member(text, root, path, key, edit):
    """Splice back a member removed by remove_member() (``edit`` is what it returned).

    Where the neighbours recorded in ``edit`` are still there the original text is restored
    byte for byte; otherwise the member is appended to the object in the style of its current
    members. Raises JsonDocError when the object is gone or already has ``key``.
    """
    obj = find_object(root, path)
    if obj is None:
        raise JsonDocError("no object at %s" % "/".join(path))
    if obj.member_index(key) is not None:
        raise JsonDocError("member %r already present at %s" % (key, "/".join(path)))
    members = obj.members
    kind = edit.get("kind")
    snippet = edit["text"]
    if kind == "only" and not members:
        return text[: obj.start + 1] + snippet + text[obj.end - 1:]
    if kind == "before_next":
        index = obj.member_index(edit.get("next_key"))
        if index is not None:
            at = members[index]["key_start"]
            return text[:at] + snippet + text[at:]
    if kind == "after_prev":
        index = obj.member_index(edit.get("prev_key"))
        if index is not None:
            at = members[index]["value_end"]
            return text[:at] + snippet + text[at:]
    return _append_member(text, obj, _member_text(snippet, key))


def _member_text(snippet, key):
    """The bare ``"key": value`` part of a recorded snippet (no comma, no outer white space)."""
    start = snippet.find(json.dumps(key))
    if start < 0:
        start = snippet.index('"')
    return snippet[start:].strip().rstrip(",").strip()


def _append_member(text, obj, member_text):
    members = obj.members
    if not members:
        return text[: obj.start + 1] + member_text + text[obj.end - 1:]
    last = members[-1]
    if len(members) > 1:
        # Copy the separator between the last two members: ",\n    " or ", ".
        separator = text[members[-2]["value_end"]:last["key_start"]]
    else:
        indent = text[obj.start + 1:last["key_start"]]
        separator = "," + (indent if indent.strip() == "" and indent else " ")
    return text[: last["value_end"]] + separator + member_text + text[last["value_end"]:]
