"""The course's architecture beside a model's, part by part: what today's decoders (Llama, Qwen2, Qwen3) changed and
which page shows each part. Each side is a message code with its parameters (the page writes it in the learner's
language)."""
from __future__ import annotations

from dataclasses import dataclass

from ..model.config import TransformerConfig

COURSE = TransformerConfig()  # the course's Transformer: sinusoidal positions, LayerNorm, ReLU FFN, one K/V per head
ACT_NAMES = {"relu": "ReLU", "gelu": "GELU", "gelu_tanh": "GELU", "silu": "SiLU"}
NORM_NAMES = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}  # the classes' names, as pages print them
PAGES = {"positions": "embeddings", "norm": "ffn", "ffn": "ffn", "attention": "attention",
         "head_width": "attention", "qk_norm": "attention", "biases": "model", "output": "logits"}


@dataclass(frozen=True)
class PartRow:
    part: str  # positions, norm, ffn, attention, head_width, qk_norm, biases, output
    course: tuple[str, dict]  # the course's choice: (message code, parameters)
    this: tuple[str, dict]  # this model's
    page: str  # the page that shows it
    changed: bool
    beside: tuple[tuple[str, dict], ...] = ()  # the same part of the other models asked for, in their order


def _describe(cfg: TransformerConfig) -> dict[str, tuple[str, dict]]:
    norm_name = NORM_NAMES[cfg.norm]
    return {
        "positions": (f"arch_pos_{cfg.positional}", {"base": f"{cfg.rope_theta:,.0f}"}),
        "norm": (f"arch_norm_{cfg.norm}_{'pre' if cfg.norm_first else 'post'}", {}),
        "ffn": (f"arch_ffn_{cfg.ffn}", {"act": ACT_NAMES[cfg.activation], "d_ffn": cfg.d_ffn,
                                        "swiglu": " (SwiGLU)" if cfg.activation == "silu" else ""}),
        "attention": ("arch_attn_mha" if cfg.kv_heads == cfg.n_heads else "arch_attn_gqa",
                      {"h": cfg.n_heads, "kv": cfg.kv_heads}),
        "head_width": ("arch_hd_own" if cfg.d_head else "arch_hd_split",
                       {"hd": cfg.head_dim, "d": cfg.d_model, "h": cfg.n_heads, "w": cfg.n_heads * cfg.head_dim}),
        "qk_norm": ("arch_qk_norm" if cfg.qk_norm else "arch_qk_plain", {}),
        "biases": (f"arch_bias_{int(cfg.qkv_bias)}{int(cfg.linear_bias)}", {}),
        "output": (f"arch_out_{'tied' if cfg.tie_embeddings else 'own'}_{'norm' if cfg.final_norm else 'plain'}",
                   {"norm": norm_name}),
    }


def architecture_rows(cfg: TransformerConfig, beside: tuple[TransformerConfig, ...] = ()) -> list[PartRow]:
    """One row per part that today's decoders changed: the course's choice, this model's, its page, and the same
    part of each model in `beside` (e.g. Qwen2.5 and Qwen3 from their published configs)."""
    # the course's design at this model's sizes (any head count: d_model goes with it)
    course = _describe(COURSE.replace(d_model=cfg.d_model, d_ffn=cfg.d_ffn, n_heads=cfg.n_heads))
    this, others = _describe(cfg), [_describe(c) for c in beside]
    return [PartRow(part, course[part], this[part], PAGES[part], course[part] != this[part],
                    tuple(o[part] for o in others)) for part in PAGES]


@dataclass(frozen=True)
class VocabParts:
    """What the logits' last axis holds, id by id: tokens of the encoding's byte-pair vocabulary, its special tokens,
    the unknown token and ids with no token at all (holes in the encoding's numbering)."""

    size: int  # the model's vocab_size: the logits' last axis
    encoding: str  # the model's encoding
    base: str  # the encoding whose special tokens those are (a shipped subset's base, else the encoding itself)
    ordinary: int  # ids of byte-pair tokens (bytes and merges)
    special: tuple[str, ...]  # the special tokens the model has an id for, in id order ("<|endoftext|>", …)
    unknown: int  # 1 when the model has an unknown id (⟨unk⟩)
    unused: int  # ids with no token


def vocab_parts(cfg: TransformerConfig) -> VocabParts:
    """Count the model's ids by kind, from its config (vocab_map: model id -> tokenizer id) and its encoding."""
    from ..text.subset import subset_meta
    from ..text.tokenizer import BUNDLED, load_encoding

    enc = load_encoding(cfg.encoding)
    ranks = set(enc._mergeable_ranks.values())
    names = {i: name for name, i in enc._special_tokens.items()}
    reals = list(cfg.vocab_map) if cfg.vocab_map else list(range(cfg.vocab_size))
    meta = subset_meta(BUNDLED, cfg.encoding)
    return VocabParts(size=cfg.vocab_size, encoding=cfg.encoding, base=meta["base"] if meta else cfg.encoding,
                      ordinary=sum(r in ranks for r in reals), special=tuple(names[r] for r in sorted(reals)
                                                                            if r in names),
                      unknown=sum(r < 0 for r in reals),
                      unused=sum(r >= 0 and r not in ranks and r not in names for r in reals))
