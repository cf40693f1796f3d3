"""fleet.vllm.hf_snapshot against real servers on loopback: the fault-injecting Hub test server
(tests/hub/fakehub.py) with the real huggingface_hub 2.4.0 in the module's child process, and a
real rsync daemon for copies from a peer. Each test checks the files on disk and the server's
request log, not only what the module says."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ansible_collections.fleet.vllm.plugins.filter.weights_plan import weights_listing

from tests.helpers import rsyncd
from tests.hub.synthetic_repo import make_repo

REPO = "nvidia/Kimi-K2.5-NVFP4"
SHARD = "model-00002-of-00004.safetensors"
MANIFEST = ".fleet-vllm-snapshot.json"


@pytest.fixture(scope="module")
def repo_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("repo") / "Kimi-K2.5-NVFP4"
    make_repo(path, shards=4, shard_bytes=1_500_000)
    return path


@pytest.fixture
def hub(fakehub, repo_dir):
    fakehub.commit = fakehub.add_repo(REPO, str(repo_dir))
    return fakehub


@pytest.fixture
def snap(run_module, hub, tmp_path):
    """snap(**options) runs the module against the hub with dest in tmp_path."""
    dest = tmp_path / "pristine"

    def run(check=False, **options):
        args = dict(repo_id=REPO, dest=str(dest), endpoint=hub.url, python=sys.executable, retry_delay=0.2,
                    progress_file=str(tmp_path / "progress.json"))
        args.update(options)
        return run_module("hf_snapshot", args, check=check)

    run.dest = dest
    return run


def listing(hub, repo=REPO):
    """The hub's listing of the commit, as the role's controller task makes it (filter weights_listing)."""
    return weights_listing(hub.repo_files(repo, hub.commit if repo == REPO else "main"))


def tree(path):
    """Every entry under path with its type, mode, size and mtime: what check mode must leave as it was."""
    entries = []
    for base, dirs, names in os.walk(path):
        for name in sorted(dirs + names):
            full = os.path.join(base, name)
            st = os.lstat(full)
            entries.append((os.path.relpath(full, path), st.st_mode, st.st_size, st.st_mtime_ns))
    return sorted(entries)


def file_gets(hub):
    return [r for r in hub.requests if r["method"] == "GET" and "/resolve/" in r["path"]]


def same_files(a, b):
    names = sorted(p.name for p in Path(a).iterdir() if p.is_file())
    assert names == sorted(p.name for p in Path(b).iterdir() if p.is_file() and p.name != MANIFEST)
    for name in names:
        assert (Path(a) / name).read_bytes() == (Path(b) / name).read_bytes(), name


def test_fresh_download_then_noop_and_pinned_rerun_without_requests(snap, hub, repo_dir):
    first = snap()
    assert not first.failed, first
    r = first.result
    assert r["changed"] and r["complete"] and r["commit"] == hub.commit
    assert r["path"] == str(snap.dest / hub.commit)
    total = sum(p.stat().st_size for p in repo_dir.iterdir())
    assert r["total_bytes"] == total == r["downloaded_bytes"]
    same_files(repo_dir, r["path"])
    manifest = json.loads((Path(r["path"]) / MANIFEST).read_text())
    assert manifest["commit"] == hub.commit and len(manifest["files"]) == r["files"] == 10
    assert {f["path"]: f.get("sha256") for f in manifest["files"]}[SHARD] == hashlib.sha256(
        (repo_dir / SHARD).read_bytes()).hexdigest()
    progress = json.loads((snap.dest.parent / "progress.json").read_text())
    assert progress["state"] == "done" and progress["bytes_done"] == total

    hub.clear_log()
    again = snap()
    assert not again.failed and not again.result["changed"], again
    assert again.result["downloaded_bytes"] == 0 and file_gets(hub) == []

    hub.clear_log()
    pinned = snap(revision=hub.commit)
    assert not pinned.failed and not pinned.result["changed"], pinned
    assert pinned.result["requests"] == 0 and hub.requests == []


def test_truncated_shard_is_detected_and_fetched_again(snap, hub, repo_dir):
    path = Path(snap().result["path"])
    # A truncated shard older than huggingface_hub's metadata: huggingface_hub alone keeps it.
    os.truncate(path / SHARD, 1000)
    os.utime(path / SHARD, (1, 1))
    queried = snap(revision=hub.commit, state="queried")
    assert not queried.failed and not queried.result["complete"] and queried.result["missing"] == [SHARD]
    verified = snap(revision=hub.commit, state="verified")
    assert verified.failed and SHARD in verified.result["msg"] and "wrong size" in verified.result["msg"]
    hub.clear_log()
    fixed = snap(revision=hub.commit)
    assert not fixed.failed and fixed.result["changed"], fixed
    assert [r["path"].rsplit("/", 1)[-1] for r in file_gets(hub)] == [SHARD]
    same_files(repo_dir, path)


def test_check_mode_reports_what_would_be_downloaded_and_writes_nothing(snap, hub):
    result = snap(check=True)
    assert not result.failed and result.result["changed"], result
    assert sorted(item["path"] for item in result.result["would_download"]) == sorted(result.result["missing"])
    assert len(result.result["missing"]) == 10
    assert not snap.dest.exists() and file_gets(hub) == []
    path = Path(snap().result["path"])
    (path / SHARD).unlink()
    partial = snap(check=True, revision=hub.commit)
    assert [item["path"] for item in partial.result["would_download"]] == [SHARD]
    assert not (path / SHARD).exists()


def test_disk_too_small_is_refused_before_any_byte(snap, hub):
    hub.add_fault("wrong_size", path=SHARD, size=50 * 10**15, times=None)
    result = snap()
    assert result.failed
    msg = result.result["msg"]
    assert "not enough disk space" in msg and "needed" in msg and "free" in msg and "dest" in msg, msg
    assert not snap.dest.exists() and file_gets(hub) == []


def test_gated_repo_needs_the_token_variable_and_the_token_stays_secret(snap, hub, repo_dir):
    token = "hf_fleetvllmtesttoken0123456789"
    commit = hub.add_repo("acme/gated-model", str(repo_dir), gated=True, token=token)
    denied = snap(repo_id="acme/gated-model", variable_prefix="vllm_weights_")
    assert denied.failed and "vllm_weights_hf_token" in denied.result["msg"], denied
    assert "gated" in denied.result["msg"]
    allowed = snap(repo_id="acme/gated-model", token=token, dest=str(snap.dest.parent / "gated"))
    assert not allowed.failed and allowed.result["commit"] == commit, allowed
    assert token not in allowed.stdout and token not in allowed.stderr
    assert any(r["authorization"] for r in hub.requests if "acme/gated-model" in r["path"] and r["status"] == 200)


@pytest.mark.parametrize("options, needle", [
    (dict(repo_id="nvidia/No-Such-Model"), "not found"),
    (dict(revision="no-such-branch"), "revision 'no-such-branch' does not exist"),
    (dict(endpoint="http://127.0.0.1:9"), "cannot reach http://127.0.0.1:9"),
    (dict(repo_id="not a repo"), "owner/name"),
    (dict(offline=True), "40-character commit sha"),
])
def test_clear_errors(snap, options, needle):
    result = snap(retries=0, **options)
    assert result.failed and needle in result.result["msg"], result
    assert not snap.dest.exists()


def test_server_errors_and_dropped_connections_are_retried(snap, hub, repo_dir):
    hub.add_fault("status", path="model-00001-*", status=503, times=2)
    hub.add_fault("status", path=SHARD, status=429, retry_after=1, times=1)
    hub.add_fault("drop", path="model-00003-*", after_bytes=300_000, times=2)
    result = snap(retries=5)
    assert not result.failed and result.result["complete"], result
    same_files(repo_dir, result.result["path"])
    assert all(rule["times"] == 0 for rule in hub.faults) or hub.faults == []


def test_stall_is_killed_and_retried(snap, hub, repo_dir):
    hub.add_fault("stall", path=SHARD, after_bytes=200_000, seconds=120, times=1)
    started = time.monotonic()
    result = snap(stall_timeout=5, retries=2)
    assert not result.failed and result.result["complete"], result
    assert result.result["attempts"] == 2 and result.result["xet_fallback"] is True
    assert time.monotonic() - started < 60
    same_files(repo_dir, result.result["path"])
    assert not list(Path(result.result["path"]).rglob("*.incomplete"))


def test_a_killed_run_leaves_an_orphan_that_the_next_run_removes(snap, hub, repo_dir, tmp_path):
    hub.add_fault("stall", path=SHARD, after_bytes=1_000_000, seconds=600, times=1)
    args = dict(repo_id=REPO, dest=str(snap.dest), endpoint=hub.url, python=sys.executable, stall_timeout=600)
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict(args, _ansible_remote_tmp=str(tmp_path))}))
    module = Path(__file__).resolve().parents[4] / "plugins" / "modules" / "hf_snapshot.py"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[4] / "collections"))
    proc = subprocess.Popen([sys.executable, str(module), str(args_file)], env=env, cwd=str(tmp_path),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    directory = snap.dest / hub.commit
    deadline = time.monotonic() + 60
    orphans = []
    while time.monotonic() < deadline:
        orphans = list(directory.rglob("*.incomplete")) if directory.exists() else []
        # huggingface_hub writes in large chunks: wait until the server has sent the part before the stall.
        if orphans and hub.bytes_served(path_prefix="/%s/resolve/%s/%s" % (REPO, hub.commit, SHARD)) >= 1_000_000:
            break
        time.sleep(0.2)
    assert orphans, "the download never reached the stalled shard"
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    time.sleep(1)  # the child gets SIGTERM when the module dies (PR_SET_PDEATHSIG)
    leftovers = list(directory.rglob("*.incomplete"))
    assert leftovers, "a killed run leaves huggingface_hub's partial file behind"
    hub.clear_faults()
    result = snap(revision=hub.commit)
    assert not result.failed and result.result["complete"], result
    assert any(str(p) in result.result["removed"] for p in leftovers)
    assert not list(directory.rglob("*.incomplete"))
    same_files(repo_dir, directory)


def test_a_changed_byte_is_caught_and_only_changed_files_are_hashed_again(snap, hub, repo_dir, tmp_path):
    record = str(tmp_path / "state" / "verified.json")
    first = snap(verified_record=record)
    path = Path(first.result["path"])
    assert first.result["verified_files"] == 10 and oct(os.stat(record).st_mode & 0o777) == "0o644"
    again = snap(revision=hub.commit, verified_record=record)
    assert not again.failed and not again.result["changed"] and again.result["hashed_bytes"] == 0, again
    data = bytearray((path / SHARD).read_bytes())
    data[-1] ^= 0xFF
    (path / SHARD).write_bytes(bytes(data))
    # A query reads no byte: the changed file is "not verified", so the snapshot is not complete.
    queried = snap(revision=hub.commit, state="queried", offline=True, verified_record=record)
    assert queried.result["complete"] is False and queried.result["unverified"] == [SHARD], queried
    verified = snap(revision=hub.commit, state="verified", verified_record=record)
    assert verified.failed and SHARD in verified.result["msg"], verified
    assert "sha256:" + hashlib.sha256(bytes(data)).hexdigest() in verified.result["msg"]
    assert verified.result["hashed_bytes"] == (path / SHARD).stat().st_size
    repaired = snap(revision=hub.commit, verified_record=record)
    assert not repaired.failed and repaired.result["changed"], repaired
    assert len(repaired.result["rejected"]) == 1 and Path(repaired.result["rejected"][0]).read_bytes() == bytes(data)
    same_files(repo_dir, path)


def test_offline_query_without_a_snapshot_says_incomplete(snap, hub):
    result = snap(revision=hub.commit, state="queried", offline=True)
    assert not result.failed and result.result["complete"] is False and hub.requests == []
    verified = snap(revision=hub.commit, state="verified", offline=True)
    assert verified.failed and "no complete snapshot" in verified.result["msg"]


@pytest.fixture
def rsync_daemon(tmp_path):
    """A real rsync daemon on loopback serving tmp_path/served-by-peer as module fleet-vllm-models."""
    root = tmp_path / "peer-pristine"
    root.mkdir()
    conf = tmp_path / "rsyncd.conf"
    conf.write_text("use chroot = no\nread only = yes\npid file = %s/rsyncd.pid\n[fleet-vllm-models]\npath = %s\n"
                    "hosts allow = 127.0.0.1\n" % (tmp_path, root))
    proc, port = rsyncd.start(conf)
    yield root, "rsync://127.0.0.1:%d/fleet-vllm-models" % port
    rsyncd.stop(proc)


def test_copy_from_a_peer_with_rsync_never_asks_the_hub(snap, hub, repo_dir, rsync_daemon, run_module, tmp_path):
    peer_root, url = rsync_daemon
    seed = run_module("hf_snapshot", dict(repo_id=REPO, dest=str(peer_root / "Kimi"), endpoint=hub.url,
                                          python=sys.executable))
    assert not seed.failed, seed
    hub.clear_log()
    missing_peer = snap(revision=hub.commit, peer=url + "/Other", retries=0, listing=listing(hub))
    assert missing_peer.failed and "Does a peer have the complete snapshot" in missing_peer.result["msg"]
    assert "no complete snapshot of %s at %s there" % (REPO, hub.commit) in missing_peer.result["msg"]
    copied = snap(revision=hub.commit, peer=url + "/Kimi", listing=listing(hub))
    assert not copied.failed and copied.result["changed"] and copied.result["complete"], copied
    assert hub.requests == [] and copied.result["requests"] == 0
    same_files(repo_dir, copied.result["path"])
    again = snap(revision=hub.commit, peer=url + "/Kimi", listing=listing(hub))
    assert not again.failed and not again.result["changed"]


def _daemon(tmp_path, name, root, allow="127.0.0.1", extra=""):
    """Another real rsync daemon on loopback serving root as fleet-vllm-models (list = no, as the role's)."""
    conf = tmp_path / ("%s.conf" % name)
    conf.write_text("use chroot = no\nread only = yes\nlist = no\npid file = %s/%s.pid\nlock file = %s/%s.lock\n%s"
                    "[fleet-vllm-models]\npath = %s\nhosts allow = %s\nhosts deny = *\nexclude = .cache/\n"
                    % (tmp_path, name, tmp_path, name, extra, root, allow))
    proc, port = rsyncd.start(conf)
    return proc, "rsync://127.0.0.1:%d/fleet-vllm-models" % port


def test_candidates_refusing_or_absent_are_left_out_and_the_next_serves(
        snap, hub, repo_dir, rsync_daemon, run_module, tmp_path):
    peer_root, url = rsync_daemon
    assert not run_module("hf_snapshot", dict(repo_id=REPO, dest=str(peer_root / "Kimi"), endpoint=hub.url,
                                              python=sys.executable)).failed
    # A peer whose hosts allow excludes this host (what rsync says: "Unknown module", list = no) and a closed port.
    closed, closed_url = _daemon(tmp_path, "closed", peer_root, allow="192.0.2.1")
    try:
        hub.clear_log()
        copied = snap(revision=hub.commit, peer=[closed_url + "/Kimi", "rsync://127.0.0.1:1/fleet-vllm-models/Kimi",
                                                 url + "/Other", url + "/Kimi"], listing=listing(hub))
    finally:
        rsyncd.stop(closed)
    assert not copied.failed, copied
    r = copied.result
    assert r["peer_used"] == url + "/Kimi" and hub.requests == []
    same_files(repo_dir, r["path"])
    problems = " | ".join(r["peer_problems"])
    assert "Unknown module" in problems and "vllm_weights_peer_networks" in problems
    assert "Connection refused" in problems and "no complete snapshot" in problems


def test_no_peer_will_serve_falls_back_to_the_hub_and_says_why(snap, hub, repo_dir, tmp_path):
    refusing, refusing_url = _daemon(tmp_path, "refusing", tmp_path, allow="192.0.2.1")
    try:
        hub.clear_log()
        without = snap(revision=hub.commit, peer=refusing_url + "/Kimi", listing=listing(hub))
        assert without.failed and "Unknown module" in without.result["msg"] and "peer_fallback" in without.result["msg"]
        assert file_gets(hub) == []
        fetched = snap(revision=hub.commit, peer=refusing_url + "/Kimi", peer_fallback=True, listing=listing(hub))
    finally:
        rsyncd.stop(refusing)
    assert not fetched.failed, fetched
    r = fetched.result
    assert r["complete"] and r["peer_used"] is None and len(file_gets(hub)) == 10
    assert "as no peer would serve it" in r["msg"] and "Unknown module" in r["msg"]
    warnings = [w["event"]["msg"] if isinstance(w, dict) else w for w in r.get("warnings") or []]
    assert any("no peer will serve" in w and "downloading it from %s" % hub.url in w for w in warnings), warnings
    same_files(repo_dir, r["path"])


def test_a_busy_peer_is_waited_for(snap, hub, repo_dir, run_module, tmp_path):
    """max connections 1, held by a client that named the module and stalls: the copy waits, then completes."""
    import socket
    root = tmp_path / "busy-root"
    root.mkdir()
    assert not run_module("hf_snapshot", dict(repo_id=REPO, dest=str(root / "Kimi"), endpoint=hub.url,
                                              python=sys.executable)).failed
    proc, url = _daemon(tmp_path, "busy", root, extra="max connections = 1\n")
    port = int(url.split(":")[2].split("/")[0])
    holder = socket.create_connection(("127.0.0.1", port))
    try:
        holder.sendall(b"@RSYNCD: 31.0\n")
        holder.recv(100)
        holder.sendall(b"fleet-vllm-models\n")  # the daemon claims its one slot for this connection
        time.sleep(0.5)
        busy = snap(revision=hub.commit, peer=url + "/Kimi", peer_wait=0, listing=listing(hub))
        assert busy.failed and "busy" in busy.result["msg"] and "max connections (1) reached" in busy.result["msg"]

        def release():
            time.sleep(3)
            holder.close()
        import threading
        threading.Thread(target=release, daemon=True).start()
        hub.clear_log()
        copied = snap(revision=hub.commit, peer=url + "/Kimi", peer_wait=60, retry_delay=1, listing=listing(hub))
    finally:
        holder.close()
        rsyncd.stop(proc)
    assert not copied.failed, copied
    assert copied.result["peer_used"] == url + "/Kimi" and hub.requests == []
    assert any("max connections (1) reached" in line for line in copied.result["peer_problems"])
    same_files(repo_dir, copied.result["path"])


CODE = "modeling_kimi_k25.py"


@pytest.fixture
def code_hub(hub, repo_dir, tmp_path):
    """The repository with the remote code --trust-remote-code runs (a small file: checked by its git blob sha1)."""
    code_dir = tmp_path / "repo-with-code"
    code_dir.mkdir()
    for item in repo_dir.iterdir():
        (code_dir / item.name).write_bytes(item.read_bytes())
    (code_dir / CODE).write_text("class KimiK25Model:\n    pass\n")
    hub.code_commit = hub.add_repo("nvidia/Kimi-K2.5-NVFP4-code", str(code_dir))
    hub.code_dir = code_dir
    return hub


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@pytest.mark.parametrize("victim", [CODE, SHARD])
def test_a_peer_with_a_same_size_altered_file_is_refused(snap, code_hub, rsync_daemon, run_module, victim):
    """Issue 14, point 1: a peer's modified modeling_*.py and a same-size corrupted shard were accepted."""
    hub, repo = code_hub, "nvidia/Kimi-K2.5-NVFP4-code"
    peer_root, url = rsync_daemon
    seed = run_module("hf_snapshot", dict(repo_id=repo, dest=str(peer_root / "Kimi"), endpoint=hub.url,
                                          python=sys.executable))
    assert not seed.failed, seed
    bad = peer_root / "Kimi" / hub.code_commit / victim
    good = (hub.code_dir / victim).read_bytes()
    data = bytearray(good)
    data[-2:] = b"#\n" if victim == CODE else bytes(b ^ 0xFF for b in data[-2:])
    data = bytes(data)
    assert len(data) == len(good) and data != good
    bad.write_bytes(data)
    hub.clear_log()
    copied = snap(repo_id=repo, revision=hub.code_commit, peer=url + "/Kimi", retries=3,
                  listing=weights_listing(hub.repo_files(repo, hub.code_commit)))
    assert copied.failed, copied
    msg = copied.result["msg"]
    if victim == SHARD:
        actual, expected = "sha256:" + hashlib.sha256(data).hexdigest(), "sha256:" + hashlib.sha256(good).hexdigest()
    else:
        actual, expected = "git-sha1:" + git_blob_sha1(data), "git-sha1:" + git_blob_sha1(good)
    assert victim in msg and actual in msg and expected in msg, msg
    assert "the peer %s/Kimi" % url in msg and hub.requests == []
    directory = snap.dest / hub.code_commit
    # Not served: out of the snapshot (kept for a look, root only), no manifest, and a check says so.
    assert not (directory / victim).exists() and not (directory / MANIFEST).exists()
    rejected = Path(copied.result["rejected"][0])
    assert rejected.read_bytes() == data and oct(rejected.parent.stat().st_mode & 0o777) == "0o700"
    assert (directory / "config.json").read_bytes() == (hub.code_dir / "config.json").read_bytes()
    verified = snap(repo_id=repo, revision=hub.code_commit, state="verified",
                    listing=weights_listing(hub.repo_files(repo, hub.code_commit)))
    assert verified.failed and victim in verified.result["msg"]


def test_a_size_that_differs_from_the_listing_fails_at_once(snap, hub):
    """Issue 14, point 12: it was downloaded retries + 1 times."""
    hub.add_fault("wrong_size", path=SHARD, delta=-7, times=None)
    result = snap(retries=3)
    assert result.failed
    msg = result.result["msg"]
    size = [entry["size"] for entry in hub.repo_files(REPO, hub.commit) if entry["path"] == SHARD][0]
    assert SHARD in msg and "the listing says %d bytes, %d bytes arrived" % (size - 7, size) in msg, msg
    assert "another attempt cannot change" in msg and "endpoint" in msg
    assert len([r for r in file_gets(hub) if r["path"].endswith(SHARD)]) == 1
    assert not (snap.dest / hub.commit / SHARD).exists()


def test_check_mode_changes_nothing_in_a_partial_snapshot(snap, hub):
    """Issue 14, point 13: huggingface_hub's dry run created directories in a partial snapshot (one copied from a
    peer has no .cache/)."""
    import shutil
    path = Path(snap().result["path"])
    shutil.rmtree(path / ".cache")
    (path / SHARD).unlink()
    before = tree(snap.dest)
    hub.clear_log()
    result = snap(check=True, revision=hub.commit)
    assert tree(snap.dest) == before
    assert not result.failed and [item["path"] for item in result.result["would_download"]] == [SHARD], result
    assert file_gets(hub) == [] and not [r for r in hub.requests if r["method"] == "HEAD"]


def test_umask_027_leaves_the_snapshot_readable_by_the_service(snap, hub):
    """Issue 14, point 2: with a CIS umask of 027 the snapshot was unreadable to the service user."""
    old = os.umask(0o027)
    try:
        result = snap()
    finally:
        os.umask(old)
    assert not result.failed, result
    path = Path(result.result["path"])
    assert oct(snap.dest.stat().st_mode & 0o777) == "0o755" and oct(path.stat().st_mode & 0o777) == "0o755"
    for item in path.iterdir():
        if item.name != ".cache":
            assert oct(item.stat().st_mode & 0o777) == ("0o755" if item.is_dir() else "0o644"), item


def test_a_rerun_takes_over_a_download_left_running(snap, hub, repo_dir, tmp_path):
    """Issue 14, point 11: a download an interrupted run left in the background made the next run fail at the lock."""
    hub.add_fault("stall", path=SHARD, after_bytes=1_000_000, seconds=6, times=1)
    progress = tmp_path / "progress.json"
    args = dict(repo_id=REPO, dest=str(snap.dest), endpoint=hub.url, python=sys.executable, stall_timeout=600,
                progress_file=str(progress), progress_interval=1)
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict(args, _ansible_remote_tmp=str(tmp_path))}))
    module = Path(__file__).resolve().parents[4] / "plugins" / "modules" / "hf_snapshot.py"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[4] / "collections"))
    orphan = subprocess.Popen([sys.executable, str(module), str(args_file)], env=env, cwd=str(tmp_path),
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if hub.bytes_served(path_prefix="/%s/resolve/%s/%s" % (REPO, hub.commit, SHARD)) >= 1_000_000:
            break
        time.sleep(0.2)
    rerun = snap(revision=hub.commit, progress_file=str(progress))
    out, _err = orphan.communicate(timeout=120)
    assert orphan.returncode == 0, out
    assert not rerun.failed, rerun
    took = rerun.result["took_over"]
    assert took["holder"] == "pid %d" % orphan.pid and took["waited_seconds"] >= 1, took
    assert "took over the download pid %d" % orphan.pid in rerun.result["msg"]
    assert rerun.result["complete"] and json.loads(progress.read_text())["state"] == "done"
    same_files(repo_dir, rerun.result["path"])
    assert len([r for r in file_gets(hub) if r["path"].endswith(SHARD)]) == 1


@pytest.fixture
def small_fs(tmp_path):
    """A 2 MiB tmpfs (root only): a disk that fills up during the download."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
                                           capture_output=True, check=False).returncode != 0:
        pytest.skip("needs root to mount a small tmpfs")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_fails_at_once_and_leaves_no_wrong_sized_file(run_module, hub, small_fs):
    """Issue 14, point 12: on a full disk, wrong-sized files were left behind with no guidance. The listing
    understates the shards (1000 bytes each) so that the space check passes and the disk fills up mid-download."""
    hub.add_fault("wrong_size", path="*.safetensors", size=1000, times=None)
    dest = small_fs / "pristine"
    result = run_module("hf_snapshot", dict(repo_id=REPO, dest=str(dest), endpoint=hub.url, python=sys.executable,
                                            retries=3, retry_delay=0.2, max_workers=1))
    assert result.failed, result
    msg = result.result["msg"]
    assert "the disk filled up" in msg and "No space left on device" in msg and "Free " in msg and "dest" in msg, msg
    directory = dest / hub.commit
    assert not list(directory.rglob("*.incomplete"))
    for shard in directory.glob("*.safetensors"):
        assert shard.stat().st_size == 1000, shard  # nothing of a size other than the listing's is left
    # Not retried: each shard was asked for once at most.
    gets = [r["path"].rsplit("/", 1)[-1] for r in file_gets(hub) if r["path"].endswith(".safetensors")]
    assert len(gets) == len(set(gets)), gets


def test_through_ansible_the_payload_comes_from_the_ansiballz_zip(hub, repo_dir, tmp_path):
    """As on a host: ansible runs the module from its AnsiballZ zip, its module_utils imported from the zip
    (zipimport), so the payload the child runs is read from there (_hf_snapshot_payload.source()). Both
    questions, the listing and the download, ran it."""
    root = Path(__file__).resolve().parents[4]
    dest = tmp_path / "pristine"
    args = dict(repo_id=REPO, dest=str(dest), endpoint=hub.url, python=sys.executable, retry_delay=0.2)
    env = dict(os.environ, ANSIBLE_CONFIG=str(root / "ansible.cfg"), ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_KEEP_REMOTE_FILES="0")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible"), "localhost", "-c", "local", "-i", "localhost,",
                           "-e", "ansible_python_interpreter=%s" % sys.executable, "-m", "fleet.vllm.hf_snapshot",
                           "-a", json.dumps(args)], cwd=str(tmp_path), env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert result["complete"] and result["changed"] and result["requests"] == 2, result
    assert result["commit"] == hub.commit and len(file_gets(hub)) == 10
    same_files(repo_dir, result["path"])


# ---- issue 24, point 4: files outside the hub's listing ------------------------------------------

# transformers reads processor_config.json first for a multimodal model and, with remote code trusted, imports what its
# auto_map names (docs/evidence.md); a chat_template.jinja overrides the template.
EVIL = {"processor_config.json": json.dumps({"auto_map": {"AutoProcessor": "evil.EvilProcessor"}}),
        "evil.py": "import os\nos.system('id')\n", "chat_template.jinja": "{{ 'pwned' }}",
        "sub/hook.py": "x = 1\n", "Config.json": "{}", "config.json ": "{}", "\uff43onfig.json": "{}"}


def plant(directory, outside):
    """The issue's files beside the listed ones, and the next attacks on the same sink: a file in a subdirectory,
    look-alikes of a listed name (case, a compatibility form, a trailing space), links to a file and a directory outside."""
    for rel, text in EVIL.items():
        (directory / rel).parent.mkdir(parents=True, exist_ok=True)
        (directory / rel).write_text(text)
    outside.mkdir(exist_ok=True)
    (outside / "preprocessor_config.json").write_text("{}")
    os.symlink(str(outside / "preprocessor_config.json"), str(directory / "preprocessor_config.json"))
    os.symlink(str(outside), str(directory / "linked"))
    return sorted(list(EVIL) + ["linked", "preprocessor_config.json"])


def test_unlisted_files_beside_hashed_ones_are_moved_aside_and_never_served(snap, hub, repo_dir, run_module, tmp_path):
    """Issue 24, point 4: an unlisted processor_config.json with an auto_map and an evil.py beside correctly hashed
    listed files: the check said complete, and the served directory linked them."""
    record = str(tmp_path / "verified.json")
    first = snap(revision=hub.commit, listing=listing(hub), verified_record=record)
    assert not first.failed and first.result["complete"], first
    directory = snap.dest / hub.commit
    names = plant(directory, tmp_path / "outside")

    queried = snap(revision=hub.commit, state="queried", offline=True, verified_record=record)
    assert not queried.failed and not queried.result["complete"] and queried.result["missing"] == [], queried
    assert sorted(entry["path"] for entry in queried.result["unlisted"]) == names
    assert all(entry["moved_to"] is None for entry in queried.result["unlisted"])
    msg = queried.result["msg"]
    assert "9 file(s) not in the hub's listing" in msg and "evil.py (%d bytes)" % len(EVIL["evil.py"]) in msg, msg
    verified = snap(revision=hub.commit, state="verified", offline=True, verified_record=record)
    assert verified.failed and "9 file(s) not in the hub's listing" in verified.result["msg"], verified
    before = tree(snap.dest)
    checked = snap(check=True, revision=hub.commit, listing=listing(hub), verified_record=record)
    assert not checked.failed and checked.result["changed"] and not checked.result["complete"], checked
    assert "9 file(s) not in the hub's listing would be moved out of the snapshot" in checked.result["msg"]
    assert tree(snap.dest) == before

    hub.clear_log()
    fixed = snap(revision=hub.commit, listing=listing(hub), verified_record=record)
    assert not fixed.failed and fixed.result["changed"] and fixed.result["complete"], fixed
    assert file_gets(hub) == []
    moved = dict((entry["path"], entry["moved_to"]) for entry in fixed.result["unlisted"])
    assert sorted(moved) == names
    root = snap.dest / ".fleet-vllm-rejected" / hub.commit
    for rel in EVIL:
        assert Path(moved[rel]).read_text() == EVIL[rel] and Path(moved[rel]).parent.is_relative_to(root)
        assert Path(moved[rel]).relative_to(root).parts[1:] == Path(rel).parts
    assert os.readlink(moved["linked"]) == str(tmp_path / "outside")
    assert (tmp_path / "outside" / "preprocessor_config.json").read_text() == "{}"
    assert "moved out of the snapshot, never served: " in fixed.result["msg"] and str(root) in fixed.result["msg"]
    assert "processor_config.json" in json.dumps(fixed.result["warnings"])
    on_disk = sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if not p.is_dir()
                     and p.parts[len(directory.parts)] != ".cache")
    assert on_disk == sorted([item["path"] for item in listing(hub)] + [MANIFEST])

    again = snap(revision=hub.commit, listing=listing(hub), verified_record=record)
    assert not again.failed and not again.result["changed"] and "unlisted" not in again.result, again
    served = tmp_path / "served"
    linked = run_module("served_model", dict(source=str(directory), path=str(served)))
    assert not linked.failed and linked.result["unlisted"] == [], linked
    assert sorted(p.name for p in served.iterdir()) == sorted([item["path"] for item in listing(hub)]
                                                              + [".fleet-vllm-served.json"])


def test_a_peer_cannot_push_a_file_the_listing_does_not_name(snap, hub, repo_dir, rsync_daemon, run_module, tmp_path):
    """Issue 24, point 4: the copy from a peer was a recursive rsync of whatever the peer's snapshot held."""
    peer_root, url = rsync_daemon
    seed = run_module("hf_snapshot", dict(repo_id=REPO, dest=str(peer_root / "Kimi"), endpoint=hub.url,
                                          python=sys.executable))
    assert not seed.failed, seed
    plant(peer_root / "Kimi" / hub.commit, tmp_path / "outside")
    hub.clear_log()
    copied = snap(revision=hub.commit, peer=url + "/Kimi", listing=listing(hub))
    assert not copied.failed and copied.result["complete"] and copied.result["peer_used"] == url + "/Kimi", copied
    assert hub.requests == [] and "unlisted" not in copied.result
    directory = Path(copied.result["path"])
    on_disk = sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if not p.is_dir()
                     and p.parts[len(directory.parts)] != ".cache")
    assert on_disk == sorted([item["path"] for item in listing(hub)] + [MANIFEST])
    assert not (snap.dest / ".fleet-vllm-rejected").exists()


