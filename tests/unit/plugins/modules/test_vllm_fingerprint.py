"""vllm_fingerprint: the staged state of the service compared with the one it was last verified with,
what is in place, and what the rolling phase must do (none, start, restart, adopt).

The service's state comes from a stand-in `systemctl` (it prints the properties the test wrote):
the module's decision is what is tested here; the Molecule scenarios run it against real systemd."""

from __future__ import annotations

import json
import os
import time

import pytest

FAKE_SYSTEMCTL = """#!/bin/sh
# Stand-in for `systemctl show UNIT --property=...`: prints the properties a test wrote.
cat "$FAKE_SYSTEMCTL_STATE"
"""


def monotonic_usec():
    return int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1000000)


@pytest.fixture
def state(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"a": 1}')
    (model / "model-00001-of-00002.safetensors").write_bytes(b"x" * 64)
    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "vllm.service").write_text("[Service]\n")
    live = tmp_path / "etc"
    live.mkdir()
    venvs = tmp_path / "opt"
    (venvs / "venvs" / "0.33.0").mkdir(parents=True)
    (venvs / "venvs" / "0.34.0").mkdir()
    os.symlink("venvs/0.33.0", venvs / "current")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "systemctl").write_text(FAKE_SYSTEMCTL)
    (bindir / "systemctl").chmod(0o755)
    service_file = tmp_path / "service.txt"
    args = {
        "state_file": str(tmp_path / "state" / "vllm.fingerprint"),
        "files": [{"name": "unit", "path": str(staged / "vllm.service"), "live": str(live / "vllm.service")},
                  {"name": "secrets", "path": str(staged / "missing.env")}],
        "links": [{"name": "venv", "path": str(venvs / "current"), "target": str(venvs / "venvs" / "0.33.0")}],
        "model_path": str(model),
        "small_file_bytes": 32,
    }

    class State:
        pass

    s = State()
    s.model, s.staged, s.live, s.venvs, s.args, s.tmp = model, staged, live, venvs, args, tmp_path
    s.env = {"PATH": "%s:%s" % (bindir, os.environ["PATH"]), "FAKE_SYSTEMCTL_STATE": str(service_file)}

    def service(active="active", enabled="enabled", started=None, reload="no", invocation="abc"):
        service_file.write_text("\n".join([
            "ActiveState=%s" % active, "SubState=running", "Result=success", "UnitFileState=%s" % enabled,
            "LoadState=loaded", "NeedDaemonReload=%s" % reload, "InvocationID=%s" % invocation,
            "ExecMainStartTimestampMonotonic=%d" % (started if started is not None else monotonic_usec()), ""]))

    s.service = service

    def switch():
        (live / "vllm.service").write_bytes((staged / "vllm.service").read_bytes())

    s.switch = switch
    return s


def run(run_module, s, check=False, **extra):
    res = run_module("vllm_fingerprint", dict(s.args, **extra), check=check, env=s.env)
    assert not res.failed, res
    return res.result


def test_record_then_match_then_each_change_differs(run_module, state):
    s = state
    first = run(run_module, s)
    assert first["matches"] is False and first["differences"] == ["no fingerprint recorded"] and not first["changed"]
    assert first["action"] == "restart" and first["drift"] == ["file unit (%s)" % (s.live / "vllm.service")]

    check = run(run_module, s, check=True, record="running")
    assert check["changed"] and not os.path.exists(s.args["state_file"])
    rec = run(run_module, s, record="running")
    assert rec["changed"] and oct(os.stat(s.args["state_file"]).st_mode & 0o777) == "0o600"
    again = run(run_module, s, record="running")
    assert not again["changed"] and again["matches"]
    s.switch()
    assert run(run_module, s)["in_place"] is True

    changes = [
        (lambda: (s.staged / "vllm.service").write_text("[Service]\nX=1\n"), "file unit"),
        (lambda: s.args["links"][0].update(target=str(s.venvs / "venvs" / "0.34.0")), "link venv"),
        (lambda: (s.model / "config.json").write_text('{"a": 2}'), "model config.json"),
        (lambda: (s.model / "model-00001-of-00002.safetensors").write_bytes(b"x" * 65), "model model-00001-of-00002.safetensors"),
        (lambda: (s.model / "model-00002-of-00002.safetensors").write_bytes(b"y" * 64), "model model-00002-of-00002.safetensors"),
    ]
    for change, expected in changes:
        change()
        result = run(run_module, s)
        assert result["matches"] is False and result["differences"] == [expected], result
        assert result["action"] == "restart"
        run(run_module, s, record="running")


