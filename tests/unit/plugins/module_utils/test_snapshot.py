"""module_utils/_snapshot.py in process: the manifest, the check of a snapshot on disk and the
lines hf_snapshot reports (problems, progress, what an rsync answer means). The hf_snapshot
module tests run the same code in a subprocess; these compare whole results on real files."""

from __future__ import annotations

import hashlib
import json
import os
import re

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils import _snapshot
from ansible_collections.fleet.vllm.plugins.module_utils._snapshot import (
    SnapshotError,
    bytes_on_disk,
    check,
    describe_problems,
    file_key,
    free_bytes,
    hf_metadata_path,
    human_bytes,
    human_seconds,
    incomplete_files,
    is_commit_sha,
    is_private_path,
    make_manifest,
    normalise_files,
    progress_line,
    read_manifest,
    rsync_kind,
    snapshot_dir,
    verify_digests,
    write_manifest,
)

SHA = "0123456789abcdef0123456789abcdef01234567"


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return dict(path=str(path.name), size=len(data), sha256=hashlib.sha256(data).hexdigest())


def test_names_and_paths():
    assert (is_commit_sha(SHA), is_commit_sha(SHA.upper()), is_commit_sha("main"), is_commit_sha(""),
            is_commit_sha(None)) == (True, False, False, False, False)
    assert snapshot_dir("/srv/models/x", SHA) == "/srv/models/x/" + SHA
    assert [is_private_path(p) for p in (".fleet-vllm-snapshot.json", ".fleet-vllm-snapshot.lock",
                                         ".cache/huggingface/x", "config.json", "a/.cache/x")] == [
        True, True, True, False, False]
    assert hf_metadata_path("/d", "a/b.json") == "/d/.cache/huggingface/download/a/b.json.metadata"


def test_listings_are_checked_and_sorted():
    assert normalise_files([dict(path="b", size=0, sha256=""), dict(path="a/c", size=3, sha256="f" * 64, extra=1)]) == [
        dict(path="a/c", size=3, sha256="f" * 64), dict(path="b", size=0)]


@pytest.mark.parametrize("entry, message", [
    (dict(path="", size=1), "the listing has a file with an unsafe or empty path: ''"),
    (dict(path="/etc/passwd", size=1), "the listing has a file with an unsafe or empty path: '/etc/passwd'"),
    (dict(path="a/../../x", size=1), "the listing has a file with an unsafe or empty path: 'a/../../x'"),
    (dict(size=1), "the listing has a file with an unsafe or empty path: None"),
    (dict(path="a", size=-1), "the listing gives a no valid size (-1)"),
    (dict(path="a", size=True), "the listing gives a no valid size (True)"),
    (dict(path="a", size="3"), "the listing gives a no valid size ('3')"),
    (dict(path="a"), "the listing gives a no valid size (None)"),
])
def test_bad_listings_in_full(entry, message):
    with pytest.raises(SnapshotError) as caught:
        normalise_files([entry])
    assert str(caught.value) == message


def test_manifest_written_and_read_back(tmp_path):
    manifest = make_manifest("nvidia/Kimi-K2.5-NVFP4", SHA, [dict(path="b", size=2), dict(path="a", size=1, sha256="f" * 64)],
                             allow_patterns=["*.json"], ignore_patterns=[])
    created = manifest.pop("created")
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", created)
    assert manifest == dict(digests="hub", version=1, repo_id="nvidia/Kimi-K2.5-NVFP4", commit=SHA, revision=SHA,
                            allow_patterns=["*.json"], ignore_patterns=None,
                            files=[dict(path="a", size=1, sha256="f" * 64), dict(path="b", size=2)], total_bytes=3)
    assert make_manifest("r", SHA, [], revision="main")["revision"] == "main"
    write_manifest(str(tmp_path), manifest)
    path = tmp_path / ".fleet-vllm-snapshot.json"
    assert path.read_text() == json.dumps(manifest, indent=1, sort_keys=True) + "\n"
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert os.listdir(tmp_path) == [".fleet-vllm-snapshot.json"]
    assert read_manifest(str(tmp_path)) == manifest


