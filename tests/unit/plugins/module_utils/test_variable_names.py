"""preflight's and hf_snapshot's messages name what the user sets: the shared setting
(fleet_vllm_*) where the role passes one in ``variables``, else the role's prefix and the option."""

from __future__ import annotations

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils._host_limits import HostLimits
from ansible_collections.fleet.vllm.plugins.module_utils._snapshot_run import SnapshotRun

from tests.unit.plugins.module_utils.snapshot_fakes import FakeModule


class LimitsModule(object):
    def __init__(self, **params):
        self.params = params


@pytest.mark.parametrize("variables, option, name", [
    ({"model_dir": "fleet_vllm_pristine_dir"}, "model_dir", "fleet_vllm_pristine_dir"),
    ({"model_dir": "fleet_vllm_pristine_dir"}, "nofile_min", "vllm_preflight_nofile_min"),
    ({}, "shm_dir", "vllm_preflight_shm_dir"),
    ({"shm_dir": ""}, "shm_dir", "vllm_preflight_shm_dir"),
])
def test_host_limits_name_the_shared_setting_or_the_prefixed_option(variables, option, name):
    checks = HostLimits(LimitsModule(variable_prefix="vllm_preflight_", variables=variables, model_dir="/m",
                                     shm_dir="/dev/shm", nofile_min=1))
    assert checks.var(option) == name
    assert checks.setting(option) == "%s=%s" % (name, checks.params[option])


def test_host_limits_without_the_option_name_the_prefixed_option():
    """What the module's tests and the module run alone give: no ``variables`` at all."""
    assert HostLimits(LimitsModule(variable_prefix="x_", model_dir="/m")).var("model_dir") == "x_model_dir"


@pytest.mark.parametrize("params, option, name", [
    (dict(variable_prefix="vllm_weights_", variables={"token": "fleet_vllm_hf_token"}), "token", "fleet_vllm_hf_token"),
    (dict(variable_prefix="vllm_weights_", variables={"token": "fleet_vllm_hf_token"}), "repo_id", "vllm_weights_repo"),
    (dict(variable_prefix="vllm_weights_", variables={}), "token", "vllm_weights_hf_token"),
    (dict(variable_prefix="", variables={"dest": "fleet_vllm_pristine_dir"}), "dest", "fleet_vllm_pristine_dir"),
    (dict(variable_prefix="", variables=None), "dest", "dest"),
])
def test_a_snapshot_run_names_the_shared_setting_or_the_role_variable(tmp_path, params, option, name):
    assert SnapshotRun(FakeModule(tmp_path, **params)).name(option) == name
