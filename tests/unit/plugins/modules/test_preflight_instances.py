"""fleet.vllm.preflight for one of several engine instances on a machine (issue 26 point 3): the instance's GPUs by UUID
(MIG devices included), its ports and its block of internal ports (vLLM's VLLM_PORT and up), the machine's other
engine units, and the machine's ID.

Run as Ansible runs a module on the fake host of tests/helpers/fake_host.py, with the test-fixture nvidia-smi
(tests/fixtures/bin/nvidia-smi, its scenario rtx-pro-6000-x4-mig for MIG). The fake procfs gets TCP listeners as
the kernel prints them in /proc/net/tcp and tcp6 (addresses in hex, in the host's byte order; state 0A is LISTEN),
the processes that hold them (/proc/PID/fd links ``socket:[INODE]``, /proc/PID/cgroup, /proc/PID/comm) and the
ephemeral port range; the units' directory holds unit files and their environment files.
"""

from __future__ import annotations

import errno
import os
import subprocess

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils import _instances
from ansible_collections.fleet.vllm.plugins.module_utils._instances import (
    cgroup_unit,
    mig_memory_mib,
    parse_environment_file,
    parse_list_gpus,
    socket_owners,
    split_words,
    tcp_listeners,
    unit_environment,
)

from conftest import FIXTURES
from tests.helpers.fake_host import FakeHost
# The fixture gpu_info (what fleet.vllm.gpu_info returns for a scenario of the fixture nvidia-smi), shared.
from test_preflight import gpu_info  # noqa: F401  pylint: disable=unused-import

FAKE_SMI = FIXTURES / "bin" / "nvidia-smi"
SCENARIOS = FIXTURES / "nvidia-smi"
MIG_SCENARIO = "rtx-pro-6000-x4-mig"
PRO_SE = "NVIDIA RTX PRO 6000 Blackwell Server Edition"

# rtx-pro-6000-x8: GPUs 0-3 on socket 0, 4-7 on socket 1
X8 = ["GPU-2c3e7876-b74a-57b3-94a4-1b4d866fd427", "GPU-0d2261a5-0a7f-5a5d-92a9-a81b02a1a4e6",
      "GPU-b692f93d-b6f3-5fed-b2f0-eb5dda32afb6", "GPU-0856f067-669f-59e6-a511-70cade1abdc0",
      "GPU-9bb2460f-3aa9-59ed-962e-8ecd72cfc046", "GPU-ae7facef-2874-54c6-8a16-decae44ba7fd",
      "GPU-fb4ce638-25b5-5192-ac85-30c12e36d414", "GPU-962a9b24-55da-5a51-b225-b0ace23f6d01"]
# rtx-pro-6000-x4-mig: GPU 3 in MIG mode
X4 = ["GPU-7a41c0d2-3e58-5b19-8c6f-2d0e9b4a1f73", "GPU-c93e2b17-84d5-5f2a-a0b8-6e1f47d3c925",
      "GPU-1f6d8a4e-b2c7-5d03-9e15-8a4c2f7b6d10", "GPU-e2b5974c-6a1d-5c8e-b3f0-47d9a81c0e6b"]
MIG_2G = "MIG-5b0e3c91-d7a2-5f64-8e1b-c3a90f24d7e8"
MIG_1G = "MIG-a8d21f6c-0e94-5b37-9c52-71fe3b6d08a4"
MIG_1G_B = "MIG-3c7f9e05-b16a-5d48-a2e3-94b0d5c1f762"
NO_SUCH_GPU = "GPU-00000000-0000-5000-8000-000000000000"
NO_SUCH_MIG = "MIG-00000000-0000-5000-8000-000000000000"

GPUS_VAR = "fleet_vllm_instance_gpus"
BLOCK_VAR = "fleet_vllm_instance_port_base"
# what the vllm_preflight role passes: the shared variables' names
VARIABLES = {"gpus": GPUS_VAR, "port_block": BLOCK_VAR}


# ---------------------------------------------------------------------------- fakes


class FakeProc(object):
    """TCP listeners and the processes that hold them, in a fake procfs."""

    def __init__(self, proc):
        self.proc = proc
        self.lines = {"tcp": [], "tcp6": []}
        self.inode = 40000
        self.write()

    def write(self):
        header = {"tcp": "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode",
                  "tcp6": "  sl  local_address                         remote_address                        st tx_queue "
                          "rx_queue tr tm->when retrnsmt   uid  timeout inode"}
        for name, lines in self.lines.items():
            path = self.proc / "net" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join([header[name]] + lines) + "\n")

    def listen(self, port, pid=None, unit=None, comm="python3", address="0.0.0.0", state="0A", cgroup=None):
        """A socket on ``port`` held by process ``pid`` (none: no process holds it here) of systemd ``unit``."""
        self.inode += 1
        if ":" in address:
            packed = _ipv6_hex(address)
            name, remote = "tcp6", "0" * 32
        else:
            packed = "".join("%02X" % int(part) for part in reversed(address.split(".")))
            name, remote = "tcp", "0" * 8
        lines = self.lines[name]
        lines.append("%4d: %s:%04X %s:0000 %s 00000000:00000000 00:00000000 00000000     0        0 %d 1 "
                     "0000000000000000 100 0 0 10 0" % (len(lines), packed, port, remote, state, self.inode))
        self.write()
        if pid is not None:
            self.process(pid, unit=unit, comm=comm, cgroup=cgroup)
            fd_dir = self.proc / str(pid) / "fd"
            fd = len(os.listdir(fd_dir)) + 3
            (fd_dir / str(fd)).symlink_to("socket:[%d]" % self.inode)
        return self.inode

    def process(self, pid, unit=None, comm="python3", cgroup=None):
        base = self.proc / str(pid)
        (base / "fd").mkdir(parents=True, exist_ok=True)
        if not (base / "fd" / "0").exists():
            (base / "fd" / "0").symlink_to("/dev/null")
        (base / "comm").write_text(comm + "\n")
        if cgroup is None:
            cgroup = "0::/system.slice/%s\n" % unit if unit else "0::/\n"  # a container's cgroup namespace
        (base / "cgroup").write_text(cgroup)

    def ephemeral(self, low, high, reserved=""):
        ipv4 = self.proc / "sys" / "net" / "ipv4"
        ipv4.mkdir(parents=True, exist_ok=True)
        (ipv4 / "ip_local_port_range").write_text("%d\t%d\n" % (low, high))
        (ipv4 / "ip_local_reserved_ports").write_text(reserved + "\n")


