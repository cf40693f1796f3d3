"""molecule/shared/run_playbook.py, the scenarios' way to run ansible-playbook as an operator does:
a run that never ends is ended, with its threads' stacks in the output and what it started killed,
instead of holding the scenario (and CI) until CI's own limit. The ansible-playbook here is a
stand-in that hangs, as ansible-core 2.19.14 once did after a Ctrl-C in CI: a test fixture next to
the Python that runs run_playbook.py, which is where run_playbook.py takes ansible-playbook from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from conftest import ROOT

SCRIPT = ROOT / "molecule" / "shared" / "run_playbook.py"

# TEST FIXTURE: an ansible-playbook that prints, starts a child, then never ends and ignores SIGINT.
HANGING = """#!{python}
import os, signal, subprocess, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "child.pid"), "w") as out:
    out.write(str(child.pid))
print("PLAY [a play that never ends] ***", flush=True)
time.sleep(600)
"""

# TEST FIXTURE: an ansible-playbook that ends at once with PLAY RECAP and rc 2.
ENDING = """#!{python}
print("PLAY RECAP ***")
print("host-1                     : ok=1    changed=0    unreachable=0    failed=1    skipped=0    rescued=0    ignored=0")
raise SystemExit(2)
"""


def run(tmp_path, playbook, *args):
    """run_playbook.py with the stand-in PLAYBOOK as ansible-playbook: Python through a link in a
    directory of the test's, next to the stand-in."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(os.path.realpath(sys.executable), bin_dir / "python")
    stand_in = bin_dir / "ansible-playbook"
    stand_in.write_text(playbook.format(python=os.path.realpath(sys.executable)))
    stand_in.chmod(0o755)
    ephemeral = tmp_path / "ephemeral"
    ephemeral.mkdir()
    (ephemeral / "inventory").mkdir()
    env = dict(os.environ, MOLECULE_INVENTORY_FILE=str(ephemeral / "inventory" / "hosts"),
               MOLECULE_EPHEMERAL_DIRECTORY=str(ephemeral), MOLECULE_SCENARIO_NAME="unit",
               FLEET_VLLM_MOLECULE_LOGS=str(tmp_path / "logs"))
    proc = subprocess.run([str(bin_dir / "python"), str(SCRIPT), "one", *args, "--", "playbooks/none.yml"],
                          capture_output=True, text=True, timeout=120, env=env, check=False)
    record = json.loads((ephemeral / "run-one.json").read_text())
    return proc, record, bin_dir


def gone(pid):
    try:
        with open("/proc/%d/stat" % pid, encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_run_past_its_limit_is_ended_with_its_stacks_and_its_children(tmp_path):
    started = time.monotonic()
    proc, record, bin_dir = run(tmp_path, HANGING, "--expect", "fail", "--limit", "3")
    assert time.monotonic() - started < 60
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "did not end within 3 s (--limit)" in proc.stdout
    assert "UNEXPECTED" in proc.stdout
    # faulthandler's dump on SIGABRT: where the main thread waited.
    assert "Fatal Python error: Aborted" in record["output_tail"]
    assert 'bin/ansible-playbook", line 8 in <module>' in record["output_tail"]  # its time.sleep(600)
    assert record["hung"]["why"] == "did not end within 3 s (--limit)"
    child = int((bin_dir / "child.pid").read_text())
    assert child in record["hung"]["descendants"]
    deadline = time.monotonic() + 10
    while not gone(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone(child), "the stand-in's child outlived the run"


def test_a_run_that_ends_is_recorded_as_it_ended(tmp_path):
    proc, record, dummy = run(tmp_path, ENDING, "--expect", "fail")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "rc=2" in proc.stdout and "as expected" in proc.stdout
    assert record["rc"] == 2 and record["hung"] is None
    assert record["recap"]["host-1"]["failed"] == 1


def test_an_unexpected_rc_is_a_surprise(tmp_path):
    proc, record, dummy = run(tmp_path, ENDING, "--expect", "ok")
    assert proc.returncode == 1 and "UNEXPECTED" in proc.stdout
    assert record["rc"] == 2
