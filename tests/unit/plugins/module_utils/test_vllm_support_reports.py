"""The version table's answers and reasons word for word (plugins/module_utils/_vllm_support.py).

vllm_probe reports these reasons and this evidence when it cannot ask the installed vLLM itself,
and kv_cache_decision quotes them in the line an operator reads to learn why the FP8 KV cache was
kept or stripped. test_vllm_support.py checks the decisions; these tests compare whole answers.
"""

from __future__ import annotations

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils._vllm_support import (
    BF16_MLA,
    FP8_TRITON_MLA,
    Feature,
    VllmSupportError,
    capability_supported,
    describe_model,
    normalise_server_args,
    parse_capability,
    parse_version,
    table_backends,
)

FP8 = "TRITON_MLA fp8 KV cache (commit a1257fd1ea93, PR #34597, merged 2026-03-12)"
UNDETERMINED = ("%s: %s is a pre-release or nightly of the %s line, and no source read proves whether it has it (releases "
                "from %s on, later lines and the commits listed in fleet.vllm's table are proven): undetermined, counted "
                "as without it; ask the build itself (method=introspection)")


def version(text, release, pre=None, post=None, dev=None, local=None, sha=None, build_date=None):
    return dict(version=text, release=release, pre=pre, post=post, dev=dev, local=local, sha=sha, build_date=build_date)


@pytest.mark.parametrize("text, expected", [
    ("0.17.1rc1.dev5+g1234567.d20260301",
     version("0.17.1rc1.dev5+g1234567.d20260301", (0, 17, 1), ("rc", 1), dev=5, local="g1234567.d20260301",
             sha="1234567", build_date="2026-03-01")),
    ("1.0.0alpha2", version("1.0.0alpha2", (1, 0, 0), ("a", 2))),
    ("1.0beta", version("1.0beta", (1, 0, 0), ("b", 0))),
    ("1.0c1", version("1.0c1", (1, 0, 0), ("rc", 1))),
    ("1.0pre1", version("1.0pre1", (1, 0, 0), ("rc", 1))),
    ("1.0preview3", version("1.0preview3", (1, 0, 0), ("rc", 3))),
    ("1.0a4", version("1.0a4", (1, 0, 0), ("a", 4))),
    ("0.18.0.post1", version("0.18.0.post1", (0, 18, 0), post=1)),
    ("0.18.0.dev", version("0.18.0.dev", (0, 18, 0), dev=0)),
    ("0.18.0rc", version("0.18.0rc", (0, 18, 0), ("rc", 0))),
    (" 0.18.0-rc.1-post.2-dev.3+Local.G89a77b1 ",
     version("0.18.0-rc.1-post.2-dev.3+Local.G89a77b1", (0, 18, 0), ("rc", 1), post=2, dev=3, local="Local.G89a77b1",
             sha="89a77b1")),
    ("0.1+abcdef12", version("0.1+abcdef12", (0, 1, 0), local="abcdef12")),
], ids=lambda value: value if isinstance(value, str) else "")
def test_versions_are_split_in_full(text, expected):
    assert parse_version(text) == expected


@pytest.mark.parametrize("text, answer, why", [
    ("0.18.0", True, FP8 + ": release 0.18.0 is 0.18.0 or later, the first release with it"),
    ("0.17.1", False, FP8 + ": release 0.17.1 predates 0.18.0, the first release with it"),
    ("0.17.1rc1.dev300+g1234567.d20260301", False,
     FP8 + ": built on 2026-03-01, before commit a1257fd1ea93 was merged (2026-03-12)"),
    ("0.16.0rc2.dev313", False,
     FP8 + ": pre-release or nightly 0.16.0rc2.dev313 is of a line older than 0.17.1rc1, where it came"),
    ("0.17.1rc0.dev9", False,
     FP8 + ": pre-release or nightly 0.17.1rc0.dev9 is of a line older than 0.17.1rc1, where it came"),
    # A beta comes before any release candidate, whatever its number.
    ("0.17.1b3", False, FP8 + ": pre-release or nightly 0.17.1b3 is of a line older than 0.17.1rc1, where it came"),
    ("0.17.1rc1.dev5", None, UNDETERMINED % (FP8, "0.17.1rc1.dev5", "0.17.1rc1", "0.18.0")),
    ("0.17.1.dev5", None, UNDETERMINED % (FP8, "0.17.1.dev5", "0.17.1", "0.18.0")),
    ("0.18.0rc1", None, UNDETERMINED % (FP8, "0.18.0rc1", "0.18.0rc1", "0.18.0")),
    ("0.19.0rc1", True,
     FP8 + ": 0.19.0rc1 is a pre-release or nightly of the 0.19.0rc1 line, opened after release 0.18.0 shipped with it "
     "(a nightly's version is counted from the last tag of main, set after the releases it follows)"),
    ("0.33.0+g4ba787ec9", True, FP8 + ": this build is commit 4ba787ec9, release 0.33.0, which has it"),
])
def test_fp8_triton_mla_reasons_in_full(text, answer, why):
    assert FP8_TRITON_MLA.present(parse_version(text)) == (answer, why)


