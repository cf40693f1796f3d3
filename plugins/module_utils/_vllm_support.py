# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a vLLM build supports, when the build itself cannot be asked: a table by version.

fleet.vllm.vllm_probe asks the installed vLLM's own attention backend classes which KV-cache
dtypes they accept on a compute capability. vLLM's internals move between nightlies; when they
cannot be read, the answer comes from this table, built from the backend classes of the wheels
on PyPI (``supported_kv_cache_dtypes`` and ``supports_compute_capability`` in
``vllm/v1/attention/backends/``, read in 0.14.0, 0.14.1, 0.15.0, 0.15.1, 0.16.0, 0.17.0, 0.17.1,
0.18.0, 0.18.1, 0.19.0 and 0.33.0) and from vLLM's commit history:

* ``TRITON_MLA``, the only dense MLA backend on compute capability 12.x, gained ``fp8`` and
  ``fp8_e4m3`` KV caches with commit a1257fd1ea93 (PR #34597), merged to main on
  2026-03-12T15:32:34Z. Release 0.17.1 (PyPI, 2026-03-11, commit 95c0f928c) does not have it;
  0.18.0 (PyPI, 2026-03-20, commit bcf2be961) is the first release that does, and every later
  release keeps it (0.18.1, 0.19.0, 0.33.0 read).
* Nightly builds are versioned ``<next>rc<N>.dev<D>+g<sha>`` (``git describe`` distance D from
  the last tag on main). Main was on the ``0.17.1rc1`` line from before 2026-03-12 to after
  2026-03-24 (0.17.1rc1.dev88+g36735fd77 on 2026-03-12, 0.17.1rc1.dev96+g57431d823 is commit
  57431d8 of 2026-03-12T09:19Z, 0.17.1rc1.dev171+ga3e2e250f built 2026-03-24). Main's history is
  linear (squash merges) and ten commits were merged after 57431d8 up to a1257fd1ea93, so that
  commit is 0.17.1rc1.dev106: a build of that line has it from dev106 on. Lines of an earlier
  version (0.16.0rc2.dev313, the seed's build, 0.17.0rcN.devD) predate it; lines of a later
  version than 0.18.0 come after it. Pre-releases of 0.18.0 itself are counted as without it:
  when the release branch took it is not recorded, and the safe answer costs only KV memory.
* A local version segment ``d<YYYYMMDD>`` (setuptools-scm's build date of a modified tree)
  earlier than the merge date proves the commit absent.
* Explicit ``--kv-cache-dtype bfloat16`` for TRITON_MLA came in 0.15.0 (0.14.x accepted only
  ``auto``, issue #34752); ``float16`` came to the MLA backends in 0.18.0.
* Triton's FP8 cast (``fp8e4nv``) needs SM 8.9 or later; vLLM rejects FP8 KV on older GPUs for
  its Triton backends (PRs #43914, #47060), and earlier builds fail later while compiling.

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

import json
import os
import re

FP8_TRITON_MLA_COMMIT = "a1257fd1ea93da6e27b31e4739ac2707781d8ba7"
FP8_TRITON_MLA_MERGED = "2026-03-12"

MLA_BACKENDS = ("TRITON_MLA", "FLASHMLA", "FLASHINFER_MLA", "CUTLASS_MLA", "FLASH_ATTN_MLA")
STANDARD_BACKENDS = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION")

# Model types of the DeepSeek-V2/V3 family, whose attention is MLA when kv_lora_rank is set.
MLA_MODEL_TYPES = ("deepseek_v2", "deepseek_v3", "deepseek_mtp", "kimi_k2", "kimi_k25", "kimi_vl")

_VERSION_RE = re.compile(
    r"""^\s*v?(?P<release>[0-9]+(?:\.[0-9]+)*)
    (?:[-_.]?(?P<pre_l>a|b|c|rc|alpha|beta|pre|preview)[-_.]?(?P<pre_n>[0-9]+)?)?
    (?:[-_.]?(?:post|rev|r)[-_.]?(?P<post>[0-9]+))?
    (?:[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev>[0-9]+)?)?
    (?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?\s*$""",
    re.IGNORECASE | re.VERBOSE,
)
_SHA_RE = re.compile(r"^g?([0-9a-f]{7,40})$")
_DATE_RE = re.compile(r"^d([0-9]{8})$")


class VllmSupportError(ValueError):
    """A question the table or the model inspection cannot answer."""


# ---- versions ----------------------------------------------------------------------------


def parse_version(version):
    """Split a vLLM version (PEP 440, as vLLM's setuptools-scm writes it) into its parts.

    Returns a dict with ``release`` (tuple of ints, three at least), ``pre`` (``("rc", N)`` or
    None), ``dev`` (int or None), ``post``, ``local`` (str or None), ``sha`` (the ``g<sha>`` of
    the local segment, without the ``g``) and ``build_date`` (``YYYY-MM-DD`` from a ``d<date>``
    local segment), or None when ``version`` is not a version.
    """
    match = _VERSION_RE.match(version or "")
    if not match:
        return None
    release = tuple(int(part) for part in match.group("release").split("."))
    release = release + (0,) * (3 - len(release))
    pre = None
    if match.group("pre_l"):
        label = match.group("pre_l").lower()
        label = {"alpha": "a", "beta": "b", "c": "rc", "pre": "rc", "preview": "rc"}.get(label, label)
        pre = (label, int(match.group("pre_n") or 0))
    dev = match.group("dev") or ("0" if match.group("dev_l") else None)
    local = match.group("local")
    sha = build_date = None
    for part in re.split(r"[-_.]", local or ""):
        part = part.lower()
        if _DATE_RE.match(part):
            digits = _DATE_RE.match(part).group(1)
            build_date = "%s-%s-%s" % (digits[:4], digits[4:6], digits[6:])
        elif part.startswith("g") and _SHA_RE.match(part):
            sha = part[1:]
    return dict(
        version=version.strip(),
        release=release,
        pre=pre,
        post=int(match.group("post")) if match.group("post") else None,
        dev=int(dev) if dev is not None else None,
        local=local,
        sha=sha,
        build_date=build_date,
    )


def normalise_commit(commit):
    """A commit id as vLLM records it (``g4ba787ec9``, a full sha) -> lower-case hex, or None."""
    match = _SHA_RE.match((commit or "").strip().lower())
    return match.group(1) if match else None


def is_final(info):
    return info["pre"] is None and info["dev"] is None


def _release_str(release):
    return ".".join(str(part) for part in release)


class Feature(object):
    """A capability vLLM gained at a known point of its history.

    ``first_release``: the first release version that has it (a tuple). ``nightly``: the main
    line a dev build of which has it from dev ``D`` on, as ``((release, pre), D)``, or None
    when only releases are known. ``commit``/``merged``: the commit and its merge date, when
    it is one commit. ``what``: how the evidence names it.
    """

    def __init__(self, name, what, first_release, nightly=None, commit=None, merged=None):
        self.name = name
        self.what = what
        self.first_release = first_release
        self.nightly = nightly
        self.commit = commit
        self.merged = merged

    def present(self, info, commit=None):
        """(bool, why) for the build described by ``info`` (parse_version) and its ``commit``."""
        first = _release_str(self.first_release)
        shas = [sha for sha in (normalise_commit(commit), info["sha"]) if sha]
        if self.commit and any(self.commit.startswith(sha) for sha in shas):
            return True, "%s: this build is commit %s itself" % (self.what, self.commit[:12])
        if self.merged and info["build_date"] and info["build_date"] < self.merged:
            return False, "%s: built on %s, before commit %s was merged (%s)" % (
                self.what, info["build_date"], (self.commit or "")[:12], self.merged)
        if is_final(info):
            if info["release"] >= self.first_release:
                return True, "%s: release %s is %s or later, the first release with it" % (
                    self.what, _release_str(info["release"]), first)
            return False, "%s: release %s predates %s, the first release with it" % (
                self.what, _release_str(info["release"]), first)
        line = "%s%s" % (_release_str(info["release"]), "%s%d" % info["pre"] if info["pre"] else "")
        if info["release"] > self.first_release:
            return True, "%s: a pre-release or nightly of %s, a line opened after %s shipped with it" % (
                self.what, line, first)
        if self.nightly:
            (release, pre), first_dev = self.nightly
            if info["release"] == release and info["pre"] == pre and info["dev"] is not None:
                nightly_line = "%s%s%d" % (_release_str(release), pre[0], pre[1])
                if info["dev"] >= first_dev:
                    return True, "%s: nightly %s.dev%d is at or after %s.dev%d, where it was merged" % (
                        self.what, nightly_line, info["dev"], nightly_line, first_dev)
                return False, "%s: nightly %s.dev%d predates %s.dev%d, where it was merged" % (
                    self.what, nightly_line, info["dev"], nightly_line, first_dev)
        if info["release"] == self.first_release:
            return False, ("%s: pre-release or nightly %s of %s, not known to have it (only the %s release "
                           "is); counted as without it" % (self.what, info["version"], first, first))
        return False, "%s: pre-release or nightly %s predates %s, the first release with it" % (
            self.what, info["version"], first)


FP8_TRITON_MLA = Feature(
    "fp8_triton_mla",
    "TRITON_MLA fp8 KV cache (commit a1257fd1ea93, PR #34597, merged %s)" % FP8_TRITON_MLA_MERGED,
    (0, 18, 0),
    nightly=(((0, 17, 1), ("rc", 1)), 106),
    commit=FP8_TRITON_MLA_COMMIT,
    merged=FP8_TRITON_MLA_MERGED,
)
BF16_TRITON_MLA = Feature("bf16_triton_mla", "TRITON_MLA explicit bfloat16 KV cache", (0, 15, 0))
FP16_MLA = Feature("fp16_mla", "float16 KV cache for the MLA backends", (0, 18, 0))
BF16_STANDARD = Feature("bf16_standard", "explicit bfloat16 KV cache for the standard backends", (0, 16, 0))
FP16_STANDARD = Feature("fp16_standard", "float16 KV cache for the standard backends", (0, 33, 0))

FP8_DTYPES = ("fp8", "fp8_e4m3", "fp8_e5m2")


def _major_in(*majors):
    return lambda cap: cap[0] in majors


def _at_least(low):
    return lambda cap: cap >= low


def _between(low, high):
    return lambda cap: low <= cap <= high


# name -> (attention kind, capability test, capability text, [(dtypes, feature or None)],
#          fp8 needs SM89, note). The dtype groups are cumulative: a group counts when its
# feature is present in the build (None: in every build the table covers, 0.14.0 on).
TABLE = {
    "TRITON_MLA": ("mla", lambda cap: True, "any", [
        (("auto",), None),
        (("bfloat16",), BF16_TRITON_MLA),
        (("fp8", "fp8_e4m3"), FP8_TRITON_MLA),
        (("float16",), FP16_MLA),
    ], True, "the only dense MLA backend on compute capability 12.x"),
    "FLASHMLA": ("mla", _major_in(9, 10), "9.x and 10.x", [
        (("auto", "bfloat16", "fp8", "fp8_e4m3"), None),
        (("float16",), FP16_MLA),
    ], False, ""),
    "FLASHINFER_MLA": ("mla", _major_in(10), "10.x", [
        (("auto", "bfloat16", "fp8", "fp8_e4m3"), None),
        (("float16",), FP16_MLA),
    ], False, ""),
    "CUTLASS_MLA": ("mla", _major_in(10), "10.x", [
        (("auto", "bfloat16", "fp8", "fp8_e4m3"), None),
        (("float16",), FP16_MLA),
    ], False, ""),
    "FLASH_ATTN_MLA": ("mla", _major_in(9), "9.x", [
        (("auto", "bfloat16"), None),
        (("float16",), FP16_MLA),
    ], False, ""),
    "FLASH_ATTN": ("standard", _at_least((8, 0)), "8.0 and later", [
        (("auto",), None),
        (("bfloat16",), BF16_STANDARD),
        (("float16",), FP16_STANDARD),
    ], False, "FP8 KV depends on the FlashAttention build (FA3 on 9.x); the table does not count it"),
    "FLASHINFER": ("standard", _between((7, 5), (12, 1)), "7.5 to 12.1", [
        (("auto", "fp8", "fp8_e4m3", "fp8_e5m2"), None),
        (("bfloat16",), BF16_STANDARD),
        (("float16",), FP16_STANDARD),
    ], False, ""),
    "TRITON_ATTN": ("standard", lambda cap: True, "any", [
        (("auto", "fp8", "fp8_e4m3", "fp8_e5m2"), None),
        (("bfloat16",), BF16_STANDARD),
        (("float16",), FP16_STANDARD),
    ], True, ""),
}

TABLE_FIRST_RELEASE = (0, 14, 0)


def parse_capability(text):
    """``"12.0"`` -> (12, 0). Raises VllmSupportError for anything else."""
    match = re.match(r"^\s*([0-9]{1,2})\.([0-9])\s*$", str(text or ""))
    if not match:
        raise VllmSupportError(
            "compute_capability %r is not MAJOR.MINOR: give it as nvidia-smi prints it "
            "(--query-gpu=compute_cap), for example \"12.0\" for RTX PRO 6000 Blackwell" % (text,))
    return int(match.group(1)), int(match.group(2))


def table_backends(version, commit, kv_cache_dtype, attention_kind, capability):
    """Ask the table which backends of ``attention_kind`` take ``kv_cache_dtype`` on ``capability``.

    Returns (backends, evidence): backends as the probe reports them (name, accepts, reasons,
    kv_cache_dtypes, compute_capability_supported) and the table lines that decided.
    """
    info = parse_version(version)
    cap_text = "%d.%d" % capability
    names = MLA_BACKENDS if attention_kind == "mla" else STANDARD_BACKENDS
    names = [name for name in names if name in TABLE]
    if info is None:
        reason = ("vLLM version %r is not a version the table can place: counted as a build whose "
                  "backends are unknown; ask the build itself (method=introspection)" % (version,))
        return [dict(name=name, accepts=False, reasons=[reason], kv_cache_dtypes=None,
                     compute_capability_supported=None) for name in names], [reason]
    evidence = []
    if info["release"] < TABLE_FIRST_RELEASE:
        evidence.append("vLLM %s is older than %s, the oldest release the table was read from: its "
                        "backends are taken as those of %s" % (version, _release_str(TABLE_FIRST_RELEASE),
                                                               _release_str(TABLE_FIRST_RELEASE)))
    backends = []
    for name in names:
        dummy, cap_test, cap_text_ok, groups, fp8_needs_sm89, note = TABLE[name]
        dtypes = []
        missing = []
        for group, feature in groups:
            if feature is None:
                dtypes.extend(group)
                continue
            present, why = feature.present(info, commit)
            if present:
                dtypes.extend(group)
            else:
                missing.append((group, why))
            if kv_cache_dtype in group and why not in evidence:
                evidence.append(why)
        reasons = []
        if kv_cache_dtype not in dtypes:
            reason = "kv_cache_dtype not supported: %s takes %s in vLLM %s" % (name, ", ".join(dtypes), version)
            for group, why in missing:
                if kv_cache_dtype in group:
                    reason += " (%s)" % why
            reasons.append(reason)
        elif fp8_needs_sm89 and kv_cache_dtype in FP8_DTYPES and capability < (8, 9):
            reasons.append("kv_cache_dtype not supported: FP8 KV in %s needs compute capability 8.9 or later "
                           "(Triton's fp8e4nv), this is %s" % (name, cap_text))
        cap_ok = bool(cap_test(capability))
        if not cap_ok:
            reasons.append("compute capability not supported: %s runs on %s, this is %s" % (name, cap_text_ok, cap_text))
        if note and kv_cache_dtype in FP8_DTYPES and name == "FLASH_ATTN":
            reasons.append(note)
        backends.append(dict(name=name, accepts=not reasons, reasons=reasons, kv_cache_dtypes=dtypes,
                             compute_capability_supported=cap_ok))
    return backends, evidence


# ---- the model ---------------------------------------------------------------------------


def load_config(model_path):
    """The config.json document of a model directory (a dict).

    Raises VllmSupportError when the directory or its config.json is missing, unreadable or
    not a JSON object.
    """
    config_path = os.path.join(model_path, "config.json")
    if not os.path.isdir(model_path):
        raise VllmSupportError("model_path %s is not a directory: set it to the model directory that holds "
                               "config.json" % model_path)
    if not os.path.exists(config_path):
        raise VllmSupportError("%s has no config.json: it is not a Hugging Face model directory, or the "
                               "download is incomplete" % model_path)
    try:
        with open(config_path, "rb") as handle:
            config = json.loads(handle.read().decode("utf-8"))
    except (IOError, OSError) as exc:
        raise VllmSupportError("cannot read %s: %s" % (config_path, exc.strerror or exc))
    except ValueError as exc:
        raise VllmSupportError("%s is not valid JSON: %s" % (config_path, exc))
    if not isinstance(config, dict):
        raise VllmSupportError("%s holds a JSON %s, expected an object" % (config_path, type(config).__name__))
    return config


def describe_model(config):
    """What decides the attention backend, from a config.json document (a dict).

    Multimodal wrappers (kimi_k25) keep the language model under ``text_config``; vLLM reads
    that one (get_hf_text_config), and so does this.
    """
    text = config.get("text_config")
    if not isinstance(text, dict):
        text = config
    kv_lora_rank = text.get("kv_lora_rank")
    model_type = text.get("model_type") or config.get("model_type")
    mla = kv_lora_rank is not None
    dtype = text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or config.get("dtype") or "bfloat16"
    if mla:
        head_size = int(kv_lora_rank) + int(text.get("qk_rope_head_dim") or 0)
    else:
        head_size = text.get("head_dim")
        if not head_size and text.get("hidden_size") and text.get("num_attention_heads"):
            head_size = int(text["hidden_size"]) // int(text["num_attention_heads"])
    return dict(
        model_type=config.get("model_type"),
        text_model_type=model_type,
        attention_kind="mla" if mla else "standard",
        kv_lora_rank=kv_lora_rank,
        head_size=int(head_size) if head_size else None,
        dtype=str(dtype).replace("torch.", ""),
        sparse=text.get("index_topk") is not None,
    )


def normalise_server_args(args):
    """A server command line -> the arguments vLLM's serve parser takes.

    Drops a leading ``vllm serve`` (or ``serve``) and a leading ``[python] -m
    vllm.entrypoints.openai.api_server``; what follows (a model tag, flags) is kept as it is.
    """
    args = [str(arg) for arg in args]
    if args and os.path.basename(args[0]).startswith("python") and args[1:2] == ["-m"]:
        args = args[1:]
    if args[:1] == ["-m"] and len(args) > 1 and args[1].startswith("vllm."):
        return args[2:]
    if args and os.path.basename(args[0]) == "vllm":
        args = args[1:]
    if args[:1] == ["serve"]:
        args = args[1:]
    return args
