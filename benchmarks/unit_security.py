# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The exposure of the collection's two units, as systemd itself rates it, read on test hosts.

    python3 benchmarks/unit_security.py [--json FILE] [--details] [HOST ...]

HOST is a running test host (a Podman container with systemd, tests/hosts) that deploy.yml has
deployed: the demo's fleet-vllm-demo-1 (tools/demo.sh) by default, or a Molecule scenario's host
(e.g. fleet-vllm-default-1 between converge and destroy). On each it runs ``systemd-analyze security``
(systemd 252 on the Debian 12 test hosts) for

  vllm.service                      the engine (fleet.vllm.vllm_server), goal <= 4.0
  fleet-vllm-rsyncd@probe.service   the peers' rsync daemon (fleet.vllm.vllm_weights; an instance of
                                    the socket-activated template, which is what each connection
                                    runs), goal <= 2.5

and prints the overall exposure (0 = safe ... 10 = unsafe) with systemd's verdict, and with
--details each directive systemd still counts against the unit. Exit 0 when every unit meets its
goal, 1 when one does not, 2 when a host or unit could not be read. Before the hardening of issue
14 the same reading gave 9.2 (UNSAFE) and 8.9 (EXPOSED). molecule/default/tests/test_hardening.py
asserts the same goals in CI.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys

UNITS = (("vllm.service", 4.0), ("fleet-vllm-rsyncd@probe.service", 2.5))
OVERALL = re.compile(r"Overall exposure level for \S+: ([0-9.]+) (\w+)")
ROW = re.compile(r"^\s*\u2717\s+(\S+)\s+(.*?)\s+([0-9.]+)\s*$")


def read(host, unit):
    """(exposure, verdict, [(directive, description, points)]) of unit on host."""
    proc = subprocess.run(["podman", "exec", host, "systemd-analyze", "security", "--no-pager", unit],
                          capture_output=True, text=True, check=False, timeout=120,
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8"})
    match = OVERALL.search(proc.stdout)
    if proc.returncode != 0 or not match:
        raise RuntimeError("%s: systemd-analyze security %s: %s" % (host, unit, (proc.stderr or proc.stdout).strip()))
    rows = [m.groups() for m in map(ROW.match, proc.stdout.splitlines()) if m]
    return float(match.group(1)), match.group(2), rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("hosts", nargs="*", default=["fleet-vllm-demo-1"])
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--details", action="store_true", help="list what systemd still counts against each unit")
    args = parser.parse_args(argv)
    figures, met = [], True
    for host in args.hosts:
        for unit, goal in UNITS:
            try:
                exposure, verdict, rows = read(host, unit)
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
                print("unit_security: %s" % exc, file=sys.stderr)
                return 2
            ok = exposure <= goal
            met = met and ok
            figures.append({"host": host, "unit": unit, "exposure": exposure, "verdict": verdict, "goal": goal,
                            "met": ok, "counted": [{"directive": d, "why": w, "points": float(p)} for d, w, p in rows]})
            print("%-24s %-34s %4.1f %-8s goal <= %.1f  %s" % (host, unit, exposure, verdict, goal, "met" if ok else "NOT MET"))
            if args.details:
                for directive, why, points in rows:
                    print("    %-44s %4s  %s" % (directive, points, why))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(figures, handle, indent=2)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
