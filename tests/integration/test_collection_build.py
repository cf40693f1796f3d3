"""The built collection carries what users need and nothing of the development tree, and
installs and works outside the checkout."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from conftest import ROOT

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("build")
    proc = subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(out), str(ROOT)],
        capture_output=True, text=True, check=False, cwd=out,
    )
    assert proc.returncode == 0, proc.stderr
    (tarball,) = out.glob("fleet-vllm-*.tar.gz")
    return tarball


def test_tarball_holds_only_what_users_need(built):
    with tarfile.open(built) as tar:
        names = set(tar.getnames())
    for required in ("MANIFEST.json", "FILES.json", "README.md", "LICENSE", "meta/runtime.yml",
                     "plugins/modules/kv_cache_config.py", "plugins/module_utils/_json_edit.py",
                     "plugins/module_utils/_kv_cache.py", "changelogs/changelog.yaml",
                     # what ansible-builder reads from an installed collection (execution environments)
                     "meta/execution-environment.yml", "requirements.txt", "bindep.txt"):
        assert required in names, required
    for name in names:
        top = name.split("/")[0]
        assert top not in {"tests", "tools", ".ci", "collections", ".venv", ".cache", "molecule",
                           "benchmarks", ".git", "requirements-dev.txt", "pytest.ini", "Makefile",
                           ".ansible-lint", ".gitignore", ".config"}, name
        assert not name.startswith("inventories/demo"), name  # the local demo fleet needs the test harness
        assert "__pycache__" not in name, name


def test_installed_collection_documents_and_runs_its_module(built, tmp_path):
    dest = tmp_path / "collections"
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(dest), ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"))
    install = subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "install", "--offline", "-p", str(dest), str(built)],
        capture_output=True, text=True, env=env, cwd=tmp_path, check=False,
    )
    assert install.returncode == 0, install.stderr
    doc = subprocess.run(
        [str(BIN / "ansible-doc"), "fleet.vllm.kv_cache_config"],
        capture_output=True, text=True, env=env, cwd=tmp_path, check=False,
    )
    assert doc.returncode == 0, doc.stderr
    assert "kv_cache_dtype_before" in doc.stdout and "state" in doc.stdout


def plugin_names():
    """What the checkout ships: its modules, and the filters its filter plugins register."""
    modules = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py") if not p.stem.startswith("_"))
    filters = []
    for path in sorted((ROOT / "plugins" / "filter").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name == "filters":
                (ret,) = [n for n in ast.walk(node) if isinstance(n, ast.Return)]
                if isinstance(ret.value, ast.Dict):
                    filters += [k.value for k in ret.value.keys]
                else:  # dict(name=function, ...)
                    filters += [k.arg for k in ret.value.keywords]
    roles = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "meta" / "argument_specs.yml").is_file())
    return {"module": modules, "filter": sorted(filters), "role": roles}


@pytest.fixture(scope="module")
def installed(built, tmp_path_factory):
    """The built tarball installed on its own, outside the checkout, and an environment for it."""
    home = tmp_path_factory.mktemp("installed")
    dest = home / "collections"
    (home / "ansible.cfg").write_text("[defaults]\n")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(dest), ANSIBLE_CONFIG=str(home / "ansible.cfg"),
               ANSIBLE_NOCOLOR="1")
    install = subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "install", "--offline", "-p", str(dest), str(built)],
        capture_output=True, text=True, env=env, cwd=home, check=False,
    )
    assert install.returncode == 0, install.stderr
    return home, env


def ansible_doc_json(installed, kind, names):
    home, env = installed
    proc = subprocess.run(
        [str(BIN / "ansible-doc"), "--json", "-t", kind, *["fleet.vllm." + n for n in names]],
        capture_output=True, text=True, env=env, cwd=home, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "[WARNING]" not in proc.stderr, proc.stderr  # e.g. a plugin whose docs do not parse
    return json.loads(proc.stdout)


def test_there_are_plugins_and_roles_to_document():
    names = plugin_names()
    assert len(names["module"]) >= 10 and len(names["filter"]) >= 7 and len(names["role"]) >= 6, names


@pytest.mark.parametrize("kind", ["module", "filter"])
def test_ansible_doc_renders_every_plugin_of_the_tarball(installed, kind):
    """ansible-doc finds each plugin in the installed tarball, with its description, options,
    examples and return values: a plugin left out of the build or with broken docs fails."""
    names = plugin_names()[kind]
    docs = ansible_doc_json(installed, kind, names)
    assert sorted(docs) == sorted("fleet.vllm." + n for n in names)
    for name, entry in docs.items():
        doc = entry["doc"]
        assert doc.get("short_description") and doc.get("description"), name
        assert doc.get("options"), name
        assert (entry.get("examples") or "").strip(), "%s has no EXAMPLES" % name
        assert entry.get("return"), "%s has no RETURN" % name
    # The text form renders too (what a user types).
    home, env = installed
    for name in names:
        text = subprocess.run([str(BIN / "ansible-doc"), "-t", kind, "fleet.vllm." + name],
                              capture_output=True, text=True, env=env, cwd=home, check=False)
        assert text.returncode == 0 and name in text.stdout, (name, text.stderr)


def test_ansible_doc_lists_exactly_the_collections_plugins(installed):
    home, env = installed
    for kind, names in plugin_names().items():
        proc = subprocess.run([str(BIN / "ansible-doc"), "--json", "-t", kind, "-l", "fleet.vllm"],
                              capture_output=True, text=True, env=env, cwd=home, check=False)
        assert proc.returncode == 0, proc.stderr
        assert sorted(json.loads(proc.stdout)) == sorted("fleet.vllm." + n for n in names), kind


def test_ansible_doc_renders_every_role_of_the_tarball(installed):
    """`ansible-doc -t role` shows each role's entry points with every variable of its
    argument specs, as installed from the tarball."""
    roles = plugin_names()["role"]
    docs = ansible_doc_json(installed, "role", roles)
    assert sorted(docs) == sorted("fleet.vllm." + r for r in roles)
    for role in roles:
        specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
        entry_points = docs["fleet.vllm." + role]["entry_points"]
        assert sorted(entry_points) == sorted(specs), role
        for point, spec in specs.items():
            assert entry_points[point].get("short_description"), (role, point)
            assert sorted(entry_points[point].get("options") or {}) == sorted(spec.get("options") or {}), (role, point)
    home, env = installed
    for role in roles:
        text = subprocess.run([str(BIN / "ansible-doc"), "-t", "role", "fleet.vllm." + role],
                              capture_output=True, text=True, env=env, cwd=home, check=False)
        assert text.returncode == 0, (role, text.stderr)
        for point in yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]:
            assert re.search(r"ENTRY POINT: \W*%s\W" % point, text.stdout), (role, point, text.stdout[:500])
