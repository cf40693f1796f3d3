"""Every entry point a playbook of the collection calls has an argument spec holding the options
it reads, every setting has one name, and no filter turns a typo into a default.

ansible-core validates a role's argument spec only for the entry point that is called
(lib/ansible/playbook/role/__init__.py looks the spec up by the tasks_from name): an entry point
without one runs with no type checking at all. What an entry point reads is found by parsing
(tests/helpers/ansible_names.py): its task file, the task files it imports or includes, the
templates they render, and through them the role's vars and defaults."""

from __future__ import annotations

import re

import pytest
import yaml

from conftest import ROOT
from tests.helpers.ansible_names import entry_point_reads, role_calls

ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir())
# The playbooks and the task files they import (playbooks/tasks/), which read variables too.
PLAYBOOKS = sorted((ROOT / "playbooks").glob("*.yml")) + sorted((ROOT / "playbooks" / "tasks").glob("*.yml")) + [ROOT / "deploy.yml"]
RENAMED = yaml.safe_load((ROOT / "roles" / "fleet_vllm" / "vars" / "main.yml").read_text())["__fleet_vllm_renamed"]

# Settings of one role that another one reads, and why that is one setting read where it is
# needed rather than a second name for it.
CROSS_ROLE = {
    # The front door runs on the fleet host beside the server and the gateway balances across the
    # fleet hosts: both need the server's port, key and served name, and read them from the
    # server's own variables (the host's, or its backends' hostvars).
    # The front door also looks at the server's unit (vllm_server_service_name): whether the engine that runs was
    # started before it had its socket (roles/vllm_gateway/tasks/configure.yml).
    "vllm_gateway": {"vllm_server_api_key", "vllm_server_port", "vllm_server_served_model_name", "vllm_server_service_name"},
    # The monitoring scrapes each host's metrics listener, which vllm_gateway serves in TLS where the host has a
    # certificate: the host's own setting (its hostvars), else the one the play gives every host (group all, -e).
    "vllm_monitoring": {"vllm_gateway_tls_certificate"},
    # The acceptance run loads the host through its front door as a client would: the server's key and served name,
    # the front door's port and TLS (its certificate, the CA the gateways verify it with), and the server's unit
    # (whose command line says what the result depends on).
    "vllm_acceptance": {"vllm_server_api_key", "vllm_server_served_model_name", "vllm_server_service_name",
                        "vllm_gateway_frontdoor_port", "vllm_gateway_tls_certificate", "vllm_gateway_backend_ca_file"},
    # The planner counts what a host gives a copy with the share of GPU memory the server gives vLLM; the instances of
    # one machine (fleet_vllm_instance) are checked for the ports their front door and engine listen on.
    "vllm_preflight": {"vllm_server_gpu_memory_utilization", "vllm_gateway_frontdoor_port", "vllm_server_port"},
}


def specs(role):
    return yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]


def defaults(role):
    return yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text()) or {}


def inputs():
    """Each role's settings: the variables of its defaults."""
    return {role: set(defaults(role)) for role in ROLES}


def called_entry_points(node, found):
    """(role, tasks_from) of every import_role/include_role and `roles:` entry of a playbook."""
    found.update((role, tasks_from or "main") for role, tasks_from in role_calls(node))
    return found


CALLED = sorted(set().union(*(called_entry_points(yaml.safe_load(p.read_text()), set()) for p in PLAYBOOKS)))
SPECCED = sorted((role, entry) for role in ROLES for entry in specs(role))


def test_the_walk_finds_the_entry_points_deploy_calls():
    assert {("vllm_server", "stage"), ("vllm_runtime", "activate"), ("vllm_weights", "main"),
            ("vllm_gateway", "drain")} <= set(CALLED), CALLED


@pytest.mark.parametrize("role,entry", CALLED, ids=["%s:%s" % c for c in CALLED])
def test_every_entry_point_a_playbook_calls_has_an_argument_spec(role, entry):
    assert entry in specs(role), (
        "a playbook calls %s with tasks_from: %s, which has no argument spec in roles/%s/meta/argument_specs.yml: "
        "ansible-core would check none of its inputs" % (role, entry, role))


@pytest.mark.parametrize("role,entry", SPECCED, ids=["%s:%s" % s for s in SPECCED])
def test_an_entry_points_spec_holds_the_options_it_reads(role, entry):
    reads, files = entry_point_reads(ROOT / "roles" / role, entry)
    options = set((specs(role)[entry] or {}).get("options") or {})
    own = reads & inputs()[role]
    assert not own - options, "%s:%s reads %s (in %s), which its spec does not declare" % (
        role, entry, sorted(own - options), files)
    if entry != "main":  # main mirrors the defaults (test_argument_specs.py)
        assert not options - reads, "%s:%s declares %s, which it does not read" % (role, entry, sorted(options - reads))
    shared = set(specs("fleet_vllm")["main"]["options"])
    unknown = sorted(name for name in reads if name.startswith("fleet_vllm_") and name not in shared)
    assert not unknown, "%s:%s reads %s, which fleet.vllm.fleet_vllm does not declare" % (role, entry, unknown)


