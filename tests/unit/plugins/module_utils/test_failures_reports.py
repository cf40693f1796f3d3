"""What an operator reads in a diagnosis (plugins/module_utils/_failures.py), word for word.

test_failures.py checks which failure is named and the key facts; these tests compare whole
findings (evidence, cause, remedy, details) and the journal bookkeeping (which lines are read,
which start is analysed, the tail), for the fixtures of tests/fixtures/journal and for short
journals written here in vLLM's, NCCL's and systemd's own wording.
"""

from __future__ import annotations

import pytest

from conftest import FIXTURES

from ansible_collections.fleet.vllm.plugins.module_utils import _failures
from ansible_collections.fleet.vllm.plugins.module_utils._failures import diagnose, journal_stopped

JOURNAL = FIXTURES / "journal"
DEPLOY = "ansible-playbook deploy.yml"
STARTED = "Started vllm.service - vLLM OpenAI-compatible server (nvidia/Kimi-K2.5-NVFP4)."
EXITED = "vllm.service: Main process exited, code=exited, status=1/FAILURE"
FAILED = "vllm.service: Failed with result 'exit-code'."

REMEDY_ATTENTION = (
    "KV-cache fix: set `vllm_kv_cache_policy: strip` (vLLM then falls back to a bf16 KV cache, which halves the context "
    "that fits), or upgrade vLLM past commit a1257fd1ea93 by setting `vllm_runtime_commit`; then run "
    "`ansible-playbook deploy.yml --tags kv_cache,server` (`--tags runtime,kv_cache,server` with a new commit). Never use "
    "`--kv-cache-dtype float16` for this bf16 model: it silently produces garbage.")
REMEDY_NCCL = (
    "Read the topology with `nvidia-smi topo -m`; set `fleet_vllm_nccl_env` with `NCCL_P2P_DISABLE: \"1\"` (the documented "
    "fallback), or lower `NCCL_P2P_LEVEL` in it to what the topology supports, and run "
    "`ansible-playbook deploy.yml --tags nccl,server`. The lasting fix is to disable ACS in the BIOS and the IOMMU (or set "
    "iommu=pt) on the kernel command line.")
NCCL_CAUSE_TAIL = (
    " On PCIe-only RTX PRO 6000 hosts this traces mostly to IOMMU/ACS redirecting peer-to-peer traffic, or to an "
    "NCCL_P2P_LEVEL above what the topology supports (vLLM #33041, NVIDIA/nccl #1999).")
REMEDY_MODEL = (
    "Run `ansible-playbook deploy.yml --tags weights`: the vllm_weights role verifies every shard against the safetensors "
    "index and its size and fetches what is missing or short; then restart the service with "
    "`ansible-playbook deploy.yml --tags server`.")
MODEL_CAUSE = ("The model snapshot is incomplete: %s. huggingface_hub does not re-check sizes, so a shard truncated by a "
               "killed download stays truncated.")
SHM_CAUSE = (
    "Shared-memory queues (psm_*), semaphores (sem.mp-*) or offload buffers (vllm_offload_*) of an earlier vLLM were left "
    "behind by a crash or a hard kill; they fill /dev/shm or collide with the next start and can turn one crash into a "
    "crash loop.")
SHM_REMEDY = (
    "Run `ansible-playbook deploy.yml --tags server`: the vllm_server role removes them before it starts the service. By "
    "hand: stop the service, then remove only the files owned by `%s` (%s); files of other users belong to other programs.")
SHM_SMALL_REMEDY = (
    "Make /dev/shm larger than the %s vLLM asked for, with room for its other segments (the real CPU engine holds 400 MiB "
    "while it serves, a GPU host's engine several GB): on a host `mount -o remount,size=16G %s` and the same size in "
    "/etc/fstab; in a container `--shm-size` (the demo's real-engine hosts: --shm-size=1g) or `--ipc=host`. Then run "
    "`ansible-playbook deploy.yml --tags server`. Preflight measures /dev/shm before a deploy: keep "
    "`vllm_preflight_shm_min_bytes` at 0 (what the platform's engine needs) or above what the engine asks for.")
REMEDY_ENGINE = (
    "Fix the first error (its traceback is in journal_tail), then run `ansible-playbook deploy.yml --tags server`. If it is "
    "not a known failure, report it upstream with journal_tail and the vLLM version (`vllm_runtime_commit`).")
SERVER_TAIL = " Then run `ansible-playbook deploy.yml --tags server`."


def journal(name):
    return (JOURNAL / name).read_text(encoding="utf-8")


def vllm(proc, msg, level="ERROR", source="multiproc_executor.py:772"):
    """A journal line as vLLM 0.11+ prints it: ``(proc) LEVEL date [file:line] message``."""
    return "(%s) %s 11-29 10:02:58 [%s] %s" % (proc, level, source, msg)


def text(*lines):
    return "\n".join(lines) + "\n"


def finding(fid, evidence, cause, remedy, details):
    return dict(id=fid, title=_failures.TITLES[fid], evidence=evidence, cause=cause, remedy=remedy, details=details)


def findings(journal_text, **kwargs):
    return diagnose(journal_text, **kwargs)["findings"]


# ---- the fixtures, finding for finding ----------------------------------------------------------


