"""fakehub: a small fault-injecting Hugging Face Hub-compatible HTTP server. A TEST FIXTURE.

It imitates the subset of the Hub API that huggingface_hub 2.4.0's ``snapshot_download``,
``hf_hub_download`` and a few ``HfApi`` calls use (``repo_info``/``model_info``,
``list_repo_tree``, ``list_repo_refs``, ``get_paths_info``), serving repositories made from
local directories, over plain HTTP with no Xet (``xetHash`` is never advertised). It is not a
Hub: no uploads, no git protocol, no users, no Xet, no datasets viewer. See tests/hub/README.md.

Standard library only. Use it as a library::

    hub = FakeHub().start()                 # 127.0.0.1, a free port
    sha = hub.add_repo("owner/name", "/path/to/dir")
    hub.add_fault("drop", path="*.safetensors", after_bytes=1 << 20, times=1)
    ... HF_ENDPOINT=hub.url ...
    hub.stop()

or as a program (prints its URL on the first line of stdout, then serves until SIGTERM/SIGINT)::

    python tests/hub/fakehub.py --root DIR --port 0     # DIR/<owner>/<name>/ are repositories

Faults can be changed at run time over HTTP (``POST /_fakehub/faults``), so a test can inject
them into a server that another process (ansible-playbook) is downloading from.
"""

from __future__ import annotations

import argparse
import base64
import fnmatch
import hashlib
import json
import mimetypes
import os
import select
import signal
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit

__all__ = ["FakeHub", "FaultError", "FAULT_KINDS", "git_blob_sha1", "lfs_pointer"]

FAULT_KINDS = ("status", "drop", "stall", "slow", "truncate", "wrong_size")
BODY_KINDS = ("drop", "stall", "slow", "truncate")
REPO_TYPES = {"models": "model", "datasets": "dataset"}
URL_PREFIX = {"model": "", "dataset": "datasets/"}
SEND_CHUNK = 64 * 1024
HASH_CHUNK = 1024 * 1024
CONTROL = "/_fakehub"
CDN = "/_fakehub_cdn"
EPOCH = "2026-01-01T00:00:00.000Z"


class FaultError(ValueError):
    """A fault rule that cannot be understood."""


class _Abort(Exception):
    """Stop handling this request and close the connection (the fault asked for it, or the
    client went away, or the server is stopping)."""


# ----------------------------------------------------------------------------------------------
# git / LFS helpers


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob with this content."""
    h = hashlib.sha1(b"blob %d\0" % len(data))
    h.update(data)
    return h.hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The git-lfs pointer file for a blob (what git stores instead of the content)."""
    return b"version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (sha256.encode(), size)


def _hash_file(path: str, size: int, lfs: bool) -> str:
    """sha256 of the content (LFS) or the git blob sha1 of the content, read in chunks."""
    h = hashlib.sha256() if lfs else hashlib.sha1(b"blob %d\0" % size)
    with open(path, "rb") as f:
        while True:
            chunk = f.read(HASH_CHUNK)
            if not chunk:
                break
            h.update(chunk)
    return h.hexdigest()


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(ts))


# ----------------------------------------------------------------------------------------------
# repositories


class _File:
    __slots__ = ("path", "src", "size", "oid", "sha256", "pointer_size")

    def __init__(self, path, src, size, oid, sha256=None, pointer_size=None):
        self.path = path
        self.src = src
        self.size = size
        self.oid = oid  # git blob sha1 of the content, or of the LFS pointer
        self.sha256 = sha256  # LFS files only
        self.pointer_size = pointer_size

    @property
    def is_lfs(self):
        return self.sha256 is not None

    @property
    def etag(self):
        return self.sha256 if self.is_lfs else self.oid

    def entry(self, size=None):
        e = {"type": "file", "oid": self.oid, "size": self.size if size is None else size, "path": self.path}
        if self.is_lfs:
            e["lfs"] = {"oid": self.sha256, "size": self.size if size is None else size, "pointerSize": self.pointer_size}
        return e


class _Revision:
    def __init__(self, sha, files, created):
        self.sha = sha
        self.files = files  # {path: _File}, sorted by path
        self.created = created
        dirs = set()
        for p in files:
            parts = p.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                dirs.add("/".join(parts[:i]))
        self.dirs = {d: hashlib.sha1(("tree:%s:%s" % (sha, d)).encode()).hexdigest() for d in sorted(dirs)}

    def entries(self):
        """Every file and directory, sorted by path (a directory comes before its content)."""
        items = [(d, None) for d in self.dirs] + list(self.files.items())
        return sorted(items, key=lambda kv: kv[0])


class _Repo:
    def __init__(self, repo_type, repo_id):
        self.repo_type = repo_type
        self.repo_id = repo_id
        self.branches = {}  # name -> sha
        self.tags = {}
        self.commits = {}  # sha -> _Revision
        self.default_branch = "main"
        self.gated = False
        self.private = False
        self.token = None
        self.created = time.time()

    def resolve(self, rev):
        if rev.startswith("refs/heads/"):
            return self.branches.get(rev[len("refs/heads/"):])
        if rev.startswith("refs/tags/"):
            return self.tags.get(rev[len("refs/tags/"):])
        if rev in self.branches:
            return self.branches[rev]
        if rev in self.tags:
            return self.tags[rev]
        if rev in self.commits:
            return rev
        return None


# ----------------------------------------------------------------------------------------------
# the server


