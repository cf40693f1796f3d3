"""The site mirror as sites run it: olah 0.5.4 (PyPI), offline, over a local git repository, with
the real huggingface_hub 2.4.0 client (in a subprocess: it reads HF_ENDPOINT at import).

olah runs on loopback from its own venv (.cache/olah-venv, built by tests/hub/olah/setup.sh from
tests/hub/olah/requirements.txt; the fixture builds it when missing) over the synthetic
Kimi-K2.5-NVFP4-shaped repository (tests/hub/synthetic_repo.py). Checked here: every file
arrives byte-identical, ``main`` resolves to the commit sha, a rerun with the sha makes zero
requests (olah's request log), and what olah answers (tree listing, HEAD headers, Range, errors)
so that the collection does not count on more than that.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import missing_prerequisite

ROOT = Path(__file__).resolve().parents[2]
HUB = ROOT / "tests" / "hub"
REPO_ID = "nvidia/Kimi-K2.5-NVFP4"


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


olah = _load("fleet_vllm_olah_run", HUB / "olah" / "run.py")
synthetic = _load("fleet_vllm_synthetic_repo", HUB / "synthetic_repo.py")

SNAPSHOT = """
import json, sys
from huggingface_hub import snapshot_download
path = snapshot_download(sys.argv[1], revision=sys.argv[2], local_dir=sys.argv[3])
print(json.dumps({"path": path}))
"""


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    """olah on 127.0.0.1:<free port> over the synthetic repo; yields a dict with url, process,
    sha, files (the repo's files on disk) and the mirrors dir."""
    if shutil.which("git") is None:
        missing_prerequisite("git is not installed (olah's GitPython needs it)")
    try:
        olah.ensure_olah()
    except olah.OlahUnavailable as exc:
        missing_prerequisite("olah's venv cannot be built (tests/hub/olah/setup.sh): %s" % exc)
    base = tmp_path_factory.mktemp("olah")
    files = base / "files"
    synthetic.make_repo(files)
    sha = synthetic.make_git_repo(files, synthetic.mirror_git_dir(base / "mirrors"))
    url, proc = olah.start_olah(base / "mirrors", port=0, state_dir=base / "state")
    try:
        yield {"url": url, "process": proc, "sha": sha, "files": files, "base": base}
    finally:
        olah.stop_olah(proc)


def _client_env(url, hf_home, telemetry=False):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env.update({
        "HF_ENDPOINT": url,
        "HF_HOME": str(hf_home),
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    })
    if not telemetry:
        # Without it huggingface_hub 2.4.0 asks the endpoint for /api/agent-harnesses (to name
        # an AI agent in its user agent) whenever its daily cache file is missing; olah answers
        # 200 with an empty body, which is never cached, so every process asks again.
        env["HF_HUB_DISABLE_TELEMETRY"] = "1"
    return env


def _snapshot(mirror, revision, local_dir, telemetry=False):
    result = subprocess.run(
        [sys.executable, "-c", SNAPSHOT, REPO_ID, revision, str(local_dir)],
        env=_client_env(mirror["url"], mirror["base"] / "hf-home", telemetry),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=180, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def _log_mark(mirror):
    return len(olah.read_request_log(mirror["process"].request_log))


def _log_since(mirror, mark):
    return olah.read_request_log(mirror["process"].request_log, start=mark)


def _request(url, method="GET", headers=None):
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def _repo_files(files):
    return sorted(p.name for p in files.iterdir())


def test_snapshot_download_main_then_sha_rerun_makes_no_request(mirror, tmp_path):
    local = tmp_path / "snapshot"
    mark = _log_mark(mirror)
    assert _snapshot(mirror, "main", local)["path"] == str(local)

    # Every file, byte for byte, and nothing else.
    got = sorted(p.name for p in local.iterdir() if p.name != ".cache")
    assert got == _repo_files(mirror["files"])
    for name in got:
        assert (local / name).read_bytes() == (mirror["files"] / name).read_bytes(), name
    # main resolved to the commit: the client's per-file metadata names the sha.
    for name in got:
        meta = (local / ".cache" / "huggingface" / "download" / (name + ".metadata")).read_text().splitlines()
        assert meta[0] == mirror["sha"], name

    log = _log_since(mirror, mark)
    assert log[0] == ("GET", "/api/models/%s/revision/main" % REPO_ID, 200)
    # The listing (by sha) goes through a redirect to the trailing-slash route.
    assert ("GET", "/api/models/%s/tree/%s?recursive=true&expand=false" % (REPO_ID, mirror["sha"]), 307) in log
    assert ("GET", "/api/models/%s/tree/%s/?recursive=true&expand=false" % (REPO_ID, mirror["sha"]), 200) in log
    for name in got:
        target = "/%s/resolve/%s/%s" % (REPO_ID, mirror["sha"], name)
        assert log.count(("HEAD", target, 200)) == 1, name
        assert log.count(("GET", target, 200)) == 1, name
    assert all(entry[2] < 400 for entry in log), log

    # A rerun pinned to the sha: zero requests.
    mark = _log_mark(mirror)
    _snapshot(mirror, mirror["sha"], local)
    assert _log_since(mirror, mark) == []
    for name in got:
        assert (local / name).read_bytes() == (mirror["files"] / name).read_bytes(), name


def test_rerun_with_telemetry_asks_for_agent_harnesses_only(mirror, tmp_path):
    """huggingface_hub 2.4.0 with telemetry on (the default): a complete sha-pinned rerun fetches
    no file but asks the endpoint for /api/agent-harnesses (once per download thread). The
    collection's downloads set HF_HUB_DISABLE_TELEMETRY=1 to keep the mirror's log clean."""
    local = tmp_path / "snapshot"
    _snapshot(mirror, mirror["sha"], local)
    mark = _log_mark(mirror)
    _snapshot(mirror, mirror["sha"], local, telemetry=True)
    log = _log_since(mirror, mark)
    assert log, "expected /api/agent-harnesses requests"
    assert {entry[:2] for entry in log} == {("GET", "/api/agent-harnesses")}


def test_what_olah_answers(mirror):
    url, sha = mirror["url"], mirror["sha"]
    files = mirror["files"]

    status, _headers, body = _request("%s/api/models/%s/revision/main" % (url, REPO_ID))
    info = json.loads(body)
    assert status == 200 and info["sha"] == sha and info["id"] == REPO_ID
    assert sorted(s["rfilename"] for s in info["siblings"]) == _repo_files(files)

    # Tree listing: type/oid/size/path; plain blobs have no "lfs"; oid = git blob sha1.
    status, _headers, body = _request("%s/api/models/%s/tree/main/?recursive=true" % (url, REPO_ID))
    tree = json.loads(body)
    assert status == 200
    assert sorted(e["path"] for e in tree) == _repo_files(files)
    for entry in tree:
        assert set(entry) == {"type", "oid", "size", "path"}
        assert entry["type"] == "file"
        assert entry["size"] == (files / entry["path"]).stat().st_size
        blob = subprocess.run(["git", "hash-object", str(files / entry["path"])], check=True,
                              stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
        assert entry["oid"] == blob

    # HEAD: X-Repo-Commit = the sha, ETag = the git blob sha1 (unquoted), Content-Length.
    shard = "model-00001-of-00004.safetensors"
    status, headers, _body = _request("%s/%s/resolve/main/%s" % (url, REPO_ID, shard), method="HEAD")
    headers = {k.lower(): v for k, v in headers.items()}
    entry = next(e for e in tree if e["path"] == shard)
    assert status == 200
    assert headers["x-repo-commit"] == sha
    assert headers["etag"] == entry["oid"]
    assert int(headers["content-length"]) == (files / shard).stat().st_size

    # GET ignores Range: 200 and the whole file (chunked, no ETag/X-Repo-Commit on the GET).
    status, headers, body = _request("%s/%s/resolve/%s/%s" % (url, REPO_ID, sha, shard), headers={"Range": "bytes=0-9"})
    assert status == 200 and body == (files / shard).read_bytes()

    # Errors are not the Hub's: a missing file is 401 RepoNotFound on HEAD and 500 on GET; an
    # unknown revision is 401 RepoNotFound; repo info without a revision is 401 too (olah looks
    # the latest commit up in its proxy cache, not in the local mirror).
    status, headers, _body = _request("%s/%s/resolve/main/missing.json" % (url, REPO_ID), method="HEAD")
    assert (status, headers.get("x-error-code")) == (401, "RepoNotFound")
    assert _request("%s/%s/resolve/main/missing.json" % (url, REPO_ID))[0] == 500
    status, headers, _body = _request("%s/api/models/%s/revision/nope" % (url, REPO_ID))
    assert (status, headers.get("x-error-code")) == (401, "RepoNotFound")
    assert _request("%s/api/models/%s" % (url, REPO_ID))[0] == 401


def test_request_log_format(mirror):
    mark = _log_mark(mirror)
    _request("%s/%s/resolve/main/config.json" % (mirror["url"], REPO_ID))
    lines = mirror["process"].request_log.read_text().splitlines()[mark:]
    assert len(lines) == 1
    method, target, status, size, client = lines[0].split()
    assert (method, target, status, client) == ("GET", "/%s/resolve/main/config.json" % REPO_ID, "200", "127.0.0.1")
    assert int(size) == (mirror["files"] / "config.json").stat().st_size
