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


# What molecule/shared/prepare.yml says of the AMX test fixture, as Molecule boxes and wraps it.
FIXTURE_LOG = """\
INFO     real_engine ➜ prepare: Executing
  │ ok: [real-1] =>
  │     msg: |-
  │         fleet_vllm_test_amx (TEST FIXTURE) on real-1:
  │   FLEET_VLLM_TEST_CPU_AMX=seen, vLLM's CPU platform picks AMX_MLA
  │         (the fixture answers for this processor; the verify steps ask the
  │   host's vLLM)
  │ Thursday 03 December 2026  15:47:19 +0000 (0:00:00.063)       0:00:04.136
  │ ok: [real-2] =>
  │     msg: |-
  │         fleet_vllm_test_amx (TEST FIXTURE) on real-2:
  │   fleet_vllm_test_cpu_amx=flip NOT APPLIED, this processor cannot run its
  │   branch; the host runs the processor's own MLA backend
  │         AMX_MLA: this one lacks avx512_bf16
  │ Thursday 03 December 2026  15:47:19 +0000 (0:00:00.063)       0:00:04.136
INFO     real_engine ➜ prepare: Executed: Successful
"""


def test_with_fixture_it_says_what_prepare_said_of_each_hosts_amx_mode():
    run = subprocess.run([sys.executable, str(SCRIPT), "--fixture"], input=FIXTURE_LOG + FIXTURE_LOG, capture_output=True,
                         text=True, check=True)
    assert run.stdout.splitlines() == [
        "  real-1: FLEET_VLLM_TEST_CPU_AMX=seen, vLLM's CPU platform picks AMX_MLA",
        "  real-2: fleet_vllm_test_cpu_amx=flip NOT APPLIED, this processor cannot run its branch; the host runs the"
        " processor's own MLA backend AMX_MLA: this one lacks avx512_bf16",
    ]
    assert subprocess.run([sys.executable, str(SCRIPT), "--fixture"], input=LOG, capture_output=True, text=True,
                          check=True).stdout == ""
