"""After deploy.yml and its rerun: topo-3 is a machine of two engine instances (issue 26 point 3), its unnamed one
(vllm.service) and the inventory host topo-3-mini (vllm@mini.service), each with the GPUs, internal ports, front door,
served directory, state and shared memory of its own, and each a backend of the gateway. mini serves a helper model
(the tiny DeepSeek-V3 checkpoint as "tiny-mla"), deployed by the same run: its own snapshot beside the fleet's on the
machine, its own backend at the gateway, which sends it the requests that name it."""

import json
import shlex
import subprocess

import fleet_hosts as fleet
import gateway_hosts as gw


def named():
    (mini, box), = fleet.named_instances().items()
    return mini, box


def units():
    """{inventory host: its engine unit on the machine}."""
    mini, box = named()
    return {box: "vllm.service", mini: "vllm@%s.service" % fleet.host_vars(mini)["fleet_vllm_instance"]}


def show(box, unit, prop):
    return gw.exec_in(box, ["systemctl", "show", "-p", prop, "--value", unit]).strip()


def environ(box, pid):
    raw = gw.exec_in(box, ["cat", "/proc/%s/environ" % pid])
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


def argv(box, unit):
    text = show(box, unit, "ExecStart")
    return shlex.split(text.split("argv[]=", 1)[1].split(" ;", 1)[0])


def listeners(box, unit):
    """The TCP ports the unit's processes listen on (ss's users column, ps's unit column). ss reads other users'
    /proc/PID/fd, which root in a container may do only with CAP_SYS_PTRACE: podman exec --privileged."""
    pids = {line.split()[0] for line in gw.exec_in(box, ["ps", "-e", "-o", "pid=,unit="]).splitlines()
            if line.split()[1:] == [unit]}
    ports = set()
    shown = subprocess.run(["podman", "exec", "--privileged", box, "ss", "-Htlnp"], check=True, capture_output=True,
                           text=True).stdout
    for line in shown.splitlines():
        if any("pid=%s," % pid in line for pid in pids):
            ports.add(int(line.split()[3].rsplit(":", 1)[1]))
    return ports


def test_each_instance_runs_its_own_unit_on_its_own_gpus():
    mini, box = named()
    seen = []
    for name, unit in units().items():
        assert show(box, unit, "ActiveState") == "active", unit
        gpus = fleet.host_vars(name)["fleet_vllm_instance_gpus"]
        env = environ(box, show(box, unit, "MainPID"))
        assert env.get("CUDA_VISIBLE_DEVICES") == ",".join(gpus), (unit, env.get("CUDA_VISIBLE_DEVICES"))
        args = argv(box, unit)
        assert args[args.index("--tensor-parallel-size") + 1] == "4", args
        seen.append(args[args.index("--uds") + 1])
        # The simulator's own line (tests/simulator/README.md, "Instances"): the GPUs its CUDA would see.
        journal = gw.exec_in(box, ["journalctl", "-u", unit, "-b", "-o", "cat", "--no-pager"])
        assert all(gpu in journal for gpu in gpus), (unit, journal[-2000:])
    assert len(set(seen)) == 2, seen
    assert not set(fleet.host_vars(mini)["fleet_vllm_instance_gpus"]) & set(fleet.host_vars(box)["fleet_vllm_instance_gpus"])


def test_the_named_instance_takes_its_internal_ports_from_its_block_and_the_other_not():
    mini, box = named()
    base = int(fleet.host_vars(mini)["fleet_vllm_instance_port_base"])
    nccl = gw.exec_in(box, ["cat", "/etc/fleet-vllm/nccl@%s.env" % fleet.host_vars(mini)["fleet_vllm_instance"]])
    assert 'VLLM_PORT="%d"' % base in nccl or "VLLM_PORT=%d" % base in nccl, nccl
    block = set(range(base, base + 32))
    own = listeners(box, units()[mini])
    assert own & block, (own, base)
    assert not listeners(box, "vllm.service") & block


