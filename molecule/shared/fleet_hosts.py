"""Shared testinfra helpers of fleet.vllm's Molecule scenarios (molecule/*/tests).

The hosts are Podman containers running systemd; tests address them as ``podman://NAME``
(testinfra's podman backend, whose commands molecule/conftest.py sends through container_exec:
nsenter into the host, about 0.004 CPU-s a command where a ``podman exec`` costs about 0.13),
never through the ansible backend, which would start one ansible process per check. Each
test module still reads a host once: ``facts(host)`` runs one Python script in the host that returns
everything the checks look at (the unit's identity, every file a deploy owns, the contents of
the small files, the service user, the running process's command line, the endpoint's answers
from inside the host, the mirror's copy of the checkpoint's JSON files), cached for the module.

HTTP from this machine goes only to 127.0.0.1 (the server port each container publishes on
loopback); HTTP from inside a host goes to the host itself or to the hub mirror on the test
network.

A test module does::

    import fleet_hosts as fleet
    testinfra_hosts = fleet.testinfra_hosts()

    def test_something(host):
        facts = fleet.facts(host)

(molecule/conftest.py puts this directory on sys.path).
"""

from __future__ import annotations

import functools
import json
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import yaml

SERVICE = "vllm.service"
# vLLM's own port where it listens on one (fleet_vllm_engine_socket ""), on the host's loopback only.
PORT = 8000
# Where vLLM listens by default (fleet_vllm_engine_socket; issue 24 point 2): a Unix socket only root, the service
# user and the front door's group (haproxy) may open. ENGINE + "/health" is a URL ASK below takes.
ENGINE_SOCKET = "/run/fleet-vllm/vllm/engine.sock"
ENGINE = f"unix:{ENGINE_SOCKET}|"
# The front door (fleet.vllm.vllm_gateway, tasks_from: frontdoor): what the network reaches, and
# what each container publishes on this machine's loopback.
FRONTDOOR_PORT = 8080


