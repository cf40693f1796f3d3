"""pytest setup of the Molecule scenarios' testinfra tests (molecule/*/tests, molecule/shared).

Puts molecule/shared on sys.path so a test module can ``import fleet_hosts``. The repository's
own test suite (pytest.ini: tests/unit, tests/integration) never collects molecule/.
"""

from __future__ import annotations

import os
import sys

SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shared")
if SHARED not in sys.path:
    sys.path.insert(0, SHARED)


def _fast_podman_backend():
    """testinfra's podman://NAME backend runs each check's command through container_exec (nsenter into the test host,
    about 0.004 CPU-s, instead of a `podman exec`, about 0.13: molecule/shared/container_exec.py); a backend with a
    user (podman://user@NAME) keeps `podman exec -u`."""
    import container_exec  # noqa: E402 (molecule/shared, put on sys.path above)
    from testinfra.backend import podman

    original = podman.PodmanBackend.run

    def run(self, command, *args, **kwargs):
        head = container_exec.prefix(self.name) if self.user is None else None
        if head is None:
            return original(self, command, *args, **kwargs)
        cmd = self.get_command(command, *args)
        out = self.run_local(" ".join(["%s"] * (len(head) + 3)), *head, "/bin/sh", "-c", cmd)
        out.command = self.encode(cmd)
        return out

    podman.PodmanBackend.run = run


_fast_podman_backend()