def test_a_mirror_that_lists_more_than_the_listing_is_asked_for_the_listed_files_only(snap, hub, repo_dir, tmp_path):
    """Issue 24, point 4: the download followed the mirror's own listing of the commit - a file the controller's
    listing does not name was downloaded (and served)."""
    mirror_dir = tmp_path / "mirror-repo"
    mirror_dir.mkdir()
    for item in repo_dir.iterdir():
        (mirror_dir / item.name).write_bytes(item.read_bytes())
    (mirror_dir / "processor_config.json").write_text(EVIL["processor_config.json"])
    (mirror_dir / "evil.py").write_text(EVIL["evil.py"])
    commit = hub.add_repo("nvidia/Kimi-K2.5-NVFP4-mirror", str(mirror_dir))
    listed = [item for item in weights_listing(hub.repo_files("nvidia/Kimi-K2.5-NVFP4-mirror", commit))
              if item["path"] not in ("processor_config.json", "evil.py")]
    hub.clear_log()
    got = snap(repo_id="nvidia/Kimi-K2.5-NVFP4-mirror", revision=commit, listing=listed)
    assert not got.failed and got.result["complete"] and "unlisted" not in got.result, got
    asked = sorted(r["path"].rsplit("/", 1)[-1] for r in file_gets(hub))
    assert asked == sorted(item["path"] for item in listed)
    assert not (snap.dest / commit / "processor_config.json").exists() and not (snap.dest / commit / "evil.py").exists()