def test_manifest_errors_in_full(tmp_path):
    assert read_manifest(str(tmp_path)) is None
    path = tmp_path / ".fleet-vllm-snapshot.json"
    for content in ('{"version": 2, "files": []}', '[1]', '{"version": 1, "files": {}}'):
        path.write_text(content)
        with pytest.raises(SnapshotError) as caught:
            read_manifest(str(tmp_path))
        assert str(caught.value) == ("%s is not a fleet.vllm snapshot manifest (version 1): remove it, the next run lists "
                                     "the revision again and rewrites it" % path)
    path.write_text("{")
    with pytest.raises(SnapshotError) as caught:
        read_manifest(str(tmp_path))
    assert str(caught.value) == ("the snapshot manifest %s is not valid JSON (Expecting property name enclosed in double "
                                 "quotes: line 1 column 2 (char 1)): remove it, the next run lists the revision again and "
                                 "rewrites it" % path)
    path.unlink()
    path.mkdir()
    with pytest.raises(SnapshotError) as caught:
        read_manifest(str(tmp_path))
    assert str(caught.value) == "cannot read the snapshot manifest %s: Is a directory" % path


def snapshot(tmp_path):
    """A small snapshot: config, an index naming two shards, the shards."""
    files = [write(tmp_path / "config.json", b'{"a": 1}'),
             write(tmp_path / "model-00001-of-00002.safetensors", b"x" * 10),
             write(tmp_path / "model-00002-of-00002.safetensors", b"y" * 20)]
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    files.append(write(tmp_path / "model.safetensors.index.json", json.dumps(index).encode()))
    return files


def result(**fields):
    base = dict(complete=True, missing=[], wrong_size=[], wrong_hash=[], index_problems=[], unlisted=[], present_bytes=0,
                missing_bytes=0, total_bytes=0, hashed_bytes=0)
    base.update(fields)
    return base


def test_a_complete_snapshot(tmp_path):
    files = snapshot(tmp_path)
    total = sum(item["size"] for item in files)
    assert check(str(tmp_path), files) == result(present_bytes=total, total_bytes=total)
    # check() reads sizes and the index only, deep or not; the digests are verify_digests()'s.
    assert check(str(tmp_path), files, deep=True) == result(present_bytes=total, total_bytes=total)
    digests = verify_digests(str(tmp_path), files)
    assert (digests["wrong_digest"], sorted(digests["verified"]), digests["hashed_bytes"]) == (
        [], sorted(item["path"] for item in files), total)


def test_an_incomplete_snapshot_in_full(tmp_path):
    files = snapshot(tmp_path)
    index_size = files[3]["size"]
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"y" * 7)
    (tmp_path / "config.json").unlink()
    (tmp_path / "config.json").mkdir()
    files.append(dict(path="tokenizer.json", size=5))
    got = check(str(tmp_path), files)
    assert got == result(
        complete=False, missing=["tokenizer.json"],
        wrong_size=[dict(path="config.json", size=None, expected=8),
                    dict(path="model-00002-of-00002.safetensors", size=7, expected=20)],
        index_problems=["model.safetensors.index.json names model-00002-of-00002.safetensors, which is not complete on disk"],
        present_bytes=10 + index_size, missing_bytes=5 + 8 + 20, total_bytes=5 + 8 + 10 + 20 + index_size)
    assert describe_problems(got) == (
        "1 file(s) missing (tokenizer.json); 2 file(s) with the wrong size (config.json: not a file bytes, expected 8, "
        "model-00002-of-00002.safetensors: 7 bytes, expected 20); model.safetensors.index.json names "
        "model-00002-of-00002.safetensors, which is not complete on disk")


def test_a_changed_byte_is_found_by_the_digests_not_by_the_sizes(tmp_path):
    files = snapshot(tmp_path)
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"x" * 9 + b"z")
    total = sum(item["size"] for item in files)
    assert check(str(tmp_path), files, deep=True) == result(present_bytes=total, total_bytes=total)
    digests = verify_digests(str(tmp_path), files)
    assert digests["wrong_digest"] == [dict(path="model-00001-of-00002.safetensors",
                                            expected="sha256:" + hashlib.sha256(b"x" * 10).hexdigest(),
                                            actual="sha256:" + hashlib.sha256(b"x" * 9 + b"z").hexdigest())]
    assert describe_problems(result(complete=False, wrong_hash=["model-00001-of-00002.safetensors"])) == (
        "1 file(s) whose content differs from the listing (model-00001-of-00002.safetensors)")
    # A file listed without a digest is not hashed.
    files[1].pop("sha256")
    assert verify_digests(str(tmp_path), files)["hashed_bytes"] == total - 10


