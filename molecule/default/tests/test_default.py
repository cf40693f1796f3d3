"""default: what playbooks/deploy.yml leaves on two fresh hosts, and that a second run changed
nothing and restarted nothing.

The hosts run the engine simulator 0.16.0rc2.dev313+g6f5e2a9c1 (TEST FIXTURE standing in for a
vLLM nightly from before FP8 MLA support on SM120) and the fixture nvidia-smi (8x RTX PRO 6000,
compute capability 12.0): the KV-cache decision must strip the checkpoint's FP8 KV cache in the
served copy and leave the pristine snapshot as the hub serves it. Each host is read once
(fleet_hosts.facts); the tests below only look at what was read.
"""

from __future__ import annotations

import json

import fleet_hosts as fleet

testinfra_hosts = fleet.testinfra_hosts()


def test_systemd_running(host):
    assert fleet.facts(host)["system_state"] == "running"


def test_service_user(host):
    data = fleet.facts(host)
    user = data["user"]
    assert user is not None, "no user vllm"
    assert user["uid"] < 1000, "a system account"
    assert (user["group"], user["home"], user["shell"]) == ("vllm", "/var/lib/vllm", "/usr/sbin/nologin")


def test_unit_file(host):
    data = fleet.facts(host)
    assert data["owners"][fleet.UNIT_FILE] == {"user": "root", "group": "root"}
    assert data["files"][fleet.UNIT_FILE]["mode"] == "0o644"
    text = data["content"][fleet.UNIT_FILE]
    lines = text.splitlines()
    assert "User=vllm" in lines
    assert f"EnvironmentFile={fleet.NCCL_ENV}" in lines
    assert f"EnvironmentFile={fleet.SECRETS_ENV}" in lines
    argv = next(line for line in lines if line.startswith("ExecStart=")).split()
    # The venv and the served directory the unit names are the ones the links point at now (the
    # unit never goes through the links: a crash-restart during the next staging keeps its own).
    venv = data["realpath"]["/opt/vllm/current"]
    assert argv[:3] == ["ExecStart=%s/bin/python" % venv, "-m", "vllm.entrypoints.openai.api_server"]
    for flag, value in [("--model", fleet.served(data)), ("--tensor-parallel-size", "8"),
                        ("--served-model-name", fleet.served_name()), ("--uds", fleet.ENGINE_SOCKET),
                        ("--tool-call-parser", "kimi_k2"), ("--reasoning-parser", "kimi_k2")]:
        assert argv[argv.index(flag) + 1] == value, flag
    # The demo trusts no remote code (inventories/demo: the synthetic checkpoint ships none); the
    # seed's --trust-remote-code is the example inventory's (tests/integration/test_deploy_playbook.py).
    assert "--trust-remote-code" not in argv
    # Issue 24 point 2: the engine on its socket only, no TCP port any local user could take while it is down.
    assert "--host" not in argv and "--port" not in argv
    assert "--disable-log-requests" not in text
    # Secrets never on the command line, nor anywhere in the unit.
    assert "--api-key" not in text
    assert fleet.api_key() not in text
    assert data["analyze"][0] == 0, data["analyze"]


def test_environment_files(host):
    data = fleet.facts(host)
    assert data["owners"][fleet.NCCL_ENV] == {"user": "root", "group": "root"}
    assert data["files"][fleet.NCCL_ENV]["mode"] == "0o644"
    lines = [line for line in data["content"][fleet.NCCL_ENV].splitlines() if line and not line.startswith("#")]
    # the seed deployment's NCCL settings, and the engine's own sockets on loopback (issue 24, point 5)
    assert sorted(lines) == ['GLOO_SOCKET_IFNAME="lo"', 'NCCL_P2P_LEVEL="SYS"', 'NCCL_PROTO="LL"',
                             'NCCL_SOCKET_IFNAME="lo"', 'VLLM_HOST_IP="127.0.0.1"']

    assert data["owners"][fleet.SECRETS_ENV] == {"user": "root", "group": "root"}
    assert data["files"][fleet.SECRETS_ENV]["mode"] == "0o600"
    # On its socket the engine holds no key (issue 24 point 2): the front door checks it and strips it.
    assert "VLLM_API_KEY" not in data["content"][fleet.SECRETS_ENV]
    assert fleet.api_key() not in data["content"][fleet.SECRETS_ENV]


def test_secret_not_on_process_command_line(host):
    cmdline = fleet.facts(host)["cmdline"]
    assert cmdline and "vllm.entrypoints.openai.api_server" in cmdline
    assert fleet.api_key() not in " ".join(cmdline)


def test_runtime_venv(host):
    data = fleet.facts(host)
    assert data["realpath"]["/opt/vllm/current"].startswith("/opt/vllm/venvs/")
    assert data["version"] == fleet.OLD_VERSION


def test_pristine_snapshot_untouched(host):
    fleet.assert_pristine_untouched(fleet.facts(host))


def test_served_copy_is_stripped(host):
    """vLLM 0.16.0rc2.dev313 has no MLA backend for an FP8 KV cache on SM120: the decision strips."""
    fleet.assert_kv_stripped(fleet.facts(host))


def test_served_shards_link_to_pristine(host):
    fleet.assert_shards_link_to_pristine(fleet.facts(host))


def test_weights_progress_record_of_the_first_deploy(host):
    """The download's (or the peer copy's) progress record on a bare host's first deploy: its
    directory made, the last record whole and world-readable, saying done, no temporary file left
    (issue 28: a record lost to a concurrent writer warned "cannot write the progress record")."""
    directory = "/var/lib/fleet-vllm/weights"
    record = host.file(f"{directory}/weights-{fleet.REPO_DIR}.progress.json")
    assert record.is_file and record.mode == 0o644, record.path
    progress = json.loads(record.content_string)
    assert progress["state"] == "done", progress
    assert progress["bytes_done"] == progress["bytes_total"] > 0, progress
    assert not [name for name in host.file(directory).listdir() if name.endswith(".tmp")]


def test_service_active_and_enabled(host):
    unit = fleet.facts(host)["unit"]
    assert (unit["ActiveState"], unit["SubState"], unit["UnitFileState"]) == ("active", "running", "enabled")
    assert unit["NRestarts"] == "0", "the unit crash-looped"


def test_endpoint_inside_host_and_on_loopback(host):
    fleet.assert_serving(host, fleet.facts(host), fleet.OLD_VERSION)


def test_second_run_changed_and_restarted_nothing(host):
    """The record was taken after converge, before Molecule's idempotence run."""
    before = fleet.load_record()[fleet.name_of(host)]
    after = fleet.facts(host)
    assert before["unit"]["InvocationID"], "no service was recorded"
    assert fleet.diff(before, after) == []