def _ipv6_hex(address):
    import ipaddress  # pylint: disable=import-outside-toplevel
    raw = ipaddress.IPv6Address(address).packed
    return "".join(raw[i:i + 4][::-1].hex().upper() for i in range(0, 16, 4))


@pytest.fixture
def host(tmp_path):
    fake = FakeHost(tmp_path / "host")
    fake.units = tmp_path / "host" / "units"
    fake.units.mkdir()
    fake.etc = tmp_path / "host" / "etc"
    fake.etc.mkdir()
    (fake.etc / "machine-id").write_text("4f1c2e8a9b7d4c6e8f0a1b2c3d4e5f60\n")
    return fake


@pytest.fixture
def proc(host):
    fake = FakeProc(host.proc)
    fake.ephemeral(32768, 60999)
    return fake


@pytest.fixture
def preflight(run_module, host, gpu_info):
    """preflight(scenario or gpu_info dict, **options): the units' directory and machine-id of the fake host, the
    fixture nvidia-smi on its scenario, the role's variable names."""

    def run(scenario="rtx-pro-6000-x8", check=False, **options):
        facts = gpu_info(scenario) if isinstance(scenario, str) else scenario
        options.setdefault("units_dir", str(host.units))
        options.setdefault("machine_id_file", str(host.etc / "machine-id"))
        options.setdefault("variables", VARIABLES)
        options.setdefault("nvidia_smi", str(FAKE_SMI))
        env = dict(host.env(), FLEET_VLLM_FAKE_GPUS=scenario if isinstance(scenario, str) else MIG_SCENARIO)
        return run_module("preflight", host.args(facts, **options), check=check, env=env)

    return run


def problems_of(run):
    assert run.rc in (0, 1) and "problems" in run.result, run
    return run.result["problems"]


def only_problem(run):
    assert run.failed and len(run.result["problems"]) == 1, run.result.get("problems", run)
    return run.result["problems"][0]


def unit_file(host, name, *lines, dropins=()):
    path = host.units / name
    path.write_text("[Unit]\nDescription=vLLM\n\n[Service]\n%s\n\n[Install]\nWantedBy=multi-user.target\n"
                    % "\n".join(lines))
    for number, text in enumerate(dropins):
        conf = host.units / (name + ".d") / ("%02d.conf" % number)
        conf.parent.mkdir(exist_ok=True)
        conf.write_text("[Service]\n" + text + "\n")
    return path


# ---------------------------------------------------------------------------- without instances: as before


def test_without_the_new_options_nothing_changes_but_the_machine_id(preflight, host):
    run = preflight()
    assert not run.failed, run
    result = run.result
    assert result["instances"] == {}
    assert result["machine_id"] == "4f1c2e8a9b7d4c6e8f0a1b2c3d4e5f60"
    assert result["measured"]["ports"] == [] and "port_block" not in result["measured"]
    assert "selected" not in result["measured"]["gpus"] and result["gpu_info"]["count"] == 8
    assert result["msg"].startswith("8x %s (12.0)" % PRO_SE)


def test_an_unreadable_machine_id_is_empty(preflight, host):
    assert preflight(machine_id_file=str(host.etc / "nope")).result["machine_id"] == ""


# ---------------------------------------------------------------------------- the instance's GPUs


def test_the_checks_and_gpu_info_are_the_instances(preflight, gpu_info):
    """Two GPUs of eight, one per socket: tensor parallel 2 passes, the topology is theirs (one SYS pair)."""
    run = preflight(gpus=[X8[4], X8[0]], tensor_parallel_size=2)
    assert not run.failed, run
    info = run.result["gpu_info"]
    host_info = gpu_info("rtx-pro-6000-x8")
    assert info["count"] == 2 and [gpu["index"] for gpu in info["gpus"]] == [0, 4]
    assert info["gpus"] == [host_info["gpus"][0], host_info["gpus"][4]]
    assert info["models"] == [PRO_SE] and info["model"] == PRO_SE and info["compute_capabilities"] == ["12.0"]
    assert info["memory_total_mib_min"] == 97887
    assert info["topology"]["pairs"] == [{"gpus": [0, 4], "link": "SYS", "type": "pcie", "nvlinks": 0}]
    assert info["topology"]["link_types"] == ["SYS"] and info["pcie_only"] is True and info["interconnect"] == "pcie"
    assert sorted(info["topology"]["matrix"]) == ["GPU0", "GPU4", "NIC0", "NIC1"]
    assert sorted(info["topology"]["matrix"]["NIC0"]) == ["GPU0", "GPU4", "NIC0", "NIC1"]
    assert info["driver_version"] == "580.95.05" and info["cuda_version"] == "13.0"
    gpus = run.result["measured"]["gpus"]
    assert gpus["selected"] == [X8[4], X8[0]]
    assert (gpus["count"], gpus["needed"], gpus["pairs"], gpus["sys_pairs"], gpus["link_types"]) == (2, 2, 1, 1, ["SYS"])
    assert run.result["msg"].startswith("instance of 2x %s (12.0), driver 580.95.05, CUDA 13.0, PCIe only (SYS);"
                                        % PRO_SE), run.result["msg"]


