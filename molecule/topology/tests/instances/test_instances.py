"""After deploy.yml and its rerun: topo-3 is a machine of two engine instances (issue 26 point 3), its unnamed one
(vllm.service) and the inventory host topo-3-mini (vllm@mini.service), each with the GPUs, internal ports, front door,
served directory, state and shared memory of its own, and each a backend of the gateway."""

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
    for path in ("/opt/vllm@%s/current/bin/python" % name, "%s/served@%s/%s/current/config.json" % (fleet.MODELS_ROOT, name, fleet.REPO_DIR),
                 "/var/lib/fleet-vllm@%s/vllm@%s.fingerprint" % (name, name), "/var/lib/fleet-vllm/vllm.fingerprint"):
        gw.exec_in(box, ["test", "-e", path])


def test_each_engine_keeps_its_shared_memory_apart():
    mini, box = named()
    name = fleet.host_vars(mini)["fleet_vllm_instance"]
    found = gw.exec_in(box, ["find", "/dev/shm", "-maxdepth", "2", "-name", "psm_*"]).split()
    assert [f for f in found if f.startswith("/dev/shm/fleet-vllm@%s/" % name)], found
    assert [f for f in found if f.count("/") == 3], found
    mode = gw.exec_in(box, ["stat", "-c", "%a %U", "/dev/shm/fleet-vllm@%s" % name]).split()
    assert mode == ["700", fleet.group_vars().get("vllm_server_user", "vllm")], mode


def test_the_gateway_sends_to_both_instances_on_their_own_ports():
    mini, box = named()
    lb = gw.gateway()
    rows = {r["svname"]: r for r in gw.stat(lb) if r["pxname"] == gw.BACKEND}
    assert rows[mini]["addr"].endswith(":8081") and rows[box]["addr"].endswith(":8080"), (rows[mini]["addr"], rows[box]["addr"])
    assert rows[mini]["status"].startswith("UP") and rows[box]["status"].startswith("UP")
