"""default: the unit's root command runs nothing the service user wrote (issue 24, point 1).

vllm.service's cleanup runs as root before each start (``ExecStartPre=+...``), with the unit's
``Environment=HOME=/var/lib/vllm``. Python started as root with that HOME used to run every ``.pth``
file of ``$HOME/.local/lib/python3.X/site-packages``, which the service user writes: the engine (or
the model's remote code) became root at the next start, which it can force by exiting. Here the
service user drops such a ``.pth`` - one that leaves a marker named after the uid that runs it - and
the service is restarted: the cleanup ran in that start (it removed a leftover segment planted for
it) and no marker of uid 0 exists.

This module restarts vllm.service once; it runs after test_hardening.py (which restarts it too).
"""

from __future__ import annotations

import shlex
import time

import fleet_hosts as fleet

testinfra_hosts = fleet.testinfra_hosts()

HOME = "/var/lib/vllm"
MARKERS = HOME + "/.fleet-issue24-markers"
PTH = "fleet-issue24-probe.pth"
SEGMENT = "/dev/shm/psm_fleetpth"
AS_VLLM = "setpriv --reuid=vllm --regid=vllm --init-groups "


def test_a_pth_of_the_service_user_does_not_run_as_root_at_a_restart(host):
    version = host.check_output("/usr/bin/python3 -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])'")
    site = "%s/.local/lib/python%s/site-packages" % (HOME, version)
    # The directories this test makes, to remove afterwards if they were not there before.
    made = [d for d in (HOME + "/.local", HOME + "/.local/lib", "%s/.local/lib/python%s" % (HOME, version), site)
            if not host.file(d).exists]
    probe = "import os; open(os.path.join(%r, 'pth-as-uid-%%d' %% os.geteuid()), 'a').close()\n" % MARKERS
    try:
        # Written by the service user, as the engine's code could.
        host.check_output(AS_VLLM + "sh -c %s" % shlex.quote(
            "umask 022 && mkdir -p %s %s && printf '%%s' %s > %s/%s" % (site, MARKERS, shlex.quote(probe), site, PTH)))
        uid = int(host.check_output("id -u vllm"))
        # The trap is armed: a plain python3 with that HOME runs it (here as the service user itself).
        host.check_output(AS_VLLM + "env HOME=%s /usr/bin/python3 -c pass" % HOME)
        assert host.file("%s/pth-as-uid-%d" % (MARKERS, uid)).exists, "the .pth did not run: the check would prove nothing"
        host.check_output("rm -f %s/pth-as-uid-*" % MARKERS)
        # A leftover for the cleanup to remove: proof that it ran in the start below.
        host.check_output("install -o vllm -g vllm -m 600 /dev/null %s" % SEGMENT)
        # As the role does before a start it makes: the start limit counts deliberate starts too.
        host.check_output("systemctl reset-failed vllm.service")
        host.check_output("systemctl restart vllm.service")
        wait_active(host)
        assert not host.file(SEGMENT).exists, "the cleanup did not run in this start"
        markers = host.check_output("ls -A %s" % MARKERS).split()
        assert "pth-as-uid-0" not in markers, "the service user's .pth ran as root"
        for name in markers:
            assert host.file("%s/%s" % (MARKERS, name)).user != "root", (name, markers)
        fleet.wait_healthy(host)
    finally:
        host.run("rm -f %s/%s %s" % (site, PTH, SEGMENT))
        host.run("rm -rf %s" % MARKERS)
        for directory in reversed(made):
            host.run("rmdir %s" % directory)


def wait_active(host):
    for _attempt in range(120):
        state = host.run("systemctl is-active vllm.service").stdout.strip()
        if state == "active":
            return
        time.sleep(1)
    raise AssertionError("vllm.service is %s, not active, after the restart" % state)
