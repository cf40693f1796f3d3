"""Issue 24 point 1: no command a unit of the collection runs as root reads anything the service
user can write.

systemd runs a ``+``-prefixed Exec line (and ``!``/``!!``, and every line of a unit without
``User=``/``DynamicUser=``) as root, outside the sandbox, but with the unit's own environment
(``Environment=``, ``EnvironmentFile=``) and working directory. vllm.service sets
``HOME=/var/lib/vllm``, the service's home, which the service user writes; a plain
``/usr/bin/python3 SCRIPT`` started as root with that HOME runs every ``.pth`` file (and
``usercustomize``) of ``$HOME/.local/lib/python3.X/site-packages`` as root at start-up (site's user
site-packages). The model's remote code, or any exploit of the engine, would then become root at
the next start, which it can force by exiting.

Two checks:

- the rendered units (every unit the collection writes: vllm.service and the peers' rsync socket and
  service, rendered by tests/integration/playbooks/collection_units.yml with the roles' defaults):
  each root command's Python is isolated (``-I``: no user site-packages, no ``PYTHON*`` variables, no
  script directory or working directory on ``sys.path``), its environment does not come from the
  unit (``env -i``) or holds nothing that points into a place the service user writes, and no
  argument does either - except the shm directory itself, which is root's and sticky, and whose
  entries the cleanup reads by directory descriptor without following links (point 7);
- the cleanup run exactly as the rendered ExecStartPre runs it, as root, with HOME a home whose
  user site-packages hold a ``.pth`` and a ``usercustomize`` that leave a marker: no marker.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess

import pytest

from conftest import ROOT, prerequisite, run_playbook, shared_tmpdir

PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "collection_units.yml"
CLEANUP = ROOT / "roles" / "vllm_server" / "files" / "cleanup"
SYSTEM_PYTHON = "/usr/bin/python3"
# The units the collection installs (roles/vllm_server/vars/main.yml, roles/vllm_weights/vars/main.yml).
UNITS = ("vllm.service", "fleet-vllm-rsyncd.socket", "fleet-vllm-rsyncd@.service")
# Where any local account, the service user included, may create entries: world-writable and sticky.
# The directory itself is root's (an argument naming it is fine); anything below it is not.
SHARED_STICKY = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue")
# The PATH systemd gives a system service's commands (systemd.exec(5), "Environment variables ...").
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"
SERVICE_UID = 54321  # a uid with no account, as in test_vllm_server_cleanup.py


@pytest.fixture(scope="module")
def units():
    """{unit name: [(section, key, value)]} of the rendered units, and their texts."""
    out = shared_tmpdir("fleet-vllm-units-")
    try:
        run = run_playbook(PLAYBOOK, extra_vars={"units_dir": str(out), "fleet_vllm_python": "/opt/vllm/venvs/x/bin/python"},
                           timeout=300)
        assert run.rc == 0, run.stdout[-3000:] + run.stderr[-3000:]
        assert sorted(p.name for p in out.iterdir()) == sorted(UNITS)
        return {name: parse((out / name).read_text()) for name in UNITS}
    finally:
        shutil.rmtree(out, ignore_errors=True)


def parse(text):
    lines, section = [], None
    for line in text.splitlines():
        if not line.strip() or line.startswith(("#", ";")):
            continue
        # No continuation lines: a value split over lines would hide words from the checks below.
        assert not line.endswith("\\"), line
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, dummy, value = line.partition("=")
        lines.append((section, key, value))
    return lines


def values(unit, key):
    return [value for section, k, value in unit if section == "Service" and k == key]


def exec_lines(unit):
    """(directive, prefix, argv) of each Exec*= line of the unit's [Service]."""
    found = []
    for section, key, value in unit:
        if section != "Service" or not key.startswith("Exec"):
            continue
        match = re.match(r"([-@:+!]*)(.*)$", value)
        prefix, command = match.group(1), match.group(2)
        # systemd would expand "$NAME" and "${NAME}" from the unit's environment and "%x" specifiers
        # (systemd.service(5), "Command lines"): a word of a root command made from those is the
        # environment's, not the unit's. Literal ones are doubled (fleet.vllm.systemd_exec_args).
        assert not re.search(r"(?<!\$)\$(?!\$)", command.replace("$$", "")), (key, value)
        assert not re.search(r"%[^%]", command.replace("%%", "")), (key, value)
        found.append((key, prefix, shlex.split(command)))
    return found


def runs_as_root(unit, prefix):
    """systemd.service(5): "+" lifts every privilege restriction, "!"/"!!" the user change; a unit
    without User= (or with User=root) and without DynamicUser=yes runs its commands as root anyway."""
    if "+" in prefix or "!" in prefix:
        return True
    users = values(unit, "User")
    return values(unit, "DynamicUser")[-1:] != ["yes"] and users[-1:] in ([], ["root"], ["0"])


