"""module_utils/_snapshot_state.py in process, on real files: the download lock and taking over a
download left running, the leftovers removed, files moved out of the snapshot, the digests checked
with and without the verified record, the free space asked for, a full disk, and the files hashed
while a download runs. The hf_snapshot module tests run the same code in a subprocess."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import time
from types import SimpleNamespace

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils import _snapshot as snap
from ansible_collections.fleet.vllm.plugins.module_utils import _snapshot_state
from ansible_collections.fleet.vllm.plugins.module_utils._snapshot_run import Failure, SnapshotRun
from ansible_collections.fleet.vllm.plugins.module_utils._snapshot_state import SnapshotState, bad_files

from tests.unit.plugins.module_utils.snapshot_fakes import COMMIT, FakeModule

REPO = "nvidia/Kimi-K2.5-NVFP4"


def disk(tmp_path, **params):
    module = FakeModule(tmp_path, **params)
    run = SnapshotRun(module)
    progress = []
    run.write_progress = lambda **fields: progress.append(fields)
    state = SnapshotState(run)
    state.progress = progress
    return state


def put(directory, path, data):
    full = os.path.join(directory, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "wb") as handle:
        handle.write(data)
    return dict(path=path, size=len(data), sha256=hashlib.sha256(data).hexdigest())


def test_bad_files_are_the_wrong_sized_with_their_metadata_and_the_metadata_of_changed_ones():
    state = dict(wrong_size=[dict(path="a.safetensors", size=1, expected=2), dict(path="sub/b.json", size=None, expected=3)],
                 wrong_hash=["c.py"])
    meta = "/d/.cache/huggingface/download/"
    assert bad_files("/d", state) == ["/d/a.safetensors", meta + "a.safetensors.metadata", "/d/sub/b.json",
                                      meta + "sub/b.json.metadata", meta + "c.py.metadata"]
    assert bad_files("/d", dict(wrong_size=[], wrong_hash=[])) == []


def test_make_dirs_gives_0755_whatever_the_umask(tmp_path):
    state = disk(tmp_path)
    directory = os.path.join(state.run.dest, COMMIT)
    old = os.umask(0o077)
    try:
        state.make_dirs(directory)
    finally:
        os.umask(old)
    assert [oct(os.stat(path).st_mode & 0o777) for path in (state.run.dest, directory)] == ["0o755", "0o755"]
    os.chmod(directory, 0o700)
    state.make_dirs(directory)  # both there: left as they are
    assert oct(os.stat(directory).st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("prefix, name", [("", "dest"), ("vllm_weights_", "vllm_weights_dest")])
def test_make_dirs_names_the_option(tmp_path, prefix, name):
    (tmp_path / "dest").write_text("a file")
    state = disk(tmp_path, variable_prefix=prefix)
    directory = os.path.join(state.run.dest, COMMIT)
    with pytest.raises(Failure) as caught:
        state.make_dirs(directory)
    assert str(caught.value) == "cannot create %s: File exists; check %s" % (directory, name)


class Clock(object):
    """time for _snapshot_state: sleep() advances time() and calls ``on_sleep`` (which may release the lock)."""

    def __init__(self, on_sleep=None):
        self.now = 5000.0
        self.sleeps = []
        self.on_sleep = on_sleep

    def time(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += 1.6
        if self.on_sleep:
            self.on_sleep(len(self.sleeps))


def fake_time(monkeypatch, clock):
    monkeypatch.setattr(_snapshot_state, "time", SimpleNamespace(time=clock.time, sleep=clock.sleep, strftime=time.strftime,
                                                                 gmtime=lambda: time.gmtime(86400 * 365)))


def test_the_lock_of_a_commit(tmp_path, monkeypatch):
    clock = Clock()
    fake_time(monkeypatch, clock)
    state = disk(tmp_path)
    os.makedirs(state.run.dest)
    path = os.path.join(state.run.dest, ".%s.lock" % COMMIT)
    with open(path, "w") as handle:
        handle.write("pid 1 from a run long over, and longer\n")
    handle = state.lock(COMMIT)
    try:
        assert open(path).read() == "pid %d\n" % os.getpid()
        assert (clock.sleeps, state.run.module.warnings, "took_over" in state.run.result) == ([], [], False)
    finally:
        handle.close()


@pytest.mark.parametrize("content, holder", [("pid 4242\n", "pid 4242"), ("", "another process"), (" \n", "another process")])
def test_a_download_left_running_is_taken_over(tmp_path, monkeypatch, content, holder):
    import fcntl
    state = disk(tmp_path)
    os.makedirs(state.run.dest)
    path = os.path.join(state.run.dest, ".%s.lock" % COMMIT)
    other = open(path, "w")
    other.write(content)
    other.flush()
    fcntl.flock(other.fileno(), fcntl.LOCK_EX)

    def release(sleeps):
        if sleeps == 3:
            other.close()

    clock = Clock(release)
    fake_time(monkeypatch, clock)
    handle = state.lock(COMMIT)
    try:
        assert clock.sleeps == [2.0, 2.0, 2.0] and _snapshot_state.LOCK_POLL_SECONDS == 2.0
        assert state.run.result["took_over"] == dict(holder=holder, waited_seconds=4)
        assert state.run.module.warnings == [
            "a download of %s at %s is already running on this host (%s holds %s), left by an earlier run: taking it "
            "over - waiting for it to end, then finishing what it left" % (REPO, COMMIT, holder, path)]
        assert open(path).read() == "pid %d\n" % os.getpid()
    finally:
        handle.close()


def test_a_lock_that_fails_otherwise_is_raised(tmp_path, monkeypatch):
    def flock(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(_snapshot_state, "fcntl", SimpleNamespace(flock=flock, LOCK_EX=2, LOCK_NB=4))
    state = disk(tmp_path)
    os.makedirs(state.run.dest)
    with pytest.raises(OSError) as caught:
        state.lock(COMMIT)
    assert caught.value.errno == errno.ENOLCK


@pytest.mark.parametrize("number", [errno.EAGAIN, errno.EACCES])
def test_both_answers_of_a_held_lock_wait(tmp_path, monkeypatch, number):
    calls = []

    def flock(fd, operation):
        calls.append(operation)
        if len(calls) == 1:
            raise OSError(number, "held")

    monkeypatch.setattr(_snapshot_state, "fcntl", SimpleNamespace(flock=flock, LOCK_EX=2, LOCK_NB=4))
    fake_time(monkeypatch, Clock())
    state = disk(tmp_path)
    os.makedirs(state.run.dest)
    state.lock(COMMIT).close()
    assert calls == [6, 6] and state.run.result["took_over"]["waited_seconds"] == 1


def test_remove(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).write_text(name)
    (tmp_path / "dir").mkdir()
    assert SnapshotState.remove([str(tmp_path / "a"), str(tmp_path / "gone"), str(tmp_path / "b")]) == [
        str(tmp_path / "a"), str(tmp_path / "b")]
    assert sorted(os.listdir(tmp_path)) == ["dir"]
    with pytest.raises(Failure) as caught:
        SnapshotState.remove([str(tmp_path / "dir")])
    assert str(caught.value) == "cannot remove %s: Is a directory" % (tmp_path / "dir")


def test_reject_moves_changed_files_out_of_the_snapshot(tmp_path, monkeypatch):
    fake_time(monkeypatch, Clock())
    state = disk(tmp_path)
    directory = os.path.join(state.run.dest, COMMIT)
    put(directory, "model.safetensors", b"changed")
    put(directory, "sub/code.py", b"altered")
    old = os.umask(0o022)
    try:
        moved = state.reject(COMMIT, directory, ["model.safetensors", "gone.json", "sub/code.py"])
    finally:
        os.umask(old)
    rejected = os.path.join(state.run.dest, ".fleet-vllm-rejected")
    assert moved == [os.path.join(rejected, COMMIT, "model.safetensors.19710101T000000Z"),
                     os.path.join(rejected, COMMIT, "sub", "code.py.19710101T000000Z")]
    assert state.run.result["rejected"] == moved
    assert [open(path, "rb").read() for path in moved] == [b"changed", b"altered"]
    assert [oct(os.stat(path).st_mode & 0o777) for path in moved] == ["0o600", "0o600"]
    assert oct(os.stat(rejected).st_mode & 0o777) == "0o700"
    assert oct(os.stat(os.path.join(rejected, COMMIT)).st_mode & 0o777) == "0o700"
    assert os.listdir(directory) == ["sub"] and os.listdir(os.path.join(directory, "sub")) == []
    assert state.reject(COMMIT, directory, []) == [] and state.run.result["rejected"] == moved


def test_reject_fails_when_it_cannot_move(tmp_path, monkeypatch):
    fake_time(monkeypatch, Clock())
    state = disk(tmp_path)
    directory = os.path.join(state.run.dest, COMMIT)
    put(directory, "model.safetensors", b"changed")
    os.makedirs(os.path.join(state.run.dest, ".fleet-vllm-rejected"))
    (tmp_path / "dest" / ".fleet-vllm-rejected" / COMMIT).write_text("not a directory")
    with pytest.raises(Failure) as caught:
        state.reject(COMMIT, directory, ["model.safetensors"])
    assert str(caught.value) == ("cannot move %s/model.safetensors (its content differs from the hub's listing) out of "
                                 "the snapshot: File exists; remove it by hand" % directory)


def test_the_verified_record_of_this_snapshot_only(tmp_path):
    record = tmp_path / "verified.json"
    state = disk(tmp_path, verified_record=str(record))
    directory = os.path.join(state.run.dest, COMMIT)
    assert state.read_record(COMMIT, directory) == {}
    files = {"a": dict(key=[1, 2, 3, 4], digest="sha256:" + "a" * 64)}
    snap.write_record(str(record), REPO, COMMIT, directory, files)
    assert state.read_record(COMMIT, directory) == files
    assert state.read_record("f" * 40, directory) == {}
    assert state.read_record(COMMIT, directory + "-other") == {}
    assert disk(tmp_path, verified_record=str(record), repo_id="other/model").read_record(COMMIT, directory) == {}
    snap.write_record(str(record), REPO, COMMIT, directory, None)
    assert state.read_record(COMMIT, directory) == {}
    assert disk(tmp_path).read_record(COMMIT, directory) == {}


def snapshot(tmp_path):
    """A directory with four listed files: two whole, one changed, one short; and one missing."""
    directory = str(tmp_path / "snapshot")
    good = put(directory, "config.json", b'{"a": 1}')
    shard = put(directory, "model.safetensors", b"w" * 50)
    changed = put(directory, "tokenizer.json", b"t" * 20)
    put(directory, "tokenizer.json", b"T" * 20)
    short = put(directory, "vocab.txt", b"v" * 9)
    put(directory, "vocab.txt", b"v" * 3)
    files = [good, shard, changed, short, dict(path="missing.bin", size=4, sha256="0" * 64)]
    return directory, snap.normalise_files(files)


def key(directory, path):
    return snap.file_key(os.stat(os.path.join(directory, path)))


def test_verify_hashes_and_counts_what_differs(tmp_path, monkeypatch):
    monkeypatch.setattr(_snapshot_state, "HASH_WORKERS", 1)
    state = disk(tmp_path)
    directory, files = snapshot(tmp_path)
    checked = snap.check(directory, files)
    assert checked["complete"] is False and (checked["present_bytes"], checked["missing_bytes"]) == (78, 13)
    got = state.verify(directory, files, checked, True, {})
    sha = dict((item["path"], "sha256:" + item["sha256"]) for item in files)
    assert got is checked
    assert got["verified"] == dict((path, dict(key=key(directory, path), digest=sha[path]))
                                   for path in ("config.json", "model.safetensors"))
    assert got["wrong_digest"] == [dict(path="tokenizer.json", expected=sha["tokenizer.json"],
                                        actual="sha256:" + hashlib.sha256(b"T" * 20).hexdigest())]
    assert (got["wrong_hash"], got["unverified"], got["hashed_bytes"]) == (["tokenizer.json"], [], 78)
    assert (got["present_bytes"], got["missing_bytes"], got["complete"]) == (58, 33, False)
    assert state.progress == [dict(state="running", message="checking the files against the hub's listing: %s hashed" % text)
                              for text in ("50 B", "70 B", "78 B")]


def test_verify_hashes_with_the_workers_and_depth_of_the_run(tmp_path, monkeypatch):
    asked = []
    real = snap.verify_digests

    def verify_digests(directory, files, record, **options):
        asked.append(dict(options, progress=callable(options["progress"])))
        return real(directory, files, record, **options)

    monkeypatch.setattr(_snapshot_state.snap, "verify_digests", verify_digests)
    monkeypatch.setattr(_snapshot_state, "HASH_WORKERS", 3)
    state = disk(tmp_path, deep=True)
    directory, files = snapshot(tmp_path)
    state.verify(directory, files, snap.check(directory, files), True, {})
    state.verify(directory, files, snap.check(directory, files), True, {}, fresh=True)
    assert asked == [dict(deep=True, workers=3, progress=True), dict(deep=False, workers=3, progress=True)]


def test_a_changed_or_unverified_file_makes_a_snapshot_of_right_sizes_incomplete(tmp_path):
    state = disk(tmp_path)
    directory = str(tmp_path / "snapshot")
    files = snap.normalise_files([put(directory, "config.json", b"{}"), put(directory, "model.safetensors", b"w" * 50)])
    put(directory, "config.json", b"[]")
    checked = snap.check(directory, files)
    assert checked["complete"] is True
    got = state.verify(directory, files, checked, True, {})
    assert (got["complete"], got["wrong_hash"], got["unverified"]) == (False, ["config.json"], [])
    query = disk(tmp_path, state="queried", verified_record=str(tmp_path / "record.json"))
    got = query.verify(directory, files, snap.check(directory, files), True, {}, hash_files=False)
    assert (got["complete"], got["wrong_hash"], got["unverified"]) == (False, [], ["config.json", "model.safetensors"])


def test_verify_of_a_complete_snapshot_with_the_record(tmp_path):
    state = disk(tmp_path)
    directory = str(tmp_path / "snapshot")
    files = snap.normalise_files([put(directory, "config.json", b"{}"), put(directory, "model.safetensors", b"w" * 50)])
    first = state.verify(directory, files, snap.check(directory, files), True, {})
    assert (first["complete"], first["hashed_bytes"], sorted(first["verified"])) == (True, 52, ["config.json",
                                                                                                "model.safetensors"])
    again = state.verify(directory, files, snap.check(directory, files), True, first["verified"])
    assert (again["complete"], again["hashed_bytes"], again["verified"]) == (True, 0, first["verified"])
    # deep reads every byte again, unless the files were hashed in this very run (fresh).
    state.run.params["deep"] = True
    assert state.verify(directory, files, snap.check(directory, files), True, first["verified"])["hashed_bytes"] == 52
    assert state.verify(directory, files, snap.check(directory, files), True, first["verified"], fresh=True)[
        "hashed_bytes"] == 0


def test_a_query_reads_no_byte(tmp_path):
    record = str(tmp_path / "verified.json")
    state = disk(tmp_path, state="queried", verified_record=record)
    directory, files = snapshot(tmp_path)
    known = {"config.json": dict(key=key(directory, "config.json"), digest="sha256:" + files[0]["sha256"]),
             "model.safetensors": dict(key=[1, 2, 3, 4], digest="sha256:" + files[2]["sha256"])}
    got = state.verify(directory, files, snap.check(directory, files), True, known, hash_files=False)
    assert (got["verified"], got["wrong_digest"], got["hashed_bytes"]) == ({"config.json": known["config.json"]}, [], 0)
    assert (got["unverified"], got["wrong_hash"], got["complete"]) == (["model.safetensors", "tokenizer.json"], [], False)
    assert state.progress == []
    complete = dict(path="config.json", size=8, sha256=files[0]["sha256"])
    got = state.verify(directory, [complete], snap.check(directory, [complete]), True, known, hash_files=False)
    # The other files are not in that listing: the snapshot is not complete while they are there.
    assert (got["unverified"], got["complete"], [entry["path"] for entry in got["unlisted"]]) == (
        [], False, ["model.safetensors", "tokenizer.json", "vocab.txt"])
    for name in ("model.safetensors", "tokenizer.json", "vocab.txt"):
        os.unlink(os.path.join(directory, name))
    got = state.verify(directory, [complete], snap.check(directory, [complete]), True, known, hash_files=False)
    assert (got["unverified"], got["complete"]) == ([], True)


def test_a_query_without_a_record_checks_sizes_only(tmp_path):
    state = disk(tmp_path, state="queried")
    directory, files = snapshot(tmp_path)
    checked = snap.check(directory, files)
    got = state.verify(directory, files, checked, True, {}, hash_files=False)
    assert (got["verified"], got["wrong_digest"], got["unverified"], got["hashed_bytes"]) == ({}, [], [], 0)
    assert got["complete"] is False and got["present_bytes"] == 78
    complete = [files[0]]
    for name in ("model.safetensors", "tokenizer.json", "vocab.txt"):
        os.unlink(os.path.join(directory, name))
    assert state.verify(directory, complete, snap.check(directory, complete), True, {}, hash_files=False)["complete"] is True


def test_a_listing_without_the_hubs_digests_verifies_nothing(tmp_path):
    state = disk(tmp_path, state="verified")
    directory, files = snapshot(tmp_path)
    got = state.verify(directory, files, snap.check(directory, files), False, {})
    assert got["unverified"] == ["config.json", "model.safetensors", "tokenizer.json"]
    assert (got["verified"], got["wrong_digest"], got["hashed_bytes"], got["complete"]) == ({}, [], 0, False)


def test_save_record(tmp_path, monkeypatch):
    record = tmp_path / "state" / "verified.json"
    state = disk(tmp_path, verified_record=str(record))
    verified = {"a": dict(key=[1, 2, 3, 4], digest="sha256:" + "a" * 64)}
    state.save_record(COMMIT, "/d", dict(verified=verified), verified)
    assert not record.exists()
    state.run.module.check_mode = True
    state.save_record(COMMIT, "/d", dict(verified=verified), {})
    assert not record.exists()
    state.run.module.check_mode = False
    state.save_record(COMMIT, "/d", dict(verified=verified), {})
    data = json.loads(record.read_text())
    assert (data["repo_id"], data["commit"], data["directory"], data["files"]) == (REPO, COMMIT, "/d", verified)
    disk(tmp_path).save_record(COMMIT, "/d", dict(verified={}), verified)


@pytest.mark.parametrize("prefix, name", [("", "verified_record"), ("vllm_weights_", "vllm_weights_verified_record")])
def test_a_record_that_cannot_be_written_fails(tmp_path, prefix, name):
    (tmp_path / "state").write_text("a file")
    record = tmp_path / "state" / "verified.json"
    state = disk(tmp_path, verified_record=str(record), variable_prefix=prefix)
    with pytest.raises(Failure) as caught:
        state.save_record(COMMIT, "/d", dict(verified={"a": {}}), {})
    assert str(caught.value) == "cannot write the verified record %s: File exists; check %s" % (record, name)


def space(tmp_path, monkeypatch, free, wrong_size=(), incomplete=(), **params):
    state = disk(tmp_path, **params)
    directory = str(tmp_path / "snapshot")
    shutil.rmtree(directory, ignore_errors=True)
    for number, size in enumerate(incomplete):
        put(directory, ".cache/huggingface/download/f%d.incomplete" % number, b"i" * size)
    asked = []
    monkeypatch.setattr(_snapshot_state.snap, "free_bytes", lambda path: asked.append(path) or (free, "/srv"))
    checked = dict(missing_bytes=1000,
                   wrong_size=[dict(path="w%d" % n, size=size, expected=1) for n, size in enumerate(wrong_size)])
    state.check_space(COMMIT, directory, checked)
    assert asked == [directory]


def test_the_space_needed_is_what_is_missing_and_the_margin(tmp_path, monkeypatch):
    space(tmp_path, monkeypatch, 1050)
    space(tmp_path, monkeypatch, 1100, disk_margin_percent=10)
    # Partial downloads and wrong-sized files are removed first: their bytes count as free.
    space(tmp_path, monkeypatch, 1000, incomplete=(30,), wrong_size=(15, None, 5))
    space(tmp_path, monkeypatch, 1000, incomplete=(30, 20))
    with pytest.raises(Failure) as caught:
        space(tmp_path, monkeypatch, 1049)
    assert str(caught.value) == (
        "not enough disk space for %s at %s: 1.0 KB missing + 5%% margin = 1.1 KB needed, 1.0 KB free on /srv (%s). "
        "Free space there or point dest at a larger filesystem; nothing was downloaded" % (REPO, COMMIT, tmp_path / "snapshot"))
    with pytest.raises(Failure):
        space(tmp_path, monkeypatch, 1000, incomplete=(30,), wrong_size=(15, None, 4))


def test_the_space_needed_in_full(tmp_path, monkeypatch):
    with pytest.raises(Failure) as caught:
        space(tmp_path, monkeypatch, 2000, incomplete=(100,), wrong_size=(400,), disk_margin_percent=250,
              variable_prefix="vllm_weights_")
    # 1000 + 2500 = 3500 needed; 2000 + 100 + 400 = 2500 free once the leftovers are gone.
    assert str(caught.value) == (
        "not enough disk space for %s at %s: 1.0 KB missing + 250%% margin = 3.5 KB needed, 2.5 KB free on /srv (%s). "
        "Free space there or point vllm_weights_dest at a larger filesystem; nothing was downloaded"
        % (REPO, COMMIT, tmp_path / "snapshot"))
    space(tmp_path, monkeypatch, 3000, incomplete=(100,), wrong_size=(400,), disk_margin_percent=250)


def test_the_margin_is_whole_bytes(tmp_path, monkeypatch):
    state = disk(tmp_path)
    monkeypatch.setattr(_snapshot_state.snap, "free_bytes", lambda path: (1060, "/"))
    # 1010 + 5% = 1060.5, counted as 1060.
    state.check_space(COMMIT, str(tmp_path / "none"), dict(missing_bytes=1010, wrong_size=[]))


def test_a_snapshot_directory_not_made_yet_has_no_leftovers(tmp_path, monkeypatch):
    state = disk(tmp_path)
    monkeypatch.setattr(_snapshot_state.snap, "free_bytes", lambda path: (1050, "/"))
    monkeypatch.setattr(_snapshot_state.snap, "incomplete_files", lambda path: pytest.fail("listed a missing directory"))
    state.check_space(COMMIT, str(tmp_path / "none"), dict(missing_bytes=1000, wrong_size=[]))


def test_a_full_disk_removes_the_partial_and_wrong_sized_files(tmp_path, monkeypatch):
    state = disk(tmp_path, variable_prefix="vllm_weights_")
    directory = str(tmp_path / "snapshot")
    files = snap.normalise_files([put(directory, "config.json", b"{}"),
                                  dict(path="model.safetensors", size=3000, sha256="0" * 64)])
    put(directory, "model.safetensors", b"w" * 10)
    put(directory, ".cache/huggingface/download/model.safetensors.metadata", b"m")
    put(directory, ".cache/huggingface/download/x.incomplete", b"i")
    put(directory, ".cache/rsync-partial/model.safetensors", b"p")
    monkeypatch.setattr(_snapshot_state.snap, "free_bytes", lambda path: (100, "/srv") if path == directory else None)
    removed = ["/earlier/removed"]
    with pytest.raises(Failure) as caught:
        state.disk_full(COMMIT, directory, files, removed, "OSError: [Errno 28] No space left on device")
    gone = [os.path.join(directory, ".cache/huggingface/download/x.incomplete"), os.path.join(directory, "model.safetensors"),
            os.path.join(directory, ".cache/huggingface/download/model.safetensors.metadata"),
            os.path.join(directory, ".cache/rsync-partial/model.safetensors")]
    assert removed == ["/earlier/removed"] + gone and state.run.result["removed"] is removed
    assert not any(os.path.exists(path) for path in gone) and os.path.exists(os.path.join(directory, "config.json"))
    # 3000 missing + 5% = 3150, 100 free: at least 3.0 KB more.
    message = ("the disk filled up while fetching %s at %s into %s: OSError: [Errno 28] No space left on device. 3.0 KB "
               "still missing, 100 B free on /srv. The partial and wrong-sized files were removed (%s); the complete "
               "files are kept. Free at least 3.0 KB there (or point vllm_weights_dest at a larger filesystem) and "
               "re-run: it fetches only what is missing" % (REPO, COMMIT, directory, ", ".join((["/earlier/removed"]
                                                                                               + gone)[:6])))
    assert str(caught.value) == message
    assert state.progress == [dict(state="failed", message=message)]


@pytest.mark.parametrize("margin, free, free_text", [
    (250, 34, "at least 1 B"), (255, 35, "space (something else filled it)"), (250, 35, "space (something else filled it)")])
def test_how_much_to_free_in_whole_bytes(tmp_path, monkeypatch, margin, free, free_text):
    """10 bytes missing and a margin of 250% (25 bytes) or 255% (25.5, counted as 25)."""
    state = disk(tmp_path, disk_margin_percent=margin)
    directory = str(tmp_path / "snapshot")
    os.makedirs(directory)
    monkeypatch.setattr(_snapshot_state.snap, "free_bytes", lambda path: (free, "/srv"))
    removed = ["/r%d" % n for n in range(7)]
    with pytest.raises(Failure) as caught:
        state.disk_full(COMMIT, directory, [dict(path="a.bin", size=10, sha256="0" * 64)], removed, "full")
    assert "were removed (/r0, /r1, /r2, /r3, /r4, /r5); the complete files are kept. Free %s there" % free_text in str(
        caught.value)


def test_a_disk_filled_by_something_else(tmp_path, monkeypatch):
    state = disk(tmp_path)
    directory = str(tmp_path / "snapshot")
    files = snap.normalise_files([put(directory, "config.json", b"{}")])
    monkeypatch.setattr(_snapshot_state.snap, "free_bytes", lambda path: (0, "/srv"))
    with pytest.raises(Failure) as caught:
        state.disk_full(COMMIT, directory, files, [], "full")
    assert ("0 B still missing, 0 B free on /srv. The partial and wrong-sized files were removed (none); the complete "
            "files are kept. Free space (something else filled it) there (or point dest at") in str(caught.value)


class Stop(object):
    """The event hash_arrivals watches: set after ``polls`` waits; each wait is recorded."""

    def __init__(self, polls=0, on_wait=None):
        self.polls = polls
        self.waits = []
        self.on_wait = on_wait
        self.set_now = False

    def is_set(self):
        return self.set_now

    def wait(self, seconds):
        self.waits.append(seconds)
        if self.on_wait:
            self.on_wait(len(self.waits))
        if len(self.waits) >= self.polls:
            self.set_now = True
        return self.set_now


def test_files_that_arrived_whole_are_hashed_during_the_download(tmp_path):
    state = disk(tmp_path)
    directory = str(tmp_path / "snapshot")
    good = put(directory, "config.json", b"{}")
    changed = put(directory, "model.safetensors", b"w" * 50)
    put(directory, "model.safetensors", b"W" * 50)
    later = dict(path="tokenizer.json", size=3, sha256=hashlib.sha256(b"tok").hexdigest())
    known = dict(path="known.json", size=1, sha256="0" * 64)
    state.arrived = {"known.json": "already"}
    files = [later, good, changed, dict(path="README.md", size=2), known]

    first_wait = []

    def arrive(waits):
        if waits == 1:
            first_wait.append(sorted(state.arrived))
        if waits == 2:
            put(directory, "tokenizer.json", b"tok")

    stop = Stop(polls=5, on_wait=arrive)
    state.hash_arrivals(directory, files, stop)
    # Only matches go in, with their key; the file that came after two polls too; then nothing is left to wait for.
    assert state.arrived == {"known.json": "already",
                             "config.json": dict(key=key(directory, "config.json"), digest="sha256:" + good["sha256"]),
                             "tokenizer.json": dict(key=key(directory, "tokenizer.json"),
                                                    digest="sha256:" + later["sha256"])}
    assert stop.waits == [_snapshot_state.POLL_SECONDS] * 2 and stop.set_now is False
    # A file not there yet does not hold up the others: they were hashed before the first wait.
    assert first_wait == [["config.json", "known.json"]]


def test_hashing_stops_with_the_download(tmp_path):
    state = disk(tmp_path)
    directory = str(tmp_path / "snapshot")
    files = [dict(path="late.json", size=3, sha256="0" * 64)]
    stop = Stop(polls=3)
    state.hash_arrivals(directory, files, stop)
    assert (stop.waits, state.arrived) == ([1.0] * 3, {})
    stop = Stop()
    stop.set_now = True
    state.hash_arrivals(directory, [put(directory, "a.json", b"a")], stop)
    assert (stop.waits, state.arrived) == ([], {})


def test_a_file_changed_or_unreadable_while_hashed_is_left_to_verify(tmp_path, monkeypatch):
    state = disk(tmp_path)
    directory = str(tmp_path / "snapshot")
    changing = put(directory, "a.json", b"a")
    unreadable = put(directory, "b.json", b"b")
    calls = []

    def hash_listed(full, expected, size):
        calls.append(os.path.basename(full))
        if full.endswith("b.json"):
            if calls.count("b.json") == 1:
                raise OSError(13, "Permission denied")
            return expected, key(directory, "b.json")
        return expected, [0, 0, 0, 0]  # its key changed while it was read

    monkeypatch.setattr(_snapshot_state.snap, "hash_listed", hash_listed)
    stop = Stop(polls=5)
    state.hash_arrivals(directory, [unreadable, changing], stop)
    assert calls == ["b.json", "a.json", "b.json"]
    assert state.arrived == {"b.json": dict(key=key(directory, "b.json"), digest="sha256:" + unreadable["sha256"])}
    assert stop.waits == []


def test_a_stop_between_two_files(tmp_path, monkeypatch):
    state = disk(tmp_path)
    directory = str(tmp_path / "snapshot")
    files = [put(directory, "a.json", b"a"), put(directory, "b.json", b"b")]
    stop = Stop()
    original = snap.hash_listed

    def hash_then_stop(full, expected, size):
        stop.set_now = True
        return original(full, expected, size)

    monkeypatch.setattr(_snapshot_state.snap, "hash_listed", hash_then_stop)
    state.hash_arrivals(directory, files, stop)
    assert sorted(state.arrived) == ["a.json"]


def test_what_the_listing_does_not_name_is_moved_aside_kept_and_reported(tmp_path):
    """Issue 24, point 4: unlisted files beside correctly hashed listed ones were served."""
    state = disk(tmp_path)
    directory = os.path.join(state.run.dest, COMMIT)
    files = snap.normalise_files([put(directory, "config.json", b"{}"), put(directory, "sub/listed.py", b"x = 1\n")])
    put(directory, "processor_config.json", b'{"auto_map": {"AutoProcessor": "evil.EvilProcessor"}}')
    put(directory, "evil.py", b"import os\n")
    put(directory, "sub/unlisted.py", b"y\n")
    put(directory, "deep/er/hook.py", b"z\n")
    os.symlink("/etc/passwd", os.path.join(directory, "chat_template.jinja"))
    checked = snap.check(directory, files)
    assert not checked["complete"] and len(checked["unlisted"]) == 5
    moved = state.quarantine(COMMIT, directory, checked["unlisted"], files)
    rejected = os.path.join(state.run.dest, ".fleet-vllm-rejected")
    roots = os.listdir(os.path.join(rejected, COMMIT))
    assert len(roots) == 1 and roots[0].startswith("unlisted-") and roots[0].endswith("-%d" % os.getpid())
    root = os.path.join(rejected, COMMIT, roots[0])
    assert [(entry["path"], entry["moved_to"]) for entry in moved] == [
        (rel, os.path.join(root, rel)) for rel in ("chat_template.jinja", "deep/er/hook.py", "evil.py",
                                                   "processor_config.json", "sub/unlisted.py")]
    # Kept, byte for byte, root only; the link moved as a link (its target untouched).
    with open(os.path.join(root, "evil.py"), "rb") as handle:
        assert handle.read() == b"import os\n"
    assert os.readlink(os.path.join(root, "chat_template.jinja")) == "/etc/passwd" and os.path.exists("/etc/passwd")
    assert oct(os.stat(rejected).st_mode & 0o777) == "0o700"
    assert oct(os.stat(os.path.join(root, "evil.py")).st_mode & 0o777) == "0o600"
    # The snapshot keeps the listed files and the directories they are in; the emptied ones are gone.
    assert sorted(os.listdir(directory)) == ["config.json", "sub"] and os.listdir(os.path.join(directory, "sub")) == [
        "listed.py"]
    assert snap.check(directory, files)["complete"]
    assert state.run.result["unlisted"] == moved and state.run.result["changed"]
    assert state.run.module.warnings == ["%s at %s: 5 file(s) not in the hub's listing of the commit were in the snapshot "
                                         "and were moved out of it, never served: %s, into %s" % (
                                             REPO, COMMIT, snap.describe_unlisted(moved), root)]