def test_the_merge_commit_itself_is_named_by_twelve_characters():
    assert FP8_TRITON_MLA.present(parse_version("0.1"), "A1257FD1EA93DA6E") == (
        True, FP8 + ": this build is commit a1257fd1ea93da6e, commit a1257fd1ea93 itself, which has it")
    # Seven hex digits name a commit; six do not.
    assert FP8_TRITON_MLA.present(parse_version("0.1"), "a1257fd")[0] is True
    assert FP8_TRITON_MLA.present(parse_version("0.1"), "a1257f") == (
        False, FP8 + ": release 0.1.0 predates 0.18.0, the first release with it")


def test_a_feature_of_a_release_without_a_known_commit():
    """BF16_MLA came in 0.15.0; nothing narrower is known."""
    assert BF16_MLA.present(parse_version("0.15.0rc1")) == (None, UNDETERMINED % (
        "explicit bfloat16 KV cache for the MLA backends", "0.15.0rc1", "0.15.0rc1", "0.15.0"))
    assert BF16_MLA.present(parse_version("0.14.1rc1")) == (
        False, "explicit bfloat16 KV cache for the MLA backends: pre-release or nightly 0.14.1rc1 is of a line older "
        "than 0.15.0, where it came")


def test_a_feature_built_from_its_parts():
    """A new row of the table: a feature merged on the 2.1.0rc2 line, first released in 2.1.0."""
    feature = Feature("X (commit 0123456789abcdef)", (2, 1, 0), merged_line=((2, 1, 0), ("rc", 2)),
                      commit="0123456789abcdef", merged="2027-01-10", commits_with={"fedcba987": "release 2.1.0"})
    assert feature.present(parse_version("2.1.0rc2.dev1")) == (None, UNDETERMINED % (
        "X (commit 0123456789abcdef)", "2.1.0rc2.dev1", "2.1.0rc2", "2.1.0"))
    assert feature.present(parse_version("2.0.9rc1")) == (
        False, "X (commit 0123456789abcdef): pre-release or nightly 2.0.9rc1 is of a line older than 2.1.0rc2, where it came")
    assert feature.present(parse_version("2.0.0+d20270109")) == (
        False, "X (commit 0123456789abcdef): built on 2027-01-09, before commit 0123456789ab was merged (2027-01-10)")
    assert feature.present(parse_version("2.0.0+d20270110")) == (
        False, "X (commit 0123456789abcdef): release 2.0.0 predates 2.1.0, the first release with it")
    assert feature.present(parse_version("2.0.0+gfedcba987")) == (
        True, "X (commit 0123456789abcdef): this build is commit fedcba987, release 2.1.0, which has it")
    assert feature.present(parse_version("2.0.0"), "g0123456789abcdef") == (
        True, "X (commit 0123456789abcdef): this build is commit 0123456789abcdef, commit 0123456789ab itself, which has it")
    without_commit = Feature("Y", (2, 1, 0), merged="2027-01-10")
    assert without_commit.present(parse_version("2.0.0+d20270109")) == (
        False, "Y: built on 2027-01-09, before commit  was merged (2027-01-10)")
    # Later lines than the one it was merged on are undetermined too, until the release.
    later = Feature("Z", (2, 2, 0), merged_line=((2, 1, 0), ("rc", 2)))
    assert later.present(parse_version("2.1.0rc3"))[0] is None
    assert later.present(parse_version("2.1.0.dev4"))[0] is None
    assert later.present(parse_version("2.1.0rc1"))[0] is False