def test_seed_failure_in_full():
    lines = journal("attention-backend-fp8-sm120.txt").splitlines()
    fp8 = [line for line in lines if "Using fp8 data type to store kv cache" in line]
    error = [line for line in lines if "ValueError: No valid attention backend" in line and "(Worker_TP7 " in line]
    reasons = ("FLASH_ATTN_MLA: kv_cache_dtype not supported, compute capability not supported, FlashAttention MLA not "
               "supported on this device; FLASHMLA: compute capability not supported, FlashMLA Dense is only supported on "
               "Hopper devices.; FLASHINFER_MLA: compute capability not supported; TRITON_MLA: kv_cache_dtype not supported; "
               "FLASHMLA_SPARSE: kv_cache_dtype not supported, non-sparse not supported, compute capability not supported")
    result = diagnose(journal("attention-backend-fp8-sm120.txt"))
    got = result["findings"][0]
    assert got["cause"] == (
        "No attention backend of this vLLM build accepts kv_cache_dtype=fp8_e4m3 on this GPU (%s). The checkpoint declares an "
        "FP8 KV cache (kv_cache_scheme in config.json, kv_cache_quant_algo in hf_quant_config.json) and --kv-cache-dtype auto "
        "follows it. On compute capability 12.x the only dense MLA backend that can take an FP8 KV cache is TRITON_MLA, "
        "which accepts it only from vLLM commit a1257fd1ea93 (PR #34597) on." % reasons)
    assert got["remedy"] == REMEDY_ATTENTION
    assert got["evidence"] == [fp8[-1], error[-1]]
    assert got["details"]["selected_backend"] is None
    assert got["details"]["selector_config"] == dict(
        head_size="576", dtype="torch.bfloat16", kv_cache_dtype="fp8_e4m3", block_size="None", use_mla="True",
        has_sink="False", use_sparse="False", use_mm_prefix="False", attn_type="AttentionType.DECODER")
    assert sorted(got["details"]) == ["backend_reasons", "kv_cache_dtype", "platform", "selected_backend", "selector_config"]
    assert (result["lines_read"], result["lines_analysed"]) == (len(lines), len(lines))
    assert result["has_error"] is True


