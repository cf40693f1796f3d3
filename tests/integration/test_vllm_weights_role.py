"""vllm_weights through ansible-playbook on local "hosts" (each with its own model root): one host
per site downloads from a Hub-compatible server (tests/hub/fakehub.py, real huggingface_hub in a
venv the role installs), the others copy from it with a real rsync daemon, a node added with
--limit copies from a peer outside the play, re-runs change nothing, and the served directory's
patched copies survive everything. The Hub's request log proves each byte was served once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, free_port, run_playbook
from tests.helpers import rsyncd
from tests.hub.synthetic_repo import make_repo

pytestmark = [pytest.mark.integration]

REPO = "nvidia/Kimi-K2.5-NVFP4"
PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "vllm_weights.yml"
HOSTS = ("node1", "node2", "node3")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, hub_wheels):
    """Three hosts with their roots and rsync daemons, a hub with the synthetic Kimi-shaped repo."""
    from tests.hub.fakehub import FakeHub

    base = tmp_path_factory.mktemp("fleet")
    # One venv with huggingface_hub for the three local "hosts" (they share this machine), made before
    # the plays so that the role's pip task checks it instead of three hosts installing into it at once.
    hub_venv = base / "hub-venv"
    subprocess.run([sys.executable, "-m", "venv", str(hub_venv)], check=True)
    subprocess.run([str(hub_venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", "--no-index",
                    "--find-links", str(hub_wheels), "huggingface_hub==2.4.0"], check=True, timeout=300)
    repo = base / "repo"
    make_repo(repo, shards=4, shard_bytes=1_000_000)
    hub = FakeHub().start()
    commit = hub.add_repo(REPO, str(repo))
    daemons = []
    hostvars = {host: local_host(base, host, hub_venv, daemons) for host in HOSTS}
    inventory = base / "hosts.yml"
    group_vars = dict(
        fleet_vllm_hub_endpoint=hub.url, vllm_weights_retry_delay=1, vllm_weights_progress_every=5,
        # The synthetic checkpoint has no code, and the runs follow a branch of a loopback hub: remote code's checks
        # are tests/integration/test_remote_code_trust.py's and tests/unit/plugins/filter/test_remote_code_problems.py's.
        fleet_vllm_trust_remote_code=False,
        vllm_weights_pip_extra_args=["--no-index", "--find-links", str(hub_wheels)],
    )
    inventory.write_text(yaml.safe_dump({"all": {"children": {"vllm_servers": {"hosts": hostvars}}, "vars": group_vars}}))
    yield dict(base=base, repo=repo, hub=hub, commit=commit, inventory=inventory, hostvars=hostvars, group_vars=group_vars,
               hub_venv=hub_venv, daemons=daemons)
    hub.stop()
    for proc in daemons:
        rsyncd.stop(proc)


def local_host(base, host, hub_venv, daemons):
    """A local "host": its own model root under BASE and its own rsync daemon (appended to DAEMONS); its variables."""
    root = base / host
    (root / "pristine").mkdir(parents=True)
    port = free_port()
    conf = base / ("%s-rsyncd.conf" % host)
    # A test daemon: root may read the test's private temporary directories (the role's own daemon runs as nobody).
    conf.write_text("uid = root\ngid = root\nuse chroot = no\nread only = yes\npid file = %s/%s-rsyncd.pid\n"
                    "[fleet-vllm-models]\npath = %s\nhosts allow = 127.0.0.1\nexclude = .cache/\n"
                    % (base, host, root / "pristine"))
    daemons.append(rsyncd.start(conf, port)[0])
    return dict(
        ansible_connection="local", ansible_python_interpreter=sys.executable,
        fleet_vllm_models_root=str(root), vllm_weights_peer_port=port, vllm_weights_peer_address="127.0.0.1",
        vllm_weights_peer_serve=False, vllm_weights_state_dir=str(root / "state"),
        vllm_weights_hub_venv=str(hub_venv),
        vllm_weights_hub_python=sys.executable,
    )


def play(fleet, *args, **extra):
    run = run_playbook(PLAYBOOK, "-i", fleet["inventory"], *args, extra_vars=extra or None, timeout=600)
    return run


def shard_gets(hub):
    return [r for r in hub.requests if r["method"] == "GET" and "/resolve/" in r["path"]]


def pristine(fleet, host):
    return fleet["base"] / host / "pristine" / REPO.replace("/", "--") / fleet["commit"]


def served(fleet, host):
    """The served directory of the snapshot's commit (variants/<commit12>: no vLLM venv is staged
    in these plays, so the variant is the commit's alone)."""
    variants = sorted((fleet["base"] / host / "served" / REPO.replace("/", "--") / "variants").iterdir())
    assert len(variants) == 1, variants
    return variants[0]