def test_one_socket_has_node_links_only(preflight):
    run = preflight(gpus=[X8[1], X8[2], X8[3], X8[0]], tensor_parallel_size=4)
    assert not run.failed, run
    assert run.result["gpu_info"]["topology"]["link_types"] == ["NODE"]
    assert len(run.result["gpu_info"]["topology"]["pairs"]) == 6
    assert not any("SYS" in warning for warning in run.result.get("warnings") or [] if isinstance(warning, str))


def test_the_gpu_count_check_is_of_the_instance(preflight):
    problem = only_problem(preflight(gpus=X8[:2]))
    assert problem == ("8 GPUs needed for vllm_preflight_tensor_parallel_size=8 x vllm_preflight_pipeline_parallel_size=1, "
                       "this host has 2: lower them or use another host")


def test_a_gpu_the_host_does_not_have(preflight):
    run = preflight(gpus=[X8[0], NO_SUCH_GPU], tensor_parallel_size=1)
    problem = only_problem(run)
    assert problem.startswith("%s has %s, not among the GPUs of this host (GPU 0 %s, GPU 1 %s, "
                              % (GPUS_VAR, NO_SUCH_GPU, X8[0], X8[1]))
    assert problem.endswith("GPU 7 %s): list the UUIDs `nvidia-smi -L` prints on this host" % X8[7])
    assert run.result["gpu_info"]["count"] == 1


@pytest.mark.parametrize("gpus, msg", [
    pytest.param(["0", "1"], "%s has 0, a GPU index: list the instance's GPUs by the UUIDs `nvidia-smi -L` prints "
                 "(GPU-... for a GPU, MIG-... for a MIG device); an index names another GPU after a reboot or a driver "
                 "change" % GPUS_VAR, id="index"),
    pytest.param([X8[0], "3"], "%s has 3, a GPU index" % GPUS_VAR, id="index-after-a-uuid"),
    pytest.param(["GPU-2c3e7876"], "%s has 'GPU-2c3e7876', which is not a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-"
                 "xxxxxxxxxxxx) nor a MIG device UUID (MIG- and the same shape): list the instance's GPUs by the UUIDs "
                 "`nvidia-smi -L` prints; an index names another GPU after a reboot or a driver change" % GPUS_VAR,
                 id="short"),
    pytest.param(["MIG-GPU-2c3e7876-b74a-57b3-94a4-1b4d866fd427/1/0"], "which is not a GPU UUID", id="old-mig-name"),
    pytest.param([" " + X8[0]], "which is not a GPU UUID", id="space"),
    pytest.param(["GPU-2c3e7876-b74a-57b3-94a4-1b4d866fd42g"], "which is not a GPU UUID", id="not-hex"),
    pytest.param([X8[0], X8[0].upper()], "%s lists %s twice: list each of the instance's "
                 "GPUs once" % (GPUS_VAR, X8[0].upper()), id="twice"),
])
def test_gpus_that_are_not_uuids_fail(preflight, gpus, msg):
    run = preflight(gpus=gpus, tensor_parallel_size=1)
    assert run.failed and run.result["measured"] == {} and run.result["problems"] == [], run
    assert run.result["machine_id"] == "4f1c2e8a9b7d4c6e8f0a1b2c3d4e5f60"
    assert msg in run.result["msg"], run.result["msg"]


def test_messages_name_the_option_without_the_roles_names(preflight):
    run = preflight(gpus=["0"], variables={})
    assert run.result["msg"].startswith("vllm_preflight_gpus has 0, a GPU index")


def test_gpus_on_the_cpu_platform_fail(preflight):
    run = preflight(gpus=[X8[0]], platform="cpu", tensor_parallel_size=1)
    assert run.failed
    assert run.result["msg"] == "%s lists GPUs, but vllm_preflight_platform=cpu has none to give: empty it" % GPUS_VAR


# ---------------------------------------------------------------------------- MIG


def test_one_mig_device_is_the_instances_one_gpu(preflight, gpu_info):
    run = preflight(MIG_SCENARIO, gpus=[MIG_1G], tensor_parallel_size=1, model_size_bytes=10 * 10 ** 9)
    assert not run.failed, run
    info = run.result["gpu_info"]
    parent = gpu_info(MIG_SCENARIO)["gpus"][3]
    entry = dict(parent, name=PRO_SE + " MIG 1g.24gb", uuid=MIG_1G, memory_total_mib=22888, mig_profile="1g.24gb",
                 parent_uuid=X4[3])
    assert info["gpus"] == [entry]
    assert info["count"] == 1 and info["model"] == PRO_SE + " MIG 1g.24gb" and info["models"] == [info["model"]]
    assert info["memory_total_mib_min"] == 22888 == 24 * 1000 ** 3 // 1024 ** 2
    assert info["compute_capabilities"] == ["12.0"]
    assert info["topology"]["pairs"] == [] and info["interconnect"] == "none" and info["pcie_only"] is True
    assert run.result["measured"]["gpus"]["selected"] == [MIG_1G]


