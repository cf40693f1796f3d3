"""No page for a planned roll (issue 22 item 5): while deploy.yml rolled the new pin through the gateway, each host's
alerts were silenced in Alertmanager (a silence made before its drain, expired once it was back in rotation), the
alerts its drain and restart fired reached no one, and the silences are all expired now, so that the next fault pages."""

import fleet_hosts as fleet
import gateway_hosts as gw
import monitoring_hosts as mon

testinfra_hosts = [f"podman://{gw.gateway()}"]


def fleet_silences():
    return [s for s in mon.silences() if s["createdBy"] == "fleet.vllm"]


def test_each_rolled_host_had_its_own_silence_and_it_is_expired():
    silences = fleet_silences()
    by_host = {}
    for silence in silences:
        matchers = [(m["name"], m["value"], m["isRegex"], m.get("isEqual", True)) for m in silence["matchers"]]
        assert len(matchers) == 1 and matchers[0][0] == "fleet_host" and matchers[0][2:] == (False, True), silence
        by_host.setdefault(matchers[0][1], []).append(silence["status"]["state"])
    assert by_host == {name: ["expired"] for name in fleet.instances()}, by_host


def test_the_roll_fired_alerts_and_none_reached_the_pager():
    # The drains and restarts did fire (so the silences had something to hold back) ...
    fired = mon.query('count by (fleet_host) (max_over_time(ALERTS{alertstate="firing"}[30m]))')
    assert {series["metric"]["fleet_host"] for series in fired} == set(fleet.instances()), fired
    # ... and the pager got nothing, over the converge, the rerun and the roll.
    assert mon.received() == []