@pytest.mark.parametrize("index, problem", [
    (b"{", "sub/model.safetensors.index.json: not valid JSON (Expecting property name enclosed in double quotes: line 1 "
           "column 2 (char 1))"),
    (b'{"weight_map": {}}', "sub/model.safetensors.index.json: has no weight_map"),
    (b'[1]', "sub/model.safetensors.index.json: has no weight_map"),
    (b'{"weight_map": {"a": "x.safetensors", "b": 3}}',
     "sub/model.safetensors.index.json names sub/x.safetensors, which the revision does not have"),
])
def test_index_problems_in_full(tmp_path, index, problem):
    entry = write(tmp_path / "sub" / "model.safetensors.index.json", index)
    entry["path"] = "sub/model.safetensors.index.json"
    got = check(str(tmp_path), [entry])
    assert (got["complete"], got["index_problems"]) == (False, [problem])


def test_an_index_that_is_not_complete_is_not_read(tmp_path):
    entry = dict(path="model.safetensors.index.json", size=99)
    write(tmp_path / "model.safetensors.index.json", b"{")
    assert check(str(tmp_path), [entry])["index_problems"] == []


def test_problems_are_listed_five_at_most():
    names = ["f%d" % n for n in range(7)]
    got = result(complete=False, missing=names, wrong_size=[dict(path=n, size=1, expected=2) for n in names], wrong_hash=names,
                 index_problems=["p%d" % n for n in range(7)])
    assert describe_problems(got) == (
        "7 file(s) missing (f0, f1, f2, f3, f4, ...); 7 file(s) with the wrong size (f0: 1 bytes, expected 2, f1: 1 bytes, "
        "expected 2, f2: 1 bytes, expected 2, f3: 1 bytes, expected 2, f4: 1 bytes, expected 2); 7 file(s) whose content "
        "differs from the listing (f0, f1, f2, f3, f4); p0; p1; p2; p3; p4")
    assert describe_problems(result(complete=False, missing=names[:5])) == "5 file(s) missing (f0, f1, f2, f3, f4)"
    assert describe_problems(result(complete=False, missing=names[:3]), limit=2) == "3 file(s) missing (f0, f1, ...)"
    assert describe_problems(result()) == ""


def test_partial_downloads_and_bytes_on_disk(tmp_path):
    write(tmp_path / "a.safetensors", b"a" * 100)
    write(tmp_path / ".fleet-vllm-snapshot.json", b"m" * 1000)
    write(tmp_path / "sub" / ".fleet-vllm-snapshot.json", b"n" * 7)
    write(tmp_path / ".cache/huggingface/download/x/b.safetensors.incomplete", b"b" * 10)
    write(tmp_path / ".cache/huggingface/download/a.incomplete", b"c" * 1)
    write(tmp_path / ".cache/huggingface/download/a.metadata", b"d" * 3)
    os.symlink("/nonexistent", str(tmp_path / "dangling"))
    assert incomplete_files(str(tmp_path)) == [
        str(tmp_path / ".cache/huggingface/download/a.incomplete"),
        str(tmp_path / ".cache/huggingface/download/x/b.safetensors.incomplete")]
    assert bytes_on_disk(str(tmp_path)) == 100 + 7 + 10 + 1 + 3 + len("/nonexistent")
    assert incomplete_files(str(tmp_path / "none")) == []


def test_bytes_on_disk_skip_only_the_manifest(tmp_path):
    """Every file of the directory counts, whatever order the directory lists them in, but the manifest."""
    for number in range(40):
        write(tmp_path / ("model-%05d-of-00040.safetensors" % number), b"w" * number)
    write(tmp_path / ".fleet-vllm-snapshot.json", b"m" * 1000)
    assert bytes_on_disk(str(tmp_path)) == sum(range(40))


