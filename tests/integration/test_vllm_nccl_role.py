"""The vllm_nccl role writes the NCCL environment file: the seed's PCIe defaults, inventory
overrides, null removing a default, names checked before anything is written, values that
systemd and sh read back literally, check mode that writes nothing, reruns that change nothing."""

from __future__ import annotations

import stat
import subprocess

import pytest

from conftest import ROOT, run_cases, run_playbook

pytestmark = [pytest.mark.integration]

PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "vllm_nccl.yml"


def play(env_file, *flags, **extra):
    variables = {"fleet_vllm_nccl_env_file": str(env_file)}
    variables.update(extra)
    run = run_playbook(PLAYBOOK, *flags, extra_vars=variables, timeout=300)
    return run.rc, run.stats(), run.tasks()


def sourced(path):
    """What a POSIX shell reads from the file (systemd's EnvironmentFile= reader unescapes the
    same four characters inside double quotes: \\ " $ and the backquote)."""
    out = subprocess.run(["/bin/sh", "-c", 'set -a; . "$1"; exec env -0', "sh", str(path)],
                         env={}, capture_output=True, check=True).stdout.decode()
    return dict(item.split("=", 1) for item in out.split("\0") if item and not item.startswith(("PWD=", "SHLVL=", "_=")))


def test_defaults_check_mode_real_rerun(tmp_path):
    env_file = tmp_path / "etc" / "nccl.env"
    rc, stats, dummy = play(env_file, "--check")
    assert rc == 0 and stats["changed"] >= 1
    assert not env_file.exists() and not env_file.parent.exists()

    rc, stats, dummy = play(env_file)
    assert rc == 0 and stats["changed"] == 1  # the directory and the file, in one task
    text = env_file.read_text()
    assert text.startswith("#") and "Ansible managed" in "".join(text.splitlines()[:3])
    # the seed's NCCL settings and the engine's own sockets on loopback (issue 24, point 5)
    assert [line for line in text.splitlines() if not line.startswith("#")] == [
        'GLOO_SOCKET_IFNAME="lo"', 'NCCL_P2P_LEVEL="SYS"', 'NCCL_PROTO="LL"', 'NCCL_SOCKET_IFNAME="lo"',
        'VLLM_HOST_IP="127.0.0.1"']
    st = env_file.stat()
    assert stat.S_IMODE(st.st_mode) == 0o644 and st.st_uid == 0 and st.st_gid == 0
    before = env_file.read_bytes()

    for flags in (("--check",), ()):
        rc, stats, dummy = play(env_file, *flags)
        assert rc == 0 and stats["changed"] == 0
        assert env_file.read_bytes() == before


def test_override_null_removes_a_default_and_values_read_back(tmp_path):
    env_file = tmp_path / "etc" / "nccl.env"
    odd = 'a b "q" $HOME `x` \\n 100%'
    rc, stats, dummy = play(env_file, fleet_vllm_nccl_env={
        "NCCL_P2P_LEVEL": None, "NCCL_P2P_DISABLE": 1, "NCCL_DEBUG": "WARN",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "TORCH_NCCL_BLOCKING_WAIT": True, "NCCL_ODD": odd})
    assert rc == 0 and stats["changed"] == 1
    assert sourced(env_file) == {
        "NCCL_PROTO": "LL", "NCCL_P2P_DISABLE": "1", "NCCL_DEBUG": "WARN",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "TORCH_NCCL_BLOCKING_WAIT": "1", "NCCL_ODD": odd,
        "NCCL_SOCKET_IFNAME": "lo", "VLLM_HOST_IP": "127.0.0.1", "GLOO_SOCKET_IFNAME": "lo"}
    assert "NCCL_P2P_LEVEL" not in env_file.read_text()