def _load_group_vars():
    """The deployment's variables as the play saw them: the inventory's linked group_vars, a file
    vllm_servers.yml or a directory vllm_servers/ whose files Ansible reads in name order."""
    group_vars = os.path.join(os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"]), "group_vars")
    path = os.path.join(group_vars, "vllm_servers")
    files = [path + ".yml"] if os.path.exists(path + ".yml") else [
        os.path.join(path, name) for name in sorted(os.listdir(path)) if name.endswith((".yml", ".yaml"))]
    # group all first: vllm_servers' own win over it, as in Ansible
    files = [name for name in [os.path.join(group_vars, "all.yml")] if os.path.exists(name)] + files
    merged = {}
    for name in files:
        with open(name, encoding="utf-8") as handle:
            merged.update(yaml.safe_load(handle) or {})
    return merged


def _model_repo():
    try:
        return _load_group_vars().get("fleet_vllm_model_repo") or "nvidia/Kimi-K2.5-NVFP4"
    except (KeyError, OSError):  # not under Molecule (an import by a linter)
        return "nvidia/Kimi-K2.5-NVFP4"


# The scenario's model: the demo's Kimi-K2.5-shaped repo, or the real engine's tiny checkpoint.
REPO = _model_repo()
REPO_DIR = REPO.replace("/", "--")
MODELS_ROOT = "/srv/vllm/models"
PRISTINE_PARENT = f"{MODELS_ROOT}/pristine/{REPO_DIR}"
# The served directories: variants/<commit12>-<venv key> (one per commit and vLLM venv), and the
# links current (what runs) and previous.
SERVED = f"{MODELS_ROOT}/served/{REPO_DIR}"
SERVED_CURRENT = f"{SERVED}/current"
SNAPSHOT_MANIFEST = ".fleet-vllm-snapshot.json"
MIRROR = "http://fleet-vllm-mirror:8090"
OLD_VERSION = "0.16.0rc2.dev313+g6f5e2a9c1"  # before FP8 MLA support on SM120: strip
NEW_VERSION = "0.33.0"  # with it: keep
KV_FILES = ("config.json", "hf_quant_config.json")
UNIT_FILE = "/etc/systemd/system/vllm.service"
NCCL_ENV = "/etc/fleet-vllm/nccl.env"
SECRETS_ENV = "/etc/fleet-vllm/vllm-secrets.env"
RECORD_NAME = "fleet-record.json"

# What a deploy owns on a host, for "nothing changed" checks: files are compared by content,
# mode, owner, inode and mtime; links by target; directories are walked.
WATCHED = [
    UNIT_FILE,
    "/etc/systemd/system/vllm.service.d",
    "/etc/fleet-vllm",
    "/var/lib/fleet-vllm",
    "/usr/local/libexec/fleet-vllm",
    "/opt/vllm/current",
    "/opt/vllm/previous",
    "/opt/vllm/venvs",
    "/opt/fleet-vllm",
    "/etc/systemd/system/fleet-vllm-rsyncd.socket",
    "/etc/systemd/system/fleet-vllm-rsyncd@.service",
    SERVED,
    PRISTINE_PARENT,
]
# Directories only listed (their top level), not walked: venvs hold thousands of files.
SHALLOW = ["/opt/vllm/venvs", "/opt/fleet-vllm"]


# ---- inventory -------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def inventory():
    """Molecule's inventory of the platforms, with the scenario's own hosts merged in (scenario_hosts.yml beside it,
    which molecule/shared/create.yml writes from molecule/SCENARIO/inventory.yml.j2): their variables into all.hosts,
    their groups' hosts into the groups Molecule writes at the top level."""
    with open(os.environ["MOLECULE_INVENTORY_FILE"], encoding="utf-8") as handle:
        data = yaml.safe_load(handle)
    extra_path = os.path.join(os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"]), "scenario_hosts.yml")
    if not os.path.exists(extra_path):
        return data
    with open(extra_path, encoding="utf-8") as handle:
        extra = yaml.safe_load(handle) or {}
    hosts = data.setdefault("all", {}).setdefault("hosts", {})
    for name, values in ((extra.get("all") or {}).get("hosts") or {}).items():
        hosts[name] = dict(hosts.get(name) or {}, **(values or {}))
    for group, body in ((extra.get("all") or {}).get("children") or {}).items():
        target = data.setdefault(group, {})
        target["hosts"] = dict(target.get("hosts") or {}, **((body or {}).get("hosts") or {}))
    return data


def _group_hosts(group):
    data = inventory()
    # Molecule writes the groups of its platforms as top-level keys next to `all`.
    groups = dict(data.get("all", {}).get("children", {}) or {}, **{k: v for k, v in data.items() if k != "all"})
    names = set(((groups.get(group) or {}).get("hosts") or {}))
    if not names and group == "vllm_servers":
        names = set(data["all"].get("hosts", {}))
    return names


def host_vars(name):
    """The variables the scenario's inventory gives the host itself."""
    return (inventory().get("all", {}).get("hosts") or {}).get(name) or {}


def host_address(name):
    """The container an inventory host's connection enters: its ansible_host, else its name."""
    return host_vars(name).get("ansible_host") or name


def instances(group="vllm_servers"):
    """The inventory names of the group's hosts that are containers of their own (= the containers' names), sorted;
    a machine's named instance (an inventory host whose ansible_host is another host's container) is in
    named_instances()."""
    return sorted(name for name in _group_hosts(group) if host_address(name) == name)


def named_instances(group="vllm_servers"):
    """{inventory name: container} of the group's hosts that are another engine on a container of the scenario."""
    return {name: host_address(name) for name in sorted(_group_hosts(group)) if host_address(name) != name}


def testinfra_hosts(group="vllm_servers"):
    return [f"podman://{name}" for name in instances(group)]


@functools.lru_cache(maxsize=None)
def group_vars():
    """The deployment's variables as the play saw them (the inventory's linked group_vars)."""
    return _load_group_vars()


def api_key():
    return group_vars().get("vllm_server_api_key") or ""


def served_name():
    return group_vars()["vllm_server_served_model_name"]


def name_of(host):
    return host.backend.get_hostname()


# ---- one read of a host ----------------------------------------------------------------------

# The host-side part of every read that asks the engine: [label, url, body, key] -> label:
# [status, text] (status 0 when nothing answered). A url "unix:SOCKET|/PATH" asks PATH over the Unix socket
# SOCKET (the engine's, ENGINE). Put in front of a script run in the host.
ASK = r"""
import http.client, socket, urllib.error, urllib.request
class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)
def ask_unix(url, body, key, timeout):
    path, _, target = url[len("unix:"):].partition("|")
    headers = {"Content-Type": "application/json"} if body else {}
    if key:
        headers["Authorization"] = "Bearer " + key
    connection = UnixConnection(path, timeout)
    try:
        connection.request("POST" if body else "GET", target, body=body.encode() if body else None, headers=headers)
        response = connection.getresponse()
        return [response.status, response.read().decode()]
    finally:
        connection.close()
def ask(questions, timeout):
    answers = {}
    for label, url, body, key in questions:
        if url.startswith("unix:"):
            try:
                answers[label] = ask_unix(url, body, key, timeout)
            except (OSError, http.client.HTTPException) as e:
                answers[label] = [0, str(e)]
            continue
        req = urllib.request.Request(url, data=body.encode() if body else None, method="POST" if body else "GET")
        if body:
            req.add_header("Content-Type", "application/json")
        if key:
            req.add_header("Authorization", "Bearer " + key)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                answers[label] = [r.status, r.read().decode()]
        except urllib.error.HTTPError as e:
            answers[label] = [e.code, e.read().decode()]
        except OSError as e:
            answers[label] = [0, str(e)]
    return answers
"""

_GATHER = ASK + r"""
import grp, hashlib, json, os, pwd, stat, subprocess, sys
a = json.loads(sys.argv[1])
def entry(path):
    st = os.lstat(path)
    e = {"mode": oct(stat.S_IMODE(st.st_mode)), "uid": st.st_uid, "gid": st.st_gid}
    if stat.S_ISLNK(st.st_mode):
        e["link"] = os.readlink(path)
    elif stat.S_ISREG(st.st_mode):
        with open(path, "rb") as f:
            e["sha256"] = hashlib.sha256(f.read()).hexdigest()
        e["size"] = st.st_size
        e["mtime_ns"] = st.st_mtime_ns
        e["inode"] = st.st_ino
    elif stat.S_ISDIR(st.st_mode):
        e["dir"] = True
    return e
files = {}
for top in a["watched"]:
    if not os.path.lexists(top):
        files[top] = None
        continue
    files[top] = entry(top)
    if os.path.isdir(top) and not os.path.islink(top):
        for root, dirs, names in os.walk(top):
            if top in a["shallow"]:
                dirs[:] = []
            for n in sorted(dirs + names):
                files[os.path.join(root, n)] = entry(os.path.join(root, n))
def run(argv):
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    except OSError as e:
        return [127, "", str(e)]
    return [p.returncode, p.stdout, p.stderr]
props = ("InvocationID,ActiveEnterTimestamp,ActiveEnterTimestampMonotonic,ActiveExitTimestampMonotonic,"
         "InactiveEnterTimestampMonotonic,ExecMainPID,ExecMainStartTimestamp,NRestarts,ActiveState,SubState,UnitFileState,"
         "StartLimitBurst")
out = run(["systemctl", "show", a["service"], "-p", props])[1]
unit = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
facts = {"unit": unit, "files": files}
if a.get("full"):
    facts["system_state"] = run(["systemctl", "is-system-running"])[1].strip()
    try:
        u = pwd.getpwnam(a["user"])
        facts["user"] = {"uid": u.pw_uid, "group": grp.getgrgid(u.pw_gid).gr_name, "home": u.pw_dir, "shell": u.pw_shell}
    except KeyError:
        facts["user"] = None
    names = {}
    for path, e in files.items():
        if e:
            for key, getter in (("uid", lambda i: pwd.getpwuid(i).pw_name), ("gid", lambda i: grp.getgrgid(i).gr_name)):
                try:
                    names.setdefault(path, {})["user" if key == "uid" else "group"] = getter(e[key])
                except KeyError:
                    pass
    facts["owners"] = names
    content = {}
    for path in a["read"]:
        try:
            with open(path, "rb") as f:
                content[path] = f.read().decode("utf-8", "replace")
        except OSError:
            content[path] = None
    facts["content"] = content
    facts["realpath"] = {p: os.path.realpath(p) for p in files if os.path.islink(p)}
    pid = unit.get("ExecMainPID", "0")
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            facts["cmdline"] = [x.decode() for x in f.read().split(b"\0") if x]
    except OSError:
        facts["cmdline"] = None
    facts["version"] = run(["/opt/vllm/current/bin/python", "-c", "import vllm; print(vllm.__version__)"])[1].strip()
    facts["analyze"] = run(["systemd-analyze", "verify", a["unit_file"]])
    facts["http"] = ask(a["http"], 10)
print(json.dumps(facts))
"""

_FACTS_CACHE = {}


def snapshot(host):
    """The unit's identity (InvocationID, start timestamps, PID, restarts) and every watched file."""
    out = host.check_output("python3 -c %s %s", _GATHER,
                            json.dumps({"service": SERVICE, "watched": WATCHED, "shallow": SHALLOW}))
    return json.loads(out)


def facts(host, refresh=False):
    """Everything the checks look at, read from the host in one go (cached per host)."""
    name = name_of(host)
    if refresh or name not in _FACTS_CACHE:
        base = ENGINE
        chat_body = json.dumps({"model": served_name(), "max_tokens": 5,
                                "messages": [{"role": "user", "content": "Say hello"}]})
        read = [UNIT_FILE, NCCL_ENV, SECRETS_ENV] + [f"{SERVED_CURRENT}/{n}" for n in KV_FILES]
        for snap in _pristine_dirs_guess(host):
            read += [f"{snap}/{n}" for n in KV_FILES + (SNAPSHOT_MANIFEST,)]
        args = {
            "service": SERVICE, "watched": WATCHED, "shallow": SHALLOW, "full": True, "user": "vllm",
            "unit_file": UNIT_FILE, "read": read,
            "http": [
                ["health", f"{base}/health", "", ""],
                ["version", f"{base}/version", "", ""],
                ["models", f"{base}/v1/models", "", api_key()],
                ["models_without_key", f"{base}/v1/models", "", ""],
                ["chat", f"{base}/v1/chat/completions", chat_body, api_key()],
            ] + [[f"mirror:{n}", f"{MIRROR}/{REPO}/resolve/main/{n}", "", ""] for n in KV_FILES],
        }
        _FACTS_CACHE[name] = json.loads(host.check_output("python3 -c %s %s", _GATHER, json.dumps(args)))
    return _FACTS_CACHE[name]


def _pristine_dirs_guess(host):
    out = host.run("ls -1 %s", PRISTINE_PARENT)
    if out.rc != 0:
        return []
    return [f"{PRISTINE_PARENT}/{n}" for n in out.stdout.split() if n and not n.startswith(".")]


def pristine_dirs(data):
    """The snapshot directories (one per commit) under the pristine parent."""
    prefix = PRISTINE_PARENT + "/"
    return sorted(p for p, e in data["files"].items()
                  if e and e.get("dir") and p.startswith(prefix) and "/" not in p[len(prefix):]
                  and not p[len(prefix):].startswith("."))


def pristine(data):
    snapshots = pristine_dirs(data)
    assert len(snapshots) == 1, snapshots
    return snapshots[0]


def json_of(data, path):
    text = data["content"].get(path)
    assert text is not None, f"{path} missing"
    return json.loads(text)


def served(data):
    """The served directory that runs: where served/.../current points (a variant)."""
    target = data["realpath"].get(SERVED_CURRENT)
    assert target and target.startswith(SERVED + "/variants/"), f"{SERVED_CURRENT} -> {target}"
    return target


def kv_state(data, directory=None):
    """What a model directory declares about the KV cache: (kv_cache_scheme, kv_cache_quant_algo)."""
    directory = directory or SERVED_CURRENT  # read through the link: what runs
    config = json_of(data, f"{directory}/config.json")
    scheme = (config.get("quantization_config") or {}).get("kv_cache_scheme")
    quant = json_of(data, f"{directory}/hf_quant_config.json")
    algo = (quant.get("quantization") or {}).get("kv_cache_quant_algo")
    return scheme, algo


# ---- HTTP from this machine --------------------------------------------------------------------


def published(name, port=FRONTDOOR_PORT):
    """127.0.0.1:NNNN where the container's port is published on this machine."""
    out = subprocess.run(["podman", "port", name, f"{port}/tcp"], check=True, capture_output=True, text=True)
    address = out.stdout.split()[0]
    assert address.startswith("127.0.0.1:"), address
    return address


def tls_ca():
    """The scenario's test CA on this machine when its front doors speak TLS (molecule/gateway/prepare.yml
    makes it in the ephemeral directory), else None."""
    path = os.path.join(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", ""), "tls", "ca.pem")
    return path if os.path.isfile(path) else None


def frontdoor_base(name):
    """https://127.0.0.1:NNNN (a scenario with TLS front doors) or http://..., the front door of NAME as
    published on this machine's loopback."""
    return "%s://%s" % ("https" if tls_ca() else "http", published(name))


def http(url, body=None, key=None, timeout=10):
    """(status, text) of a GET, or a POST of ``body`` as JSON, from this machine (loopback only); an
    https URL over TLS, the certificate verified against the scenario's CA (for 127.0.0.1)."""
    assert url.startswith(("http://127.0.0.1:", "https://127.0.0.1:")), url
    context = ssl.create_default_context(cafile=tls_ca()) if url.startswith("https:") else None
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    if body is not None:
        request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def chat(base_url, key, name):
    body = {"model": name, "messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 5}
    return http(f"{base_url}/v1/chat/completions", body=body, key=key)


# ---- records of a step, and runs of side effects -----------------------------------------------


def record_path():
    return os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], RECORD_NAME)


def load_record():
    """What the last `verify ../shared/record` step saw, per host."""
    with open(record_path(), encoding="utf-8") as handle:
        return json.load(handle)


def diff(before, after):
    """Human-readable differences between two snapshots of one host (unit identity and files)."""
    lines = []
    for key in sorted(set(before["unit"]) | set(after["unit"])):
        if before["unit"].get(key) != after["unit"].get(key):
            lines.append(f"unit {key}: {before['unit'].get(key)!r} -> {after['unit'].get(key)!r}")
    for path in sorted(set(before["files"]) | set(after["files"])):
        if before["files"].get(path) != after["files"].get(path):
            lines.append(f"{path}: {before['files'].get(path)} -> {after['files'].get(path)}")
    return lines


def wait_healthy(host):
    """Until the host's vLLM answers /health on its socket (at most 2 minutes), after a restart."""
    probe = ASK + "\nimport sys\nsys.exit(0 if ask([['health', sys.argv[1], '', '']], 2)['health'][0] == 200 else 1)\n"
    for _attempt in range(120):
        if host.run("python3 -c %s %s", probe, f"{ENGINE}/health").rc == 0:
            return
        time.sleep(1)
    raise AssertionError("vllm.service did not answer /health after the restart")


def restarted_since_record(host, data):
    return load_record()[name_of(host)]["unit"]["InvocationID"] != data["unit"]["InvocationID"]


def words(text):
    """The text with every run of blanks and line breaks as one blank, and the callback's YAML quoting undone: the
    callback's YAML folds long lines, so a check reads a message or a table row through this."""
    return " ".join(text.split()).replace("''", "'")


def load_run(name):
    """What molecule/shared/run_playbook.py recorded of the side effect's ansible-playbook run NAME."""
    path = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], f"run-{name}.json")
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def file_requests(log_lines):
    """Request-log lines of the mirror (METHOD TARGET STATUS BYTES CLIENT) that fetch a file."""
    return [line for line in log_lines if "/resolve/" in line]