def test_each_instance_has_its_own_front_door_and_paths():
    mini, box = named()
    name = fleet.host_vars(mini)["fleet_vllm_instance"]
    assert show(box, "fleet-vllm-frontdoor@%s.service" % name, "ActiveState") == "active"
    assert 8081 in listeners(box, "fleet-vllm-frontdoor@%s.service" % name)
    assert 8080 in listeners(box, "haproxy.service") and 8081 not in listeners(box, "haproxy.service")
    config = gw.exec_in(box, ["cat", "/etc/haproxy/fleet-vllm-frontdoor@%s.cfg" % name])
    assert "unix@/run/fleet-vllm/vllm-%s/engine.sock" % name in config
    helper = fleet.host_vars(mini)["fleet_vllm_model_repo"].replace("/", "--")
    for path in ("/opt/vllm@%s/current/bin/python" % name, "%s/served@%s/%s/current/config.json" % (fleet.MODELS_ROOT, name, helper),
                 "%s/served/%s/current/config.json" % (fleet.MODELS_ROOT, fleet.REPO_DIR),
                 "/var/lib/fleet-vllm@%s/vllm@%s.fingerprint" % (name, name), "/var/lib/fleet-vllm/vllm.fingerprint"):
        gw.exec_in(box, ["test", "-e", path])


def test_the_helper_model_has_its_own_snapshot_on_the_machine_and_mini_serves_it():
    mini, box = named()
    helper = fleet.host_vars(mini)["fleet_vllm_model_repo"]
    listed = gw.exec_in(box, ["ls", "%s/pristine" % fleet.MODELS_ROOT]).split()
    assert sorted(listed) == sorted([fleet.REPO_DIR, helper.replace("/", "--")]), listed
    args = argv(box, units()[mini])
    assert args[args.index("--served-model-name") + 1] == fleet.host_vars(mini)["vllm_server_served_model_name"], args
    assert "/served@mini/%s/" % helper.replace("/", "--") in args[args.index("--model") + 1], args


def test_each_engine_keeps_its_shared_memory_apart():
    mini, box = named()
    name = fleet.host_vars(mini)["fleet_vllm_instance"]
    found = gw.exec_in(box, ["find", "/dev/shm", "-maxdepth", "2", "-name", "psm_*"]).split()
    assert [f for f in found if f.startswith("/dev/shm/fleet-vllm@%s/" % name)], found
    assert [f for f in found if f.count("/") == 3], found
    mode = gw.exec_in(box, ["stat", "-c", "%a %U", "/dev/shm/fleet-vllm@%s" % name]).split()
    assert mode == ["700", fleet.group_vars().get("vllm_server_user", "vllm")], mode


def test_the_gateway_sends_to_both_instances_on_their_own_ports_each_in_its_models_backend():
    mini, box = named()
    lb = gw.gateway()
    helper = fleet.host_vars(mini)["vllm_server_served_model_name"]
    rows = {(r["pxname"], r["svname"]): r for r in gw.stat(lb)}
    assert rows[(gw.BACKEND + ":" + helper, mini)]["addr"].endswith(":8081"), rows
    assert rows[(gw.BACKEND, box)]["addr"].endswith(":8080"), rows
    assert rows[(gw.BACKEND + ":" + helper, mini)]["status"].startswith("UP") and rows[(gw.BACKEND, box)]["status"].startswith("UP")
    assert (gw.BACKEND, mini) not in rows and (gw.BACKEND + ":" + helper, box) not in rows


def test_the_gateway_routes_each_request_by_the_model_it_names():
    """Through the gateway: a completion naming the helper model is answered (only mini's engine serves it: another
    engine would answer 404), one naming the fleet's model or none is too, one naming a model nobody serves gets the
    engine's 404; the gateway lists both models."""
    mini, box = named()
    lb = gw.gateway()
    helper, kimi = fleet.host_vars(mini)["vllm_server_served_model_name"], fleet.served_name()
    before = {r["svname"]: int(r["stot"]) for r in gw.stat(lb) if gw.is_fleet_backend(r["pxname"])}

    def chat(model):
        body = {"max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
        if model:
            body["model"] = model
        return ("127.0.0.1", 8080, "POST", "/v1/chat/completions", fleet.api_key(), json.dumps(body))

    answers = gw.requests_from(lb, [chat(helper)] * 3 + [chat(kimi)] * 3 + [chat(None), chat("no-such-model")], tls=False)
    for status, text in answers[:7]:
        assert status == 200, text
    assert [json.loads(text)["model"] for dummy, text in answers[:6]] == [helper] * 3 + [kimi] * 3
    assert answers[7][0] == 404 and "no-such-model" in answers[7][1], answers[7]
    after = {r["svname"]: int(r["stot"]) for r in gw.stat(lb) if gw.is_fleet_backend(r["pxname"])}
    assert after[mini] - before[mini] >= 3, (before, after)
    (status, text), = gw.requests_from(lb, [("127.0.0.1", 8080, "GET", "/v1/models", fleet.api_key(), "")], tls=False)
    assert status == 200 and [card["id"] for card in json.loads(text)["data"]] == [kimi, helper], text
