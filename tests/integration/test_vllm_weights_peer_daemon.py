"""The peers' rsync daemon as the vllm_weights role configures it, under load: its rsyncd.conf and
handshake gate from the role (roles/vllm_weights/templates/rsyncd.conf.j2, files/rsync-handshake-gate),
socket-activated per connection as fleet-vllm-rsyncd@.service runs it - here by systemd's own
systemd-socket-activate (--accept --inetd), as this machine's PID 1 is not systemd (the Molecule
scenarios check the real units), with the gate and rsync started as an unprivileged user (nobody,
through setpriv) as the unit's DynamicUser= starts them - and real rsync clients started by
fleet.vllm.hf_snapshot.

- 24 copiers at once against one seed whose daemon takes 4 copies at a time: the others are told
  "max connections (4) reached", wait and try again, and all 24 end with the complete snapshot;
- a connection that sends no rsync greeting (or half of one) is dropped after the handshake timeout;
- an address outside the allowed networks is refused with rsync's own answer;
- only the exported snapshots (this run's repository and commit, and the one served) are there for a peer: another
  commit or repository is absent, through a path, a listing, "..", or a wildcard.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jinja2
import pytest
from ansible.errors import AnsibleFilterError

from conftest import COLLECTIONS, NOBODY, ROOT, free_port, require_readable, run_playbook, shared_tmpdir, stage_for_account, unreadable_reason

from ansible_collections.fleet.vllm.plugins.filter.config_value import config_value
from ansible_collections.fleet.vllm.plugins.module_utils import _snapshot as snap

pytestmark = [pytest.mark.integration]

ROLE = ROOT / "roles" / "vllm_weights"
GATE = ROLE / "files" / "rsync-handshake-gate"
REPO = "nvidia/Kimi-K2.5-NVFP4"
REPO_DIR = "nvidia--Kimi-K2.5-NVFP4"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
# The commit the host serves while it stages COMMIT, one it neither stages nor serves, another repository's.
SERVED = "89abcdef0123456789abcdef0123456789abcdef"
OTHER = "fedcba9876543210fedcba9876543210fedcba98"
OTHER_REPO_DIR = "meta-llama--Llama-3.1-8B"
EXPORT_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9._-]*/[0-9a-f]{40}\Z"
MODULE = "fleet-vllm-models"
COPIERS = 24
SLOTS = 4
HANDSHAKE_TIMEOUT = 2

if os.geteuid() != 0 or not shutil.which("systemd-socket-activate") or not shutil.which("rsync") or not shutil.which("setpriv"):
    pytest.skip("needs root (the daemon runs as nobody, as the role's runs as a transient user), rsync, setpriv and "
                "systemd-socket-activate", allow_module_level=True)


def render_rsyncd_conf(base, networks, pristine=None, exports=None):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(ROLE / "templates")), undefined=jinja2.StrictUndefined,
                             trim_blocks=True)
    env.filters["dirname"] = os.path.dirname
    env.filters["fleet.vllm.config_value"] = config_value
    env.tests["match"] = lambda value, pattern: re.match(pattern, value) is not None  # Ansible's match test
    return env.get_template("rsyncd.conf.j2").render(
        ansible_managed="rendered by " + __name__, vllm_weights_peer_max_connections=SLOTS,
        __vllm_weights_rsyncd_lock=str(base / "run" / "rsyncd.lock"), __vllm_weights_rsync_module=MODULE,
        fleet_vllm_pristine_dir=str(pristine or base / "seed" / "pristine" / REPO_DIR), __vllm_weights_peer_networks=networks,
        __vllm_weights_peer_exports=["%s/%s" % (REPO_DIR, COMMIT)] if exports is None else exports,
        __vllm_weights_export_pattern=EXPORT_PATTERN)


@pytest.fixture(scope="module")
def base():
    # Every account can enter it: the daemon reads the snapshot as nobody, as on a host.
    path = shared_tmpdir("fleet-vllm-peer-daemon-")
    # What the unit's RuntimeDirectory= is: the only place the daemon's user may write (lock, log).
    (path / "run").mkdir()
    os.chown(path / "run", NOBODY, NOBODY)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def seed(base):
    """A complete snapshot (files and the module's manifest), world-readable as the module leaves it."""
    directory = base / "seed" / "pristine" / REPO_DIR / COMMIT
    directory.mkdir(parents=True)
    files = []
    for index in range(1, 5):
        name = "model-%05d-of-00004.safetensors" % index
        (directory / name).write_bytes(os.urandom(4 * 1024 * 1024))
        files.append(dict(path=name, size=4 * 1024 * 1024))
    (directory / "config.json").write_text('{"architectures": ["DeepseekV3ForCausalLM"]}\n')
    files.append(dict(path="config.json", size=(directory / "config.json").stat().st_size))
    # The hub's listing, which every copy is checked against (the role gets it from the hub on the controller).
    for item in files:
        kind = "sha256" if item["path"].endswith(".safetensors") else "git-sha1"
        item["sha256" if kind == "sha256" else "git_sha1"] = snap.digest_of(
            str(directory / item["path"]), kind, item["size"]).split(":", 1)[1]
    (base / "listing.json").write_text(json.dumps(files))
    snap.write_manifest(str(directory), snap.make_manifest(REPO, COMMIT, files, COMMIT))
    for path in [base / "seed", *(base / "seed").rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return directory


@pytest.fixture(scope="module")
def daemon(base, seed):
    """The role's daemon behind systemd-socket-activate. ``slow`` makes every transfer hold its slot a second longer
    (rsync's pre-xfer exec, a test-only parameter), standing in for a long copy, so that copies overlap for sure.
    ``gate`` is the handshake gate to run (the checkout's): nobody runs a copy of it under ``base``, since the
    checkout may sit under a directory only root can enter (`mktemp -d`, /root)."""
    started = []

    def start(networks, slow=False, pristine=None, gate=GATE, exports=None):
        conf = base / ("rsyncd-%d.conf" % len(started))
        conf.write_text(render_rsyncd_conf(base, networks, pristine, exports))
        os.chmod(conf, 0o644)
        require_readable(conf)  # rsync reads it as nobody
        staged = stage_for_account(gate, base / ("bin-%d" % len(started)))
        port = free_port()
        argv = [shutil.which("systemd-socket-activate"), "--listen=127.0.0.1:%d" % port, "--accept", "--inetd",
                shutil.which("setpriv"), "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups", "--no-new-privs",
                "/usr/bin/python3", str(staged), str(HANDSHAKE_TIMEOUT), shutil.which("rsync"), "--daemon", "--config=%s" % conf,
                "--dparam=logfile=%s" % (base / "run" / "rsyncd.log")]
        if slow:
            argv.append("--dparam=pre-xfer exec=/bin/sleep 1")
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(base / "activate.log", "ab"))
        started.append(proc)
        for _attempt in range(50):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        return "rsync://127.0.0.1:%d/%s/%s" % (port, MODULE, REPO_DIR)

    yield start
    for proc in started:
        proc.terminate()
        proc.wait(10)


def start_copier(base, index, peer, **options):
    work = base / ("copier-%02d" % index)
    work.mkdir()
    params = dict(repo_id=REPO, revision=COMMIT, dest=str(work / "pristine"), peer=[peer], retry_delay=0.5,
                  listing=json.loads((base / "listing.json").read_text()),
                  peer_wait=300, progress_file=str(work / "progress.json"), _ansible_check_mode=False,
                  _ansible_diff=False, _ansible_remote_tmp=str(work), _ansible_keep_remote_files=False)
    params.update(options)
    (work / "args.json").write_text(json.dumps({"ANSIBLE_MODULE_ARGS": params}))
    module = COLLECTIONS / "ansible_collections" / "fleet" / "vllm" / "plugins" / "modules" / "hf_snapshot.py"
    return subprocess.Popen([sys.executable, str(module), str(work / "args.json")], cwd=str(work), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=str(COLLECTIONS), LC_ALL="C.UTF-8"))


