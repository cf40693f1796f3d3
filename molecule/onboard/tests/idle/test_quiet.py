"""A healthy idle fleet pages no one (issue 22 item 7): over at least 10 minutes after Prometheus loaded the fleet's
targets, with the role's shipped settings, every target was up at every scrape, every rule was evaluated, no alert
fired, and the pager got nothing. The test waits for what is left of the 10 minutes (none when tests/hosts/molecule.sh
ran the other scenarios meanwhile)."""

import time

import fleet_hosts as fleet
import monitoring_hosts as mon

WINDOW = 600


def window():
    """(start, end): from Prometheus' configuration load to now, once that is at least WINDOW seconds and one more
    scrape and evaluation have passed."""
    scrape, evaluation = mon.intervals()
    deadline = time.monotonic() + 120
    loaded = mon.loaded_at()
    while loaded is None and time.monotonic() < deadline:
        time.sleep(2)
        loaded = mon.loaded_at()
    assert loaded is not None, "Prometheus has not scraped itself"
    wait = loaded + WINDOW + scrape + evaluation - mon.now()
    if wait > 0:
        time.sleep(wait)
    return loaded, mon.now()


def expected_targets():
    servers, monitor = fleet.instances(), mon.monitor()
    return {
        "vllm": {(name, "server") for name in servers},
        "haproxy": {(name, "server") for name in servers},
        "node": {(name, "server") for name in servers} | {(monitor, "monitoring")},
        "prometheus": {(monitor, "monitoring")},
        "alertmanager": {(monitor, "monitoring")},
    }


def test_ten_minutes_of_every_target_up_at_every_scrape():
    start, end = window()
    span = int(end - start)
    assert span >= WINDOW
    by_job = {}
    for target in mon.targets():
        by_job.setdefault(target["labels"]["job"], set()).add((target["labels"]["host"], target["labels"]["fleet_role"]))
    assert {job: hosts for job, hosts in by_job.items() if hosts} == expected_targets()
    scrape = mon.intervals()[0]
    lowest = {(s["metric"]["job"], s["metric"]["host"]): s["value"][1] for s in mon.query("min_over_time(up[%ds])" % span)}
    counts = {(s["metric"]["job"], s["metric"]["host"]): float(s["value"][1]) for s in mon.query("count_over_time(up[%ds])" % span)}
    assert len(lowest) == sum(len(hosts) for hosts in expected_targets().values()), lowest
    assert {key: value for key, value in lowest.items() if value != "1"} == {}, "down at some scrape of the window"
    # every scrape of the window happened (2 spare: the first scrape of each target comes up to one interval late)
    assert {key: n for key, n in counts.items() if n < span / scrape - 2} == {}, (span, scrape, counts)


def test_no_alert_fired_and_the_pager_got_nothing():
    start, end = window()
    groups = mon.api(mon.PROMETHEUS + "/api/v1/rules")["data"]["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert len(rules) >= 15 and [r["name"] for r in rules if r.get("health") != "ok"] == []
    # every rule group has been evaluated (a never-evaluated group shows the zero time): the quiet is the rules'
    assert {g["name"]: g["lastEvaluation"] for g in groups if g["lastEvaluation"].startswith("0001-")} == {}
    # the window starts at the load: pending only in its first round
    mon.assert_quiet(start, end, loaded=start)