def test_free_bytes_of_a_path_not_made_yet(tmp_path):
    free, probe = free_bytes(str(tmp_path / "a" / "b"))
    st = os.statvfs(str(tmp_path))
    assert probe == str(tmp_path)
    assert abs(free - st.f_bavail * st.f_frsize) < 64 * 1024 * 1024
    assert free_bytes("/")[1] == "/"


@pytest.mark.parametrize("value, text", [(0, "0 B"), (999, "999 B"), (1000, "1.0 KB"), (1536000, "1.5 MB"),
                                         (540e9, "540.0 GB"), (2.5e12, "2.5 TB"), (3e15, "3000.0 TB"), (-1500, "-1.5 KB")])
def test_human_bytes(value, text):
    assert human_bytes(value) == text


@pytest.mark.parametrize("value, text", [(-3, "0s"), (59.9, "59s"), (60, "1m00s"), (3599, "59m59s"), (3600, "1h00m"),
                                         (5521, "1h32m")])
def test_human_seconds(value, text):
    assert human_seconds(value) == text


@pytest.mark.parametrize("record, line", [
    (dict(bytes_done=12e9, bytes_total=540e9, rate_bytes_per_second=95e6), "12.0 GB / 540.0 GB (2%), 95.0 MB/s, ETA 1h32m"),
    (dict(bytes_done=540e9, bytes_total=540e9, rate_bytes_per_second=95e6), "540.0 GB / 540.0 GB (100%), 95.0 MB/s"),
    (dict(bytes_done=5e9, bytes_total=10e9), "5.0 GB / 10.0 GB (50%)"),
    (dict(bytes_done=5e9, bytes_total=10e9, rate_bytes_per_second=0), "5.0 GB / 10.0 GB (50%)"),
    ({}, "0 B / 0 B (100%)"),
])
def test_progress_line(record, line):
    assert progress_line(record) == line


@pytest.mark.parametrize("rc, stderr, kind", [
    (5, "@ERROR: max connections (4) reached -- try again later", "busy"),
    (1, "max connections (4) reached", "busy"),
    (5, "max connections", "other"),
    (5, "rsync: did not see server greeting", "busy"),
    (12, "rsync: did not see server greeting", "other"),
    (5, "@ERROR: Unknown module 'models'", "refused"),
    (5, "@ERROR: access denied to models from 10.0.0.2", "refused"),
    (10, "rsync: failed to connect to 10.0.0.1: Connection refused (111)", "unreachable"),
    (35, "", "unreachable"),
    (23, 'rsync: link_stat "/m/x" (in models) failed: No such file or directory (2)', "absent"),
    (23, "some files vanished", "other"),
    (20, None, "other"),
])
def test_rsync_answers(rc, stderr, kind):
    assert rsync_kind(rc, stderr) == kind
    assert kind in _snapshot.RSYNC_KINDS


def test_manifest_patterns_and_its_time_in_utc(monkeypatch):
    import time
    manifest = make_manifest("r", SHA, [], allow_patterns=None, ignore_patterns=["*.bin"])
    assert (manifest["allow_patterns"], manifest["ignore_patterns"]) == (None, ["*.bin"])
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        before = time.time()
        created = make_manifest("r", SHA, [])["created"]
        after = time.time()
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    utc = [time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(moment)) for moment in (before, after)]
    assert created in utc


def test_only_partial_downloads_of_the_download_directory_count(tmp_path):
    write(tmp_path / ".cache/huggingface/other/x.incomplete", b"x")
    write(tmp_path / ".cache/huggingface/download/y.incomplete", b"y")
    assert incomplete_files(str(tmp_path)) == [str(tmp_path / ".cache/huggingface/download/y.incomplete")]


def test_every_problem_counts_its_bytes(tmp_path):
    """A missing file listed first does not stop the check, and every short, absent or changed file adds its size."""
    files = snapshot(tmp_path)
    (tmp_path / "config.json").unlink()
    (tmp_path / "config.json").mkdir()
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"x" * 9 + b"z")
    files.insert(0, dict(path="a-missing.json", size=3))
    total = sum(item["size"] for item in files)
    got = check(str(tmp_path), files, deep=True)
    assert (got["missing"], [item["path"] for item in got["wrong_size"]]) == (["a-missing.json"], ["config.json"])
    assert (got["missing_bytes"], got["present_bytes"], got["total_bytes"]) == (3 + 8, total - 11, total)
    assert [item["path"] for item in verify_digests(str(tmp_path), files)["wrong_digest"]] == [
        "model-00001-of-00002.safetensors"]


