"""renamed_settings: an old, role-level name of a shared setting an inventory still sets is read
as the new one for one release, with a deprecation warning naming the new name."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.fleet.vllm.plugins.filter import renamed_settings as module
from ansible_collections.fleet.vllm.plugins.filter.renamed_settings import renamed_settings

RENAMED = {"vllm_server_platform": "fleet_vllm_platform", "vllm_preflight_platform": "fleet_vllm_platform",
           "vllm_runtime_base_dir": "fleet_vllm_runtime_dir"}


@pytest.fixture
def warnings(monkeypatch):
    seen = []
    monkeypatch.setattr(module.display, "deprecated", lambda msg, **kw: seen.append((msg, kw)))
    return seen


def test_an_old_name_set_gives_the_new_one_and_a_warning(warnings):
    assert renamed_settings({"vllm_runtime_base_dir": "/x"}, RENAMED) == {"fleet_vllm_runtime_dir": "/x"}
    assert warnings == [("vllm_runtime_base_dir is renamed fleet_vllm_runtime_dir, which every role of fleet.vllm "
                         "reads: set fleet_vllm_runtime_dir instead (until then the value of vllm_runtime_base_dir "
                         "is used as fleet_vllm_runtime_dir, for every role)",
                         {"version": "0.4.0", "collection_name": "fleet.vllm"})]


def test_nothing_set_is_nothing_to_do(warnings):
    assert renamed_settings({}, RENAMED) == {} and warnings == []


def test_two_old_names_of_one_setting_agreeing_are_one_value(warnings):
    assert renamed_settings({"vllm_server_platform": "cpu", "vllm_preflight_platform": "cpu"}, RENAMED) \
        == {"fleet_vllm_platform": "cpu"}
    assert [kw["version"] for dummy, kw in warnings] == ["0.4.0", "0.4.0"]


def test_two_old_names_of_one_setting_disagreeing_stop_without_showing_the_values(warnings):
    with pytest.raises(AnsibleFilterError) as error:
        renamed_settings({"vllm_server_platform": "s3cret-a", "vllm_preflight_platform": "s3cret-b"}, RENAMED)
    assert str(error.value) == ("vllm_preflight_platform and vllm_server_platform are both set, to different values, "
                                "and both are old names of fleet_vllm_platform: set fleet_vllm_platform only")


@pytest.mark.parametrize("settings,renamed,message", [
    ({"vllm_x": 1}, RENAMED, "fleet.vllm.renamed_settings: vllm_x is not a renamed setting"),
    ([], RENAMED, "fleet.vllm.renamed_settings: the old names and the renames must be mappings"),
    ({}, [], "fleet.vllm.renamed_settings: the old names and the renames must be mappings"),
])
def test_bad_input_is_named(settings, renamed, message, warnings):
    with pytest.raises(AnsibleFilterError) as error:
        renamed_settings(settings, renamed)
    assert str(error.value) == message
