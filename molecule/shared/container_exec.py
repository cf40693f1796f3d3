"""Commands inside a test host (a Podman container running systemd) for the scenarios' checks (test helper, not part
of the collection): nsenter into the namespaces of the container's systemd, as the scenarios' Ansible connection does
(tests/hosts/connection_plugins/fleet_nsenter.py, whose PID lookup and cache this reuses), instead of `podman exec`.

Why: a `podman exec` costs about 0.13 CPU-seconds on this machine (podman, conmon, runc; 20 runs of `stat` measured
from /proc/stat: 255 jiffies), an nsenter about 0.004 (7 jiffies), and the verifiers run thousands of commands on CI's
two saturated cores (CI of 2e07e49: 2,941 s, 2 % of the CPU idle). The command gets the container's own environment
(its configuration's Env, as `podman exec` gives it), runs as root with root's capabilities on this machine (not the
container's bounding set: a check that needs the container's own limits uses `podman exec`), and stays in the
caller's control group.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import subprocess

_PLUGIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "hosts", "connection_plugins",
                       "fleet_nsenter.py")


@functools.lru_cache(maxsize=None)
def _plugin():
    spec = importlib.util.spec_from_file_location("fleet_vllm_test_nsenter", _PLUGIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.lru_cache(maxsize=None)
def _environment(name, pid):
    """The container's configured environment (what `podman exec` starts a command with), once per container start."""
    out = subprocess.run(["podman", "container", "inspect", "--format", "{{json .Config.Env}}", name], check=True,
                         capture_output=True, text=True).stdout
    env = [item for item in json.loads(out) or [] if "=" in item]
    if not any(item.startswith("HOME=") for item in env):
        env.append("HOME=/root")
    return tuple(env)


def prefix(name):
    """The argv that runs a command inside container NAME, or None where nsenter cannot (then use `podman exec`)."""
    if not shutil.which("nsenter") or os.geteuid() != 0:
        return None
    try:
        pid = _plugin().container_pid(name)
    except Exception:  # noqa: BLE001 (a container that is not running: podman exec says why)
        return None
    return ["nsenter", "-t", str(pid), "-a", "--", "/usr/bin/env", "-i"] + list(_environment(name, pid))


def argv(name, command):
    """The argv that runs COMMAND (a list) in container NAME: through nsenter, else `podman exec`."""
    head = prefix(name)
    return (head if head else ["podman", "exec", name]) + list(command)


def output(name, command, **kwargs):
    """The standard output of COMMAND (a list) in container NAME; a failure raises CalledProcessError."""
    return subprocess.run(argv(name, command), check=True, capture_output=True, text=True, **kwargs).stdout
