# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST FIXTURE, NOT vLLM: the engine of the simulator that stands in for vLLM's OpenAI server.

Installed as the ``vllm`` distribution (tests/simulator/build-wheel.py) into a venv on hosts
without a GPU, it imitates what fleet.vllm relies on of ``python -m
vllm.entrypoints.openai.api_server`` and ``vllm serve``:

* the command line: the option list is vLLM's own, extracted from the real parser by
  tools/extract-vllm-flags.py into flags.json (see vllm/entrypoints/openai/cli_args.py); unknown
  flags get argparse's error, exit 2, as vLLM prints it;
* the KV-cache dtype: resolved from the model directory by ``_fleet_kv_rules``, which is
  plugins/module_utils/_kv_cache.py copied into the wheel at build time (one piece of code for
  the collection and the simulator; that code is checked against the real vLLM by
  tests/unit/plugins/modules/test_kv_cache_config_vllm.py);
* the attention backend choice: ``_fleet_support_rules`` (plugins/module_utils/_vllm_support.py,
  copied the same way) says, from this build's version, whether any MLA backend takes the
  resolved dtype on the compute capability the fixture ``nvidia-smi`` reports; when none does
  the simulator prints vLLM's traceback shape and ``ValueError: No valid attention backend
  found ...`` (text as in tests/fixtures/journal/attention-backend-fp8-sm120.txt) and exits 1;
