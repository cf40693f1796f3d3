"""One owner per setting: a value several roles read is set once (fleet.vllm.fleet_vllm'
fleet_vllm_*) and reaches every reader. One test per seam that was lost before: the NCCL defaults
reaching preflight's P2P check, the unit's LimitNOFILE being the limit preflight checks, and the
tensor-parallel size preflight checks being the one the server starts with (refused before any
download when it does not divide the host's GPUs). And no role keeps a copy of a shared default.

The GPUs are the test-fixture nvidia-smi's (tests/fixtures/bin/nvidia-smi, 8x RTX PRO 6000)."""

from __future__ import annotations

import re
import sys

import pytest
import yaml

from conftest import FIXTURES, ROOT, run_playbook

pytestmark = pytest.mark.integration

PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "shared_settings.yml"
UNIT_PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "vllm_server_unit.yml"


def play(tmp_path, **extra):
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[gpu_hosts]\ngpu-a ansible_connection=local ansible_python_interpreter=%s\n" % sys.executable)
    variables = dict(
        # The test's stand-ins for the host: the fixture GPUs, a model size that needs no hub,
        # files written under tmp_path, this machine's small /dev/shm.
        fleet_vllm_nvidia_smi=str(FIXTURES / "bin" / "nvidia-smi"),
        fleet_vllm_models_root=str(tmp_path / "models"),
        fleet_vllm_nccl_env_file=str(tmp_path / "etc" / "nccl.env"),
        vllm_preflight_model_size_bytes=1,
        vllm_preflight_shm_min_bytes=1024,
        fleet_vllm_served_model_path="/srv/models/kimi",
        # Remote code needs a commit sha and the pins of its code (tests/integration/test_remote_code_trust.py).
        fleet_vllm_trust_remote_code=False,
    )
    variables.update(extra)
    run = run_playbook(PLAYBOOK, "-i", inventory, extra_vars=variables, timeout=300,
                       env={"FLEET_VLLM_FAKE_GPUS": "rtx-pro-6000-x8"})
    return run


def task(run, name):
    return run.tasks("gpu-a")[name]


def nccl_file(tmp_path):
    lines = (tmp_path / "etc" / "nccl.env").read_text().splitlines()
    # systemd EnvironmentFile= syntax: values in double quotes
    pairs = (line.split("=", 1) for line in lines if line and not line.startswith("#"))
    return {name: value.strip('"') for name, value in pairs}


def test_nccl_defaults_reach_preflight(tmp_path):
    """Without any NCCL setting, preflight checks NCCL_P2P_LEVEL=SYS, the default the NCCL role
    writes (it received {} before, so its "P2P SYS with IOMMU" warning could never fire)."""
    run = play(tmp_path)
    assert run.rc == 0, run.stdout[-3000:]
    measured = task(run, "Check the host against what vLLM and the model need")["measured"]["nccl"]
    written = nccl_file(tmp_path)
    # with the engine's own sockets on loopback (issue 24, point 5)
    assert written == {"NCCL_PROTO": "LL", "NCCL_P2P_LEVEL": "SYS", "NCCL_SOCKET_IFNAME": "lo",
                       "VLLM_HOST_IP": "127.0.0.1", "GLOO_SOCKET_IFNAME": "lo"}
    # preflight checks the NCCL_* part of the very same environment
    assert measured["env"] == {"NCCL_PROTO": "LL", "NCCL_P2P_LEVEL": "SYS", "NCCL_SOCKET_IFNAME": "lo"}
    assert measured["p2p_level"] == "SYS"