def test_the_weights_are_checked_against_the_mig_devices_memory(preflight):
    run = preflight(MIG_SCENARIO, gpus=[MIG_1G], tensor_parallel_size=1, model_size_bytes=40 * 10 ** 9,
                    fail_on_problems=False)
    warnings = [w["event"]["msg"] if isinstance(w, dict) else w for w in run.result.get("warnings") or []]
    assert any("do not fit in the 22888 MiB of a GPU" in warning for warning in warnings), warnings


def test_without_gpu_info_the_nvidia_smi_it_read_lists_the_mig_devices(run_module, host):
    args = host.args(None, nvidia_smi=str(FAKE_SMI), gpus=[MIG_2G], tensor_parallel_size=1, units_dir=str(host.units))
    del args["gpu_info"]
    run = run_module("preflight", args, env=dict(host.env(), FLEET_VLLM_FAKE_GPUS=MIG_SCENARIO))
    assert not run.failed, run
    assert run.result["gpu_info"]["gpus"][0]["uuid"] == MIG_2G
    assert run.result["gpu_info"]["memory_total_mib_min"] == 48 * 1000 ** 3 // 1024 ** 2


def test_whole_gpus_of_a_mig_host_need_no_nvidia_smi(preflight, tmp_path):
    run = preflight(MIG_SCENARIO, gpus=X4[:2], tensor_parallel_size=2, nvidia_smi=str(tmp_path / "none"))
    assert not run.failed, run
    assert run.result["gpu_info"]["topology"]["link_types"] == ["NODE"]


def test_an_unknown_mig_device(preflight):
    problem = only_problem(preflight(MIG_SCENARIO, gpus=[NO_SUCH_MIG], tensor_parallel_size=1))
    assert problem == (
        "%s has MIG device %s, which `nvidia-smi -L` does not list on this host (its MIG devices: %s (2g.48gb on GPU 3), "
        "%s (1g.24gb on GPU 3), %s (1g.24gb on GPU 3)): list one it lists, or create it (nvidia-smi mig -cgi PROFILE -C)"
        % (GPUS_VAR, NO_SUCH_MIG, MIG_2G, MIG_1G, MIG_1G_B))


def test_a_mig_device_on_a_host_without_mig(preflight):
    problem = only_problem(preflight("rtx-pro-6000-x8", gpus=[NO_SUCH_MIG], tensor_parallel_size=1))
    assert "(its MIG devices: none, MIG is off on every GPU)" in problem


def test_two_mig_devices(preflight):
    run = preflight(MIG_SCENARIO, gpus=[MIG_1G, MIG_1G_B], tensor_parallel_size=2)
    assert not run.failed or len(run.result["problems"]) == 1, run.result["problems"]
    assert problems_of(run) == [
        "%s has 2 MIG devices (%s, %s): CUDA enumerates a single MIG device per process (NVIDIA's MIG User Guide, "
        "\"CUDA Device Enumeration\"), so the engine would see one of them: give the instance one MIG device, or whole "
        "GPUs" % (GPUS_VAR, MIG_1G, MIG_1G_B)]


def test_mig_beside_whole_gpus(preflight):
    problems = problems_of(preflight(MIG_SCENARIO, gpus=[X4[0], MIG_1G], tensor_parallel_size=2))
    assert problems == [
        "%s mixes MIG devices (%s) with whole GPUs (%s): CUDA enumerates a single MIG device per process (NVIDIA's MIG "
        "User Guide, \"CUDA Device Enumeration\"): list either whole GPUs or one MIG device" % (GPUS_VAR, MIG_1G, X4[0])]


def test_an_nvidia_smi_that_cannot_list_is_a_problem(preflight, gpu_info, host):
    run = preflight(gpu_info(MIG_SCENARIO), gpus=[MIG_1G], tensor_parallel_size=1, fail_on_problems=False)
    assert not run.failed and run.result["problems"] == [], run
    smi = host.bin / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'Failed to initialize NVML: Driver/library version mismatch'\nexit 18\n")
    smi.chmod(0o755)
    run = preflight(gpu_info(MIG_SCENARIO), gpus=[MIG_1G], tensor_parallel_size=1, nvidia_smi=str(smi))
    assert only_problem(run) == ("cannot look up the MIG devices of %s: `%s -L` exited with 18: Failed to initialize "
                                 "NVML: Driver/library version mismatch" % (GPUS_VAR, smi))


# ---------------------------------------------------------------------------- ports


PORTS = [{"name": "vllm_server_port", "port": 8001}, {"name": "vllm_gateway_frontdoor_port", "port": 8443},
         {"name": "fleet_vllm_metrics_port", "port": 9401}]
BLOCK = {"name": BLOCK_VAR, "start": 29500, "size": 32}


def ports_run(preflight, **options):
    options.setdefault("ports", PORTS)
    options.setdefault("port_block", BLOCK)
    options.setdefault("own_units", ["vllm@a.service", "vllm-gateway@a.service"])
    options.setdefault("unit", "vllm@a.service")
    return preflight(gpus=X8[:2], tensor_parallel_size=2, **options)


