"""Every Molecule scenario holds together with the current roles and test helpers, the ones CI
runs and those it does not (real_upgrade: `molecule test -s real_upgrade`, 6.5 minutes). The
cheaper check CI gives a scenario it does not run (issue 28): what would fail first when the
collection moves and the scenario is not run -

  - every playbook its sequence names (create, prepare, converge, side effects) and every
    collection playbook those run (playbooks/*.yml, in a side effect's command) exists and passes
    ansible-playbook --syntax-check against the checkout's roles;
  - every verify directory exists, and each call its tests make into the shared helpers
    (molecule/shared: fleet_hosts, real_engine, gateway_hosts) names a function that exists and
    binds to its signature;
  - the real engine's versions a scenario installs are in the site wheelhouse
    (tests/hosts/wheelhouse.sh)."""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import re
import subprocess
import sys

import pytest
import yaml

from conftest import ANSIBLE_BIN, ROOT

pytestmark = [pytest.mark.integration]

MOLECULE = ROOT / "molecule"
SHARED = MOLECULE / "shared"
BASE = yaml.safe_load((ROOT / ".config" / "molecule" / "config.yml").read_text())
SCENARIOS = sorted(path.parent.name for path in MOLECULE.glob("*/molecule.yml"))


def scenario(name):
    config = yaml.safe_load((MOLECULE / name / "molecule.yml").read_text())
    playbooks = dict(BASE["ansible"]["playbooks"], **config.get("ansible", {}).get("playbooks", {}))
    sequence = config.get("scenario", {}).get("test_sequence", [])
    return config, playbooks, sequence


def named_playbooks(name):
    """The scenario's own playbooks (the steps and side effects) and the collection's playbooks they run."""
    dummy, playbooks, sequence = scenario(name)
    steps = {step for step in sequence if isinstance(step, str)}
    paths = [MOLECULE / name / playbooks[step] for step in ("create", "prepare", "converge", "destroy") if step in steps]
    paths += [MOLECULE / name / step.split(None, 1)[1] for step in steps if step.startswith("side_effect ")]
    run = []
    for path in paths:
        run += [ROOT / found for found in re.findall(r"\bplaybooks/[a-z_]+\.yml\b", path.read_text()) if "molecule" not in found]
    return sorted(set(p.resolve() for p in paths)), sorted(set(run))


def verify_dirs(name):
    dummy, dummy2, sequence = scenario(name)
    found = [step.split(None, 1)[1] if " " in step else "tests" for step in sequence
             if isinstance(step, str) and step.split()[0] == "verify"]
    return [(MOLECULE / name / path).resolve() for path in found]


@pytest.mark.parametrize("name", SCENARIOS)
def test_its_playbooks_exist_and_parse_against_the_current_roles(name):
    own, collection = named_playbooks(name)
    missing = [str(p) for p in own + collection if not p.is_file()]
    assert not missing, missing
    run = subprocess.run([str(ANSIBLE_BIN / "ansible-playbook"), "--syntax-check", "-i", "localhost,"]
                         + [str(p) for p in own + collection], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, ANSIBLE_INJECT_FACT_VARS="false"), check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


def shared_calls(test_file):
    """(module alias's target, function, positional count, keyword names, line) of every call
    ``alias.func(...)`` into a module of molecule/shared that the test file imports."""
    tree = ast.parse(test_file.read_text())
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (SHARED / (alias.name + ".py")).is_file():
                    aliases[alias.asname or alias.name] = alias.name
    calls = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
                and node.func.value.id in aliases):
            if any(isinstance(arg, ast.Starred) for arg in node.args) or any(kw.arg is None for kw in node.keywords):
                continue  # *args / **kwargs: cannot be bound statically
            calls.append((aliases[node.func.value.id], node.func.attr, len(node.args), [kw.arg for kw in node.keywords],
                          node.lineno))
    return calls


@pytest.mark.parametrize("name", SCENARIOS)
def test_its_verifiers_call_shared_helpers_that_exist_with_their_signatures(name, monkeypatch):
    monkeypatch.syspath_prepend(str(SHARED))
    files = []
    for directory in verify_dirs(name):
        assert directory.is_dir(), "%s names verify %s, which does not exist" % (name, directory)
        files += sorted(directory.glob("test_*.py"))
    assert files, "%s verifies nothing" % name
    problems = []
    for test_file in files:
        compile(test_file.read_text(), str(test_file), "exec")
        for module, function, positional, keywords, line in shared_calls(test_file):
            target = getattr(importlib.import_module(module), function, None)
            where = "%s:%d: %s.%s" % (test_file.relative_to(ROOT), line, module, function)
            if target is None:
                problems.append(where + " does not exist")
            elif callable(target) and not inspect.isclass(target):
                try:
                    inspect.signature(target).bind(*range(positional), **{kw: None for kw in keywords})
                except TypeError as exc:
                    problems.append("%s%s: %s" % (where, inspect.signature(target), exc))
    assert not problems, "\n".join(problems)


def test_the_real_engine_versions_the_scenarios_install_are_in_the_wheelhouse():
    wheelhouse = (ROOT / "tests" / "hosts" / "wheelhouse.sh").read_text()
    offered = re.search(r"^cpu_versions=\(([^)]*)\)", wheelhouse, re.M).group(1).split()
    asked = {}
    # The real engine's own files: its scenarios' playbooks, inventories/demo-real's files (not the
    # links to the simulator's inventory).
    own = [p for p in (ROOT / "inventories" / "demo-real").rglob("*.yml") if not p.is_symlink()]
    for path in list(MOLECULE.glob("real_*/*.yml")) + own:
        for version in re.findall(r"^\s*vllm_runtime_version:\s*\"?([0-9.]+)\"?\s*$", path.read_text(), re.M):
            asked.setdefault(version, []).append(str(path.relative_to(ROOT)))
    assert asked, "no real-engine version found: has the way scenarios pin it changed?"
    assert set(asked) <= set(offered), (asked, offered)


def test_this_check_sees_a_helper_that_was_renamed(tmp_path, monkeypatch):
    """The check itself: a verifier calling a helper that is gone, or with too many arguments."""
    monkeypatch.syspath_prepend(str(SHARED))
    test_file = tmp_path / "test_x.py"
    test_file.write_text("import real_engine as real\n\ndef test_x(host):\n    real.no_such_helper(host)\n"
                         "    real.cpu_backend(host, 1, 2, 3)\n")
    calls = shared_calls(test_file)
    assert [(m, f) for m, f, dummy, dummy2, dummy3 in calls] == [("real_engine", "no_such_helper"), ("real_engine", "cpu_backend")]
    module = importlib.import_module("real_engine")
    assert getattr(module, "no_such_helper", None) is None
    with pytest.raises(TypeError):
        inspect.signature(module.cpu_backend).bind(*range(4))
    assert "real_engine" in sys.modules