@pytest.mark.parametrize("name, expected", [
    pytest.param("rejected-flag.txt", finding(
        "rejected_flag", ["vllm: error: unrecognized arguments: --enable-reasoning"],
        "The installed vLLM's argument parser refused the command line (vllm: error: unrecognized arguments: "
        "--enable-reasoning); vLLM exits before it loads anything.",
        "Remove or correct `--enable-reasoning` in `vllm_server_extra_args` (or in the `vllm_server_*` variable that "
        "generates it); `vllm serve --help=all` in the service's venv lists what the installed vLLM accepts. Then run "
        "`ansible-playbook deploy.yml --tags server`.",
        dict(flags=["--enable-reasoning"], error="unrecognized arguments: --enable-reasoning", program="vllm")),
        id="rejected-flag"),
    pytest.param("oom-max-model-len.txt", finding(
        "gpu_out_of_memory",
        ["(EngineCore_DP0 pid=52301) ValueError: To serve at least one request with the model's max seq len (262144), "
         "(17.16 GiB KV cache is needed, which is larger than the available KV cache memory (9.87 GiB). Based on the "
         "available memory, the estimated maximum model length is 150800. Try increasing `gpu_memory_utilization` or "
         "decreasing `max_model_len` when initializing the engine."],
        "The KV cache that fits in the memory left after the weights is smaller than one request of the model's max seq "
        "len (262144 tokens) (vLLM estimates 150800 fit). A bf16 KV cache (after `vllm_kv_cache_policy: strip`) needs "
        "twice the memory per token of an FP8 one.",
        "Set `vllm_server_max_model_len` to 150800 or less, or raise `vllm_server_gpu_memory_utilization` if the GPUs "
        "have headroom." + SERVER_TAIL,
        dict(kind="max_model_len", max_model_len=262144, estimated_max_model_len=150800, gpu_memory_utilization=None)),
        id="max-model-len"),
    pytest.param("nccl-unhandled-cuda-error.txt", finding(
        "nccl",
        ["gpu07:33316:33514 [4] transport/p2p.cc:275 NCCL WARN Cuda failure 'peer access is not supported between these "
         "two devices'",
         "(Worker_TP4 pid=33316) ERROR 11-29 09:41:51 [multiproc_executor.py:772] RuntimeError: NCCL error: unhandled cuda "
         "error (run with NCCL_DEBUG=INFO for details)"],
        "Between the tensor-parallel workers NCCL failed (unhandled cuda error)." + NCCL_CAUSE_TAIL, REMEDY_NCCL,
        dict(kind="error", nccl_error="unhandled cuda error")),
        id="nccl-error"),
    pytest.param("nccl-hang-init.txt", finding(
        "nccl",
        ["(Worker_TP7 pid=61316) INFO 11-29 13:05:48 [pynccl.py:111] vLLM is using nccl==2.28.9",
         "vllm.service: State 'stop-sigterm' timed out. Killing."],
        "The start stopped in NCCL set-up (init_distributed_environment / the first all-reduce) and never went on to load "
        "the model: the workers hang waiting for each other." + NCCL_CAUSE_TAIL, REMEDY_NCCL,
        dict(kind="hang", nccl_error=None)),
        id="nccl-hang"),
    pytest.param("port-in-use.txt", finding(
        "port_in_use", ["(APIServer pid=7731) OSError: [Errno 98] Address already in use"],
        "The API server cannot listen on port 8000: another process holds it.",
        "Find the holder with `ss -ltnp 'sport = :8000'`. If it is a vLLM left from an earlier start, stop it "
        "(`ansible-playbook deploy.yml --tags server` stops orphaned vLLM processes before it starts the service); "
        "otherwise set `vllm_server_port` to a free port and run `ansible-playbook deploy.yml --tags server`.",
        dict(port=8000, internal=False)),
        id="port-in-use"),
    pytest.param("shm-file-exists.txt", finding(
        "shm_leftovers", ["(EngineCore_DP0 pid=18191) FileExistsError: [Errno 17] File exists: '/psm_3f9a1c2e'"],
        SHM_CAUSE + " The journal names /psm_3f9a1c2e.", SHM_REMEDY % ("vllm", "`ls -l /dev/shm` shows their owners"),
        dict(files=[], owned_by_service_user=[], journal_names=["/psm_3f9a1c2e"], in_journal=True)),
        id="shm-file-exists"),
    pytest.param("shm-insufficient-space.txt", finding(
        "shm_too_small",
        ["(EngineCore pid=23004) ERROR 11-29 16:10:22 [core.py:1584] RuntimeError: Insufficient space in /dev/shm for "
         "shared-memory allocation: 240 MiB required, 37 MiB free. Increase /dev/shm (e.g. --shm-size or --ipc=host)."],
        "vLLM asked /dev/shm for a shared-memory allocation of 240 MiB (a queue between its processes) and found 37 MiB "
        "free, so the engine stopped at start: /dev/shm is too small for this engine.",
        SHM_SMALL_REMEDY % ("240 MiB", "/dev/shm"),
        dict(path="/dev/shm", allocation="shared-memory allocation", required_bytes=240 << 20, free_bytes_then=37 << 20,
             total_bytes_now=None, free_bytes_now=None, leftover_bytes=0, in_journal=True)),
        id="shm-full"),
    pytest.param("model-truncated-shard.txt", finding(
        "model_files",
        ["(Worker_TP1 pid=45323) ERROR 11-29 17:33:24 [multiproc_executor.py:772] safetensors_rust.SafetensorError: Error "
         "while deserializing header: incomplete metadata, file not fully covered"],
        MODEL_CAUSE % ("safetensors could not read a shard (Error while deserializing header: incomplete metadata, file "
                       "not fully covered); its error does not name the file; set model_path to name the bad shard"),
        REMEDY_MODEL,
        dict(journal_files=[], safetensors_errors=["Error while deserializing header: incomplete metadata, file not fully "
                                                   "covered"], check_problems=[], in_journal=True)),
        id="truncated-shard"),
    pytest.param("engine-core-died.txt", finding(
        "engine_core_died",
        ["(EngineCore_DP0 pid=50280) ERROR 11-29 18:41:07 [core.py:1017] RuntimeError: Worker failed with error 'CUDA "
         "error: an illegal memory access was encountered",
         "(EngineCore_DP0 pid=50280) ERROR 11-29 18:41:07 [core.py:1017] EngineCore encountered a fatal error.",
         "(APIServer pid=50101) ERROR 11-29 18:41:07 [async_llm.py:541] vllm.v1.engine.exceptions.EngineDeadError: "
         "EngineCore encountered an issue. See stack trace (above) for the root cause."],
        "The engine core process died; the first error above it is: RuntimeError: Worker failed with error 'CUDA error: an "
        "illegal memory access was encountered", REMEDY_ENGINE,
        dict(root_error="RuntimeError: Worker failed with error 'CUDA error: an illegal memory access was encountered",
             root_exception="RuntimeError")),
        id="engine-core-died"),
])
def test_fixture_findings_in_full(name, expected):
    assert findings(journal(name)) == [expected]


# ---- 1. attention backend --------------------------------------------------------------------


def test_forced_backend_in_full():
    error = vllm("Worker_TP0 pid=1", "ValueError: Selected backend AttentionBackendEnum.FLASHMLA is not valid for this "
                 "configuration. Reason: ['compute capability not supported']")
    assert findings(text(STARTED, error)) == [finding(
        "attention_backend", [error],
        "The attention backend forced with --attention-backend (AttentionBackendEnum.FLASHMLA) cannot run this model on "
        "this GPU: ['compute capability not supported'].",
        "Remove `--attention-backend` from `vllm_server_extra_args` and let vLLM choose. " + REMEDY_ATTENTION,
        dict(platform=None, kv_cache_dtype=None, selector_config={},
             backend_reasons={"AttentionBackendEnum.FLASHMLA": ["['compute capability not supported']"]},
             selected_backend="AttentionBackendEnum.FLASHMLA"))]