def test_staged_and_live_compare_by_name_not_path(run_module, state):
    """The record of a start holds the staged files' checksums; once the switch copied them, a
    rerun with the same staged files matches and is in place: nothing to do."""
    s = state
    s.service()
    s.switch()
    run(run_module, s, record="running")
    result = run(run_module, s, unit="vllm.service")
    assert result["matches"] and result["in_place"] and result["action"] == "none", result
    assert result["service"]["ActiveState"] == "active"


def test_live_file_edited_by_hand_is_drift_and_restarts(run_module, state):
    s = state
    s.service()
    s.switch()
    run(run_module, s, record="running")
    (s.live / "vllm.service").write_text("[Service]\nEdited=by hand\n")
    result = run(run_module, s, unit="vllm.service")
    assert result["matches"] and not result["in_place"] and result["action"] == "restart"
    assert result["drift"] == ["file unit (%s)" % (s.live / "vllm.service")]


def test_link_pointing_elsewhere_is_drift(run_module, state):
    s = state
    s.service()
    s.switch()
    run(run_module, s, record="running")
    os.remove(s.venvs / "current")
    os.symlink("venvs/0.34.0", s.venvs / "current")
    result = run(run_module, s, unit="vllm.service")
    assert not result["in_place"] and result["drift"] == ["link venv (%s)" % (s.venvs / "current")]
    assert result["action"] == "restart"


@pytest.mark.parametrize("active, enabled", [("failed", "enabled"), ("inactive", "enabled"), ("active", "disabled")])
def test_verified_state_not_running_or_not_enabled_is_a_start(run_module, state, active, enabled):
    s = state
    s.service(active=active, enabled=enabled)
    s.switch()
    run(run_module, s, record="running")
    result = run(run_module, s, unit="vllm.service")
    assert result["action"] == "start" and active in result["reason"], result


def test_interrupted_rollout_is_adopted_only_when_the_service_started_after_the_pending_record(run_module, state):
    s = state
    # Record what ran before (another unit), then stage a new unit: a restart is due.
    s.service()
    s.switch()
    run(run_module, s, record="running")
    (s.staged / "vllm.service").write_text("[Service]\nNew=1\n")
    before = monotonic_usec()
    assert run(run_module, s, unit="vllm.service")["action"] == "restart"

    pending = run(run_module, s, unit="vllm.service", record="pending")
    assert pending["changed"] and os.path.exists(s.args["state_file"] + ".pending")
    record = json.loads(open(s.args["state_file"] + ".pending").read())
    assert record["digest"] == pending["digest"] and record["monotonic_usec"] > before

    # Interrupted before the switch: files not in place, the old service still runs -> restart.
    s.service(started=before)
    assert run(run_module, s, unit="vllm.service")["action"] == "restart"
    # Switched, but interrupted before the restart: the service started before the pending record -> restart.
    s.switch()
    assert run(run_module, s, unit="vllm.service")["action"] == "restart"
    # Restarted after the record, but systemd has not reloaded the new unit -> restart.
    s.service(started=monotonic_usec(), reload="yes")
    assert run(run_module, s, unit="vllm.service")["action"] == "restart"
    # Restarted on the staged state after the record: adopt it, no restart.
    s.service(started=monotonic_usec())
    adopt = run(run_module, s, unit="vllm.service")
    assert adopt["action"] == "adopt" and not adopt["matches"], adopt
    # ... but not when it is not running.
    s.service(active="failed", started=monotonic_usec())
    assert run(run_module, s, unit="vllm.service")["action"] == "restart"

    # Recording it as running drops the pending record; the next run has nothing to do.
    s.service(started=monotonic_usec())
    done = run(run_module, s, unit="vllm.service", record="running")
    assert done["changed"] and not os.path.exists(s.args["state_file"] + ".pending")
    assert run(run_module, s, unit="vllm.service")["action"] == "none"