@pytest.mark.parametrize("damage", ["missing", "short", "changed"])
def test_any_one_problem_makes_the_snapshot_incomplete(tmp_path, damage):
    files = snapshot(tmp_path)
    if damage == "missing":
        (tmp_path / "config.json").unlink()
    elif damage == "short":
        (tmp_path / "config.json").write_bytes(b"{}")
    else:
        (tmp_path / "config.json").write_bytes(b'{"a": 2}')
    complete = check(str(tmp_path), files)["complete"] and not verify_digests(str(tmp_path), files)["wrong_digest"]
    assert complete is False
    assert check(str(tmp_path), files, deep=True)["complete"] is (damage == "changed")


def test_verify_digests_in_full(tmp_path):
    """Every field of verify_digests' answer: what matches (with the key the record keeps), what
    differs (sorted by path), what the listing gives no digest, what is skipped (missing, wrong
    size), the bytes and files hashed, the progress after each file (largest first), and a record
    that spares the hash of what it shows unchanged - unless deep, or its key or digest differ."""
    files = snapshot(tmp_path)
    tokenizer = b"tok"
    (tmp_path / "tokenizer.json").write_bytes(tokenizer)
    files.append(dict(path="tokenizer.json", size=3, git_sha1=hashlib.sha1(b"blob 3\0" + tokenizer).hexdigest()))
    (tmp_path / "README.md").write_bytes(b"no")
    files.append(dict(path="README.md", size=2))
    files.append(dict(path="missing.bin", size=4, sha256="0" * 64))
    (tmp_path / "short.bin").write_bytes(b"12")
    files.append(dict(path="short.bin", size=9, sha256="0" * 64))
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"Y" * 20)
    (tmp_path / "config.json").write_bytes(b'{"a": 2}')
    index = "model.safetensors.index.json"
    index_size = os.path.getsize(tmp_path / index)
    assert index_size > 20

    def key(name):
        return file_key(os.stat(tmp_path / name))

    def sha(name):
        return "sha256:" + hashlib.sha256((tmp_path / name).read_bytes()).hexdigest()

    listed = {item["path"]: item for item in files}
    progress = []
    got = verify_digests(str(tmp_path), files, workers=1, progress=progress.append)
    good = {name: dict(key=key(name), digest=sha(name)) for name in ("model-00001-of-00002.safetensors", index)}
    good["tokenizer.json"] = dict(key=key("tokenizer.json"), digest="git-sha1:" + listed["tokenizer.json"]["git_sha1"])
    assert got == dict(
        verified=good,
        wrong_digest=[dict(path="config.json", expected="sha256:" + listed["config.json"]["sha256"], actual=sha("config.json")),
                      dict(path="model-00002-of-00002.safetensors",
                           expected="sha256:" + listed["model-00002-of-00002.safetensors"]["sha256"],
                           actual=sha("model-00002-of-00002.safetensors"))],
        unverifiable=["README.md"], hashed_bytes=index_size + 20 + 10 + 8 + 3, hashed_files=5)
    # one worker, largest first: the index, then the shards, the config, the tokenizer
    assert progress == [index_size, index_size + 20, index_size + 30, index_size + 38, index_size + 41]

    again = verify_digests(str(tmp_path), files, record_files=got["verified"])
    assert (again["verified"], again["hashed_files"], again["hashed_bytes"]) == (good, 2, 28)
    assert verify_digests(str(tmp_path), files, record_files=got["verified"], deep=True)["hashed_files"] == 5
    touched = dict(good, **{"tokenizer.json": dict(good["tokenizer.json"], key=[3, 0, 0, 0])})
    assert verify_digests(str(tmp_path), files, record_files=touched)["hashed_files"] == 3
    relisted = dict(good, **{index: dict(good[index], digest="sha256:" + "f" * 64)})
    redone = verify_digests(str(tmp_path), files, record_files=relisted)
    assert (redone["hashed_files"], redone["verified"]) == (3, good)