def test_24_copiers_against_one_seed_with_4_slots_all_complete(base, seed, daemon):
    url = daemon(["127.0.0.0/8"], slow=True)
    procs = [start_copier(base, index, url) for index in range(COPIERS)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        results.append(json.loads(out) if out.strip() else dict(failed=True, msg=err[-2000:]))
    failed = [r["msg"] for r in results if r.get("failed")]
    assert failed == [], failed[0]
    expected = {p.name: p.read_bytes() for p in seed.iterdir() if p.name != snap.MANIFEST_NAME}
    for index, result in enumerate(results):
        assert result["changed"] and result["complete"] and result["peer_used"] == url, result
        copy = base / ("copier-%02d" % index) / "pristine" / COMMIT
        assert {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file() and p.name != snap.MANIFEST_NAME} == expected
        assert json.loads((copy / snap.MANIFEST_NAME).read_text())["commit"] == COMMIT
    # The limit was hit, and every copier it turned away waited and tried again instead of failing.
    refused = [r for r in results if any("max connections (%d) reached" % SLOTS in line for line in r["peer_problems"])]
    assert len(refused) >= COPIERS - SLOTS * 2, [r["peer_problems"] for r in results]
    assert "max connections (%d) reached" % SLOTS in (base / "run" / "rsyncd.log").read_text()


def _closed_after(sock, limit):
    """Seconds until the daemon side closed the connection (reads return b''), or None within limit."""
    start = time.monotonic()
    sock.settimeout(limit)
    try:
        while sock.recv(4096):
            pass
    except socket.timeout:
        return None
    except ConnectionResetError:
        pass
    return time.monotonic() - start


def test_a_connection_without_greeting_is_dropped_after_the_handshake_timeout(daemon):
    url = daemon(["127.0.0.0/8"])
    port = int(url.split(":")[2].split("/")[0])
    idle = socket.create_connection(("127.0.0.1", port))
    half = socket.create_connection(("127.0.0.1", port))
    half.sendall(b"@RSYNCD: 31")  # a greeting without its end of line
    idle_after, half_after = _closed_after(idle, HANDSHAKE_TIMEOUT + 10), _closed_after(half, HANDSHAKE_TIMEOUT + 10)
    idle.close()
    half.close()
    assert idle_after is not None and HANDSHAKE_TIMEOUT - 0.5 <= idle_after <= HANDSHAKE_TIMEOUT + 3, idle_after
    assert half_after is not None and half_after <= HANDSHAKE_TIMEOUT + 3, half_after
    # A real client behind the gate still gets its answer (the gate consumed nothing).
    listing = subprocess.run(["rsync", "--contimeout=10", url + "/" + COMMIT + "/"], capture_output=True, text=True,
                             timeout=60, check=False)
    assert listing.returncode == 0 and "config.json" in listing.stdout, listing.stderr


def test_an_address_outside_the_networks_is_refused(daemon):
    url = daemon(["10.20.0.0/16", "fd00:20::/64"])
    denied = subprocess.run(["rsync", "--contimeout=10", url + "/" + COMMIT + "/"], capture_output=True, text=True,
                            timeout=60, check=False)
    assert denied.returncode == 5 and "@ERROR: Unknown module '%s'" % MODULE in denied.stderr, denied.stderr
    assert snap.rsync_kind(denied.returncode, denied.stderr) == "refused"


def test_a_snapshot_under_a_path_with_percent_signs_and_unicode_is_served(base, seed, daemon):
    """What rsyncd takes literally in a path (rsyncd.conf(5), issue 14 point 5) reaches it unchanged: percent signs
    that name no variable, quotes, dollars, spaces, unicode."""
    odd = base / "odd 100% %h %% ünï 'q' \"d\" $x" / "pristine" / REPO_DIR
    odd.mkdir(parents=True)
    shutil.copytree(seed, odd / COMMIT)
    for path in [base / odd.relative_to(base).parts[0], *(base / odd.relative_to(base).parts[0]).rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    url = daemon(["127.0.0.0/8"], pristine=odd)
    listing = subprocess.run(["rsync", "--contimeout=10", url + "/" + COMMIT + "/"], capture_output=True, text=True,
                             timeout=60, check=False)
    assert listing.returncode == 0 and "config.json" in listing.stdout, listing.stderr


@pytest.mark.parametrize("pristine, words", [
    ("/srv/models\n[root]\npath = /\n/pristine/" + REPO_DIR, ["fleet_vllm_pristine_dir", "newline"]),
    ("/srv/models\\/" + REPO_DIR, ["fleet_vllm_pristine_dir", "backslash"]),
    ("/srv/models\r/" + REPO_DIR, ["fleet_vllm_pristine_dir", "carriage return"]),
])
def test_rsyncd_conf_refuses_a_path_that_would_add_lines(base, pristine, words):
    """A newline in fleet_vllm_pristine_dir wrote a module of its own (here [root] serving /); %HOME% made rsyncd
    serve root's home directory."""
    with pytest.raises(AnsibleFilterError) as err:
        render_rsyncd_conf(base, ["127.0.0.0/8"], pristine)
    assert all(word in str(err.value) for word in words), str(err.value)


def test_the_daemon_runs_from_a_checkout_under_a_directory_only_root_can_enter(base, daemon):
    """A checkout under a 0700 directory (`mktemp -d`, /root, where a newcomer working as root clones): nobody cannot
    read the role's gate there, so the daemon's account runs a copy of it, and a real rsync client gets its answer.
    (Run from the checkout itself, the gate failed to open and every client read "Connection reset by peer".)"""
    private = Path(tempfile.mkdtemp(prefix="fleet-vllm-private-checkout-"))  # 0700, as mktemp -d makes it
    try:
        assert private.stat().st_mode & 0o777 == 0o700
        gate = private / GATE.relative_to(ROOT)
        gate.parent.mkdir(parents=True)
        shutil.copy2(GATE, gate)
        os.chmod(gate, 0o755)
        # The premise, asked of the system as nobody: the checkout's own file cannot be read from there.
        assert unreadable_reason(gate) == "uid %d cannot enter %s (mode 0700, owner root)" % (NOBODY, private)
        direct = subprocess.run([shutil.which("setpriv"), "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups",
                                 "/usr/bin/python3", str(gate), "1", "true"], capture_output=True, text=True, timeout=60,
                                check=False)
        assert direct.returncode == 2 and "Permission denied" in direct.stderr, (direct.returncode, direct.stderr)
        url = daemon(["127.0.0.0/8"], gate=gate)
        listing = subprocess.run(["rsync", "--contimeout=10", url + "/" + COMMIT + "/"], capture_output=True, text=True,
                                 timeout=60, check=False)
        assert listing.returncode == 0 and "config.json" in listing.stdout, listing.stderr
    finally:
        shutil.rmtree(private, ignore_errors=True)


def test_a_temporary_directory_nobody_can_reach_stops_the_test_naming_the_path(monkeypatch):
    """TMPDIR under a private directory: the shared temporary directory is refused at once, naming the directory in
    the way, instead of a daemon that cannot read its files."""
    private = Path(tempfile.mkdtemp(prefix="fleet-vllm-private-tmp-"))  # 0700
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(private))
        with pytest.raises(pytest.fail.Exception) as stopped:
            shared_tmpdir("fleet-vllm-unreachable-")
        message = str(stopped.value)
        assert "must be readable by uid %d" % NOBODY in message, message
        assert "cannot enter %s (mode 0700, owner root)" % private in message, message
        assert "TMPDIR" in message, message
    finally:
        shutil.rmtree(private, ignore_errors=True)


@pytest.fixture(scope="module")
def others(base, seed):
    """Beside the snapshot the run stages: the one the host serves, another commit, another repository's."""
    copies = {}
    for repo_dir, commit in ((REPO_DIR, SERVED), (REPO_DIR, OTHER), (OTHER_REPO_DIR, COMMIT)):
        target = base / "seed" / "pristine" / repo_dir / commit
        if not target.exists():
            shutil.copytree(seed, target)
            (target / "config.json").write_text('{"copy": "%s/%s"}\n' % (repo_dir, commit))
        copies[(repo_dir, commit)] = target
    for path in [base / "seed", *(base / "seed").rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return copies


def _pull(url, target):
    target.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["rsync", "--contimeout=10", "--recursive", url, str(target) + "/"], capture_output=True, text=True,
                          timeout=60, check=False)


def test_only_the_staged_and_the_served_snapshot_are_exported(base, seed, others, daemon):
    """Issue 24 point 14: the daemon exported every repository and commit under the models root. Now a peer gets the
    staged and the served snapshot, and nothing else, however it asks."""
    url = daemon(["127.0.0.0/8"], exports=["%s/%s" % (REPO_DIR, COMMIT), "%s/%s" % (REPO_DIR, SERVED)])
    module_url = url.rsplit("/", 1)[0]
    for commit, expected in ((COMMIT, seed / "config.json"), (SERVED, others[(REPO_DIR, SERVED)] / "config.json")):
        pulled = _pull("%s/%s/" % (url, commit), base / "pulled" / commit)
        assert pulled.returncode == 0, pulled.stderr
        assert (base / "pulled" / commit / "config.json").read_bytes() == expected.read_bytes()
        assert (base / "pulled" / commit / snap.MANIFEST_NAME).is_file()
    asked = {
        "another commit": "%s/%s/" % (url, OTHER),
        "a file of another commit": "%s/%s/config.json" % (url, OTHER),
        "another repository": "%s/%s/%s/" % (module_url, OTHER_REPO_DIR, COMMIT),
        "another commit through ..": "%s/%s/../%s/" % (url, COMMIT, OTHER),
        "another repository through ..": "%s/../%s/%s/config.json" % (url, OTHER_REPO_DIR, COMMIT),
        "another commit by a wildcard": "%s/f*/config.json" % url,
    }
    for what, ask in asked.items():
        target = base / ("pulled-%s" % what.replace(" ", "-"))
        got = _pull(ask, target)
        assert got.returncode == 23 and "No such file or directory" in got.stderr, (what, got.returncode, got.stderr)
        assert snap.rsync_kind(got.returncode, got.stderr) == "absent", what
        assert list(target.iterdir()) == [], what
    # Listings and wildcards over the whole module show the exported snapshots alone.
    listing = subprocess.run(["rsync", "--contimeout=10", "--recursive", module_url + "/"], capture_output=True, text=True,
                             timeout=60, check=False)
    assert listing.returncode == 0, listing.stderr
    names = {line.split()[-1] for line in listing.stdout.splitlines()}
    assert OTHER_REPO_DIR not in " ".join(names) and OTHER not in " ".join(names), names
    assert {"%s/%s/config.json" % (REPO_DIR, COMMIT), "%s/%s/config.json" % (REPO_DIR, SERVED)} <= names, names
    star = _pull("%s/*/*/config.json" % module_url, base / "pulled-star")
    assert star.returncode == 0, star.stderr
    assert (base / "pulled-star" / "config.json").read_bytes() in (
        seed.joinpath("config.json").read_bytes(), others[(REPO_DIR, SERVED)].joinpath("config.json").read_bytes())


def test_a_copier_of_an_unexported_commit_is_told_the_peer_has_none(base, others, daemon):
    """fleet.vllm.hf_snapshot asking for a commit the peer does not export: "no complete snapshot there", as for a
    peer that lacks it, so that it copies from another peer or downloads (here: fails, the hub not allowed)."""
    url = daemon(["127.0.0.0/8"])
    proc = start_copier(base, 90, url, revision=OTHER, peer_fallback=False, peer_wait=5)
    out, err = proc.communicate(timeout=120)
    result = json.loads(out) if out.strip() else dict(failed=True, msg=err[-2000:])
    assert result.get("failed") and "no peer will serve" in result["msg"], result
    assert "no complete snapshot of %s at %s there" % (REPO, OTHER) in result["msg"], result["msg"]


@pytest.mark.parametrize("exports, rules", [
    ([], "filter = - .cache/ - .hf-home/ - .*.lock - *"),
    (["%s/%s" % (REPO_DIR, COMMIT)], "filter = - .cache/ - .hf-home/ - .*.lock + /%s/ + /%s/%s/*** - *" % (
        REPO_DIR, REPO_DIR, COMMIT)),
    # the same twice, then the served one of another repository (a change of model): each once
    (["%s/%s" % (REPO_DIR, COMMIT)] * 2 + ["%s/%s" % (OTHER_REPO_DIR, SERVED)],
     "filter = - .cache/ - .hf-home/ - .*.lock + /%s/ + /%s/ + /%s/%s/*** + /%s/%s/*** - *" % (
         REPO_DIR, OTHER_REPO_DIR, REPO_DIR, COMMIT, OTHER_REPO_DIR, SERVED)),
    # what could widen a rule or add a line is not exported: a wildcard, a space, a newline, "..", a short commit,
    # an absolute path (a served record outside the module)
    (["*/%s" % COMMIT, "a b/%s" % COMMIT, "%s/%s\npath = /" % (REPO_DIR, COMMIT), "../%s" % COMMIT, "%s/0123" % REPO_DIR,
      "/srv/elsewhere/%s" % COMMIT, "%s/%s/" % (REPO_DIR, COMMIT)], "filter = - .cache/ - .hf-home/ - .*.lock - *"),
])
def test_the_export_rules_name_each_snapshot_and_nothing_else(base, exports, rules):
    conf = render_rsyncd_conf(base, ["10.0.0.0/8"], exports=exports)
    assert [line for line in conf.splitlines() if line.startswith(("filter", "exclude", "include"))] == [rules]


def test_the_role_exports_the_staged_and_the_served_commit_then_the_served_one_alone(tmp_path):
    """tasks/export.yml as the role runs it: the staged commit and the one the served directory's record names (during
    an upgrade, before the roll); once current names the staged one, that one alone, and a rerun changes nothing."""
    models = tmp_path / "models"
    current = models / "served" / REPO_DIR / "current"
    current.mkdir(parents=True)
    record = current / ".fleet-vllm-served.json"
    conf = tmp_path / "etc" / "rsyncd.conf"
    (tmp_path / "etc").mkdir()
    extra = dict(fleet_vllm_models_root=str(models), fleet_vllm_model_repo=REPO, vllm_weights_commit=COMMIT,
                 vllm_weights_peer_networks=["10.0.0.0/8"], vllm_preflight_interfaces={"unused": {}},
                 __vllm_weights_rsyncd_config=str(conf), ansible_python_interpreter=sys.executable)
    playbook = ROOT / "tests" / "integration" / "playbooks" / "vllm_weights_export.yml"

    def export():
        run = run_playbook(playbook, "-i", "localhost,", "-c", "local", extra_vars=extra, timeout=300)
        assert run.rc == 0, run.stdout[-3000:]
        rules = [line for line in conf.read_text().splitlines() if line.startswith("filter")]
        return run.stats()["changed"], rules

    record.write_text(json.dumps({"source": str(models / "pristine" / REPO_DIR / SERVED)}))
    assert export() == (1, ["filter = - .cache/ - .hf-home/ - .*.lock + /%s/ + /%s/%s/*** + /%s/%s/*** - *" % (
        REPO_DIR, REPO_DIR, COMMIT, REPO_DIR, SERVED)])
    record.write_text(json.dumps({"source": str(models / "pristine" / REPO_DIR / COMMIT)}))
    alone = "filter = - .cache/ - .hf-home/ - .*.lock + /%s/ + /%s/%s/*** - *" % (REPO_DIR, REPO_DIR, COMMIT)
    assert export() == (1, [alone])
    assert export() == (0, [alone])
    # Never deployed (no record), or a record naming a snapshot outside the models root: the staged one alone.
    record.unlink()
    assert export() == (0, [alone])
    record.write_text(json.dumps({"source": "/srv/elsewhere/%s" % SERVED}))
    assert export() == (0, [alone])