@pytest.mark.parametrize("role", ROLES)
def test_a_role_reads_another_roles_settings_only_where_that_is_one_setting(role):
    other = set().union(*(names for name, names in inputs().items() if name not in (role, "fleet_vllm")))
    read = set()
    for entry in specs(role):
        read |= entry_point_reads(ROOT / "roles" / role, entry)[0] & other
    assert read <= CROSS_ROLE.get(role, set()), "%s reads %s, settings of other roles" % (
        role, sorted(read - CROSS_ROLE.get(role, set())))


ALIAS = re.compile(r"^\{\{\s*([a-z_][a-z0-9_]*)\s*(\|\s*default\([^)]*\)\s*)?\}\}$")

# A role setting whose default is another setting, and why it is a setting of its own.
DERIVED = {
    "vllm_server_served_model_name": "the name clients ask for, which may differ from the repository",
    "vllm_gateway_engine_port": "the port the front door connects to on the host, the server's unless the engine "
                                "listens elsewhere",
}


@pytest.mark.parametrize("role", [r for r in ROLES if r != "fleet_vllm"])
def test_no_setting_is_reached_by_two_names(role):
    """A role default that is only another setting (`{{ fleet_vllm_x }}`) is a second name for it:
    some tasks would read one, some the other, and setting one would move only half of them."""
    settings = set(defaults("fleet_vllm")) | set().union(*inputs().values())
    aliases = {}
    for name, value in defaults(role).items():
        m = ALIAS.match(value.strip()) if isinstance(value, str) else None
        if m and m.group(1) in settings and name not in DERIVED:
            aliases[name] = m.group(1)
    assert not aliases, "%s: %s - read the setting by its own name" % (role, aliases)


RENAMED_FILES = [p for part in ("roles", "playbooks", "molecule", "inventories", "tests/integration/playbooks")
                 for p in sorted((ROOT / part).rglob("*")) if p.suffix in (".yml", ".yaml", ".j2", ".py", ".md")
                 # (the list of the old names, and the README that documents them)
                 and p not in (ROOT / "roles" / "fleet_vllm" / "vars" / "main.yml", ROOT / "roles" / "fleet_vllm" / "README.md")] \
    + [ROOT / "README.md"]


def test_nothing_reads_or_sets_an_old_name():
    """The old names are read once, by fleet.vllm.fleet_vllm, for one release (with a warning):
    no role, playbook, scenario, inventory or README may use them."""
    old = re.compile(r"\b(%s)\b" % "|".join(sorted(RENAMED)))
    found = ["%s: %s" % (p.relative_to(ROOT), sorted(set(old.findall(p.read_text())))) for p in RENAMED_FILES
             if old.search(p.read_text())]
    assert not found, found


def test_each_old_name_is_renamed_to_a_shared_setting():
    shared = set(specs("fleet_vllm")["main"]["options"])
    assert RENAMED and set(RENAMED.values()) <= shared
    assert not set(RENAMED) & set().union(*inputs().values()), "an old name is still a role default"


FILTERED = re.compile(r"\b([a-z_][a-z0-9_]*)\s*\|\s*(int|bool|float)\b")


def test_no_filter_turns_a_typo_into_a_default():
    """`x | int` makes 0 of 'abc' and `x | bool` makes false of 'ture': every setting a role or
    playbook filters so is typed int, float or bool in some spec, so that fleet.vllm.check_inputs
    stops the run on the typo, naming it, before the filter ever sees it."""
    typed = {}
    for role in ROLES:
        for entry in specs(role).values():
            for name, option in ((entry or {}).get("options") or {}).items():
                typed[name] = option.get("type", "str")
    settings = set(typed)
    loose = set()
    for path in [p for p in (ROOT / "roles").rglob("*") if p.suffix in (".yml", ".j2")] + PLAYBOOKS:
        for name, dummy in FILTERED.findall(path.read_text()):
            if name in settings and typed[name] not in ("int", "float", "bool"):
                loose.add("%s (%s, typed %s)" % (name, path.relative_to(ROOT), typed[name]))
    assert not loose, sorted(loose)


def test_the_walk_of_an_entry_point_follows_includes_templates_and_defaults(tmp_path):
    role = tmp_path / "r"
    for part in ("tasks", "templates", "defaults", "vars"):
        (role / part).mkdir(parents=True)
    (role / "tasks" / "go.yml").write_text(
        "- ansible.builtin.import_tasks: more.yml\n"
        "- ansible.builtin.template: {src: unit.j2, dest: '{{ r_dest }}'}\n"
        "- ansible.builtin.set_fact: {r_fact: 1}\n")
    (role / "tasks" / "more.yml").write_text("- ansible.builtin.debug: {msg: '{{ r_fact }}'}\n  when: r_flag | bool\n")
    (role / "templates" / "unit.j2").write_text("{{ r_port }} {{ _r_private }}")
    (role / "vars" / "main.yml").write_text("_r_private: '{{ r_derived }}'\n")
    (role / "defaults" / "main.yml").write_text("r_derived: '{{ r_base }}'\nr_unread: 1\n")
    reads, files = entry_point_reads(role, "go")
    assert {"r_dest", "r_flag", "r_port", "r_derived", "r_base", "_r_private"} <= reads
    assert "r_fact" not in reads and "r_unread" not in reads
    assert files[:2] == ["go.yml", "more.yml"] and "../templates/unit.j2" in files
