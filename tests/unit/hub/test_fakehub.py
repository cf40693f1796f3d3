"""fakehub (tests/hub/fakehub.py), a TEST FIXTURE imitating the Hugging Face Hub API subset that
huggingface_hub 2.4.0 uses, checked with raw HTTP and with the real client.

The client runs in a subprocess (huggingface_hub reads HF_ENDPOINT at import) with HF_HOME in
tmp_path, no telemetry, no Xet and never a real token. What these tests observe of the client's
behaviour is written down in tests/hub/README.md ("What huggingface_hub 2.4.0 does").
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.hub.fakehub import FakeHub, FaultError, git_blob_sha1, lfs_pointer  # noqa: E402

pytest_plugins = ["tests.hub.pytest_plugin"]

MiB = 1024 * 1024
TOKEN = "hf_fakehub_test_token_not_real"

# One client process runs a list of steps and prints one JSON list of results.
CLIENT = r"""
import json, sys, time
out = []
for step in json.loads(sys.argv[1]):
    t = time.monotonic()
    r = {"op": step["op"]}
    try:
        if step["op"] == "snapshot":
            from huggingface_hub import snapshot_download
            kw = {k: step[k] for k in ("revision", "local_dir", "dry_run", "token", "max_workers") if k in step}
            res = snapshot_download(step["repo"], **kw)
            if kw.get("dry_run"):
                res = [{"filename": i.filename, "will_download": i.will_download, "is_cached": i.is_cached,
                        "file_size": i.file_size, "commit_hash": i.commit_hash} for i in res]
            r["result"] = res
        elif step["op"] == "tree":
            from huggingface_hub import HfApi
            r["result"] = [
                {"path": f.path, "size": getattr(f, "size", None), "blob_id": getattr(f, "blob_id", None),
                 "lfs_sha256": f.lfs.sha256 if getattr(f, "lfs", None) else None,
                 "lfs_size": f.lfs.size if getattr(f, "lfs", None) else None,
                 "dir": not hasattr(f, "blob_id")}
                for f in HfApi().list_repo_tree(step["repo"], revision=step.get("revision"), recursive=True)]
        elif step["op"] == "info":
            from huggingface_hub import HfApi
            i = HfApi().model_info(step["repo"], revision=step.get("revision"))
            r["result"] = {"sha": i.sha, "siblings": [s.rfilename for s in i.siblings], "gated": i.gated}
    except BaseException as e:
        r["error"] = type(e).__name__
        r["mro"] = [c.__name__ for c in type(e).__mro__]
        r["message"] = str(e)
    r["elapsed"] = time.monotonic() - t
    out.append(r)
