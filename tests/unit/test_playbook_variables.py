"""Every variable a playbook reads is documented, so the docs cannot drift from the playbooks.

A playbook (playbooks/*.yml and the checkout's deploy.yml) reads variables in its templates
(`{{ ... }}` anywhere: play keywords such as `hosts`, `serial`, `max_fail_percentage`, module
arguments, role vars) and in its conditionals (`when`, `failed_when`, ... which are bare Jinja
expressions). Each name it reads must be one of:

- a variable of a role of this collection, documented in that role's meta/argument_specs.yml;
- a name the playbook defines itself (`vars`, `register`, `set_fact`, `loop_var`);
- one of Ansible's special variables;
- otherwise a playbook variable, documented in docs/playbooks.md in the table of playbook
  variables: a row whose first cell is the variable's name in backquotes.

The reverse holds too: every row of that table names a variable some playbook reads, so a
variable that a playbook stopped reading leaves the docs with it.
"""

from __future__ import annotations

import re

import pytest
import yaml

from conftest import ROOT
from tests.helpers.ansible_names import SPECIAL, role_calls, walk

DOC = ROOT / "docs" / "playbooks.md"
# The playbooks and the task files they import (playbooks/tasks/), which read variables too.
PLAYBOOKS = sorted((ROOT / "playbooks").glob("*.yml")) + sorted((ROOT / "playbooks" / "tasks").glob("*.yml")) + [ROOT / "deploy.yml"]


def playbook_reads(path):
    reads, defines = set(), set()
    walk(yaml.safe_load(path.read_text()), reads, defines)
    return reads - defines


def role_variables():
    names = set()
    for spec in (ROOT / "roles").glob("*/meta/argument_specs.yml"):
        for entry in (yaml.safe_load(spec.read_text())["argument_specs"] or {}).values():
            names.update((entry or {}).get("options") or {})
    return names


def documented():
    """The first cells of the table under the heading 'Playbook variables' of docs/playbooks.md."""
    text = DOC.read_text()
    m = re.search(r"^## Playbook variables\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, "docs/playbooks.md has no '## Playbook variables' section"
    return set(re.findall(r"^\| `([A-Za-z_][A-Za-z0-9_]*)` \|", m.group(1), re.M))


def playbook_variables():
    """Per playbook, the names it reads that are neither role variables, its own, nor special."""
    roles = role_variables()
    return {path.relative_to(ROOT).as_posix(): sorted(playbook_reads(path) - roles - SPECIAL)
            for path in PLAYBOOKS}


def test_the_walk_finds_what_a_playbook_reads():
    """The parser itself: a name in a play keyword, in a conditional and in a module argument is
    found; a registered result, play vars and special variables are not reported."""
    play = yaml.safe_load("""
- hosts: "{{ fleet_vllm_hosts | default('all') }}"
  serial: "{{ fleet_vllm_serial | default(1) }}"
  vars: {local_thing: 1}
  tasks:
    - ansible.builtin.command: echo {{ local_thing }} {{ vllm_server_port }}
      register: __out
      when: fleet_vllm_flag | bool and __out is not defined and inventory_hostname in groups['x']
""")
    reads, defines = set(), set()
    walk(play, reads, defines)
    assert reads - defines - SPECIAL == {"fleet_vllm_hosts", "fleet_vllm_serial", "vllm_server_port",
                                         "fleet_vllm_flag"}


def test_role_variables_are_found():
    assert {"vllm_server_port", "vllm_weights_source", "vllm_nccl_allowed_extra"} <= role_variables()


@pytest.mark.parametrize("playbook", [p.relative_to(ROOT).as_posix() for p in PLAYBOOKS])
def test_every_variable_the_playbook_reads_is_documented(playbook):
    missing = [name for name in playbook_variables()[playbook] if name not in documented()]
    assert not missing, (
        "%s reads %s, which no role's meta/argument_specs.yml documents: add a row for each to the "
        "'Playbook variables' table of docs/playbooks.md" % (playbook, missing))


def test_every_documented_playbook_variable_is_read_by_a_playbook():
    read = set().union(*playbook_variables().values())
    stale = sorted(documented() - read)
    assert not stale, "docs/playbooks.md documents %s, which no playbook reads" % stale


def test_readme_lists_every_role_and_playbook():
    readme = (ROOT / "README.md").read_text()
    m = re.search(r"^### Roles and playbooks\n(.*?)(?=^#)", readme, re.M | re.S)
    assert m, "README.md has no '### Roles and playbooks' section"
    table = m.group(1)
    roles = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "meta" / "argument_specs.yml").is_file())
    missing = ["fleet.vllm.%s" % r for r in roles if "`fleet.vllm.%s`" % r not in table]
    missing += ["playbooks/%s" % p.name for p in sorted((ROOT / "playbooks").glob("*.yml"))
                if "`playbooks/%s`" % p.name not in table]
    assert not missing, "README.md's 'Roles and playbooks' table does not list %s" % missing