def shard_requests(log_lines):
    return [line for line in file_requests(log_lines) if ".safetensors" in line]


# ---- checks shared by the scenarios --------------------------------------------------------------


def assert_serving(host, data, version):
    """The unit runs the given vLLM (simulator) version and answers, inside the host (vLLM on its socket, with no
    key of its own: a request without one is served there) and through the front door published on this machine's
    loopback (which refuses a request without the key): /health 200, /v1/models lists the served name, a chat
    completion returns."""
    unit = data["unit"]
    assert (unit["ActiveState"], unit["SubState"]) == ("active", "running"), unit
    assert data["version"] == version
    answers = data["http"]
    assert answers["health"][0] == 200, answers["health"]
    assert answers["version"][0] == 200 and json.loads(answers["version"][1])["version"] == version
    assert answers["models"][0] == 200, answers["models"]
    assert served_name() in [m["id"] for m in json.loads(answers["models"][1])["data"]]
    # The engine on its socket holds no key (issue 24 point 2): the front door asks for it, below, and strips it.
    assert answers["models_without_key"][0] == 200, answers["models_without_key"]
    assert answers["chat"][0] == 200, answers["chat"]
    assert json.loads(answers["chat"][1])["choices"][0]["message"]["content"]

    base = frontdoor_base(name_of(host))
    assert http(f"{base}/health", key=api_key())[0] == 200
    assert http(f"{base}/health")[0] == 401, "the front door forwards without the key"
    status, text = http(f"{base}/v1/models", key=api_key())
    assert status == 200 and [m["id"] for m in json.loads(text)["data"]] == [served_name()], text
    status, text = chat(base, api_key(), served_name())
    assert status == 200, text
    reply = json.loads(text)
    assert reply["model"] == served_name()
    assert reply["choices"][0]["message"]["content"]


