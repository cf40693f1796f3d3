# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST HARNESS connection for fleet.vllm's Molecule scenarios, not part of the collection.

community.docker.nsenter into a test host (a Podman container running systemd), with two
differences:

* the target is found from the host's address (``ansible_host``, else its inventory name = the
  container's name): ``podman container inspect`` gives the PID of its systemd. That is right for
  ``delegate_to`` as well, where an ``ansible_nsenter_pid`` templated from ``inventory_hostname``
  silently enters the task's own host instead of the delegate (``inventory_hostname`` keeps the
  original host's name under delegation). A stopped container (PID 0) is refused, never
  defaulted to PID 1 (this machine). The PID is kept in a file per container (root's own 0700
  directory under the temporary directory) with the start time of that process: each task's
  worker is a new process, and a ``podman container inspect`` per task and host cost about 0.08
  CPU-seconds, more than half of the test hosts' podman CPU in molecule/default (738 podman
  runs, 47 CPU-s of 407). The PID is used again only while a process of that PID with that start
  time runs: the same systemd, so the same container; a container made again under the same
  name has another one, and is looked up again;
* pipelining: the module goes to the host's Python on stdin instead of a temporary file made
  executable, run and removed, a fifth less time per task on these hosts (8 small tasks
  6.8 s -> 5.4 s). community.docker.nsenter's exec_command already passes stdin; only the flag
  is missing upstream.

Molecule's base config (.config/molecule/config.yml) points ANSIBLE_CONNECTION_PLUGINS here; the
checkout's ansible.cfg (connection_plugins) makes it available to the demo inventory (inventories/demo).
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: fleet_nsenter
short_description: nsenter into a Podman test host found by name, with pipelining (fleet.vllm test harness)
description:
  - Runs tasks inside a test host (a Podman container with systemd) by entering the namespaces of
    its PID 1 with nsenter, like community.docker.nsenter; the PID is looked up from the host's
    address (the container's name) when nsenter_pid is 0.
author: fleet.vllm developers
options:
  nsenter_pid:
    description:
      - PID to attach to; 0 looks up the systemd of the container named by the host's address.
    type: int
    default: 0
    vars:
      - name: ansible_nsenter_pid
"""

import os
import subprocess
import tempfile

from ansible.errors import AnsibleConnectionFailure
from ansible_collections.community.docker.plugins.connection.nsenter import Connection as _NsenterConnection


class Connection(_NsenterConnection):
    """community.docker.nsenter, aimed at a container by name, declaring pipelining."""

    transport = "fleet_nsenter"
    has_pipelining = True

    def _connect(self):
        if not self._connected and not self.get_option("nsenter_pid"):
            self.set_option("nsenter_pid", container_pid(self._play_context.remote_addr))
        return super()._connect()


def start_time(pid):
    """The start time of process PID (field 22 of /proc/PID/stat, in clock ticks since boot), None
    when no such process runs."""
    try:
        with open("/proc/%d/stat" % pid, encoding="utf-8", errors="replace") as handle:
            stat = handle.read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()  # after "PID (COMM) ": COMM may hold spaces and ")"
    return fields[19] if len(fields) > 19 else None


def cache_dir():
    """This user's own directory for the PIDs (made 0700), None when the path is not a directory of
    this user's that only it can write (then nothing is cached)."""
    path = os.path.join(tempfile.gettempdir(), "fleet-vllm-nsenter-%d" % os.getuid())
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    st = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return path


def container_pid(name):
    """The PID of the systemd of the running container NAME: the cached one while that process
    still runs (same PID, same start time), else podman's answer, then cached."""
    directory = cache_dir()
    entry = os.path.join(directory, name) if directory and name and "/" not in name and not name.startswith(".") else None
    if entry:
        try:
            with open(entry, encoding="utf-8") as handle:
                pid, started = handle.read().split()
            if start_time(int(pid)) == started:
                return int(pid)
        except (OSError, ValueError):
            pass
    proc = subprocess.run(["podman", "container", "inspect", "--format", "{{.State.Pid}}", name],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    pid = proc.stdout.strip()
    if proc.returncode != 0 or not pid.isdigit() or int(pid) <= 0:
        raise AnsibleConnectionFailure("test host %s: no running container of that name (%s)"
                                       % (name, (proc.stderr or pid).strip()))
    started = start_time(int(pid))
    if entry and started:
        handle, temporary = tempfile.mkstemp(dir=directory, prefix=".new-")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write("%s %s\n" % (pid, started))
        os.replace(temporary, entry)
    return int(pid)
