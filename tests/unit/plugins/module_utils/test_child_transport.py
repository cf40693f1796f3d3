"""module_utils/_child_transport.py in process, with a fake AnsibleModule whose run_command records
what it was asked: the command line and environment of each child (no secret on a command line),
what its exit and output mean, each hub failure's one line, the backoff, and the stall watchdog
on a fake clock. The hf_snapshot module tests run real children."""

from __future__ import annotations

import json
import os
import sys
import threading
from types import SimpleNamespace

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils import _child_transport, _hf_snapshot_payload
from ansible_collections.fleet.vllm.plugins.module_utils._child_transport import (
    MAX_DELAY,
    ChildTransport,
    StallWatchdog,
    backoff,
)
from ansible_collections.fleet.vllm.plugins.module_utils._snapshot_run import Failure, SnapshotRun

from tests.unit.plugins.module_utils.snapshot_fakes import COMMIT, FakeModule

TOKEN = "hf_fleetvllmtesttoken0123456789"


@pytest.fixture(autouse=True)
def environment():
    """environment() sets the children's environment in this process: put it back after each test."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def transport(tmp_path, **params):
    module = FakeModule(tmp_path, **params)
    return ChildTransport(SnapshotRun(module)), module


@pytest.mark.parametrize("delay, retry_after, wait", [
    (10.0, None, 10.0), (10.0, "30", 30.0), (10.0, "2", 10.0), (10.0, 45, 45.0), (10.0, "soon", 10.0),
    (10.0, [1], 10.0), (400.0, None, MAX_DELAY), (10.0, "3600", MAX_DELAY), (0.0, "", 0.0),
])
def test_backoff(delay, retry_after, wait):
    assert backoff(delay, dict(retry_after=retry_after)) == wait
    assert MAX_DELAY == 300.0


def test_the_python_is_this_one_unless_set(tmp_path):
    child, _module = transport(tmp_path)
    assert child.python() == sys.executable
    child, _module = transport(tmp_path, python=sys.executable)
    assert child.python() == sys.executable


@pytest.mark.parametrize("prefix, name", [("", "python"), ("vllm_weights_", "vllm_weights_python")])
@pytest.mark.parametrize("kind", ["missing", "not executable", "a directory"])
def test_a_python_that_cannot_run(tmp_path, prefix, name, kind):
    path = tmp_path / "bin" / "python3"
    if kind != "missing":
        path.parent.mkdir()
        if kind == "a directory":
            path.mkdir()
        else:
            path.write_text("#!/bin/sh\n")
            path.chmod(0o644)
    child, _module = transport(tmp_path, python=str(path), variable_prefix=prefix)
    with pytest.raises(Failure) as caught:
        child.python()
    assert str(caught.value) == ("%s %s is not an executable file: set it to the Python that has huggingface_hub (the "
                                 "fleet.vllm.vllm_weights role installs one)" % (name, path))


BASE_ENV = dict(HF_ENDPOINT="http://mirror:8090/hub", HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
                HF_HUB_DISABLE_SYMLINKS_WARNING="1", HF_HUB_ETAG_TIMEOUT="42", HF_HUB_DOWNLOAD_TIMEOUT="42",
                HF_XET_CHUNK_CACHE_SIZE_BYTES="0", PYTHONIOENCODING="utf-8", PYTHONDONTWRITEBYTECODE="1", LC_ALL="C")


def children_env():
    return dict((key, value) for key, value in os.environ.items() if key.startswith(("HF_", "HUGGING")) or key in (
        "LC_ALL", "PYTHONIOENCODING", "PYTHONDONTWRITEBYTECODE"))


INHERITED = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_DISABLE_XET", "HF_HUB_ENABLE_HF_TRANSFER",
             "HF_HUB_DISABLE_IMPLICIT_TOKEN", "HF_HUB_SOMETHING_ELSE") + tuple(BASE_ENV)


def inherit():
    """The module's own environment, as a host may give it: every variable the children's is made of set."""
    for name in INHERITED:
        os.environ[name] = "inherited"


def test_the_environment_without_a_token_sends_none(tmp_path):
    inherit()
    child, module = transport(tmp_path, endpoint="http://mirror:8090/hub//", request_timeout=42)
    child.environment()
    assert children_env() == dict(BASE_ENV, HF_HOME=os.path.join(module.params["dest"], ".hf-home"),
                                  HF_HUB_DISABLE_IMPLICIT_TOKEN="1", HF_HUB_SOMETHING_ELSE="inherited")


def test_the_environment_with_a_token_and_without_xet(tmp_path):
    inherit()
    child, module = transport(tmp_path, endpoint="http://mirror:8090/hub", request_timeout=42, token=TOKEN, disable_xet=True)
    assert child.xet_disabled is True
    child.environment()
    assert children_env() == dict(BASE_ENV, HF_HOME=os.path.join(module.params["dest"], ".hf-home"), HF_TOKEN=TOKEN,
                                  HF_HUB_DISABLE_XET="1", HF_HUB_SOMETHING_ELSE="inherited")


def test_the_endpoint_loses_its_trailing_slashes_only(tmp_path):
    child, _module = transport(tmp_path, endpoint="http://mirror:8090/X//")
    child.environment()
    assert os.environ["HF_ENDPOINT"] == "http://mirror:8090/X"
    # After a stall the module turns Xet off for the next children.
    child, module = transport(tmp_path, endpoint="http://mirror:8090/hub", request_timeout=42)
    assert child.xet_disabled is False
    child.xet_disabled = True
    child.environment()
    assert os.environ["HF_HUB_DISABLE_XET"] == "1" and "HF_TOKEN" not in os.environ


RESOLVE = dict(op="resolve", repo_id="org/model", revision="main", allow_patterns=None, ignore_patterns=None)


def test_a_hub_question_runs_the_payload_with_its_file(tmp_path):
    child, module = transport(tmp_path, token=TOKEN)
    answer = dict(commit=COMMIT, files=[])
    module.answers.append((0, "progress\n%s\n\n" % json.dumps(answer), "warnings"))
    assert child.run_child(RESOLVE, "resolve-0") == answer
    question_file = os.path.join(module.tmpdir, "hf-snapshot-resolve-0.json")
    [(argv, options, env)] = module.commands
    # What ps shows: the interpreter, the bootstrap and the file; the token is in the environment only.
    assert argv == [sys.executable, "-c", _hf_snapshot_payload.BOOTSTRAP, question_file]
    assert TOKEN not in " ".join(argv) and env["HF_TOKEN"] == TOKEN
    assert json.loads(open(question_file).read()) == dict(payload=_hf_snapshot_payload.source(), question=RESOLVE)
    assert TOKEN not in open(question_file).read()
    callback = options.pop("before_communicate_callback")
    assert callable(callback) and options == dict(cwd="/", expand_user_and_vars=False, errors="surrogate_or_replace",
                                                  handle_exceptions=False)
    assert child.run.result["requests"] == 1
    module.answers.append((0, json.dumps(answer), ""))
    child.run_child(RESOLVE, "resolve-1")
    assert child.run.result["requests"] == 2


def rsync_question(argv=("/usr/bin/rsync", "rsync://peer/m/x", "/t/")):
    return dict(op="rsync", peer="rsync://peer/m", argv=list(argv))


def test_an_rsync_question_runs_its_argv(tmp_path):
    child, module = transport(tmp_path)
    module.answers.append((0, "", ""))
    assert child.run_child(rsync_question(), "peer-manifest") == {}
    assert module.commands[0][0] == ["/usr/bin/rsync", "rsync://peer/m/x", "/t/"]
    assert child.run.result["requests"] == 0 and os.listdir(module.tmpdir) == []
    # With setpriv, rsync ends with the module as the payload does.
    module.bins["setpriv"] = "/usr/bin/setpriv"
    module.answers.append((23, "", 'rsync: link_stat "/m/x" failed: No such file or directory (2)'))
    error = child.run_child(rsync_question(), "download-1")["error"]
    assert module.commands[1][0] == ["/usr/bin/setpriv", "--pdeathsig", "TERM", "--", "/usr/bin/rsync", "rsync://peer/m/x",
                                     "/t/"]
    assert (error["kind"], error["fatal"]) == ("absent", False)
    assert error["message"].startswith("rsync from rsync://peer/m exited with code 23 (the peer does not have it): rsync:")


@pytest.mark.parametrize("question, what", [(RESOLVE, "python %s" % sys.executable), (rsync_question(), "rsync")])
def test_a_child_that_cannot_start(tmp_path, question, what):
    child, module = transport(tmp_path)

    def cannot(argv, options):
        raise OSError(2, "No such file or directory")

    def cannot_say_why(argv, options):
        raise OSError("no strerror")

    module.answers.append(cannot)
    with pytest.raises(Failure) as caught:
        child.run_child(question, "t")
    assert str(caught.value) == "cannot run %s: No such file or directory" % what
    module.answers.append(cannot_say_why)
    with pytest.raises(Failure) as caught:
        child.run_child(question, "t")
    assert str(caught.value) == "cannot run %s: no strerror" % what


def test_the_watchdog_runs_while_the_child_runs(tmp_path):
    """watchdog(process, stop) starts once the process has started, stop is set when it ended, and run_child
    returns only after the watchdog did."""
    child, module = transport(tmp_path)
    process = object()
    seen = []

    def watchdog(proc, stop):
        seen.append((proc, stop.is_set(), threading.current_thread() is not threading.main_thread()))
        seen.append(stop.wait(10))

    def run(argv, options):
        options["before_communicate_callback"](process)
        return 0, "{}", ""

    module.answers.append(run)
    assert child.run_child(RESOLVE, "download-1", watchdog=watchdog) == {}
    assert seen == [(process, False, True), True]
    module.answers.append(run)
    assert child.run_child(RESOLVE, "download-2") == {}


@pytest.mark.parametrize("rc, stdout, stderr, answer", [
    (0, '{"path": "/x"}\n', "", dict(path="/x")),
    (0, b'noise\n{"path": "/\xc3\xa9"}\n  \n', b"", dict(path="/\u00e9")),
    (1, "", "Traceback ...\nKeyError: 'x'\n", dict(error=dict(
        type="ChildFailed", status=None, retry_after=None, fatal=False,
        message="%s exited with code 1 without an answer: Traceback ...\nKeyError: 'x'" % sys.executable))),
    (-9, None, None, dict(error=dict(type="ChildFailed", status=None, retry_after=None, fatal=False,
                                     message="%s exited with code -9 without an answer: (no output)" % sys.executable))),
    (126, "[1, 2]\n", "", dict(error=dict(type="ChildFailed", status=None, retry_after=None, fatal=True,
                                          message="%s exited with code 126 without an answer: (no output)" % sys.executable))),
    (127, "{not json\n", "", dict(error=dict(type="ChildFailed", status=None, retry_after=None, fatal=True,
                                             message="%s exited with code 127 without an answer: (no output)" % sys.executable))),
])
def test_what_a_child_answered(tmp_path, rc, stdout, stderr, answer):
    child, _module = transport(tmp_path)
    assert child.answer_of(rc, stdout, stderr) == answer


def test_bytes_that_are_not_utf8(tmp_path):
    child, _module = transport(tmp_path)
    assert child.answer_of(0, b'\xff\xfe noise\n{"path": "/x"}\n', b"") == dict(path="/x")
    message = child.answer_of(1, b"\xff\n", b"bad \xff byte")["error"]["message"]
    assert message == "%s exited with code 1 without an answer: bad \udcff byte" % sys.executable


def test_a_long_stderr_keeps_its_end(tmp_path):
    child, _module = transport(tmp_path)
    message = child.answer_of(1, "", "a" * 2000 + "b" * 1500 + "\n")["error"]["message"]
    assert message == "%s exited with code 1 without an answer: %s" % (sys.executable, "b" * 1500)


def test_rsync_answers(tmp_path):
    child, _module = transport(tmp_path)
    assert child.answer_of(0, "some output", "", rsync=True, peer="rsync://p/m") == {}
    assert child.answer_of(10, "", b"  rsync: failed to connect\n", rsync=True, peer="rsync://p/m") == dict(error=dict(
        type="rsync", status=10, retry_after=None, kind="unreachable", fatal=False,
        message="rsync from rsync://p/m exited with code 10 (the peer cannot be reached): rsync: failed to connect"))


def explain(tmp_path, error, **params):
    child, _module = transport(tmp_path, endpoint="http://mirror:8090", repo_id="org/model", revision="v2", **params)
    return child.explain(error)


@pytest.mark.parametrize("error, line", [
    (dict(type="rsync", status=12, message="rsync from x exited"), "rsync from x exited"),
    (dict(type="RepositoryNotFoundError", status=404, message="m"),
     "repository org/model at http://mirror:8090 not found (HTTP 404): check repo_id; a private repository also needs token"),
    (dict(type="GatedRepoError", status=None, message="m"),
     "org/model at http://mirror:8090 is gated or private and no token was given (HTTP None): set token to a token of "
     "an account that has accepted the model's terms (keep it in a vault)"),
    (dict(type="HfHubHTTPError", status=401, message="m"),
     "org/model at http://mirror:8090 is gated or private and no token was given (HTTP 401): set token to a token of "
     "an account that has accepted the model's terms (keep it in a vault)"),
    (dict(type="HfHubHTTPError", status=403, message="m"),
     "org/model at http://mirror:8090 is gated or private and no token was given (HTTP 403): set token to a token of "
     "an account that has accepted the model's terms (keep it in a vault)"),
    (dict(type="RevisionNotFoundError", status=404, message="no v2"),
     "revision 'v2' does not exist in org/model at http://mirror:8090: check revision (no v2)"),
    (dict(type="EntryNotFoundError", status=404, message="gone"),
     "repository org/model at http://mirror:8090 not found (gone): check repo_id, and token for a private repository"),
    (dict(type="ImportError", status=None, message="huggingface_hub cannot be imported by /p: No module"),
     "huggingface_hub cannot be imported by /p: No module; set python to the Python that has huggingface_hub"),
    (dict(type="ConnectError", status=None, message="[Errno 111] Connection refused"),
     "cannot reach http://mirror:8090 (ConnectError: [Errno 111] Connection refused): check endpoint and that the hub "
     "or mirror is up"),
    (dict(type="OSError", status=None, message="Failed to CONNECT"),
     "cannot reach http://mirror:8090 (OSError: Failed to CONNECT): check endpoint and that the hub or mirror is up"),
    (dict(type="OSError", status=None, message="cannot Resolve host"),
     "cannot reach http://mirror:8090 (OSError: cannot Resolve host): check endpoint and that the hub or mirror is up"),
    (dict(type="ConnectTimeout", status=None, message="timed out"),
     "cannot reach http://mirror:8090 (ConnectTimeout: timed out): check endpoint and that the hub or mirror is up"),
    (dict(type="LocalEntryNotFoundError", status=None, message="offline"),
     "cannot reach http://mirror:8090 (LocalEntryNotFoundError: offline): check endpoint and that the hub or mirror is up"),
    (dict(type="HfHubHTTPError", status=503, message="connect later"), "HfHubHTTPError (HTTP 503): connect later"),
    (dict(type="Stall", status=None, message="no byte written"), "Stall: no byte written"),
    (dict(type="Odd"), "Odd: "),
])
def test_explain(tmp_path, error, line):
    assert explain(tmp_path, error) == line


def test_explain_names_the_role_variables_and_the_refused_token(tmp_path):
    assert explain(tmp_path, dict(type="GatedRepoError", status=403, message="Access denied"), token=TOKEN,
                   variable_prefix="vllm_weights_") == (
        "the hub refused the token for org/model at http://mirror:8090 (HTTP 403): Access denied. Check that "
        "vllm_weights_hf_token belongs to an account that has accepted the model's terms on its page")
    assert explain(tmp_path, dict(type="RepositoryNotFoundError", status=404, message=""),
                   variable_prefix="vllm_weights_") == (
        "repository org/model at http://mirror:8090 not found (HTTP 404): check vllm_weights_repo; a private "
        "repository also needs vllm_weights_hf_token")
    assert explain(tmp_path, dict(type="ConnectError", status=None, message="x"), variable_prefix="p_") == (
        "cannot reach http://mirror:8090 (ConnectError: x): check p_endpoint and that the hub or mirror is up")
    assert explain(tmp_path, dict(type="ImportError", status=None, message="m"), variable_prefix="p_") == (
        "m; set p_python to the Python that has huggingface_hub")
    assert explain(tmp_path, dict(type="RevisionNotFoundError", status=None, message="m"), variable_prefix="p_") == (
        "revision 'v2' does not exist in org/model at http://mirror:8090: check p_revision (m)")
    assert explain(tmp_path, dict(type="X", status=404, message="m"), variable_prefix="p_") == (
        "repository org/model at http://mirror:8090 not found (m): check p_repo, and p_hf_token for a private repository")


# ---- the stall watchdog, on a fake clock ---------------------------------------------------------


class Clock(object):
    """time.time() of the watchdog, and its stop event: every wait() is one poll, POLL_SECONDS later; after
    ``polls`` polls the child has ended (wait() returns True)."""

    def __init__(self, polls):
        self.now = 1000.0
        self.polls = polls

    def time(self):
        return self.now

    def wait(self, seconds):
        assert seconds == _child_transport.POLL_SECONDS == 1.0
        if self.polls == 0:
            return True
        self.polls -= 1
        self.now += seconds
        return False


class Process(object):
    def __init__(self, fails=False):
        self.killed = 0
        self.fails = fails

    def kill(self):
        self.killed += 1
        if self.fails:
            raise OSError(3, "No such process")


def watch(tmp_path, monkeypatch, sizes, polls, total=10000, **params):
    """The watchdog over a directory whose bytes_on_disk are sizes(seconds since start): the progress it wrote
    (the fields of each record) and what it did to the process."""
    clock = Clock(polls)
    monkeypatch.setattr(_child_transport, "time", SimpleNamespace(time=clock.time))

    def bytes_on_disk(directory):
        assert directory == str(tmp_path)
        return sizes(int(clock.now - 1000.0))

    monkeypatch.setattr(_child_transport.snap, "bytes_on_disk", bytes_on_disk)
    run = SnapshotRun(FakeModule(tmp_path, **params))
    written = []
    monkeypatch.setattr(run, "write_progress", lambda **fields: written.append((int(clock.now - 1000.0), fields)))
    watchdog = StallWatchdog(run, str(tmp_path), total)
    process = Process()
    watchdog(process, clock)
    return watchdog, process, written, clock


def test_the_watchdog_reports_progress_and_leaves_a_child_that_writes(tmp_path, monkeypatch):
    watchdog, process, written, clock = watch(tmp_path, monkeypatch, lambda t: 100 * t, polls=25, progress_interval=10)
    assert (watchdog.stalled, process.killed, clock.polls) == ([], 0, 0)
    assert written == [(10, dict(bytes_done=1000, rate_bytes_per_second=100.0, eta_seconds=90)),
                       (20, dict(bytes_done=2000, rate_bytes_per_second=100.0, eta_seconds=80))]


def test_the_rate_is_of_the_last_half_minute(tmp_path, monkeypatch):
    def sizes(t):
        return 1000 * t if t <= 40 else 40000 + 10 * (t - 40)

    _watchdog, _process, written, _clock = watch(tmp_path, monkeypatch, sizes, polls=80, total=50000,
                                                 progress_interval=40, stall_timeout=300)
    assert written == [(40, dict(bytes_done=40000, rate_bytes_per_second=1000.0, eta_seconds=10)),
                       (80, dict(bytes_done=40400, rate_bytes_per_second=10.0, eta_seconds=960))]


def test_the_rate_window_starts_31_seconds_back(tmp_path, monkeypatch):
    """The oldest sample kept is the last one older than RATE_WINDOW: here 49 s at 80 s, when the bytes at 48, 49,
    50 and 79 s all differ."""
    def sizes(t):
        if t <= 40:
            return 1000 * t
        return {49: 40100, 50: 40300}.get(t, 40000 if t < 49 else 40300 + 10 * (t - 50))

    _watchdog, _process, written, _clock = watch(tmp_path, monkeypatch, sizes, polls=80, total=50000,
                                                 progress_interval=40, stall_timeout=300)
    assert written[1] == (80, dict(bytes_done=40600, rate_bytes_per_second=500 / 31, eta_seconds=582))


def test_no_rate_while_the_bytes_on_disk_shrink(tmp_path, monkeypatch):
    """Partial files renamed or removed: fewer bytes than a moment ago is no rate, and no ETA."""
    _watchdog, _process, written, _clock = watch(tmp_path, monkeypatch, lambda t: 1000 - t, polls=2, progress_interval=1)
    assert written == [(t, dict(bytes_done=1000 - t, rate_bytes_per_second=None, eta_seconds=None)) for t in (1, 2)]


def test_bytes_beyond_the_total_and_no_rate(tmp_path, monkeypatch):
    _watchdog, _process, written, _clock = watch(tmp_path, monkeypatch, lambda t: 20000 if t < 1 else 20000 + t, polls=2,
                                                 total=10000, progress_interval=1)
    assert written == [(1, dict(bytes_done=10000, rate_bytes_per_second=1.0, eta_seconds=-10001)),
                       (2, dict(bytes_done=10000, rate_bytes_per_second=1.0, eta_seconds=-10002))]
    _watchdog, _process, written, _clock = watch(tmp_path, monkeypatch, lambda t: 500, polls=3, progress_interval=1)
    assert written == [(t, dict(bytes_done=500, rate_bytes_per_second=None, eta_seconds=None)) for t in (1, 2, 3)]


def test_a_child_that_writes_nothing_for_stall_timeout_is_killed(tmp_path, monkeypatch):
    def sizes(t):
        return min(t, 3) * 100  # writes for 3 s, then nothing

    watchdog, process, written, clock = watch(tmp_path, monkeypatch, sizes, polls=100, stall_timeout=5,
                                              progress_interval=100)
    # The last byte came at 3 s: killed at 8 s, once, and the watchdog ends there.
    assert (watchdog.stalled, process.killed, clock.polls, written) == ([1008.0], 1, 92, [])


def test_a_child_gone_before_the_kill(tmp_path, monkeypatch):
    clock = Clock(polls=100)
    monkeypatch.setattr(_child_transport, "time", SimpleNamespace(time=clock.time))
    monkeypatch.setattr(_child_transport.snap, "bytes_on_disk", lambda directory: 0)
    watchdog = StallWatchdog(SnapshotRun(FakeModule(tmp_path, stall_timeout=5)), str(tmp_path), 10)
    process = Process(fails=True)
    watchdog(process, clock)
    assert (watchdog.stalled, process.killed, clock.polls) == ([1005.0], 1, 95)
