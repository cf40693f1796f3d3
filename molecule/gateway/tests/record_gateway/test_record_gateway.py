"""Record HAProxy's processes and configuration on every host of the gateway scenario, for the
rerun's check (tests/deployed): a second deploy must not reload HAProxy."""

import json
import os

import fleet_hosts as fleet
import gateway_hosts as gw

testinfra_hosts = [f"podman://{gw.gateway()}"]


def test_record_haproxy_before_the_rerun():
    record = {}
    for name in fleet.instances() + [gw.gateway()]:
        stat = gw.exec_in(name, ["stat", "-c", "%i %Y %a %U:%G", gw.CONFIG]).strip()
        record[name] = {"processes": gw.haproxy_processes(name), "config": stat}
        assert record[name]["processes"], f"no HAProxy running on {name}"
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "gateway-record.json"), "w", encoding="utf-8") as handle:
        json.dump(record, handle)