def test_free_ports_and_the_instances_own_listeners_pass(preflight, proc):
    proc.listen(8001, pid=4242, unit="vllm@a.service", comm="vllm")
    proc.listen(8001, pid=4242, unit="vllm@a.service", comm="vllm", address="::")
    proc.listen(29500, pid=4250, unit="vllm@a.service", comm="VLLM::EngineCor", address="127.0.0.1")
    proc.listen(8443, pid=777, unit="vllm-gateway@a.service", comm="haproxy")
    proc.listen(8002, pid=999, unit="vllm@b.service", comm="vllm")     # not ours, not asked for
    proc.listen(9401, state="01")                                      # an established connection, not a listener
    run = ports_run(preflight)
    assert not run.failed, run
    assert run.result["measured"]["ports"] == [
        {"port": 8001, "names": ["vllm_server_port"], "address": "0.0.0.0", "pid": 4242, "comm": "vllm",
         "unit": "vllm@a.service", "own": True},
        {"port": 29500, "names": ["internal port block %s=29500, ports 29500-29531" % BLOCK_VAR], "address": "127.0.0.1",
         "pid": 4250, "comm": "VLLM::EngineCor", "unit": "vllm@a.service", "own": True},
        {"port": 8443, "names": ["vllm_gateway_frontdoor_port"], "address": "0.0.0.0", "pid": 777, "comm": "haproxy",
         "unit": "vllm-gateway@a.service", "own": True},
        {"port": 8001, "names": ["vllm_server_port"], "address": "::", "pid": 4242, "comm": "vllm",
         "unit": "vllm@a.service", "own": True},
    ]
    assert run.result["measured"]["port_block"] == {"name": BLOCK_VAR, "start": 29500, "size": 32, "last": 29531,
                                                    "ephemeral_range": [32768, 60999]}


def test_a_port_another_service_holds(preflight, proc):
    proc.listen(8001, pid=4242, unit="jupyter.service", comm="jupyter-lab", address="::")
    assert only_problem(ports_run(preflight)) == (
        "port 8001 (vllm_server_port) is taken by jupyter.service (pid 4242, jupyter-lab): choose another "
        "vllm_server_port, or stop jupyter.service")


def test_a_port_of_the_block_another_process_holds(preflight, proc):
    proc.listen(29517, pid=5150, comm="node", address="10.0.0.5")
    assert only_problem(ports_run(preflight)) == (
        "port 29517 (internal port block %s=29500, ports 29500-29531) is taken by a process outside the systemd "
        "services (pid 5150, node): choose another %s" % (BLOCK_VAR, BLOCK_VAR))


def test_the_unit_of_a_process_on_cgroup_v1(preflight, proc):
    proc.listen(9401, pid=31, comm="prometheus-node", cgroup=(
        "12:pids:/system.slice/node-exporter.service\n11:cpu,cpuacct:/system.slice/node-exporter.service\n"
        "1:name=systemd:/system.slice/node-exporter.service\n0::/system.slice/other.service\n"))
    assert only_problem(ports_run(preflight)).startswith(
        "port 9401 (fleet_vllm_metrics_port) is taken by node-exporter.service (pid 31, prometheus-node): ")


def test_a_listener_no_process_here_holds(preflight, proc):
    inode = proc.listen(8443)
    assert only_problem(ports_run(preflight)) == (
        "port 8443 (vllm_gateway_frontdoor_port) is taken by a process this module cannot see (socket inode %d, held "
        "by no process of this PID namespace, such as a container's): choose another vllm_gateway_frontdoor_port" % inode)
    listener = ports_run(preflight, fail_on_problems=False).result["measured"]["ports"][0]
    assert (listener["pid"], listener["comm"], listener["unit"], listener["own"]) == (None, None, None, False)


