"""fleet.vllm.managed_files on real files in tmp_path, run as Ansible runs a module: directories
and files with their modes, a rerun that changes nothing, check mode (byte-identical), diffs that
never show a secret, a validate command that keeps a bad file out, and errors that name the path."""

from __future__ import annotations

import json
import os
import stat

from conftest import snapshot


def mode(path):
    return oct(stat.S_IMODE(os.stat(path).st_mode))


def args(tmp_path, unit="[Unit]\n", secret="KEY=s3cret-value\n"):
    return {
        "directories": [{"path": str(tmp_path / "etc" / "fleet"), "mode": "0755"},
                        {"path": str(tmp_path / "state" / "staged"), "mode": "0700"}],
        "files": [
            {"path": str(tmp_path / "etc" / "fleet" / "vllm.service"), "content": unit, "mode": "0644"},
            {"path": str(tmp_path / "state" / "staged" / "secrets.env"), "secret_content": secret, "mode": "0600"},
        ],
    }


def test_writes_directories_and_files_then_changes_nothing(run_module, tmp_path):
    res = run_module("managed_files", args(tmp_path), diff=True)
    assert not res.failed, res
    assert res.result["changed"]
    assert res.result["changed_directories"] == [str(tmp_path / "etc" / "fleet"), str(tmp_path / "state" / "staged")]
    assert mode(tmp_path / "etc" / "fleet") == "0o755" and mode(tmp_path / "state" / "staged") == "0o700"
    assert (tmp_path / "etc" / "fleet" / "vllm.service").read_text() == "[Unit]\n"
    assert mode(tmp_path / "etc" / "fleet" / "vllm.service") == "0o644"
    assert mode(tmp_path / "state" / "staged" / "secrets.env") == "0o600"
    # the secret's content is in no output, not even the diff
    assert "s3cret-value" not in json.dumps(res.result)
    assert [d["after"] for d in res.result["diff"]] == ["[Unit]\n", "(secret content not shown)\n"]
    before = snapshot(tmp_path)
    again = run_module("managed_files", args(tmp_path))
    assert not again.result["changed"] and again.result["changed_files"] == []
    assert snapshot(tmp_path) == before
    # no temporary file is left behind
    assert sorted(os.listdir(tmp_path / "state" / "staged")) == ["secrets.env"]


def test_check_mode_writes_nothing_and_reports_the_diff(run_module, tmp_path):
    run_module("managed_files", args(tmp_path))
    before = snapshot(tmp_path)
    res = run_module("managed_files", args(tmp_path, unit="[Unit]\nDescription=new\n"), check=True, diff=True)
    assert res.result["changed"] and res.result["changed_files"] == [str(tmp_path / "etc" / "fleet" / "vllm.service")]
    assert res.result["diff"][0]["before"] == "[Unit]\n" and "Description=new" in res.result["diff"][0]["after"]
    assert snapshot(tmp_path) == before
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    res = run_module("managed_files", args(fresh), check=True)
    assert res.result["changed"] and os.listdir(fresh) == []


def test_mode_only_change_keeps_the_file(run_module, tmp_path):
    run_module("managed_files", args(tmp_path))
    path = tmp_path / "state" / "staged" / "secrets.env"
    os.chmod(path, 0o644)
    inode = os.stat(path).st_ino
    res = run_module("managed_files", args(tmp_path))
    assert res.result["changed_files"] == [str(path)]
    assert mode(path) == "0o600" and os.stat(path).st_ino == inode


def test_a_changed_file_is_replaced_atomically(run_module, tmp_path):
    run_module("managed_files", args(tmp_path))
    path = tmp_path / "etc" / "fleet" / "vllm.service"
    inode = os.stat(path).st_ino
    res = run_module("managed_files", args(tmp_path, unit="[Unit]\nX=1\n"))
    assert res.result["changed_files"] == [str(path)]
    assert path.read_text() == "[Unit]\nX=1\n" and os.stat(path).st_ino != inode  # a new file renamed over it
    assert mode(path) == "0o644"


def test_validate_keeps_a_bad_file_out(run_module, tmp_path):
    run_module("managed_files", args(tmp_path))
    path = tmp_path / "etc" / "fleet" / "vllm.service"
    before = snapshot(tmp_path)
    bad = args(tmp_path, unit="[Unit]\nBROKEN\n")
    bad["files"][0]["validate"] = "sh -c '! grep -q BROKEN \"$1\"' validate %s"
    res = run_module("managed_files", bad)
    assert res.failed and "%s was not written" % path in res.result["msg"], res
    assert snapshot(tmp_path) == before
    good = args(tmp_path, unit="[Unit]\nFINE\n")
    good["files"][0]["validate"] = "grep -q FINE %s"
    assert run_module("managed_files", good).result["changed_files"] == [str(path)]


