"""failures, step 4: a unit that crash-loops (the flag check switched off, a flag vLLM rejects,
on the second host only). The deploy fails fast with the journal instead of waiting for the
ready timeout; diagnose.yml names the rejected flag from the journal of that host; verify.yml
fails for that host alone and changes nothing; the first host keeps serving."""

from __future__ import annotations

import fleet_hosts as fleet

testinfra_hosts = fleet.testinfra_hosts()


def _names():
    first, second = fleet.instances()[:2]
    return first, second


def test_the_deploy_failed_fast_with_the_units_journal():
    first, second = _names()
    run = fleet.load_run("broken_unit")
    assert run["rc"] != 0
    assert run["recap"][second]["failed"] == 1, run["recap"]
    assert first not in run["recap"], run["recap"]
    output = run["output_tail"]
    # vllm_server_wait's unit watch: the unit's state, the known finding its journal shows, then the
    # journal's last lines, long before the ready timeout
    message = " ".join(output.split())
    assert "vllm.service is " in message, output[-4000:]
    assert " while the model was loading; vLLM rejected a command-line flag (rejected_flag): " in message, output[-4000:]
    assert message.index("(rejected_flag)") < message.index("; the last lines of its journal:"), output[-4000:]
    assert "unrecognized arguments: --no-such-flag" in output, output[-4000:]
    ready_timeout = int(fleet.group_vars().get("vllm_server_ready_timeout", 3600))
    assert run["seconds"] < ready_timeout, run["seconds"]


def test_diagnose_names_the_rejected_flag_on_the_broken_host_only():
    first, second = _names()
    run = fleet.load_run("diagnose")
    assert run["rc"] == 0, run["output_tail"][-4000:]
    assert run["recap"][first]["failed"] == 0 and run["recap"][second]["failed"] == 0, run["recap"]
    assert run["recap"][first]["changed"] == 0 and run["recap"][second]["changed"] == 0, run["recap"]
    output = run["output_tail"]
    assert "vLLM rejected a command-line flag (rejected_flag)" in output, output[-6000:]
    assert "--no-such-flag" in output
    # the finding is reported for the second host, and only for it
    findings = [block for block in output.split("ok: [")[1:] if "(rejected_flag)" in block]
    assert findings and all(block.startswith(second) for block in findings), findings


def test_verify_fails_for_the_broken_host_alone_and_changes_nothing():
    first, second = _names()
    run = fleet.load_run("verify")
    assert run["rc"] != 0
    assert run["recap"][second]["failed"] == 1, run["recap"]
    assert run["recap"][first]["failed"] == 0 and run["recap"][first]["ok"] >= 1, run["recap"]
    assert run["recap"][first]["changed"] == 0 and run["recap"][second]["changed"] == 0, run["recap"]
    # the report of the first host, as the callback wraps it
    assert "a two-token completion returned" in " ".join(run["output_tail"].split())


def test_the_first_host_still_serves(host):
    first, dummy = _names()
    if fleet.name_of(host) != first:
        return
    fleet.assert_serving(host, fleet.facts(host), fleet.OLD_VERSION)
    assert not fleet.restarted_since_record(host, fleet.facts(host))


def test_the_second_host_is_not_serving(host):
    dummy, second = _names()
    if fleet.name_of(host) != second:
        return
    data = fleet.facts(host, refresh=True)
    unit = data["unit"]
    # systemd restarts the engine until StartLimitBurst: activating (auto-restart, or a new
    # start that dies again), or failed once the burst is spent; never active and answering
    assert unit["ActiveState"] in ("activating", "failed"), unit
    assert data["http"]["health"][0] != 200, data["http"]["health"]