def messages(run, host, play_index=0):
    return [r.get("msg") for name, r in run.task_list(host, play_index) if isinstance(r.get("msg"), str)]


def assert_complete_copy(fleet, host):
    repo, snap = fleet["repo"], pristine(fleet, host)
    for path in repo.iterdir():
        assert (snap / path.name).read_bytes() == path.read_bytes(), (host, path.name)
    manifest = json.loads((snap / ".fleet-vllm-snapshot.json").read_text())
    assert manifest["commit"] == fleet["commit"]


def test_peer_fleet_fetches_once_and_onboards_from_a_peer(fleet):
    hub = fleet["hub"]
    size = sum(p.stat().st_size for p in fleet["repo"].iterdir())

    first = play(fleet, "--limit", "node1,node2")
    assert first.rc == 0, first.stdout[-4000:]
    for host in ("node1", "node2"):
        assert_complete_copy(fleet, host)
    # The hub served each byte once for the two hosts: node1 downloaded, node2 copied from node1.
    assert sum(r["bytes_sent"] for r in shard_gets(hub)) == size
    assert any("fetches it for the site" in m for m in messages(first, "node1"))
    assert any("copy from node1" in m for m in messages(first, "node2"))
    assert any(" / " in m and "100%" in m for m in messages(first, "node1")), "no progress line"
    # The served directory: links to the pristine shards, real copies of the JSON files.
    out = served(fleet, "node1")
    shard = out / "model-00001-of-00004.safetensors"
    assert shard.is_symlink() and Path(os.readlink(shard)) == pristine(fleet, "node1") / shard.name
    assert (out / "config.json").is_file() and not (out / "config.json").is_symlink()
    assert not (out / ".fleet-vllm-snapshot.json").exists() and not (out / ".cache").exists()

    # A patch of the served copy (what the KV-cache step does) survives re-runs; the download is untouched.
    config = json.loads((out / "config.json").read_text())
    config["quantization_config"].pop("kv_cache_scheme", None)
    (out / "config.json").write_text(json.dumps(config))
    hub.clear_log()
    again = play(fleet, "--limit", "node1,node2")
    assert again.rc == 0
    for host in ("node1", "node2"):
        assert again.stats(host)["changed"] == 0, (host, again.stdout[-3000:])
    assert shard_gets(hub) == []
    assert "kv_cache_scheme" not in json.loads((out / "config.json").read_text())["quantization_config"]
    assert "kv_cache_scheme" in json.loads((pristine(fleet, "node1") / "config.json").read_text())["quantization_config"]

    # Onboarding node3 alone: it copies from a peer outside the play; the hub serves no file.
    hub.clear_log()
    before = {h: sorted(p.stat().st_mtime_ns for p in pristine(fleet, h).iterdir()) for h in ("node1", "node2")}
    onboard = play(fleet, "--limit", "node3")
    assert onboard.rc == 0, onboard.stdout[-4000:]
    assert_complete_copy(fleet, "node3")
    assert shard_gets(hub) == []
    assert any("copy from node1" in m or "copy from node2" in m for m in messages(onboard, "node3"))
    assert before == {h: sorted(p.stat().st_mtime_ns for p in pristine(fleet, h).iterdir()) for h in ("node1", "node2")}

    # Pinned to the commit, a complete fleet is checked without a single request to the hub.
    hub.clear_log()
    pinned = play(fleet, fleet_vllm_model_revision=fleet["commit"])
    assert pinned.rc == 0 and all(pinned.stats(h)["changed"] == 0 for h in HOSTS)
    assert hub.requests == []


