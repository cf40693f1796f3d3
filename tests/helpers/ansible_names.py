"""The variable names Ansible YAML and templates read, found by parsing them (never by running them):
what tests/unit/test_playbook_variables.py checks playbooks with, and
tests/unit/roles/test_entry_point_specs.py each role entry point with."""

from __future__ import annotations

import functools
import re
import warnings

import jinja2
import jinja2.nodes
import yaml

# Keys whose string values Ansible evaluates as bare Jinja expressions.
CONDITIONALS = {"when", "failed_when", "changed_when", "until", "that"}

# Ansible's special variables (docs.ansible.com, "Special Variables", ansible-core 2.19) and the
# Jinja globals Ansible adds: read, never set by a user of the collection.
SPECIAL = {
    "ansible_check_mode", "ansible_collection_name", "ansible_config_file", "ansible_dependent_role_names",
    "ansible_diff_mode", "ansible_facts", "ansible_forks", "ansible_index_var", "ansible_inventory_sources",
    "ansible_limit", "ansible_loop", "ansible_loop_var", "ansible_parent_role_names", "ansible_parent_role_paths",
    "ansible_play_batch", "ansible_play_hosts", "ansible_play_hosts_all", "ansible_play_name",
    "ansible_play_role_names", "ansible_playbook_python", "ansible_role_name", "ansible_role_names",
    "ansible_run_tags", "ansible_search_path", "ansible_skip_tags", "ansible_verbosity", "ansible_version",
    "group_names", "groups", "hostvars", "inventory_dir", "inventory_file", "inventory_hostname",
    "inventory_hostname_short", "omit", "play_hosts", "playbook_dir", "role_name", "role_names", "role_path",
    "item",
    # Jinja and Ansible template globals
    "lookup", "query", "q", "now", "undef", "range", "dict", "lipsum", "cycler", "joiner", "namespace", "zip",
    "true", "false", "none", "True", "False", "None",
}

ENV = jinja2.Environment()


def names_in(template):
    """The names a template loads that it does not assign itself (`for`, `set`). Only parsed:
    jinja2.meta would compile it, which fails on Ansible's filters and tests."""
    with warnings.catch_warnings():
        # A regex in a template ('\Z') is a Python escape Jinja's lexer warns about; Ansible reads it fine.
        warnings.simplefilter("ignore", DeprecationWarning)
        tree = ENV.parse(template)
    loaded = {n.name for n in tree.find_all(jinja2.nodes.Name) if n.ctx == "load"}
    stored = {n.name for n in tree.find_all(jinja2.nodes.Name) if n.ctx in ("store", "param")}
    return loaded - stored


def walk(node, reads, defines, key=None):
    """Collect the names read (templates, conditionals) and defined (vars, register, set_fact)."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "vars" and isinstance(v, dict):
                defines.update(v)
            elif k == "register" and isinstance(v, str):
                defines.add(v)
            elif k in ("ansible.builtin.set_fact", "set_fact") and isinstance(v, dict):
                defines.update(n for n in v if n != "cacheable")
            elif k == "loop_control" and isinstance(v, dict) and "loop_var" in v:
                defines.add(v["loop_var"])
            walk(v, reads, defines, k)
    elif isinstance(node, list):
        for v in node:
            walk(v, reads, defines, key)
    elif isinstance(node, str):
        if key in CONDITIONALS and "{{" not in node:
            reads.update(names_in("{{ %s }}" % node))
        elif "{{" in node or "{%" in node:
            reads.update(names_in(node))


ROLE_ACTIONS = ("ansible.builtin.import_role", "ansible.builtin.include_role", "import_role", "include_role")


def role_calls(node):
    """(role, tasks_from or None) of every `roles:` entry and import/include_role of a playbook or
    task list, in document order (blocks included); the role without its collection."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "roles" and isinstance(value, list):
                for role in value:
                    yield (role["role"] if isinstance(role, dict) else role).rpartition(".")[2], None
            elif key in ROLE_ACTIONS:
                yield value["name"].rpartition(".")[2], value.get("tasks_from")
            else:
                yield from role_calls(value)
    elif isinstance(node, list):
        for value in node:
            yield from role_calls(value)


TASK_FILE_KEYS = ("ansible.builtin.import_tasks", "ansible.builtin.include_tasks", "import_tasks", "include_tasks")
TEMPLATE = re.compile(r"""['"]?([A-Za-z0-9_.-]+\.j2)\b""")


def _task_files(node, found):
    """The task files a task list imports or includes, by name."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k in TASK_FILE_KEYS:
                found.append(v if isinstance(v, str) else v.get("file"))
            else:
                _task_files(v, found)
    elif isinstance(node, list):
        for v in node:
            _task_files(v, found)
    return found


@functools.lru_cache(maxsize=None)
def parse(text):
    """TEXT as YAML, parsed once per text (the task files are asked for again by every entry point
    that includes them), with libyaml's safe loader where PyYAML has it. Callers never change it."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def entry_point_reads(role_dir, entry):
    """The names one entry point of a role reads (tasks/ENTRY.yml, the task files it imports or
    includes, the templates they render, and through them the role's vars and defaults), less
    the names it sets itself. Returns (reads, files read)."""
    tasks, pending, seen = role_dir / "tasks", ["%s.yml" % entry], []
    reads, defines, templates = set(), set(), set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.append(name)
        text = (tasks / name).read_text()
        tree = parse(text)
        walk(tree, reads, defines)
        pending.extend(_task_files(tree, []))
        templates.update(TEMPLATE.findall(text))
    # A read of a variable of the role's vars or defaults reads what that variable's value reads,
    # and the templates it renders.
    definitions = {}
    for part in ("defaults", "vars"):
        path = role_dir / part / "main.yml"
        if path.is_file():
            definitions.update(parse(path.read_text()) or {})
    rendered, frontier = set(), set(reads)
    while frontier or templates - rendered:
        for template in sorted(templates - rendered):
            rendered.add(template)
            path = role_dir / "templates" / template
            if path.is_file():
                seen.append("../templates/" + template)
                frontier |= names_in(path.read_text()) - reads
                reads |= names_in(path.read_text())
        while frontier:
            name = frontier.pop()
            if name in definitions:
                found = set()
                walk(definitions[name], found, set())
                templates.update(TEMPLATE.findall(yaml.safe_dump(definitions[name])))
                frontier |= found - reads
                reads |= found
    return reads - defines - SPECIAL, seen
