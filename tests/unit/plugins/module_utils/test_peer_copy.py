"""module_utils/_peer_copy.py in process: the candidates of O(peer) answering from a fake child (each
with its manifest, an rsync error, or nothing), the order they are asked in, the waits for busy
ones (time.sleep and the jitter faked), the messages, and the rsync command lines. The
hf_snapshot module tests copy from real rsync daemons."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils import _peer_copy
from ansible_collections.fleet.vllm.plugins.module_utils import _snapshot as snap
from ansible_collections.fleet.vllm.plugins.module_utils._peer_copy import MAX_PEER_DELAY, PeerCopy
from ansible_collections.fleet.vllm.plugins.module_utils._snapshot_run import Failure, SnapshotRun

from tests.unit.plugins.module_utils.snapshot_fakes import COMMIT, FakeModule

REPO = "nvidia/Kimi-K2.5-NVFP4"
FILES = [dict(path="b.json", size=2, git_sha1="b" * 40), dict(path="a.safetensors", size=1, sha256="a" * 64)]
A, B, C = "rsync://a:8873/m/Kimi", "rsync://b:8873/m/Kimi", "rsync://c:8873/m/Kimi"


def error(kind, message=None):
    return dict(type="rsync", kind=kind, message=message or "%s says %s" % (kind, kind), fatal=False)


class Child(object):
    """run_child of a ChildTransport for manifest questions: each peer answers in turn from its list - a manifest
    (written where rsync would put it), an error, or "nothing" (rsync copied no file)."""

    def __init__(self, **answers):
        self.answers = answers
        self.asked = []

    def run_child(self, question, tag):
        self.asked.append((question["peer"], tag))
        answers = self.answers[question["peer"]]
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, dict) and "error" in answer:
            return answer
        if answer != "nothing":
            with open(os.path.join(question["argv"][-1], snap.MANIFEST_NAME), "w") as handle:
                handle.write(answer if isinstance(answer, str) else json.dumps(answer))
        return {}


def manifest(repo_id=REPO, commit=COMMIT):
    return snap.make_manifest(repo_id, commit, FILES)


@pytest.fixture
def clock(monkeypatch):
    """time.sleep and random.uniform of _peer_copy: the sleeps are recorded, the jitter takes its upper bound."""
    sleeps = []
    monkeypatch.setattr(_peer_copy, "time", SimpleNamespace(sleep=sleeps.append))
    monkeypatch.setattr(_peer_copy, "random", SimpleNamespace(uniform=lambda low, high: high))
    return sleeps


def peers(tmp_path, child=None, peer=(A, B), **params):
    params.setdefault("retry_delay", 2.0)
    module = FakeModule(tmp_path, peer=list(peer), **params)
    run = SnapshotRun(module)
    progress = []
    run.write_progress = lambda **fields: progress.append(fields)
    copy = PeerCopy(run, child or Child())
    copy.progress = progress
    return copy


def test_the_candidates_start_in_order_and_go_into_the_result(tmp_path):
    copy = peers(tmp_path, peer=(A + "/", B, "rsync://x:8873/m/X//"))
    assert (copy.candidates, copy.peer, copy.files, copy.problems, copy.waited) == (
        [A, B, "rsync://x:8873/m/X"], None, None, [], 0.0)
    assert copy.run.result["peer_used"] is None and copy.run.result["peer_problems"] is copy.problems
    assert peers(tmp_path, peer=()).candidates == []


def test_rsync_argv_and_urls(tmp_path):
    copy = peers(tmp_path, stall_timeout=77)
    assert copy.rsync_argv("x", "y/") == ["/usr/bin/rsync", "--recursive", "--times", "--chmod=D0755,F0644",
                                          "--partial-dir=.cache/rsync-partial", "--contimeout=30", "--timeout=77", "x", "y/"]
    assert copy.url(COMMIT, "f.json", peer=B) == "%s/%s/f.json" % (B, COMMIT)
    copy.peer = A
    assert copy.url(COMMIT) == "%s/%s/" % (A, COMMIT)
    names = os.path.join(copy.run.module.tmpdir, "peer-files")
    listed = snap.normalise_files(FILES + [dict(path="#a", size=1, sha256="c" * 64)])
    assert copy.question(COMMIT, "/srv/x", listed) == dict(
        op="rsync", peer=A, argv=["/usr/bin/rsync", "--times", "--chmod=D0755,F0644", "--partial-dir=.cache/rsync-partial",
                                  "--contimeout=30", "--timeout=77", "--files-from=%s" % names, "--from0",
                                  "rsync://a:8873/m/", "/srv/x/"])
    # The listed files, one by one, from the module's root (/./: what lands in /srv/x): never a recursive copy.
    with open(names, "rb") as handle:
        names_sent = handle.read()
    assert names_sent == b"".join(b"Kimi/%s/./%s\0" % (COMMIT.encode(), name) for name in (b"#a", b"a.safetensors", b"b.json"))
    copy.peer = "rsync://a:8873/m"
    copy.question(COMMIT, "/srv/x", listed)
    with open(names, "rb") as handle:
        assert handle.read().split(b"\0")[0] == b"%s/./#a" % COMMIT.encode()
    copy.run.module.bins["rsync"] = None
    for prefix, name in (("", "peer"), ("vllm_weights_", "vllm_weights_peer")):
        copy.run.params["variable_prefix"] = prefix
        with pytest.raises(Failure) as caught:
            copy.rsync_argv()
        assert str(caught.value) == ("rsync is not installed on this host; it copies the snapshot from %s (install the "
                                     "rsync package)" % name)


def test_a_peer_manifest_is_copied_into_a_directory_of_its_own(tmp_path):
    child = Child(**{A: [manifest()], B: [manifest()]})
    copy = peers(tmp_path, child)
    assert copy.manifest(COMMIT, A) == (snap.normalise_files(FILES), None)
    assert copy.manifest(COMMIT, B) == (snap.normalise_files(FILES), None)
    tmpdir = copy.run.module.tmpdir
    assert sorted(os.listdir(tmpdir)) == ["peer-0", "peer-1"]
    assert child.asked == [(A, "peer-manifest"), (B, "peer-manifest")]


def test_the_manifest_question(tmp_path):
    questions = []
    child = SimpleNamespace(run_child=lambda question, tag: questions.append((question, tag)) or dict(error=error("busy")))
    copy = peers(tmp_path, child)
    assert copy.manifest(COMMIT, B) == (None, error("busy"))
    target = os.path.join(copy.run.module.tmpdir, "peer-0")
    assert questions == [(dict(op="rsync", peer=B, argv=copy.rsync_argv(
        "%s/%s/.fleet-vllm-snapshot.json" % (B, COMMIT), target + "/")), "peer-manifest")]


@pytest.mark.parametrize("answer, message", [
    ("nothing", "the peer %s has no manifest of %s at %s" % (A, REPO, COMMIT)),
    (manifest(repo_id="other/model"), "the peer %s has no manifest of %s at %s" % (A, REPO, COMMIT)),
    (manifest(commit="f" * 40), "the peer %s has no manifest of %s at %s" % (A, REPO, COMMIT)),
])
def test_a_peer_without_the_manifest_of_this_commit_refuses(tmp_path, answer, message):
    assert peers(tmp_path, Child(**{A: [answer]})).manifest(COMMIT, A) == (None, dict(kind="refused", message=message))


def test_a_peer_with_a_broken_manifest_refuses(tmp_path):
    copy = peers(tmp_path, Child(**{A: ["{"]}))
    files, problem = copy.manifest(COMMIT, A)
    path = os.path.join(copy.run.module.tmpdir, "peer-0", snap.MANIFEST_NAME)
    assert (files, problem) == (None, dict(kind="refused", message=(
        "the peer %s: the snapshot manifest %s is not valid JSON (Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)): remove it, the next run lists the revision again and rewrites it" % (A, path))))


def test_note_keeps_each_line_once(tmp_path):
    copy = peers(tmp_path)
    for line in ("x", "y", "x"):
        copy.note(line)
    assert copy.problems == ["x", "y"]


def test_the_first_candidate_that_has_it_serves(tmp_path, clock):
    child = Child(**{A: [manifest()], B: [manifest()]})
    copy = peers(tmp_path, child)
    assert copy.find(COMMIT) is True
    assert (copy.peer, copy.files, copy.problems, child.asked, clock) == (
        A, snap.normalise_files(FILES), [], [(A, "peer-manifest")], [])


def test_the_one_tried_last_is_asked_last(tmp_path, clock):
    child = Child(**{A: [manifest()], B: [manifest()], C: [manifest()]})
    copy = peers(tmp_path, child, peer=(A, B, C))
    assert copy.find(COMMIT, last=A) is True and copy.peer == B
    child.asked = []
    assert copy.find(COMMIT, last=C) is True and copy.peer == A
    assert child.asked == [(A, "peer-manifest")]


def test_refusing_and_unreachable_candidates_are_left_out(tmp_path, clock):
    child = Child(**{A: [dict(error=error("refused", "Unknown module"))],
                     B: [dict(error=error("unreachable", "Connection refused"))], C: [manifest()]})
    copy = peers(tmp_path, child, peer=(A, B, C))
    assert copy.find(COMMIT) is True and copy.peer == C
    assert copy.candidates == [C] and copy.problems == ["%s: Unknown module" % A, "%s: Connection refused" % B]


def test_no_candidate_has_it(tmp_path, clock):
    child = Child(**{A: [dict(error=error("absent"))], B: [dict(error=error("other", "transfer interrupted"))]})
    copy = peers(tmp_path, child)
    assert copy.find(COMMIT) is False
    assert (copy.peer, copy.candidates, clock) == (None, [], [])
    assert copy.problems == ["%s: no complete snapshot of %s at %s there (no manifest) yet" % (A, REPO, COMMIT),
                             "%s: transfer interrupted" % B]


def test_busy_candidates_are_asked_again_and_the_absent_too(tmp_path, clock):
    """A busy, B without the snapshot yet: both are asked again after a backoff (B may finish its copy), growing by
    half each round up to MAX_PEER_DELAY."""
    busy = dict(error=error("busy", "max connections (4) reached"))
    child = Child(**{A: [busy] * 7 + [manifest()], B: [dict(error=error("absent"))]})
    copy = peers(tmp_path, child, peer_wait=3600)
    assert copy.find(COMMIT) is True and copy.peer == A
    assert clock == [2.0, 3.0, 4.5, 6.75, 10.125, 15.1875, 22.78125]
    assert copy.waited == sum(clock) and copy.candidates == [A, B]
    assert copy.progress == [dict(state="running", message="1 peer(s) busy (%s), asking again in %ds" % (A, wait))
                             for wait in clock]
    assert copy.problems == ["%s: max connections (4) reached" % A,
                             "%s: no complete snapshot of %s at %s there (no manifest) yet" % (B, REPO, COMMIT)]


def test_the_progress_names_three_busy_candidates_at_most(tmp_path, clock):
    busy = [dict(error=error("busy"))]
    d = "rsync://d:8873/m/Kimi"
    copy = peers(tmp_path, Child(**{A: busy, B: busy, C: busy, d: busy}), peer=(A, B, C, d), peer_wait=2)
    with pytest.raises(Failure):
        copy.find(COMMIT)
    assert copy.progress == [dict(state="running", message="4 peer(s) busy (%s, %s, %s), asking again in 2s" % (A, B, C))]


def test_the_backoff_between_rounds_stops_growing(tmp_path, clock):
    child = Child(**{A: [dict(error=error("busy"))] * 14 + [manifest()]})
    copy = peers(tmp_path, child, peer=(A,), peer_wait=10 ** 6)
    assert copy.find(COMMIT) is True
    assert clock[-4:] == [MAX_PEER_DELAY] * 4 and max(clock) == MAX_PEER_DELAY == 60.0


def test_the_jitter_is_half_to_all_of_the_delay(tmp_path, monkeypatch):
    asked = []
    monkeypatch.setattr(_peer_copy, "time", SimpleNamespace(sleep=lambda seconds: None))
    monkeypatch.setattr(_peer_copy, "random", SimpleNamespace(uniform=lambda low, high: asked.append((low, high)) or low))
    copy = peers(tmp_path, Child(**{A: [dict(error=error("busy"))] * 2 + [manifest()]}), peer=(A,), retry_delay=0.1)
    assert copy.find(COMMIT) is True
    # retry_delay below a second counts as one.
    assert asked == [(0.5, 1.0), (0.5, 1.0)] and copy.waited == 1.25


@pytest.mark.parametrize("prefix, name", [("", "peer_wait"), ("vllm_weights_", "vllm_weights_peer_wait")])
def test_busy_longer_than_peer_wait_fails(tmp_path, clock, prefix, name):
    busy = [dict(error=error("busy", "max connections (1) reached"))]
    copy = peers(tmp_path, Child(**{A: busy, B: busy}), peer_wait=5, variable_prefix=prefix)
    with pytest.raises(Failure) as caught:
        copy.find(COMMIT)
    # 2 + 3 = 5 s waited; the next round (4.5 s) would pass peer_wait.
    assert clock == [2.0, 3.0] and copy.waited == 5.0
    assert str(caught.value) == (
        "every peer that may have %s at %s stayed busy (at its connection limit) for 5 s (%s, %s): re-run later, "
        "raise %s, or let the peers take more copies at once (vllm_weights_peer_max_connections). %s: max connections "
        "(1) reached | %s: max connections (1) reached" % (REPO, COMMIT, A, B, name, A, B))


def test_peer_wait_zero_fails_at_the_first_busy_answer(tmp_path, clock):
    copy = peers(tmp_path, Child(**{A: [dict(error=error("busy"))]}), peer=(A,), peer_wait=0)
    with pytest.raises(Failure) as caught:
        copy.find(COMMIT)
    assert clock == [] and "for 0 s (%s): re-run later, raise peer_wait," % A in str(caught.value)
    copy = peers(tmp_path, Child(**{A: [dict(error=error("busy"))] + [manifest()]}), peer=(A,), peer_wait=2)
    assert copy.find(COMMIT) is True and clock == [2.0]


def test_the_failure_names_the_last_four_problems(tmp_path, clock):
    copy = peers(tmp_path, Child(**{A: [dict(error=error("busy", "busy a"))]}), peer=(A,), peer_wait=0)
    copy.problems.extend(["p1", "p2", "p3", "p4"])
    with pytest.raises(Failure) as caught:
        copy.find(COMMIT)
    assert str(caught.value).endswith("(vllm_weights_peer_max_connections). p2 | p3 | p4 | %s: busy a" % A)


def test_leaving_the_peers_fails_without_peer_fallback(tmp_path):
    copy = peers(tmp_path, variable_prefix="vllm_weights_")
    copy.problems.extend(["a: refused", "b: absent"])
    with pytest.raises(Failure) as caught:
        copy.leave(COMMIT)
    assert str(caught.value) == (
        "no peer will serve %s at %s: a: refused | b: absent. Does a peer have the complete snapshot? (a peer has it "
        "once a run completed it there); allow the hub with vllm_weights_peer_fallback" % (REPO, COMMIT))
    with pytest.raises(Failure) as caught:
        peers(tmp_path).leave(COMMIT)
    assert "serve %s at %s: no candidate. Does" % (REPO, COMMIT) in str(caught.value)


def test_leaving_the_peers_for_the_hub_with_peer_fallback(tmp_path):
    copy = peers(tmp_path, peer_fallback=True, endpoint="http://mirror:8090")
    copy.peer, copy.files = A, FILES
    copy.problems.append("a: refused")
    copy.leave(COMMIT)
    assert (copy.peer, copy.files) == (None, None)
    assert copy.run.module.warnings == ["no peer will serve %s at %s, downloading it from http://mirror:8090 instead: "
                                        "a: refused" % (REPO, COMMIT)]
    assert copy.origin() == " from http://mirror:8090, as no peer would serve it (a: refused)"


@pytest.mark.parametrize("peer, failure", [(A, None), (None, error("busy")), (A, error("other")),
                                           (A, dict(type="Stall", message="m"))])
def test_an_attempt_that_is_not_turned_away(tmp_path, clock, peer, failure):
    copy = peers(tmp_path)
    copy.peer = peer
    assert copy.turned_away(COMMIT, failure) is False
    assert (copy.candidates, copy.problems, clock) == ([A, B], [], [])


def test_a_busy_peer_is_asked_again_after_a_wait(tmp_path, clock):
    child = Child(**{A: [manifest()], B: [manifest()]})
    copy = peers(tmp_path, child)
    copy.peer = A
    assert copy.turned_away(COMMIT, error("busy", "max connections")) is True
    # The busy one goes last: the other serves now.
    assert (copy.peer, clock, copy.waited, copy.candidates) == (B, [2.0], 2.0, [A, B])
    assert copy.problems == ["%s: max connections" % A] and child.asked == [(B, "peer-manifest")]


def test_a_busy_peer_past_peer_wait(tmp_path, clock):
    copy = peers(tmp_path, peer_wait=3, variable_prefix="vllm_weights_")
    copy.peer, copy.waited = A, 2.0
    with pytest.raises(Failure) as caught:
        copy.turned_away(COMMIT, error("busy", "max connections (2) reached"))
    assert str(caught.value) == ("%s stayed busy: max connections (2) reached. Re-run later or raise "
                                 "vllm_weights_peer_wait" % A)
    assert clock == []
    copy = peers(tmp_path, Child(**{A: [manifest()], B: [manifest()]}), peer_wait=4, retry_delay=0.5)
    copy.peer, copy.waited = A, 3.0
    assert copy.turned_away(COMMIT, error("busy")) is True and clock == [1.0] and copy.waited == 4.0


@pytest.mark.parametrize("kind", ["refused", "unreachable", "absent"])
def test_a_peer_that_will_not_serve_is_left_out(tmp_path, clock, kind):
    child = Child(**{B: [manifest()]})
    copy = peers(tmp_path, child)
    copy.peer = A
    assert copy.turned_away(COMMIT, error(kind, "no")) is True
    assert (copy.peer, copy.candidates, clock, copy.problems) == (B, [B], [], ["%s: no" % A])


def test_the_last_peer_leaves_for_the_hub(tmp_path, clock):
    copy = peers(tmp_path, peer=(A,), peer_fallback=True)
    copy.peer = A
    assert copy.turned_away(COMMIT, error("refused", "Unknown module")) is True
    assert (copy.peer, copy.candidates) == (None, [])
    assert copy.run.module.warnings[0].endswith("instead: %s: Unknown module" % A)
    copy = peers(tmp_path, peer=(A,))
    copy.peer = A
    with pytest.raises(Failure) as caught:
        copy.turned_away(COMMIT, error("unreachable"))
    assert str(caught.value).startswith("no peer will serve %s at %s: %s: unreachable says unreachable. " % (REPO, COMMIT, A))


def test_origin(tmp_path):
    copy = peers(tmp_path)
    copy.peer = B
    assert copy.origin() == " from %s" % B
    copy.peer = None
    copy.problems.extend(["x", "y"])
    assert copy.origin() == " from https://huggingface.co, as no peer would serve it (x | y)"
    assert peers(tmp_path, peer=()).origin() == ""
