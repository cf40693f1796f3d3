"""The canary gate (issue 23 point 3; molecule/upgrade_rollback/canary.yml): a roll to a slower vLLM stops at its
canary with the figures, the canary staying on the new pin or going back as fleet_vllm_canary_on_regression says, and
every other host keeps serving its pin untouched; an equal pin rolls on."""

import json
import os

import fleet_hosts as fleet

testinfra_hosts = fleet.testinfra_hosts()
HOSTS = sorted(fleet.instances())
NIGHTLY, UPGRADE = "0.16.0rc2.dev313+g6f5e2a9c1", "0.33.0"


def states():
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "canary-states.json"), encoding="utf-8") as handle:
        data = json.load(handle)
    out = {}
    for step, hosts in data.items():
        out[step] = {}
        for host, lines in hosts.items():
            out[step][host] = {"invocation": lines[0], "venv": lines[1],
                               "last": json.loads(lines[2]) if len(lines) > 2 and lines[2] else None}
    return out


def pin(state):
    """The vLLM a venv link points at: its directory is named SOURCE-VERSION (/opt/vllm/venvs/wheelhouse-0.33.0)."""
    (version,) = [v for v in (UPGRADE, NIGHTLY) if os.path.basename(state["venv"]).endswith("-" + v)]
    return version


def test_a_slower_pin_stops_at_its_canary_which_stays_on_it():
    run, s = fleet.load_run("canary-stay"), states()
    canary = HOSTS[0]
    assert run["rc"] != 0 and {h: run["recap"][h]["failed"] for h in HOSTS} == {h: int(h == canary) for h in HOSTS}
    message = fleet.words(run["by_host"][canary])
    assert "the canary gate stops the roll" in message and "it stays on the new state, out of rotation" in message
    assert "below" in message and f"on the new state ({'vllm ' + NIGHTLY})" in message, message
    assert {h: pin(s["before"][h]) for h in HOSTS} == dict.fromkeys(HOSTS, UPGRADE)
    assert pin(s["canary-stay"][canary]) == NIGHTLY
    assert s["canary-stay"][canary]["invocation"] != s["before"][canary]["invocation"]
    last = s["canary-stay"][canary]["last"]
    assert last["verdict"] == "failed" and last["identity"]["vllm_version"] == "vllm " + NIGHTLY
    assert last["compared_with"]["identity"]["vllm_version"] == "vllm " + UPGRADE
    # 4x slower per request in the simulator: far below the 25 % the demo's tolerance allows
    assert last["output_tokens_per_s"] < 0.5 * last["compared_with"]["output_tokens_per_s"]
    for host in HOSTS[1:]:
        assert s["canary-stay"][host]["invocation"] == s["before"][host]["invocation"], host
        assert s["canary-stay"][host]["venv"] == s["before"][host]["venv"], host


def test_with_rollback_the_canary_goes_back_and_serves_the_others_untouched():
    run, s = fleet.load_run("canary-back"), states()
    canary = HOSTS[1]
    assert run["rc"] != 0 and {h: run["recap"][h]["failed"] for h in HOSTS} == {h: int(h == canary) for h in HOSTS}
    assert f"it went back to {UPGRADE} and serves" in fleet.words(run["by_host"][canary]), run["by_host"][canary]
    assert pin(s["canary-back"][canary]) == UPGRADE
    assert s["canary-back"][canary]["invocation"] != s["canary-stay"][canary]["invocation"]
    assert s["canary-back"][HOSTS[2]] == s["canary-stay"][HOSTS[2]] | {"last": s["canary-back"][HOSTS[2]]["last"]}
    assert s["canary-back"][HOSTS[0]]["invocation"] == s["canary-stay"][HOSTS[0]]["invocation"]


def test_an_equal_pin_rolls_on_past_its_canary():
    run, s = fleet.load_run("canary-equal"), states()
    assert run["rc"] == 0 and all(run["recap"][h]["failed"] == 0 for h in HOSTS), run["output_tail"][-3000:]
    assert {h: pin(s["canary-equal"][h]) for h in HOSTS} == dict.fromkeys(HOSTS, NIGHTLY)
    last = s["canary-equal"][HOSTS[1]]["last"]
    assert last["verdict"] == "accepted" and last["compared_with"]["identity"]["vllm_version"] == "vllm " + UPGRADE
    assert "within the tolerance of 25.0%" in " ".join(last["notes"])


def test_every_host_serves_what_it_runs(host):
    fleet.assert_serving(host, fleet.facts(host, refresh=True), NIGHTLY)