* otherwise the port refuses connections for FLEET_VLLM_SIM_LOAD_SECONDS (default 2: the
  "load"), then ``/health``, ``/v1/models``, ``/version``, ``/metrics`` and
  ``/v1/chat/completions`` answer in vLLM's shapes, and so do SageMaker's ``/ping`` and
  ``/invocations`` (a chat request), while a shared-memory segment /dev/shm/psm_* is held as
  vLLM's broadcast queue holds one (removed at a clean exit); ``--api-key`` / ``VLLM_API_KEY``
  guard ``/v1``, ``/v2``, ``/inference`` and ``/cohere`` as vLLM 0.33.0 does (401
  ``{"error": "Unauthorized"}``), so ``/invocations`` runs without the key, as in vLLM; SIGTERM
  (and SIGINT) end it with exit 0, after the requests in flight finished when
  ``--shutdown-timeout`` is more than 0 (vLLM's "drain"), at once otherwise ("abort");
* ``/metrics`` has the vllm: series the monitoring reads (requests running and waiting, KV-cache
  usage, token and success counters, the cache config) and, as vLLM's API server exports it,
  ``http_requests_total`` by handler, method and grouped status (``UNCOUNTED_HANDLERS``);
* ``--uds PATH``: as vLLM's ``create_server_unix_socket`` (0.33.0), an AF_UNIX stream socket is
  bound at PATH when the server starts, before the load (so PATH exists and refuses connections
  while the model loads), with no unlink of an existing file (one there, even a socket left by an
  earlier run, makes the bind fail: EADDRINUSE, exit 1) and no chmod (the file's mode is what the
  umask leaves); ``--host``/``--port`` are then ignored, the log says ``Starting vLLM server on
  unix:PATH``, and the file stays after the server exits (vLLM removes it neither);
* a serving group (one model copy across hosts: ``--nnodes N`` > 1, multiprocessing, no Ray), as
  vLLM runs one: rank 0 (``--node-rank 0``) is the API server, ranks 1..N-1 run ``vllm serve
  --headless`` (no API server). vLLM's checks of those flags are made with vLLM's words
  (``parallel_config_error``); the head listens on ``--master-port`` on all addresses (torch's
  TCPStore server) and serves only once N-1 ranks said hello (``GroupHead``); a headless rank binds
  its workers' message-queue socket on VLLM_HOST_IP and connects to ``--master-addr:--master-port``
  (``GroupMember``); a rank that goes away kills the head's engine (exit 1), a head that goes away
  kills the rank's workers (exit 1). The protocol, the bounds and the differences: "A serving group"
  in tests/simulator/README.md.
* several engines on one machine (instances): CUDA_VISIBLE_DEVICES resolved as CUDA does (indexes, GPU UUIDs, one
  MIG device; the list ends at the first entry it cannot resolve), vLLM's "World size (N) is larger than the number of
  available GPUs (M) in this node." and torch's "No CUDA GPUs are available"; VLLM_PORT read as vLLM reads it, and on a
  build with a tcp:// rendezvous (before vLLM #50999) the first worker's TCPStore held on the first free port from it
  (``rendezvous``). "Instances" in tests/simulator/README.md.

Where it differs from vLLM: no model is loaded and nothing is computed. Completions are a
fixed sentence cut to ``max_tokens`` words (a word counts as a token); usage counts words.
With FLEET_VLLM_SIM_FIRST_TOKEN=eos the model's first token is its end-of-sequence token: a
completion is that one token (no text, ``finish_reason`` "stop", usage 1) unless the request
keeps EOS out as vLLM does: ``min_tokens`` N masks EOS for the first N tokens (vLLM's
MinTokensLogitsProcessor; then EOS ends it, one token more, unless ``max_tokens`` came first)
and ``ignore_eos`` generates on to ``max_tokens``; ``min_tokens`` is checked as vLLM checks it
(0 or more, not above ``max_tokens``: 400).
Only the flags are checked, not their values beyond argparse's type/choices (values of vLLM's
own type functions other than int/float are kept as strings); of vLLM's post-parse checks only
``--enable-auto-tool-choice requires --tool-call-parser`` is imitated. A model that is not a
local directory is refused (vLLM would try the Hub). The GPUs are what ``nvidia-smi`` on PATH lists, as
CUDA_VISIBLE_DEVICES leaves them (the first visible one's compute_cap decides); without one it stops like vLLM
without a device. Log lines have
vLLM's format, with made-up source line numbers; the traceback's frames are vLLM 0.16's; the
``non-default args`` line masks ``api_key``/``hf_token``. No HEAD, /v1/completions, tools or
reasoning output; the refusal covers MLA models only (standard attention always finds a backend).
Standard library only (http.server, json): runs on Python 3.9+.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from vllm import __version__
from vllm import _fleet_kv_rules as kv_rules
from vllm.config import cache as cache_config
from vllm import _fleet_support_rules as support_rules

LOAD_SECONDS_ENV = "FLEET_VLLM_SIM_LOAD_SECONDS"
# Faults of the real engine that tests need to see (a systemd drop-in sets it on one host):
#   dead: /health keeps answering 200 while every completion answers 500, as the real vLLM does
#         once its EngineCore died (measured on the CPU build with an FP8 KV cache on an MLA
#         model: the first completion kills the engine, /health stays 200; docs/evidence.md);
#   hung: /health 200, completions never answer (vLLM issue #39863: a hung engine behind a
#         healthy /health);
#   exit: the engine dies while loading the weights (exit 1), as on a CUDA out-of-memory error;
#   decode-dead: a completion whose one token comes out of the prefill answers, the first decode
#         step (a second token) kills the engine: that completion and every one after it answer 500,
#         /health stays 200 (the real CPU engine with an FP8 KV cache its decode kernel cannot read:
#         max_tokens 1 -> 200, max_tokens 2 -> 500; docs/evidence.md section 5).
FAULT_ENV = "FLEET_VLLM_SIM_FAULT"
FAULTS = ("", "dead", "hung", "exit", "decode-dead")
# The model's first token (a property of the model, not a fault): "eos" makes its end-of-sequence
# token the likeliest at every step, so a completion ends after the prefill with one token (the EOS:
# no text, usage counts it, finish_reason "stop") unless the request keeps EOS out as vLLM does:
# min_tokens N masks EOS for the first N tokens (then EOS ends it, unless max_tokens did),
# ignore_eos generates on to max_tokens. Unset: the fixed sentence below.
FIRST_TOKEN_ENV = "FLEET_VLLM_SIM_FIRST_TOKEN"
# A test control, not something vLLM has: a running simulator reads this file on every request
# (its content: dead, hung, or nothing), so that a test can break the engine of a serving host
# without a restart, as an engine dies or hangs under a running API server. It wins over
# FLEET_VLLM_SIM_FAULT while it exists; removing it heals the engine.
FAULT_FILE_ENV = "FLEET_VLLM_SIM_FAULT_FILE"
FAULT_FILE_DEFAULT = "/run/fleet-vllm-simulator/fault"
# The speed of generation, a test control vLLM does not have (a GPU's speed): lines "VERSION
# TOKENS_PER_SECOND" or "* TOKENS_PER_SECOND" in this file, read on every request; the simulator
# takes its own version's line, else the "*" line. Without the file (or a line for it) it answers
# at once, as it always did. Each request then takes 1/N s for its first token (the prefill) and
# 1/N s for each further one, streamed token by token: what vLLM's benchmark client measures as
# time to first token and inter-token latency. A file, not the unit's environment, so that one
# host can be made slow while it serves, and so that a new pin can be slower than the old one.
SPEED_FILE_ENV = "FLEET_VLLM_SIM_SPEED_FILE"
SPEED_FILE_DEFAULT = "/run/fleet-vllm-simulator/speed"
# The path prefixes vLLM 0.33.0's --api-key guards (entrypoints/serve/middleware/authenticate.py);
# everything else, /invocations and /ping among them, answers without the key.
GUARDED_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")
REPLY = "This is a simulated reply from the fleet.vllm test engine, not from a model."
PID = os.getpid()

# vLLM's MLA backend priority on CUDA (vllm/platforms/cuda.py, _get_backend_priorities), and
# the reasons a backend adds beyond dtype and capability (as in the stored journal excerpt).
MLA_PRIORITY = ("FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA", "FLASHMLA_SPARSE")
MLA_PRIORITY_SM100 = ("CUTLASS_MLA", "FLASHINFER_MLA", "FLASHMLA", "FLASH_ATTN_MLA", "TRITON_MLA", "FLASHMLA_SPARSE")


class Terminate(BaseException):
    """SIGTERM or SIGINT arrived. A BaseException, as KeyboardInterrupt is: the signal handler
    raises it in the main thread wherever that thread is, and when that is inside socketserver's
    request dispatch (starting a handler thread) an Exception would be caught by its
    ``except Exception: handle_error`` - "Exception occurred during processing of request" - and
    the server would go on serving, deaf to the SIGTERM (seen on a loaded CI machine: a stop
    that waited out its 60 s)."""


# ---- logging in vLLM's format --------------------------------------------------------------


def _stamp():
    return time.strftime("%m-%d %H:%M:%S")


def log(level, where, message, proc="APIServer", pid=PID, stream=None):
    """One line of vLLM's log; ``proc`` None: no ``(proc pid=N)`` prefix, as a process vLLM does not
    decorate writes (the main process of ``vllm serve --headless``)."""
    stream = stream or sys.stdout
    prefix = "" if proc is None else "(%s pid=%d) " % (proc, pid)
    stream.write("%s%s %s [%s] %s\n" % (prefix, level, _stamp(), where, message))
    stream.flush()


def access_log(message):
    sys.stdout.write("(APIServer pid=%d) INFO:     %s\n" % (PID, message))
    sys.stdout.flush()


# ---- the command line ----------------------------------------------------------------------


def build_parser(top_level):
    """vLLM's parser from flags.json: ``api_server.py`` style, or ``vllm`` with ``serve``."""
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    if not top_level:
        return make_arg_parser(FlexibleArgumentParser(description="vLLM OpenAI-Compatible RESTful API server."))
    parser = FlexibleArgumentParser(prog="vllm", description="vLLM CLI")
    parser.add_argument("-v", "--version", action="version", version=__version__)
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    serve = subparsers.add_parser(
        "serve", help="Launch a local OpenAI-compatible API server to serve LLM completions via HTTP.",
        description="Launch a local OpenAI-compatible API server to serve LLM completions via HTTP.",
        usage="vllm serve [model_tag] [options]")
    make_arg_parser(serve)
    return parser


def validate(args):
    from vllm.entrypoints.openai.cli_args import validate_parsed_serve_args
    validate_parsed_serve_args(args)


def _listify(value):
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _int_of(value, default=None):
    """vLLM's human_readable_int for the values it reads: 131072, 128k, 1M."""
    if value is None:
        return default
    text = str(value).strip()
    match = re.match(r"^([0-9.]+)([kKmMgG]?)$", text)
    if not match:
        return default
    scale = {"": 1, "k": 1000, "K": 1024, "m": 10 ** 6, "M": 1024 ** 2, "g": 10 ** 9, "G": 1024 ** 3}[match.group(2)]
    return int(float(match.group(1)) * scale)


def non_default_args(args):
    """vLLM's ``non-default args`` log line; secrets are masked here (a test fixture's journal
    must not carry them, whatever the real build prints)."""
    shown = {}
    for key, value in sorted(vars(args).items()):
        if key in ("subparser", "dispatch_function") or value in (None, False, [], ""):
            continue
        shown[key] = "***" if key in ("api_key", "hf_token") else value
    return shown


# ---- the GPU and the model -----------------------------------------------------------------


# The GPUs one engine sees. fleet.vllm runs several engines on one machine (instances, each a systemd unit) and gives
# each its GPUs by UUID in CUDA_VISIBLE_DEVICES. The fixture nvidia-smi stands for NVML, which ignores that variable
# (it lists the machine's GPUs); what the engine's CUDA sees is resolved from it here as CUDA resolves it (NVIDIA CUDA
# C++ Programming Guide, "CUDA Environment Variables": a comma-separated list of indexes or UUIDs, the devices enumerated
# in the list's order, and the list ends at the first entry that names no device) in the words of the code vLLM counts
# with: vLLM's CudaPlatform.device_count() (vllm/platforms/cuda.py, _cuda_device_count_stateless, 0.33.0) is torch's
# torch.cuda._device_count_nvml() (torch/cuda/__init__.py: _parse_visible_devices, _transform_uuid_to_ordinals), which
# mirrors CUDA's parsing.

GPU_QUERY = ("--query-gpu=index,uuid,compute_cap", "--format=csv,noheader")
_LIST_GPU = re.compile(r"^GPU (\d+): .*\(UUID: (GPU-[^)\s]+)\)\s*$")
_LIST_MIG = re.compile(r"^\s+MIG\b.*\(UUID: (MIG-[^)\s]+)\)\s*$")


class Gpu(object):
    """A device CUDA can enumerate: a GPU (``uuid`` GPU-...), or a MIG device (MIG-...) on the GPU ``index``."""

    def __init__(self, index, uuid, capability):
        self.index, self.uuid, self.capability = index, uuid, capability

    def describe(self):
        return "%s (GPU %d)" % (self.uuid, self.index)


def _nvidia_smi(*arguments):
    """nvidia-smi's stdout for ``arguments``, or None (no nvidia-smi on PATH, or it failed)."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return None
    proc = subprocess.run([tool] + list(arguments), capture_output=True, text=True, env=dict(os.environ, LC_ALL="C"),
                          check=False)
    return proc.stdout if proc.returncode == 0 else None


def machine_gpus():
    """The machine's GPUs in NVML's index order (``nvidia-smi --query-gpu=index,uuid,compute_cap``), or None when
    there is none to read (no nvidia-smi, no driver, no device, an answer it cannot parse): vLLM's platform detection
    (pynvml's device count, vllm/platforms/__init__.py cuda_platform_plugin) finds no CUDA then."""
    text = _nvidia_smi(*GPU_QUERY)
    if text is None:
        return None
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [part.strip() for part in line.split(",")]
        try:
            gpus.append(Gpu(int(parts[0]), parts[1], support_rules.parse_capability(parts[2])))
        except (IndexError, ValueError, support_rules.VllmSupportError):
            return None
    return gpus or None


def mig_devices(gpus):
    """The MIG devices ``nvidia-smi -L`` lists, each under its GPU's line ("  MIG 1g.12gb  Device  0: (UUID: MIG-...)"),
    as Gpu objects with their GPU's index and compute capability."""
    text = _nvidia_smi("-L") or ""
    capability = dict((gpu.index, gpu.capability) for gpu in gpus)
    devices, parent = [], None
    for line in text.splitlines():
        match = _LIST_GPU.match(line)
        if match:
            parent = int(match.group(1))
            continue
        match = _LIST_MIG.match(line)
        if match and parent in capability:
            devices.append(Gpu(parent, match.group(1), capability[parent]))
    return devices


def _strtoul(text):
    """torch's _strtoul (torch/cuda/__init__.py, as CUDA reads an entry): the integer the entry starts with ("1gpu2":
    1), or -1 when it starts with none."""
    end = 0
    while end < len(text) and (text[end].isdigit() or (end == 0 and text[end] in "+-")):
        end += 1
    try:
        return int(text[:end]) if end else -1
    except ValueError:  # a lone sign
        return -1


def visible_gpus(value, gpus, migs=()):
    """The devices CUDA enumerates for CUDA_VISIBLE_DEVICES ``value`` (None: unset, every GPU), in CUDA's order (cuda:0
    first), as torch's _parse_visible_devices / _transform_uuid_to_ordinals / _device_count_nvml count them:

    * a list of GPU UUIDs (it starts with GPU-): a UUID or a unique prefix of one; the list ends at the first entry
      that does not start with GPU- or names no GPU (or more than one); an entry named twice leaves no device;
    * MIG UUIDs (it starts with MIG-): a CUDA process enumerates one MIG device (NVIDIA's MIG User Guide, "CUDA Device
      Enumeration"), the first entry, if ``nvidia-smi -L`` lists it; torch leaves MIG to CUDA's own count;
    * else indexes, each read as strtoul reads it; the list ends at the first one that is not a number or is
      negative, a number named twice leaves no device, and it is cut at the first index the machine does not have;
    * set and empty: no device."""
    if value is None:
        return list(gpus)
    if value.startswith("MIG-"):
        first = value.split(",")[0]
        found = [mig for mig in migs if mig.uuid.startswith(first)]
        return found if len(found) == 1 else []
    if value.startswith("GPU-"):
        named = []
        for entry in value.split(","):
            if entry in named:
                return []
            if not entry.startswith("GPU-"):
                break
            named.append(entry)
        chosen = []
        for entry in named:
            found = [gpu for gpu in gpus if gpu.uuid.startswith(entry)]
            if len(found) != 1:
                break  # the first entry that names no GPU (or is ambiguous) ends the list
            if found[0] in chosen:
                return []
            chosen.append(found[0])
        return chosen
    indexes = []
    for entry in value.split(","):
        number = _strtoul(entry.strip())
        if number in indexes:
            return []
        if number < 0:
            break
        indexes.append(number)
    by_index = dict((gpu.index, gpu) for gpu in gpus)
    chosen = []
    for number in indexes:
        if number not in by_index:
            break
        chosen.append(by_index[number])
    return chosen


def gpu_view():
    """(the machine's GPUs, the visible ones) for this process's CUDA_VISIBLE_DEVICES, or None (no GPU to read)."""
    gpus = machine_gpus()
    if gpus is None:
        return None
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    migs = mig_devices(gpus) if value is not None and value.startswith("MIG-") else ()
    return gpus, visible_gpus(value, gpus, migs)


def visible_line(gpus, visible):
    """The simulator's own INFO line (a test hook: real vLLM names no UUID) with the devices this engine sees."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    setting = "CUDA_VISIBLE_DEVICES unset" if value is None else "CUDA_VISIBLE_DEVICES=%s" % value
    devices = ", ".join("cuda:%d=%s" % (number, gpu.describe()) for number, gpu in enumerate(visible)) or "none"
    return "Visible GPUs: %d of %d (%s): %s (test simulator)" % (len(visible), len(gpus), setting, devices)


def world_size_error(args, visible):
    """vLLM's refusal of more workers on this node than it has GPUs, or None: vllm/config/parallel.py,
    ParallelConfig.__post_init__ (0.16.0 and 0.33.0): when no --distributed-executor-backend is given and the world
    size across data parallelism is above 1, on CUDA with --nnodes 1 (with more nodes it picks mp unchecked), ``raise
    ValueError(f"World size ({self.world_size}) is larger than the number of available GPUs ({gpu_count}) in this
    node. ...")`` with world_size = pipeline x tensor x prefill-context parallel size and gpu_count
    current_platform.device_count(), the visible GPUs. ParallelConfig is a pydantic dataclass: the ValueError comes out
    as pydantic's ValidationError (measured: pydantic 2.14 of the 0.33.0 venv; its "[type=value_error, input_value=
    ArgsKwargs(...)]" tail is left out, as in parallel_config_error)."""
    if getattr(args, "distributed_executor_backend", None) is not None or (getattr(args, "nnodes", None) or 1) > 1:
        return None
    world = ((_int_of(getattr(args, "pipeline_parallel_size", None), 1) or 1)
             * (_int_of(getattr(args, "tensor_parallel_size", None), 1) or 1)
             * (_int_of(getattr(args, "prefill_context_parallel_size", None), 1) or 1))
    if world * (_int_of(getattr(args, "data_parallel_size", None), 1) or 1) <= 1 or len(visible) >= world:
        return None
    return ("pydantic_core._pydantic_core.ValidationError: 1 validation error for ParallelConfig\n"
            "  Value error, World size (%d) is larger than the number of available GPUs (%d) in this node. If this is "
            "intentional and you are using:\n- ray, set '--distributed-executor-backend ray'.\n- multiprocessing, set "
            "'--nnodes' appropriately." % (world, len(visible)))


# torch's error when CUDA enumerates no device (c10/cuda/CUDAFunctions.cpp, device_count_ensure_non_zero), raised where
# the worker takes its GPU (vllm/v1/worker/gpu_worker.py, init_device: current_platform.set_device): every GPU hidden
# by CUDA_VISIBLE_DEVICES while NVML, which vLLM's platform detection asks, still lists the machine's.
NO_CUDA_GPUS = "RuntimeError: No CUDA GPUs are available"


def read_model(path):
    """(config.json, hf_quant_config.json or None) of a local model directory."""
    if not os.path.isdir(path) or not os.path.isfile(os.path.join(path, "config.json")):
        raise ValueError("Invalid repository ID or local directory specified: '%s'.\nPlease verify the following "
                         "requirements:\n1. Provide a valid Hugging Face repository ID.\n2. Specify a local directory "
                         "that contains a recognized configuration file.\n   - For Hugging Face models: ensure the "
                         "presence of a 'config.json'.\n   - For Mistral models: ensure the presence of a "
                         "'params.json'." % path)
    config = support_rules.load_config(path)
    hf_quant = None
    hf_quant_path = os.path.join(path, kv_rules.HF_QUANT_FILE)
    if os.path.isfile(hf_quant_path):
        with open(hf_quant_path, encoding="utf-8") as handle:
            hf_quant = json.load(handle)
    return config, hf_quant


def version_info():
    from vllm import _version
    return __version__, getattr(_version, "__commit_id__", None)


def backend_reasons(kv_cache_dtype, capability):
    """vLLM's ``{NAME: [reasons]}`` for the MLA backends on this build, and whether one accepts."""
    version, commit = version_info()
    table, _evidence = support_rules.table_backends(version, commit, kv_cache_dtype, "mla", capability)
    table = dict((entry["name"], entry) for entry in table)
    hopper = capability[0] == 9
    reasons = {}
    for name in (MLA_PRIORITY_SM100 if capability[0] == 10 else MLA_PRIORITY):
        why = []
        if name == "FLASHMLA_SPARSE":
            if kv_cache_dtype not in ("auto", "bfloat16", "fp8_ds_mla"):
                why.append("kv_cache_dtype not supported")
            why.append("non-sparse not supported")
            if capability[0] not in (9, 10):
                why.append("compute capability not supported")
        else:
            entry = table[name]
            if kv_cache_dtype not in entry["kv_cache_dtypes"]:
                why.append("kv_cache_dtype not supported")
            if not entry["compute_capability_supported"]:
                why.append("compute capability not supported")
            if name == "FLASH_ATTN_MLA" and not hopper:
                why.append("FlashAttention MLA not supported on this device")
            if name == "FLASHMLA" and not hopper:
                why.append("FlashMLA Dense is only supported on Hopper devices.")
        reasons[name] = why
    return reasons, any(not why for why in reasons.values())


def selector_config(head_size, dtype, kv_cache_dtype):
    return ("AttentionSelectorConfig(head_size=%d, dtype=torch.%s, kv_cache_dtype=%s, block_size=None, use_mla=True, "
            "has_sink=False, use_sparse=False, use_mm_prefix=False, attn_type=AttentionType.DECODER)"
            % (head_size, dtype, kv_cache_dtype))


# vLLM 0.16's frames from the worker's start to the selector's ValueError (the journal excerpt).
_WORKER_FRAMES = (
    ("v1/executor/multiproc_executor.py", 743, "worker_main", "worker = WorkerProc(*args, **kwargs)"),
    ("v1/executor/multiproc_executor.py", 580, "__init__", "self.worker.load_model()"),
    ("v1/worker/gpu_worker.py", 290, "load_model", "self.model_runner.load_model(eep_scale_up=eep_scale_up)"),
    ("v1/worker/gpu_model_runner.py", 3567, "load_model", "self.model = model_loader.load_model("),
    ("model_executor/model_loader/base_loader.py", 49, "load_model", "model = initialize_model("),
    ("model_executor/model_loader/utils.py", 48, "initialize_model", "return model_class(vllm_config=vllm_config, prefix=prefix)"),
    ("model_executor/models/deepseek_v2.py", 1214, "__init__", "self.start_layer, self.end_layer, self.layers = make_layers("),
    ("model_executor/models/deepseek_v2.py", 1098, "__init__", "self.self_attn = attn_cls("),
    ("model_executor/models/deepseek_v2.py", 1029, "__init__", "self.mla_attn = MultiHeadLatentAttentionWrapper("),
    ("model_executor/layers/mla.py", 95, "__init__", "self.mla_attn = MLAAttention("),
    ("attention/layer.py", 665, "__init__", "self.attn_backend = get_attn_backend("),
    ("attention/selector.py", 81, "get_attn_backend", "return _cached_get_attn_backend("),
    ("attention/selector.py", 118, "_cached_get_attn_backend", "attention_cls = current_platform.get_attn_backend_cls("),
    ("platforms/cuda.py", 389, "get_attn_backend_cls", "raise ValueError("),
)
_ENGINE_FRAMES = (
    ("v1/engine/core.py", 937, "run_engine_core", "engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)"),
    ("v1/engine/core.py", 105, "__init__", "self.model_executor = executor_class(vllm_config)"),
    ("v1/executor/abstract.py", 101, "__init__", "self._init_executor()"),
    ("v1/executor/multiproc_executor.py", 181, "_init_executor", "self.workers = WorkerProc.wait_for_ready(unready_workers)"),
    ("v1/executor/multiproc_executor.py", 664, "wait_for_ready", "raise e from None"),
)
_API_FRAMES = (
    ("entrypoints/openai/api_server.py", 172, "build_async_engine_client", "async with build_async_engine_client_from_engine_args("),
    ("entrypoints/openai/api_server.py", 213, "build_async_engine_client_from_engine_args", "async_llm = AsyncLLM.from_vllm_config("),
    ("v1/engine/async_llm.py", 135, "__init__", "self.engine_core = EngineCoreClient.make_async_mp_client("),
    ("v1/engine/core_client.py", 469, "__init__", "with launch_core_engines(vllm_config, executor_class, log_stats) as ("),
    ("v1/engine/utils.py", 964, "wait_for_engine_startup", "raise RuntimeError("),
)


def _frames(frames):
    base = os.path.dirname(os.path.abspath(__file__))
    lines = ["Traceback (most recent call last):"]
    for rel, line, func, code in frames:
        lines.append('  File "%s", line %d, in %s' % (os.path.join(base, rel), line, func))
        lines.append("    " + code)
    return lines


def refuse(error_line, tensor_parallel_size):
    """Print vLLM's failed start (workers, engine core, API server) to stderr."""
    err = sys.stderr
    stamp = _stamp()
    for rank in range(tensor_parallel_size):
        prefix = "(Worker_TP%d pid=%d) ERROR %s [multiproc_executor.py:772] " % (rank, PID + 2 + rank, stamp)
        for line in ["WorkerProc failed to start."] + _frames(_WORKER_FRAMES) + [error_line]:
            err.write(prefix + line + "\n")
    engine = "(EngineCore_DP0 pid=%d) " % (PID + 1)
    err.write("%sERROR %s [core.py:946] EngineCore failed to start.\n" % (engine, stamp))
    for line in _frames(_ENGINE_FRAMES) + [
            "Exception: WorkerProc initialization failed due to an exception in a background process. "
            "See stack trace for root cause."]:
        err.write(engine + line + "\n")
    api = "(APIServer pid=%d) " % PID
    for line in _frames(_API_FRAMES) + [
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"]:
        err.write(api + line + "\n")
    err.flush()


# ---- the HTTP server -----------------------------------------------------------------------


# The routes the simulator serves, as vLLM's launcher lists them at its start.
ROUTES = (("/health", "GET"), ("/version", "GET"), ("/metrics", "GET"), ("/v1/models", "GET"),
          ("/v1/chat/completions", "POST"), ("/ping", "GET, POST"), ("/invocations", "POST"))
ROUTE_PATHS = frozenset(route for route, dummy in ROUTES)
# vLLM's HTTP instrumentation (vllm/entrypoints/serve/instrumentator/metrics.py of 0.16.0 and 0.33.0:
# prometheus_fastapi_instrumentator's Instrumentator(excluded_handlers=[...]).add(), 8.1.0): its
# default metric http_requests_total{handler, method, status}, the status grouped ("2xx", "5xx"),
# a path no route serves counted as handler "none", these handlers not counted at all.
UNCOUNTED_HANDLERS = ("/metrics", "/health", "/load", "/ping", "/version", "/server_info")


class State(object):
    def __init__(self, model, served_names, api_keys, max_model_len, kv_cache_dtype):
        self.model = model
        self.served_names = served_names
        self.api_keys = api_keys
        self.max_model_len = max_model_len
        self.kv_cache_dtype = kv_cache_dtype
        self.lock = threading.Lock()
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.finished = {"stop": 0, "length": 0}
        # Requests being answered (vllm:num_requests_running): a hung engine's stay, as vLLM's do.
        self.running = 0
        self.fault = os.environ.get(FAULT_ENV, "")
        self.fault_file = os.environ.get(FAULT_FILE_ENV) or FAULT_FILE_DEFAULT
        self.speed_file = os.environ.get(SPEED_FILE_ENV) or SPEED_FILE_DEFAULT
        self.eos_first = os.environ.get(FIRST_TOKEN_ENV, "") == "eos"
        self.decode_died = False  # fault decode-dead: the first decode step killed the engine
        self.active = 0
        self.http_requests = {}  # (handler, method, status group): count, vLLM's http_requests_total

    def count_response(self, method, path, status):
        """One answered request, in http_requests_total as vLLM's instrumentation counts it."""
        handler = path if path in ROUTE_PATHS else "none"
        if handler in UNCOUNTED_HANDLERS:
            return
        key = (handler, method, "%dxx" % (status // 100))
        with self.lock:
            self.http_requests[key] = self.http_requests.get(key, 0) + 1

    def current_fault(self):
        """The fault file's word while it exists (a test switched the engine), else the unit's; an
        engine that died at a decode step (fault decode-dead) stays dead."""
        with self.lock:
            if self.decode_died:
                return "dead"
        try:
            with open(self.fault_file, encoding="utf-8") as handle:
                word = handle.read().strip()
        except OSError:
            return self.fault
        return word if word in ("dead", "hung") else ""

    def speed(self):
        """This build's tokens per second from the speed file, or None."""
        try:
            with open(self.speed_file, encoding="utf-8") as handle:
                return speed_for(handle.read(), __version__)
        except OSError:
            return None


def speed_for(text, version):
    """Tokens per second for ``version`` from a speed file's text, else None (answer at once)."""
    found = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                found[parts[0]] = float(parts[1])
            except ValueError:
                continue
    speed = found.get(version, found.get("*"))
    return speed if speed and speed > 0 else None


def generate(limit, minimum, ignore_eos, eos_first):
    """(words, finish_reason, 1 when an EOS token ended it else 0) of a completion: the fixed
    sentence cut to max_tokens (``limit``) words; with the model's EOS first, what vLLM's
    min_tokens (EOS masked for the first ``minimum`` tokens) and ignore_eos leave of it."""
    words = REPLY.split()
    room = limit if isinstance(limit, int) else len(words)
    if eos_first and not ignore_eos:
        if minimum >= room:
            return words[:room], "length", 0
        return words[:minimum], "stop", 1
    if ignore_eos and isinstance(limit, int):
        # vLLM generates on to max_tokens: the sentence again, as many times as it takes.
        return (words * (limit // len(words) + 1))[:limit], "length", 0
    if room < len(words):
        return words[:room], "length", 0
    return words, "stop", 0


def _words(value):
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(_words(part.get("text", "")) if isinstance(part, dict) else _words(part) for part in value)
    return 0


def _client(address):
    """The access log's client: ``host:port`` over TCP; uvicorn's empty client over a Unix socket
    (accept() gives '' there, no host and no port)."""
    if isinstance(address, tuple) and len(address) >= 2:
        return "%s:%d" % (address[0], address[1])
    return ""


class Handler(BaseHTTPRequestHandler):
    server_version = "uvicorn"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    state = None  # set by serve()

    def log_message(self, fmt, *args):  # vLLM's uvicorn access log instead of http.server's
        return

    def _send(self, status, body=None, content_type="application/json", headers=()):
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode("utf-8"))
        # uvicorn logs the access at the response's start, before a byte is sent: a client that has
        # its answer and hangs up cannot take the line away (over a Unix socket a send after the
        # peer's close, even of nothing, is EPIPE), and an empty body is not sent at all.
        reason = self.responses.get(status, ("",))[0]
        access_log('%s - "%s %s HTTP/1.1" %d %s' % (_client(self.client_address), self.command, self.path, status, reason))
        # Counted, like the line, before the client can have its answer and ask /metrics.
        self.state.count_response(self.command, self.path.split("?", 1)[0], status)
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        for key, value in headers:
            self.send_header(key, value)
        self.end_headers()
        if data and self.command != "HEAD":
            self.wfile.write(data)

    def _send_paced(self, events, delay):
        """A 200 event stream sent one event per ``delay`` seconds (chunked), as an engine that generates
        one token per step streams them."""
        access_log('%s - "%s %s HTTP/1.1" 200 OK' % (_client(self.client_address), self.command, self.path))
        self.state.count_response(self.command, self.path.split("?", 1)[0], 200)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for event in events:
            time.sleep(delay)
            data = event.encode("utf-8")
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        return None

    def parse_request(self):
        # Requests in flight, for --shutdown-timeout (a SIGTERM waits for them): counted once the
        # request line is read, so that an idle keep-alive connection is not one.
        parsed = BaseHTTPRequestHandler.parse_request(self)
        if parsed:
            with self.state.lock:
                self.state.active += 1
            self._counted = True
        return parsed

    def handle_one_request(self):
        self._counted = False
        try:
            BaseHTTPRequestHandler.handle_one_request(self)
        finally:
            if self._counted:
                with self.state.lock:
                    self.state.active -= 1

    def _authorized(self):
        path = self.path.split("?", 1)[0]
        guarded = any(path == prefix or path.startswith(prefix + "/") for prefix in GUARDED_PREFIXES)
        if not self.state.api_keys or not guarded:
            return True
        header = self.headers.get("Authorization", "")
        if header.startswith("Bearer ") and header[len("Bearer "):] in self.state.api_keys:
            return True
        self._send(401, {"error": "Unauthorized"})
        return False

    def _error(self, status, kind, message, param=None):
        self._send(status, {"error": {"message": message, "type": kind, "param": param, "code": status}})

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path in ("/v1/chat/completions",):
            return self._send(405, {"detail": "Method Not Allowed"})
        if not self._authorized():
            return None
        if path in ("/health", "/ping"):  # /ping: SageMaker's health route, the same answer
            return self._send(200, b"")
        if path == "/version":
            return self._send(200, {"version": __version__})
        if path == "/v1/models":
            created = int(time.time())
            data = [dict(id=name, object="model", created=created, owned_by="vllm", root=self.state.model,
                         parent=None, max_model_len=self.state.max_model_len,
                         permission=[dict(id="modelperm-%s" % uuid.uuid4().hex, object="model_permission",
                                          created=created, allow_create_engine=False, allow_sampling=True,
                                          allow_logprobs=True, allow_search_indices=False, allow_view=True,
                                          allow_fine_tuning=False, organization="*", group=None,
                                          is_blocking=False)])
                    for name in self.state.served_names]
            return self._send(200, {"object": "list", "data": data})
        if path == "/metrics":
            return self._send(200, self._metrics().encode("utf-8"), "text/plain; version=0.0.4; charset=utf-8")
        return self._send(404, {"detail": "Not Found"})

    def _metrics(self):
        state = self.state
        labels = 'engine="0",model_name="%s"' % state.served_names[0]
        with state.lock:
            prompt, generation, finished = state.prompt_tokens, state.generation_tokens, dict(state.finished)
            running = state.running
            http_requests = sorted(state.http_requests.items())
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            "vllm:num_requests_running{%s} %.1f" % (labels, running),
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge",
            "vllm:num_requests_waiting{%s} 0.0" % labels,
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            "vllm:kv_cache_usage_perc{%s} 0.0" % labels,
            "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
            "# TYPE vllm:prompt_tokens_total counter",
            "vllm:prompt_tokens_total{%s} %.1f" % (labels, prompt),
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
            "# TYPE vllm:generation_tokens_total counter",
            "vllm:generation_tokens_total{%s} %.1f" % (labels, generation),
            "# HELP vllm:request_success_total Count of successfully processed requests.",
            "# TYPE vllm:request_success_total counter",
        ] + ['vllm:request_success_total{%s,finished_reason="%s"} %.1f' % (labels, reason, count)
             for reason, count in sorted(finished.items())] + [
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
            "# TYPE vllm:cache_config_info gauge",
            'vllm:cache_config_info{block_size="16",cache_dtype="%s",engine="0",gpu_memory_utilization="0.9",'
            'prefix_caching_hash_algo="sha256"} 1.0' % state.kv_cache_dtype,
            "# HELP http_requests_total Total number of requests by method, status and handler.",
            "# TYPE http_requests_total counter",
        ] + ['http_requests_total{handler="%s",method="%s",status="%s"} %.1f' % (handler, method, status, count)
             for (handler, method, status), count in http_requests]
        return "\n".join(lines) + "\n"

    def do_POST(self):
        path = self.path.split("?", 1)[0]
        if path == "/ping":
            return self._send(200, b"")
        if path in ("/health", "/version", "/metrics", "/v1/models"):
            return self._send(405, {"detail": "Method Not Allowed"})
        if path not in ("/v1/chat/completions", "/invocations"):
            return self._send(404, {"detail": "Not Found"})
        if not self._authorized():
            return None
        with self.state.lock:
            self.state.running += 1
        try:
            return self._complete(path)
        finally:
            with self.state.lock:
                self.state.running -= 1

    def _complete(self, path):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            request = json.loads(self.rfile.read(length).decode("utf-8") or "null")
        except ValueError as exc:
            return self._error(400, "BadRequestError", "JSON decode error: %s" % exc)
        if path == "/invocations" and not (isinstance(request, dict) and isinstance(request.get("messages"), list)):
            # vLLM 0.33.0 (entrypoints/serve/sagemaker/api_router.py) tries each request type in turn
            # and answers 400 when none validates; a text completion (prompt) would be served by
            # vLLM, which the simulator does not imitate (no /v1/completions).
            return self._error(400, "BadRequestError", "Cannot find suitable handler for request. Expected one of: "
                               "['ChatCompletionRequest', 'CompletionRequest']")
        if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
            return self._error(400, "BadRequestError", "messages: Field required", "messages")
        fault = self.state.current_fault()
        if fault == "dead":
            log("ERROR", "core.py:907", "EngineCore encountered a fatal error. (fault %s=dead of the test simulator)"
                % FAULT_ENV, proc="EngineCore_DP0", pid=PID + 1)
            return self._error(500, "InternalServerError",
                               "EngineCore encountered an issue. See stack trace (above) for the root cause.")
        if fault == "hung":
            log("WARNING", "core.py:213", "EngineCore is not answering (fault %s=hung of the test simulator)" % FAULT_ENV,
                proc="EngineCore_DP0", pid=PID + 1)
            time.sleep(3600)
            return None
        model = request.get("model") or self.state.served_names[0]
        if model not in self.state.served_names:
            return self._error(404, "NotFoundError", "The model `%s` does not exist." % model, "model")
        limit = request.get("max_completion_tokens") or request.get("max_tokens")
        if isinstance(limit, int) and limit < 1:
            return self._error(400, "BadRequestError", "max_tokens must be at least 1, got %d." % limit, "max_tokens")
        minimum = request.get("min_tokens", 0)
        # vLLM's SamplingParams._verify_args texts (vllm/sampling_params.py, 0.33.0).
        if not isinstance(minimum, int) or isinstance(minimum, bool) or minimum < 0:
            return self._error(400, "BadRequestError", "min_tokens must be greater than or equal to 0, got %s." % minimum,
                               "min_tokens")
        if isinstance(limit, int) and minimum > limit:
            return self._error(400, "BadRequestError", "min_tokens must be less than or equal to max_tokens=%d, got %d."
                               % (limit, minimum), "min_tokens")
        words, finish, eos = generate(limit, minimum, bool(request.get("ignore_eos")), self.state.eos_first)
        completion_tokens = len(words) + eos
        if fault == "decode-dead" and completion_tokens > 1:
            # The second token is the first decode step's: it kills the engine core.
            with self.state.lock:
                self.state.decode_died = True
            log("ERROR", "core.py:907", "EngineCore encountered a fatal error at the first decode step. (fault %s=decode-dead "
                "of the test simulator)" % FAULT_ENV, proc="EngineCore_DP0", pid=PID + 1)
            return self._error(500, "InternalServerError",
                               "EngineCore encountered an issue. See stack trace (above) for the root cause.")
        content = " ".join(words)
        prompt_tokens = sum(_words(m.get("content")) + 4 for m in request["messages"] if isinstance(m, dict)) + 2
        with self.state.lock:
            self.state.prompt_tokens += prompt_tokens
            self.state.generation_tokens += completion_tokens
            self.state.finished[finish] += 1
        ident, created = "chatcmpl-%s" % uuid.uuid4().hex, int(time.time())
        usage = dict(prompt_tokens=prompt_tokens, total_tokens=prompt_tokens + completion_tokens,
                     completion_tokens=completion_tokens, prompt_tokens_details=None)
        speed = self.state.speed()
        if request.get("stream"):
            chunks = [dict(index=0, delta=dict(role="assistant", content=""), logprobs=None, finish_reason=None)]
            chunks += [dict(index=0, delta=dict(content=(" " if i else "") + w), logprobs=None, finish_reason=None)
                       for i, w in enumerate(words)]
            chunks[-1]["finish_reason"] = finish
            events = ["data: %s\n\n" % json.dumps(dict(id=ident, object="chat.completion.chunk", created=created,
                                                       model=model, choices=[c])) for c in chunks]
            options = request.get("stream_options")
            if isinstance(options, dict) and options.get("include_usage"):
                last = dict(id=ident, object="chat.completion.chunk", created=created, model=model, choices=[], usage=usage)
                events.append("data: %s\n\n" % json.dumps(last))
            events.append("data: [DONE]\n\n")
            if speed:
                return self._send_paced(events, 1.0 / speed)
            return self._send(200, "".join(events).encode("utf-8"), "text/event-stream; charset=utf-8")
        if speed:
            time.sleep(completion_tokens / speed)
        return self._send(200, dict(
            id=ident, object="chat.completion", created=created, model=model,
            choices=[dict(index=0, message=dict(role="assistant", content=content, refusal=None, annotations=None,
                                                audio=None, function_call=None, tool_calls=[], reasoning_content=None),
                          logprobs=None, finish_reason=finish, stop_reason=None)],
            service_tier=None, system_fingerprint=None, usage=usage, prompt_logprobs=None, kv_transfer_params=None))


def _on_signal(signum, frame):
    raise Terminate()


SHM_DIR_ENV = "FLEET_VLLM_SIM_SHM_DIR"


def open_shm_segment():
    """The engine's shared-memory queue, as vLLM's (vllm/distributed/device_communicators/shm_broadcast.py,
    ShmRingBuffer: ``multiprocessing.shared_memory.SharedMemory(create=True, ...)``, which Python names
    /dev/shm/psm_<8 hex digits>): created 0600 and mapped while the engine runs, removed at a clean exit,
    left behind by a hard kill. 4 KiB here, not vLLM's megabytes. Returns (path, map), or None when the
    directory (FLEET_VLLM_SIM_SHM_DIR, default /dev/shm) cannot hold it - vLLM would stop there."""
    import mmap
    import secrets
    path = os.path.join(os.environ.get(SHM_DIR_ENV) or "/dev/shm", "psm_" + secrets.token_hex(4))
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    except OSError as exc:
        sys.stderr.write("(EngineCore_DP0 pid=%d) OSError: [Errno %s] %s: '%s'\n" % (PID + 1, exc.errno, exc.strerror, path))
        return None
    try:
        os.ftruncate(fd, 4096)
        segment = mmap.mmap(fd, 4096)
    finally:
        os.close(fd)
    return path, segment


def close_shm_segment(opened):
    path, segment = opened
    segment.close()
    try:
        os.unlink(path)
    except OSError:
        pass


def _bind_failed(function, call, exc):
    """vLLM's traceback of a socket that cannot be bound (the port or the path is taken)."""
    api = "(APIServer pid=%d) " % PID
    sys.stderr.write(api + "Traceback (most recent call last):\n")
    sys.stderr.write(api + '  File "%s", line 1, in %s\n' % (os.path.abspath(__file__), function))
    sys.stderr.write(api + "    %s\n" % call)
    sys.stderr.write(api + "OSError: [Errno %s] %s\n" % (exc.errno, exc.strerror))


class UnixServer(ThreadingHTTPServer):
    """HTTP on an AF_UNIX stream socket (vLLM's --uds)."""

    address_family = socket.AF_UNIX
    daemon_threads = True
    allow_reuse_address = False

    def server_bind(self):
        # The bind alone, as vLLM's create_server_unix_socket: no unlink, no chmod. (HTTPServer's
        # server_bind would also look up a host name in the first two characters of the path.)
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "localhost", 0


def bind_unix(path):
    """vLLM's ``create_server_unix_socket(args.uds)``: a socket bound at ``path`` (not listening
    yet: connections are refused until the server starts), or None after vLLM's error when the
    bind fails (EADDRINUSE when anything is at ``path``)."""
    httpd = UnixServer(path, Handler, bind_and_activate=False)
    try:
        httpd.server_bind()
    except OSError as exc:
        httpd.server_close()
        _bind_failed("create_server_unix_socket", "sock.bind(path)", exc)
        return None
    return httpd


def serve(args, state, unix=None, head=None):
    """Serve until SIGTERM: on ``unix`` (bind_unix's server, --uds) or on --host/--port. ``head``: the
    GroupHead of a serving group's rank 0, whose engine dies (exit 1) when a rank goes away."""
    Handler.state = state
    if unix is not None:
        httpd = unix
        httpd.server_activate()  # listen(): from here on connections are taken
        log("INFO", "api_server.py:1344", "Starting vLLM server on unix:%s" % args.uds)
    else:
        host = args.host if getattr(args, "host", None) else "0.0.0.0"
        port = int(args.port) if getattr(args, "port", None) is not None else 8000
        family = socket.AF_INET6 if ":" in host else socket.AF_INET

        class Server(ThreadingHTTPServer):
            address_family = family
            daemon_threads = True
            allow_reuse_address = True

        try:
            httpd = Server((host, port), Handler)
        except OSError as exc:
            _bind_failed("create_server_socket", "sock.bind(addr)", exc)
            return 1
        log("INFO", "api_server.py:1344", "Starting vLLM API server 0 on http://%s:%d" % (host, port))
    log("INFO", "launcher.py:38", "Available routes are:")
    for route, methods in ROUTES:
        log("INFO", "launcher.py:46", "Route: %s, Methods: %s" % (route, methods))
    access_log("Started server process [%d]" % PID)
    access_log("Waiting for application startup.")
    access_log("Application startup complete.")
    if head is not None:
        head.on_dead(httpd.shutdown)  # serve_forever returns; the engine is dead
    try:
        httpd.serve_forever(poll_interval=0.2)
    except Terminate:
        pass
    finally:
        # The listening socket closes first: new connections are refused from here on.
        httpd.server_close()
    if head is not None and head.dead.is_set():
        return head.died_while_serving()
    # --shutdown-timeout N (vLLM 0.33.0, entrypoints/launchers/launcher.py): "drain" lets the
    # requests in flight finish for up to N seconds; 0 ("abort", the default) drops them.
    timeout = _int_of(getattr(args, "shutdown_timeout", None), 0) or 0
    log("INFO", "launcher.py:271", "[shutdown] API server: stopping engine client mode=%s timeout=%ss"
        % ("abort" if timeout == 0 else "drain", timeout))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with state.lock:
            if state.active == 0:
                break
        time.sleep(0.05)
    access_log("Shutting down")
    access_log("Waiting for application shutdown.")
    access_log("Application shutdown complete.")
    access_log("Finished server process [%d]" % PID)
    return 0


# ---- a serving group: one model copy across hosts (--nnodes N > 1, multiprocessing, no Ray) --------------
#
# vLLM (v1, distributed_executor_backend "mp"): every host runs a MultiprocExecutor with TP x PP / N workers;
# the workers of all hosts form one torch.distributed process group whose rendezvous is a TCPStore served by
# the head's (rank 0's) first worker on --master-addr:--master-port (vllm/distributed/parallel_state.py,
# init_distributed_environment: "if parallel_config.nnodes > 1: ip = parallel_config.master_addr, port =
# parallel_config.master_port"). Only rank 0 runs an engine core and an API server; ranks 1..N-1 run
# ``vllm serve --headless`` (vllm/entrypoints/cli/serve.py, run_headless: MultiprocExecutor(vllm_config,
# monitor_workers=False) and its worker monitor inline). The simulator stands the TCPStore and the workers'
# sockets in for all of that with one line protocol of its own (a test control, not vLLM's wire format):
#
#   rank -> head:  "fleet-vllm-sim-join node_rank=R nnodes=N mq=tcp://VLLM_HOST_IP:PORT\n"
#   head -> rank:  "ok\n" (it joined; the connection stays open, silent, for the group's life)
#                  "refused REASON\n" (and the head closes it): a rank out of 1..N-1, one that already
#                  joined, an N that is not the head's
#
# An end of that connection is a member gone: the head's engine dies (exit 1), the rank's workers die (exit 1).

JOIN_TIMEOUT_ENV = "FLEET_VLLM_SIM_JOIN_TIMEOUT"
# How long the head waits for the ranks and a rank tries to reach the head: torch.distributed's default
# process-group timeout, which vLLM keeps unless --distributed-timeout-seconds (0.33.0) says otherwise
# (vllm/config/parallel.py, ParallelConfig.distributed_timeout_seconds: "If None, PyTorch's default timeout is
# used (600s for NCCL)").
JOIN_TIMEOUT_DEFAULT = 600.0
# ``vllm serve --headless --node-rank 0`` waits this long for a front end (vllm/v1/engine/core.py,
# HANDSHAKE_TIMEOUT_MINS = 5), or FLEET_VLLM_SIM_JOIN_TIMEOUT's seconds where that is set.
HANDSHAKE_SECONDS = 300.0
GROUP_HELLO = "fleet-vllm-sim-join"
HELLO_SECONDS = 10.0  # what the head gives a connection to say its hello line (a probe that says nothing is dropped)
# ParallelConfig's defaults (vllm/config/parallel.py): master_addr, master_port, data_parallel_rpc_port.
MASTER_ADDR_DEFAULT = "127.0.0.1"
MASTER_PORT_DEFAULT = 29501
DP_RPC_PORT_DEFAULT = 29550


def _seconds(text, default):
    try:
        value = float(text)
    except (TypeError, ValueError):
        return default
    return value if value >= 0 else default


class Group(object):
    """This host's place in a serving group (--nnodes N > 1) and the group's shape."""

    def __init__(self, args):
        self.nnodes = int(args.nnodes)
        self.node_rank = int(getattr(args, "node_rank", None) or 0)
        self.master_addr = getattr(args, "master_addr", None) or MASTER_ADDR_DEFAULT
        port = getattr(args, "master_port", None)
        self.master_port = MASTER_PORT_DEFAULT if port is None else int(port)
        self.headless = bool(getattr(args, "headless", False))
        self.tp = _int_of(getattr(args, "tensor_parallel_size", None), 1) or 1
        self.pp = _int_of(getattr(args, "pipeline_parallel_size", None), 1) or 1
        # One model copy's workers (ParallelConfig.world_size: TP x PP) and a host's share of them
        # (ParallelConfig.local_world_size: world_size // nnodes).
        self.world_size = self.tp * self.pp
        self.local_world_size = max(self.world_size // self.nnodes, 1)
        bound = os.environ.get(JOIN_TIMEOUT_ENV)
        if bound is None:
            bound = _int_of(getattr(args, "distributed_timeout_seconds", None))
        self.join_timeout = _seconds(bound, JOIN_TIMEOUT_DEFAULT)
        self.dp_address = getattr(args, "data_parallel_address", None)
        self.dp_rpc_port = getattr(args, "data_parallel_rpc_port", None)

    def first_rank(self, node_rank=None):
        """The global rank of a host's first worker (MultiprocExecutor: local_world_size x node_rank_within_dp)."""
        return (self.node_rank if node_rank is None else node_rank) * self.local_world_size

    def worker(self, rank):
        """A worker's log name as vLLM decorates it: Worker_TP1, Worker_PP1, Worker_PP1_TP0."""
        parts = (["PP%d" % (rank // self.tp)] if self.pp > 1 else []) + (["TP%d" % (rank % self.tp)] if self.tp > 1 else [])
        return "_".join(["Worker"] + parts)

    def assigned(self, rank):
        """vLLM's parallel_state.py line for a worker's place in the group."""
        return ("rank %d in world size %d is assigned as DP rank 0, PP rank %d, TP rank %d, EP rank %d"
                % (rank, self.world_size, rank // self.tp, rank % self.tp, rank % self.tp))


def serving_group(args):
    """The Group of --nnodes N > 1, else None (a single host: everything as it always was)."""
    nnodes = getattr(args, "nnodes", None)
    if nnodes is None or nnodes <= 1:
        return None
    return Group(args)


def parallel_config_error(args):
    """vLLM's refusal of the multi-node settings, as the lines it ends with, or None. In vLLM's order:

    1. vllm/engine/arg_utils.py, EngineArgs.create_engine_config (asserts, before ParallelConfig is built):
       ``assert self.data_parallel_backend == "mp" or self.nnodes == 1``; with nnodes > 1, world_size =
       data_parallel_size x pipeline_parallel_size x tensor_parallel_size and ``assert world_size % nnodes == 0``,
       then ``assert self.node_rank < self.nnodes``;
    2. vllm/config/parallel.py, ParallelConfig's fields: ``node_rank: int = Field(default=0, ge=0)``,
       ``nnodes: int = Field(default=1, ge=1)`` (pydantic's ValidationError, every failing field);
    3. vllm/config/parallel.py, ParallelConfig.__post_init__: "nnodes > 1 can only be set when distributed
       executor backend is mp, uni or external_launcher." (--distributed-executor-backend ray).

    vLLM does not refuse --headless on rank 0 (run_headless starts a data-parallel engine that waits for a front
    end: see headless_engine) nor an API server on a rank above 0 (see follow)."""
    nnodes = getattr(args, "nnodes", None)
    nnodes = 1 if nnodes is None else nnodes
    node_rank = getattr(args, "node_rank", None)
    node_rank = 0 if node_rank is None else node_rank
    if (getattr(args, "data_parallel_backend", None) or "mp") != "mp" and nnodes != 1:
        return "AssertionError: nnodes > 1 is only supported with data_parallel_backend=mp"
    if nnodes > 1:
        world_size = ((_int_of(getattr(args, "data_parallel_size", None), 1) or 1)
                      * (_int_of(getattr(args, "pipeline_parallel_size", None), 1) or 1)
                      * (_int_of(getattr(args, "tensor_parallel_size", None), 1) or 1))
        if world_size % nnodes:
            return "AssertionError: world_size=%d must be divisible by nnodes=%d." % (world_size, nnodes)
        if node_rank >= nnodes:
            return "AssertionError: node_rank=%d must be less than nnodes=%d." % (node_rank, nnodes)
    fields = [(name, value, bound) for name, value, bound in (("node_rank", node_rank, 0), ("nnodes", nnodes, 1))
              if value < bound]
    if fields:
        lines = ["pydantic_core._pydantic_core.ValidationError: %d validation error%s for ParallelConfig"
                 % (len(fields), "s" if len(fields) > 1 else "")]
        for name, value, bound in fields:
            lines += [name, "  Input should be greater than or equal to %d [type=greater_than_equal, input_value=%d, "
                            "input_type=int]" % (bound, value)]
        return "\n".join(lines)
    backend = getattr(args, "distributed_executor_backend", None)
    if nnodes > 1 and backend not in (None, "mp", "uni", "external_launcher"):
        return ("pydantic_core._pydantic_core.ValidationError: 1 validation error for ParallelConfig\n"
                "  Value error, nnodes > 1 can only be set when distributed executor backend is mp, uni or "
                "external_launcher.")
    return None


def host_ip():
    """vLLM's get_ip() (vllm/utils/network_utils.py): VLLM_HOST_IP, else the address of the interface a UDP
    socket towards 8.8.8.8 would leave by (connect() on UDP sends nothing), else 0.0.0.0."""
    address = os.environ.get("VLLM_HOST_IP")
    if address:
        return address
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("8.8.8.8", 80))
            return probe.getsockname()[0]
    except OSError:
        sys.stderr.write("UserWarning: Failed to get the IP address, using 0.0.0.0 by default. The value can be set "
                         "by the environment variable VLLM_HOST_IP or HOST_IP.\n")
        return "0.0.0.0"


def tcpstore_listen(port):
    """A torch.distributed TCPStore server's listening socket on ``port``: on every address, whatever host the
    rendezvous URI names (torch/csrc/distributed/c10d/TCPStoreLibUvBackend.cpp, UvTcpServer::makeWithPort binds "::",
    dual stack, and "0.0.0.0" when IPv6 fails; SO_REUSEADDR as libuv's uv_tcp_bind sets it). The serving group's head
    (--master-port) and a single host's engine on a build with a tcp:// rendezvous (rendezvous()) hold one. Returns
    (socket, None), or (None, (whether IPv6 was tried last, the OSError))."""
    failure = None
    for family, host in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError as exc:
            failure = (family == socket.AF_INET6, exc)
            continue
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # dual stack: IPv4 clients too
            sock.bind((host, port))
            sock.listen(128)
        except OSError as exc:
            sock.close()
            failure = (family == socket.AF_INET6, exc)
            continue
        return sock, None
    return None, failure


# ---- a single host's rendezvous and VLLM_PORT (one instance's internal ports) ----------------------------------------
#
# vLLM's executor on one host (vllm/v1/executor/uniproc_executor.py, multiproc_executor.py) gives its workers a
# torch.distributed rendezvous URI:
#   * before vLLM PR #50999 ("Use file:// rendezvous for single-node executors", merged 2026-08; vLLM 0.16.0 read):
#     tcp://IP:PORT with PORT = get_open_port() (vllm/utils/network_utils.py: _get_open_port: from VLLM_PORT upward,
#     the first port that ``bind(("", port))`` takes on IPv4, logging "Port %d is already in use, trying port %d" for
#     each one taken; without VLLM_PORT a port of the kernel's choice, bind(("", 0))), IP get_ip() (VLLM_HOST_IP) with
#     one worker (UniProcExecutor) or get_loopback_ip() (VLLM_LOOPBACK_IP, else 127.0.0.1) with several. The port is
#     probed, released, then bound by the first worker's TCPStore server for the engine's life, on every address;
#   * since (vLLM 0.33.0 read; vLLM issue #52638 names v0.27.1 as a release still before it, so the simulator takes it
#     from 0.28 on): file://$TMPDIR/vllm_dist_<hex>, a FileStore: no port, no listener. VLLM_PORT is then read only by
#     envs.enable_envs_cache() at the end of a worker's start (vllm/v1/executor/multiproc_executor.py WorkerProc, and
#     vllm/v1/engine/core.py EngineCore with one worker), where a VLLM_PORT that is not an integer fails it.
# The worker logs the URI (vllm/distributed/parallel_state.py, init_distributed_environment: "world_size=%d rank=%d
# local_rank=%d distributed_init_method=%s backend=%s"). Data parallelism's ports (get_open_ports_list) are not
# imitated, nor a serving group's (--nnodes > 1: vLLM replaces the URI by --master-addr:--master-port, GroupHead).

VLLM_PORT_ENV = "VLLM_PORT"
FILE_STORE_SINCE = (0, 28)


def _release(version):
    """(major, minor, patch) of a version string: 0.16.0rc2.dev313+g6f5e2a9c1 -> (0, 16, 0)."""
    return tuple(int(part) for part in re.findall(r"\d+", re.match(r"^[0-9.]*", version).group(0))[:3])


def file_store_rendezvous(version=None):
    """Whether this build's single-host rendezvous is a FileStore (no port), not a TCPStore."""
    return _release(version or __version__) >= FILE_STORE_SINCE


def vllm_port():
    """vllm/envs.py get_vllm_port: None when VLLM_PORT is not in the environment (set and empty is set), its integer,
    or its ValueError (a value with a URI scheme, as urllib3's parse_url finds one, gets the Kubernetes hint)."""
    if VLLM_PORT_ENV not in os.environ:
        return None
    port = os.environ[VLLM_PORT_ENV]
    try:
        return int(port)
    except ValueError:
        pass
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+-]*:", port):
        docs = ("https://docs.vllm.ai/en/latest/configuration/env_vars.html" if _release(__version__) >= (0, 33)
                else "https://docs.vllm.ai/en/stable/serving/env_vars.html")
        raise ValueError("VLLM_PORT '%s' appears to be a URI. This may be caused by a Kubernetes service discovery "
                         "issue,check the warning in: %s" % (port, docs))
    raise ValueError("VLLM_PORT '%s' must be a valid integer" % port)


def open_port(start):
    """vllm/utils/network_utils.py _get_open_port: from ``start`` (VLLM_PORT) upward, the first port an IPv4 socket
    binds on every address (each probe socket closed again), logging each port taken; ``start`` None: one the kernel
    picks (IPv4, else IPv6). A port past 65535 raises OverflowError, as in vLLM."""
    port = start
    if port is not None:
        while True:
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                    probe.bind(("", port))
                    return port
            except OSError:
                port += 1
                log("INFO", "network_utils.py:187", "Port %d is already in use, trying port %d" % (port - 1, port),
                    proc="EngineCore_DP0", pid=PID + 1)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("", 0))
            return probe.getsockname()[1]
    except OSError:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("", 0))
            return probe.getsockname()[1]


def loopback_ip():
    """vllm/utils/network_utils.py get_loopback_ip: VLLM_LOOPBACK_IP, else 127.0.0.1 where it can be bound, else ::1."""
    address = os.environ.get("VLLM_LOOPBACK_IP")
    if address:
        return address
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.bind(("127.0.0.1", 0))
        return "127.0.0.1"
    except OSError:
        return "::1"


def _tcp_uri(host, port):
    return ("tcp://[%s]:%d" if ":" in host else "tcp://%s:%d") % (host, port)


def executor_world(args):
    """(the executor vLLM picks, this host's workers): --distributed-executor-backend, else ``uni`` for one worker and
    ``mp`` for more (ParallelConfig.__post_init__); workers = pipeline x tensor parallel size."""
    world = ((_int_of(getattr(args, "pipeline_parallel_size", None), 1) or 1)
             * (_int_of(getattr(args, "tensor_parallel_size", None), 1) or 1))
    backend = getattr(args, "distributed_executor_backend", None) or ("mp" if world > 1 else "uni")
    return backend, world


def worker_failed(cause, backend):
    """A worker's failed start: in the engine core's own process with UniProcExecutor, else a worker process's
    ``WorkerProc failed to start.`` and the engine core's failure after it."""
    if backend == "uni":
        engine_start_failed(cause)
        return
    prefix = "(Worker_TP0 pid=%d) " % (PID + 2)
    sys.stderr.write("%sERROR %s [multiproc_executor.py:772] WorkerProc failed to start.\n" % (prefix, _stamp()))
    sys.stderr.write(prefix + cause + "\n")
    engine_start_failed(WORKER_START_FAILED)


def vllm_port_error():
    """"ValueError: ..." of a VLLM_PORT get_vllm_port refuses, else None."""
    try:
        vllm_port()
    except ValueError as exc:
        return "ValueError: %s" % exc
    return None


def rendezvous(args, group=None):
    """The executor's rendezvous at the engine's start, before the workers load the model: (True, the TCPStore's
    listening socket or None), or (False, None) after vLLM's failed start (stderr). A serving group (``group``) keeps
    its --master-port rendezvous (GroupHead); VLLM_PORT is still read where the build reads it."""
    backend, world = executor_world(args)
    if file_store_rendezvous():
        if group is None:
            method = "file://%s/vllm_dist_%s" % (tempfile.gettempdir(), uuid.uuid4().hex)
            log("INFO", "parallel_state.py:1930", "world_size=%d rank=0 local_rank=0 distributed_init_method=%s "
                "backend=nccl" % (world, method), proc="Worker_TP0", pid=PID + 2)
        return True, None  # VLLM_PORT is read at the end of the worker's start: late_vllm_port_check
    try:
        start = vllm_port()
        port = open_port(start)
    except (ValueError, OverflowError, OSError) as exc:  # raised in the executor, in the engine core's process
        engine_start_failed("%s: %s" % (type(exc).__name__, exc))
        return False, None
    if group is not None:
        return True, None  # probed, released; the group's URI is --master-addr:--master-port
    listener, failure = tcpstore_listen(port)
    if listener is None:
        use_ipv6, exc = failure
        worker_failed("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
                      "address. port: %d, useIpv6: %s, code: %d, name: %s, message: %s"
                      % (port, "true" if use_ipv6 else "false", -exc.errno, _uv_name(exc), (exc.strerror or "").lower()),
                      backend)
        return False, None
    host = host_ip() if backend == "uni" else loopback_ip()
    log("INFO", "parallel_state.py:1235", "world_size=%d rank=0 local_rank=0 distributed_init_method=%s backend=nccl"
        % (world, _tcp_uri(host, port)), proc="Worker_TP0", pid=PID + 2)
    return True, listener


def late_vllm_port_check(args):
    """A build with a file:// rendezvous reads VLLM_PORT at the end of a worker's start, after the load
    (envs.enable_envs_cache): False after vLLM's failed start, else True."""
    if not file_store_rendezvous():
        return True
    error = vllm_port_error()
    if error is None:
        return True
    worker_failed(error, executor_world(args)[0])
    return False


def _keepalive(sock):
    """TCP keepalive, so that a member whose host vanished (no FIN) is noticed within about 11 s."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", 5), ("TCP_KEEPINTVL", 2), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, name):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
            except OSError:
                pass


def _read_line(sock, limit=1024):
    """One line from ``sock`` (without its newline), or None at its end or past ``limit`` bytes."""
    data = b""
    while b"\n" not in data:
        chunk = sock.recv(256)
        if not chunk or len(data) > limit:
            return None
        data += chunk
    return data.split(b"\n", 1)[0].decode("utf-8", "replace").strip()


def _peer(address):
    host, port = address[0], address[1]
    if host.startswith("::ffff:") and "." in host:
        host = host[len("::ffff:"):]  # an IPv4 client of the dual-stack listener
    return ("[%s]:%d" if ":" in host else "%s:%d") % (host, port)


def _close(sock):
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv() on it, sends the FIN
    except OSError:
        pass
    sock.close()


def _uv_name(exc):
    import errno
    return errno.errorcode.get(exc.errno, "UNKNOWN")


def engine_start_failed(cause):
    """The engine core's failed start and the API server's error after it (stderr, as vLLM ends one)."""
    engine = "(EngineCore_DP0 pid=%d) " % (PID + 1)
    sys.stderr.write("%sERROR %s [core.py:946] EngineCore failed to start.\n" % (engine, _stamp()))
    sys.stderr.write(engine + cause + "\n")
    sys.stderr.write("(APIServer pid=%d) RuntimeError: Engine core initialization failed. See root cause above. "
                     "Failed core proc(s): {}\n" % PID)
    sys.stderr.flush()


WORKER_START_FAILED = ("Exception: WorkerProc initialization failed due to an exception in a background process. "
                       "See stack trace for root cause.")


class GroupHead(object):
    """Rank 0 of a serving group: the TCPStore of --master-port (listening on every address, as torch's does:
    torch/csrc/distributed/c10d/TCPStoreLibUvBackend.cpp, UvTcpServer::makeWithPort binds "::" and, when IPv6
    fails, "0.0.0.0"), the ranks that joined, and the engine's death when one goes away."""

    def __init__(self, group):
        self.group = group
        self.cond = threading.Condition()
        self.members = {}  # node_rank: (socket, "host:port", its message queue's address)
        self.listener = None
        self.closing = False
        self.dropped = None
        self.dead = threading.Event()
        self.callbacks = []

    def form(self):
        """Listen, then wait until N-1 ranks joined: True, or False after vLLM's failed start."""
        group = self.group
        worker = group.worker(0)
        log("INFO", "multiproc_executor.py:135", "DP group leader: node_rank=0, node_rank_within_dp=0, master_addr=%s, "
            "mq_connect_ip=%s (local), world_size=%d, local_world_size=%d"
            % (group.master_addr, host_ip(), group.world_size, group.local_world_size), proc="EngineCore_DP0", pid=PID + 1)
        failure = self.listen()
        if failure is not None:
            use_ipv6, exc = failure
            prefix = "(%s pid=%d) " % (worker, PID + 2)
            sys.stderr.write("%sERROR %s [multiproc_executor.py:772] WorkerProc failed to start.\n" % (prefix, _stamp()))
            sys.stderr.write("%storch.distributed.DistNetworkError: The server socket has failed to bind. useIpv6: %s, "
                             "code: %d, name: %s, message: %s\n"
                             % (prefix, "true" if use_ipv6 else "false", -exc.errno, _uv_name(exc),
                                (exc.strerror or "").lower()))
            engine_start_failed(WORKER_START_FAILED)
            return False
        deadline = time.monotonic() + group.join_timeout
        with self.cond:
            while len(self.members) < group.nnodes - 1 and not self.dead.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(min(left, 0.5))
            joined = len(self.members)
        if self.dead.is_set():
            self.failed_to_start()
            return False
        if joined < group.nnodes - 1:
            # The TCPStore server's wait for its clients (torch/csrc/distributed/c10d/TCPStore.cpp): every worker
            # of the group is a client, the head's own among them.
            prefix = "(%s pid=%d) " % (worker, PID + 2)
            sys.stderr.write("%sERROR %s [multiproc_executor.py:772] WorkerProc failed to start.\n" % (prefix, _stamp()))
            sys.stderr.write("%storch.distributed.DistStoreError: Timed out after %d seconds waiting for clients. "
                             "%d/%d clients joined.\n" % (prefix, int(group.join_timeout) + 1,
                                                          group.local_world_size * (joined + 1), group.world_size))
            engine_start_failed(WORKER_START_FAILED)
            return False
        log("INFO", "parallel_state.py:1165", group.assigned(0), proc=worker, pid=PID + 2)
        return True

    def listen(self):
        """None, or (whether IPv6 was tried, the OSError) when neither bind works."""
        sock, failure = tcpstore_listen(self.group.master_port)
        if sock is None:
            return failure
        sock.settimeout(0.2)
        self.listener = sock
        threading.Thread(target=self._accept, name="TCPStore", daemon=True).start()
        return None

    def _accept(self):
        while not self.closing:
            try:
                conn, address = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._greet, args=(conn, address), daemon=True).start()

    def _greet(self, conn, address):
        peer = _peer(address)
        try:
            conn.settimeout(HELLO_SECONDS)
            line = _read_line(conn)
        except OSError:
            line = None
        if not line:
            conn.close()  # a probe of the port, not a rank: nothing said, nothing logged
            return
        fields = dict(part.split("=", 1) for part in line.split()[1:] if "=" in part)
        nnodes = self.group.nnodes
        rank = None
        if line.split()[0] != GROUP_HELLO:
            reason = "not a rank of a serving group (it said %r)" % line[:60]
        elif fields.get("nnodes") != str(nnodes):
            reason = "nnodes=%s, the head's is %d" % (fields.get("nnodes"), nnodes)
        elif not re.match(r"^[0-9]+$", fields.get("node_rank", "")) or not 1 <= int(fields["node_rank"]) < nnodes:
            reason = "node_rank=%s is not a rank the head waits for (1..%d)" % (fields.get("node_rank"), nnodes - 1)
        else:
            reason, rank = None, int(fields["node_rank"])
        with self.cond:
            if reason is None and self.closing:
                reason = "the head is stopping"
            if reason is None and rank in self.members:
                reason = "node_rank=%d has already joined (from %s)" % (rank, self.members[rank][1])
            if reason is None:
                try:
                    conn.sendall(b"ok\n")
                except OSError:
                    conn.close()
                    return
                self.members[rank] = (conn, peer, fields.get("mq", "-"))
                joined = len(self.members)
                self.cond.notify_all()
        if reason is not None:
            log("WARNING", "multiproc_executor.py:402", "Refused a rank of the serving group from %s: %s"
                % (peer, reason), proc="EngineCore_DP0", pid=PID + 1)
            try:
                conn.sendall(("refused %s\n" % reason).encode("utf-8"))
            except OSError:
                pass
            conn.close()
            return
        log("INFO", "multiproc_executor.py:398", "node_rank=%d joined the serving group from %s (workers %d-%d, message "
            "queue %s); %d of %d remote nodes joined" % (rank, peer, self.group.first_rank(rank),
                                                         self.group.first_rank(rank + 1) - 1, fields.get("mq", "-"),
                                                         joined, nnodes - 1),
            proc="EngineCore_DP0", pid=PID + 1)
        _keepalive(conn)
        conn.settimeout(None)
        try:
            while conn.recv(4096):
                pass
        except OSError:
            pass
        self._dropped(rank, peer)

    def _dropped(self, rank, peer):
        """A rank's connection ended: its workers are gone, and so is this engine (vLLM's worker monitor,
        vllm/v1/executor/multiproc_executor.py MultiprocExecutor.start_worker_monitor: "Worker proc %s died
        unexpectedly, shutting down executor."; here the head's first worker, whose collectives with the lost
        rank fail, as gloo words it)."""
        with self.cond:
            if self.closing or self.dropped is not None:
                return
            self.dropped = (rank, peer)
        worker = self.group.worker(0)
        host, port = peer.rsplit(":", 1)
        log("ERROR", "multiproc_executor.py:757", "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] "
            "Connection closed by peer [%s]:%s (node_rank=%d of the serving group went away: test simulator)"
            % (host.strip("[]"), port, rank), proc=worker, pid=PID + 2)
        log("ERROR", "multiproc_executor.py:231", "Worker proc VllmWorker-0 died unexpectedly, shutting down executor.",
            proc="EngineCore_DP0", pid=PID + 1)
        with self.cond:
            self.dead.set()
            self.cond.notify_all()
            callbacks, self.callbacks = self.callbacks, []
        for callback in callbacks:
            threading.Thread(target=callback, daemon=True).start()

    def on_dead(self, callback):
        """Call ``callback`` (in a thread of its own) once a rank went away."""
        with self.cond:
            if not self.dead.is_set():
                self.callbacks.append(callback)
                return
        threading.Thread(target=callback, daemon=True).start()

    def failed_to_start(self):
        """A rank went away before the API server started: vLLM's failed engine start. Returns 1."""
        engine_start_failed(WORKER_START_FAILED)
        return 1

    def died_while_serving(self):
        """A rank went away while the API server served: the engine is dead, and vLLM's watchdog
        (vllm/entrypoints/launcher.py, terminate_if_errored) stops the server. Returns 1, so that systemd's
        Restart=on-failure restarts the unit."""
        log("ERROR", "async_llm.py:546", "AsyncLLM output_handler failed.")
        log("ERROR", "async_llm.py:546", "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
            "See stack trace (above) for the root cause.")
        access_log("Shutting down")
        access_log("Waiting for application shutdown.")
        access_log("Application shutdown complete.")
        access_log("Finished server process [%d]" % PID)
        return 1

    def close(self):
        with self.cond:
            self.closing = True
            members = [entry[0] for entry in self.members.values()]
        if self.listener is not None:
            self.listener.close()
        for conn in members:
            _close(conn)


class GroupMember(object):
    """A rank 1..N-1 of a serving group: its first worker's message-queue socket, bound on VLLM_HOST_IP at a port of
    the system's choice (vllm/distributed/device_communicators/shm_broadcast.py, MessageQueue: remote readers are
    served on ``tcp://{get_ip()}:{port}``), and its connection to the head. ``monitor``: the log name of the process
    whose worker monitor reports a dead worker (None: the main process of ``vllm serve --headless``)."""

    def __init__(self, group, monitor=None):
        self.group = group
        self.rank = group.first_rank()
        self.proc = group.worker(self.rank)
        self.prefix = "(%s pid=%d) " % (self.proc, PID + 2)
        self.monitor = monitor
        self.queue = None
        self.address = None
        self.conn = None
        self.closing = False
        self.dead = threading.Event()

    def bind_queue(self):
        host = host_ip()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.bind((host, 0))
            sock.listen(16)
        except OSError as exc:
            sock.close()
            sys.stderr.write("%sERROR %s [multiproc_executor.py:772] WorkerProc failed to start.\n" % (self.prefix, _stamp()))
            sys.stderr.write("%szmq.error.ZMQError: %s (addr='tcp://%s')\n"
                             % (self.prefix, exc.strerror, ("[%s]" if family == socket.AF_INET6 else "%s") % host))
            return False
        self.queue = sock
        port = sock.getsockname()[1]
        self.address = ("tcp://[%s]:%d" if family == socket.AF_INET6 else "tcp://%s:%d") % (host, port)
        log("INFO", "shm_broadcast.py:313", "vLLM message queue communication handle: Handle(local_reader_ranks=[], "
            "buffer_handle=None, local_subscribe_addr=None, remote_subscribe_addr='%s', remote_addr_ipv6=%s)"
            % (self.address, family == socket.AF_INET6), proc=self.proc, pid=PID + 2)
        return True

    def join(self):
        """Connect to the head (again every second, up to the join bound), say hello: True once it answered ok."""
        group = self.group
        deadline = time.monotonic() + group.join_timeout
        warned = False
        while True:
            left = deadline - time.monotonic()
            try:
                conn = socket.create_connection((group.master_addr, group.master_port), timeout=max(min(left, 5.0), 0.1))
                break
            except OSError as exc:
                if not warned:
                    # torch's c10d client, which retries until its timeout (torch/csrc/distributed/c10d/socket.cpp)
                    sys.stderr.write("%s[W%s socket.cpp:755] [c10d] The client socket has failed to connect to [%s]:%d "
                                     "(errno: %s - %s).\n" % (self.prefix, time.strftime("%m%d %H:%M:%S"),
                                                              group.master_addr, group.master_port, exc.errno or 0,
                                                              exc.strerror or exc))
                    sys.stderr.flush()
                    warned = True
                left = deadline - time.monotonic()
                if left <= 0:
                    sys.stderr.write("%sERROR %s [multiproc_executor.py:772] WorkerProc failed to start.\n"
                                     % (self.prefix, _stamp()))
                    sys.stderr.write("%storch.distributed.DistNetworkError: The client socket has timed out after %dms "
                                     "while trying to connect to (%s, %d).\n"
                                     % (self.prefix, int(group.join_timeout * 1000), group.master_addr, group.master_port))
                    return False
                time.sleep(min(1.0, left))
        hello = "%s node_rank=%d nnodes=%d mq=%s\n" % (GROUP_HELLO, group.node_rank, group.nnodes, self.address)
        try:
            conn.settimeout(HELLO_SECONDS)
            conn.sendall(hello.encode("utf-8"))
            reply = _read_line(conn)
        except OSError:
            reply = None
        if reply != "ok":
            conn.close()
            reason = reply[len("refused "):] if reply and reply.startswith("refused ") else "no answer to its hello"
            sys.stderr.write("%sERROR %s [multiproc_executor.py:772] WorkerProc failed to start.\n" % (self.prefix, _stamp()))
            sys.stderr.write("%sRuntimeError: the head of the serving group at %s:%d refused node_rank=%d: %s "
                             "(test simulator)\n" % (self.prefix, group.master_addr, group.master_port, group.node_rank,
                                                     reason))
            return False
        _keepalive(conn)
        conn.settimeout(None)
        self.conn = conn
        log("INFO", "parallel_state.py:1165", group.assigned(self.rank), proc=self.proc, pid=PID + 2)
        threading.Thread(target=self._watch, name="MultiprocWorkerMonitor", daemon=True).start()
        return True

    def _watch(self):
        try:
            while self.conn.recv(4096):
                pass
        except OSError:
            pass
        if self.closing:
            return
        group = self.group
        # The worker's next exchange with the head fails (torch's TCPStore client, torch/csrc/distributed/c10d/
        # Utils.hpp recvBytes), the worker dies, the executor's monitor says so.
        log("ERROR", "multiproc_executor.py:757", "torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. "
            "Connection was likely closed. Did the remote server shutdown or crash? (the head of the serving group, "
            "%s:%d, went away: test simulator)" % (group.master_addr, group.master_port), proc=self.proc, pid=PID + 2)
        log("ERROR", "multiproc_executor.py:231", "Worker proc VllmWorker-%d died unexpectedly, shutting down executor."
            % self.rank, proc=self.monitor, pid=PID + 1)
        self.dead.set()

    def close(self):
        self.closing = True
        _close(self.conn)
        if self.queue is not None:
            self.queue.close()


def run_headless(args, model, group):
    """``vllm serve --headless`` with --nnodes N > 1 (vllm/entrypoints/cli/serve.py, run_headless): the engine's
    config and its checks (create_engine_config(headless=True)), then, on a rank above 0, the workers of a
    MultiprocExecutor that join the head: no API server, no --uds socket. SIGTERM: exit 0; the head gone: exit 1."""
    try:
        engine = engine_config(args, model, "")
        if engine is None:
            return 1
        if group.node_rank == 0:
            return headless_engine(group)
        log("INFO", "serve.py:253", "Launching vLLM (v%s) headless multiproc executor, with head node address %s:%d for "
            "torch.distributed process group." % (__version__, group.master_addr, group.master_port), proc=None)
        if not engine["visible"]:  # the first worker cannot take its GPU (gpu_worker.py, init_device)
            prefix = "(%s pid=%d) " % (group.worker(group.first_rank()), PID + 2)
            sys.stderr.write("%sERROR %s [multiproc_executor.py:772] WorkerProc failed to start.\n" % (prefix, _stamp()))
            sys.stderr.write("%s%s\n" % (prefix, NO_CUDA_GPUS))
            return 1
        member = GroupMember(group, monitor=None)
        try:
            if not member.bind_queue() or not member.join():
                return 1
            delay = float(os.environ.get(LOAD_SECONDS_ENV) or 2)
            log("INFO", "gpu_model_runner.py:3561", "Starting to load model %s..." % model, proc=member.proc, pid=PID + 2)
            if member.dead.wait(max(delay, 0)):
                return 1
            if os.environ.get(FAULT_ENV) == "exit":
                log("ERROR", "multiproc_executor.py:772", "WorkerProc failed to start: CUDA out of memory while loading "
                    "the weights (fault %s=exit of the test simulator)" % FAULT_ENV, proc=member.proc, pid=PID + 2)
                return 1
            log("INFO", "default_loader.py:291", "Loading weights took %.2f seconds" % delay, proc=member.proc, pid=PID + 2)
            segment = open_shm_segment()
            if segment is None:
                return 1
            try:
                while not member.dead.wait(0.5):
                    pass
                return 1
            finally:
                close_shm_segment(segment)
        finally:
            member.close()
    except Terminate:
        return 0


def headless_engine(group):
    """``vllm serve --headless --node-rank 0``: vLLM takes it for a headless data-parallel engine (run_headless,
    node_rank_within_dp 0), which waits for a front end that a serving group never starts, then fails
    (vllm/v1/engine/core.py: HANDSHAKE_TIMEOUT_MINS = 5)."""
    address = "tcp://%s:%d" % (group.dp_address or group.master_addr,
                               DP_RPC_PORT_DEFAULT if group.dp_rpc_port is None else group.dp_rpc_port)
    log("INFO", "serve.py:277", "Launching 1 data parallel engine(s) in headless mode, with head node address %s."
        % address, proc=None)
    bound = os.environ.get(JOIN_TIMEOUT_ENV)
    time.sleep(_seconds(bound, HANDSHAKE_SECONDS) if bound is not None else HANDSHAKE_SECONDS)
    engine = "(EngineCore_DP0 pid=%d) " % (PID + 1)
    sys.stderr.write("%sERROR %s [core.py:946] EngineCore failed to start.\n" % (engine, _stamp()))
    sys.stderr.write("%sRuntimeError: Did not receive response from front-end process within 5 minutes\n" % engine)
    return 1


def follow(model, group):
    """An API server on a rank above 0 (``python -m vllm.entrypoints.openai.api_server --node-rank 1``, whose
    --headless does nothing, or ``vllm serve`` without --headless): its workers join the group and load, then
    the engine core's first call to them fails, as only the leader's executor may make one
    (vllm/v1/executor/multiproc_executor.py, MultiprocExecutor.collective_rpc: ``assert self.rpc_broadcast_mq is
    not None, "collective_rpc should not be called on follower node"``). Exit 1; the head sees the rank go."""
    member = GroupMember(group, monitor="EngineCore_DP0")
    try:
        if not member.bind_queue() or not member.join():
            engine_start_failed(WORKER_START_FAILED)
            return 1
        delay = float(os.environ.get(LOAD_SECONDS_ENV) or 2)
        log("INFO", "gpu_model_runner.py:3561", "Starting to load model %s..." % model, proc=member.proc, pid=PID + 2)
        if member.dead.wait(max(delay, 0)):
            engine_start_failed(WORKER_START_FAILED)
            return 1
        log("INFO", "default_loader.py:291", "Loading weights took %.2f seconds" % delay, proc=member.proc, pid=PID + 2)
        engine_start_failed("AssertionError: collective_rpc should not be called on follower node")
        return 1
    finally:
        member.close()


# ---- main ----------------------------------------------------------------------------------


def main(argv=None, top_level=False):
    """``python -m vllm.entrypoints.openai.api_server`` (top_level False) or ``vllm`` (True)."""
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(top_level)
    args = parser.parse_args(argv)  # exits 2 with argparse's message, as vLLM's parser does
    if top_level and getattr(args, "subparser", None) != "serve":
        parser.print_help()
        return 0
    try:
        validate(args)
    except TypeError as exc:
        sys.stderr.write("TypeError: %s\n" % exc)
        return 1
    try:
        return run(args, top_level)
    except Terminate:
        access_log("Shutting down")
        return 0


def run(args, top_level=False):
    model = getattr(args, "model_tag", None) or getattr(args, "model", None) or "Qwen/Qwen3-0.6B"
    args.model = model
    served = [name for name in _listify(getattr(args, "served_model_name", None)) if name] or [model]
    group = serving_group(args)
    if group is not None and top_level and group.headless:
        # ``vllm serve --headless`` (vllm/entrypoints/cli/serve.py, ServeSubcommand.cmd: run_headless):
        # no API server. ``python -m vllm.entrypoints.openai.api_server`` has no such branch (its
        # __main__ always calls run_server), so there --headless changes nothing.
        return run_headless(args, model, group)
    log("INFO", "api_server.py:1272", "vLLM API server version %s" % __version__)
    log("INFO", "utils.py:267", "non-default args: %s" % non_default_args(args))
    unix = None
    if getattr(args, "uds", None):
        # vLLM binds before it builds the engine (vllm-project/vllm#8204): the path exists, refusing
        # connections, while the model loads, and stays when the start fails after this.
        unix = bind_unix(args.uds)
        if unix is None:
            return 1
    try:
        return start(args, model, served, unix, group)
    finally:
        if unix is not None:
            unix.server_close()


def engine_config(args, model, api):
    """What the simulator imitates of vLLM's EngineArgs.create_engine_config: the model, the KV-cache
    dtype, the multi-node checks, the device. ``api`` prefixes the error lines: the API server's
    ``(APIServer pid=N) ``, or "" in the main process of ``vllm serve --headless`` (no API server).
    Returns a dict, or None after vLLM's error (to stderr)."""
    proc = "APIServer" if api else None
    try:
        config, hf_quant = read_model(model)
    except (ValueError, support_rules.VllmSupportError) as exc:
        sys.stderr.write("%sValueError: %s\n" % (api, exc))
        return None
    described = support_rules.describe_model(config)
    requested = getattr(args, "kv_cache_dtype", None) or "auto"
    try:
        cache_config.validate_cache_dtype(requested)
    except ValueError as exc:  # pydantic's ValidationError around CacheConfig's ValueError, in vLLM
        sys.stderr.write("%spydantic_core._pydantic_core.ValidationError: 1 validation error for "
                         "CacheConfig\ncache_dtype\n  Value error, %s\n" % (api, exc))
        return None
    try:
        kv_cache_dtype = kv_rules.resolve_kv_cache_dtype(config, hf_quant, requested, vllm_version=__version__)
    except kv_rules.QuantConfigError as exc:
        sys.stderr.write("%sValueError: %s\n" % (api, exc))
        return None
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    max_model_len = _int_of(getattr(args, "max_model_len", None)) or int(text.get("max_position_embeddings") or 8192)
    architectures = config.get("architectures") or ["(unknown)"]
    log("INFO", "model.py:530", "Resolved architecture: %s" % architectures[0], proc=proc)
    log("INFO", "model.py:1545", "Using max model len %d" % max_model_len, proc=proc)
    if kv_cache_dtype.startswith("fp8"):
        log("INFO", "cache.py:199", "Using fp8 data type to store kv cache. It reduces the GPU memory footprint and "
                                    "boosts the performance. Meanwhile, it may cause accuracy drop without a proper "
                                    "scaling factor.", proc=proc)
    refused = parallel_config_error(args)
    if refused is not None:
        sys.stderr.write("".join("%s%s\n" % (api, line) for line in refused.splitlines()))
        return None
    view = gpu_view()
    if view is None:
        sys.stderr.write("%sRuntimeError: Failed to infer device type, please set the environment "
                         "variable `VLLM_LOGGING_LEVEL=DEBUG` to turn on verbose logging to help debug the issue.\n" % api)
        return None
    gpus, visible = view
    log("INFO", "cuda.py:118", visible_line(gpus, visible), proc=proc)
    refused = world_size_error(args, visible)
    if refused is not None:
        sys.stderr.write("".join("%s%s\n" % (api, line) for line in refused.splitlines()))
        return None
    # The attention backend is chosen for the first visible GPU (vllm/platforms/cuda.py, get_device_capability(0):
    # CUDA_VISIBLE_DEVICES' first entry, an index or a UUID looked up in NVML).
    capability = visible[0].capability if visible else None
    return dict(config=config, hf_quant=hf_quant, described=described, kv_cache_dtype=kv_cache_dtype,
                max_model_len=max_model_len, capability=capability, visible=visible)


def start(args, model, served, unix, group=None):
    """The engine's start after the socket of --uds is bound: the model, the GPU, the serving group's
    rendezvous (``group``, --nnodes > 1), the load, then serve."""
    engine = engine_config(args, model, "(APIServer pid=%d) " % PID)
    if engine is None:
        return 1
    config, hf_quant, described = engine["config"], engine["hf_quant"], engine["described"]
    kv_cache_dtype, max_model_len = engine["kv_cache_dtype"], engine["max_model_len"]
    tp = _int_of(getattr(args, "tensor_parallel_size", None), 1) or 1
    quant = kv_rules.effective_quant_config(config, hf_quant) or {}
    # vLLM's line always has pipeline_parallel_size; the simulator's has it in a serving group only, so
    # that the single-host line stays what it always was.
    pipeline = "" if group is None else "pipeline_parallel_size=%d, " % group.pp
    log("INFO", "core.py:97", "Initializing a V1 LLM engine (v%s) with config: model='%s', tokenizer='%s', "
        "trust_remote_code=%s, dtype=torch.%s, max_seq_len=%d, tensor_parallel_size=%d, %squantization=%s, "
        "kv_cache_dtype=%s, device_config=cuda, served_model_name=%s"
        % (__version__, model, model, bool(getattr(args, "trust_remote_code", False)), described["dtype"],
           max_model_len, tp, pipeline, quant.get("quant_method") or None, kv_cache_dtype, ", ".join(served)),
        proc="EngineCore_DP0", pid=PID + 1)
    if not engine["visible"]:
        worker_failed(NO_CUDA_GPUS, executor_world(args)[0])
        return 1
    ok, store = rendezvous(args, group)
    if not ok:
        return 1
    try:
        return _start_workers(args, model, served, unix, group, engine, tp, store)
    finally:
        if store is not None:
            store.close()


def _start_workers(args, model, served, unix, group, engine, tp, store):
    """The workers' load (the attention backend), a serving group's rendezvous, then serve."""
    described, kv_cache_dtype, capability = engine["described"], engine["kv_cache_dtype"], engine["capability"]
    if described["attention_kind"] == "mla":
        reasons, ok = backend_reasons(kv_cache_dtype, capability)
        if not ok:
            refuse("ValueError: No valid attention backend found for cuda with %s. Reasons: {%s}." % (
                selector_config(described["head_size"], described["dtype"], kv_cache_dtype),
                ", ".join("%s: [%s]" % (name, ", ".join(why)) for name, why in reasons.items())), tp)
            return 1
        chosen = [name for name, why in reasons.items() if not why]
        log("INFO", "cuda.py:351", "Using %s attention backend out of potential backends: %s" % (chosen[0], chosen),
            proc="Worker_TP0", pid=PID + 2)
    if group is not None and group.node_rank > 0:
        return follow(model, group)
    head = None
    try:
        if group is not None:
            head = GroupHead(group)
            if not head.form():
                return 1
        return load_and_serve(args, model, served, unix, engine["max_model_len"], kv_cache_dtype, head)
    finally:
        if head is not None:
            head.close()


def load_and_serve(args, model, served, unix, max_model_len, kv_cache_dtype, head=None):
    """The load (FLEET_VLLM_SIM_LOAD_SECONDS), the shared-memory segment, then serve."""
    delay = float(os.environ.get(LOAD_SECONDS_ENV) or 2)
    log("INFO", "gpu_model_runner.py:3561", "Starting to load model %s..." % model, proc="Worker_TP0", pid=PID + 2)
    if head is None:
        time.sleep(max(delay, 0))
    elif head.dead.wait(max(delay, 0)):
        return head.failed_to_start()
    if os.environ.get(FAULT_ENV) == "exit":
        log("ERROR", "core.py:708", "EngineCore failed to start: CUDA out of memory while loading the weights (fault %s=exit "
            "of the test simulator)" % FAULT_ENV, proc="EngineCore_DP0", pid=PID + 1)
        return 1
    log("INFO", "default_loader.py:291", "Loading weights took %.2f seconds" % delay, proc="Worker_TP0", pid=PID + 2)
    if not late_vllm_port_check(args):
        return 1
    api_keys = [key for key in _listify(getattr(args, "api_key", None)) if key]
    if os.environ.get("VLLM_API_KEY") and not api_keys:
        api_keys = [os.environ["VLLM_API_KEY"]]
    state = State(model, served, api_keys, max_model_len, kv_cache_dtype)
    segment = open_shm_segment()
    if segment is None:
        return 1
    try:
        return serve(args, state, unix, head)
    finally:
        close_shm_segment(segment)