def test_pending_record_of_another_state_is_not_adopted(run_module, state):
    s = state
    s.service()
    run(run_module, s, unit="vllm.service", record="pending")
    (s.staged / "vllm.service").write_text("[Service]\nOther=1\n")
    s.switch()
    s.service(started=monotonic_usec())
    assert run(run_module, s, unit="vllm.service")["action"] == "restart"


def test_check_mode_writes_no_record(run_module, state):
    s = state
    s.service()
    assert run(run_module, s, check=True, unit="vllm.service", record="pending")["changed"]
    assert run(run_module, s, check=True, record="running")["changed"]
    assert not (s.tmp / "state").exists()


def test_large_files_count_by_size_not_content(run_module, state):
    s = state
    run(run_module, s, record="running")
    (s.model / "model-00001-of-00002.safetensors").write_bytes(b"z" * 64)  # same size: a shard is not re-read
    assert run(run_module, s)["matches"] is True


def test_missing_model_dir_and_duplicate_names_fail(run_module, state):
    s = state
    result = run_module("vllm_fingerprint", dict(s.args, model_path=str(s.tmp / "nope")), env=s.env).result
    assert result["failed"] and "does not exist" in result["msg"]
    files = s.args["files"] + [{"name": "unit", "path": "/etc/hostname"}]
    result = run_module("vllm_fingerprint", dict(s.args, files=files), env=s.env).result
    assert result["failed"] and "each name may appear once" in result["msg"]


def test_in_check_mode_a_model_dir_not_built_yet_is_a_restart_not_a_failure(run_module, state):
    """A check-mode deploy of a new pin: the served directory of the new venv is not built (the run would build it
    first); the comparison says the service would restart, and why, instead of failing."""
    s = state
    s.service()
    run(run_module, s, unit="vllm.service", record="running")
    missing = str(s.tmp / "variants" / "new-pin")
    result = run_module("vllm_fingerprint", dict(s.args, model_path=missing, unit="vllm.service"), env=s.env,
                        check=True).result
    assert not result.get("failed"), result
    assert result["action"] == "restart"
    assert "model directory %s" % missing in result["differences"]
    assert "model directory %s (not built yet)" % missing in result["drift"]
    # The server's stage runs the comparison out of check mode (check_mode: false) and says so with model_not_built.
    asked = run_module("vllm_fingerprint", dict(s.args, model_path=missing, unit="vllm.service", model_not_built="restart"),
                       env=s.env).result
    assert (asked["action"], asked["drift"]) == (result["action"], result["drift"])
    # Otherwise the same is an error: a real run builds the directory before it compares.
    result = run_module("vllm_fingerprint", dict(s.args, model_path=missing), env=s.env).result
    assert result["failed"] and "does not exist" in result["msg"]


def test_host_state_compares_as_this_module_does(run_module, state):
    """host_state's fingerprint option (the server's look, when its write has nothing to do) answers
    what vllm_fingerprint answers, in every state: none recorded, recorded, in place, changed, a
    service to start; it records nothing; and it answers null while the model directory is missing."""
    s = state
    s.service(active="inactive")
    args = dict(s.args, unit="vllm.service")

    def both():
        look = run_module("host_state", {"fingerprint": args}, env=s.env)
        assert not look.failed, look
        alone = run(run_module, s, unit="vllm.service")
        alone.pop("changed")
        alone.pop("invocation", None)
        return look.result["fingerprint"], alone

    states = []
    for step in (lambda: None, lambda: run(run_module, s, record="running"), s.switch,
                 lambda: s.service(active="active"),
                 lambda: (s.model / "config.json").write_text('{"a": 3}')):
        step()
        look, alone = both()
        assert look == alone
        states.append(look["action"])
    assert states == ["restart", "restart", "start", "none", "restart"]
    assert not os.path.exists(s.args["state_file"] + ".pending")
    missing = dict(args, model_path=str(s.tmp / "not-built-yet"))
    assert run_module("host_state", {"fingerprint": missing}, env=s.env).result["fingerprint"] is None
    assert run_module("host_state", {}, env=s.env).result["fingerprint"] is None