def test_errors_name_the_path(run_module, tmp_path):
    missing = {"files": [{"path": str(tmp_path / "nope" / "f"), "content": "x", "mode": "0644"}]}
    res = run_module("managed_files", missing)
    assert res.failed and "the directory of %s does not exist" % (tmp_path / "nope" / "f") in res.result["msg"]
    (tmp_path / "adir").mkdir()
    res = run_module("managed_files", {"files": [{"path": str(tmp_path / "adir"), "content": "x", "mode": "0644"}]})
    assert res.failed and "%s exists and is not a regular file" % (tmp_path / "adir") in res.result["msg"]
    res = run_module("managed_files", {"files": [{"path": str(tmp_path / "f"), "content": "x", "mode": "rw-r--r--"}]})
    assert res.failed and "mode 'rw-r--r--' is not an octal mode" in res.result["msg"]
    directory = {"path": str(tmp_path / "d"), "mode": "0755", "owner": "no-such-user-fleet"}
    res = run_module("managed_files", {"directories": [directory]})
    assert res.failed and "no user no-such-user-fleet" in res.result["msg"] and not (tmp_path / "d").exists()
    res = run_module("managed_files", {"files": [{"path": "relative/f", "content": "x", "mode": "0644"}]})
    assert res.failed and "relative/f is not an absolute path" in res.result["msg"]


def test_src_puts_a_file_of_the_host_in_place_unseen(run_module, tmp_path):
    """files[].src (issue 14 point 8): the rolling phase puts the staged secrets in place with it."""
    staged = tmp_path / "staged"
    staged.mkdir(mode=0o700)
    (staged / "secrets.env").write_text("KEY=s3cret-value\n")
    (tmp_path / "etc").mkdir()
    item = {"path": str(tmp_path / "etc" / "secrets.env"), "src": str(staged / "secrets.env"), "mode": "0600"}
    # check mode: nothing written; a source an earlier task of the run would write counts as a change
    res = run_module("managed_files", {"files": [item]}, check=True, diff=True)
    assert res.result["changed"] and not (tmp_path / "etc" / "secrets.env").exists()
    res = run_module("managed_files", {"files": [dict(item, src=str(staged / "absent"))]}, check=True)
    assert res.result["changed"] and not res.failed
    res = run_module("managed_files", {"files": [item]}, diff=True)
    assert res.result["changed_files"] == [item["path"]]
    assert (tmp_path / "etc" / "secrets.env").read_text() == "KEY=s3cret-value\n"
    assert mode(tmp_path / "etc" / "secrets.env") == "0o600"
    assert "s3cret-value" not in json.dumps(res.result)
    assert sorted(os.listdir(tmp_path / "etc")) == ["secrets.env"]
    before = snapshot(tmp_path)
    assert not run_module("managed_files", {"files": [item]}).result["changed"]
    assert snapshot(tmp_path) == before
    missing = run_module("managed_files", {"files": [dict(item, src=str(staged / "absent"))]})
    assert missing.failed and str(staged / "absent") in missing.result["msg"]
    assert (tmp_path / "etc" / "secrets.env").read_text() == "KEY=s3cret-value\n"


def test_missing_parents_are_0755_under_a_cis_umask_and_existing_ones_stay(run_module, tmp_path):
    """Issue 24, point 9: under umask 027 the missing parents (/srv/vllm/models above the snapshots,
    /usr/local/libexec above the rsync gate) came out 0750 and the service user and the peers' daemon could not get
    through. The parents the module makes are 0755 whatever the umask, the leaves get their own mode (0700 stays
    0700), and a parent that existed is never changed."""
    operator = tmp_path / "srv"
    operator.mkdir()
    os.chmod(operator, 0o751)
    items = {"directories": [{"path": str(operator / "vllm" / "models" / "pristine" / "repo"), "mode": "0755"},
                             {"path": str(tmp_path / "usr" / "local" / "libexec" / "fleet-vllm"), "mode": "0755"},
                             {"path": str(tmp_path / "var" / "lib" / "fleet-vllm" / "staged"), "mode": "0700"}],
             "files": [{"path": str(tmp_path / "usr" / "local" / "libexec" / "fleet-vllm" / "gate"), "content": "x\n",
                        "mode": "0644"}]}
    res = run_module("managed_files", items, umask=0o027)
    assert not res.failed, res
    for parent in (operator / "vllm", operator / "vllm" / "models", operator / "vllm" / "models" / "pristine",
                   tmp_path / "usr", tmp_path / "usr" / "local", tmp_path / "usr" / "local" / "libexec",
                   tmp_path / "var", tmp_path / "var" / "lib", tmp_path / "var" / "lib" / "fleet-vllm"):
        assert mode(parent) == "0o755", parent
    assert mode(operator / "vllm" / "models" / "pristine" / "repo") == "0o755"
    assert mode(tmp_path / "var" / "lib" / "fleet-vllm" / "staged") == "0o700"
    assert mode(tmp_path / "usr" / "local" / "libexec" / "fleet-vllm" / "gate") == "0o644"
    assert mode(operator) == "0o751"
