"""Every role's meta/argument_specs.yml mirrors its defaults/main.yml key for key and value
for value, and every public variable carries the role's prefix."""

from __future__ import annotations

import pytest
import yaml

from conftest import ROOT

ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir())
# The role that holds the settings several roles share names them after the collection.
PREFIX = {"vllm_defaults": "fleet_vllm_"}


def test_there_are_roles():
    assert ROLES, "no roles found under roles/"


@pytest.mark.parametrize("role", ROLES)
def test_argument_specs_mirror_defaults(role):
    base = ROOT / "roles" / role
    defaults = yaml.safe_load((base / "defaults" / "main.yml").read_text()) or {}
    specs = yaml.safe_load((base / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]
    options = specs.get("options", {})
    assert sorted(defaults) == sorted(options), "defaults and argument_specs list different variables"
    for name, value in defaults.items():
        assert name.startswith(role + "_"), "%s is not prefixed with %s_" % (name, role)
        option = options[name]
        assert "type" in option and option.get("description"), name
        assert option.get("default") == value, "%s: default %r in argument_specs, %r in defaults" % (
            name, option.get("default"), value)


@pytest.mark.parametrize("role", ROLES)
def test_role_has_readme_naming_every_variable(role):
    readme = (ROOT / "roles" / role / "README.md").read_text()
    defaults = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text()) or {}
    missing = [name for name in defaults if name not in readme]
    assert not missing, "README of %s does not mention %s" % (role, missing)
