"""Run one ansible-playbook command the way an operator would, from a Molecule side_effect, and
record what happened for the scenario's verify step (test helper, not part of the collection).

    python run_playbook.py NAME --expect ok|fail [--poll] [--interrupt-on-restart HOST] -- playbooks/deploy.yml [args]

Runs ``ansible-playbook -i <Molecule's inventory> ARGS`` from the repository root (with the
environment Molecule gives its playbooks: ANSIBLE_CONFIG, the collections path), prints its
output, and writes $MOLECULE_EPHEMERAL_DIRECTORY/run-NAME.json with:

  rc, seconds, argv, the output's tail, the PLAY RECAP per host (ok/changed/failed...),
  by_host: each host's own results in the output, whole (its "ok: [HOST] => ..." and
      "fatal: [HOST]: FAILED! => ..." lines with the indented lines under them), so that a check
      reads what one host answered however long the others' are,
  mirror_log: the hub mirror's request-log lines written during the run (tests/hosts/mirror.sh log),
  polls (with --poll): every change of each host's GET /health answer (through its front door,
      with the key, on the port published on 127.0.0.1), polled every 0.1 s from before the run to its end: [seconds, host, status];
  interrupt (with --interrupt-on-restart HOST): an operator's Ctrl-C (SIGINT to ansible-playbook)
      as soon as HOST's vllm.service has a new InvocationID (it was restarted) and before its
      /health answers: the InvocationIDs before and after, and whether /health was still down.

A run is bounded (--limit SECONDS, default 1800): one that has not ended by then gets SIGABRT,
which makes Python's faulthandler (PYTHONFAULTHANDLER=1 in its environment) print every thread's
stack into the output, then SIGKILL with whatever it started; the record says so ("hung") and the
exit is 1. After the Ctrl-C of --interrupt-on-restart the same happens after 60 s: an operator's
second Ctrl-C, with the stacks kept. Seen once in CI (2026-12-04): ansible-core 2.19.14 never
ended after the SIGINT, which came 30 ms after it had started a worker; with no bound, the
scenario, and CI, waited until CI's own limit.

Exits 0 when the run ended as expected (--expect fail: ansible-playbook failed), 1 otherwise, so
that Molecule stops at a surprise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import container_exec

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MIRROR = os.path.join(ROOT, "tests", "hosts", "mirror.sh")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# A task's result for one host ("ok: [HOST]", "fatal: [HOST -> localhost]: FAILED! =>", ...).
RESULT = re.compile(r"^(?:ok|changed|fatal|failed|skipping|unreachable): \[([^\]\s]+)(?: -> [^\]]*)?\]")
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)\s+rescued=(\d+)\s+ignored=(\d+)")


def by_host(output):
    """Each host's results in OUTPUT: {host: text}, the result lines naming it with the lines indented
    under them (the callback's YAML; a blank line inside a block is kept when indented lines follow)."""
    hosts = {}
    lines = output.splitlines()
    i = 0
    while i < len(lines):
        match = RESULT.match(lines[i])
        if not match:
            i += 1
            continue
        block = [lines[i]]
        i += 1
        while i < len(lines):
            if lines[i][:1] in (" ", "\t"):
                block.append(lines[i])
            elif not lines[i].strip() and i + 1 < len(lines) and lines[i + 1][:1] in (" ", "\t"):
                block.append(lines[i])
            else:
                break
            i += 1
        hosts.setdefault(match.group(1), []).append("\n".join(block))
    return {host: "\n".join(blocks) for host, blocks in hosts.items()}


def mirror_log():
    if not os.access(MIRROR, os.X_OK):
        return []
    try:
        out = subprocess.run([MIRROR, "log"], capture_output=True, text=True, check=False, timeout=60)
    except subprocess.TimeoutExpired:
        return []
    return out.stdout.splitlines() if out.returncode == 0 else []


def fleet():
    sys.path.insert(0, HERE)
    import fleet_hosts

    return fleet_hosts


class Poller(threading.Thread):
    """Polls GET /health of every host on its loopback port; keeps the changes only."""

    def __init__(self, start):
        super().__init__(daemon=True)
        self.start_time = start
        self.stop = threading.Event()
        self.changes = []
        hosts = fleet()
        self.urls = {name: "%s/health" % hosts.frontdoor_base(name) for name in hosts.instances()}

    @staticmethod
    def status(url):
        try:
            return fleet().http(url, key=fleet().api_key(), timeout=1)[0]
        except OSError:  # refused, reset or timed out: down
            return 0

    def run(self):
        last = {}
        while True:
            for name, url in self.urls.items():
                status = self.status(url)
                if last.get(name) != status:
                    last[name] = status
                    self.changes.append([round(time.monotonic() - self.start_time, 2), name, status])
            if self.stop.is_set():
                return
            time.sleep(0.1)


def invocation(name):
    try:
        out = subprocess.run(container_exec.argv(name, ["systemctl", "show", "vllm.service", "--property=InvocationID", "--value"]),
                             capture_output=True, text=True, check=False, timeout=30)
    except subprocess.TimeoutExpired:
        return ""
    return out.stdout.strip()


# After the Ctrl-C, how long an operator waits before pressing it again (the docstring above).
SECOND_INTERRUPT_AFTER = 60


def descendants(pid):
    """PID's processes below it, from /proc (ansible-playbook's workers, their connections)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry, encoding="utf-8", errors="replace") as handle:
                    stat = handle.read()
            except OSError:
                continue
            children.setdefault(int(stat[stat.rfind(")") + 2:].split()[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def end_hung(proc, why):
    """A run that does not end: its threads' stacks (SIGABRT: faulthandler), then SIGKILL for it and
    what it started. Returns what happened, for the record."""
    print("run_playbook: ansible-playbook (PID %d) %s: SIGABRT for its threads' stacks, then SIGKILL"
          % (proc.pid, why), flush=True)
    below = descendants(proc.pid)
    try:
        proc.send_signal(signal.SIGABRT)
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pass
    for pid in [proc.pid] + below:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return {"why": why, "pid": proc.pid, "descendants": below}


class Interrupter(threading.Thread):
    """Sends SIGINT to the run as soon as HOST's vllm.service was restarted (a new InvocationID)."""

    def __init__(self, name):
        super().__init__(daemon=True)
        self.name_ = name
        self.before = invocation(name)
        self.proc = None
        self.done = threading.Event()
        self.sent = None  # when the SIGINT went (time.monotonic())
        self.record = {"host": name, "invocation_before": self.before, "invocation_after": None, "health_down": None}

    def run(self):
        deadline = time.monotonic() + 900
        while not self.done.is_set() and time.monotonic() < deadline:
            now = invocation(self.name_)
            if now and now != self.before and self.proc is not None:
                self.proc.send_signal(signal.SIGINT)
                self.sent = time.monotonic()
                self.record["invocation_after"] = now
                self.record["health_down"] = Poller.status("%s/health" % fleet().frontdoor_base(self.name_)) != 200
                self.record["seconds"] = round(time.monotonic(), 2)
                return
            time.sleep(0.2)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("name")
    parser.add_argument("--expect", choices=["ok", "fail"], required=True)
    parser.add_argument("--poll", action="store_true")
    parser.add_argument("--interrupt-on-restart", metavar="HOST")
    parser.add_argument("--limit", type=int, default=1800, metavar="SECONDS")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    opts = parser.parse_args(argv[:split])
    args = argv[split + 1:]
    inventory = os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"])
    playbook_bin = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    argv = [playbook_bin if os.access(playbook_bin, os.X_OK) else "ansible-playbook", "-i", inventory] + args

    before = mirror_log()
    start = time.monotonic()
    poller = Poller(start) if opts.poll else None
    if poller:
        poller.start()
        time.sleep(0.5)
    print("run_playbook: %s" % " ".join(argv), flush=True)
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", PYTHONFAULTHANDLER="1")
    interrupter = Interrupter(opts.interrupt_on_restart) if opts.interrupt_on_restart else None
    hung = None
    with subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        if interrupter:
            interrupter.proc = proc
            interrupter.start()
        while True:
            try:
                stdout, dummy = proc.communicate(timeout=2)  # retried: no output is lost
                break
            except subprocess.TimeoutExpired:
                pass
            if hung:
                continue
            now = time.monotonic()
            if interrupter and interrupter.sent and now - interrupter.sent > SECOND_INTERRUPT_AFTER:
                hung = end_hung(proc, "did not end within %d s of the Ctrl-C" % SECOND_INTERRUPT_AFTER)
            elif now - start > opts.limit:
                hung = end_hung(proc, "did not end within %d s (--limit)" % opts.limit)
    proc.stdout = stdout
    if interrupter:
        interrupter.done.set()
        interrupter.join(timeout=60)
    seconds = round(time.monotonic() - start, 2)
    if poller:
        time.sleep(0.5)
        poller.stop.set()
        poller.join()
    after = mirror_log()
    output = ANSI.sub("", proc.stdout)
    print(output, flush=True)

    recap = {}
    for line in output.splitlines():
        match = RECAP.match(line.strip())
        if match:
            keys = ("ok", "changed", "unreachable", "failed", "skipped", "rescued", "ignored")
            recap[match.group(1)] = dict(zip(keys, map(int, match.groups()[1:])))
    result = {
        "name": opts.name,
        "argv": argv,
        "rc": proc.returncode,
        "seconds": seconds,
        "recap": recap,
        "output_tail": output[-20000:],
        "by_host": by_host(output),
        "mirror_log": after[len(before):] if after[:len(before)] == before else after,
        "polls": poller.changes if poller else None,
        "urls": poller.urls if poller else None,
        "interrupt": interrupter.record if interrupter else None,
        "hung": hung,
    }
    path = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "run-%s.json" % opts.name)
    # The full output, also where it outlives Molecule's ephemeral directory (CI artifacts).
    logs = os.environ.get("FLEET_VLLM_MOLECULE_LOGS") or os.path.join(ROOT, ".cache", "molecule-logs")
    os.makedirs(logs, exist_ok=True)
    scenario = os.environ.get("MOLECULE_SCENARIO_NAME", "scenario")
    for log_path in (path[:-len(".json")] + ".log", os.path.join(logs, "%s-%s.log" % (scenario, opts.name))):
        with open(log_path, "w", encoding="utf-8") as handle:
            handle.write(output)
    for json_path in (path, os.path.join(logs, "%s-%s.json" % (scenario, opts.name))):
        with open(json_path, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=1)
    # A run that had to be ended is a surprise, except after the Ctrl-C: there it is an operator's
    # second Ctrl-C, and the run is what it was meant to be, an interrupted one.
    ok = (proc.returncode == 0) == (opts.expect == "ok") and not (hung and not interrupter)
    print("run_playbook: %s rc=%d in %.1f s (expected %s): %s" % (opts.name, proc.returncode, seconds, opts.expect,
                                                                  "as expected" if ok else "UNEXPECTED"), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
