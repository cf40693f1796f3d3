"""fleet.vllm.vllm_start_phases run as Ansible runs it: the start it reads (the unit's current
InvocationID, or the one given), what it asks journalctl, and its failures.

TEST DOUBLES: systemctl and journalctl below are scripts standing in for systemd, which this machine
does not run. systemctl prints ``InvocationID=...`` as ``systemctl show -p InvocationID`` does;
journalctl prints a real captured start (tests/fixtures/journal/real-cpu-start-warm.txt, in
``-o short-unix`` form) and notes its arguments; it does not filter by the matches it is given."""

from __future__ import annotations

import os

import pytest

from conftest import FIXTURES

WARM = FIXTURES / "journal" / "real-cpu-start-warm.txt"
CURRENT = "0d7e3a3ad6a54e0d9bc3f0a8b1e5c2f4"


def fake_systemd(tmp_path, invocation_id=CURRENT, journal_rc=0):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(
        "#!/usr/bin/env python3\nimport sys\n"
        "assert sys.argv[1:3] == ['show', 'vllm.service'] and 'InvocationID' in sys.argv, sys.argv\n"
        "print('InvocationID=%s')\n" % invocation_id)
    (bin_dir / "journalctl").write_text(
        "#!/usr/bin/env python3\nimport sys\n"
        "open(%r, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        "if %d:\n    sys.stderr.write('Failed to open journal\\n'); sys.exit(%d)\n"
        "sys.stdout.write(open(%r).read())\n" % (str(tmp_path / "journalctl.args"), journal_rc, journal_rc, str(WARM)))
    for name in ("systemctl", "journalctl"):
        (bin_dir / name).chmod(0o755)
    return {"PATH": "%s:%s" % (bin_dir, os.environ["PATH"])}


@pytest.mark.parametrize("check", [False, True])
def test_the_current_start_is_read(run_module, tmp_path, check):
    run = run_module("vllm_start_phases", {"unit": "vllm.service", "first_completion_at": 1796392864.818013}, check=check,
                     env=fake_systemd(tmp_path))
    assert not run.failed, run.result
    result = run.result
    assert result["changed"] is False and result["invocation_id"] == CURRENT
    assert (tmp_path / "journalctl.args").read_text().splitlines() == [
        "--no-pager -o short-unix _SYSTEMD_INVOCATION_ID=%s + INVOCATION_ID=%s" % (CURRENT, CURRENT)]
    assert result["started_at"] == 1796392823.150425
    assert result["phases"] == {"weights_loaded": 33.911, "engine_ready": 37.876, "api_ready": 41.135,
                                "first_completion": 41.668}
    assert result["durations"] == {"start_to_weights": 33.911, "weights_to_engine": 3.965, "engine_to_api": 3.259,
                                   "api_to_first_completion": 0.533}
    assert result["missing"] == [] and result["reported"]["init_engine_seconds"] == 2.45


def test_a_given_invocation_id_is_read_without_asking_systemctl(run_module, tmp_path):
    env = fake_systemd(tmp_path, invocation_id="not-asked")
    run = run_module("vllm_start_phases", {"unit": "vllm.service", "invocation_id": "AB" * 16}, env=env)
    assert not run.failed, run.result
    assert run.result["invocation_id"] == "ab" * 16
    assert [m["phase"] for m in run.result["missing"]] == ["first_completion"]
    assert run.result["phases"]["first_completion"] is None


@pytest.mark.parametrize("args, invocation_id, journal_rc, message", [
    ({}, "", 0, "vllm.service has no InvocationID"),
    ({"invocation_id": "x; rm -rf /"}, CURRENT, 0, "is not an InvocationID"),
    ({}, CURRENT, 1, "journalctl could not read the start %s of vllm.service: Failed to open journal" % CURRENT),
])
def test_failures_say_why_and_return_every_key(run_module, tmp_path, args, invocation_id, journal_rc, message):
    run = run_module("vllm_start_phases", dict(args, unit="vllm.service"),
                     env=fake_systemd(tmp_path, invocation_id=invocation_id, journal_rc=journal_rc))
    assert run.failed and message in run.result["msg"]
    for key in ("invocation_id", "started_at", "started_from", "phases", "durations", "missing", "reported"):
        assert key in run.result