def test_check_mode_plans_without_writing(fleet, tmp_path):
    hub = fleet["hub"]
    hub.clear_log()
    run = play(fleet, "--check", "--limit", "node1", fleet_vllm_models_root=str(tmp_path / "elsewhere"))
    assert run.rc == 0, run.stdout[-4000:]
    assert not (tmp_path / "elsewhere").exists()
    assert shard_gets(hub) == []
    would = [r for name, r in run.task_list("node1") if "would_download" in r]
    assert would and len(would[0]["would_download"]) == 10


def test_shared_storage_is_verified_and_never_written(fleet):
    assert play(fleet, "--limit", "node1").rc == 0
    shared = fleet["base"] / "node1" / "pristine" / REPO.replace("/", "--")
    before = sorted((p.name, p.stat().st_mtime_ns) for p in (shared / fleet["commit"]).iterdir())
    switch = play(fleet, "--limit", "node2", vllm_weights_source="shared", fleet_vllm_pristine_dir=str(shared),
                  fleet_vllm_model_revision=fleet["commit"])
    assert switch.rc == 0, switch.stdout[-3000:]
    shard = served(fleet, "node2") / "model-00001-of-00004.safetensors"
    assert Path(os.readlink(shard)) == shared / fleet["commit"] / shard.name
    run = play(fleet, "--limit", "node2", vllm_weights_source="shared", fleet_vllm_pristine_dir=str(shared),
               fleet_vllm_model_revision=fleet["commit"])
    assert run.rc == 0 and run.stats("node2")["changed"] == 0, [
        (name, r.get("msg")) for name, r in run.task_list("node2") + run.task_list("node2", 1) if r.get("changed") or r.get("failed")]
    assert before == sorted((p.name, p.stat().st_mtime_ns) for p in (shared / fleet["commit"]).iterdir())


def test_unknown_revision_says_what_to_set(fleet):
    # (A gated repository without a token names fleet_vllm_hf_token: tests/unit/plugins/modules/test_hf_snapshot.py.)
    bad = play(fleet, "--limit", "node1", fleet_vllm_model_revision="no-such-branch")
    assert bad.rc != 0
    assert any("fleet_vllm_model_revision" in m for m in messages(bad, "node1")), bad.stdout[-3000:]


def tree(path):
    """Every entry under path with its mode, size and mtime (what check mode must leave as it was)."""
    entries = []
    for base, dirs, names in os.walk(path):
        for name in dirs + names:
            full = os.path.join(base, name)
            st = os.lstat(full)
            entries.append((os.path.relpath(full, path), st.st_mode, st.st_size, st.st_mtime_ns))
    return sorted(entries)


SHARD = "model-00002-of-00004.safetensors"


def test_check_mode_on_a_partial_snapshot_changes_nothing(fleet):
    """Issue 14, point 13: a partial snapshot as a copy from a peer leaves it (no .cache/, a shard missing)."""
    import shutil
    assert play(fleet, "--limit", "node1").rc == 0
    snap = pristine(fleet, "node1")
    data = (snap / SHARD).read_bytes()
    shutil.rmtree(snap / ".cache", ignore_errors=True)
    (snap / SHARD).unlink()
    try:
        before = tree(fleet["base"] / "node1")
        fleet["hub"].clear_log()
        run = play(fleet, "--check", "--limit", "node1")
        assert run.rc == 0, run.stdout[-4000:]
        assert tree(fleet["base"] / "node1") == before
        assert shard_gets(fleet["hub"]) == [] and not [r for r in fleet["hub"].requests if r["method"] == "HEAD"]
        would = [r for name, r in run.task_list("node1") if "would_download" in r]
        assert [item["path"] for item in would[0]["would_download"]] == [SHARD]
    finally:
        (snap / SHARD).write_bytes(data)