# Each bad fleet_vllm_nccl_env, with what its message must say; all in one run (bad_input_run).
BAD_INPUTS = [
    ({"LD_PRELOAD": "/tmp/x.so"}, ["fleet_vllm_nccl_env", "LD_PRELOAD", "NCCL_*"]),
    ({"nccl proto": "LL"}, ["fleet_vllm_nccl_env", "nccl proto"]),
    ({"VLLM_API_KEY": "secret"}, ["fleet_vllm_nccl_env", "VLLM_API_KEY", "vllm_server_api_key"]),
    ({"NCCL_DEBUG": "a\nb"}, ["fleet_vllm_nccl_env", "NCCL_DEBUG", "line break"]),
    # Issue 14 point 7: vLLM's own variables from the reviewed list only.
    ({"VLLM_SERVER_DEV_MODE": 1}, ["fleet_vllm_nccl_env", "VLLM_SERVER_DEV_MODE", "without authentication", "VLLM_HOST_IP"]),
    ({"VLLM_ALLOW_INSECURE_SERIALIZATION": 1}, ["fleet_vllm_nccl_env", "VLLM_ALLOW_INSECURE_SERIALIZATION", "reviewed"]),
    ({"VLLM_PLUGINS": "evil"}, ["fleet_vllm_nccl_env", "VLLM_PLUGINS", "reviewed"]),
    ({"NCCL_P2P_DISABLE": 1, "VLLM_NEW_THING": 1}, ["fleet_vllm_nccl_env", "VLLM_NEW_THING", "reviewed"]),
]


@pytest.fixture(scope="module")
def bad_input_run(tmp_path_factory):
    """The role on one local host per bad input (tests/conftest.py run_cases), each with a file of its
    own that says "untouched"; the run and the files by case."""
    directory = tmp_path_factory.mktemp("bad-input")
    files = []
    for number in range(len(BAD_INPUTS)):
        files.append(directory / ("nccl-%d.env" % number))
        files[-1].write_text("untouched\n")
    cases = [{"fleet_vllm_nccl_env_file": str(path), "fleet_vllm_nccl_env": env} for path, (env, dummy) in zip(files, BAD_INPUTS)]
    return run_cases(PLAYBOOK, cases, directory, timeout=300), files


@pytest.mark.parametrize("case", range(len(BAD_INPUTS)), ids=[next(iter(env)) for env, dummy in BAD_INPUTS])
def test_bad_input_fails_naming_the_variable_before_anything_changes(bad_input_run, case):
    run, files = bad_input_run
    words = BAD_INPUTS[case][1]
    stats, tasks = run.stats("case-%d" % case), run.tasks("case-%d" % case)
    assert run.rc != 0 and stats["failures"] == 1 and stats["changed"] == 0, (stats, tasks)
    failed = [t for t in tasks.values() if t.get("failed")]
    assert all(word in failed[0]["msg"] for word in words), failed[0]["msg"]
    assert files[case].read_text() == "untouched\n"
    assert "secret" not in failed[0]["msg"]


def test_an_allowed_extra_prefix_does_not_open_vllm_variables(tmp_path):
    """Adding VLLM_* (the old default) to vllm_nccl_allowed_extra still refuses an unreviewed name."""
    env_file = tmp_path / "nccl.env"
    rc, stats, tasks = play(env_file, fleet_vllm_nccl_env={"VLLM_SERVER_DEV_MODE": "1"},
                            vllm_nccl_allowed_extra=["VLLM_*", "VLLM_SERVER_DEV_MODE"])
    assert rc != 0 and stats["changed"] == 0 and not env_file.exists()
    assert "VLLM_SERVER_DEV_MODE" in [t for t in tasks.values() if t.get("failed")][0]["msg"]


def test_reviewed_vllm_variables_are_written(tmp_path):
    env_file = tmp_path / "nccl.env"
    rc, stats, dummy = play(env_file, fleet_vllm_nccl_env={"VLLM_HOST_IP": "10.0.0.5", "VLLM_NO_USAGE_STATS": 1,
                                                           "VLLM_ENGINE_READY_TIMEOUT_S": 3600, "VLLM_CPU_KVCACHE_SPACE": 1})
    assert rc == 0
    # the inventory's VLLM_HOST_IP replaces the loopback default
    assert sourced(env_file) == {"NCCL_PROTO": "LL", "NCCL_P2P_LEVEL": "SYS", "VLLM_HOST_IP": "10.0.0.5",
                                 "NCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo",
                                 "VLLM_NO_USAGE_STATS": "1", "VLLM_ENGINE_READY_TIMEOUT_S": "3600",
                                 "VLLM_CPU_KVCACHE_SPACE": "1"}


def test_relative_path_fails_naming_the_variable(tmp_path):
    rc, stats, tasks = play("relative/nccl.env")
    assert rc != 0 and stats["failures"] == 1
    assert "fleet_vllm_nccl_env_file" in [t for t in tasks.values() if t.get("failed")][0]["msg"]
    assert not (ROOT / "relative").exists()