print(json.dumps(out))
"""


def client(hf_python, steps, timeout=60, env=None):
    proc = hf_python(CLIENT, json.dumps(steps), timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    wait_done(hf_python.hub)
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def make_dir(root, files):
    root = Path(root)
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return root


def tiny_repo(tmp_path, name="src"):
    """config + tokenizer (regular), two shards (LFS by name), one >= 1 MiB blob (LFS by size)."""
    return make_dir(tmp_path / name, {
        "config.json": b'{"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"]}\n',
        "tokenizer/tokenizer_config.json": b'{"model_max_length": 131072}\n',
        "model-00001-of-00002.safetensors": os.urandom(200_000),
        "model-00002-of-00002.safetensors": os.urandom(300_000),
        "blobs/big.bin": os.urandom(MiB + 17),
    })


def files_of(directory):
    d = Path(directory)
    return {p.relative_to(d).as_posix(): p for p in sorted(d.rglob("*")) if p.is_file()
            and not p.relative_to(d).as_posix().startswith(".cache/")}


def assert_same_tree(src, dst):
    a, b = files_of(src), files_of(dst)
    assert sorted(a) == sorted(b)
    for rel in a:
        assert a[rel].read_bytes() == b[rel].read_bytes(), rel


def wait_done(hub, timeout=3.0):
    """Wait until every logged request finished (a handler notices a vanished client within 0.1 s)."""
    deadline = time.monotonic() + timeout
    while not all(e["done"] for e in hub.requests) and time.monotonic() < deadline:
        time.sleep(0.05)


def list_all(hub, url):
    """Every entry of a tree listing, following the Link: rel="next" pages."""
    entries = []
    while url:
        status, h, body = raw(hub, "GET", url)
        assert status == 200, body
        entries += json.loads(body)
        link = h.get("link")
        url = link[link.index("/api/"):link.index(">")] if link else None
    return entries


def raw(hub, method, path, headers=None, body=None):
    conn = http.client.HTTPConnection(hub.host, hub.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


# ------------------------------------------------------------------------------------------------
# the server alone


def test_add_repo_revisions_are_deterministic(fakehub, tmp_path):
    v1 = tiny_repo(tmp_path, "v1")
    v2 = make_dir(tmp_path / "v2", {"config.json": b"{}\n"})
    sha1 = fakehub.add_repo("o/n", v1)
    assert len(sha1) == 40 and int(sha1, 16) >= 0
    assert fakehub.add_repo("o/n", v1) == sha1  # same content, same sha
    sha2 = fakehub.add_repo("o/n", v2, tags=["v2"])
    assert sha2 != sha1
    assert fakehub.resolve("o/n", "main") == sha2  # the branch moved
    assert fakehub.resolve("o/n", "v2") == sha2
    assert fakehub.resolve("o/n", sha1) == sha1  # the old revision stays
    assert fakehub.add_repo("o/other", v1) != sha1  # the repo id is part of the commit
    fakehub.set_branch("o/n", "main", sha1)
    assert fakehub.resolve("o/n", "refs/heads/main") == sha1


def test_resolve_headers_etags_and_ranges(fakehub, tmp_path):
    src = tiny_repo(tmp_path)
    sha = fakehub.add_repo("o/n", src)
    cfg = (src / "config.json").read_bytes()
    status, h, body = raw(fakehub, "HEAD", "/o/n/resolve/main/config.json")
    assert status == 200 and body == b""
    assert h["x-repo-commit"] == sha
    assert h["etag"] == '"%s"' % git_blob_sha1(cfg)
    assert h["content-length"] == str(len(cfg))
    assert "x-linked-etag" not in h

    shard = (src / "model-00002-of-00002.safetensors").read_bytes()
    digest = hashlib.sha256(shard).hexdigest()
    status, h = raw(fakehub, "HEAD", "/o/n/resolve/%s/model-00002-of-00002.safetensors" % sha)[:2]
    assert status == 200
    assert h["etag"] == h["x-linked-etag"] == '"%s"' % digest
    assert h["x-linked-size"] == h["content-length"] == str(len(shard))

    status, h, body = raw(fakehub, "GET", "/o/n/resolve/main/model-00002-of-00002.safetensors",
                          {"Range": "bytes=1000-1999"})
    assert (status, body, h["content-range"]) == (206, shard[1000:2000], "bytes 1000-1999/%d" % len(shard))
    status, h, body = raw(fakehub, "GET", "/o/n/resolve/main/model-00002-of-00002.safetensors",
                          {"Range": "bytes=299990-"})
    assert (status, body) == (206, shard[299990:])
    status, h, body = raw(fakehub, "GET", "/o/n/resolve/main/model-00002-of-00002.safetensors",
                          {"Range": "bytes=-5"})
    assert (status, body) == (206, shard[-5:])
    status, h = raw(fakehub, "GET", "/o/n/resolve/main/config.json", {"Range": "bytes=%d-" % len(cfg)})[:2]
    assert status == 416 and h["content-range"] == "bytes */%d" % len(cfg)
    # sub-directories, and the path percent-encoded or not
    status, _hdrs, body = raw(fakehub, "GET", "/o/n/resolve/main/tokenizer%2Ftokenizer_config.json")
    assert status == 200 and body == (src / "tokenizer/tokenizer_config.json").read_bytes()

    status, h = raw(fakehub, "GET", "/o/n/resolve/main/nope.json")[:2]
    assert (status, h["x-error-code"], h["x-repo-commit"]) == (404, "EntryNotFound", sha)
    status, h = raw(fakehub, "GET", "/o/n/resolve/nobranch/config.json")[:2]
    assert (status, h["x-error-code"]) == (404, "RevisionNotFound")
    status, h = raw(fakehub, "GET", "/o/missing/resolve/main/config.json")[:2]
    assert (status, h["x-error-code"]) == (401, "RepoNotFound")  # as the Hub, without a token


def test_tree_listing_lfs_pages_and_subpaths(tmp_path):
    src = tiny_repo(tmp_path)
    with FakeHub(tree_page_size=2) as hub:
        sha = hub.add_repo("o/n", src)
        status, h, body = raw(hub, "GET", "/api/models/o/n/tree/main?recursive=true&expand=false")
        assert status == 200 and len(json.loads(body)) == 2
        assert 'rel="next"' in h["link"] and "cursor=" in h["link"]
        entries = list_all(hub, "/api/models/o/n/tree/%s?recursive=true" % sha)
        by_path = {e["path"]: e for e in entries}
        assert {p for p, e in by_path.items() if e["type"] == "directory"} == {"blobs", "tokenizer"}
        big = (src / "blobs/big.bin").read_bytes()
        e = by_path["blobs/big.bin"]
        assert e["size"] == len(big) and e["lfs"]["oid"] == hashlib.sha256(big).hexdigest()
        assert e["lfs"]["size"] == len(big)
        ptr = lfs_pointer(e["lfs"]["oid"], len(big))
        assert e["oid"] == git_blob_sha1(ptr) and e["lfs"]["pointerSize"] == len(ptr)
        cfg = (src / "config.json").read_bytes()
        assert by_path["config.json"] == {"type": "file", "oid": git_blob_sha1(cfg), "size": len(cfg),
                                          "path": "config.json"}
        assert not any("xetHash" in e for e in entries)
        # not recursive: one level; a sub-path, its slash encoded as the client does
        names = [e["path"] for e in list_all(hub, "/api/models/o/n/tree/main")]
        assert names == ["blobs", "config.json", "model-00001-of-00002.safetensors",
                         "model-00002-of-00002.safetensors", "tokenizer"]
        status, _hdrs, body = raw(hub, "GET", "/api/models/o/n/tree/main/tokenizer%2F?recursive=true")
        assert [e["path"] for e in json.loads(body)] == ["tokenizer/tokenizer_config.json"]
        status, h = raw(hub, "GET", "/api/models/o/n/tree/main/nothere")[:2]
        assert (status, h["x-error-code"]) == (404, "EntryNotFound")
        # revision info
        status, h, body = raw(hub, "GET", "/api/models/o/n/revision/main")
        info = json.loads(body)
        assert (info["id"], info["sha"]) == ("o/n", sha)
        assert sorted(s["rfilename"] for s in info["siblings"]) == sorted(files_of(src))


def test_refs_paths_info_private_and_dataset_repos(fakehub, tmp_path):
    src = tiny_repo(tmp_path)
    sha = fakehub.add_repo("o/n", src, tags=["v1"])
    status, _hdrs, body = raw(fakehub, "GET", "/api/models/o/n/refs")
    refs = json.loads(body)
    assert refs["branches"] == [{"name": "main", "ref": "refs/heads/main", "targetCommit": sha}]
    assert refs["tags"] == [{"name": "v1", "ref": "refs/tags/v1", "targetCommit": sha}] and refs["converts"] == []
    status, _hdrs, body = raw(fakehub, "POST", "/api/models/o/n/paths-info/v1",
                              {"Content-Type": "application/x-www-form-urlencoded"},
                              "paths=config.json&paths=tokenizer&paths=absent&expand=false")
    assert [(e["type"], e["path"]) for e in json.loads(body)] == [("file", "config.json"), ("directory", "tokenizer")]
    status, _hdrs, body = raw(fakehub, "GET", "/api/models/o/n?blobs=true")
    sib = {s["rfilename"]: s for s in json.loads(body)["siblings"]}
    assert sib["model-00001-of-00002.safetensors"]["lfs"]["size"] == 200_000

    fakehub.add_repo("o/secret", src, private=True, token=TOKEN)
    assert raw(fakehub, "GET", "/api/models/o/secret/revision/main")[0] == 401
    assert raw(fakehub, "GET", "/api/models/o/secret", {"Authorization": "Bearer other"})[0] == 404
    status, h, _body = raw(fakehub, "HEAD", "/o/secret/resolve/main/config.json", {"Authorization": "Bearer " + TOKEN})
    assert status == 200 and h["x-repo-commit"] == fakehub.resolve("o/secret")

    dsha = fakehub.add_repo("o/data", src, repo_type="dataset")
    assert json.loads(raw(fakehub, "GET", "/api/datasets/o/data/revision/main")[2])["sha"] == dsha
    assert raw(fakehub, "GET", "/datasets/o/data/resolve/main/config.json")[2] == (src / "config.json").read_bytes()
    assert raw(fakehub, "GET", "/api/models/o/data")[0] == 401  # not a model


def test_control_plane_faults_and_log_over_http(fakehub, tmp_path):
    fakehub.add_repo("o/n", tiny_repo(tmp_path))
    rules = [{"kind": "status", "path": "config.json", "status": 503, "retry_after": 7, "times": 2},
             {"kind": "wrong_size", "path": "*.safetensors", "size": 5, "times": None}]
    status, _hdrs, body = raw(fakehub, "POST", "/_fakehub/faults", {"Content-Type": "application/json"},
                              json.dumps(rules))
    assert status == 200 and len(json.loads(body)["added"]) == 2
    for _attempt in range(2):
        status, h = raw(fakehub, "GET", "/o/n/resolve/main/config.json", {"Authorization": "Bearer " + TOKEN})[:2]
        assert (status, h["retry-after"]) == (503, "7")
    status = raw(fakehub, "GET", "/o/n/resolve/main/config.json")[0]
    assert status == 200  # the rule expired after 2 uses
    status, _hdrs, body = raw(fakehub, "GET", "/api/models/o/n/tree/main?recursive=true")
    sizes = {e["path"]: e["size"] for e in json.loads(body)}
    assert sizes["model-00001-of-00002.safetensors"] == 5 and sizes["config.json"] != 5
    status, _hdrs, body = raw(fakehub, "GET", "/_fakehub/faults")
    (left,) = json.loads(body)["rules"]
    assert left["kind"] == "wrong_size" and left["hits"] == 1 and left["times"] is None
    status, _hdrs, body = raw(fakehub, "POST", "/_fakehub/faults", {}, json.dumps({"kind": "explode"}))
    assert status == 400 and b"kind must be" in body
    status = raw(fakehub, "DELETE", "/_fakehub/faults")[0]
    assert status == 200 and fakehub.faults == []

    wait_done(fakehub)
    status, _hdrs, body = raw(fakehub, "GET", "/_fakehub/log")
    log = json.loads(body)
    assert [(e["method"], e["status"]) for e in log] == [("GET", 503), ("GET", 503), ("GET", 200), ("GET", 200)]
    assert log[0]["authorization"] is True and log[2]["authorization"] is False
    assert log[0]["fault"] == "status" and log[3]["fault"] == "wrong_size"
    assert not any(e["path"].startswith("/_fakehub") for e in log)  # control routes are not logged
    assert TOKEN not in body.decode()
    assert fakehub.bytes_served("/o/n/resolve/") == sum(e["bytes_sent"] for e in log[:3])  # error bodies too
    assert log[2]["bytes_sent"] == (tmp_path / "src/config.json").stat().st_size
    raw(fakehub, "DELETE", "/_fakehub/log")
    assert fakehub.requests == []
    with pytest.raises(FaultError):
        fakehub.add_fault("slow", bytes_per_second=0)


def test_body_faults_raw(fakehub, tmp_path):
    data = os.urandom(100_000)
    fakehub.add_repo("o/n", make_dir(tmp_path / "d", {"w.safetensors": data}))
    path = "/o/n/resolve/main/w.safetensors"

    fakehub.add_fault("truncate", path="w.safetensors", after_bytes=1000, short_content_length=True)
    status, h, body = raw(fakehub, "GET", path)
    assert (status, h["content-length"], body) == (200, "1000", data[:1000])

    fakehub.add_fault("truncate", path="*.safetensors", after_fraction=0.5)
    with pytest.raises(http.client.IncompleteRead) as exc:
        raw(fakehub, "GET", path)
    assert exc.value.partial == data[:50_000]

    fakehub.add_fault("drop", path="*.safetensors", after_bytes=2000)
    conn = http.client.HTTPConnection(fakehub.host, fakehub.port, timeout=5)
    conn.request("GET", path)
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Length") == str(len(data))
    with pytest.raises((ConnectionResetError, http.client.IncompleteRead)):
        resp.read()
    conn.close()

    fakehub.add_fault("slow", path="*.safetensors", bytes_per_second=250_000)
    t = time.monotonic()
    assert raw(fakehub, "GET", path)[2] == data
    assert time.monotonic() - t >= 0.3

    fakehub.rate_limit_bytes_per_second = 400_000
    t = time.monotonic()
    assert raw(fakehub, "GET", path, {"Range": "bytes=0-79999"})[2] == data[:80_000]
    assert time.monotonic() - t >= 0.15
    fakehub.rate_limit_bytes_per_second = None

    wait_done(fakehub)
    log = fakehub.requests
    assert [e["fault"] for e in log] == ["truncate", "truncate", "drop", "slow", None]
    assert [e["bytes_sent"] for e in log] == [1000, 50_000, 2000, 100_000, 80_000]
    assert log[-1]["range"] == "bytes=0-79999" and log[-1]["status"] == 206
    assert fakehub.bytes_served("w.safetensors") == 233_000


def test_stop_ends_stalled_responses_quietly(tmp_path, capfd):
    hub = FakeHub().start()
    hub.add_repo("o/n", make_dir(tmp_path / "d", {"w.safetensors": os.urandom(50_000)}))
    hub.add_fault("stall", path="*.safetensors", after_bytes=10, seconds=600)
    sock = socket.create_connection((hub.host, hub.port), timeout=5)
    sock.sendall(b"GET /o/n/resolve/main/w.safetensors HTTP/1.1\r\nHost: x\r\n\r\n")
    got = b""
    while b"\r\n\r\n" not in got or len(got.split(b"\r\n\r\n", 1)[1]) < 10:
        got += sock.recv(65536)
    sock.settimeout(0.5)
    with pytest.raises(socket.timeout):
        sock.recv(65536)  # stalled: nothing more, connection open
    # a client that goes away mid-body does not disturb the server
    hub.add_fault("slow", path="*.safetensors", bytes_per_second=20_000)
    gone = socket.create_connection((hub.host, hub.port), timeout=5)
    gone.sendall(b"GET /o/n/resolve/main/w.safetensors HTTP/1.1\r\nHost: x\r\n\r\n")
    assert gone.recv(100)
    gone.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    gone.close()
    # Generous bounds: a loaded CI machine is slow; what matters is that nothing waits for the 600 s stall.
    deadline = time.monotonic() + 20
    while not hub.requests[1]["done"] and time.monotonic() < deadline:
        time.sleep(0.05)
    idle = socket.create_connection((hub.host, hub.port), timeout=5)  # a keep-alive connection, idle
    assert raw(hub, "GET", "/api/models/o/n/revision/main")[0] == 200
    t = time.monotonic()
    hub.stop()
    assert time.monotonic() - t < 20
    sock.close()
    idle.close()
    assert "Traceback" not in capfd.readouterr().err
    stalled, dropped = hub.requests[:2]
    # Ended by the stop, or (when the machine is slow) seen as a client gone first: either way, ended and logged.
    assert stalled["done"] and ("stopping" in stalled["error"] or "went away" in stalled["error"])
    assert dropped["done"] and "went away" in dropped["error"] and dropped["bytes_sent"] < 50_000


def test_cli_serves_a_root_directory(tmp_path):
    tiny_repo(tmp_path / "root" / "acme", "model")
    url_file = tmp_path / "url"
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests/hub/fakehub.py"), "--root", str(tmp_path / "root"),
                             "--port", "0", "--url-file", str(url_file)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url_file.read_text().strip() == url
        host, port = url[len("http://"):].split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=5)
        conn.request("GET", "/api/models/acme/model/revision/main")
        info = json.loads(conn.getresponse().read())
        assert info["id"] == "acme/model" and len(info["sha"]) == 40
        conn.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


# ------------------------------------------------------------------------------------------------
# the real huggingface_hub 2.4.0 client


def test_snapshot_download_branch_then_sha_rerun_makes_no_request(fakehub, hf_python, tmp_path):
    src = tiny_repo(tmp_path)
    sha = fakehub.add_repo("acme/kimi", src)
    out = tmp_path / "out"
    (r,), _err = client(hf_python, [{"op": "snapshot", "repo": "acme/kimi", "revision": "main", "local_dir": str(out)}])
    assert "error" not in r, r
    assert_same_tree(src, out)
    log = fakehub.requests
    assert log[0]["path"] == "/api/models/acme/kimi/revision/main"
    assert log[1]["path"] == "/api/models/acme/kimi/tree/%s" % sha  # the branch was resolved to the sha
    resolves = [e for e in log if "/resolve/" in e["path"]]
    assert all("/resolve/%s/" % sha in e["path"] for e in resolves)
    assert sorted(e["method"] for e in resolves) == ["GET"] * 5 + ["HEAD"] * 5
    assert all(e["status"] in (200, 206) for e in log) and not any(e["authorization"] for e in log)
    meta = (out / ".cache/huggingface/download/config.json.metadata").read_text().splitlines()
    assert meta[0] == sha and meta[1] == git_blob_sha1((src / "config.json").read_bytes())
    assert fakehub.bytes_served("/acme/kimi/resolve/") == sum(p.stat().st_size for p in files_of(src).values())

    fakehub.clear_log()
    (r,), _err = client(hf_python, [{"op": "snapshot", "repo": "acme/kimi", "revision": sha, "local_dir": str(out)}])
    assert "error" not in r, r
    assert fakehub.requests == []  # tree listing cached, every file's metadata names the commit


def test_dry_run_reports_will_download(fakehub, hf_python, tmp_path):
    src = tiny_repo(tmp_path)
    sha = fakehub.add_repo("acme/kimi", src)
    out = tmp_path / "out"
    steps = [{"op": "snapshot", "repo": "acme/kimi", "local_dir": str(out), "dry_run": True},
             {"op": "snapshot", "repo": "acme/kimi", "local_dir": str(out)},
             {"op": "snapshot", "repo": "acme/kimi", "local_dir": str(out), "dry_run": True, "revision": sha}]
    (before, _download, after), _err = client(hf_python, steps)
    sizes = {rel: p.stat().st_size for rel, p in files_of(src).items()}
    assert {i["filename"]: (i["will_download"], i["file_size"], i["commit_hash"]) for i in before["result"]} == {
        rel: (True, size, sha) for rel, size in sizes.items()}
    assert {i["filename"]: i["will_download"] for i in after["result"]} == {rel: False for rel in sizes}
    assert all(i["is_cached"] for i in after["result"])


def test_gated_and_missing_repos_raise_the_hub_errors(fakehub, hf_python, tmp_path):
    src = tiny_repo(tmp_path)
    fakehub.add_repo("acme/gated", src, gated=True, token=TOKEN)
    fakehub.add_repo("acme/kimi", src)
    steps = [
        {"op": "snapshot", "repo": "acme/gated", "local_dir": str(tmp_path / "g1")},
        {"op": "snapshot", "repo": "acme/gated", "local_dir": str(tmp_path / "g2"), "token": "hf_not_granted"},
        {"op": "snapshot", "repo": "acme/gated", "local_dir": str(tmp_path / "g3"), "token": TOKEN},
        {"op": "info", "repo": "acme/gated"},
        {"op": "snapshot", "repo": "acme/nothere", "local_dir": str(tmp_path / "n1")},
        {"op": "snapshot", "repo": "acme/kimi", "revision": "nobranch", "local_dir": str(tmp_path / "n2")},
        {"op": "snapshot", "repo": "acme/kimi", "revision": "f" * 40, "local_dir": str(tmp_path / "n3")},
    ]
    (anon, wrong, granted, info, norepo, norev, nosha), _err = client(hf_python, steps)
    assert anon["error"] == "GatedRepoError" and "401" in anon["message"]
    assert wrong["error"] == "GatedRepoError" and "403" in wrong["message"]
    assert "error" not in granted, granted
    assert_same_tree(src, tmp_path / "g3")
    assert info["result"]["gated"] == "manual"
    assert norepo["error"] == "RepositoryNotFoundError"
    assert norev["error"] == "RevisionNotFoundError"
    # an unknown sha skips the revision call: the tree listing answers RevisionNotFound
    assert nosha["error"] == "RevisionNotFoundError"
    log = fakehub.requests
    assert any(e["authorization"] and e["status"] == 200 and "/acme/gated/resolve/" in e["path"] for e in log)
    assert TOKEN not in json.dumps(log)


def test_status_faults_429_retried_500_surfaced(fakehub, hf_python, tmp_path):
    src = tiny_repo(tmp_path)
    for name in ("r429", "r500", "rrev", "rhead", "rtree"):
        fakehub.add_repo("acme/" + name, src)
    S = "*.safetensors"
    fakehub.add_fault("status", path=S, repo="acme/r429", method="GET", status=429, retry_after=0)
    fakehub.add_fault("status", path=S, repo="acme/r500", method="GET", status=500)
    fakehub.add_fault("status", path="/api/models/*/revision/*", repo="acme/rrev", status=429, retry_after=0)
    fakehub.add_fault("status", path=S, repo="acme/rhead", method="HEAD", status=503, retry_after=0, times=2)
    fakehub.add_fault("status", path="/api/models/*/tree/*", repo="acme/rtree", status=502)
    steps = [{"op": "snapshot", "repo": "acme/" + n, "local_dir": str(tmp_path / n), "max_workers": 1}
             for n in ("r429", "r500", "rrev", "rhead", "rtree")]
    (r429, r500, rrev, rhead, rtree), stderr = client(hf_python, steps)
    # 429 on a file GET: http_get retries (408/429 only), sleeping Retry-After + 1 s
    assert "error" not in r429 and r429["elapsed"] >= 1.0
    assert_same_tree(src, tmp_path / "r429")
    assert "Rate limited. Waiting 1.0s before retry" in stderr
    # 500 on a file GET: not retried, the snapshot fails with HfHubHTTPError
    assert r500["error"] == "HfHubHTTPError" and "500" in r500["message"]
    # 429 on the revision call: no retry at all, LocalEntryNotFoundError (nothing on disk)
    assert rrev["error"] == "LocalEntryNotFoundError" and "429" in rrev["message"]
    # 5xx on HEAD: tried once without retry, then again with the backoff (1 s): succeeds
    assert "error" not in rhead and rhead["elapsed"] >= 1.0
    # 5xx on the tree listing: retried with backoff
    assert "error" not in rtree
    log = fakehub.requests
    assert sum(1 for e in log if e["repo"] == "acme/r429" and e["status"] == 429) == 1
    assert [e["status"] for e in log if e["repo"] == "acme/rrev"] == [429]
    assert [e["status"] for e in log if e["repo"] == "acme/rhead" and e["method"] == "HEAD"
            and e["path"].endswith(".safetensors")].count(503) == 2
    assert fakehub.faults == []


def test_drop_mid_body_fin_is_resumed_rst_is_fatal(fakehub, hf_python, tmp_path):
    small = tiny_repo(tmp_path)
    big = make_dir(tmp_path / "bigsrc", {"model.safetensors": os.urandom(26 * MiB)})
    fakehub.add_repo("acme/fin", small)
    fakehub.add_repo("acme/rst", small)
    fakehub.add_repo("acme/big", big)
    fakehub.add_fault("drop", path="model-00002-of-00002.safetensors", repo="acme/fin", after_bytes=100_000,
                      mode="close")
    fakehub.add_fault("drop", path="model-00002-of-00002.safetensors", repo="acme/rst", after_bytes=100_000)
    fakehub.add_fault("drop", path="model.safetensors", repo="acme/big", after_bytes=15 * MiB, mode="close")
    steps = [{"op": "snapshot", "repo": "acme/" + n, "local_dir": str(tmp_path / n)} for n in ("fin", "rst", "big")]
    (fin, rst, bigr), stderr = client(hf_python, steps)
    log = fakehub.requests

    def gets(repo, name):
        return [e for e in log if e["repo"] == repo and e["method"] == "GET" and e["path"].endswith(name)]

    # FIN before 10 MiB arrived: RemoteProtocolError, retried after 1 s from byte 0 (no Range)
    assert "error" not in fin and fin["elapsed"] >= 1.0
    assert_same_tree(small, tmp_path / "fin")
    assert [(e["bytes_sent"], e["range"]) for e in gets("acme/fin", "model-00002-of-00002.safetensors")] == [
        (100_000, None), (300_000, None)]
    assert "Trying to resume download" in stderr
    # RST: httpx2.ReadError is not among the retried errors: the snapshot fails
    assert rst["error"] == "ReadError"
    assert len(gets("acme/rst", "model-00002-of-00002.safetensors")) == 1
    assert not (tmp_path / "rst" / "model-00002-of-00002.safetensors").exists()
    # FIN after 15 MiB: resumed with Range from the last whole 10 MiB chunk written
    assert "error" not in bigr
    assert_same_tree(big, tmp_path / "big")
    assert [(e["status"], e["range"], e["bytes_sent"]) for e in gets("acme/big", "model.safetensors")] == [
        (200, None, 15 * MiB), (206, "bytes=%d-" % (10 * MiB), 16 * MiB)]


def test_stalls_block_the_client(fakehub, hf_python, tmp_path):
    src = tiny_repo(tmp_path)
    fakehub.add_repo("acme/body", src)
    fakehub.add_repo("acme/api", src)
    fakehub.add_fault("stall", path="model-00001-of-00002.safetensors", repo="acme/body", after_bytes=1000,
                      seconds=60)
    fakehub.add_fault("stall", path="/api/models/*/revision/*", repo="acme/api", before_headers=True, seconds=1.5)
    steps = [{"op": "snapshot", "repo": "acme/" + n, "local_dir": str(tmp_path / n)} for n in ("body", "api")]
    (body, api), stderr = client(hf_python, steps, env={"HF_HUB_DOWNLOAD_TIMEOUT": "1", "HF_HUB_ETAG_TIMEOUT": "1"})
    wait_done(fakehub)
    # a stalled body: read timeout after HF_HUB_DOWNLOAD_TIMEOUT, then a new GET (from 0: < 10 MiB got)
    assert "error" not in body and body["elapsed"] >= 1.0
    assert_same_tree(src, tmp_path / "body")
    stalled, again = [e for e in fakehub.requests if e["repo"] == "acme/body" and e["method"] == "GET"
                      and e["path"].endswith("model-00001-of-00002.safetensors")]
    assert stalled["fault"] == "stall" and stalled["bytes_sent"] == 1000 and "went away" in stalled["error"]
    assert again["bytes_sent"] == 200_000
    # the revision call has no timeout at all: the client waits the whole stall
    assert "error" not in api and api["elapsed"] >= 1.5


def test_list_repo_tree_sizes_and_lfs_sha256(tmp_path, hf_python, fakehub):
    src = tiny_repo(tmp_path)
    fakehub.tree_page_size = 2  # the client follows the Link pages
    sha = fakehub.add_repo("acme/kimi", src)
    (r,), _err = client(hf_python, [{"op": "tree", "repo": "acme/kimi", "revision": sha}])
    got = {e["path"]: e for e in r["result"] if not e["dir"]}
    assert sorted(got) == sorted(files_of(src))
    for rel, p in files_of(src).items():
        data = p.read_bytes()
        assert got[rel]["size"] == len(data)
        if rel.endswith(".safetensors") or len(data) >= MiB:
            assert got[rel]["lfs_sha256"] == hashlib.sha256(data).hexdigest() and got[rel]["lfs_size"] == len(data)
        else:
            assert got[rel]["lfs_sha256"] is None and got[rel]["blob_id"] == git_blob_sha1(data)
    assert len([e for e in fakehub.requests if "/tree/" in e["path"]]) == 4  # 7 entries, pages of 2


def test_lfs_redirect_to_another_origin_drops_authorization(tmp_path):
    src = tiny_repo(tmp_path)
    with FakeHub(lfs_redirect=True) as hub:
        hub.add_repo("acme/gated", src, gated=True, token=TOKEN)
        from tests.hub.pytest_plugin import run_hf_python

        home = tmp_path / "home"
        proc = run_hf_python(hub, home, CLIENT, json.dumps(
            [{"op": "snapshot", "repo": "acme/gated", "local_dir": str(tmp_path / "out"), "token": TOKEN}]))
        (r,) = json.loads(proc.stdout.strip().splitlines()[-1])
        assert "error" not in r, r
        wait_done(hub)
        assert_same_tree(src, tmp_path / "out")
        log = hub.requests
        heads = [e for e in log if e["method"] == "HEAD" and e["path"].endswith(".safetensors")]
        assert {e["status"] for e in heads} == {302}
        cdn = [e for e in log if e["path"].startswith("/_fakehub_cdn/")]
        assert len(cdn) == 3 and not any(e["authorization"] for e in cdn)  # no token off the Hub origin
        assert all(e["authorization"] for e in log if e not in cdn)