def test_a_peer_with_a_corrupted_shard_is_refused(fleet):
    """Issue 14, point 1: a copy checked sizes only; now every file against the hub's listing (from the controller)."""
    assert play(fleet, "--limit", "node1,node2").rc == 0
    good = (fleet["repo"] / SHARD).read_bytes()
    bad = bytes(b ^ 0xFF for b in good[:64]) + good[64:]
    node3 = pristine(fleet, "node3")
    import shutil
    shutil.rmtree(node3, ignore_errors=True)
    for path in (fleet["base"] / "node3" / "state").glob("verified-*"):
        path.unlink()
    stats = {}
    for host in ("node1", "node2"):
        target = pristine(fleet, host) / SHARD
        stats[host] = target.stat()
        target.write_bytes(bad)
        os.utime(target, ns=(stats[host].st_atime_ns, stats[host].st_mtime_ns))
    try:
        fleet["hub"].clear_log()
        run = play(fleet, "--limit", "node3")
        assert run.rc != 0
        text = " ".join(messages(run, "node3"))
        assert SHARD in text and "differs from the hub's listing" in text and "the peer rsync://127.0.0.1" in text, text
        assert "sha256:" + __import__("hashlib").sha256(good).hexdigest() in text
        assert not (node3 / SHARD).exists() and not (node3 / ".fleet-vllm-snapshot.json").exists()
        assert shard_gets(fleet["hub"]) == [] and [r for r in fleet["hub"].requests if "/tree/" in r["path"]]
    finally:
        for host in ("node1", "node2"):
            target = pristine(fleet, host) / SHARD
            target.write_bytes(good)
            os.utime(target, ns=(stats[host].st_atime_ns, stats[host].st_mtime_ns))


def test_a_token_never_goes_to_a_plain_http_endpoint_unless_allowed(fleet):
    """Issue 14 point 10: the test hub is http://; with a token and without fleet_vllm_hf_token_over_http the role
    stops before it asks the hub anything, naming both variables and the one that allows it."""
    asked = len(fleet["hub"].requests)
    bad = play(fleet, "--limit", "node1", fleet_vllm_hf_token="hf_s3cret_never_sent")
    assert bad.rc != 0
    found = [m for m in messages(bad, "node1") if "fleet_vllm_hf_token" in m]
    assert found and all(word in found[0] for word in ("fleet_vllm_hub_endpoint", "fleet_vllm_hf_token_over_http")), found
    assert len(fleet["hub"].requests) == asked
    assert "hf_s3cret_never_sent" not in bad.stdout + bad.stderr


def test_remote_code_is_checked_against_the_pins_before_any_host_downloads_and_then_held_to_them(fleet, tmp_path):
    """Issue 24 point 6, the role run alone (no preflight): with remote code trusted, the listing the hosts verify
    against is checked against the inventory's pins before any host downloads - a code file served other than pinned
    stops the run naming the file, both digests and the variable; with the right pins the download completes and
    the hosts checked the code files against the pins (fleet.vllm.remote_code_listing)."""
    import hashlib
    import shutil

    code = {"configuration_kimi_k25.py": b"class KimiK25Config: pass\n",
            "modeling_kimi_k25.py": b"import os\nos.system('id > /tmp/fleet-vllm-owned')\n",
            "tokenization_kimi.py": b"class TikTokenTokenizer: pass\n"}
    repo = tmp_path / "code"
    shutil.copytree(fleet["repo"], repo)
    for name, body in code.items():
        (repo / name).write_bytes(body)
    hub = fleet["hub"]
    commit = hub.add_repo(REPO, str(repo), branch="with-code")
    pins = dict((name, hashlib.sha256(body).hexdigest()) for name, body in code.items())
    reviewed = dict(pins, **{"modeling_kimi_k25.py": hashlib.sha256(b"class KimiK25Model: pass\n").hexdigest()})
    settings = dict(fleet_vllm_trust_remote_code=True, fleet_vllm_model_revision=commit, fleet_vllm_hub_mirror_trusted=True)
    snapshot = fleet["base"] / "node1" / "pristine" / REPO.replace("/", "--") / commit

    hub.clear_log()
    bad = play(fleet, "--limit", "node1", fleet_vllm_remote_code_sha256=reviewed, **settings)
    assert bad.rc != 0
    failed = [(name, result) for name, result in bad.task_list("node1") if result.get("failed")]
    assert [name for name, dummy in failed] == ["Check the model's code against the inventory's pins"], failed
    assert ("modeling_kimi_k25.py: the listing of %s at %s from %s serves sha256 %s, fleet_vllm_remote_code_sha256 "
            "pins %s" % (REPO, commit, hub.url, pins["modeling_kimi_k25.py"], reviewed["modeling_kimi_k25.py"])
            in " ".join(failed[0][1]["msg"].split())), failed
    # Only the controller's fetches of the code and config files; no host downloaded anything.
    fetched = set(code) | {"config.json", "tokenizer_config.json", "generation_config.json", "hf_quant_config.json"}
    assert {r["file"] for r in shard_gets(hub)} <= fetched
    assert not [r for r in hub.requests if r["method"] == "HEAD"] and not snapshot.exists()

    good = play(fleet, "--limit", "node1", fleet_vllm_remote_code_sha256=pins, **settings)
    assert good.rc == 0, good.stdout[-4000:]
    for name, body in code.items():
        assert (snapshot / name).read_bytes() == body
    manifest = json.loads((snapshot / ".fleet-vllm-snapshot.json").read_text())
    listed = dict((item["path"], item) for item in manifest["files"])
    assert all(listed[name].get("sha256") == pins[name] for name in code), manifest["files"]