def test_a_listener_whose_process_cannot_be_read(proc, monkeypatch):
    """As a user other than root, other users' /proc/PID/fd cannot be listed (EACCES)."""
    proc.process(4242, unit="jupyter.service")
    inode = proc.listen(8001)
    real = os.listdir

    def listdir(path):
        if str(path).endswith(os.path.join("4242", "fd")):
            raise OSError(errno.EACCES, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(_instances.os, "listdir", listdir)
    assert socket_owners(str(proc.proc), [inode]) == ({}, 1)
    measured, problems = _instances.port_findings(str(proc.proc), PORTS, None, [])
    assert problems == [
        "port 8001 (vllm_server_port) is taken by a process this module cannot see (socket inode %d; the open files of "
        "1 processes could not be read): run the preflight as root (become) to name it, or choose another "
        "vllm_server_port" % inode]
    assert measured["listeners"][0]["pid"] is None


def test_two_ports_alike_and_a_port_inside_the_block(preflight, proc):
    ports = PORTS + [{"name": "vllm_gateway_backend_port", "port": 8001}, {"name": "vllm_probe_port", "port": 29531}]
    assert problems_of(ports_run(preflight, ports=ports)) == [
        "vllm_server_port and vllm_gateway_backend_port are all 8001: give each its own port",
        "port 29531 (vllm_probe_port) is inside the block of the instance's internal ports (%s=29500, ports "
        "29500-29531), which vLLM takes its internal ports from (VLLM_PORT and up): choose vllm_probe_port outside it, "
        "or move %s" % (BLOCK_VAR, BLOCK_VAR)]


def test_a_port_inside_the_block_held_by_another_names_both(preflight, proc):
    proc.listen(29510, pid=88, unit="redis.service", comm="redis-server")
    problems = problems_of(ports_run(preflight, ports=PORTS + [{"name": "vllm_probe_port", "port": 29510}]))
    assert problems[-1] == (
        "port 29510 (vllm_probe_port; internal port block %s=29500, ports 29500-29531) is taken by redis.service (pid "
        "88, redis-server): choose another vllm_probe_port or %s, or stop redis.service" % (BLOCK_VAR, BLOCK_VAR))


@pytest.mark.parametrize("block, reserved, overlap", [
    pytest.param({"start": 32760, "size": 32}, "", (24, 32768, 32791), id="straddles-the-low-end"),
    pytest.param({"start": 40000, "size": 32}, "", (32, 40000, 40031), id="inside"),
    pytest.param({"start": 60990, "size": 32}, "", (10, 60990, 60999), id="straddles-the-high-end"),
    pytest.param({"start": 40000, "size": 32}, "8080,39990-40020", (11, 40021, 40031), id="partly-reserved"),
    pytest.param({"start": 40000, "size": 32}, "40000-40031", None, id="reserved"),
    pytest.param({"start": 32736, "size": 32}, "", None, id="just-below"),
    pytest.param({"start": 61000, "size": 32}, "", None, id="just-above"),
])
def test_the_block_outside_the_ephemeral_range(preflight, proc, block, reserved, overlap):
    proc.ephemeral(32768, 60999, reserved)
    run = ports_run(preflight, port_block=dict(block, name=BLOCK_VAR))
    if overlap is None:
        assert not run.failed, run
        return
    last = block["start"] + block["size"] - 1
    assert only_problem(run) == (
        "the internal port block %s=%d, ports %d-%d is inside the kernel's ephemeral port range 32768-60999 (sysctl "
        "net.ipv4.ip_local_port_range; %d of its ports, %d-%d), where any program's connect() or bind() to port 0 may "
        "take a port before vLLM binds it: move %s below 32768 or above 60999, or reserve the block (sysctl "
        "net.ipv4.ip_local_reserved_ports)" % ((BLOCK_VAR, block["start"], block["start"], last) + overlap + (BLOCK_VAR,)))


def test_an_unreadable_ephemeral_range_is_not_a_problem(preflight, proc, host):
    os.remove(str(host.proc / "sys" / "net" / "ipv4" / "ip_local_port_range"))
    run = ports_run(preflight, port_block=dict(BLOCK, start=40000))
    assert not run.failed, run
    assert run.result["measured"]["port_block"]["ephemeral_range"] is None


def test_the_block_name_defaults_to_the_options_variable(preflight, proc):
    run = ports_run(preflight, port_block={"start": 40000}, variables={})
    assert only_problem(run).startswith("the internal port block vllm_preflight_port_block=40000, ports 40000-40031 ")


@pytest.mark.parametrize("options, msg", [
    ({"ports": [{"name": "vllm_server_port", "port": 0}]}, "vllm_server_port is 0: a TCP port is 1 to 65535"),
    ({"ports": [{"name": "vllm_server_port", "port": 65536}]}, "vllm_server_port is 65536: a TCP port is 1 to 65535"),
    ({"port_block": {"name": BLOCK_VAR, "start": 80}},
     "%s is 80 with a block of 32 ports (to 111): the block of the instance's internal ports must lie within "
     "1024-65535, with 1 port or more" % BLOCK_VAR),
    ({"port_block": {"name": BLOCK_VAR, "start": 65520}}, "%s is 65520 with a block of 32 ports (to 65551)" % BLOCK_VAR),
    ({"port_block": {"name": BLOCK_VAR, "start": 29500, "size": 0}}, "%s is 29500 with a block of 0 ports" % BLOCK_VAR),
    ({"port_block": {"name": BLOCK_VAR, "start": -5}}, "%s is -5 with a block of 32 ports" % BLOCK_VAR),
])
def test_ports_that_are_not_ports_fail(preflight, proc, options, msg):
    run = ports_run(preflight, **options)
    assert run.failed and run.result["measured"] == {}, run
    assert run.result["msg"].startswith(msg), run.result["msg"]


def test_no_block_when_it_has_no_start(preflight, proc):
    proc.listen(29510, pid=88, unit="redis.service", comm="redis-server")
    run = ports_run(preflight, port_block={"name": BLOCK_VAR, "start": 0})
    assert not run.failed, run
    assert "port_block" not in run.result["measured"] and run.result["measured"]["ports"] == []


# ---------------------------------------------------------------------------- the machine's other engine units


def test_other_units_and_their_environment(preflight, host, tmp_path):
    env_dir = tmp_path / "env"
    env_dir.mkdir()
    (env_dir / "b.env").write_text('# NCCL settings\nNCCL_P2P_DISABLE="1"\nVLLM_PORT="29600"\n')
    (env_dir / "c.env").write_text("VLLM_PORT=29700\n")
    unit_file(host, "vllm@b.service",
              'Environment="HOME=/var/lib/vllm" "CUDA_VISIBLE_DEVICES=%s,%s" VLLM_MEDIA_URL_ALLOW_REDIRECTS=0'
              % (X8[2], X8[3]),
              "EnvironmentFile=-%s" % (env_dir / "missing.env"),
              "EnvironmentFile=%s" % (env_dir / "b.env"))
    unit_file(host, "vllm@c.service", "Environment=HOME=/var/lib/vllm",
              "EnvironmentFile=-%s" % (env_dir / "c.env"),
              dropins=["Environment=CUDA_VISIBLE_DEVICES=%s" % X8[4]])
    unit_file(host, "vllm@a.service", "Environment=CUDA_VISIBLE_DEVICES=%s" % X8[7])     # this instance's own
    unit_file(host, "vllm@.service", "Environment=CUDA_VISIBLE_DEVICES=%s" % X8[0])      # the template
    unit_file(host, "vllm-gateway@b.service", "Environment=CUDA_VISIBLE_DEVICES=%s" % X8[0])
    (host.units / "vllm@old.service").symlink_to("/dev/null")                           # masked
    run = preflight(gpus=X8[:2], tensor_parallel_size=2, unit="vllm@a.service", port_block=dict(BLOCK, start=29500))
    assert not run.failed, run
    assert run.result["instances"] == {
        "vllm@b.service": {"gpus": [X8[2], X8[3]], "port_base": 29600},
        "vllm@c.service": {"gpus": [X8[4]], "port_base": 29700},
    }


def test_a_gpu_another_unit_uses(preflight, host):
    unit_file(host, "vllm.service", "Environment=CUDA_VISIBLE_DEVICES=%s" % X8[0])
    unit_file(host, "vllm@b.service", "Environment=CUDA_VISIBLE_DEVICES=%s,%s" % (X8[5], X8[1]))
    run = preflight(gpus=X8[:2], tensor_parallel_size=2, unit="vllm@a.service")
    assert problems_of(run) == [
        "%s has %s, which vllm.service, another engine of this machine, uses too (CUDA_VISIBLE_DEVICES=%s): give each "
        "instance GPUs of its own" % (GPUS_VAR, X8[0], X8[0]),
        "%s has %s, which vllm@b.service, another engine of this machine, uses too (CUDA_VISIBLE_DEVICES=%s,%s): give "
        "each instance GPUs of its own" % (GPUS_VAR, X8[1], X8[5], X8[1])]


def test_a_gpu_another_unit_names_by_index(preflight, host):
    unit_file(host, "vllm@b.service", "Environment=CUDA_VISIBLE_DEVICES=1,2")
    assert only_problem(preflight(gpus=X8[:2], tensor_parallel_size=2, unit="vllm@a.service")).startswith(
        "%s has %s, which vllm@b.service" % (GPUS_VAR, X8[1]))


def test_a_mig_device_beside_its_parent_in_another_unit(preflight, host):
    unit_file(host, "vllm@b.service", "Environment=CUDA_VISIBLE_DEVICES=%s" % X4[3])
    unit_file(host, "vllm@c.service", "Environment=CUDA_VISIBLE_DEVICES=%s" % MIG_1G_B)
    run = preflight(MIG_SCENARIO, gpus=[MIG_1G], tensor_parallel_size=1, unit="vllm@a.service")
    assert only_problem(run) == (
        "%s has %s, which vllm@b.service, another engine of this machine, uses too (CUDA_VISIBLE_DEVICES=%s): give "
        "each instance GPUs of its own" % (GPUS_VAR, MIG_1G, X4[3]))
    # the other way round: this instance's whole GPU holds another unit's MIG device
    run = preflight(MIG_SCENARIO, gpus=[X4[3]], tensor_parallel_size=1, unit="vllm@b.service")
    assert only_problem(run).startswith("%s has %s, which vllm@c.service" % (GPUS_VAR, X4[3]))


def test_this_instance_without_gpus_beside_another_unit(preflight, host):
    unit_file(host, "vllm@b.service", "Environment=CUDA_VISIBLE_DEVICES=%s" % X8[7])
    unit_file(host, "vllm@c.service", "Environment=HOME=/var/lib/vllm")
    assert only_problem(preflight(fail_on_problems=True)) == (
        "%s is empty, so this engine (vllm.service) would take every GPU of the machine, and vllm@b.service, "
        "vllm@c.service run here too (vllm@b.service: %s; vllm@c.service: every GPU, no CUDA_VISIBLE_DEVICES): list "
        "the GPUs of each instance, by UUID" % (GPUS_VAR, X8[7]))


def test_another_unit_without_cuda_visible_devices(preflight, host):
    unit_file(host, "vllm.service", "Environment=HOME=/var/lib/vllm", "Environment=", "ExecStart=/usr/bin/vllm serve")
    assert only_problem(preflight(gpus=X8[:2], tensor_parallel_size=2, unit="vllm@a.service")) == (
        "vllm.service has no CUDA_VISIBLE_DEVICES, so it takes every GPU of the machine, this instance's "
        "(vllm@a.service, %s: %s, %s) too: list the GPUs of each instance, or remove vllm.service if it no longer "
        "serves" % (GPUS_VAR, X8[0], X8[1]))


def test_cuda_visible_devices_reset_by_an_empty_environment(preflight, host):
    unit_file(host, "vllm.service", "Environment=CUDA_VISIBLE_DEVICES=%s" % X8[7], "Environment=")
    assert preflight(gpus=X8[:2], tensor_parallel_size=2, unit="vllm@a.service",
                     fail_on_problems=False).result["instances"] == {"vllm.service": {"gpus": None, "port_base": None}}


def test_a_block_overlapping_another_units(preflight, host, tmp_path, proc):
    (tmp_path / "nccl.env").write_text("VLLM_PORT=29520\n")
    unit_file(host, "vllm@b.service", "Environment=CUDA_VISIBLE_DEVICES=%s" % X8[7],
              "EnvironmentFile=%s" % (tmp_path / "nccl.env"))
    run = preflight(gpus=X8[:2], tensor_parallel_size=2, unit="vllm@a.service", port_block=BLOCK)
    assert only_problem(run) == (
        "the internal port block %s=29500, ports 29500-29531 overlaps that of vllm@b.service, another engine of this "
        "machine (VLLM_PORT=29520, ports 29520-29551): give each instance a block of its own (move %s)"
        % (BLOCK_VAR, BLOCK_VAR))
    assert not preflight(gpus=X8[:2], tensor_parallel_size=2, unit="vllm@a.service",
                         port_block=dict(BLOCK, start=29552)).failed
    assert preflight(gpus=X8[:2], tensor_parallel_size=2, unit="vllm@a.service",
                     port_block=dict(BLOCK, start=29489)).failed


def test_an_environment_file_that_cannot_be_read_is_a_warning(preflight, host, tmp_path):
    unit_file(host, "vllm@b.service", "Environment=CUDA_VISIBLE_DEVICES=%s" % X8[7],
              "EnvironmentFile=%s" % (tmp_path / "gone.env"))
    run = preflight(gpus=X8[:2], tensor_parallel_size=2, unit="vllm@a.service")
    assert not run.failed, run
    warnings = [w["event"]["msg"] if isinstance(w, dict) else w for w in run.result.get("warnings") or []]
    assert ("vllm@b.service names the environment file %s, which is missing: its CUDA_VISIBLE_DEVICES and VLLM_PORT, "
            "if any, are not known" % (tmp_path / "gone.env")) in warnings


# ---------------------------------------------------------------------------- the parsers


def test_split_words_as_systemd():
    assert split_words('A=1 "B=two words" C="x y" \'D=it\\\'s\' E=a\\ b  F=') == [
        "A=1", "B=two words", "C=x y", "D=it's", "E=a b", "F="]
    assert split_words("   ") == []


def test_environment_and_files_of_a_unit(tmp_path):
    (tmp_path / "one.env").write_text('VLLM_PORT="29500"\nCUDA_VISIBLE_DEVICES=%s\n' % X8[1])
    (tmp_path / "two.env").write_text("VLLM_PORT='29600'\n")
    unit = ("[Unit]\nEnvironment=CUDA_VISIBLE_DEVICES=nope\n[Service]\n# comment\nEnvironment=A=1 \\\n"
            "  CUDA_VISIBLE_DEVICES=%s\nEnvironmentFile=%s\nEnvironmentFile=-%s/t*.env\n" % (X8[0], tmp_path / "one.env",
                                                                                             tmp_path))
    env, unread = unit_environment([unit])
    assert env == {"A": "1", "CUDA_VISIBLE_DEVICES": X8[1], "VLLM_PORT": "29600"} and unread == []
    env, unread = unit_environment([unit, "[Service]\nEnvironmentFile=\nEnvironment=VLLM_PORT=1\n"])
    assert env == {"A": "1", "CUDA_VISIBLE_DEVICES": X8[0], "VLLM_PORT": "1"}


def test_environment_file_values():
    assert parse_environment_file('A="x \\"y\\" \\$z"\nB=\'q\'\n; c\n#d=1\n  E = f \nnot a line\n') == {
        "A": 'x "y" $z', "B": "q", "E": "f"}


@pytest.mark.parametrize("text, unit", [
    ("0::/system.slice/vllm@a.service\n", "vllm@a.service"),
    ("0::/system.slice/vllm.service/payload\n", "vllm.service"),
    ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-foo.scope\n", "app-foo.scope"),
    ("12:pids:/x\n1:name=systemd:/system.slice/haproxy.service\n0::/\n", "haproxy.service"),
    ("0::/init.scope\n", "init.scope"),
    ("0::/\n", None),
    ("", None),
])
def test_cgroup_unit(text, unit):
    assert cgroup_unit(text) == unit


def test_tcp_listeners_decode_addresses(proc):
    proc.listen(8000, address="127.0.0.1")
    proc.listen(8001, address="::1")
    proc.listen(8002, address="2001:db8::5")
    assert [(item["port"], item["address"]) for item in tcp_listeners(str(proc.proc))] == [
        (8000, "127.0.0.1"), (8001, "::1"), (8002, "2001:db8::5")]


def test_mig_profiles_memory():
    assert mig_memory_mib("1g.24gb") == 22888
    assert mig_memory_mib("2g.48gb+gfx") == 45776
    assert mig_memory_mib("1c.3g.20gb") == 19073
    assert mig_memory_mib("1g.24gb+me") == 22888
    assert mig_memory_mib("weird") is None


# ---------------------------------------------------------------------------- the fixture nvidia-smi's -L


def fake(args, scenario):
    environ = dict(os.environ, FLEET_VLLM_FAKE_GPUS=scenario, LC_ALL="C")
    return subprocess.run([str(FAKE_SMI)] + args, capture_output=True, text=True, env=environ, check=False, timeout=60)


def test_fixture_lists_mig_devices_from_list_gpus_txt():
    listed = fake(["-L"], MIG_SCENARIO)
    assert listed.returncode == 0
    assert listed.stdout == (SCENARIOS / MIG_SCENARIO / "list-gpus.txt").read_text()
    assert fake(["--list-gpus"], MIG_SCENARIO).stdout == listed.stdout
    assert fake(["-L"], MIG_SCENARIO).stdout.splitlines()[4] == "  MIG 2g.48gb     Device  0: (UUID: %s)" % MIG_2G
    gpus = parse_list_gpus(listed.stdout)
    assert [(gpu["index"], gpu["uuid"]) for gpu in gpus] == list(enumerate(X4))
    assert gpus[3]["migs"] == [{"profile": "2g.48gb", "device": 0, "uuid": MIG_2G},
                               {"profile": "1g.24gb", "device": 1, "uuid": MIG_1G},
                               {"profile": "1g.24gb", "device": 2, "uuid": MIG_1G_B}]
    assert all(gpu["name"] == PRO_SE and not gpu["migs"] for gpu in gpus[:3])


def test_fixture_without_list_gpus_txt_builds_the_list_from_the_table():
    listed = fake(["-L"], "rtx-pro-6000-x8").stdout.splitlines()
    assert listed == ["GPU %d: %s (UUID: %s)" % (index, PRO_SE, uuid) for index, uuid in enumerate(X8)]
    assert not (SCENARIOS / "rtx-pro-6000-x8" / "list-gpus.txt").exists()


def test_fixture_mig_scenario_reads_as_four_gpus(gpu_info):
    info = gpu_info(MIG_SCENARIO)
    assert info["count"] == 4 and [gpu["uuid"] for gpu in info["gpus"]] == X4
    assert info["topology"]["link_types"] == ["NODE", "SYS"]
    assert [gpu["numa_node"] for gpu in info["gpus"]] == [0, 0, 1, 1]
