# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The types of every input of the collection's roles, from their argument specs.

ansible-core checks a role's argument spec only for the entry point that is called, when it is
called: a typo in a variable that only the rolling phase reads would stop deploy.yml after the
weights were fetched and the venv installed. fleet.vllm.fleet_vllm, which runs first in every play
of the collection (every role depends on it), checks every variable an inventory or ``-e`` sets
against the types all the roles declare, before any task changes anything
(fleet.vllm.role_inputs, ansible.builtin.validate_argument_spec).

What is checked is what the value may be (type, elements, choices, sub-options), never whether it
is set: the defaults and ``required`` stay the entry points' own business (a role's defaults are
templates of other variables, which only that role's context resolves).

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

# What says what a value may be. Everything else of an option (default, required, description,
# version_added) says something else and is dropped.
KEPT = ("type", "elements", "choices", "no_log", "aliases")


def option_types(option):
    """One option's spec without its default and without ``required``, sub-options included."""
    kept = dict((key, option[key]) for key in KEPT if key in option)
    kept.setdefault("type", "str")  # what ansible-core assumes for an option without one
    if isinstance(option.get("options"), dict):
        kept["options"] = dict((name, option_types(sub)) for name, sub in option["options"].items())
    return kept


def entry_points(role, document):
    """(where, options) for each entry point of one role's meta/argument_specs.yml."""
    specs = (document or {}).get("argument_specs")
    if not isinstance(specs, dict):
        raise ValueError("%s: meta/argument_specs.yml has no argument_specs mapping" % role)
    found = []
    for entry in sorted(specs):
        options = (specs[entry] or {}).get("options") or {}
        if not isinstance(options, dict):
            raise ValueError("%s, entry point %s: options is not a mapping" % (role, entry))
        found.append(("%s %s" % (role, entry), options))
    return found


def merge(entries):
    """One spec of every option of ``entries`` ([(where, options)]), each with its types only.

    An option that two entry points declare with different types is an error of the collection
    (one setting, one type), naming both."""
    merged, owner = {}, {}
    for where, options in entries:
        for name in sorted(options):
            types = option_types(options[name] or {})
            if name in merged and merged[name] != types:
                raise ValueError("%s is declared as %r by %s and as %r by %s: one setting must have one type"
                                 % (name, merged[name], owner[name], types, where))
            merged.setdefault(name, types)
            owner.setdefault(name, where)
    return merged


def no_log_values(spec, values):
    """The values of the options marked no_log, which no message may show."""
    return set(str(values[name]) for name in values if spec.get(name, {}).get("no_log") and values[name] not in ("", None))


def report(checked, unresolved, errors):
    """The action's result. A variable that could not be evaluated here (its default reads what only
    its role's context has) is left to that role's own check, unless a wrong value explains it."""
    result = dict(changed=False, checked=len(checked), not_evaluated=list(unresolved), argument_errors=list(errors))
    if errors:
        result["failed"] = True
        result["msg"] = ("%s. The types are those of the roles' meta/argument_specs.yml (the tables of the role "
                         "READMEs); nothing has changed." % "; ".join(errors))
    else:
        result["msg"] = "%d variables checked against every entry point's types" % len(checked)
    return result
