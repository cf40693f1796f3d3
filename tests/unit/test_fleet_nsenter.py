"""The test harness's connection (tests/hosts/connection_plugins/fleet_nsenter.py): the PID of a
test host's systemd is asked of podman once, then used again only while that very process runs.
podman is a stand-in script here (it prints the PID of a real process this test starts and counts
its calls); the processes and /proc are real."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleConnectionFailure

# The harness's connection builds on community.docker's nsenter (the ansible package of requirements-dev.txt, which
# Molecule's runs use); tools/compat.sh's venvs hold ansible-core alone, to test the collection, not the harness.
pytest.importorskip("ansible_collections.community.docker",
                    reason="the test harness's connection needs community.docker; this venv has ansible-core alone")

PLUGIN = Path(__file__).resolve().parents[1] / "hosts" / "connection_plugins" / "fleet_nsenter.py"


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("fleet_nsenter_under_test", PLUGIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(module.tempfile, "gettempdir", lambda: str(tmp))
    return module


@pytest.fixture
def podman(tmp_path, monkeypatch):
    """A podman that answers `container inspect` with the PID in tmp_path/pid and logs each call."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "podman"
    script.write_text('#!/bin/sh\necho "$*" >> %s/calls\ncat %s/pid\n' % (tmp_path, tmp_path))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ["PATH"]))

    class Podman:
        processes = []

        def start(self):
            """A new container's systemd: a process of its own, whose PID podman reports."""
            proc = subprocess.Popen(["sleep", "300"])
            self.processes.append(proc)
            (tmp_path / "pid").write_text("%d\n" % proc.pid)
            return proc

        def stop(self):
            (tmp_path / "pid").write_text("0\n")

        @property
        def calls(self):
            path = tmp_path / "calls"
            return len(path.read_text().splitlines()) if path.exists() else 0

    fake = Podman()
    yield fake
    for proc in fake.processes:
        proc.kill()
        proc.wait()


def test_podman_is_asked_once_while_the_same_systemd_runs(plugin, podman):
    first = podman.start()
    assert plugin.container_pid("host-1") == first.pid and podman.calls == 1
    assert plugin.container_pid("host-1") == first.pid and podman.calls == 1
    assert plugin.container_pid("host-2") == first.pid and podman.calls == 2  # another name, its own entry
    directory = Path(plugin.cache_dir())
    assert directory.stat().st_mode & 0o777 == 0o700
    assert (directory / "host-1").read_text().split()[0] == str(first.pid)


def test_a_host_made_again_is_looked_up_again(plugin, podman):
    first = podman.start()
    assert plugin.container_pid("host-1") == first.pid
    first.kill()
    first.wait()
    second = podman.start()
    assert plugin.container_pid("host-1") == second.pid and podman.calls == 2


def test_a_live_process_of_another_start_time_is_not_taken_for_the_host(plugin, podman):
    """A PID used again by another process (here: the entry's start time is not this process's)."""
    first = podman.start()
    plugin.container_pid("host-1")
    entry = Path(plugin.cache_dir()) / "host-1"
    entry.write_text("%d 1\n" % os.getpid())
    assert plugin.container_pid("host-1") == first.pid and podman.calls == 2
    assert entry.read_text().split() == [str(first.pid), plugin.start_time(first.pid)]


def test_a_stopped_host_is_refused_and_nothing_is_kept(plugin, podman):
    podman.stop()
    with pytest.raises(AnsibleConnectionFailure, match="test host host-1: no running container"):
        plugin.container_pid("host-1")
    assert not (Path(plugin.cache_dir()) / "host-1").exists()


def test_a_directory_others_can_write_is_not_used(plugin, podman, tmp_path):
    first = podman.start()
    directory = tmp_path / "tmp" / ("fleet-vllm-nsenter-%d" % os.getuid())
    directory.mkdir(mode=0o700)
    directory.chmod(0o777)
    assert plugin.cache_dir() is None
    assert plugin.container_pid("host-1") == first.pid and plugin.container_pid("host-1") == first.pid
    assert podman.calls == 2 and not list(directory.iterdir())


def test_start_time_reads_a_command_name_with_spaces_and_parentheses(plugin, tmp_path):
    odd = tmp_path / "a b) c"
    odd.symlink_to(sys.executable)
    proc = subprocess.Popen([str(odd), "-c", "import time; time.sleep(60)"])
    try:
        expected = Path("/proc/%d/stat" % proc.pid).read_text().rsplit(")", 1)[1].split()[19]
        assert plugin.start_time(proc.pid) == expected
    finally:
        proc.kill()
        proc.wait()
    assert plugin.start_time(proc.pid) is None