def test_attention_evidence_is_the_latest_fp8_decision_and_the_error():
    fp8_old = vllm("APIServer pid=1", "Using fp8 data type to store kv cache (first start).", "INFO", "cache.py:199")
    fp8 = vllm("APIServer pid=1", "Using fp8 data type to store kv cache.", "INFO", "cache.py:199")
    error = vllm("Worker_TP0 pid=2", "ValueError: No valid attention backend found for cuda with AttentionSelectorConfig("
                 "head_size=64, kv_cache_dtype=bfloat16). Reasons: {FLASH_ATTN: [block_size not supported]}.")
    got = findings(text(STARTED, fp8_old, fp8, error))
    assert got == [finding(
        "attention_backend", [fp8, error],
        "No attention backend of this vLLM build accepts this configuration (kv_cache_dtype=bfloat16) on this GPU "
        "(FLASH_ATTN: block_size not supported).", REMEDY_ATTENTION,
        dict(platform="cuda", kv_cache_dtype="bfloat16", selector_config=dict(head_size="64", kv_cache_dtype="bfloat16"),
             backend_reasons={"FLASH_ATTN": ["block_size not supported"]}, selected_backend=None))]


def test_backend_reasons_end_with_or_without_a_full_stop():
    assert _failures.parse_backend_reasons(" {TRITON_MLA: [sparse not supported]}. ") == {
        "TRITON_MLA": ["sparse not supported"]}
    assert _failures.parse_backend_reasons("{TRITON_MLA: [x], FLASHMLA: [y, z]}") == {"TRITON_MLA": ["x"], "FLASHMLA": ["y", "z"]}


# ---- 2. rejected flags -----------------------------------------------------------------------


def rejected(error, prog="vllm"):
    got = findings(text(STARTED, "%s: error: %s" % (prog, error), EXITED))
    assert [item["id"] for item in got] == ["rejected_flag"]
    return got[0]


def test_disable_log_requests_is_explained():
    got = rejected("unrecognized arguments: --disable-log-requests")
    assert got["remedy"] == (
        "Remove or correct `--disable-log-requests` in `vllm_server_extra_args` (or in the `vllm_server_*` variable that "
        "generates it); `vllm serve --help=all` in the service's venv lists what the installed vLLM accepts. Then run "
        "`ansible-playbook deploy.yml --tags server`. `--disable-log-requests` is deprecated and redundant (request logging "
        "is off by default): drop it.")


@pytest.mark.parametrize("error, flags", [
    ("unrecognized arguments: --max-model-len=4096 --enable-reasoning", ["--max-model-len", "--enable-reasoning"]),
    ("unrecognized arguments: --hf-overrides={\"a\":1} extra --x=a=b", ["--hf-overrides", "--x"]),
    ("unrecognized arguments: --served-model-name=a:b --y", ["--served-model-name", "--y"]),
    ("argument --kv-cache-dtype: invalid choice: 'float17' (choose from auto, fp8)", ["--kv-cache-dtype"]),
    ("argument --tensor-parallel-size/-tp: invalid int value: 'eight'", ["--tensor-parallel-size"]),
    ("the following arguments are required: model_tag", []),
])
def test_rejected_flags_are_named(error, flags):
    got = rejected(error)
    assert got["details"] == dict(flags=flags, error=error, program="vllm")
    named = ", ".join("`%s`" % flag for flag in flags) or "the flag named in the error"
    assert got["remedy"].startswith("Remove or correct %s in `vllm_server_extra_args`" % named)
    assert not got["remedy"].endswith("drop it.")


# ---- 3. GPU memory ---------------------------------------------------------------------------


