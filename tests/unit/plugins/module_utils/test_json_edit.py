"""module_utils/_json_edit.py in process: kv_cache_config's byte-exact edits of config.json and
hf_quant_config.json. A member cut out and spliced back gives the original text byte for byte;
where its neighbours are gone it is appended in the style of the object. The module tests run
the same code through kv_cache_config in a subprocess; these compare whole texts."""

from __future__ import annotations

import json

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils._json_edit import (
    JsonDocError,
    find_object,
    insert_member,
    parse,
    remove_member,
)

CONFIG = """{
  "architectures": ["DeepseekV3ForCausalLM"],
  "quantization_config": {
    "quant_method": "modelopt",
    "kv_cache_scheme": {"dynamic": false, "num_bits": 8, "type": "float"},
    "ignore": [ "lm_head", {"a": [1, -2.5e3, true, null]} ]
  },
  "rope_scaling": null,
  "vocab_size": 163840
}
"""
QUANT = ["quantization_config"]


def cut(text, path, key):
    value, root = parse(text)
    return remove_member(text, root, path, key)


def find_in(doc, path):
    for key in path:
        doc = doc[key]
    return doc


def splice(text, path, key, edit):
    value, root = parse(text)
    return insert_member(text, root, path, key, edit)


@pytest.mark.parametrize("path, key, expected, kind", [
    (QUANT, "kv_cache_scheme", CONFIG.replace(
        '"kv_cache_scheme": {"dynamic": false, "num_bits": 8, "type": "float"},\n    ', ""), "before_next"),
    ([], "vocab_size", CONFIG.replace(',\n  "vocab_size": 163840', ""), "after_prev"),
    ([], "architectures", CONFIG.replace('"architectures": ["DeepseekV3ForCausalLM"],\n  ', ""), "before_next"),
])
def test_a_member_cut_and_spliced_back(path, key, expected, kind):
    text, edit = cut(CONFIG, path, key)
    assert text == expected
    assert edit["kind"] == kind
    decoded = json.loads(CONFIG)
    del find_in(decoded, path)[key]
    assert json.loads(text) == decoded
    assert splice(text, path, key, edit) == CONFIG


def test_the_edit_records_the_neighbours_and_the_text():
    text, edit = cut(CONFIG, QUANT, "kv_cache_scheme")
    assert edit == dict(prev_key="quant_method", next_key="ignore", kind="before_next",
                        text='"kv_cache_scheme": {"dynamic": false, "num_bits": 8, "type": "float"},\n    ')
    text, edit = cut(CONFIG, [], "vocab_size")
    assert edit == dict(prev_key="rope_scaling", next_key=None, kind="after_prev", text=',\n  "vocab_size": 163840')


def test_the_only_member_leaves_the_braces():
    doc = '{"q": { "kv_cache_quant_algo" : "FP8" }, "x": 1}'
    text, edit = cut(doc, ["q"], "kv_cache_quant_algo")
    assert (text, edit) == (
        '{"q": {}, "x": 1}', dict(prev_key=None, next_key=None, kind="only", text=' "kv_cache_quant_algo" : "FP8" '))
    assert splice(text, ["q"], "kv_cache_quant_algo", edit) == doc


def test_a_member_whose_neighbours_are_gone_is_appended_in_the_objects_style():
    edit = dict(kind="before_next", next_key="gone", prev_key="gone", text='"k": 1,\n    ')
    assert splice('{\n    "a": 1,\n    "b": 2\n}', [], "k", edit) == '{\n    "a": 1,\n    "b": 2,\n    "k": 1\n}'
    assert splice('{"a": 1, "b": 2}', [], "k", edit) == '{"a": 1, "b": 2, "k": 1}'
    assert splice('{\n  "a": 1\n}', [], "k", edit) == '{\n  "a": 1,\n  "k": 1\n}'
    assert splice('{"a": 1}', [], "k", edit) == '{"a": 1, "k": 1}'
    assert splice('{}', [], "k", edit) == '{"k": 1}'
    assert splice('{"a": {}}', ["a"], "k", dict(kind="only", text=" \"k\": 2 ")) == '{"a": { "k": 2 }}'
    assert splice('{"a": {"z": 0}}', ["a"], "k", dict(kind="only", text=' "k": 2 ')) == '{"a": {"z": 0, "k": 2}}'
    assert splice('{"b": 1}', [], "k", dict(kind="after_prev", prev_key="a", text=', "k": [1, 2]')) == (
        '{"b": 1, "k": [1, 2]}')
    # A snippet without the key as json.dumps writes it: from its first quote.
    assert splice('{"b": 1}', [], "k", dict(kind="after_prev", prev_key="a", text=',\t"k":3 ,')) == '{"b": 1, "k":3}'