@pytest.mark.parametrize("rule, yes, no", [
    (("any",), [(3, 0), (12, 1)], []),
    (("major", 9, 10), [(9, 0), (10, 3)], [(8, 9), (12, 0), (0, 9)]),
    (("at_least", (8, 0)), [(8, 0), (12, 0)], [(7, 5)]),
    (("between", (7, 5), (12, 1)), [(7, 5), (12, 1), (9, 0)], [(7, 4), (12, 2)]),
])
def test_capability_rules(rule, yes, no):
    assert [capability_supported(rule, cap) for cap in yes + no] == [True] * len(yes) + [False] * len(no)


def test_capability_rules_of_the_table_on_real_gpus():
    """Which MLA backends run on an H100 (9.0), a B200 (10.0) and an RTX PRO 6000 (12.0)."""
    def running(capability):
        backends, dummy = table_backends("0.18.0", None, "auto", "mla", capability)
        return [backend["name"] for backend in backends if backend["compute_capability_supported"]]
    assert running((9, 0)) == ["TRITON_MLA", "FLASHMLA", "FLASH_ATTN_MLA"]
    assert running((10, 0)) == ["TRITON_MLA", "FLASHMLA", "FLASHINFER_MLA", "CUTLASS_MLA"]
    assert running((12, 0)) == ["TRITON_MLA"]


def test_an_unplaceable_version_in_full():
    reason = ("vLLM version 'main' is not a version the table can place: counted as a build whose backends are unknown; ask "
              "the build itself (method=introspection)")
    assert table_backends("main", None, "auto", "mla", (12, 0)) == (
        [dict(name=name, accepts=False, reasons=[reason], kv_cache_dtypes=None, compute_capability_supported=None)
         for name in ("TRITON_MLA", "FLASHMLA", "FLASHINFER_MLA", "CUTLASS_MLA", "FLASH_ATTN_MLA")], [reason])


def test_an_old_build_on_an_old_gpu_in_full():
    assert table_backends("0.10.1", None, "fp8", "standard", (7, 5)) == ([
        dict(name="FLASH_ATTN", accepts=False, kv_cache_dtypes=["auto"], compute_capability_supported=False, reasons=[
            "kv_cache_dtype not supported: FLASH_ATTN takes auto in vLLM 0.10.1",
            "compute capability not supported: FLASH_ATTN runs on 8.0 and later, this is 7.5",
            "FP8 KV depends on the FlashAttention build (FA3 on 9.x); the table does not count it"]),
        dict(name="FLASHINFER", accepts=True, kv_cache_dtypes=["auto", "fp8", "fp8_e4m3", "fp8_e5m2"],
             compute_capability_supported=True, reasons=[]),
        dict(name="TRITON_ATTN", accepts=False, kv_cache_dtypes=["auto", "fp8", "fp8_e4m3", "fp8_e5m2"],
             compute_capability_supported=True, reasons=[
                 "kv_cache_dtype not supported: FP8 KV in TRITON_ATTN needs compute capability 8.9 or later (Triton's "
                 "fp8e4nv), this is 7.5"]),
    ], ["vLLM 0.10.1 is older than 0.14.0, the oldest release the table was read from: its backends are taken as those of "
        "0.14.0",
        "FLASHINFER's compute capability floor of 8.0 (SM 7.5 dropped, vLLM issue #47549): release 0.10.1 predates 0.24.0, "
        "the first release with it"])


@pytest.mark.parametrize("capability, accepts", [((8, 8), False), ((8, 9), True), ((9, 0), True)])
def test_triton_fp8_needs_sm89(capability, accepts):
    backends, dummy = table_backends("0.14.0", None, "fp8_e5m2", "standard", capability)
    assert [backend["accepts"] for backend in backends if backend["name"] == "TRITON_ATTN"] == [accepts]


def test_the_first_release_of_the_table_is_read_as_itself():
    backends, evidence = table_backends("0.14.0", None, "auto", "standard", (9, 0))
    assert evidence == []
    assert [backend["name"] for backend in backends if backend["accepts"]] == ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN"]