OOM = [
    pytest.param(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.76 GiB. GPU 5 has a total capacity of 94.97 GiB of "
        "which 1.31 GiB is free.",
        "PyTorch ran out of GPU memory (GPU 5: tried to allocate 1.76 GiB with 1.31 GiB free of 94.97 GiB): the weights, "
        "activations and CUDA graphs do not fit in what vllm_server_gpu_memory_utilization leaves, or another process holds "
        "GPU memory.",
        "Lower `vllm_server_gpu_memory_utilization` (it leaves the rest for CUDA graphs and activations) and "
        "`vllm_server_max_model_len`; check with `nvidia-smi` that no other process holds GPU memory." + SERVER_TAIL,
        dict(kind="torch_oom", max_model_len=None, estimated_max_model_len=None, gpu_memory_utilization=None),
        id="torch-oom"),
    pytest.param(
        "RuntimeError: CUDA error: out of memory",
        "PyTorch ran out of GPU memory: the weights, activations and CUDA graphs do not fit in what "
        "vllm_server_gpu_memory_utilization leaves, or another process holds GPU memory.",
        "Lower `vllm_server_gpu_memory_utilization` (it leaves the rest for CUDA graphs and activations) and "
        "`vllm_server_max_model_len`; check with `nvidia-smi` that no other process holds GPU memory." + SERVER_TAIL,
        dict(kind="torch_oom", max_model_len=None, estimated_max_model_len=None, gpu_memory_utilization=None),
        id="cuda-error-oom"),
    pytest.param(
        "ValueError: Free memory on device cuda:0 (41.2/94.97 GiB) on startup is less than desired GPU memory utilization "
        "(0.92, 87.37 GiB).",
        "When vLLM started, GPU cuda:0 had only 41.2 GiB of 94.97 GiB free, less than vllm_server_gpu_memory_utilization "
        "(0.92) asks for: another process holds GPU memory, often an EngineCore or worker left by an earlier hard kill "
        "(vLLM #55510).",
        "Find the process with `nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv` and stop it "
        "(`ansible-playbook deploy.yml --tags server` stops orphaned vLLM processes before it starts the service), or lower "
        "`vllm_server_gpu_memory_utilization`; `vllm_server_max_model_len` bounds what the KV cache then needs." + SERVER_TAIL,
        dict(kind="startup_free_memory", max_model_len=None, estimated_max_model_len=None, gpu_memory_utilization=0.92),
        id="startup-free-memory"),
    pytest.param(
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`.",
        "After loading the weights and profiling a forward pass, no GPU memory is left for the KV cache within "
        "vllm_server_gpu_memory_utilization.",
        "Raise `vllm_server_gpu_memory_utilization` (e.g. 0.92) and lower `vllm_server_max_model_len`; check with "
        "`nvidia-smi` that no other process holds GPU memory." + SERVER_TAIL,
        dict(kind="no_cache_memory", max_model_len=None, estimated_max_model_len=None, gpu_memory_utilization=None),
        id="no-cache-blocks"),
    pytest.param(
        "ValueError: To serve at least one request with the model's max seq len (262144), (17.16 GiB KV cache is needed, "
        "which is larger than the available KV cache memory (9.87 GiB).",
        "The KV cache that fits in the memory left after the weights is smaller than one request of the model's max seq "
        "len (262144 tokens). A bf16 KV cache (after `vllm_kv_cache_policy: strip`) needs twice the memory per token of an "
        "FP8 one.",
        "Set `vllm_server_max_model_len` to what fits or less, or raise `vllm_server_gpu_memory_utilization` if the GPUs "
        "have headroom." + SERVER_TAIL,
        dict(kind="max_model_len", max_model_len=262144, estimated_max_model_len=None, gpu_memory_utilization=None),
        id="max-model-len-without-estimate"),
]


@pytest.mark.parametrize("msg, cause, remedy, details", OOM)
def test_gpu_memory_findings_in_full(msg, cause, remedy, details):
    line = vllm("Worker_TP5 pid=5", msg)
    assert findings(text(STARTED, line, EXITED)) == [finding("gpu_out_of_memory", [line], cause, remedy, details)]


# ---- 4. NCCL ---------------------------------------------------------------------------------


def test_nccl_evidence_is_the_last_warning_and_the_last_three_errors():
    warns = ["gpu07:1:2 [%d] transport/p2p.cc:275 NCCL WARN Cuda failure 'peer access is not supported'" % rank
             for rank in range(2)]
    errors = [vllm("Worker_TP%d pid=%d" % (rank, rank), "RuntimeError: NCCL error: unhandled cuda error (rank %d)" % rank)
              for rank in range(5)]
    got = findings(text(STARTED, *(warns + errors + [EXITED])))
    assert got == [finding("nccl", [warns[-1]] + errors[-3:],
                           "Between the tensor-parallel workers NCCL failed (unhandled cuda error (rank 4))." + NCCL_CAUSE_TAIL,
                           REMEDY_NCCL, dict(kind="error", nccl_error="unhandled cuda error (rank 4)"))]


def test_nccl_error_without_text_quotes_the_last_line():
    errors = [vllm("Worker_TP%d pid=%d" % (rank, rank), "ncclSystemError on rank %d" % rank) for rank in range(3)]
    got = findings(text(STARTED, *(errors + [EXITED])))
    assert got == [finding("nccl", errors,
                           "Between the tensor-parallel workers NCCL failed (ncclSystemError on rank 2)." + NCCL_CAUSE_TAIL,
                           REMEDY_NCCL, dict(kind="error", nccl_error=None))]


def test_a_watchdog_timeout_among_other_nccl_errors_is_an_error():
    watchdog = "[rank3]:[E1129 10:52:01 ProcessGroupNCCL.cpp:685] [Rank 3] Watchdog caught collective operation timeout"
    aborted = "[rank3]:[E1129 10:52:02 ProcessGroupNCCL.cpp:700] NCCL communicator was aborted on rank 3."
    got = findings(text(STARTED, watchdog, aborted, EXITED))
    assert got[0]["details"] == dict(kind="error", nccl_error=None)
    assert got[0]["cause"].startswith("Between the tensor-parallel workers NCCL failed (%s)." % aborted)
    only_watchdog = findings(text(STARTED, watchdog, EXITED))
    assert only_watchdog[0]["details"] == dict(kind="timeout", nccl_error=None)
    assert only_watchdog[0]["cause"] == "Between the tensor-parallel workers an NCCL collective timed out." + NCCL_CAUSE_TAIL


def test_an_nccl_hang_of_an_earlier_start_is_found_behind_a_start_still_loading():
    stage = vllm("Worker_TP0 pid=1", "vLLM is using nccl==2.28.9", "INFO", "pynccl.py:111")
    end = "vllm.service: start operation timed out. Terminating."
    loading = vllm("APIServer pid=9", "vLLM API server version 0.16.0", "INFO", "api_server.py:1272")
    got = findings(text(STARTED, stage, end, STARTED, loading))
    assert [(item["id"], item["details"], item["evidence"]) for item in got] == [
        ("nccl", dict(kind="hang", nccl_error=None), [stage, end])]


# ---- 5. ports --------------------------------------------------------------------------------


@pytest.mark.parametrize("lines, port, internal, cause, holder", [
    pytest.param(
        [vllm("APIServer pid=1", "non-default args: {'model': 'm', 'port': 8123, 'host': '127.0.0.1'}", "INFO", "utils.py:267"),
         "(APIServer pid=1) OSError: [Errno 98] Address already in use"],
        8123, False, "The API server cannot listen on port 8123: another process holds it.", "8123", id="configured-port"),
    pytest.param(
        ["(APIServer pid=1) OSError: [Errno 98] Address already in use"],
        8000, False, "The API server cannot listen on port 8000: another process holds it.", "8000", id="default-port"),
    pytest.param(
        [vllm("Worker_TP0 pid=1", "torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
              "network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use")],
        29500, True,
        "A port vLLM opens between its own processes (29500) is taken: usually by vLLM processes left from an earlier "
        "start, which survive a hard kill (vLLM #55510).", "29500", id="c10d-port"),
    pytest.param(
        ["(EngineCore_DP0 pid=41388) zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:43219')"],
        None, True,
        "A port vLLM opens between its own processes (the one in the error) is taken: usually by vLLM processes left from "
        "an earlier start, which survive a hard kill (vLLM #55510).", "PORT", id="zmq-port"),
])
def test_port_findings_in_full(lines, port, internal, cause, holder):
    got = findings(text(STARTED, *(lines + [EXITED])))
    assert got == [finding(
        "port_in_use", [lines[-1]], cause,
        "Find the holder with `ss -ltnp 'sport = :%s'`. If it is a vLLM left from an earlier start, stop it "
        "(`ansible-playbook deploy.yml --tags server` stops orphaned vLLM processes before it starts the service); "
        "otherwise set `vllm_server_port` to a free port and run `ansible-playbook deploy.yml --tags server`." % holder,
        dict(port=port, internal=internal))]


# ---- 6. /dev/shm -----------------------------------------------------------------------------


def shm(count, owner="vllm"):
    return [dict(path="/dev/shm/psm_%04d" % number, owner=owner, uid=998, size=1024 * number) for number in range(count)]


def test_many_leftovers_are_counted_not_listed():
    files = shm(5)
    got = findings("", shm_files=files, stopped=True)
    paths = [entry["path"] for entry in files]
    assert got == [finding(
        "shm_leftovers",
        ["/dev/shm/psm_%04d (owner vllm, %d bytes)" % (number, 1024 * number) for number in range(4)] + ["... and 1 more"],
        SHM_CAUSE + " Found 5 such file(s), 5 owned by vllm; the service is stopped.",
        SHM_REMEDY % ("vllm", " ".join(paths[:4]) + " ..."),
        dict(files=paths, owned_by_service_user=paths, journal_names=[], in_journal=False))]


def test_four_leftovers_are_all_listed():
    files = shm(4)
    got = findings("", shm_files=files, stopped=True, service_user="svc")
    assert got[0]["evidence"] == ["/dev/shm/psm_%04d (owner vllm, %d bytes)" % (n, 1024 * n) for n in range(4)]
    assert got[0]["cause"] == SHM_CAUSE + " Found 4 such file(s), 0 owned by svc; the service is stopped."
    assert got[0]["remedy"] == SHM_REMEDY % ("svc", "none found now")


def test_leftovers_named_in_the_journal_while_the_service_runs():
    hits = ["(EngineCore_DP0 pid=%d) FileExistsError: [Errno 17] File exists: '/dev/shm/psm_%d'" % (pid, pid)
            for pid in (1, 2, 3)]
    files = shm(4)
    got = findings(text(*hits), shm_files=files, stopped=False)
    assert got == [finding(
        "shm_leftovers", hits[1:] + ["/dev/shm/psm_%04d (owner vllm, %d bytes)" % (n, 1024 * n) for n in range(4)],
        SHM_CAUSE + " Found 4 such file(s), 4 owned by vllm; the service is running. The journal names /dev/shm/psm_1, "
        "/dev/shm/psm_2, /dev/shm/psm_3.",
        SHM_REMEDY % ("vllm", " ".join(entry["path"] for entry in files))
        + " While the service runs, its own files are in use: leave them.",
        dict(files=[entry["path"] for entry in files], owned_by_service_user=[entry["path"] for entry in files],
             journal_names=["/dev/shm/psm_1", "/dev/shm/psm_2", "/dev/shm/psm_3"], in_journal=True))]


def test_leftovers_named_in_the_journal_with_the_state_unknown():
    hit = "(EngineCore_DP0 pid=1) FileExistsError: [Errno 17] File exists: '/psm_1'"
    unread = findings(text(hit))
    assert unread[0]["cause"] == SHM_CAUSE + " The journal names /psm_1."
    assert unread[0]["remedy"] == SHM_REMEDY % ("vllm", "`ls -l /dev/shm` shows their owners")
    # /dev/shm read and nothing there: the journal's words, not a claim of leftovers (issue 27, point 3).
    got = findings(text(hit), shm_files=[])
    assert got[0]["details"]["cause_if_it_were_so"] == (
        SHM_CAUSE + " Found 0 such file(s), 0 owned by vllm; the service state is unknown. The journal names /psm_1.")
    assert got[0]["cause"] == (
        "The journal says \"FileExistsError: [Errno 17] File exists: '/psm_1'\"; but no leftover vLLM file (psm_*, sem.mp-*, "
        "vllm_offload_*) is in /dev/shm now: the journal's lines are not the state now (they are from an earlier start, or "
        "from elsewhere).")
    assert got[0]["remedy"] == ("Nothing on the host needs this fix now (run `ansible-playbook deploy.yml --tags server` if "
                                "the service is stopped). If the failure comes back: " + SHM_REMEDY % ("vllm", "none found now"))


# ---- 7. model files --------------------------------------------------------------------------


def test_model_file_evidence_is_the_last_three_journal_lines_then_the_check():
    shards = ["/srv/m/model-%05d-of-00119.safetensors" % number for number in (3, 1, 2, 4)]
    lines = [vllm("Worker_TP%d pid=%d" % (n, n), "FileNotFoundError: [Errno 2] No such file or directory: '%s'" % shard)
             for n, shard in enumerate(shards)]
    check = dict(checked=True, path="/srv/m", problems=["a is missing", "b is short", "c", "d", "e"])
    got = findings(text(STARTED, *(lines + [EXITED])), model_check=check)
    assert got == [finding(
        "model_files", lines[1:] + ["a is missing", "b is short", "c", "d"],
        MODEL_CAUSE % ("vLLM could not open %s; the check of /srv/m found 5 problem(s): a is missing; b is short; c; d"
                       % ", ".join(sorted(shards))),
        REMEDY_MODEL,
        dict(journal_files=sorted(shards), safetensors_errors=[], check_problems=check["problems"], in_journal=True))]


@pytest.mark.parametrize("check, cause", [
    (None, "vLLM found weights missing from the checkpoint; set model_path to name the bad shard"),
    (dict(checked=True, path="/srv/m", problems=[]), "vLLM found weights missing from the checkpoint"),
])
def test_missing_weights_without_a_file_name(check, cause):
    line = vllm("Worker_TP0 pid=1", "RuntimeError: Cannot find any model weights with `/srv/m`")
    got = findings(text(STARTED, line, EXITED), model_check=check)
    details = dict(journal_files=[], safetensors_errors=[], check_problems=[], in_journal=True)
    if check is None:
        assert got == [finding("model_files", [line], MODEL_CAUSE % cause, REMEDY_MODEL, details)]
        return
    # The check found every shard whole: what the journal said, not a claim (issue 27, point 3).
    state = "the check of /srv/m found every shard complete now"
    said = "RuntimeError: Cannot find any model weights with `/srv/m`"
    assert got == [dict(
        id="model_files", title="Model files missing or truncated: in the journal, not on the host now", evidence=[line],
        cause="The journal says \"%s\"; but %s: the journal's lines are not the state now (they are from an earlier start, "
              "or from elsewhere)." % (said, state),
        remedy="Nothing on the host needs this fix now (run `ansible-playbook deploy.yml --tags server` if the service is "
               "stopped). If the failure comes back: " + REMEDY_MODEL,
        details=dict(details, contradicted_by=state, journal_says=said, cause_if_it_were_so=MODEL_CAUSE % cause))]


def test_a_problem_found_only_by_the_check():
    check = dict(checked=True, path="/srv/m", problems=["x.safetensors is truncated"])
    got = findings("", model_check=check)
    assert got == [finding("model_files", ["x.safetensors is truncated"],
                           MODEL_CAUSE % "the check of /srv/m found 1 problem(s): x.safetensors is truncated", REMEDY_MODEL,
                           dict(journal_files=[], safetensors_errors=[], check_problems=check["problems"], in_journal=False))]


# ---- 8. and 9. the endpoint and the engine core ----------------------------------------------


def test_engine_unhealthy_behind_a_healthy_health_in_full():
    stalls = [vllm("APIServer pid=9", "Engine 000: Running: 0 reqs, Waiting: %d reqs" % n, "INFO", "loggers.py:236")
              for n in (1, 2, 3)]
    endpoint = dict(checked=True, base_url="http://127.0.0.1:8001", health_status=200, model="kimi", timeout=7, hang=True)
    got = findings(text(STARTED, *stalls), endpoint=endpoint, unit="vllm-b.service")
    assert got == [finding(
        "engine_unhealthy",
        ["GET http://127.0.0.1:8001/health -> 200",
         "POST http://127.0.0.1:8001/v1/chat/completions (model kimi, max_tokens 2) -> no answer within 7 s"] + stalls[1:],
        "/health answers 200 but a two-token chat completion did not finish within 7 s: the API server process is alive "
        "while the engine core is dead or stuck, which /health does not see (vLLM issue #39863).",
        "Restart the service (`systemctl restart vllm-b.service`; loading the model again takes many minutes), then confirm "
        "with `ansible-playbook playbooks/verify.yml`; fleet.vllm.vllm_gateway's gateways take such a host out of rotation "
        "by their completion check. If it recurs, the engine usually hangs in NCCL: set `fleet_vllm_nccl_env` with "
        "`NCCL_P2P_DISABLE: \"1\"` and run `%s --tags nccl,server`." % DEPLOY,
        dict(timeout=7, model="kimi", completion_status=None, hang=True))]