def test_the_last_member_of_duplicates_is_the_one_edited():
    doc = '{"k": 1, "k": 2, "z": 3}'
    text, edit = cut(doc, [], "k")
    assert text == '{"k": 1, "z": 3}'
    assert edit["prev_key"] == "k"


def test_nested_objects_are_found_by_path():
    value, root = parse(CONFIG)
    assert find_object(root, QUANT).start == CONFIG.index('{\n    "quant_method"')
    assert find_object(root, QUANT + ["kv_cache_scheme"]).end == CONFIG.index('},\n    "ignore"') + 1
    assert find_object(root, ["rope_scaling", "x"]) is None
    assert find_object(root, ["architectures"]) is None
    assert find_object(root, ["missing"]) is None
    assert find_object(root, []) is root
    assert value == json.loads(CONFIG)


@pytest.mark.parametrize("text", ['[1, {"a": 2}, []]', '"x"', "  12 ", "[]", '[ "a" , [ ] ]', "-Infinity", "NaN"])
def test_documents_that_are_not_objects_have_no_tree(text):
    assert parse(text) == (json.loads(text), None)


def test_parse_errors_name_the_file_and_the_place():
    with pytest.raises(JsonDocError) as caught:
        parse('{"a": 1,\n "b": }', "config.json")
    assert str(caught.value) == "config.json is not valid JSON: Expecting value at line 2, column 7"
    with pytest.raises(JsonDocError) as caught:
        parse("")
    assert str(caught.value) == "document is not valid JSON: Expecting value at line 1, column 1"


@pytest.mark.parametrize("call, message", [
    (lambda: cut(CONFIG, ["missing"], "k"), "no object at missing"),
    (lambda: cut(CONFIG, ["quantization_config", "missing"], "k"), "no object at quantization_config/missing"),
    (lambda: cut(CONFIG, ["quantization_config", "kv_cache_scheme"], "bits"),
     "no member 'bits' at quantization_config/kv_cache_scheme"),
    (lambda: splice(CONFIG, ["rope_scaling"], "k", dict(kind="only", text="")), "no object at rope_scaling"),
    (lambda: splice(CONFIG, QUANT, "ignore", dict(kind="only", text="")),
     "member 'ignore' already present at quantization_config"),
])
def test_edit_errors_in_full(call, message):
    with pytest.raises(JsonDocError) as caught:
        call()
    assert str(caught.value) == message


def test_appending_to_an_empty_nested_object_and_snippets_of_other_shapes():
    gone = dict(kind="before_next", next_key="gone", text='"k": 1,\n')
    assert splice('{"a": {}, "b": 2}', ["a"], "k", gone) == '{"a": {"k": 1}, "b": 2}'
    # The key as the snippet writes it is found first, not a key of the same name inside its value.
    nested = dict(kind="after_prev", prev_key="gone", text=', "k": {"k": 1}')
    assert splice('{"b": 1}', [], "k", nested) == '{"b": 1, "k": {"k": 1}}'
    assert splice('{"b": 1}', [], "k", dict(kind="after_prev", prev_key="gone", text=', "k": null')) == '{"b": 1, "k": null}'
    # A key json.dumps escapes (non-ASCII): the snippet is read from its first quote.
    assert splice('{"b": 1}', [], "\u00e9", dict(kind="after_prev", prev_key="gone", text=', "\u00e9": [1, "x"]')) == (
        '{"b": 1, "\u00e9": [1, "x"]}')