def pipeline(node, steps):
    """The collection's roles in the order the playbook runs them: `roles:` entries and
    import/include_role tasks, walked in document order (blocks included). A role run with
    `tasks_from: X` is the step X (`served`), otherwise (and for its `stage`) the role's name
    without `vllm_`. The rolling play (playbooks/roll.yml, imported) switches and restarts what
    was staged, in the same order. A check alone (`tasks_from: check`) is no step."""
    for role, tasks_from in role_calls(node):
        # The gateways' checks before the first play (tasks_from: check) change nothing: no step.
        if tasks_from == "check":
            continue
        # A role's staging half (`tasks_from: stage`) is the role's step.
        steps.append(tasks_from if tasks_from not in (None, "main", "stage") else role.replace("vllm_", "", 1))
    return steps


def deploy_pipeline():
    steps = pipeline(yaml.safe_load((ROOT / "playbooks" / "deploy.yml").read_text()), [])
    return [s for i, s in enumerate(steps) if i == 0 or s != steps[i - 1]]


def test_pipeline_walk_reads_deploy_yml():
    steps = deploy_pipeline()
    assert steps[0] == "preflight" and "server" in steps and "kv_cache" in steps, steps


PIPELINE_PAGES = ["README.md", "docs/design.md", "docs/playbooks.md"]


@pytest.mark.parametrize("doc", sorted(set(PIPELINE_PAGES) | {
    p.relative_to(ROOT).as_posix() for p in [*ROOT.glob("docs/*.md"), *ROOT.glob("roles/*/README.md")]}))
def test_docs_give_the_pipeline_in_the_order_deploy_yml_runs_it(doc):
    """Each page that names the pipeline names it as deploy.yml runs it (a trailing `-> verify`,
    the server's own check, may follow); README.md, design.md and playbooks.md must name it."""
    text = " ".join((ROOT / doc).read_text().split())
    written = re.findall(r"preflight(?: -> [a-z_]+)+", text)
    if doc not in PIPELINE_PAGES and not written:
        return
    assert written, "%s does not give the pipeline" % doc
    expected = " -> ".join(deploy_pipeline())
    wrong = [w for w in written if w != expected and w != expected + " -> verify"]
    assert not wrong, "%s gives the pipeline as %s; playbooks/deploy.yml runs %s" % (doc, wrong, expected)


DOC_PAGES = sorted(p.relative_to(ROOT).as_posix() for p in
                   [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("roles/*/README.md")])
YAML_BLOCK = re.compile(r"^```ya?ml\n(.*?)^```", re.M | re.S)


@pytest.mark.parametrize("doc", DOC_PAGES)
def test_examples_set_only_variables_that_exist(doc):
    """A YAML example in the docs sets only role variables the argument specs document and
    playbook variables of docs/playbooks.md: a renamed variable cannot live on in an example."""
    known = role_variables() | documented()
    unknown = set()
    for block in YAML_BLOCK.findall((ROOT / doc).read_text()):
        for name in re.findall(r"^\s*-?\s*((?:vllm|fleet_vllm)_[a-z0-9_]+):", block, re.M):
            if name not in known and name not in ("vllm_servers", "vllm_gateways", "vllm_monitoring"):  # inventory groups
                unknown.add(name)
    assert not unknown, "%s sets variables no role or playbook reads: %s" % (doc, sorted(unknown))


def _tasks_files():
    return sorted([*ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("roles/*/handlers/*.yml"),
                   *(ROOT / "playbooks").glob("*.yml")])


def _find(node, key, found):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key:
                found.append(v)
            _find(v, key, found)
    elif isinstance(node, list):
        for v in node:
            _find(v, key, found)
    return found


def test_handlers_that_are_notified_or_flushed_exist():
    """The roles restart through vllm_fingerprint, not handlers: a `notify` or a flush_handlers
    must have a handler to run, or it only suggests a restart that never happens."""
    handlers = set()
    for path in ROOT.glob("roles/*/handlers/*.yml"):
        for handler in yaml.safe_load(path.read_text()) or []:
            handlers.add(handler.get("name"))
            listen = handler.get("listen") or []
            handlers.update([listen] if isinstance(listen, str) else listen)
    for path in (ROOT / "playbooks").glob("*.yml"):
        for handler in [h for hs in _find(yaml.safe_load(path.read_text()), "handlers", []) for h in hs]:
            handlers.add(handler.get("name"))
    bad = []
    for path in _tasks_files():
        data = yaml.safe_load(path.read_text())
        for notify in _find(data, "notify", []):
            for name in [notify] if isinstance(notify, str) else notify:
                if name not in handlers:
                    bad.append("%s notifies %r" % (path.relative_to(ROOT), name))
        flushes = [m for m in _find(data, "ansible.builtin.meta", []) + _find(data, "meta", [])
                   if m == "flush_handlers"]
        if flushes and not handlers:
            bad.append("%s flushes handlers, and there are none" % path.relative_to(ROOT))
    assert not bad, bad