def test_engine_core_death_without_an_error_above_it():
    deaths = [vllm("Worker_TP%d pid=%d" % (n, n), "Worker proc VllmWorker-%d died unexpectedly, shutting down executor." % n)
              for n in range(3)]
    endpoint = dict(checked=True, base_url="http://127.0.0.1:8000", health_status=503, model=None, timeout=5, hang=False)
    got = findings(text(STARTED, *(deaths + [EXITED])), endpoint=endpoint)
    assert got == [finding(
        "engine_core_died", deaths[1:] + ["GET http://127.0.0.1:8000/health -> 503"],
        "The engine core process died and no error precedes it in the journal lines read: raise journal_lines, or look at "
        "journal_tail.", REMEDY_ENGINE, dict(root_error=None, root_exception=None))]


def test_engine_core_death_is_reported_next_to_leftover_files():
    """Files in /dev/shm found on the host do not explain the death; a cause in the journal would."""
    files = shm(1)
    got = findings(journal("engine-core-died.txt"), shm_files=files)
    assert [item["id"] for item in got] == ["shm_leftovers", "engine_core_died"]


# ---- reading the journal ---------------------------------------------------------------------


def test_journal_markers_and_blank_lines_are_not_lines():
    journal_text = "-- Boot 6f1c --\n\n" + text(STARTED, "-- vllm restarted", FAILED, "-- No entries --")
    result = diagnose(journal_text)
    assert (result["lines_read"], result["lines_analysed"]) == (3, 3)
    assert result["journal_tail"] == ["vllm.service: Failed with result 'exit-code'."]
    assert result["journal_stopped"] is True


