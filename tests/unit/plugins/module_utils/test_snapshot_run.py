"""module_utils/_snapshot_run.py in process: what every part of an hf_snapshot run shares - the
names messages give the options, and the progress record, written whole from many threads."""

from __future__ import annotations

import json
import os
import threading

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils import _snapshot_run
from ansible_collections.fleet.vllm.plugins.module_utils._snapshot_run import SnapshotRun

from tests.unit.plugins.module_utils.snapshot_fakes import FakeModule


def test_a_run_starts_with_its_result(tmp_path):
    module = FakeModule(tmp_path, revision="v1")
    module.params["dest"] = "relative/dest"
    run = SnapshotRun(module)
    assert (run.module, run.params) == (module, module.params)
    assert run.dest == os.path.join(os.getcwd(), "relative/dest")
    assert run.result == dict(changed=False, revision="v1", requests=0, msg="")
    assert run.progress_state == {}


@pytest.mark.parametrize("prefix, option, name", [
    ("", "token", "token"), ("", "repo_id", "repo_id"), ("", "dest", "dest"),
    ("vllm_weights_", "token", "vllm_weights_hf_token"), ("vllm_weights_", "repo_id", "vllm_weights_repo"),
    ("vllm_weights_", "revision", "vllm_weights_revision"),
])
def test_messages_name_the_option_or_the_role_variable(tmp_path, prefix, option, name):
    assert SnapshotRun(FakeModule(tmp_path, variable_prefix=prefix)).name(option) == name


def test_progress_record_from_many_threads_into_a_missing_directory(tmp_path):
    """The hashing workers, the watchdog and the main loop all write the progress record. Written
    as on a bare host's first deploy (its directory absent) from eight threads at once: the
    directory is made, no write is lost to another's temporary file (a shared one per process
    lost them: "[Errno 2] No such file or directory", measured by `make test-ee`), and the record
    is whole JSON, world-readable, with no temporary file left."""
    record = tmp_path / "state" / "weights" / "weights-org--model.progress.json"
    module = FakeModule(tmp_path, progress_file=str(record))
    writer = SnapshotRun(module)
    old_umask = os.umask(0o077)
    try:
        def write(n):
            for i in range(150):
                writer.write_progress(state="running", bytes_done=n * 1000 + i, bytes_total=10 ** 6)

        threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        os.umask(old_umask)
    assert module.warnings == []
    assert json.loads(record.read_text())["state"] == "running"
    assert oct(record.stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in record.parent.iterdir()) == [record.name]


def test_the_record_accumulates_fields_with_its_line_and_time(tmp_path, monkeypatch):
    record = tmp_path / "progress.json"
    run = SnapshotRun(FakeModule(tmp_path, progress_file=str(record)))
    monkeypatch.setattr(_snapshot_run.time, "time", lambda: 1234.5)
    run.write_progress(state="running", bytes_done=500, bytes_total=1000, endpoint="https://u:secret@mirror/x")
    run.write_progress(bytes_done=750)
    expected = dict(state="running", bytes_done=750, bytes_total=1000, endpoint="https://u:****@mirror/x", updated=1234.5,
                    line="750 B / 1.0 KB (75%)")
    assert json.loads(record.read_text()) == expected
    assert record.read_text() == json.dumps(expected, sort_keys=True)
    # The credentials are masked in the file only: the run keeps what it was told.
    assert run.progress_state["endpoint"] == "https://u:secret@mirror/x"


def test_a_record_in_the_root_directory_or_none(tmp_path, monkeypatch):
    made = []
    monkeypatch.setattr(_snapshot_run.tempfile, "mkstemp", lambda **options: made.append(options) or pytest.fail("wrote"))
    run = SnapshotRun(FakeModule(tmp_path))
    run.write_progress(state="done", bytes_done=1, bytes_total=1)
    assert run.progress_state["line"] == "1 B / 1 B (100%)" and made == []
    module = FakeModule(tmp_path, progress_file=str(tmp_path / "p.json"))
    module.check_mode = True
    SnapshotRun(module).write_progress(state="done")
    assert made == [] and not (tmp_path / "p.json").exists()


def test_a_bare_file_name_is_written_in_the_root_directory(tmp_path, monkeypatch):
    made = []

    def mkstemp(**options):
        made.append(options)
        raise OSError(13, "Permission denied")

    monkeypatch.setattr(_snapshot_run.tempfile, "mkstemp", mkstemp)
    module = FakeModule(tmp_path, progress_file="progress.json")
    SnapshotRun(module).write_progress(state="running")
    assert made == [dict(prefix=".progress.json.", suffix=".tmp", dir="/")]
    assert module.warnings == ["cannot write the progress record progress.json: [Errno 13] Permission denied"]


def test_a_record_that_cannot_be_written_is_a_warning_and_leaves_nothing(tmp_path):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the directory should be")
    module = FakeModule(tmp_path, progress_file=str(blocked / "sub" / "progress.json"))
    SnapshotRun(module).write_progress(state="running")
    assert module.warnings == ["cannot write the progress record %s: [Errno 20] Not a directory: '%s'" % (
        blocked / "sub" / "progress.json", blocked / "sub")]
    directory = tmp_path / "state"
    directory.mkdir()
    target = directory / "progress.json"
    target.mkdir()  # the rename fails: the temporary file is removed
    module = FakeModule(tmp_path, progress_file=str(target))
    SnapshotRun(module).write_progress(state="running")
    assert len(module.warnings) == 1 and module.warnings[0].startswith(
        "cannot write the progress record %s: [Errno 21] Is a directory" % target)
    assert sorted(p.name for p in directory.iterdir()) == ["progress.json"]


def test_the_directory_of_the_record_is_made_0755(tmp_path):
    record = tmp_path / "state" / "progress.json"
    old_umask = os.umask(0)
    try:
        SnapshotRun(FakeModule(tmp_path, progress_file=str(record))).write_progress(state="running")
    finally:
        os.umask(old_umask)
    assert oct(record.parent.stat().st_mode & 0o777) == "0o755" and record.exists()
