"""The monitoring sees the faults (issue 22 item 7): the hung engine fires FleetVllmEngineWedged and
FleetVllmHostOutOfRotation; a stopped engine fires FleetVllmEngineDown (and leaves rotation); a host drained at the
gateway fires FleetVllmHostOutOfRotation. Each reaches the webhook receiver (the pager) within the bound stated in
docs/monitoring.md (for: + the rate window of a rate + scrape and evaluation intervals + group_wait, plus the gateway's
own checks for what it reads from HAProxy) and is resolved after the fault ends; nothing else reached it over the whole
scenario (the converge, the rerun, the rolling upgrade under traffic: tests/rolled checks its silences)."""

import json
import os

import gateway_hosts as gw

testinfra_hosts = [f"podman://{gw.gateway()}"]


def result():
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "gateway-hang.json"), encoding="utf-8") as handle:
        return json.load(handle)


def within(measured):
    return {what: (seconds, limit) for what, (seconds, limit) in measured.items() if seconds is None or seconds > limit}


def test_the_hung_engine_pages_as_wedged_and_out_of_rotation_within_the_bound():
    alerts = result()["alerts"]["hung"]
    assert set(alerts["fired"]) == {"FleetVllmEngineWedged", "FleetVllmHostOutOfRotation"}
    assert within(alerts["fired"]) == {}, alerts


def test_the_hung_engines_alerts_resolve_once_it_answers():
    alerts = result()["alerts"]["hung"]
    assert within(alerts["resolved"]) == {}, alerts


def test_a_stopped_engine_and_a_drained_host_page_and_resolve_within_the_bound():
    down = result()["alerts"]["down"]
    assert set(down["fired"]) == {"FleetVllmEngineDown " + down["stopped"], "FleetVllmHostOutOfRotation " + down["stopped"],
                                  "FleetVllmHostOutOfRotation " + down["drained"]}
    assert within(down["fired"]) == {}, down
    assert within(down["resolved"]) == {}, down


def test_nothing_else_reached_the_pager_over_the_whole_scenario():
    data = result()
    hung, stopped, drained = data["alerts"]["hung"]["victim"], data["alerts"]["down"]["stopped"], data["alerts"]["down"]["drained"]
    expected = {("FleetVllmEngineWedged", hung), ("FleetVllmHostOutOfRotation", hung), ("FleetVllmEngineDown", stopped),
                ("FleetVllmHostOutOfRotation", stopped), ("FleetVllmHostOutOfRotation", drained)}
    got = [(alert["labels"].get("alertname"), alert["labels"].get("fleet_host"), alert["status"])
           for entry in data["received"] for alert in entry["body"]["alerts"]]
    assert got, "the webhook received nothing at all"
    before = [entry for entry in data["received"] if entry["received"] < data["alerts"]["hung"]["at"]]
    assert before == [], "the pager got these before the first fault (the converge, the rerun, the roll): %s" % before
    assert {(name, host) for name, host, dummy in got} <= expected, got
    # and every notification went to the one receiver, from the scenario's Alertmanager
    assert {entry["body"]["receiver"] for entry in data["received"]} == {"test-pager"}
