"""tests/hosts/failure_digest.py: the few lines CI's log ends with when a scenario failed name the
failed step and why, from that step's output only, with Molecule's box and wrapping undone."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

SCRIPT = ROOT / "tests" / "hosts" / "failure_digest.py"

LOG = """\
INFO     demo ➜ side_effect: Executing
  ┌──────────────────────────────────────────────────
  │ fatal: [host-2]: FAILED! => {"msg": "an expected failure of a side effect"}
  └─ Return code: 0 ───────────────────────────────
INFO     demo ➜ side_effect: Executed: Successful
INFO     demo ➜ converge: Executing
  ┌──────────────────────────────────────────────────
  │ TASK [fleet.vllm.vllm_server : Wait for the model to load and answer] ***
  │ \x1b[31mfatal: [host-1]: FAILED! => {"changed": false, "msg": "vllm.service is failed/failed\x1b[0m
  │   (result exit-code, 3 restarts) while the model was loading"}
  │ ok: [host-2]
  │   TASK [an inner run's output, indented]
  │         failed: [host-3] (item=x) => {"msg": "inner"}
  └─ Return code: 2 ───────────────────────────────
ERROR    demo ➜ converge: Executed: Failed
INFO     demo ➜ destroy: Executing
"""

PYTEST = """\
INFO     demo ➜ verify: Executing
  │ ______________ test_the_roll_lost_nothing ______________
  │
  │     def test_the_roll_lost_nothing():
  │         client = result()["client"]
  │ >       assert (client["failed"], client["truncated"]) == (0, 0),
  │   client["errors"]
  │ E       AssertionError: ['502 Bad Gateway at 12.3 s']
  │ E       assert (1, 0) == (0, 0)
  │ __
  │   test_back_in_rotation[podman://host-2]
  │   ___
  │ >       assert status == "UP"
  │ E       AssertionError: DOWN 1/2
ERROR    demo ➜ verify: Executed: Failed
"""


def digest(text):
    run = subprocess.run([sys.executable, str(SCRIPT)], input=text, capture_output=True, text=True, check=True)
    return run.stdout.splitlines()


def test_it_names_the_failed_step_and_its_fatal_task_only():
    lines = digest(LOG)
    assert lines[0].strip() == "ERROR    demo ➜ converge: Executed: Failed"
    assert lines[1:] == ['  fatal: [host-1]: FAILED! => {"changed": false, "msg": "vllm.service is failed/failed '
                         '(result exit-code, 3 restarts) while the model was loading"}',
                         '  failed: [host-3] (item=x) => {"msg": "inner"}']


def test_it_gives_each_failed_test_its_assert_and_first_error_line():
    lines = digest(PYTEST)
    assert lines[1:] == [
        '  test_the_roll_lost_nothing: assert (client["failed"], client["truncated"]) == (0, 0), client["errors"] '
        "| AssertionError: ['502 Bad Gateway at 12.3 s']",
        '  test_back_in_rotation[podman://host-2]: assert status == "UP" | AssertionError: DOWN 1/2',
    ]


def test_long_lines_are_cut():
    lines = digest("  │ fatal: [h]: FAILED! => %s\nERROR    demo ➜ converge: Executed: Failed\n" % ("x" * 1000))
    assert len(lines) == 2 and len(lines[1]) == 2 + 240