def test_an_indented_raw_line_is_a_traceback_line_not_a_message():
    assert findings(text(STARTED, '    raise RuntimeError(f"NCCL error: {error_str}")', EXITED)) == []
    assert findings(text(STARTED, vllm("Worker_TP0 pid=1", ' RuntimeError: NCCL error: x'), EXITED)) == []
    assert [item["id"] for item in findings(text(STARTED, "RuntimeError: NCCL error: x", EXITED))] == ["nccl"]


def test_the_latest_start_that_reached_readiness_is_where_analysis_begins():
    flag = "vllm: error: unrecognized arguments: --bad"
    ready = vllm("APIServer pid=2", "Application startup complete.", "INFO", "launcher.py:1")
    nccl = vllm("Worker_TP0 pid=3", "RuntimeError: NCCL error: unhandled system error")
    journal_text = text(STARTED, flag, EXITED, STARTED, ready, EXITED, STARTED, nccl, EXITED)
    result = diagnose(journal_text)
    assert [item["id"] for item in result["findings"]] == ["nccl"]
    assert (result["lines_read"], result["lines_analysed"]) == (9, 6)
    since = diagnose(journal_text, since_last_start=True)
    assert [item["id"] for item in since["findings"]] == ["nccl"]
    assert since["lines_analysed"] == 3