HELPER = "org/embed-small"


def test_a_run_of_two_models_resolves_lists_and_plans_each_model_apart(fleet):
    """Issue 26: instances of a helper model beside the fleet's, deployed in one run. Each model's revision is resolved
    and its commit listed once (by the first host of each), each host ends with its own model's snapshot, and the copies
    are planned among the hosts of one model: helper-2 copies from helper-1, never from a host of the other model; a
    host of the fleet's model outside the play is no source for the helper's. A rerun changes nothing."""
    hub = fleet["hub"]
    helper_repo = fleet["base"] / "helper-repo"
    make_repo(helper_repo, shards=2, shard_bytes=300_000)
    helper_commit = hub.add_repo(HELPER, str(helper_repo))
    hosts = dict(fleet["hostvars"])
    for name in ("helper-1", "helper-2"):
        hosts[name] = dict(local_host(fleet["base"], name, fleet["hub_venv"], fleet["daemons"]), fleet_vllm_model_repo=HELPER)
    inventory = fleet["base"] / "two-models.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"vllm_servers": {"hosts": hosts}}, "vars": fleet["group_vars"]}}))
    hub.clear_log()
    run = run_playbook(PLAYBOOK, "-i", inventory, "--limit", "node1,helper-1,helper-2", timeout=600)
    assert run.rc == 0, run.stdout[-4000:]
    helper_size = sum(p.stat().st_size for p in helper_repo.iterdir())
    helper_gets = [r for r in shard_gets(hub) if HELPER in r["path"]]
    assert sum(r["bytes_sent"] for r in helper_gets) == helper_size, helper_gets
    assert any("fetches it for the site" in m for m in messages(run, "helper-1"))
    assert any("copy from helper-1" in m for m in messages(run, "helper-2")), messages(run, "helper-2")
    for name in ("helper-1", "helper-2"):
        snap = fleet["base"] / name / "pristine" / HELPER.replace("/", "--") / helper_commit
        assert sorted(p.name for p in helper_repo.iterdir()) == sorted(p.name for p in snap.iterdir() if not p.name.startswith("."))
        assert not (fleet["base"] / name / "pristine" / REPO.replace("/", "--")).exists()
    assert_complete_copy(fleet, "node1")
    # One resolution and one listing per model by the controller, whatever the hosts per model: the helper's tree is
    # listed by the controller and by helper-1's download (huggingface_hub's snapshot_download), not by helper-2; the
    # fleet's model (node1 complete and verified) is resolved and not listed.
    asked = {repo: [r["path"] for r in hub.requests if r["path"].startswith("/api/models/%s/" % repo)] for repo in (REPO, HELPER)}
    assert [len([p for p in asked[HELPER] if part in p]) for part in ("/revision/", "/tree/")] == [1, 2], asked
    assert [len([p for p in asked[REPO] if part in p]) for part in ("/revision/", "/tree/")] == [1, 0], asked
    again = run_playbook(PLAYBOOK, "-i", inventory, "--limit", "node1,helper-1,helper-2", timeout=600)
    assert again.rc == 0 and all(again.stats(h)["changed"] == 0 for h in ("node1", "helper-1", "helper-2")), again.stdout[-3000:]
