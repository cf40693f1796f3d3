"""The version table and the pure helpers of fleet.vllm's vllm_probe (module_utils/_vllm_support.py)."""

from __future__ import annotations

import pytest

from conftest import FIXTURES

from ansible_collections.fleet.vllm.plugins.module_utils._vllm_support import (
    FP8_TRITON_MLA,
    VllmSupportError,
    describe_model,
    load_config,
    normalise_commit,
    normalise_server_args,
    parse_capability,
    parse_version,
    table_backends,
)


@pytest.mark.parametrize(
    "version, release, pre, dev, sha, build_date",
    [
        ("0.33.0", (0, 33, 0), None, None, None, None),
        ("0.16.0rc2.dev313+g4ba787ec9", (0, 16, 0), ("rc", 2), 313, "4ba787ec9", None),
        ("0.17.1rc1.dev171+ga3e2e250f.d20260324", (0, 17, 1), ("rc", 1), 171, "a3e2e250f", "2026-03-24"),
        ("0.17.1rc1.dev157+gffa5d74f1.cu128", (0, 17, 1), ("rc", 1), 157, "ffa5d74f1", None),
        ("0.33.0+cu129", (0, 33, 0), None, None, None, None),
        ("0.9.0.1", (0, 9, 0, 1), None, None, None, None),
        ("0.11.1.dev0+gabcdef1.cu130", (0, 11, 1), None, 0, "abcdef1", None),
        ("v0.18.0rc1", (0, 18, 0), ("rc", 1), None, None, None),
        ("0.13", (0, 13, 0), None, None, None, None),
    ],
)
def test_parse_version(version, release, pre, dev, sha, build_date):
    info = parse_version(version)
    assert (info["release"], info["pre"], info["dev"], info["sha"], info["build_date"]) == (release, pre, dev, sha, build_date)


@pytest.mark.parametrize("version", ["", "dev", "0.18.0rc1.dev7_rhaiv.0.ge974742fb.cpu", "main", None])
def test_unparseable_versions(version):
    assert parse_version(version) is None


def test_commit_normalised():
    assert normalise_commit("g4ba787ec9") == "4ba787ec9"
    assert normalise_commit("A1257FD1EA93DA6E27B31E4739AC2707781D8BA7") == "a1257fd1ea93da6e27b31e4739ac2707781d8ba7"
    assert normalise_commit("unknown") is None
    assert normalise_commit(None) is None


# Whether a build has commit a1257fd1ea93 (FP8 KV in TRITON_MLA): True (proven), False, or None
# (undetermined: counted as without it). Releases and their commits read from the PyPI wheels
# (docs/vllm-support.md); the nightly shas are real commits of main (0.17.1rc1.dev96 = 57431d8 of
# 2026-03-12 09:19Z). Which dev number of the 0.17.1rc1 line first has it is not proven, so
# every nightly of that line is undetermined unless its commit is listed.
FP8_CASES = [
    ("0.14.0", None, False),
    ("0.16.0", "g89a77b108", False),
    ("0.17.0", None, False),
    ("0.17.1", "g95c0f928c", False),
    ("0.18.0", "gbcf2be961", True),
    ("0.18.1", None, True),
    ("0.19.0", None, True),
    ("0.33.0", "g4ba787ec9", True),
    ("0.33.0+cu129", None, True),
    ("0.16.0rc2.dev313+g4ba787ec9", None, True),  # the commit is listed: release 0.33.0's
    ("0.16.0rc2.dev313+g5d5bd5c9d", None, False),
    ("0.17.0rc2.dev40+g1234567", None, False),
    ("0.17.1rc0", None, False),
    ("0.17.1rc1.dev96+g57431d823.d20260312", None, None),
    ("0.17.1rc1.dev105+gabcffbba8", None, None),
    ("0.17.1rc1.dev106+gabcdef012", None, None),
    ("0.17.1rc1.dev107+gabcdef012", None, None),
    ("0.17.1rc1.dev106+ga1257fd1e", None, True),
    ("0.17.1rc1.dev250", "a1257fd1ea93da6e27b31e4739ac2707781d8ba7", True),
    ("0.17.1rc1.dev171+ga3e2e250f.d20260324", None, None),
    ("0.17.1rc1.dev300+g1234567.d20260301", None, False),  # built before the merge: proven absent
    ("0.17.1rc2", None, None),
    ("0.18.0rc1", None, None),
    ("0.18.0rc2.dev3+g0123456", None, None),
    ("0.18.0rc1.dev9+gbcf2be961", None, True),
    ("0.18.1rc1.dev5+g0123456", None, True),
    ("0.19.0rc1", None, True),
    ("0.0.0+unknown", "a1257fd1ea93", True),
]