def test_verify_digests_names_what_it_cannot_read(tmp_path, monkeypatch):
    files = snapshot(tmp_path)

    def unreadable(path, kind, size=None):
        raise OSError(13, "Permission denied")

    monkeypatch.setattr(_snapshot, "digest_of", unreadable)
    with pytest.raises(SnapshotError) as caught:
        verify_digests(str(tmp_path), files[:2], workers=1)
    assert str(caught.value) == "cannot read %s: Permission denied; %s: Permission denied" % (
        tmp_path / "model-00001-of-00002.safetensors", tmp_path / "config.json")


def test_describe_problems_of_digests_in_full():
    """The digests' problems, word for word: what differs (both digests, at most `limit`, before the
    sizes-only wrong_hash it replaces), and what is not verified yet (at most `limit`, then "...")."""
    wrong = [dict(path="f%d" % n, actual="sha256:%d" % n, expected="sha256:e%d" % n) for n in range(3)]
    got = describe_problems(result(complete=False, wrong_hash=["ignored"], wrong_digest=wrong,
                                   unverified=["u1", "u2", "u3"]), limit=2)
    assert got == ("3 file(s) whose content differs from the hub's listing (f0: sha256:0, the listing says sha256:e0, "
                   "f1: sha256:1, the listing says sha256:e1); 3 file(s) not verified against the hub's listing yet "
                   "(u1, u2, ...)")
    assert describe_problems(result(complete=False, unverified=["u1", "u2"]), limit=2) == (
        "2 file(s) not verified against the hub's listing yet (u1, u2)")
    assert describe_problems(result(wrong_digest=[], unverified=[])) == ""


@pytest.mark.parametrize("rc, stderr, kind, meaning, fatal", [
    (5, "@ERROR: max connections (4) reached -- try again later", "busy", "the peer is at its connection limit", False),
    (5, "@ERROR: Unknown module 'fleet-vllm-models'", "refused",
     "the peer refused this host: its vllm_weights_peer_networks (rsyncd hosts allow) does not include this host's "
     "address, or it serves no module of that name", True),
    (10, "rsync: failed to connect to a: Connection refused (111)", "unreachable", "the peer cannot be reached", False),
    (23, 'rsync: link_stat "/x" failed: No such file or directory (2)', "absent", "the peer does not have it", False),
    (1, "rsync: syntax error", "other", "syntax or usage error", True),
    (2, "x", "other", "protocol incompatibility", True),
    (3, "x", "other", "errors selecting input/output files", True),
    (4, "x", "other", "requested action not supported", True),
    (5, "x", "other", "error starting the client-server protocol", True),
    (12, "rsync error: error in rsync protocol data stream", "other", "transfer interrupted", False),
    (30, "timeout in data send/receive", "other", "transfer interrupted", False),
])
def test_what_an_rsync_error_means(rc, stderr, kind, meaning, fatal):
    assert _snapshot.rsync_error(rc, stderr, "rsync://a:8873/m/Kimi") == dict(
        type="rsync", status=rc, retry_after=None, kind=kind, fatal=fatal,
        message="rsync from rsync://a:8873/m/Kimi exited with code %s (%s): %s" % (rc, meaning, stderr))


def test_an_rsync_error_says_the_end_of_what_rsync_said_on_one_line():
    long = "a " * 500 + "b\n\t c"
    message = _snapshot.rsync_error(12, long, "rsync://p/m")["message"]
    assert message == "rsync from rsync://p/m exited with code 12 (transfer interrupted): %s" % (" ".join(long.split())[-800:])
    assert message.endswith(" a b c") and len(message.split("): ", 1)[1]) == 800
    assert _snapshot.rsync_error(20, " \n", "rsync://p/m")["message"] == (
        "rsync from rsync://p/m exited with code 20 (transfer interrupted): (no output)")


# ---- issue 24, point 4: the listing is the only allow-list --------------------------------------

# What transformers reads for a multimodal model before anything else, with remote code trusted: an auto_map it imports.
PROCESSOR = json.dumps({"auto_map": {"AutoProcessor": "evil.EvilProcessor"}}).encode()