def test_the_last_start_alone_can_be_analysed():
    journal_text = text(STARTED, "vllm: error: unrecognized arguments: --a", EXITED, STARTED,
                        "vllm: error: unrecognized arguments: --b", EXITED, STARTED)
    result = diagnose(journal_text, since_last_start=True)
    assert (result["findings"], result["lines_analysed"], result["journal_stopped"]) == ([], 1, False)
    assert [item["details"]["flags"] for item in findings(journal_text)] == [["--b"]]


def test_an_error_of_an_earlier_start_counts_when_the_current_start_has_none():
    loading = vllm("APIServer pid=9", "vLLM API server version 0.16.0", "INFO", "api_server.py:1272")
    result = diagnose(text(STARTED, "vllm: error: unrecognized arguments: --a", "SystemExit: 2", EXITED, STARTED, loading))
    assert result["has_error"] is True
    # No "Traceback" line: the tail is what the process printed up to the error.
    assert result["journal_tail"] == [STARTED, "vllm: error: unrecognized arguments: --a", "SystemExit: 2"]


def test_the_tail_of_wrappers_only_starts_at_the_first_wrapper():
    first = vllm("EngineCore_DP0 pid=1", "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.")
    second = vllm("EngineCore_DP0 pid=1", "KeyboardInterrupt: terminated")
    result = diagnose(text(STARTED, vllm("EngineCore_DP0 pid=1", "shutting down", "INFO"), first, second, EXITED))
    assert result["journal_tail"] == [vllm("EngineCore_DP0 pid=1", "shutting down", "INFO"), first]


def test_vllm_lines_alone_do_not_say_whether_the_service_runs():
    starting = vllm("APIServer pid=1", "Starting vLLM API server 0 on http://0.0.0.0:8000", "INFO", "api_server.py:1344")
    assert journal_stopped(text(starting)) is None
    assert journal_stopped(text(STARTED, starting)) is False


@pytest.mark.parametrize("size, trimmed", [(_failures.EVIDENCE_CHARS, False), (_failures.EVIDENCE_CHARS + 1, True)])
def test_evidence_is_trimmed_only_beyond_its_limit(size, trimmed):
    head = "RuntimeError: NCCL error: "
    line = head + "x" * (size - len(head))
    evidence = findings(text(STARTED, line, EXITED))[0]["evidence"]
    assert evidence == [line[:_failures.EVIDENCE_CHARS] + " [...]" if trimmed else line]


def test_an_engine_death_whose_only_errors_are_wrappers_names_no_root():
    """EngineDeadError and the like are raised on top of the real error: alone, they name no cause."""
    dead = vllm("APIServer pid=9", "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.")
    got = findings(text(STARTED, dead, EXITED))
    assert got == [finding("engine_core_died", [dead],
                           "The engine core process died and no error precedes it in the journal lines read: raise "
                           "journal_lines, or look at journal_tail.", REMEDY_ENGINE,
                           dict(root_error=None, root_exception=None))]
