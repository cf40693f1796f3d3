"""module_utils/_hf_snapshot_payload.py in process, with a fake huggingface_hub put in sys.modules:
the answers to resolve and download in full, every error's description, and main()'s answer
alone on stdout. Then as the module runs it: its text read through zipimport (the AnsiballZ
zip), and ``python -c BOOTSTRAP FILE`` in a fresh process. The hf_snapshot module tests run it
against the real huggingface_hub."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import types
import zipfile
from fnmatch import fnmatch
from pathlib import Path
from types import SimpleNamespace

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils import _hf_snapshot_payload as payload

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SHA256 = "ab" * 32


def entry(path, size, blob_id="b" * 40, lfs=None):
    """A file of list_repo_tree (RepoFile: path, size, blob_id, lfs)."""
    return SimpleNamespace(path=path, size=size, blob_id=blob_id, lfs=lfs)


TREE = [
    entry("config.json", 12, blob_id="c" * 40),
    SimpleNamespace(path="sub", tree_id="t" * 40),  # a folder: no size, no blob_id
    SimpleNamespace(path="odd", size=3),  # a size but no blob id: not a file of the listing
    entry("model.safetensors", 135, blob_id="p" * 40, lfs=SimpleNamespace(size=2 ** 33, sha256=SHA256)),
    entry("sub/README.md", 0, blob_id="e" * 40),
]


@pytest.fixture
def hub(monkeypatch):
    """A fake huggingface_hub: what the payload imports of it, recording each call. ``hub.raises`` makes every
    call raise it; ``hub.noise`` makes them print to stdout (as huggingface_hub's warnings may)."""
    state = SimpleNamespace(calls=[], raises=None, noise=False, sha=COMMIT, tree=list(TREE))

    def called(*call):
        state.calls.append(call)
        if state.noise:
            print("hub noise on sys.stdout")
            os.write(1, b"hub noise on fd 1\n")
        if state.raises is not None:
            raise state.raises

    class HfApi:
        def model_info(self, repo_id, revision=None):
            called("model_info", repo_id, revision)
            return SimpleNamespace(sha=state.sha)

        def list_repo_tree(self, repo_id, revision=None, recursive=False):
            called("list_repo_tree", repo_id, revision, recursive)
            return iter(state.tree)

    def snapshot_download(repo_id, **options):
        called("snapshot_download", repo_id, options)
        return Path(options["local_dir"])

    def filter_repo_objects(items, allow_patterns=None, ignore_patterns=None, key=None):
        state.calls.append(("filter_repo_objects", allow_patterns, ignore_patterns))
        return [item for item in items if (allow_patterns is None or any(fnmatch(key(item), p) for p in allow_patterns))
                and not any(fnmatch(key(item), p) for p in ignore_patterns or [])]

    module = types.ModuleType("huggingface_hub")
    module.__version__ = "9.8.7"
    module.HfApi = HfApi
    module.snapshot_download = snapshot_download
    module.utils = types.ModuleType("huggingface_hub.utils")
    module.utils.filter_repo_objects = filter_repo_objects
    monkeypatch.setitem(sys.modules, "huggingface_hub", module)
    monkeypatch.setitem(sys.modules, "huggingface_hub.utils", module.utils)
    return state


def resolve(allow=None, ignore=None, revision="main"):
    return dict(op="resolve", repo_id="org/model", revision=revision, allow_patterns=allow, ignore_patterns=ignore)


CONFIG = dict(path="config.json", size=12, git_sha1="c" * 40)
WEIGHTS = dict(path="model.safetensors", size=2 ** 33, sha256=SHA256)
README = dict(path="sub/README.md", size=0, git_sha1="e" * 40)


def test_resolve_lists_the_commit_of_the_revision(hub):
    assert payload.answer(resolve()) == dict(commit=COMMIT, files=[CONFIG, WEIGHTS, README], hub_version="9.8.7")
    # The tree is listed at the commit the revision resolved to, recursively, and filtered as asked.
    assert hub.calls == [("model_info", "org/model", "main"), ("list_repo_tree", "org/model", COMMIT, True),
                         ("filter_repo_objects", None, None)]


def test_resolve_filters_by_path_with_the_patterns(hub):
    assert payload.answer(resolve(allow=["*.json", "sub/*"], ignore=["sub/*"]))["files"] == [CONFIG]
    assert hub.calls[-1] == ("filter_repo_objects", ["*.json", "sub/*"], ["sub/*"])


def test_download_into_local_dir(hub, tmp_path):
    question = dict(op="download", repo_id="org/model", revision=COMMIT, local_dir=str(tmp_path), allow_patterns=["*.json"],
                    ignore_patterns=["*.bin"], max_workers=3)
    assert payload.answer(question) == dict(path=str(tmp_path))
    assert hub.calls == [("snapshot_download", "org/model", dict(
        revision=COMMIT, local_dir=str(tmp_path), allow_patterns=["*.json"], ignore_patterns=["*.bin"], max_workers=3))]


@pytest.mark.parametrize("max_workers", [None, 0])
def test_download_with_eight_workers_unless_told(hub, tmp_path, max_workers):
    question = dict(op="download", repo_id="org/model", revision=COMMIT, local_dir=str(tmp_path))
    if max_workers is not None:
        question["max_workers"] = max_workers
    payload.answer(question)
    assert hub.calls[0][2] == dict(revision=COMMIT, local_dir=str(tmp_path), allow_patterns=None, ignore_patterns=None,
                                   max_workers=8)


def test_an_unknown_operation_is_fatal(hub):
    assert payload.answer(dict(op="delete")) == dict(error=dict(
        type="ValueError", status=None, fatal=True, retry_after=None, message="unknown operation 'delete'"))
    assert hub.calls == []


def test_without_huggingface_hub_the_answer_says_which_python(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    assert payload.answer(resolve()) == dict(error=dict(
        type="ImportError", status=None, fatal=True, retry_after=None,
        message="huggingface_hub cannot be imported by %s: import of huggingface_hub halted; None in sys.modules"
                % sys.executable))


class RepositoryNotFoundError(Exception):
    pass


class GatedRepoError(RepositoryNotFoundError):
    """Named as huggingface_hub names it, a subclass of the one above (its __mro__ counts)."""


def http_error(status, headers=None, name="HfHubHTTPError"):
    error = type(name, (Exception,), {})("%d Client Error" % status)
    error.response = SimpleNamespace(status_code=status, headers=headers if headers is not None else {})
    return error


@pytest.mark.parametrize("name", payload.FATAL)
def test_the_errors_another_attempt_cannot_fix_are_fatal(hub, name):
    hub.raises = type(name, (Exception,), {})("no  such\nthing")
    assert payload.answer(resolve()) == dict(error=dict(type=name, status=None, message="no such thing",
                                                        retry_after=None, fatal=True))


def test_a_subclass_of_a_fatal_error_is_fatal(hub):
    class Wrapped(GatedRepoError):
        pass
    hub.raises = Wrapped("gated")
    assert payload.answer(resolve())["error"] == dict(type="Wrapped", status=None, message="gated", retry_after=None,
                                                      fatal=True)


@pytest.mark.parametrize("status, fatal", [(401, True), (403, True), (404, True), (400, False), (429, False),
                                           (500, False), (503, False)])
def test_http_errors_fatal_by_status(hub, status, fatal):
    hub.raises = http_error(status, {"Retry-After": "7"})
    assert payload.answer(resolve())["error"] == dict(type="HfHubHTTPError", status=status,
                                                      message="%d Client Error" % status, retry_after="7", fatal=fatal)


def test_a_response_without_headers_or_status(hub):
    error = http_error(429)
    error.response = SimpleNamespace(headers=None)
    hub.raises = error
    assert payload.answer(resolve())["error"] == dict(type="HfHubHTTPError", status=None, message="429 Client Error",
                                                      retry_after=None, fatal=False)
    hub.raises = http_error(503, {})
    assert payload.answer(resolve())["error"]["retry_after"] is None


@pytest.mark.parametrize("number, kind, fatal", [
    (28, "OSError", True), (122, "OSError", True), (13, "PermissionError", False), (None, "OSError", False)])
def test_a_full_disk_or_quota_is_fatal(hub, number, kind, fatal):
    hub.raises = OSError(number, "No space left on device") if number else OSError("disk")
    error = payload.answer(dict(op="download", repo_id="org/model", revision=COMMIT, local_dir="/x"))["error"]
    assert (error["type"], error["fatal"], error["status"]) == (kind, fatal, None)


def test_an_errno_on_another_error_is_not_a_full_disk(hub):
    error = ValueError("x")
    error.errno = 28
    hub.raises = error
    assert payload.answer(resolve())["error"]["fatal"] is False


@pytest.mark.parametrize("raised", [KeyboardInterrupt(), SystemExit(3)])
def test_an_interrupt_is_not_an_answer(hub, raised):
    hub.raises = raised
    with pytest.raises(type(raised)):
        payload.answer(resolve())


def test_other_base_exceptions_are_answers(hub):
    class Cancelled(BaseException):
        pass
    hub.raises = Cancelled()
    assert payload.answer(resolve())["error"] == dict(type="Cancelled", status=None, message="Cancelled", retry_after=None,
                                                      fatal=False)


@pytest.mark.parametrize("text, line", [
    ("a\n  b\tc ", "a b c"),
    ("x" * 800, "x" * 800),
    ("x" * 801, "x" * 800 + "..."),
    ("", "ValueError"),
    ("  \n", "ValueError"),
])
def test_one_line(text, line):
    assert payload.one_line(ValueError(text)) == line


class Exited(BaseException):
    """What the fake os._exit raises: not an Exception, so that die_with_parent's own handler lets it through."""


@pytest.fixture
def libc(monkeypatch):
    """ctypes.CDLL faked: records how it was opened and what prctl was asked."""
    import ctypes
    calls = []

    class CDLL:
        def __init__(self, name, **options):
            calls.append(("CDLL", name, options))

        def prctl(self, *args):
            calls.append(("prctl",) + args)
            return 0

    def exit_(code):
        raise Exited(code)

    monkeypatch.setattr(ctypes, "CDLL", CDLL)
    monkeypatch.setattr(os, "_exit", exit_)
    return calls


def test_die_with_parent_asks_for_sigterm_when_the_parent_dies(libc, monkeypatch):
    monkeypatch.setattr(os, "getppid", lambda: 4242)
    assert payload.die_with_parent() is None
    assert libc == [("CDLL", None, dict(use_errno=True)), ("prctl", 1, signal.SIGTERM)]


def test_die_with_parent_ends_at_once_when_the_parent_is_gone(libc, monkeypatch):
    monkeypatch.setattr(os, "getppid", lambda: 1)
    with pytest.raises(Exited) as caught:
        payload.die_with_parent()
    assert caught.value.args == (1,)


def test_die_with_parent_is_a_no_op_without_prctl(monkeypatch):
    import ctypes

    def no_libc(*args, **options):
        raise OSError("no libc here")

    monkeypatch.setattr(ctypes, "CDLL", no_libc)
    monkeypatch.setattr(os, "getppid", lambda: 1)
    monkeypatch.setattr(os, "_exit", lambda code: pytest.fail("exited"))
    assert payload.die_with_parent() is None


def run_main(tmp_path, monkeypatch, question):
    """main() as BOOTSTRAP runs it (sys.argv = ['-c', FILE]), in this process: returns sys.path after it; fd 1,
    sys.stdout and sys.path are put back."""
    question_file = tmp_path / "question.json"
    question_file.write_text(json.dumps(dict(payload="(the source)", question=question)))
    saved = os.dup(1)
    try:
        with monkeypatch.context() as patch:
            patch.setattr(sys, "argv", ["-c", str(question_file)])
            patch.setattr(sys, "stdout", sys.stdout)
            patch.setattr(sys, "path", ["", "/a", ".", "/b"] + sys.path)
            payload.main()
            return list(sys.path[:2])
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def test_main_answers_alone_on_stdout(hub, tmp_path, monkeypatch, capfd):
    died = []
    monkeypatch.setattr(payload, "die_with_parent", lambda: died.append(True))
    hub.noise = True
    path = run_main(tmp_path, monkeypatch, resolve())
    out, err = capfd.readouterr()
    assert out == json.dumps(dict(commit=COMMIT, files=[CONFIG, WEIGHTS, README], hub_version="9.8.7")) + "\n"
    assert err.count("hub noise on sys.stdout\n") == 2 and err.count("hub noise on fd 1\n") == 2
    # Nothing is imported from the working directory; the child ends with the module.
    assert path == ["/a", "/b"] and died == [True]


def test_main_answers_an_error_alone_on_stdout(hub, tmp_path, monkeypatch, capfd):
    monkeypatch.setattr(payload, "die_with_parent", lambda: None)
    hub.raises = http_error(404)
    run_main(tmp_path, monkeypatch, resolve())
    assert capfd.readouterr().out == json.dumps(dict(error=dict(
        type="HfHubHTTPError", status=404, message="404 Client Error", retry_after=None, fatal=True))) + "\n"


def test_main_reads_the_file_argv_names(hub, tmp_path, monkeypatch, capfd):
    monkeypatch.setattr(payload, "die_with_parent", lambda: None)
    question_file = tmp_path / "other.json"
    question_file.write_text(json.dumps(dict(question=dict(op="download", repo_id="o/m", revision=COMMIT,
                                                           local_dir=str(tmp_path)))))
    saved = os.dup(1)
    try:
        with monkeypatch.context() as patch:
            patch.setattr(sys, "stdout", sys.stdout)
            payload.main(["_hf_snapshot_payload.py", str(question_file)])
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    assert capfd.readouterr().out == json.dumps(dict(path=str(tmp_path))) + "\n"


def test_source_is_this_file():
    assert payload.source() == Path(payload.__file__).read_text()


def test_source_reads_what_the_loader_of_its_spec_has(tmp_path, monkeypatch):
    """In process, with the spec a zipimporter gives: the text of that name in the zip."""
    import zipimport
    archive = tmp_path / "ansiballz_payload.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("fleetzip/__init__.py", "")
        zipped.writestr("fleetzip/_hf_snapshot_payload.py", "# the zipped text\n")
        zipped.writestr("fleetzip/other.py", "# another file\n")
    spec = zipimport.zipimporter(str(archive / "fleetzip")).find_spec("fleetzip._hf_snapshot_payload")
    monkeypatch.setattr(payload, "__spec__", spec)
    assert payload.source() == "# the zipped text\n"


def test_source_is_read_from_a_zip_as_in_ansiballz(tmp_path):
    """On a host the module and its module_utils are imported from AnsiballZ's zip (zipimport): source() reads
    the file from there."""
    archive = tmp_path / "ansiballz_payload.zip"
    text = Path(payload.__file__).read_text()
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("fleetzip/__init__.py", "")
        zipped.writestr("fleetzip/_hf_snapshot_payload.py", text)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from fleetzip import _hf_snapshot_payload as p; "
            "assert type(p.__spec__.loader).__name__ == 'zipimporter', p.__spec__; sys.stdout.write(p.source())")
    proc = subprocess.run([sys.executable, "-I", "-c", code, str(archive)], capture_output=True, text=True, check=False,
                          env={}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == text


FAKE_HUB = '''
import sys
__version__ = "0.0-fake"
class HfApi:
    def model_info(self, repo_id, revision=None):
        print("a warning on stdout")
        sys.stderr.write(repo_id + " " + revision + "\\n")
        return type("Info", (), {"sha": "COMMIT"})()
    def list_repo_tree(self, repo_id, revision=None, recursive=False):
        return []
def snapshot_download(repo_id, **options):
    return options["local_dir"]
'''


def test_bootstrap_runs_the_source_in_a_fresh_process(tmp_path):
    """The module's way: ``python -c BOOTSTRAP FILE``, FILE holding the source and the question. The argv stays
    short and names only the file; the answer is the one line on stdout."""
    site = tmp_path / "site" / "huggingface_hub"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text(FAKE_HUB.replace("COMMIT", COMMIT))
    (site / "utils.py").write_text("def filter_repo_objects(items, allow_patterns=None, ignore_patterns=None, key=None):\n"
                                   "    return list(items)\n")
    question_file = tmp_path / "hf-snapshot-resolve-0.json"
    question_file.write_text(json.dumps(dict(payload=payload.source(), question=resolve(revision="v1"))))
    assert len(payload.BOOTSTRAP) < 200
    # python -c puts the working directory first on sys.path: main() takes it off before huggingface_hub is imported.
    (tmp_path / "huggingface_hub.py").write_text("raise SystemExit('imported from the working directory')\n")
    # A fresh environment: the child has only what the test gives it.
    proc = subprocess.run([sys.executable, "-c", payload.BOOTSTRAP, str(question_file)], capture_output=True, text=True,
                          cwd=str(tmp_path), env=dict(PYTHONPATH=str(site.parent)), check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == json.dumps(dict(commit=COMMIT, files=[], hub_version="0.0-fake")) + "\n"
    assert proc.stderr == "a warning on stdout\norg/model v1\n"
