"""A node onboarded into a monitored fleet pages no one (issue 22 item 7): from the start of the onboarding
(deploy.yml --limit NEW-NODE, then deploy.yml --limit vllm_monitoring) on, no alert fired and the pager got nothing;
the next run of the monitoring's hosts scrapes the new node, every target of the three hosts is up, and their fleet
facts agree (no drift)."""

import os
import time

import fleet_hosts as fleet
import monitoring_hosts as mon


def onboard_start():
    path = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "onboard-start")
    with open(path, encoding="utf-8") as handle:
        return float(handle.read().strip())


def hosts():
    return fleet.instances() + fleet.instances("fleet_vllm_newcomers")


def up_targets(timeout=90):
    """The active targets once every one is up (or after TIMEOUT seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        targets = mon.targets()
        if (all(t["health"] == "up" for t in targets) and len(targets) == 3 * len(hosts()) + 3) or time.monotonic() > deadline:
            return targets
        time.sleep(2)


def test_the_new_node_is_scraped_and_every_target_is_up():
    targets = up_targets()
    by_job = {}
    for target in targets:
        by_job.setdefault(target["labels"]["job"], set()).add(target["labels"]["host"])
    assert by_job["vllm"] == set(hosts())
    assert by_job["haproxy"] == set(hosts())
    assert by_job["node"] == set(hosts()) | {mon.monitor()}
    assert [(t["scrapeUrl"], t["lastError"]) for t in targets if t["health"] != "up"] == []


def test_the_three_hosts_facts_agree():
    series = mon.query("fleet_vllm_info")
    assert sorted(s["metric"]["host"] for s in series) == sorted(hosts())
    # (a label whose value is empty, such as the simulator's vllm_commit, is no label in Prometheus)
    drift = {key: {s["metric"].get(key, "") for s in series} for key in ("vllm_version", "vllm_commit", "model_revision", "kv_cache_dtype", "model")}
    assert drift["vllm_version"] != {""} and drift["model"] != {""}
    assert {key: values for key, values in drift.items() if len(values) != 1} == {}, drift


def test_no_alert_fired_during_the_onboarding_and_the_pager_got_nothing():
    up_targets()
    start = onboard_start()
    time.sleep(sum(mon.intervals()))  # one more round with every target, the new node's included
    end, loaded = mon.now(), mon.loaded_at()
    assert loaded > start, "the monitoring's run did not load a new configuration"
    # pending only in the first round after the reload that added the new node
    mon.assert_quiet(start, end, loaded)
    # the new node's first start was a planned one (roll.yml): its silence was made, and is over
    silences = mon.silences()
    assert [s for s in silences if s["status"]["state"] != "expired"] == [], silences
    silenced = {m["value"] for s in silences for m in s["matchers"] if m["name"] == "fleet_host"}
    assert silenced == set(fleet.instances("fleet_vllm_newcomers")), silences