def writable_by_service(unit):
    """The places the unit's own user writes: its home (WorkingDirectory=, HOME=) and ReadWritePaths=."""
    places = set(values(unit, "WorkingDirectory"))
    for assignment in values(unit, "Environment"):
        for word in shlex.split(assignment):
            name, dummy, value = word.partition("=")
            if name == "HOME":
                places.add(value)
    for line in values(unit, "ReadWritePaths"):
        places.update(word.lstrip("-+") for word in line.split())
    return {p.rstrip("/") for p in places if p.startswith("/")}


def points_into(word, places):
    """Whether a word (an argument, or an environment value) names a path in one of places, or
    below one of the shared sticky directories; "--opt=/path" and "a:b" lists are looked into."""
    paths = [part for chunk in word.split("=") for part in chunk.split(":") if part.startswith("/")]
    for path in paths:
        path = os.path.normpath(path)
        if any(path == p or path.startswith(p + "/") for p in places):
            return True
        if any(path.startswith(s + "/") for s in SHARED_STICKY):
            return True
    return False


def unwrap_env(argv):
    """(environment assignments, whether the unit's environment was dropped, the command) of an
    argv that may start with env(1)."""
    if os.path.basename(argv[0]) != "env":
        return {}, False, argv
    rest, assignments, cleared = argv[1:], {}, False
    while rest and rest[0].startswith("-"):
        cleared = cleared or rest[0] in ("-i", "--ignore-environment", "-")
        rest = rest[1:]
    while rest and "=" in rest[0] and not rest[0].startswith("/"):
        name, dummy, value = rest.pop(0).partition("=")
        assignments[name] = value
    return assignments, cleared, rest


def python_options(argv):
    """The interpreter options of a Python command line (before the script or -c/-m), else None."""
    if not re.fullmatch(r"python[0-9.]*", os.path.basename(argv[0])):
        return None
    options = []
    for word in argv[1:]:
        if not word.startswith("-") or word in ("-c", "-m"):
            break
        options.append(word)
    return options


def is_isolated(options):
    return any(re.fullmatch(r"-[A-Za-z]*I[A-Za-z]*", word) for word in options)


def unit_environment(unit):
    env = {}
    for assignment in values(unit, "Environment"):
        for word in shlex.split(assignment):
            name, dummy, value = word.partition("=")
            env[name] = value
    return env


def root_commands(units):
    return [(name, key, prefix, argv) for name, unit in units.items()
            for key, prefix, argv in exec_lines(unit) if runs_as_root(unit, prefix)]


def test_every_root_command_of_every_unit_is_isolated_from_the_service_user(units):
    found = root_commands(units)
    # Not vacuous: vllm.service's cleanup is one (and the only one: the peers' daemon runs none).
    assert [(name, key) for name, key, _prefix, _argv in found] == [("vllm.service", "ExecStartPre")], found
    for name, key, prefix, argv in found:
        unit = units[name]
        places = writable_by_service(unit)
        assert "/var/lib/vllm" in places, places  # what the check compares with is there
        assignments, cleared, command = unwrap_env(argv)
        where = "%s %s=%s%s" % (name, key, prefix, " ".join(argv))
        # Its environment: the unit's (HOME=the service's home, the EnvironmentFile= lines) unless cleared.
        environment = dict(assignments) if cleared else dict(unit_environment(unit), **assignments)
        bad_env = {k: v for k, v in environment.items() if points_into(v, places) or k.startswith(("PYTHON", "LD_"))}
        assert not bad_env, "%s: the root command gets %s from the unit" % (where, bad_env)
        if not cleared:
            # EnvironmentFile= lines would reach it too; root's files, but they are the engine's
            # (NCCL settings, the API key), nothing a root command needs: clear them.
            assert not values(unit, "EnvironmentFile"), "%s: the root command gets the unit's EnvironmentFile=" % where
        options = python_options(command)
        assert options is not None, "%s: an unexpected root program %s (extend this test)" % (where, command[0])
        assert is_isolated(options), "%s: Python not isolated (-I): it reads $HOME's user site-packages and PYTHON*" % where
        # The interpreter and the script: system paths the role installs (root's), not the service's places.
        program_and_script = [command[0], command[1 + len(options)]]
        assert all(w.startswith("/usr/") and not points_into(w, places) for w in program_and_script), where
        for word in command[1:]:
            assert not points_into(word, places), "%s: argument %s is in a place the service user writes" % (where, word)


