"""A failed Molecule scenario's output (stdin) in a few lines (stdout), for the end of a CI log
whose tail may be all a reader sees (tests/hosts/molecule.sh prints it under "why:").

It names the step Molecule reports failed, then the first reasons: Ansible's failed task results
(fatal: [host]: FAILED! => {"msg": ...}) and pytest's failed tests, each with its failing line
(>) and its first E line.
Molecule draws a box around a command's output and wraps its long lines with two more spaces of
indentation: the box is removed and the wrapped pieces are joined again. Each line is cut to 240
characters; at most 12 lines.

With --fixture it prints instead, of any scenario's output, what molecule/shared/prepare.yml said
of the AMX test fixture on each host that has a mode: "HOST: MODE, vLLM's CPU platform picks
BACKEND", or that the mode was NOT APPLIED on this processor, with the reason (molecule.sh puts
these lines in its summary)."""

from __future__ import annotations

import re
import sys

ANSI = re.compile(r"\x1b\[[0-9;]*m")
BOX = re.compile(r"^ *[│┌└]")
# Lines that start something even when indented (a run's output printed inside another's).
START = re.compile(r"(fatal|failed|ok|changed|skipping): \[|TASK \[|PLAY ")
WIDTH, LINES = 240, 12


def unboxed(text):
    """The output's lines with Molecule's box removed and its wrapped lines joined again."""
    lines = []
    for raw in ANSI.sub("", text).splitlines():
        if not BOX.match(raw):
            lines.append(raw.strip())
            continue
        inner = BOX.sub("", raw)[1:]  # the box's character, then one space
        if inner.startswith("  ") and lines and inner.strip() and not START.match(inner.strip()):
            lines[-1] += ("" if lines[-1].endswith(("-", "/", "_")) else " ") + inner.strip()
        else:
            lines.append(inner.strip())
    return lines


def digest(text):
    lines = unboxed(text)
    failed = next((n for n, line in enumerate(lines) if re.search(r"➜ [a-z_]+: Executed: Failed", line)), len(lines) - 1)
    # Only the failed step's output: a side effect may have failed a run on purpose before it.
    begin = max([n for n in range(failed) if re.search(r"➜ [a-z_]+: Executing$", lines[n])] or [0])
    lines = lines[begin:failed + 1]
    out = lines[-1:]
    for number, line in enumerate(lines):
        if re.match(r"(fatal|failed): \[", line):
            out.append(line.strip())
        elif re.match(r"_{2,} ?test_\w+", line):
            body = lines[number + 1:number + 400]
            failing = next((later for later in body if later.startswith(">")), ">")
            first_e = next((later for later in body if later.startswith("E ")), "E")
            out.append("%s: %s | %s" % (line.strip("_ "), " ".join(failing[1:].split()), " ".join(first_e[1:].split())))
    return [line[:WIDTH] for line in out[:LINES]]


FIXTURE = "fleet_vllm_test_amx (TEST FIXTURE) on "


def fixture_lines(text):
    """What prepare.yml said of the AMX test fixture, per host with a mode, once each."""
    out = []
    for line in unboxed(text):
        if FIXTURE in line:
            said = line.split(FIXTURE, 1)[1].split(" (the fixture answers", 1)[0].strip()
            if said not in out:
                out.append(said[:WIDTH])
    return out


def main():
    for line in (fixture_lines if sys.argv[1:] == ["--fixture"] else digest)(sys.stdin.read()):
        print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
