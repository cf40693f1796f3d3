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
  defaulted to PID 1 (this machine);
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

import subprocess

from ansible.errors import AnsibleConnectionFailure
from ansible_collections.community.docker.plugins.connection.nsenter import Connection as _NsenterConnection


class Connection(_NsenterConnection):
    """community.docker.nsenter, aimed at a container by name, declaring pipelining."""

    transport = "fleet_nsenter"
    has_pipelining = True

    def _connect(self):
        if not self._connected and not self.get_option("nsenter_pid"):
            name = self._play_context.remote_addr
            proc = subprocess.run(["podman", "container", "inspect", "--format", "{{.State.Pid}}", name],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
            pid = proc.stdout.strip()
            if proc.returncode != 0 or not pid.isdigit() or int(pid) <= 0:
                raise AnsibleConnectionFailure("test host %s: no running container of that name (%s)"
                                               % (name, (proc.stderr or pid).strip()))
            self.set_option("nsenter_pid", int(pid))
        return super()._connect()
