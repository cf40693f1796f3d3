"""fleet.vllm.venv_link on real links and directories in tmp_path, run as Ansible runs a module:
switch, previous, rollback, pruning, check mode (byte-identical) and refusals."""

from __future__ import annotations

import os
import time

import pytest

from conftest import snapshot


def venvs(base, *keys):
    for i, key in enumerate(keys):
        path = base / "venvs" / key
        path.mkdir(parents=True)
        (path / "marker").write_text(key)
        # Oldest first: modification times one minute apart, in the order given.
        stamp = time.time() - 3600 + 60 * i
        os.utime(path, (stamp, stamp))
    return base


def links(base):
    return {name: os.readlink(base / name) for name in ("current", "previous") if os.path.islink(base / name)}


def switch(run_module, base, key, check=False, **extra):
    args = {"path": str(base / "current"), "target": str(base / "venvs" / key)}
    args.update(extra)
    return run_module("venv_link", args, check=check, diff=True)


def test_first_switch_then_no_change(run_module, tmp_path):
    base = venvs(tmp_path, "a")
    res = switch(run_module, base, "a")
    assert not res.failed, res
    assert res.result["changed"] and res.result["switched"] and res.result["previous"] == ""
    assert links(base) == {"current": "venvs/a"}
    res = switch(run_module, base, "a")
    assert not res.result["changed"] and not res.result["switched"], res


def test_switch_records_previous_and_prunes_oldest_never_current_or_previous(run_module, tmp_path):
    base = venvs(tmp_path, "a", "b", "c", "d")
    assert not switch(run_module, base, "a").failed
    assert not switch(run_module, base, "b").failed
    assert links(base) == {"current": "venvs/b", "previous": "venvs/a"}
    # keep=2: a and c go (oldest first); b, the new rollback target, and d, the new current, stay.
    res = switch(run_module, base, "d", keep=2)
    assert not res.failed, res
    assert links(base) == {"current": "venvs/d", "previous": "venvs/b"}
    assert res.result["pruned"] == [str(base / "venvs" / "a"), str(base / "venvs" / "c")]
    assert sorted(os.listdir(base / "venvs")) == ["b", "d"]


def test_keep_1_still_keeps_the_previous(run_module, tmp_path):
    base = venvs(tmp_path, "a", "b")
    switch(run_module, base, "a")
    res = switch(run_module, base, "b", keep=1)
    assert not res.failed and res.result["pruned"] == []
    assert sorted(os.listdir(base / "venvs")) == ["a", "b"]


def test_check_mode_changes_nothing(run_module, tmp_path):
    base = venvs(tmp_path, "a", "b", "c")
    switch(run_module, base, "a")
    switch(run_module, base, "b")
    before = snapshot(base)
    res = switch(run_module, base, "c", check=True, keep=2)
    assert not res.failed and res.result["changed"] and res.result["pruned"] == [str(base / "venvs" / "a")]
    assert "current -> %s" % (base / "venvs" / "c") in res.result["diff"]["after"]
    res2 = run_module("venv_link", {"path": str(base / "current"), "state": "rollback"}, check=True)
    assert not res2.failed and res2.result["target"] == str(base / "venvs" / "a")
    # A target the install would create in check mode is accepted in check mode.
    res3 = switch(run_module, base, "not-yet", check=True)
    assert not res3.failed and res3.result["switched"], res3
    assert snapshot(base) == before


def test_rollback_swaps_and_rolls_forward(run_module, tmp_path):
    base = venvs(tmp_path, "a", "b")
    switch(run_module, base, "a")
    switch(run_module, base, "b")
    res = run_module("venv_link", {"path": str(base / "current"), "state": "rollback"})
    assert not res.failed and res.result["switched"], res
    assert links(base) == {"current": "venvs/a", "previous": "venvs/b"}
    run_module("venv_link", {"path": str(base / "current"), "state": "rollback"})
    assert links(base) == {"current": "venvs/b", "previous": "venvs/a"}
    # No leftover temporary links.
    assert sorted(os.listdir(base)) == ["current", "previous", "venvs"]


@pytest.mark.parametrize("setup, args, message", [
    ("nothing", {"state": "rollback"}, "no previous venv is recorded"),
    ("previous-gone", {"state": "rollback"}, "is gone"),
    ("current-is-a-directory", {"target": "venvs/a"}, "is not a symbolic link"),
    ("nothing", {"target": "venvs/missing"}, "is not a directory"),
])
def test_refusals_change_nothing(run_module, tmp_path, setup, args, message):
    base = venvs(tmp_path, "a")
    if setup == "previous-gone":
        os.symlink("venvs/a", base / "current")
        os.symlink("venvs/gone", base / "previous")
    elif setup == "current-is-a-directory":
        (base / "current").mkdir()
    before = snapshot(base)
    args = dict(args, path=str(base / "current"))
    if "target" in args:
        args["target"] = str(base / args["target"])
    res = run_module("venv_link", args)
    assert res.failed and message in res.result["msg"], res
    assert snapshot(base) == before
