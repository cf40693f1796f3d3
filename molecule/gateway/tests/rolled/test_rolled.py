"""The rolling upgrade through the gateway (side effect roll.yml): no request failed or came back
truncated, as the client counts and as HAProxy's own counters say; both hosts restarted on the new
pin and are back in rotation."""

import json
import os

import fleet_hosts as fleet
import gateway_hosts as gw

testinfra_hosts = fleet.testinfra_hosts()


def result():
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "gateway-roll.json"), encoding="utf-8") as handle:
        return json.load(handle)


def test_the_roll_succeeded_and_every_host_serves_the_new_pin(host):
    assert result()["rc"] == 0
    fleet.assert_restarted_and_serving(host, fleet.NEW_VERSION)


def test_no_request_failed_or_was_truncated_by_the_clients_count():
    client = result()["client"]
    # It ran until the roll had ended (the stop file), not until one of its own bounds.
    assert client["sent"] < result()["bounds"]["requests"] and client["seconds"] < result()["bounds"]["seconds"], client
    assert client["sent"] >= 200, client  # traffic all along the roll, not a handful
    assert client["streamed"] >= 100, client
    assert (client["failed"], client["truncated"]) == (0, 0), client["errors"]
    assert client["ok"] == client["sent"]


def test_no_request_failed_by_haproxys_own_counters():
    data = result()
    before, after = data["before"]["frontend"], data["after"]["frontend"]
    assert after["hrsp_5xx"] - before["hrsp_5xx"] == 0, (before, after)
    assert after["req_tot"] - before["req_tot"] >= data["client"]["sent"], (before, after)
    assert after["hrsp_2xx"] - before["hrsp_2xx"] >= data["client"]["ok"]


def test_each_host_was_drained_and_served_requests_on_both_sides_of_the_roll():
    data = result()
    for name in fleet.instances():
        assert int(data["after"]["servers"][name]["stot"]) > int(data["before"]["servers"][name]["stot"])
        assert data["after"]["servers"][name]["status"] == "UP"
    run = fleet.load_run("gateway-roll")
    for name in fleet.instances():
        assert run["recap"][name]["failed"] == 0


def test_both_hosts_are_back_in_rotation_at_the_gateway():
    rows = gw.stat(gw.gateway())
    for name in fleet.instances():
        assert gw.row(rows, gw.BACKEND, name)["status"] == "UP"
    state = gw.runtime(gw.gateway(), "show servers state %s" % gw.BACKEND)
    admin = {line.split()[3]: int(line.split()[6]) for line in state.splitlines()[2:] if line.strip() and not line.startswith("#")}
    assert admin == {name: 0 for name in fleet.instances()}, state  # srv_admin_state 0: ready, not drained


def test_each_engine_moved_to_its_socket_and_its_front_door_with_it(host):
    """Issue 24 point 2, the way from a release before it: converge.yml's engines listened on 127.0.0.1:8000 with the
    key; the roll restarted each on its Unix socket, and its front door went there with it before the gateway put
    the host back (no request failed, above). No TCP listener is left on the engine's port, the front door forwards
    to the socket and strips the key, and the engine holds none."""
    listening = [line.split()[3] for line in host.check_output("ss -Htln").splitlines()]
    assert [a for a in listening if a.endswith(":%d" % fleet.PORT)] == [], listening
    assert fleet.ENGINE_SOCKET in [line.split()[4] for line in host.check_output("ss -Hlx").splitlines()]
    config = host.check_output("cat %s", gw.CONFIG)
    assert "server engine unix@%s" % fleet.ENGINE_SOCKET in config and "server engine 127.0.0.1:" not in config, config
    assert "http-request del-header Authorization" in config
    secrets = host.check_output("cat %s", fleet.SECRETS_ENV)
    assert "VLLM_API_KEY" not in secrets and fleet.api_key() not in secrets