def test_nccl_settings_reach_both_and_null_removes_a_default_in_both(tmp_path):
    run = play(tmp_path, fleet_vllm_nccl_env={"NCCL_P2P_LEVEL": None, "NCCL_P2P_DISABLE": "1",
                                              "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert run.rc == 0, run.stdout[-3000:]
    measured = task(run, "Check the host against what vLLM and the model need")["measured"]["nccl"]
    written = nccl_file(tmp_path)
    assert written == {"NCCL_PROTO": "LL", "NCCL_P2P_DISABLE": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                       "NCCL_SOCKET_IFNAME": "lo", "VLLM_HOST_IP": "127.0.0.1", "GLOO_SOCKET_IFNAME": "lo"}
    # preflight checks the NCCL_* part of the very same environment
    assert measured["env"] == {"NCCL_PROTO": "LL", "NCCL_P2P_DISABLE": "1", "NCCL_SOCKET_IFNAME": "lo"}
    assert measured["p2p_disabled"] is True


def test_the_units_open_file_limit_is_the_one_preflight_checks(tmp_path):
    run = play(tmp_path, fleet_vllm_nofile_limit=131072)
    assert run.rc == 0, run.stdout[-3000:]
    nofile = task(run, "Check the host against what vLLM and the model need")["measured"]["nofile"]
    assert nofile["service_limit"] == 131072 and nofile["source"] == "the vLLM unit's LimitNOFILE"

    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.symlink_to(sys.executable)
    unit = tmp_path / "vllm.service"
    rendered = run_playbook(UNIT_PLAYBOOK, extra_vars=dict(unit_dest=str(unit), fleet_vllm_python=str(python),
                                                           fleet_vllm_served_model_path="/srv/models/kimi",
                                                           fleet_vllm_nofile_limit=131072), timeout=300)
    assert rendered.rc == 0, rendered.stdout[-3000:]
    assert re.findall(r"^LimitNOFILE=(.*)$", unit.read_text(), re.M) == ["131072"]


def test_the_tensor_parallel_size_preflight_checks_is_the_servers(tmp_path):
    run = play(tmp_path, fleet_vllm_tensor_parallel_size=4)
    assert run.rc == 0, run.stdout[-3000:]
    gpus = task(run, "Check the host against what vLLM and the model need")["measured"]["gpus"]
    argv = task(run, "Show the argv")["msg"]
    assert gpus["needed"] == 4 and argv[argv.index("--tensor-parallel-size") + 1] == "4"


def test_a_tensor_parallel_size_that_does_not_divide_the_gpus_fails_in_preflight(tmp_path):
    """Refused by preflight, before the weights are fetched, not by the server after the download."""
    run = play(tmp_path, fleet_vllm_tensor_parallel_size=3)
    assert run.rc != 0
    result = task(run, "Check the host against what vLLM and the model need")
    assert result["failed"] and any(
        "fleet_vllm_tensor_parallel_size=3 x vllm_preflight_pipeline_parallel_size=1 need 3 GPUs per replica, which "
        "does not divide the 8 GPUs of this host" in problem for problem in result["problems"]), result["problems"]
    assert "Write the NCCL environment file and its directory" not in run.tasks("gpu-a")
    assert not (tmp_path / "etc").exists()


# The defaults of fleet.vllm.fleet_vllm that are plain values: no other role may repeat one of
# them as a literal default (it would be a second copy that drifts).
SHARED = {name: value for name, value in
          yaml.safe_load((ROOT / "roles" / "fleet_vllm" / "defaults" / "main.yml").read_text()).items()
          if not (isinstance(value, str) and "{{" in value) and value not in ("", {}, [])}


# The same value for another thing: (role variable, shared variable) -> why it is not a copy.
NOT_COPIES = {
    ("vllm_preflight_nofile_min", "fleet_vllm_nofile_limit"):
        "the open files vLLM needs at least, which the unit's limit (65536 too) must not be below",
}


@pytest.mark.parametrize("role", sorted(p.name for p in (ROOT / "roles").iterdir()
                                        if (p / "defaults" / "main.yml").is_file() and p.name != "fleet_vllm"))
def test_no_role_keeps_a_copy_of_a_shared_default(role):
    defaults = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text()) or {}
    for name, value in defaults.items():
        for shared, shared_value in SHARED.items():
            if (name, shared) in NOT_COPIES:
                continue
            if isinstance(shared_value, str) and "/" in shared_value:  # a path, a repository
                assert not (isinstance(value, str) and shared_value in value), "%s repeats %s (%r): default it to {{ %s }}" % (
                    name, shared, shared_value, shared)
            elif isinstance(shared_value, (dict, int)) and not isinstance(shared_value, bool) and shared_value not in (0, 1, 8):
                assert value != shared_value, "%s repeats %s (%r): default it to {{ %s }}" % (name, shared, shared_value, shared)
    meta = yaml.safe_load((ROOT / "roles" / role / "meta" / "main.yml").read_text())
    assert {"role": "fleet.vllm.fleet_vllm"} in meta["dependencies"], "%s does not depend on fleet_vllm" % role
