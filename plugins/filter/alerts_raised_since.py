# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: alerts_raised_since
short_description: The alerts of one fleet host that were raised since a time and are still active
version_added: "0.9.0"
author: fleet.vllm developers (@fleet-vllm)
description:
  - Reads the alerts of Prometheus' C(/api/v1/alerts) (C(data.alerts), with C(state) and C(activeAt)) or of
    Alertmanager's C(/api/v2/alerts) (with C(startsAt) and C(endsAt)), and returns the names of those labelled
    C(fleet_host=<host>) that became active at or after O(since) and are firing - in Prometheus' state V(firing), in
    Alertmanager not resolved.
  - A pending alert is not counted. It is notified only if its condition lasts its C(for), and some last through a
    whole roll by design (FleetVllmDrift, while the fleet runs two pins, is pending for up to its C(drift_for) of
    1h); waiting for it would hold each host of the roll to the wait's limit (measured in Molecule C(gateway)).
  - The rolling phase waits until there are none before it expires the silence of a host's planned restart
    (the role fleet.vllm.vllm_monitoring, C(tasks_from=unsilence)), because an alert the restart raised that is
    still active when the silence ends is notified, although the host is back. An alert that was active before the
    silence is not waited for; it was notified before, and Alertmanager does not repeat it before its repeat interval.
  - Times are read with their offsets, so a monitoring host in any time zone is read right. O(since) is best the
    C(date) of the monitoring host's own answer to the silence (its clock, as are the alerts' times).
options:
  _input:
    description: The alerts, as either API lists them.
    type: list
    elements: dict
    required: true
  since:
    description:
      - The time from which an alert counts, as an HTTP C(Date) header, an RFC 3339 time or seconds since the epoch.
      - V(null) or empty counts every active alert of the host.
    type: raw
    required: true
  host:
    description: The value of the alerts' C(fleet_host) label.
    type: str
    required: true
  now:
    description:
      - The monitoring host's time when it answered (the C(date) of its answer), in any form O(since) takes. An alert
        of Alertmanager whose end has passed is resolved.
      - Without it, an alert of Alertmanager is resolved when its end is no later than its last update.
    type: raw
"""

EXAMPLES = r"""
- name: Wait for the alerts this host's restart raised to resolve
  ansible.builtin.uri:
    url: http://127.0.0.1:9090/api/v1/alerts
  register: raised
  until: raised.json.data.alerts | fleet.vllm.alerts_raised_since(silence.date, inventory_hostname, raised.date) | length == 0
  retries: 30
  delay: 2
"""

RETURN = r"""
_value:
  description: The names of the alerts (sorted, each once); empty when none of the host's raised since is active.
  type: list
  elements: str
"""

import datetime
import email.utils
import re

from ansible.errors import AnsibleFilterError

# RFC 3339 as Prometheus and Alertmanager write it: up to nanoseconds, Z or an offset.
RFC3339 = re.compile(r"^(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(?:\.(\d+))?([Zz]|[+-]\d\d:\d\d)$")


def _epoch(value, what):
    """Seconds since the epoch of an HTTP date, an RFC 3339 time or a number; None for an empty value."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise AnsibleFilterError("alerts_raised_since: %s must be a time, got %r" % (what, value))
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    match = RFC3339.match(text)
    if match:
        year, month, day, hour, minute, second, fraction, offset = match.groups()
        if offset in ("Z", "z"):
            zone = datetime.timezone.utc
        else:
            sign = -1 if offset[0] == "-" else 1
            zone = datetime.timezone(sign * datetime.timedelta(hours=int(offset[1:3]), minutes=int(offset[4:6])))
        moment = datetime.datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), tzinfo=zone)
        return moment.timestamp() + (float("0." + fraction) if fraction else 0.0)
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        moment = None
    if moment is None:
        raise AnsibleFilterError("alerts_raised_since: %s must be an HTTP date, an RFC 3339 time or seconds since the "
                                 "epoch, got %r" % (what, value))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()


def _active(alert, now):
    """Whether an alert of either API fires. Prometheus lists pending and firing ones; only firing counts. An alert of
    Alertmanager is resolved once its end has passed (by NOW, the monitoring host's clock, where known) or, without
    NOW, when its end is no later than its last update (a resolution Prometheus sent)."""
    if "startsAt" not in alert:
        return alert.get("state") == "firing"
    ends = _epoch(alert.get("endsAt"), "endsAt")
    if ends is None:
        return True
    reference = now if now is not None else _epoch(alert.get("updatedAt"), "updatedAt")
    return reference is None or ends > reference


def alerts_raised_since(alerts, since, host, now=None):
    if not isinstance(alerts, list) or not all(isinstance(alert, dict) for alert in alerts):
        raise AnsibleFilterError("alerts_raised_since: the input must be the list of alerts of Prometheus' "
                                 "/api/v1/alerts or Alertmanager's /api/v2/alerts, got %r" % (alerts,))
    start, moment = _epoch(since, "since"), _epoch(now, "now")
    names = set()
    for alert in alerts:
        labels = alert.get("labels") or {}
        if labels.get("fleet_host") != host or not _active(alert, moment):
            continue
        began = _epoch(alert.get("activeAt", alert.get("startsAt")), "an alert's activeAt or startsAt")
        if start is None or began is None or began >= start:
            names.add(labels.get("alertname", "?"))
    return sorted(names)


class FilterModule(object):
    def filters(self):
        return {"alerts_raised_since": alerts_raised_since}
