"""fleet.vllm.gateway_backends: a gateway's fleet hosts grouped into one HAProxy backend per served model (issue 26:
helper models beside the fleet's model behind one gateway). One model keeps the one backend fleet_vllm (every fleet of
before); the rolling phase finds each host's backend in "of"."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.fleet.vllm.plugins.filter.gateway_backends import gateway_backends


def test_one_model_is_the_one_backend_of_before_and_reads_no_body():
    got = gateway_backends(["gpu-1", "gpu-2"], ["", ""], repos=["nvidia/Kimi-K2.5-NVFP4", ""], fallback="nvidia/Kimi-K2.5-NVFP4")
    assert got == {"backends": [{"name": "fleet_vllm", "model": "nvidia/Kimi-K2.5-NVFP4", "default": True,
                                 "servers": ["gpu-1", "gpu-2"]}],
                   "of": {"gpu-1": "fleet_vllm", "gpu-2": "fleet_vllm"}, "routed": False, "errors": []}


def test_each_model_has_its_backend_the_first_hosts_is_the_default():
    got = gateway_backends(["gpu-1", "gpu-1-embed", "gpu-2", "gpu-2-embed"], ["kimi", "org/bge-m3", "", "org/bge-m3"],
                           repos=["", "", "kimi", ""], fallback="other")
    assert [(b["name"], b["model"], b["default"], b["servers"]) for b in got["backends"]] == [
        ("fleet_vllm", "kimi", True, ["gpu-1", "gpu-2"]),
        ("fleet_vllm:org:bge-m3", "org/bge-m3", False, ["gpu-1-embed", "gpu-2-embed"])]
    assert got["of"] == {"gpu-1": "fleet_vllm", "gpu-2": "fleet_vllm", "gpu-1-embed": "fleet_vllm:org:bge-m3",
                         "gpu-2-embed": "fleet_vllm:org:bge-m3"}
    assert got["routed"] is True and got["errors"] == []


def test_the_default_model_setting_takes_fleet_vllm_and_comes_first():
    got = gateway_backends(["embed", "kimi"], ["org/bge-m3", "kimi"], default="kimi")
    assert [(b["name"], b["model"]) for b in got["backends"]] == [("fleet_vllm", "kimi"), ("fleet_vllm:org:bge-m3", "org/bge-m3")]
    assert got["of"] == {"embed": "fleet_vllm:org:bge-m3", "kimi": "fleet_vllm"}


def test_a_host_without_name_or_repo_serves_the_fallback():
    got = gateway_backends(["a", "b"], ["", "x"], fallback="kimi")
    assert [b["model"] for b in got["backends"]] == ["kimi", "x"]


def test_a_gateway_without_hosts_keeps_its_empty_backend():
    assert gateway_backends([], [], fallback="kimi")["backends"] == [
        {"name": "fleet_vllm", "model": "kimi", "default": True, "servers": []}]


@pytest.mark.parametrize("hosts, models, default, message", [
    (["a", "b"], ["kimi", "bge"], "other", 'vllm_gateway_default_model is "other", which no fleet host of this gateway serves (kimi, bge)'),
    (["a", "b", "c"], ["kimi", "org/m", "org:m"], "", 'the models "org/m" and "org:m" would have the same gateway backend fleet_vllm:org:m'),
    (["a", "b"], ["kimi", "bad model"], "", 'b serves the model name "bad model", which HAProxy\'s configuration cannot carry'),
    (["a"], ["kimi\n    http-request allow"], "", 'a serves the model name "kimi\\n    http-request allow"'),
])
def test_what_haproxy_cannot_take_is_named(hosts, models, default, message):
    errors = gateway_backends(hosts, models, default=default)["errors"]
    assert len(errors) == 1 and errors[0].startswith(message), errors


def test_lists_of_other_lengths_are_a_programming_error():
    with pytest.raises(AnsibleFilterError, match="2 hosts but 1 models"):
        gateway_backends(["a", "b"], ["kimi"])
    with pytest.raises(AnsibleFilterError, match="1 repos"):
        gateway_backends(["a", "b"], ["", ""], repos=["x"])
