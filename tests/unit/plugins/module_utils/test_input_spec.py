"""_input_spec: the types of every role input, merged from the entry points' specs, that
fleet.vllm.check_inputs checks every play's variables against before anything changes."""

from __future__ import annotations

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils._input_spec import (
    entry_points, merge, no_log_values, option_types, report)


def test_only_what_a_value_may_be_is_kept():
    option = {"description": ["x"], "type": "list", "elements": "str", "default": "{{ a }}", "required": True,
              "choices": ["a", "b"], "no_log": True, "version_added": "0.2.0"}
    assert option_types(option) == {"type": "list", "elements": "str", "choices": ["a", "b"], "no_log": True}


def test_an_option_without_a_type_is_a_string_and_sub_options_are_kept_without_defaults():
    assert option_types({"description": "x"}) == {"type": "str"}
    nested = {"type": "dict", "options": {"port": {"type": "int", "default": 1, "required": True}, "name": {}}}
    assert option_types(nested) == {"type": "dict", "options": {"port": {"type": "int"}, "name": {"type": "str"}}}


def test_entry_points_are_named_by_role_and_entry():
    document = {"argument_specs": {"stage": {"options": {"a": {"type": "int"}}}, "main": {"options": None},
                                   "roll": None}}
    assert entry_points("r", document) == [("r main", {}), ("r roll", {}), ("r stage", {"a": {"type": "int"}})]


@pytest.mark.parametrize("document,message", [
    (None, "r: meta/argument_specs.yml has no argument_specs mapping"),
    ({"argument_specs": []}, "r: meta/argument_specs.yml has no argument_specs mapping"),
    ({"argument_specs": {"main": {"options": ["a"]}}}, "r, entry point main: options is not a mapping"),
])
def test_a_malformed_spec_is_named(document, message):
    with pytest.raises(ValueError) as error:
        entry_points("r", document)
    assert str(error.value) == message


def test_merge_unites_every_entry_point_and_one_setting_has_one_type():
    merged = merge([("a main", {"x": {"type": "int", "default": 1}, "y": {}}),
                    ("a stage", {"x": {"type": "int", "default": 2, "description": "other words"}}),
                    ("b main", {"z": {"type": "bool"}})])
    assert merged == {"x": {"type": "int"}, "y": {"type": "str"}, "z": {"type": "bool"}}
    with pytest.raises(ValueError) as error:
        merge([("a main", {"x": {"type": "int"}}), ("b main", {"y": {}}), ("b roll", {"x": {"type": "str"}})])
    assert str(error.value) == ("x is declared as {'type': 'int'} by a main and as {'type': 'str'} by b roll: "
                                "one setting must have one type")


def test_the_values_of_no_log_options_are_found_to_be_hidden():
    spec = {"key": {"type": "str", "no_log": True}, "port": {"type": "int"}, "empty": {"no_log": True}}
    assert no_log_values(spec, {"key": "s3cret", "port": 8000, "empty": ""}) == {"s3cret"}
    assert no_log_values(spec, {"port": 1}) == set()


def test_the_report_fails_only_on_a_wrong_type_and_says_nothing_changed():
    ok = report(["a", "b"], ["c"], [])
    assert ok == {"changed": False, "checked": 2, "not_evaluated": ["c"], "argument_errors": [],
                  "msg": "2 variables checked against every entry point's types"}
    bad = report(["a"], [], ["argument 'a' is of type str and we were unable to convert to int", "second"])
    assert bad["failed"] is True and bad["argument_errors"] == ["argument 'a' is of type str and we were unable "
                                                                "to convert to int", "second"]
    assert bad["msg"] == ("argument 'a' is of type str and we were unable to convert to int; second. The types are "
                          "those of the roles' meta/argument_specs.yml (the tables of the role READMEs); nothing "
                          "has changed.")