def assert_restarted_and_serving(host, version):
    """The service started anew since the record (another InvocationID) and serves ``version``."""
    data = facts(host)
    assert restarted_since_record(host, data)
    assert_serving(host, data, version)


def assert_pristine_untouched(data):
    """One snapshot, with its manifest, whose JSON files are byte for byte the mirror's (FP8 KV
    cache declared, as the hub serves the checkpoint)."""
    snap = pristine(data)
    assert data["content"].get(f"{snap}/{SNAPSHOT_MANIFEST}") is not None, "no snapshot manifest"
    scheme, algo = kv_state(data, snap)
    assert scheme is not None and algo == "FP8", "the pristine snapshot was edited"
    for name in KV_FILES:
        status, text = data["http"][f"mirror:{name}"]
        assert status == 200, text
        assert data["content"][f"{snap}/{name}"] == text, f"pristine {name} differs from the mirror's"


def assert_shards_link_to_pristine(data):
    snap = pristine(data)
    directory = served(data)
    shards = sorted(p for p in data["files"] if p.startswith(directory + "/") and p.endswith(".safetensors"))
    assert shards, "no shards in the served directory"
    for path in shards:
        assert "link" in data["files"][path], f"{path} is not a link"
        assert data["realpath"][path] == f"{snap}/{os.path.basename(path)}", path
    for name in KV_FILES:
        entry = data["files"][f"{directory}/{name}"]
        assert entry and "sha256" in entry, f"served {name} must be a real file (a patchable copy)"