class FakeHub:
    """A Hub-compatible test server. See the module docstring and tests/hub/README.md.

    ``lfs_threshold``: files at least this big are LFS (besides ``lfs_patterns``).
    ``lfs_redirect``: answer ``/resolve`` of LFS files with a 302 to a "CDN" URL on another
    origin (``localhost`` instead of ``127.0.0.1``, same port), as the real Hub does; by default
    LFS files are served directly with ``X-Linked-Etag``/``X-Linked-Size``.
    ``tree_page_size``: entries per page of ``/tree`` (the Hub pages by 1000, 50 with expand).
    ``rate_limit_bytes_per_second``: a global limit on the body bytes of all responses together.
    """

    def __init__(
        self,
        host="127.0.0.1",
        port=0,
        *,
        lfs_threshold=1024 * 1024,
        lfs_patterns=("*.safetensors",),
        lfs_redirect=False,
        tree_page_size=1000,
        rate_limit_bytes_per_second=None,
        verbose=False,
    ):
        self.host = host
        self._port = port
        self.lfs_threshold = lfs_threshold
        self.lfs_patterns = tuple(lfs_patterns)
        self.lfs_redirect = lfs_redirect
        self.tree_page_size = tree_page_size
        self.verbose = verbose
        self._lock = threading.RLock()
        self._repos = {}  # (repo_type, repo_id) -> _Repo
        self._hash_cache = {}  # (src, size, mtime_ns, ino, lfs) -> hash
        self._by_sha256 = {}  # sha256 -> _File (for the CDN route)
        self._log = []
        self._rules = []
        self._next_rule_id = 1
        self._rate = None
        self._rate_next = 0.0
        self._rate_lock = threading.Lock()
        self.rate_limit_bytes_per_second = rate_limit_bytes_per_second
        self._server = None
        self._thread = None
        self._stopping = threading.Event()
        self._conns = set()
        self._handler_threads = set()

    # -- life cycle -------------------------------------------------------------------------

    def start(self):
        if self._server is not None:
            return self
        hub = self

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 128
            allow_reuse_address = True

            def process_request(self, request, client_address):
                t = threading.Thread(target=self.process_request_thread, args=(request, client_address), daemon=True)
                with hub._lock:
                    hub._handler_threads.add(t)
                t.start()

            def process_request_thread(self, request, client_address):
                try:
                    super().process_request_thread(request, client_address)
                finally:
                    with hub._lock:
                        hub._handler_threads.discard(threading.current_thread())

            def handle_error(self, request, client_address):
                exc = sys.exc_info()[1]
                if isinstance(exc, (ConnectionError, socket.timeout, _Abort, OSError)):
                    return
                if hub.verbose or not hub._stopping.is_set():
                    super().handle_error(request, client_address)

        self._stopping.clear()
        self._server = Server((self.host, self._port), _make_handler(self))
        self._port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="fakehub", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout=5.0):
        """Stop serving: stalled responses end, open connections are closed, threads joined."""
        if self._server is None:
            return
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            conns = list(self._conns)
            threads = list(self._handler_threads)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._thread.join(max(0.0, deadline - time.monotonic()))
        self._server = None
        self._thread = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def port(self):
        return self._port

    @property
    def url(self):
        """The endpoint, e.g. ``http://127.0.0.1:40123`` (no trailing slash): HF_ENDPOINT."""
        return "http://%s:%d" % (self.host, self._port)

    def client_env(self, hf_home, base=None, **extra):
        """Environment for a huggingface_hub client process talking to this server only: HF_ENDPOINT,
        no telemetry, no Xet, HF_HOME in ``hf_home``, and no token variables from ``base``."""
        env = dict(os.environ if base is None else base)
        for k in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE", "HF_HUB_CACHE",
                  "HUGGINGFACE_HUB_CACHE", "HF_HUB_ENABLE_HF_TRANSFER", "HF_XET_CACHE", "HF_DEBUG"):
            env.pop(k, None)
        env.update({
            "HF_ENDPOINT": self.url,
            "HF_HOME": str(hf_home),
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_XET": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        })
        env.update({k: str(v) for k, v in extra.items()})
        return env

    # -- repositories -----------------------------------------------------------------------

    def _is_lfs(self, path, size):
        name = path.rsplit("/", 1)[-1]
        if self.lfs_threshold is not None and size >= self.lfs_threshold:
            return True
        return any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(path, p) for p in self.lfs_patterns)

    def _scan(self, directory):
        directory = os.path.abspath(directory)
        if not os.path.isdir(directory):
            raise FileNotFoundError("not a directory: %s" % directory)
        files = {}
        for root, dirs, names in os.walk(directory):
            dirs.sort()
            for name in sorted(names):
                src = os.path.join(root, name)
                st = os.stat(src)  # follows symlinks, as git add of a checkout would not; fine here
                if not _is_regular(st):
                    continue
                rel = os.path.relpath(src, directory).replace(os.sep, "/")
                lfs = self._is_lfs(rel, st.st_size)
                key = (src, st.st_size, st.st_mtime_ns, st.st_ino, lfs)
                digest = self._hash_cache.get(key)
                if digest is None:
                    digest = _hash_file(src, st.st_size, lfs)
                    self._hash_cache[key] = digest
                if lfs:
                    ptr = lfs_pointer(digest, st.st_size)
                    files[rel] = _File(rel, src, st.st_size, git_blob_sha1(ptr), digest, len(ptr))
                else:
                    files[rel] = _File(rel, src, st.st_size, digest)
        return dict(sorted(files.items()))

    def add_repo(self, repo_id, directory, branch="main", *, tags=(), gated=None, token=None, private=None,
                 repo_type="model", default_branch=None):
        """Add every regular file under ``directory`` as a revision of ``repo_id``; ``branch`` (and
        ``tags``) now point at it. Returns the commit sha: the sha1 of the repo id and the sorted
        (path, size, git oid, sha256) list, so the same content gives the same sha again.

        Files are served from ``directory`` when asked for: do not change them afterwards (add the
        new content as a new revision instead). ``gated=True`` with ``token``: only
        ``Authorization: Bearer <token>`` may download files (as a gated repo the user was granted);
        ``private=True``: without that token the repo does not exist. ``None`` keeps the setting.
        """
        if repo_type not in URL_PREFIX:
            raise ValueError("repo_type must be one of %s" % sorted(URL_PREFIX))
        if repo_id.count("/") > 1 or not repo_id.strip("/"):
            raise ValueError("bad repo id %r" % repo_id)
        with self._lock:
            files = self._scan(directory)
            h = hashlib.sha1(("fakehub-commit\0%s\0%s\0" % (repo_type, repo_id)).encode())
            for f in files.values():
                h.update(("%s\0%d\0%s\0%s\n" % (f.path, f.size, f.oid, f.sha256 or "")).encode())
            sha = h.hexdigest()
            repo = self._repos.get((repo_type, repo_id))
            if repo is None:
                repo = self._repos[(repo_type, repo_id)] = _Repo(repo_type, repo_id)
            if sha not in repo.commits:
                repo.commits[sha] = _Revision(sha, files, time.time())
            repo.branches[branch] = sha
            for t in ([tags] if isinstance(tags, str) else tags):
                repo.tags[t] = sha
            if default_branch is not None:
                repo.default_branch = default_branch
            elif len(repo.branches) == 1:
                repo.default_branch = branch
            if gated is not None:
                repo.gated = bool(gated)
            if private is not None:
                repo.private = bool(private)
            if token is not None:
                repo.token = token
            for f in files.values():
                if f.is_lfs:
                    self._by_sha256[f.sha256] = f
            return sha

    def add_tag(self, repo_id, tag, revision, repo_type="model"):
        with self._lock:
            repo = self._repos[(repo_type, repo_id)]
            sha = repo.resolve(revision)
            if sha is None:
                raise KeyError(revision)
            repo.tags[tag] = sha
            return sha

    def set_branch(self, repo_id, branch, revision, repo_type="model"):
        """Point ``branch`` at an existing revision (e.g. move main back)."""
        with self._lock:
            repo = self._repos[(repo_type, repo_id)]
            sha = repo.resolve(revision)
            if sha is None:
                raise KeyError(revision)
            repo.branches[branch] = sha
            return sha

    def resolve(self, repo_id, revision="main", repo_type="model"):
        """The commit sha a branch/tag/sha names, or None."""
        with self._lock:
            repo = self._repos.get((repo_type, repo_id))
            return repo.resolve(revision) if repo else None

    def repo_files(self, repo_id, revision="main", repo_type="model"):
        """The tree listing entries ({type, path, size, oid[, lfs]}) of the files of a revision."""
        with self._lock:
            repo = self._repos[(repo_type, repo_id)]
            sha = repo.resolve(revision)
            return [f.entry() for f in repo.commits[sha].files.values()]

    def repos(self):
        with self._lock:
            return [{"type": r.repo_type, "id": r.repo_id, "branches": dict(r.branches), "tags": dict(r.tags),
                     "commits": sorted(r.commits), "gated": r.gated, "private": r.private}
                    for r in self._repos.values()]

    # -- request log ------------------------------------------------------------------------

    @property
    def requests(self):
        """Copies of the log entries, oldest first (the /_fakehub control routes are not logged).
        Each: method, path (URL path, not decoded), query, status, range, bytes_sent,
        authorization (True/False: never the value), repo, revision, file, fault, done, error, time."""
        with self._lock:
            return [dict(e) for e in self._log]

    def clear_log(self):
        with self._lock:
            del self._log[:]

    def bytes_served(self, path_prefix=None):
        """Body bytes sent, over every logged request whose URL path (or repo file path) starts
        with ``path_prefix`` (all requests if None)."""
        total = 0
        for e in self.requests:
            if path_prefix is None or e["path"].startswith(path_prefix) or (e.get("file") or "").startswith(path_prefix):
                total += e["bytes_sent"]
        return total

    # -- faults -----------------------------------------------------------------------------

    @property
    def rate_limit_bytes_per_second(self):
        return self._rate

    @rate_limit_bytes_per_second.setter
    def rate_limit_bytes_per_second(self, value):
        if value is not None and (not isinstance(value, (int, float)) or value <= 0):
            raise FaultError("rate_limit_bytes_per_second must be a positive number or null")
        with self._rate_lock:
            self._rate = value
            self._rate_next = 0.0

    def add_fault(self, kind, path="*", *, method=None, times=1, repo=None, **params):
        """Add a fault rule; returns it (a dict with its ``id``). See README.md for the kinds."""
        rule = _validate_rule(dict(params, kind=kind, path=path, method=method, times=times, repo=repo))
        with self._lock:
            rule["id"] = self._next_rule_id
            self._next_rule_id += 1
            self._rules.append(rule)
            return dict(rule)

    def add_faults(self, rules):
        return [self.add_fault(**dict(r)) for r in rules]

    @property
    def faults(self):
        """The active rules (copies), with ``hits`` and the ``times`` left."""
        with self._lock:
            return [dict(r) for r in self._rules]

    def remove_fault(self, rule_id):
        with self._lock:
            n = len(self._rules)
            self._rules = [r for r in self._rules if r["id"] != rule_id]
            return len(self._rules) != n

    def clear_faults(self):
        with self._lock:
            del self._rules[:]

    def _claim(self, kinds, method, url_path, file_path, repo_id, before_headers=False):
        """The first active rule of ``kinds`` matching this request, its count taken (or None)."""
        with self._lock:
            for rule in self._rules:
                if rule["kind"] not in kinds or bool(rule.get("before_headers")) != before_headers:
                    continue
                if not _rule_matches(rule, method, url_path, file_path, repo_id):
                    continue
                self._take(rule)
                return dict(rule)
        return None

    def _take(self, rule):
        rule["hits"] += 1
        if rule["times"] is not None:
            rule["times"] -= 1
            if rule["times"] <= 0:
                self._rules.remove(rule)

    def _wrong_sizes(self, method, url_path, repo_id, paths):
        """{path: advertised size} for the listing of ``paths``; counts one use per listing."""
        out = {}
        with self._lock:
            for rule in list(self._rules):
                if rule["kind"] != "wrong_size":
                    continue
                hit = False
                for p, real in paths:
                    if p in out or not _rule_matches(rule, method, url_path, p, repo_id, file_only=True):
                        continue
                    out[p] = rule["size"] if rule.get("size") is not None else max(0, real + rule.get("delta", 1))
                    hit = True
                if hit:
                    self._take(rule)
        return out

    def _throttle(self, n):
        """Global rate limit: wait until ``n`` more bytes fit."""
        with self._rate_lock:
            rate = self._rate
            if not rate:
                return
            now = time.monotonic()
            start = max(now, self._rate_next)
            self._rate_next = start + n / float(rate)
            wait = self._rate_next - now
        if wait > 0 and self._stopping.wait(wait):
            raise _Abort("server stopping")


def _is_regular(st):
    import stat as _stat

    return _stat.S_ISREG(st.st_mode)


def _validate_rule(rule):
    kind = rule.get("kind")
    if kind not in FAULT_KINDS:
        raise FaultError("kind must be one of %s, not %r" % (", ".join(FAULT_KINDS), kind))
    allowed = {"kind", "path", "method", "times", "repo", "id", "hits"}
    allowed |= {
        "status": {"status", "retry_after", "headers", "message", "error_code", "body"},
        "drop": {"after_bytes", "after_fraction", "mode"},
        "truncate": {"after_bytes", "after_fraction", "short_content_length"},
        "stall": {"after_bytes", "after_fraction", "seconds", "then", "before_headers"},
        "slow": {"bytes_per_second"},
        "wrong_size": {"size", "delta"},
    }[kind]
    unknown = set(rule) - allowed
    if unknown:
        raise FaultError("unknown option(s) for %s: %s" % (kind, ", ".join(sorted(unknown))))
    out = {"kind": kind, "path": rule.get("path") or "*", "times": rule.get("times", 1), "repo": rule.get("repo"),
           "hits": 0}
    if out["times"] is not None and (not isinstance(out["times"], int) or out["times"] < 1):
        raise FaultError("times must be a positive integer or null (forever)")
    method = rule.get("method")
    if method is None:
        method = ["GET", "HEAD", "POST"] if kind == "status" else ["GET"]
    if isinstance(method, str):
        method = ["GET", "HEAD", "POST"] if method == "*" else [method]
    out["method"] = [m.upper() for m in method]
    if kind == "status":
        status = rule.get("status", 500)
        if not isinstance(status, int) or not 400 <= status <= 599:
            raise FaultError("status must be an HTTP error status (400-599)")
        out["status"] = status
        retry_after = rule.get("retry_after", 1 if status in (429, 503) else None)
        out["retry_after"] = retry_after
        for k in ("headers", "message", "error_code", "body"):
            if rule.get(k) is not None:
                out[k] = rule[k]
    if kind in ("drop", "truncate", "stall"):
        if rule.get("after_fraction") is not None:
            fr = rule["after_fraction"]
            if not isinstance(fr, (int, float)) or not 0 <= fr <= 1:
                raise FaultError("after_fraction must be within [0, 1]")
            out["after_fraction"] = float(fr)
        else:
            n = rule.get("after_bytes", 0)
            if not isinstance(n, int) or n < 0:
                raise FaultError("after_bytes must be a non-negative integer")
            out["after_bytes"] = n
    if kind == "drop":
        mode = rule.get("mode", "reset")
        if mode not in ("reset", "close"):
            raise FaultError("drop mode must be 'reset' (RST) or 'close' (FIN)")
        out["mode"] = mode
    if kind == "truncate":
        out["short_content_length"] = bool(rule.get("short_content_length", False))
    if kind == "stall":
        seconds = rule.get("seconds", 3600)
        if not isinstance(seconds, (int, float)) or seconds < 0:
            raise FaultError("seconds must be a non-negative number")
        out["seconds"] = seconds
        then = rule.get("then", "continue")
        if then not in ("continue", "close"):
            raise FaultError("then must be 'continue' or 'close'")
        out["then"] = then
        out["before_headers"] = bool(rule.get("before_headers", False))
        if out["before_headers"] and rule.get("method") is None:
            out["method"] = ["GET", "HEAD", "POST"]
    if kind == "slow":
        bps = rule.get("bytes_per_second")
        if not isinstance(bps, (int, float)) or bps <= 0:
            raise FaultError("slow needs bytes_per_second > 0")
        out["bytes_per_second"] = bps
    if kind == "wrong_size":
        if rule.get("size") is not None:
            if not isinstance(rule["size"], int) or rule["size"] < 0:
                raise FaultError("size must be a non-negative integer")
            out["size"] = rule["size"]
        else:
            d = rule.get("delta", -1)
            if not isinstance(d, int) or d == 0:
                raise FaultError("delta must be a non-zero integer")
            out["delta"] = d
    return out


def _rule_matches(rule, method, url_path, file_path, repo_id, file_only=False):
    if method.upper() not in rule["method"]:
        return False
    if rule.get("repo") and not (repo_id and fnmatch.fnmatchcase(repo_id, rule["repo"])):
        return False
    pat = rule["path"]
    if file_path is not None and fnmatch.fnmatchcase(file_path, pat):
        return True
    return not file_only and fnmatch.fnmatchcase(unquote(url_path), pat)


# ----------------------------------------------------------------------------------------------
# HTTP


def _make_handler(hub):
    class Handler(_Handler):
        pass

    Handler.hub = hub
    return Handler


def _parse_range(header, size):
    """(start, end inclusive) for a single 'bytes=' range; None to serve everything; 'bad' -> 416."""
    if not header:
        return None
    header = header.strip()
    if not header.startswith("bytes=") or "," in header:
        return None  # unsupported forms: serve the whole file (allowed by RFC 9110)
    spec = header[len("bytes="):].strip()
    first, _dash, last = spec.partition("-")
    try:
        if first == "":
            n = int(last)
            if n <= 0:
                return "bad"
            return (max(0, size - n), size - 1) if size else "bad"
        start = int(first)
        end = int(last) if last else size - 1
    except ValueError:
        return None
    if start >= size or end < start:
        return "bad"
    return start, min(end, size - 1)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fakehub/1"
    sys_version = ""
    hub = None  # type: FakeHub

    # -- plumbing -----------------------------------------------------------------------------

    def setup(self):
        super().setup()
        with self.hub._lock:
            self.hub._conns.add(self.connection)

    def finish(self):
        try:
            super().finish()
        except OSError:
            pass
        with self.hub._lock:
            self.hub._conns.discard(self.connection)

    def handle_one_request(self):
        try:
            super().handle_one_request()
        except (_Abort, ConnectionError, socket.timeout, OSError, ValueError):
            # ValueError: I/O on a socket the fault closed. Client gone / fault: quietly close.
            self.close_connection = True

    def log_message(self, fmt, *args):
        if self.hub.verbose:
            sys.stderr.write("fakehub: %s\n" % (fmt % args))

    def do_GET(self):
        self._dispatch()

    def do_HEAD(self):
        self._dispatch()

    def do_POST(self):
        self._dispatch()

    def do_DELETE(self):
        self._dispatch()

    def do_PUT(self):
        self._dispatch()

    # -- dispatch -----------------------------------------------------------------------------

    def _dispatch(self):
        split = urlsplit(self.path)
        self.url_path = split.path
        self.query = parse_qs(split.query, keep_blank_values=True)
        self.entry = None
        if self.url_path == CONTROL or self.url_path.startswith(CONTROL + "/"):
            return self._control()
        hub = self.hub
        self.entry = {
            "time": time.time(), "method": self.command, "path": self.url_path, "query": split.query,
            "status": None, "range": self.headers.get("Range"), "bytes_sent": 0,
            "authorization": bool(self.headers.get("Authorization")), "repo": None, "revision": None,
            "file": None, "fault": None, "done": False, "error": None,
        }
        with hub._lock:
            hub._log.append(self.entry)
        try:
            self._route()
        except _Abort as e:
            self.entry["error"] = str(e) or "aborted"
            self.close_connection = True
            raise
        except (ConnectionError, socket.timeout) as e:
            self.entry["error"] = "client went away: %s" % e.__class__.__name__
            self.close_connection = True
            raise _Abort(self.entry["error"])
        finally:
            self.entry["done"] = True

    def _route(self):
        segs = self.url_path.split("/")[1:]
        m = self.command
        if segs and segs[0] == CDN.strip("/"):
            return self._cdn(segs[1:])
        if len(segs) >= 3 and segs[0] == "api" and segs[1] in REPO_TYPES:
            repo_type = REPO_TYPES[segs[1]]
            rest = segs[2:]
            # /api/models/{owner}/{name}/{action}/... or /api/models/{name}/{action}/...
            if len(rest) >= 2 and rest[1] in ("revision", "tree", "refs", "paths-info"):
                repo_id, rest = unquote(rest[0]), rest[1:]
            else:
                repo_id, rest = "/".join(unquote(s) for s in rest[:2]), rest[2:]
            if not rest:
                return self._api_info(m, repo_type, repo_id, None)
            action = rest[0]
            if action == "revision" and len(rest) >= 2:
                return self._api_info(m, repo_type, repo_id, unquote("/".join(rest[1:])))
            if action == "tree" and len(rest) >= 2:
                path = unquote("/".join(rest[2:])).strip("/") if len(rest) > 2 else ""
                return self._api_tree(m, repo_type, repo_id, unquote(rest[1]), path)
            if action == "refs" and len(rest) == 1:
                return self._api_refs(m, repo_type, repo_id)
            if action == "paths-info" and len(rest) >= 2:
                return self._api_paths_info(m, repo_type, repo_id, unquote("/".join(rest[1:])))
            return self._error(404, "Not Found", None)
        # /[datasets/]{owner}/{name}/resolve/{rev}/{path}
        repo_type = "model"
        if segs and segs[0] == "datasets":
            repo_type, segs = "dataset", segs[1:]
        if "resolve" in segs[1:3]:
            i = segs.index("resolve", 1)
            repo_id = "/".join(unquote(s) for s in segs[:i])
            if len(segs) >= i + 3:
                return self._resolve(m, repo_type, repo_id, unquote(segs[i + 1]),
                                     "/".join(unquote(s) for s in segs[i + 2:]))
        return self._error(404, "Not Found", None)

    # -- access -------------------------------------------------------------------------------

    def _bearer(self):
        auth = self.headers.get("Authorization") or ""
        return auth[7:].strip() if auth.lower().startswith("bearer ") else None

    def _lookup(self, method, repo_type, repo_id, revision, *, files=False, file_path=None):
        """(repo, commit sha) or None after answering an error the way the Hub does."""
        e = self.entry
        e["repo"], e["revision"], e["file"] = repo_id, revision, file_path
        hub = self.hub
        fault = hub._claim(("status",), method, self.url_path, file_path, repo_id)
        if fault is not None:
            e["fault"] = "status"
            self._status_fault(fault)
            return None
        self._stall_before_headers(method, file_path, repo_id)
        with hub._lock:
            repo = hub._repos.get((repo_type, repo_id))
            token = self._bearer()
            if repo is None or (repo.private and (repo.token is None or token != repo.token)):
                self._error(401 if token is None else 404, "Repository not found", "RepoNotFound")
                return None
            sha = repo.resolve(revision if revision is not None else repo.default_branch)
            if sha is None:
                self._error(404, "Invalid rev id: %s" % revision, "RevisionNotFound")
                return None
            if files and repo.gated and (repo.token is None or token != repo.token):
                kind = "model" if repo_type == "model" else repo_type
                if token is None:
                    msg = ("Access to %s %s is restricted. You must have access to it and be authenticated to "
                           "access it. Please log in." % (kind, repo_id))
                    self._error(401, msg, "GatedRepo", commit=sha)
                else:
                    msg = ("Access to %s %s is restricted and you are not in the authorized list. Visit %s/%s "
                           "to ask for access." % (kind, repo_id, self.hub.url, repo_id))
                    self._error(403, msg, "GatedRepo", commit=sha)
                return None
            return repo, sha

    def _stall_before_headers(self, method, file_path, repo_id):
        stall = self.hub._claim(("stall",), method, self.url_path, file_path, repo_id, before_headers=True)
        if stall is not None:
            self.entry["fault"] = "stall"
            self._wait(stall["seconds"])
            if stall["then"] == "close":
                self._close(reset=False)
                raise _Abort("stalled before the headers, then closed")

    # -- API ----------------------------------------------------------------------------------

    def _api_info(self, method, repo_type, repo_id, revision):
        if method != "GET":
            return self._error(405, "Method not allowed", None)
        found = self._lookup(method, repo_type, repo_id, revision)
        if found is None:
            return
        repo, sha = found
        with self.hub._lock:
            rev = repo.commits[sha]
            blobs = self._flag("blobs")
            sizes = self.hub._wrong_sizes(method, self.url_path, repo_id,
                                          [(p, f.size) for p, f in rev.files.items()]) if blobs else {}
            siblings = []
            for f in rev.files.values():
                s = {"rfilename": f.path}
                if blobs:
                    size = sizes.get(f.path, f.size)
                    s.update({"size": size, "blobId": f.oid})
                    if f.path in sizes:
                        self.entry["fault"] = "wrong_size"
                    if f.is_lfs:
                        s["lfs"] = {"sha256": f.sha256, "size": size, "pointerSize": f.pointer_size}
                siblings.append(s)
            owner = repo_id.split("/")[0] if "/" in repo_id else None
            gated = "manual" if repo.gated else False
            info = {
                "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24], "id": repo_id, "author": owner,
                "sha": sha, "lastModified": _iso(rev.created), "createdAt": _iso(repo.created),
                "private": repo.private, "gated": gated, "disabled": False, "tags": [], "downloads": 0,
                "likes": 0, "siblings": siblings,
                "usedStorage": sum(f.size for c in repo.commits.values() for f in c.files.values()),
            }
            if repo_type == "model":
                info["modelId"] = repo_id
                info["library_name"] = "transformers"
        self._json(200, info, commit=sha)

    def _api_refs(self, method, repo_type, repo_id):
        found = self._lookup(method, repo_type, repo_id, None)
        if found is None:
            return
        repo = found[0]
        with self.hub._lock:
            data = {
                "branches": [{"name": b, "ref": "refs/heads/" + b, "targetCommit": s} for b, s in sorted(repo.branches.items())],
                "converts": [],
                "tags": [{"name": t, "ref": "refs/tags/" + t, "targetCommit": s} for t, s in sorted(repo.tags.items())],
            }
            if self.query.get("include_prs"):
                data["pullRequests"] = []
        self._json(200, data)

    def _flag(self, name):
        v = self.query.get(name, ["false"])[-1].lower()
        return v in ("1", "true", "yes", "on")

    def _tree_entry(self, rev, path, f, sizes, expand):
        if f is None:
            e = {"type": "directory", "oid": rev.dirs[path], "size": 0, "path": path}
        else:
            e = f.entry(sizes.get(path))
        if expand:
            e["lastCommit"] = {"id": rev.sha, "title": "fakehub revision", "date": _iso(rev.created)}
            if f is not None:
                e["securityFileStatus"] = {"status": "safe", "avScan": {"virusFound": False, "virusNames": None},
                                           "pickleImportScan": None}
        return e

    def _api_tree(self, method, repo_type, repo_id, revision, path):
        if method != "GET":
            return self._error(405, "Method not allowed", None)
        found = self._lookup(method, repo_type, repo_id, revision)
        if found is None:
            return
        repo, sha = found
        recursive, expand = self._flag("recursive"), self._flag("expand")
        with self.hub._lock:
            rev = repo.commits[sha]
            if path and path not in rev.dirs:
                return self._error(404, "Entry not found" if path not in rev.files else "%s is a file" % path,
                                   "EntryNotFound", commit=sha)
            prefix = path + "/" if path else ""
            items = []
            for p, f in rev.entries():
                if not p.startswith(prefix):
                    continue
                if not recursive and "/" in p[len(prefix):]:
                    continue
                items.append((p, f))
            page_size = 50 if expand else self.hub.tree_page_size
            try:
                start = int(base64.urlsafe_b64decode(self.query.get("cursor", [""])[-1] + "==").decode() or 0)
            except (ValueError, UnicodeDecodeError):
                return self._error(400, "Invalid cursor", None)
            page = items[start:start + page_size]
            sizes = self.hub._wrong_sizes(method, self.url_path, repo_id,
                                          [(p, f.size) for p, f in page if f is not None])
            body = [self._tree_entry(rev, p, f, sizes, expand) for p, f in page]
            if sizes:
                self.entry["fault"] = "wrong_size"
        headers = []
        if start + page_size < len(items):
            cursor = base64.urlsafe_b64encode(str(start + page_size).encode()).decode().rstrip("=")
            nxt = "http://%s%s?recursive=%s&expand=%s&cursor=%s" % (
                self.headers.get("Host") or "%s:%d" % (self.hub.host, self.hub.port), self.url_path,
                str(recursive).lower(), str(expand).lower(), cursor)
            headers.append(("Link", '<%s>; rel="next"' % nxt))
        self._json(200, body, headers=headers, commit=sha)

    def _api_paths_info(self, method, repo_type, repo_id, revision):
        if method != "POST":
            return self._error(405, "Method not allowed", None)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        ctype = self.headers.get("Content-Type") or ""
        if "json" in ctype:
            try:
                form = json.loads(raw or "{}")
            except ValueError:
                return self._error(400, "Invalid JSON", None)
            paths = form.get("paths") or []
            expand = bool(form.get("expand"))
        else:
            form = parse_qs(raw, keep_blank_values=True)
            paths = form.get("paths", [])
            expand = (form.get("expand", ["false"])[-1].lower() in ("1", "true"))
        found = self._lookup(method, repo_type, repo_id, revision)
        if found is None:
            return
        repo, sha = found
        with self.hub._lock:
            rev = repo.commits[sha]
            sizes = self.hub._wrong_sizes("GET", self.url_path, repo_id,
                                          [(p, rev.files[p].size) for p in paths if p in rev.files])
            if sizes:
                self.entry["fault"] = "wrong_size"
            body = []
            for p in paths:
                p = p.strip("/")
                if p in rev.files:
                    body.append(self._tree_entry(rev, p, rev.files[p], sizes, expand))
                elif p in rev.dirs:
                    body.append(self._tree_entry(rev, p, None, sizes, expand))
        self._json(200, body, commit=sha)

    # -- files --------------------------------------------------------------------------------

    def _resolve(self, method, repo_type, repo_id, revision, file_path):
        if method not in ("GET", "HEAD"):
            return self._error(405, "Method not allowed", None)
        found = self._lookup(method, repo_type, repo_id, revision, files=True, file_path=file_path)
        if found is None:
            return
        repo, sha = found
        f = repo.commits[sha].files.get(file_path)
        if f is None:
            return self._error(404, "Entry not found", "EntryNotFound", commit=sha)
        headers = [("X-Repo-Commit", sha), ("Accept-Ranges", "bytes")]
        if f.is_lfs:
            headers += [("X-Linked-Etag", '"%s"' % f.sha256), ("X-Linked-Size", str(f.size))]
        if f.is_lfs and self.hub.lfs_redirect:
            loc = "http://localhost:%d%s/%s/%s" % (self.hub.port, CDN, f.sha256, quote(f.path.rsplit("/", 1)[-1]))
            headers += [("ETag", '"%s"' % f.oid), ("Location", loc)]
            return self._send(302, headers, b"Found. Redirecting to %s" % loc.encode(), "text/plain; charset=utf-8")
        headers.append(("ETag", '"%s"' % f.etag))
        self._send_file(f, headers)

    def _cdn(self, segs):
        # /_fakehub_cdn/{sha256}/{name}: the "CDN" an LFS redirect points at (no auth, no commit header)
        e = self.entry
        if self.command not in ("GET", "HEAD") or not segs:
            return self._error(404, "Not Found", None)
        with self.hub._lock:
            f = self.hub._by_sha256.get(segs[0])
        if f is None:
            return self._error(404, "Not Found", None)
        e["file"] = f.path
        fault = self.hub._claim(("status",), self.command, self.url_path, f.path, None)
        if fault is not None:
            e["fault"] = "status"
            return self._status_fault(fault)
        self._stall_before_headers(self.command, f.path, None)
        self._send_file(f, [("ETag", '"%s"' % f.sha256), ("Accept-Ranges", "bytes")])

    def _send_file(self, f, headers):
        name = f.path.rsplit("/", 1)[-1]
        ctype = mimetypes.guess_type(name)[0] or "application/octet-stream"
        headers = headers + [("Content-Disposition", "inline; filename*=UTF-8''%s; filename=\"%s\";" % (
            quote(name), name.encode("ascii", "replace").decode().replace('"', "_")))]
        try:
            size = os.path.getsize(f.src)
        except OSError:
            return self._error(500, "file vanished from the fake hub's directory", None)
        rng = _parse_range(self.headers.get("Range"), size)
        if rng == "bad":
            return self._send(416, headers + [("Content-Range", "bytes */%d" % size)], b"", ctype)
        if rng is None:
            status, start, length = 200, 0, size
        else:
            status, start, length = 206, rng[0], rng[1] - rng[0] + 1
            headers.append(("Content-Range", "bytes %d-%d/%d" % (rng[0], rng[1], size)))
        self._send(status, headers, (f.src, start, length), ctype)

    # -- responses ----------------------------------------------------------------------------

    def _error(self, status, message, code, commit=None):
        headers = [("X-Error-Message", message)]
        if code:
            headers.append(("X-Error-Code", code))
        if commit:
            headers.append(("X-Repo-Commit", commit))
        self._json(status, {"error": message}, headers=headers)

    def _status_fault(self, rule):
        status = rule["status"]
        headers = [(k, str(v)) for k, v in (rule.get("headers") or {}).items()]
        if rule.get("retry_after") is not None:
            headers.append(("Retry-After", str(rule["retry_after"])))
        message = rule.get("message") or {429: "Too Many Requests", 500: "Internal Error", 502: "Bad Gateway",
                                          503: "Service Unavailable", 504: "Gateway Timeout"}.get(status, "Error")
        headers.append(("X-Error-Message", message))
        if rule.get("error_code"):
            headers.append(("X-Error-Code", rule["error_code"]))
        body = rule.get("body")
        if body is None:
            self._json(status, {"error": message}, headers=headers)
        else:
            self._send(status, headers, body.encode() if isinstance(body, str) else body, "text/plain; charset=utf-8")

    def _json(self, status, obj, headers=(), commit=None):
        headers = list(headers)
        if commit and not any(h[0] == "X-Repo-Commit" for h in headers):
            headers.append(("X-Repo-Commit", commit))
        self._send(status, headers, json.dumps(obj).encode(), "application/json; charset=utf-8")

    def _send(self, status, headers, body, ctype):
        """Status line, headers, then the body (bytes, or (path, start, length) streamed from disk),
        applying this request's body fault and the global rate limit."""
        e = self.entry
        if isinstance(body, tuple):
            length = body[2]
        else:
            length = len(body)
        fault = None
        if e is not None and self.command != "HEAD" and status in (200, 206):
            fault = self.hub._claim(BODY_KINDS, self.command, self.url_path, e["file"], e["repo"])
        cut = None
        if fault is not None and fault["kind"] in ("drop", "truncate", "stall"):
            cut = fault["after_bytes"] if "after_bytes" in fault else int(length * fault["after_fraction"])
            cut = min(cut, length)
        if e is not None:
            e["status"] = status
            if fault is not None:
                e["fault"] = fault["kind"]
        advertised = length
        if fault is not None and fault["kind"] == "truncate" and fault.get("short_content_length"):
            advertised = cut
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(advertised))
        self.send_header("X-Request-Id", "Root=1-%08x-%s" % (int(time.time()), os.urandom(12).hex()))
        self.send_header("Access-Control-Expose-Headers",
                         "X-Repo-Commit,X-Request-Id,X-Error-Code,X-Error-Message,X-Total-Count,ETag,Link,"
                         "Accept-Ranges,Content-Range,X-Linked-Size,X-Linked-ETag")
        self.send_header("Vary", "Origin")
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if self.command == "HEAD" or advertised == 0 and cut is None:
            return
        self._write_body(body, length, fault, cut)

    def _write_body(self, body, length, fault, cut):
        hub, e = self.hub, self.entry
        kind = fault["kind"] if fault else None
        bps = fault["bytes_per_second"] if kind == "slow" else None
        chunk = SEND_CHUNK
        if bps:
            chunk = int(max(1, min(SEND_CHUNK, bps / 10)))
        if hub._rate:
            chunk = int(max(1, min(chunk, hub._rate / 20)))
        limit = length if cut is None else cut
        started = time.monotonic()
        sent = 0

        def emit(data):
            nonlocal sent
            hub._throttle(len(data))
            if e is not None:  # counted before the write: the client may read the log right after
                e["bytes_sent"] = sent + len(data)
            try:
                self.wfile.write(data)
            except BaseException:
                if e is not None:
                    e["bytes_sent"] = sent
                raise
            sent += len(data)
            if bps:
                ahead = sent / float(bps) - (time.monotonic() - started)
                if ahead > 0 and hub._stopping.wait(ahead):
                    raise _Abort("server stopping")

        def pieces(upto):
            """Yield body pieces until ``upto`` bytes in total were produced."""
            if isinstance(body, tuple):
                src, start = body[0], body[1]
                with open(src, "rb") as fh:
                    fh.seek(start + sent)
                    left = upto - sent
                    while left > 0:
                        data = fh.read(min(chunk, left))
                        if not data:
                            raise _Abort("file shorter than advertised")
                        left -= len(data)
                        yield data
            else:
                mv = memoryview(body)
                pos = sent
                while pos < upto:
                    yield bytes(mv[pos:pos + chunk])
                    pos += chunk

        for data in pieces(limit):
            emit(data)
        if cut is None:
            return
        if kind == "stall":
            self._wait(fault["seconds"], watch_client=True)
            if fault["then"] == "close":
                self._close(reset=False)
                raise _Abort("stalled, then closed")
            for data in pieces(length):
                emit(data)
            return
        if kind == "truncate" and fault.get("short_content_length"):
            return  # a short but self-consistent response; the connection stays usable
        self._close(reset=(kind == "drop" and fault["mode"] == "reset"))
        raise _Abort("%s after %d bytes" % (kind, sent))

    def _wait(self, seconds, watch_client=False):
        """Sleep ``seconds`` (or until the server stops, or the client closes its end)."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self.hub._stopping.is_set():
                raise _Abort("server stopping")
            step = min(left, 0.1)
            try:
                readable = select.select([self.connection], [], [], step)[0]
            except (OSError, ValueError):
                raise _Abort("client went away")
            if readable:
                try:
                    peek = self.connection.recv(1, socket.MSG_PEEK)
                except OSError:
                    peek = b""
                if not peek:
                    raise _Abort("client went away during a stall")
                if not watch_client:
                    time.sleep(step)  # data from a pipelining client: just keep waiting

    def _drain(self, timeout=2.0):
        """Wait until the kernel sent what we wrote (so an RST does not discard it)."""
        try:
            import fcntl
            import termios

            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                buf = fcntl.ioctl(self.connection.fileno(), termios.TIOCOUTQ, struct.pack("i", 0))
                if struct.unpack("i", buf)[0] == 0:
                    return
                time.sleep(0.01)
        except (ImportError, OSError, AttributeError):
            time.sleep(0.05)

    def _close(self, reset):
        self.close_connection = True
        sock = self.connection
        try:
            self.wfile.flush()
        except (OSError, ValueError):
            pass
        self._drain()
        try:
            if reset:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            else:
                sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        try:
            sock.close()
        except OSError:
            pass

    # -- control plane ------------------------------------------------------------------------

    def _control_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw.decode("utf-8") or "null") if raw else None

    def _control(self):
        hub, m = self.hub, self.command
        what = self.url_path[len(CONTROL):].strip("/")
        try:
            if what == "log":
                if m == "GET":
                    return self._json(200, hub.requests)
                if m == "DELETE":
                    hub.clear_log()
                    return self._json(200, {"cleared": True})
            elif what == "faults":
                if m == "GET":
                    return self._json(200, {"rules": hub.faults,
                                            "rate_limit_bytes_per_second": hub.rate_limit_bytes_per_second})
                if m == "POST":
                    body = self._control_body()
                    if isinstance(body, dict) and ("rules" in body or "rate_limit_bytes_per_second" in body):
                        rules = body.get("rules") or []
                        if "rate_limit_bytes_per_second" in body:
                            hub.rate_limit_bytes_per_second = body["rate_limit_bytes_per_second"]
                    elif isinstance(body, dict):
                        rules = [body]
                    elif isinstance(body, list):
                        rules = body
                    else:
                        raise FaultError("POST a rule, a list of rules, or {rules: [...], rate_limit_bytes_per_second}")
                    for r in rules:
                        _validate_rule(dict(r))  # all or nothing
                    added = hub.add_faults(rules)
                    return self._json(200, {"added": added, "rules": hub.faults,
                                            "rate_limit_bytes_per_second": hub.rate_limit_bytes_per_second})
                if m == "DELETE":
                    hub.clear_faults()
                    hub.rate_limit_bytes_per_second = None
                    return self._json(200, {"cleared": True})
            elif what.startswith("faults/") and m == "DELETE":
                return self._json(200, {"removed": hub.remove_fault(int(what.split("/", 1)[1]))})
            elif what == "repos":
                if m == "GET":
                    return self._json(200, hub.repos())
                if m == "POST":
                    b = self._control_body() or {}
                    sha = hub.add_repo(b["repo_id"], b["directory"], b.get("branch", "main"), tags=b.get("tags", ()),
                                       gated=b.get("gated"), token=b.get("token"), private=b.get("private"),
                                       repo_type=b.get("repo_type", "model"))
                    return self._json(200, {"sha": sha})
            elif what == "" and m == "GET":
                return self._json(200, {"fakehub": True, "url": hub.url, "repos": hub.repos()})
            return self._json(404, {"error": "unknown control route %s %s" % (m, self.url_path)})
        except (FaultError, ValueError, KeyError, TypeError, FileNotFoundError) as exc:
            return self._json(400, {"error": "%s: %s" % (exc.__class__.__name__, exc)})


# ----------------------------------------------------------------------------------------------
# CLI


def main(argv=None):
    p = argparse.ArgumentParser(description="A fault-injecting Hugging Face Hub-compatible test server.")
    p.add_argument("--root", help="serve every DIR/<owner>/<name>/ as repo owner/name (branch main)")
    p.add_argument("--repo", action="append", default=[], metavar="OWNER/NAME=DIR", help="add one repo (repeatable)")
    p.add_argument("--gated", action="append", default=[], metavar="OWNER/NAME=TOKEN",
                   help="make a repo gated; TOKEN is the one that is granted access (repeatable)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--lfs-threshold", type=int, default=1024 * 1024)
    p.add_argument("--lfs-redirect", action="store_true", help="302 LFS files to a CDN-like URL (another origin)")
    p.add_argument("--rate-limit", type=float, default=None, help="global bytes per second")
    p.add_argument("--faults", help="JSON file: a list of fault rules")
    p.add_argument("--url-file", help="also write the URL to this file once listening")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)

    hub = FakeHub(args.host, args.port, lfs_threshold=args.lfs_threshold, lfs_redirect=args.lfs_redirect,
                  rate_limit_bytes_per_second=args.rate_limit, verbose=args.verbose)
    gated = dict(g.split("=", 1) for g in args.gated)
    repos = []
    if args.root:
        for owner in sorted(os.listdir(args.root)):
            od = os.path.join(args.root, owner)
            if os.path.isdir(od) and not owner.startswith("."):
                for name in sorted(os.listdir(od)):
                    if os.path.isdir(os.path.join(od, name)):
                        repos.append(("%s/%s" % (owner, name), os.path.join(od, name)))
    repos += [tuple(r.split("=", 1)) for r in args.repo]
    for repo_id, directory in repos:
        sha = hub.add_repo(repo_id, directory, gated=repo_id in gated or None, token=gated.get(repo_id))
        sys.stderr.write("fakehub: %s main=%s\n" % (repo_id, sha))
    if args.faults:
        with open(args.faults) as fh:
            hub.add_faults(json.load(fh))
    # Before the URL is announced: a client may stop the server as soon as it has answered once.
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *args: done.set())
    hub.start()
    if args.url_file:
        tmp = args.url_file + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(hub.url + "\n")
        os.replace(tmp, args.url_file)
    print(hub.url, flush=True)
    while not done.wait(1.0):
        pass
    hub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