@pytest.mark.parametrize("version, commit, expected", FP8_CASES)
def test_fp8_triton_mla_by_version_and_commit(version, commit, expected):
    present, why = FP8_TRITON_MLA.present(parse_version(version), commit)
    assert present is expected, why
    assert "a1257fd1ea93" in why
    if expected is None:
        assert "undetermined, counted as without it" in why


def test_an_undetermined_nightly_strips_and_says_so():
    """A nightly of the 0.17.1rc1 line: TRITON_MLA is not counted as taking fp8 on 12.0, and the
    reason says the answer is undetermined, not that vLLM refuses it."""
    backends, evidence = table_backends("0.17.1rc1.dev140+g0123456", None, "fp8_e4m3", "mla", (12, 0))
    assert capable(backends) == []
    triton = by_name(backends)["TRITON_MLA"]
    assert triton["kv_cache_dtypes"] == ["auto", "bfloat16"]
    assert triton["reasons"][0].startswith(
        "kv_cache_dtype undetermined: TRITON_MLA takes auto, bfloat16 in vLLM 0.17.1rc1.dev140+g0123456 for certain")
    assert any("undetermined" in line for line in evidence), evidence
    # the same build, listed by its commit, keeps the FP8 KV cache
    backends, evidence = table_backends("0.17.1rc1.dev140+ga1257fd1e", None, "fp8_e4m3", "mla", (12, 0))
    assert capable(backends) == ["TRITON_MLA"]


def capable(backends):
    return sorted(b["name"] for b in backends if b["accepts"])


def by_name(backends):
    return dict((b["name"], b) for b in backends)


def test_seed_build_has_no_mla_backend_for_fp8_on_sm120():
    backends, evidence = table_backends("0.16.0rc2.dev313+g5d5bd5c9d", None, "fp8_e4m3", "mla", (12, 0))
    assert [b["name"] for b in backends] == ["TRITON_MLA", "FLASHMLA", "FLASHINFER_MLA", "CUTLASS_MLA", "FLASH_ATTN_MLA"]
    assert capable(backends) == []
    triton = by_name(backends)["TRITON_MLA"]
    assert triton["kv_cache_dtypes"] == ["auto", "bfloat16"]
    assert triton["compute_capability_supported"] is True
    assert len(triton["reasons"]) == 1
    assert triton["reasons"][0].startswith("kv_cache_dtype not supported: TRITON_MLA takes auto, bfloat16 in vLLM 0.16.0rc2.dev313")
    assert "a1257fd1ea93" in triton["reasons"][0]
    for name in ("FLASHMLA", "FLASHINFER_MLA", "CUTLASS_MLA"):
        entry = by_name(backends)[name]
        assert entry["compute_capability_supported"] is False
        assert entry["reasons"] == [entry["reasons"][0]] and entry["reasons"][0].startswith("compute capability not supported")
        assert "this is 12.0" in entry["reasons"][0]
    assert any("of a line older than 0.17.1rc1" in line for line in evidence), evidence


@pytest.mark.parametrize(
    "version, kv_cache_dtype, capability, expected",
    [
        ("0.16.0", "auto", (12, 0), ["TRITON_MLA"]),
        ("0.16.0", "bfloat16", (12, 0), ["TRITON_MLA"]),
        # 0.14.x's TRITON_MLA took only "auto": an explicit bfloat16 had no backend (PR #32795 fixed it in 0.15.0)
        ("0.14.0", "bfloat16", (12, 0), []),
        ("0.14.0", "fp8_e4m3", (12, 0), []),
        ("0.17.1", "fp8", (12, 0), []),
        ("0.18.0", "fp8_e4m3", (12, 0), ["TRITON_MLA"]),
        ("0.33.0", "fp8_e4m3", (12, 0), ["TRITON_MLA"]),
        ("0.33.0", "fp8_e4m3", (12, 1), ["TRITON_MLA"]),
        ("0.33.0", "nvfp4", (12, 0), []),
        ("0.16.0", "fp8_e4m3", (9, 0), ["FLASHMLA"]),
        ("0.16.0", "fp8_e4m3", (10, 0), ["CUTLASS_MLA", "FLASHINFER_MLA", "FLASHMLA"]),
        ("0.16.0", "auto", (9, 0), ["FLASHMLA", "FLASH_ATTN_MLA", "TRITON_MLA"]),
        # FP8 in Triton needs SM 8.9 (fp8e4nv): an A100 has no MLA backend for it
        ("0.33.0", "fp8_e4m3", (8, 0), []),
        ("0.33.0", "auto", (8, 0), ["TRITON_MLA"]),
    ],
)
def test_mla_table(version, kv_cache_dtype, capability, expected):
    backends, dummy = table_backends(version, None, kv_cache_dtype, "mla", capability)
    assert capable(backends) == expected
    for entry in backends:
        assert entry["accepts"] is (not entry["reasons"])


