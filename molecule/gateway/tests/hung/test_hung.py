"""A hung engine (/health 200, completions never answer: the simulator's fault file) leaves the
gateway's rotation within the bound the role states, no request through the gateway fails after
that, and the host comes back when its engine answers again."""

import json
import os

import gateway_hosts as gw

testinfra_hosts = [f"podman://{gw.gateway()}"]


def result():
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "gateway-hang.json"), encoding="utf-8") as handle:
        return json.load(handle)


def test_a_hung_engine_leaves_rotation_within_the_stated_bound():
    data = result()
    assert data["left_after"] is not None, data["status_down"]
    # HAProxy's own timers; 2 s for reading its state every 0.5 s through podman exec.
    assert data["left_after"] <= gw.LEAVE_BOUND + 2, data


def test_no_request_through_the_gateway_fails_once_it_left():
    client = result()["client"]
    assert client["sent"] == 60
    assert (client["ok"], client["failed"], client["truncated"]) == (60, 0, 0), client["errors"]
    data = result()
    assert data["middle"]["frontend"]["hrsp_5xx"] == data["before"]["frontend"]["hrsp_5xx"]


def test_it_comes_back_when_its_engine_answers_again():
    data = result()
    assert data["back_after"] is not None, data["status_up"]
    assert data["back_after"] <= gw.CHECK_RISE * (gw.CHECK_INTERVAL + gw.CHECK_TIMEOUT) + 2, data