def test_the_peer_daemon_runs_nothing_as_root_and_its_gate_is_isolated(units):
    """The rsync units: the socket runs nothing; each connection's gate and rsync run as the transient
    user (DynamicUser=) with no "+"/"!" line. The gate is a system Python reading the network's bytes:
    isolated too, so that no environment or directory shapes what it imports."""
    assert not exec_lines(units["fleet-vllm-rsyncd.socket"])
    service = units["fleet-vllm-rsyncd@.service"]
    assert values(service, "DynamicUser") == ["yes"]
    lines = exec_lines(service)
    assert [key for key, _prefix, _argv in lines] == ["ExecStart"]
    for key, prefix, argv in lines:
        assert not runs_as_root(service, prefix), (key, prefix, argv)
        options = python_options(argv)
        assert argv[0] == SYSTEM_PYTHON and is_isolated(options), argv


def test_the_engine_is_the_only_python_that_is_not_isolated(units):
    """Every system Python (/usr/bin/python3, running a script the collection installs) a unit starts is
    isolated; the engine's venv Python is the one that is not (it is the service user's own, in the sandbox)."""
    for name, unit in units.items():
        for key, prefix, argv in exec_lines(unit):
            _assignments, _cleared, command = unwrap_env(argv)
            options = python_options(command)
            if options is None:
                continue
            if command[0] == SYSTEM_PYTHON:
                assert is_isolated(options), (name, key, argv)
            else:
                assert (name, key, command[1:3]) == ("vllm.service", "ExecStart", ["-m", "vllm.entrypoints.openai.api_server"])


@prerequisite(os.geteuid() == 0, reason="needs root: the cleanup runs as root, as the unit runs it")
@prerequisite(os.access(SYSTEM_PYTHON, os.X_OK), reason="no %s, which the unit runs" % SYSTEM_PYTHON)
def test_the_cleanup_as_the_unit_runs_it_runs_nothing_from_the_service_home(units):
    """What the issue tried: a .pth (and a usercustomize module) in the service home's user site-packages,
    written by the unprivileged user, then the cleanup started as root exactly as the rendered ExecStartPre
    starts it, with the environment systemd gives it (the unit's Environment= with HOME that home, PATH)
    and in the unit's WorkingDirectory=. Nothing of the home runs."""
    unit = units["vllm.service"]
    # The root one ("+"); the other removes the engine's stale socket as the service user, in the sandbox.
    [(prefix, argv)] = [(prefix, argv) for key, prefix, argv in exec_lines(unit) if key == "ExecStartPre" and "+" in prefix]
    version = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    base = shared_tmpdir("fleet-vllm-pth-")
    try:
        home, markers, shm = base / "home", base / "markers", base / "shm"
        site = home / ".local" / "lib" / ("python%s" % version) / "site-packages"
        site.mkdir(parents=True)
        markers.mkdir(mode=0o777)
        os.chmod(markers, 0o1777)
        shm.mkdir()

        def probe(kind):
            """One line that leaves markers/KIND-as-uid-EUID behind, as whoever runs it."""
            return "import os; open(os.path.join(%r, %r %% os.geteuid()), 'a').close()\n" % (str(markers), kind + "-as-uid-%d")
        (site / "evil.pth").write_text(probe("pth"))
        (site / "usercustomize.py").write_text(probe("usercustomize"))
        for path in [home, *home.rglob("*")]:
            os.chown(path, SERVICE_UID, SERVICE_UID)
        # What systemd gives a "+" command of this unit: PATH, the unit's Environment= (HOME), the user's
        # names (User=), and the EnvironmentFile= lines (left out here: root's files, the engine's settings).
        env = {"PATH": SYSTEMD_PATH, "LANG": "C.UTF-8", "USER": "vllm", "LOGNAME": "vllm", "SHELL": "/usr/sbin/nologin"}
        env.update(unit_environment(unit))
        assert env["HOME"] == "/var/lib/vllm"
        env["HOME"] = str(home)
        # The trap works: a plain Python started as root with that HOME runs both (what today's unit did).
        subprocess.run([SYSTEM_PYTHON, "-c", "pass"], env=env, cwd=str(home), check=True)
        assert sorted(p.name for p in markers.iterdir()) == ["pth-as-uid-0", "usercustomize-as-uid-0"]
        for path in markers.iterdir():
            path.unlink()
        # The rendered command, with the role's cleanup, a uid with no account and a shm directory of our own.
        command = [{"/usr/local/libexec/fleet-vllm/cleanup": str(CLEANUP), "vllm": str(SERVICE_UID),
                    "/dev/shm": str(shm)}.get(word, word) for word in argv]
        assert str(CLEANUP) in command and str(shm) in command, command
        proc = subprocess.run(command, env=env, cwd=str(home), capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert sorted(p.name for p in markers.iterdir()) == [], "ran from the service home: %s" % proc.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)
