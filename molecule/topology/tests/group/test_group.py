"""After deploy.yml and its rerun: the serving group's two hosts serve one copy of the model (issue 26), the head
through its socket behind its front door, the rank headless; their engines' sockets are on the group's interface,
open to the members only; the gateway balances across the group's head and the host that serves alone."""

import json
import shlex

import fleet_hosts as fleet
import gateway_hosts as gw

testinfra_hosts = fleet.testinfra_hosts("fleet_vllm_test_group")
MASTER_PORT = 29500


def members():
    return fleet.instances("fleet_vllm_test_group")


def address(name):
    """The host's IPv4 address on eth0 (the group's interface), asked of the host."""
    shown = json.loads(gw.exec_in(name, ["ip", "-json", "-4", "address", "show", "dev", "eth0"]))
    return shown[0]["addr_info"][0]["local"]


def unit_property(host, name):
    return host.check_output("systemctl show -p %s --value %s" % (name, fleet.SERVICE))


def argv(host):
    """The engine's command line as systemd holds it (ExecStart's argv[]=...)."""
    text = unit_property(host, "ExecStart")
    return shlex.split(text.split("argv[]=", 1)[1].split(" ;", 1)[0])


def option(args, flag):
    return args[args.index(flag) + 1] if flag in args else None


def test_each_member_runs_its_rank_of_one_copy(host):
    name = fleet.name_of(host)
    rank = members().index(name)
    args = argv(host)
    assert args[1:4] == ["-m", "vllm.entrypoints.cli.main", "serve"], args
    assert option(args, "--nnodes") == "2" and option(args, "--node-rank") == str(rank), args
    assert option(args, "--pipeline-parallel-size") == "2" and option(args, "--tensor-parallel-size") == "8", args
    assert option(args, "--master-addr") == address(members()[0]) and option(args, "--master-port") == str(MASTER_PORT)
    if rank == 0:
        assert "--headless" not in args and option(args, "--uds") == fleet.ENGINE_SOCKET, args
    else:
        assert "--headless" in args and "--uds" not in args and "--port" not in args, args
    assert unit_property(host, "ActiveState").strip() == "active"


def test_the_engines_sockets_are_on_the_groups_interface_and_open_to_its_members_only(host):
    name = fleet.name_of(host)
    env = {key: value.strip('"') for key, value in (line.split("=", 1) for line in
           host.file(fleet.NCCL_ENV).content_string.splitlines() if "=" in line and not line.startswith("#"))}
    assert env["VLLM_HOST_IP"] == address(name), env
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == "eth0", env
    allowed = unit_property(host, "IPAddressAllow").split()
    assert sorted(allowed) == sorted(["127.0.0.0/8", "::1/128"] + ["%s/32" % address(m) for m in members()]), allowed
    assert sorted(unit_property(host, "IPAddressDeny").split()) == ["0.0.0.0/0", "::/0"]
    # What the engine's processes listen on (TCP): loopback, the member's own address on eth0, or - the head's
    # rendezvous store, as torch's TCPStore binds it - every address, which IPAddressAllow= narrows to the members.
    uid = host.user(fleet.group_vars().get("vllm_server_user", "vllm")).uid
    engine = host.check_output("ss -Htlne").splitlines()
    mine = [line.split()[3] for line in engine if "uid:%d " % uid in line + " "]
    assert mine, engine
    for bound in mine:
        where, port = bound.rsplit(":", 1)
        if int(port) == MASTER_PORT:
            assert members().index(name) == 0, bound
            continue
        assert where in ("127.0.0.1", "[::1]", address(name)), (bound, engine)


def test_the_gateway_balances_across_the_head_and_the_replica_and_answers():
    lb = gw.gateway()
    names = sorted(r["svname"] for r in gw.stat(lb) if r["pxname"] == gw.BACKEND and r["svname"] not in ("FRONTEND", "BACKEND"))
    # The head and the replica (the replica's machine's second instance serves a helper model, in its own backend:
    # tests/instances).
    assert names == sorted([members()[0]] + [n for n in fleet.instances() if n not in members()]), names
    body = gw.chat_body()
    answers = gw.requests_from(lb, [("127.0.0.1", 8080, "POST", "/v1/chat/completions", fleet.api_key(), body)] * 4, tls=False)
    for status, text in answers:
        assert status == 200, text
        assert json.loads(text)["choices"][0]["message"]["content"]