def test_fp8_needs_sm89_reason():
    backends, dummy = table_backends("0.33.0", None, "fp8", "mla", (8, 6))
    assert by_name(backends)["TRITON_MLA"]["reasons"] == [
        "kv_cache_dtype not supported: FP8 KV in TRITON_MLA needs compute capability 8.9 or later (Triton's fp8e4nv), this is 8.6"
    ]


def test_table_kv_dtypes_match_the_releases_read():
    """The dtype lists TRITON_MLA declares in the wheels of 0.14.0, 0.16.0 and 0.33.0."""
    def dtypes(version):
        return by_name(table_backends(version, None, "auto", "mla", (12, 0))[0])["TRITON_MLA"]["kv_cache_dtypes"]

    assert dtypes("0.14.0") == ["auto"]
    assert dtypes("0.16.0") == ["auto", "bfloat16"]
    assert sorted(dtypes("0.33.0")) == sorted(["auto", "float16", "bfloat16", "fp8", "fp8_e4m3"])


# supported_kv_cache_dtypes as the wheels on PyPI declare them (vllm/v1/attention/backends/,
# FLASH_ATTN's from its supports_kv_cache_dtype without fp8, which the table does not count),
# sorted; see docs/vllm-support.md for the files.
WHEELS = {
    "0.14.0": {"TRITON_MLA": ["auto"], "FLASHMLA": ["auto", "fp8", "fp8_e4m3"],
               "FLASHINFER_MLA": ["auto", "fp8", "fp8_e4m3"], "CUTLASS_MLA": ["auto", "fp8", "fp8_e4m3"],
               "FLASH_ATTN_MLA": ["auto"], "FLASH_ATTN": ["auto"],
               "FLASHINFER": ["auto", "fp8", "fp8_e4m3", "fp8_e5m2"], "TRITON_ATTN": ["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]},
    "0.14.1": {"TRITON_MLA": ["auto"], "FLASHMLA": ["auto", "fp8", "fp8_e4m3"], "FLASH_ATTN_MLA": ["auto"],
               "FLASH_ATTN": ["auto"], "TRITON_ATTN": ["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]},
    "0.15.0": {"TRITON_MLA": ["auto", "bfloat16"], "FLASHMLA": ["auto", "bfloat16", "fp8", "fp8_e4m3"],
               "FLASHINFER_MLA": ["auto", "bfloat16", "fp8", "fp8_e4m3"],
               "CUTLASS_MLA": ["auto", "bfloat16", "fp8", "fp8_e4m3"], "FLASH_ATTN_MLA": ["auto", "bfloat16"],
               "FLASH_ATTN": ["auto", "bfloat16"],
               "FLASHINFER": ["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"],
               "TRITON_ATTN": ["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"]},
    "0.17.1": {"TRITON_MLA": ["auto", "bfloat16"], "FLASH_ATTN_MLA": ["auto", "bfloat16"],
               "FLASH_ATTN": ["auto", "bfloat16"], "TRITON_ATTN": ["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"]},
    "0.18.0": {"TRITON_MLA": ["auto", "bfloat16", "float16", "fp8", "fp8_e4m3"],
               "FLASHMLA": ["auto", "bfloat16", "float16", "fp8", "fp8_e4m3"],
               "FLASH_ATTN_MLA": ["auto", "bfloat16", "float16"], "FLASH_ATTN": ["auto", "bfloat16", "float16"],
               "FLASHINFER": ["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"],
               "TRITON_ATTN": ["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"]},
}


@pytest.mark.parametrize("version", sorted(WHEELS))
def test_table_dtypes_are_those_the_wheels_declare(version):
    for kind in ("mla", "standard"):
        for entry in table_backends(version, None, "auto", kind, (12, 0))[0]:
            if entry["name"] in WHEELS[version]:
                assert sorted(entry["kv_cache_dtypes"]) == WHEELS[version][entry["name"]], (version, entry["name"])


@pytest.mark.parametrize("version, kind, dtype, capability, expected", [
    # float16 reached every backend in 0.18.0 (the standard ones too, not in 0.33.0)
    ("0.17.1", "standard", "float16", (12, 0), []),
    ("0.18.0", "standard", "float16", (12, 0), ["FLASHINFER", "FLASH_ATTN", "TRITON_ATTN"]),
    ("0.17.1", "mla", "float16", (10, 0), []),
    ("0.18.0", "mla", "float16", (10, 0), ["CUTLASS_MLA", "FLASHINFER_MLA", "FLASHMLA", "TRITON_MLA"]),
    # explicit bfloat16 reached every backend in 0.15.0, none in 0.14.x
    ("0.14.1", "mla", "bfloat16", (9, 0), []),
    ("0.15.0", "mla", "bfloat16", (9, 0), ["FLASHMLA", "FLASH_ATTN_MLA", "TRITON_MLA"]),
    ("0.14.1", "standard", "bfloat16", (9, 0), []),
    ("0.15.0", "standard", "bfloat16", (9, 0), ["FLASHINFER", "FLASH_ATTN", "TRITON_ATTN"]),
])
def test_explicit_dtypes_by_release(version, kind, dtype, capability, expected):
    assert capable(table_backends(version, None, dtype, kind, capability)[0]) == expected


def test_standard_table():
    backends, dummy = table_backends("0.33.0", None, "fp8_e4m3", "standard", (12, 0))
    assert capable(backends) == ["FLASHINFER", "TRITON_ATTN"]
    assert "FP8 KV depends on the FlashAttention build" in " ".join(by_name(backends)["FLASH_ATTN"]["reasons"])
    backends, dummy = table_backends("0.14.0", None, "auto", "standard", (7, 0))
    assert capable(backends) == ["TRITON_ATTN"]


def test_unplaceable_version_accepts_nothing_and_says_why():
    backends, evidence = table_backends("main", None, "auto", "mla", (12, 0))
    assert capable(backends) == []
    assert all("'main' is not a version the table can place" in b["reasons"][0] for b in backends)
    assert evidence and "method=introspection" in evidence[0]


def test_old_version_is_read_as_the_oldest_in_the_table():
    backends, evidence = table_backends("0.10.1.1", None, "auto", "mla", (12, 0))
    assert capable(backends) == ["TRITON_MLA"]
    assert any("older than 0.14.0" in line for line in evidence)


@pytest.mark.parametrize("text, expected", [("12.0", (12, 0)), (" 9.0 ", (9, 0)), ("10.3", (10, 3)), ("8.9", (8, 9))])
def test_parse_capability(text, expected):
    assert parse_capability(text) == expected


@pytest.mark.parametrize("text", ["12", "sm_120", "12.0.1", "", None, "twelve"])
def test_parse_capability_rejects(text):
    with pytest.raises(VllmSupportError, match="is not MAJOR.MINOR"):
        parse_capability(text)


@pytest.mark.parametrize(
    "name, kind, model_type, head_size",
    [
        ("kimi-k2.5-nvfp4", "mla", "kimi_k2", 576),
        ("bf16-kv", "mla", "deepseek_v3", 576),
        ("deepseek-r1-fp4-legacy", "mla", "deepseek_v3", 576),
    ],
)
def test_describe_model_fixtures(name, kind, model_type, head_size):
    model = describe_model(load_config(str(FIXTURES / "models" / name)))
    assert (model["attention_kind"], model["text_model_type"], model["head_size"], model["dtype"]) == (
        kind, model_type, head_size, "bfloat16")
    assert model["sparse"] is False


def test_describe_model_standard_and_sparse():
    llama = describe_model({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "torch_dtype": "float16"})
    assert (llama["attention_kind"], llama["head_size"], llama["dtype"]) == ("standard", 128, "float16")
    qwen = describe_model({"model_type": "qwen3", "head_dim": 128, "hidden_size": 5120, "num_attention_heads": 64})
    assert (qwen["attention_kind"], qwen["head_size"], qwen["dtype"]) == ("standard", 128, "bfloat16")
    v32 = describe_model({"model_type": "deepseek_v32", "kv_lora_rank": 512, "qk_rope_head_dim": 64, "index_topk": 2048})
    assert (v32["attention_kind"], v32["sparse"]) == ("mla", True)


@pytest.mark.parametrize("config, expected", [
    # the MLA family: head size kv_lora_rank + qk_rope_head_dim; dtype from torch_dtype, else dtype
    ({"model_type": "deepseek_v3", "kv_lora_rank": 512, "qk_rope_head_dim": 64, "torch_dtype": "bfloat16"},
     dict(model_type="deepseek_v3", text_model_type="deepseek_v3", attention_kind="mla", kv_lora_rank=512,
          head_size=576, dtype="bfloat16", sparse=False)),
    ({"model_type": "deepseek_v2", "kv_lora_rank": 512, "dtype": "torch.float16"},
     dict(model_type="deepseek_v2", text_model_type="deepseek_v2", attention_kind="mla", kv_lora_rank=512,
          head_size=512, dtype="float16", sparse=False)),
    # a multimodal wrapper: the language model under text_config decides, its model_type is reported
    ({"model_type": "kimi_k25", "dtype": "float32",
      "text_config": {"model_type": "kimi_k2", "kv_lora_rank": 512, "qk_rope_head_dim": 64, "index_topk": 64}},
     dict(model_type="kimi_k25", text_model_type="kimi_k2", attention_kind="mla", kv_lora_rank=512,
          head_size=576, dtype="float32", sparse=True)),
    ({"model_type": "llava", "torch_dtype": "float16", "text_config": {"hidden_size": 4096, "num_attention_heads": 32}},
     dict(model_type="llava", text_model_type="llava", attention_kind="standard", kv_lora_rank=None,
          head_size=128, dtype="float16", sparse=False)),
    # standard attention: head_dim wins over hidden_size / heads; nothing known -> no head size
    ({"model_type": "qwen3", "head_dim": 80, "hidden_size": 5120, "num_attention_heads": 64},
     dict(model_type="qwen3", text_model_type="qwen3", attention_kind="standard", kv_lora_rank=None,
          head_size=80, dtype="bfloat16", sparse=False)),
    ({"model_type": "mystery", "hidden_size": 4096},
     dict(model_type="mystery", text_model_type="mystery", attention_kind="standard", kv_lora_rank=None,
          head_size=None, dtype="bfloat16", sparse=False)),
    ({"text_config": "not an object", "kv_lora_rank": 0, "qk_rope_head_dim": 64},
     dict(model_type=None, text_model_type=None, attention_kind="mla", kv_lora_rank=0, head_size=64,
          dtype="bfloat16", sparse=False)),
])
def test_describe_model_reports(config, expected):
    assert describe_model(config) == expected


def test_load_config_error_messages(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(VllmSupportError) as info:
        load_config(missing)
    assert str(info.value) == ("model_path %s is not a directory: set it to the model directory that holds "
                               "config.json" % missing)
    with pytest.raises(VllmSupportError) as info:
        load_config(str(tmp_path))
    assert str(info.value) == ("%s has no config.json: it is not a Hugging Face model directory, or the download "
                               "is incomplete" % tmp_path)
    (tmp_path / "config.json").mkdir()
    with pytest.raises(VllmSupportError) as info:
        load_config(str(tmp_path))
    assert str(info.value) == "cannot read %s: Is a directory" % (tmp_path / "config.json")
    (tmp_path / "config.json").rmdir()
    (tmp_path / "config.json").write_bytes(b'{"a": "\xc3\xa9"}')  # UTF-8, whatever the locale
    assert load_config(str(tmp_path)) == {"a": "\u00e9"}
    (tmp_path / "config.json").write_text('"text"')
    with pytest.raises(VllmSupportError) as info:
        load_config(str(tmp_path))
    assert str(info.value) == "%s holds a JSON str, expected an object" % (tmp_path / "config.json")


def test_load_config_errors(tmp_path):
    with pytest.raises(VllmSupportError, match="has no config.json"):
        load_config(str(tmp_path))
    with pytest.raises(VllmSupportError, match="is not a directory"):
        load_config(str(tmp_path / "nope"))
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(VllmSupportError, match="holds a JSON list, expected an object"):
        load_config(str(tmp_path))
    (tmp_path / "config.json").write_text('{"model_type": ')
    with pytest.raises(VllmSupportError, match="is not valid JSON"):
        load_config(str(tmp_path))


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--port", "8000"], ["--port", "8000"]),
        (["vllm", "serve", "/m", "--port", "8000"], ["/m", "--port", "8000"]),
        (["/opt/vllm/current/bin/vllm", "serve", "--port", "1"], ["--port", "1"]),
        (["serve", "/m"], ["/m"]),
        (["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m"], ["--model", "/m"]),
        (["-m", "vllm.entrypoints.openai.api_server", "--model", "/m"], ["--model", "/m"]),
        ([], []),
    ],
)
def test_normalise_server_args(args, expected):
    assert normalise_server_args(args) == expected


# Issue 11: the CPU platform's backends (docs/vllm-support.md "The CPU platform").

@pytest.mark.parametrize("version, dtype, kind, accepting, undetermined", [
    ("0.32.0", "fp8_e4m3", "mla", [], False),
    ("0.31.0", "fp8", "mla", [], False),
    ("0.33.0+cpu", "fp8_e4m3", "mla", [], False),
    ("0.32.0", "auto", "mla", ["CPU_MLA", "AMX_MLA"], False),
    # neither MLA backend serves an explicit bfloat16 or float16 (AMX_MLA's class lists them, its
    # KV-cache write asserts auto)
    ("0.32.0", "bfloat16", "mla", [], False),
    ("0.33.0", "float16", "mla", [], False),
    ("0.32.0", "fp8_e4m3", "standard", ["CPU_ATTN"], False),
    ("0.30.0", "auto", "mla", [], True),
    ("0.32.0rc1", "fp8_e4m3", "standard", [], True),
    ("0.33.0.dev12+g0123456789", "fp8_e4m3", "standard", [], True),
    ("not-a-version", "auto", "standard", [], True),
])
def test_cpu_table(version, dtype, kind, accepting, undetermined):
    from ansible_collections.fleet.vllm.plugins.module_utils._vllm_support import backend_names, cpu_table_backends
    backends, evidence = cpu_table_backends(version, dtype, kind)
    assert [b["name"] for b in backends] == list(backend_names("cpu", kind))
    assert [b["name"] for b in backends if b["accepts"]] == accepting
    assert all(b["compute_capability_supported"] is None for b in backends)
    assert all(b["reasons"] for b in backends if not b["accepts"])
    assert evidence[0].startswith("undetermined: the CPU backends of vLLM") is undetermined


def test_backend_names_by_platform():
    from ansible_collections.fleet.vllm.plugins.module_utils._vllm_support import backend_names
    assert backend_names("cpu", "mla") == ("CPU_MLA", "AMX_MLA")
    assert backend_names("cpu", "standard") == ("CPU_ATTN",)
    assert backend_names("cuda", "mla")[0] == "TRITON_MLA"
    assert backend_names("cuda", "standard")[0] == "FLASH_ATTN"


def test_cpu_table_answers_in_full():
    """cpu_table_backends' whole answer: each backend's entry, the evidence line, the reasons word
    for word - a release read, one that was not, and the MLA pick the table cannot place."""
    from ansible_collections.fleet.vllm.plugins.module_utils._vllm_support import cpu_table_backends
    read = "0.31.0, 0.32.0, 0.33.0"
    assert cpu_table_backends("0.32.0", "fp8_e4m3", "standard") == (
        [dict(name="CPU_ATTN", accepts=True, reasons=[], kv_cache_dtypes=["auto", "fp8", "fp8_e4m3", "fp8_e5m2"],
              compute_capability_supported=None)],
        ["CPU backends of vLLM 0.32.0 (releases read: %s): CPU_ATTN takes auto, fp8, fp8_e4m3, fp8_e5m2" % read])
    backends, evidence = cpu_table_backends("0.32.0", "bfloat16", "mla")
    assert backends == [
        dict(name="CPU_MLA", accepts=False, reasons=["kv_cache_dtype not supported: CPU_MLA takes auto in vLLM 0.32.0"],
             kv_cache_dtypes=["auto"], compute_capability_supported=None),
        dict(name="AMX_MLA", accepts=False,
             reasons=["kv_cache_dtype not supported: AMX_MLA takes auto in vLLM 0.32.0 (AMXMLABackend inherits float16 "
                      "and bfloat16 from the base class's supported_kv_cache_dtypes, but AMXMLAImpl.do_kv_cache_update "
                      "asserts kv_cache_dtype == \"auto\" (vllm/v1/attention/backends/mla/amx_mla.py))"],
             kv_cache_dtypes=["auto"], compute_capability_supported=None)]
    assert evidence == ["CPU backends of vLLM 0.32.0 (releases read: %s): CPU_MLA takes auto; AMX_MLA takes auto" % read]
    reason = ("undetermined: the CPU backends of vLLM 0.30.0 were not read (releases read: %s); counted as not accepting "
              "auto, ask the build itself (method=introspection)" % read)
    assert cpu_table_backends("0.30.0", "auto", "mla") == (
        [dict(name=name, accepts=False, reasons=[reason], kv_cache_dtypes=None, compute_capability_supported=None)
         for name in ("CPU_MLA", "AMX_MLA")], [reason])


def test_an_mla_dtype_only_one_cpu_backend_takes_counts_for_neither(monkeypatch):
    """The CPU platform picks AMX_MLA or CPU_MLA by the processor, never by the KV-cache dtype: in
    a build whose two MLA backends took different dtypes (none read does: CPU_TABLE gives both
    auto alone), a dtype only one takes is accepted by neither."""
    from ansible_collections.fleet.vllm.plugins.module_utils import _vllm_support
    monkeypatch.setitem(_vllm_support.CPU_TABLE, "AMX_MLA", ("auto", "bfloat16"))
    backends, dummy = _vllm_support.cpu_table_backends("0.32.0", "bfloat16", "mla")
    assert [(b["name"], b["accepts"]) for b in backends] == [("CPU_MLA", False), ("AMX_MLA", False)]
    assert backends[1]["reasons"] == ["the CPU platform may pick CPU_MLA instead, which refuses bfloat16 (it picks by "
                                      "the CPU's AMX support, not by the KV-cache dtype)"]


# Issue 27: FLASHINFER left Turing (7.5) in 0.24.0, and with it the only backend that took an FP8
# KV cache there (FLASH_ATTN needs 8.0, Triton's FP8 8.9): from 0.24.0 the table strips it.
@pytest.mark.parametrize("version, capability, expected, undetermined", [
    ("0.14.0", (7, 5), ["FLASHINFER"], False),
    ("0.23.0", (7, 5), ["FLASHINFER"], False),
    ("0.23.0+cu129", (7, 5), ["FLASHINFER"], False),
    ("0.22.1rc1.dev40+g0123456", (7, 5), ["FLASHINFER"], False),  # a line older than 0.23.0's
    ("0.24.0", (7, 5), [], False),
    ("0.33.0", (7, 5), [], False),
    ("0.24.1rc1.dev3+g0123456", (7, 5), [], False),
    ("0.23.1rc1.dev12+g0123456", (7, 5), [], True),  # between the releases: not proven either way
    ("0.24.0rc1", (7, 5), [], True),
    ("0.24.0", (8, 0), ["FLASHINFER"], False),
    ("0.24.0", (12, 1), ["FLASHINFER", "TRITON_ATTN"], False),
    ("0.23.1rc1.dev12+g0123456", (8, 9), ["FLASHINFER", "TRITON_ATTN"], False),
])
def test_flashinfer_on_turing_by_release(version, capability, expected, undetermined):
    backends, evidence = table_backends(version, None, "fp8_e4m3", "standard", capability)
    assert capable(backends) == expected
    flashinfer = by_name(backends)["FLASHINFER"]
    assert flashinfer["compute_capability_supported"] is ("FLASHINFER" in expected)
    if undetermined:
        assert flashinfer["reasons"][0].startswith(
            "compute capability undetermined: FLASHINFER runs on 8.0 to 12.1 in vLLM %s for certain, this is 7.5" % version)
        assert "counted as with it" in flashinfer["reasons"][0]
    decided = [line for line in evidence if line.startswith("FLASHINFER's compute capability floor of 8.0")]
    assert len(decided) == (1 if capability == (7, 5) else 0), evidence
