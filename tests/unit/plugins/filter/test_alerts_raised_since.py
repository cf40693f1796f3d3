"""fleet.vllm.alerts_raised_since: which alerts of a host, raised since its silence began, are still active. The shapes
are those of Prometheus 2.42's /api/v1/alerts and Alertmanager 0.25's /api/v2/alerts; the whole wait is
tests/integration/test_vllm_monitoring_silences.py's, against the real services."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.fleet.vllm.plugins.filter.alerts_raised_since import alerts_raised_since

SINCE = "Fri, 04 Dec 2026 21:00:00 GMT"  # the Date of the monitoring host's answer to the silence


def prom(name, host, active_at, state="firing"):
    return {"labels": {"alertname": name, "fleet_host": host, "severity": "page"}, "annotations": {}, "state": state,
            "activeAt": active_at, "value": "1e+00"}


def am(name, host, starts, ends, updated, state="suppressed"):
    return {"labels": {"alertname": name, "fleet_host": host}, "startsAt": starts, "endsAt": ends, "updatedAt": updated,
            "status": {"state": state, "silencedBy": ["x"], "inhibitedBy": []}, "fingerprint": "f", "receivers": []}


def test_prometheus_alerts_of_the_host_raised_since_and_firing():
    alerts = [
        prom("FleetVllmEngineDown", "gpu-a", "2026-12-04T21:00:05.123456789Z"),
        prom("FleetVllmHostOutOfRotation", "gpu-a", "2026-12-04T21:00:01Z"),
        # Pending: notified only if it lasts its for, which a roll's drift does not (drift_for 1h).
        prom("FleetVllmDrift", "gpu-a", "2026-12-04T21:00:02Z", state="pending"),
        prom("FleetVllmEngineDown", "gpu-a", "2026-12-04T21:00:07Z"),  # the same name once
        prom("FleetVllmNodeDown", "gpu-a", "2026-12-04T20:59:59.999Z"),  # before the silence
        prom("FleetVllmEngineDown", "gpu-b", "2026-12-04T21:00:05Z"),  # another host
        prom("FleetVllmEngineDown", "gpu-a", "2026-12-04T21:00:05Z", state="inactive"),
    ]
    assert alerts_raised_since(alerts, SINCE, "gpu-a") == ["FleetVllmEngineDown", "FleetVllmHostOutOfRotation"]
    assert alerts_raised_since(alerts, SINCE, "gpu-c") == []


def test_the_times_are_read_with_their_offsets():
    """A monitoring host out of UTC writes its offset: 22:00:03+01:00 is after 21:00:00 GMT, 21:59:59+01:00 before."""
    alerts = [prom("After", "gpu-a", "2026-12-04T22:00:03.5+01:00"), prom("Before", "gpu-a", "2026-12-04T21:59:59+01:00"),
              prom("West", "gpu-a", "2026-12-04T16:30:00-04:30")]
    assert alerts_raised_since(alerts, SINCE, "gpu-a") == ["After", "West"]
    # The same instant as since, in every form since takes, counts.
    for since in (SINCE, "2026-12-04T21:00:00Z", "2026-12-04T22:00:00+01:00", 1796418000, "1796418000.0"):
        assert alerts_raised_since([prom("Now", "gpu-a", "2026-12-04T21:00:00Z")], since, "gpu-a") == ["Now"], since


def test_alertmanager_resolved_alerts_are_not_active():
    alerts = [
        # Firing: its end is Prometheus' resend horizon, in the future.
        am("Firing", "gpu-a", "2026-12-04T21:00:05Z", "2026-12-04T21:04:05Z", "2026-12-04T21:00:05.2Z"),
        # Resolved by Prometheus: the end it sent is no later than when Alertmanager got it.
        am("Resolved", "gpu-a", "2026-12-04T21:00:05Z", "2026-12-04T21:00:30Z", "2026-12-04T21:00:30.01Z", state="active"),
        # Not resolved by a message, but its end has passed by the monitoring host's clock.
        am("Lapsed", "gpu-a", "2026-12-04T21:00:05Z", "2026-12-04T21:01:00Z", "2026-12-04T21:00:05Z"),
    ]
    assert alerts_raised_since(alerts, SINCE, "gpu-a") == ["Firing", "Lapsed"]
    assert alerts_raised_since(alerts, SINCE, "gpu-a", now="Fri, 04 Dec 2026 21:02:00 GMT") == ["Firing"]


def test_without_a_start_every_active_alert_of_the_host_counts():
    alerts = [prom("Old", "gpu-a", "2026-12-01T00:00:00Z"), prom("Other", "gpu-b", "2026-12-04T21:00:05Z")]
    assert alerts_raised_since(alerts, None, "gpu-a") == ["Old"]
    assert alerts_raised_since(alerts, "", "gpu-a") == ["Old"]


@pytest.mark.parametrize("alerts,since,named", [
    ({"data": {"alerts": []}}, SINCE, "the input must be the list of alerts"),
    (["FleetVllmEngineDown"], SINCE, "the input must be the list of alerts"),
    ([], "yesterday", "since must be an HTTP date, an RFC 3339 time or seconds since the epoch, got 'yesterday'"),
    ([], True, "since must be a time, got True"),
    ([prom("X", "gpu-a", "soon")], SINCE, "an alert's activeAt or startsAt must be"),
])
def test_what_it_cannot_read_is_refused_naming_it(alerts, since, named):
    with pytest.raises(AnsibleFilterError) as error:
        alerts_raised_since(alerts, since, "gpu-a")
    assert named in str(error.value)