def planted(tmp_path):
    """A complete snapshot (snapshot()) and, beside it, what a mirror or a peer could add: an unlisted
    processor_config.json naming evil.py, a chat template, a file in a subdirectory, look-alikes of a listed name
    (case, a compatibility form, a trailing space), a link to a file outside and a link to a directory outside."""
    files = snapshot(tmp_path / "snap")
    directory = tmp_path / "snap"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "config.json").write_bytes(b'{"a": 1}')
    (directory / "processor_config.json").write_bytes(PROCESSOR)
    (directory / "evil.py").write_bytes(b"import os\n")
    (directory / "chat_template.jinja").write_bytes(b"{{ messages }}")
    (directory / "extra" / "deeper").mkdir(parents=True)
    (directory / "extra" / "deeper" / "hook.py").write_bytes(b"x = 1\n")
    for name in ("Config.json", "\uff43onfig.json", "config.json "):
        (directory / name).write_bytes(b'{"a": 1}')
    os.symlink(str(outside / "config.json"), str(directory / "preprocessor_config.json"))
    os.symlink(str(outside), str(directory / "linked"))
    return str(directory), files


PLANTED = [
    dict(path="Config.json", size=8, kind="file"), dict(path="chat_template.jinja", size=14, kind="file"),
    dict(path="config.json ", size=8, kind="file"), dict(path="evil.py", size=10, kind="file"),
    dict(path="extra/deeper/hook.py", size=6, kind="file"), dict(path="linked", size=None, kind="link"),
    dict(path="preprocessor_config.json", size=None, kind="link"),
    dict(path="processor_config.json", size=len(PROCESSOR), kind="file"),
    dict(path="\uff43onfig.json", size=8, kind="file")]


def test_a_snapshot_with_anything_unlisted_is_not_complete(tmp_path):
    directory, files = planted(tmp_path)
    got = check(directory, files)
    assert got["unlisted"] == PLANTED
    assert (got["complete"], got["missing"], got["wrong_size"]) == (False, [], [])
    assert describe_problems(got, limit=2) == (
        "9 file(s) not in the hub's listing of the commit, never served (Config.json (8 bytes), chat_template.jinja "
        "(14 bytes), ...)")
    # The bookkeeping is the collection's own: the manifest, .cache/ (huggingface_hub's and rsync's).
    write_manifest(directory, make_manifest("r", SHA, files))
    os.makedirs(os.path.join(directory, ".cache", "huggingface", "download"))
    with open(os.path.join(directory, ".cache", "huggingface", "download", "x.metadata"), "w") as handle:
        handle.write("m")
    assert check(directory, files)["unlisted"] == PLANTED


def test_a_listed_name_that_is_a_link_or_below_one_is_missing(tmp_path):
    files = snapshot(tmp_path / "snap")
    directory = tmp_path / "snap"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "tokenizer.json").write_bytes(b"tok")
    (outside / "config.json").write_bytes(b'{"a": 1}')
    (directory / "config.json").unlink()
    os.symlink(str(outside / "config.json"), str(directory / "config.json"))
    os.symlink(str(outside), str(directory / "sub"))
    files.append(dict(path="sub/tokenizer.json", size=3, sha256=hashlib.sha256(b"tok").hexdigest()))
    os.mkfifo(str(directory / "fifo"))
    got = check(str(directory), files)
    assert (got["complete"], got["missing"], got["unlisted"]) == (False, ["config.json", "sub/tokenizer.json"], [
        dict(path="config.json", size=None, kind="link"), dict(path="fifo", size=None, kind="fifo"),
        dict(path="sub", size=None, kind="link")])
    # Nor is it hashed through the link.
    assert "config.json" not in verify_digests(str(directory), files)["verified"]


def test_a_name_that_is_not_utf8_is_shown_replaced(tmp_path):
    files = snapshot(tmp_path)
    with open(os.path.join(os.fsencode(str(tmp_path)), b"evil\xff.py"), "wb") as handle:
        handle.write(b"x")
    got = check(str(tmp_path), files)
    assert [entry["path"] for entry in got["unlisted"]] == ["evil\udcff.py"]
    assert _snapshot.shown(got["unlisted"][0]["path"]) == "evil\ufffd.py"
    assert "evil\ufffd.py (1 bytes)" in describe_problems(got)