def test_an_undetermined_nightly_in_full():
    version_text = "0.17.1rc1.dev140+g0123456"
    why = UNDETERMINED % (FP8, version_text, "0.17.1rc1", "0.18.0")
    backends, evidence = table_backends(version_text, None, "fp8_e4m3", "mla", (12, 0))
    assert evidence == [why]
    assert backends[0] == dict(
        name="TRITON_MLA", accepts=False, kv_cache_dtypes=["auto", "bfloat16"], compute_capability_supported=True,
        reasons=["kv_cache_dtype undetermined: TRITON_MLA takes auto, bfloat16 in vLLM %s for certain (%s)" % (version_text, why)])
    assert backends[-1]["reasons"] == [
        "kv_cache_dtype not supported: FLASH_ATTN_MLA takes auto, bfloat16 in vLLM %s" % version_text,
        "compute capability not supported: FLASH_ATTN_MLA runs on 9.x, this is 12.0"]


def test_a_dtype_a_build_lacks_names_the_release_that_brought_it():
    backends, evidence = table_backends("0.17.1", None, "float16", "mla", (12, 0))
    why = "float16 KV cache for the MLA backends: release 0.17.1 predates 0.18.0, the first release with it"
    assert evidence == [why]
    assert backends[0]["reasons"] == [
        "kv_cache_dtype not supported: TRITON_MLA takes auto, bfloat16 in vLLM 0.17.1 (%s)" % why]


# ---- inputs ----------------------------------------------------------------------------------


def test_a_config_that_is_not_json_in_full(tmp_path):
    from ansible_collections.fleet.vllm.plugins.module_utils._vllm_support import load_config
    (tmp_path / "config.json").write_text('{"model_type": ')
    with pytest.raises(VllmSupportError) as caught:
        load_config(str(tmp_path))
    assert str(caught.value) == "%s is not valid JSON: Expecting value: line 1 column 16 (char 15)" % (
        tmp_path / "config.json")


@pytest.mark.parametrize("text", ["12", None, "twelve"])
def test_capability_error_in_full(text):
    with pytest.raises(VllmSupportError) as caught:
        parse_capability(text)
    assert str(caught.value) == (
        "compute_capability %r is not MAJOR.MINOR: give it as nvidia-smi prints it (--query-gpu=compute_cap), for "
        "example \"12.0\" for RTX PRO 6000 Blackwell" % (text,))


def test_dtype_comes_from_the_text_config_first():
    config = {"model_type": "wrapper", "torch_dtype": "float32", "dtype": "float64",
              "text_config": {"dtype": "float16", "kv_lora_rank": 512}}
    assert describe_model(config)["dtype"] == "float16"
    config["text_config"]["torch_dtype"] = "bfloat16"
    assert describe_model(config)["dtype"] == "bfloat16"
    del config["text_config"]["torch_dtype"], config["text_config"]["dtype"]
    assert describe_model(config)["dtype"] == "float32"
    del config["torch_dtype"]
    assert describe_model(config)["dtype"] == "float64"
    assert describe_model(config)["text_model_type"] == "wrapper"
    assert describe_model({"model_type": "gpt2", "hidden_size": 100, "num_attention_heads": 3})["head_size"] == 33


@pytest.mark.parametrize("args, expected", [
    (["/usr/bin/python3.12", "-m", "vllm.entrypoints.openai.api_server", "--port", "1"], ["--port", "1"]),
    (["python3", "serve.py", "-m", "x"], ["python3", "serve.py", "-m", "x"]),
    (["-m", "mymodule", "--port", "1"], ["-m", "mymodule", "--port", "1"]),
    (["-m"], ["-m"]),
    (["-m", "vllm.entrypoints.openai.api_server"], []),
    (["/opt/vllm/current/bin/vllm", "--port", "1"], ["--port", "1"]),
    # `vllm serve` as a module: what a serving group's ranks run (vllm_server, issue 26).
    (["/opt/vllm/v/bin/python", "-m", "vllm.entrypoints.cli.main", "serve", "--headless"], ["--headless"]),
    (["-m", "vllm.entrypoints.cli.main", "--help"], ["--help"]),
])
def test_server_args_that_are_not_a_vllm_command_stay(args, expected):
    assert normalise_server_args(args) == expected