def assert_kv_kept(data):
    """FP8 KV cache as the checkpoint declares it: the served copies are the pristine files."""
    scheme, algo = kv_state(data)
    assert scheme is not None and algo == "FP8", (scheme, algo)
    snap = pristine(data)
    for name in KV_FILES:
        assert data["content"][f"{SERVED_CURRENT}/{name}"] == data["content"][f"{snap}/{name}"], f"served {name} != pristine"


def assert_kv_stripped(data):
    """bf16 KV cache: both declarations gone from the served copies, the pristine files intact."""
    assert kv_state(data) == (None, None), "the served copy still declares an FP8 KV cache"
    scheme, algo = kv_state(data, pristine(data))
    assert scheme is not None and algo == "FP8", "the pristine snapshot was edited"
    # The rest of the checkpoint's quantization is untouched.
    assert json_of(data, f"{SERVED_CURRENT}/config.json")["quantization_config"]["quant_algo"] == "NVFP4"


def down_windows(run, name):
    """[start, end] seconds (from the run's start) during which the host's /health was not 200,
    from run_playbook.py's polls; an open window ends at the end of the run."""
    windows, start = [], None
    for seconds, host, status in run["polls"]:
        if host != name:
            continue
        if status != 200 and start is None:
            start = seconds
        elif status == 200 and start is not None:
            windows.append([start, seconds])
            start = None
    if start is not None:
        windows.append([start, run["seconds"] + 1])
    return windows


def assert_rolled_one_at_a_time(run, names):
    """Each host went down (restarted) during the run, never two at once, in inventory order,
    and all answered again at the end."""
    assert run["rc"] == 0, run["output_tail"][-3000:]
    assert sorted(run["urls"]) == sorted(names), run["urls"]
    first_poll = {}
    for seconds, host, status in run["polls"]:
        first_poll.setdefault(host, (seconds, status))
    for name in names:
        assert first_poll[name][1] == 200, f"{name} was not serving when the run started"
    windows = {name: down_windows(run, name) for name in names}
    for name in names:
        assert windows[name], f"{name} never went down: not restarted?"
    spans = sorted((w[0], w[1], name) for name in names for w in windows[name])
    for (s1, e1, n1), (s2, e2, n2) in zip(spans, spans[1:]):
        assert n1 == n2 or s2 >= e1, f"{n1} down {s1}-{e1} s and {n2} down {s2}-{e2} s overlap"
    order = [span[2] for span in spans]
    assert [n for i, n in enumerate(order) if n not in order[:i]] == names, f"rolled in the order {order}"
    last = {}
    for poll in run["polls"]:
        last[poll[1]] = poll[2]
    assert all(last[name] == 200 for name in names), last
