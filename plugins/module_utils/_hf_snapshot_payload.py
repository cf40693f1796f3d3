# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The program fleet.vllm.hf_snapshot runs with the Python that has huggingface_hub.

The module runs ``python -c BOOTSTRAP FILE``, FILE holding ``{"payload": SOURCE, "question":
{...}}`` in the module's temporary directory, SOURCE being this file's text as source() reads it
(from the AnsiballZ zip on a host). BOOTSTRAP runs SOURCE as ``__main__``, whose main() reads
the question from FILE. A fresh process for every request to the hub: huggingface_hub reads
HF_ENDPOINT, HF_HUB_DISABLE_XET and its timeouts when it is imported, and a download that stalls
is stopped by killing that process. The token comes in the environment (HF_TOKEN), never on the
command line. main() prints one JSON answer on its last stdout line; everything huggingface_hub
prints goes to stderr. ``python _hf_snapshot_payload.py FILE`` runs it the same way.

Standard library only at import time (the host's Python imports this file to read it, and has no
huggingface_hub): huggingface_hub is imported by answer(), in the child.

Question: ``{"op": "resolve"|"download", "repo_id": str, "revision": str,
"allow_patterns": [str]|null, "ignore_patterns": [str]|null, "local_dir": str (download), "max_workers": int (download)}``.

Answers: resolve -> ``{"commit": sha, "files": [{"path", "size", "sha256" (LFS) or "git_sha1"}]}``; download -> ``{"path": str}``; any failure ->
``{"error": {"type", "status", "message", "retry_after", "fatal"}}``.

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

import json
import os
import sys

BOOTSTRAP = (
    "import json, sys; exec(compile(json.load(open(sys.argv[1]))['payload'], '<fleet.vllm.hf_snapshot>', 'exec'), "
    "{'__name__': '__main__'})"
)

# Errors that another attempt cannot fix: the caller fails at once and says what to set.
FATAL = ("RepositoryNotFoundError", "GatedRepoError", "RevisionNotFoundError", "EntryNotFoundError",
         "RemoteEntryNotFoundError", "DisabledRepoError", "HFValidationError", "LocalEntryNotFoundError",
         "OfflineModeIsEnabled")


def source():
    """This file's text, which the module sends to the child: read through the loader that imported it - from the
    AnsiballZ zip on a host (zipimport), from the file in a checkout."""
    return __spec__.loader.get_source(__spec__.name)


def die_with_parent():
    """Linux: end this process when the module that started it dies (a killed ansible run or async job), so
    that no download goes on writing behind a run that is over. Elsewhere a no-op."""
    try:
        import ctypes
        import signal
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:
            os._exit(1)
    except Exception:
        pass


def answer_stream():
    """The stream the answer goes to - the real stdout; from here on, anything else written to stdout (by
    huggingface_hub, or a print in it) goes to stderr, so that the answer stays the last stdout line."""
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return answers


def one_line(exc):
    text = " ".join(str(exc).split())
    if len(text) > 800:
        text = text[:800] + "..."
    return text or type(exc).__name__


def describe(exc):
    names = [cls.__name__ for cls in type(exc).__mro__]
    status = retry_after = None
    response = getattr(exc, "response", None)
    if response is not None:
        status = getattr(response, "status_code", None)
        try:
            retry_after = response.headers.get("Retry-After")
        except Exception:
            retry_after = None
    fatal = any(name in FATAL for name in names) or status in (401, 403, 404)
    if isinstance(exc, OSError) and getattr(exc, "errno", None) in (28, 122):  # ENOSPC, EDQUOT
        fatal = True
    return dict(type=type(exc).__name__, status=status, message=one_line(exc), retry_after=retry_after,
                fatal=bool(fatal))


def answer(question):
    try:
        import huggingface_hub
        from huggingface_hub import HfApi, snapshot_download
        from huggingface_hub.utils import filter_repo_objects
    except Exception as exc:
        return dict(error=dict(type="ImportError", status=None, fatal=True, retry_after=None,
                               message="huggingface_hub cannot be imported by %s: %s" % (sys.executable, one_line(exc))))
    op = question["op"]
    allow, ignore = question.get("allow_patterns"), question.get("ignore_patterns")
    try:
        if op == "resolve":
            api = HfApi()
            info = api.model_info(question["repo_id"], revision=question["revision"])
            commit = info.sha
            files = []
            entries = [entry for entry in api.list_repo_tree(question["repo_id"], revision=commit, recursive=True)
                       if getattr(entry, "size", None) is not None and hasattr(entry, "blob_id")]
            for entry in filter_repo_objects(entries, allow_patterns=allow, ignore_patterns=ignore,
                                             key=lambda item: item.path):
                item = dict(path=entry.path, size=entry.size)
                if entry.lfs is not None:
                    item["size"] = entry.lfs.size
                    item["sha256"] = entry.lfs.sha256
                else:
                    # The git blob id of the content (sha1 of "blob <size>\0<content>").
                    item["git_sha1"] = entry.blob_id
                files.append(item)
            return dict(commit=commit, files=files, hub_version=huggingface_hub.__version__)
        if op == "download":
            path = snapshot_download(question["repo_id"], revision=question["revision"],
                                     local_dir=question["local_dir"], allow_patterns=allow,
                                     ignore_patterns=ignore, max_workers=question.get("max_workers") or 8)
            return dict(path=str(path))
        return dict(error=dict(type="ValueError", status=None, fatal=True, retry_after=None,
                               message="unknown operation %r" % (op,)))
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return dict(error=describe(exc))


def main(argv=None):
    """The child's run: answer the question of the file argv[1] names (the one BOOTSTRAP ran this from)."""
    # Nothing is imported from the working directory (python -c puts it first on sys.path).
    sys.path[:] = [p for p in sys.path if p not in ("", ".")]
    die_with_parent()
    answers = answer_stream()
    with open((sys.argv if argv is None else argv)[1]) as handle:
        question = json.load(handle)["question"]
    answers.write(json.dumps(answer(question)) + "\n")
    answers.flush()


if __name__ == "__main__":
    main()
