"""The course's architecture beside a model's, part by part: what today's decoders (Llama, Qwen2) changed and which
page shows each part. Each side is a message code with its parameters (the page writes it in the learner's
language)."""
from __future__ import annotations

from dataclasses import dataclass

from ..model.config import TransformerConfig

COURSE = TransformerConfig()  # the course's Transformer: sinusoidal positions, LayerNorm, ReLU FFN, one K/V per head
ACT_NAMES = {"relu": "ReLU", "gelu": "GELU", "gelu_tanh": "GELU", "silu": "SiLU"}
NORM_NAMES = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}  # the classes' names, as pages print them
PAGES = {"positions": "embeddings", "norm": "ffn", "ffn": "ffn", "attention": "attention", "biases": "model",
         "output": "logits"}


@dataclass(frozen=True)
class PartRow:
    part: str  # positions, norm, ffn, attention, biases, output
    course: tuple[str, dict]  # the course's choice: (message code, parameters)
    this: tuple[str, dict]  # this model's
    page: str  # the page that shows it
    changed: bool


def _describe(cfg: TransformerConfig) -> dict[str, tuple[str, dict]]:
    norm_name = NORM_NAMES[cfg.norm]
    return {
        "positions": (f"arch_pos_{cfg.positional}", {"base": f"{cfg.rope_theta:,.0f}"}),
        "norm": (f"arch_norm_{cfg.norm}_{'pre' if cfg.norm_first else 'post'}", {}),
        "ffn": (f"arch_ffn_{cfg.ffn}", {"act": ACT_NAMES[cfg.activation], "d_ffn": cfg.d_ffn,
                                        "swiglu": " (SwiGLU)" if cfg.activation == "silu" else ""}),
        "attention": ("arch_attn_mha" if cfg.kv_heads == cfg.n_heads else "arch_attn_gqa",
                      {"h": cfg.n_heads, "kv": cfg.kv_heads}),
        "biases": (f"arch_bias_{int(cfg.qkv_bias)}{int(cfg.linear_bias)}", {}),
        "output": (f"arch_out_{'tied' if cfg.tie_embeddings else 'own'}_{'norm' if cfg.final_norm else 'plain'}",
                   {"norm": norm_name}),
    }


def architecture_rows(cfg: TransformerConfig) -> list[PartRow]:
    """One row per part that today's decoders changed: the course's choice, this model's, and its page."""
    # the course's design at this model's sizes (any head count: d_model goes with it)
    course = _describe(COURSE.replace(d_model=cfg.d_model, d_ffn=cfg.d_ffn, n_heads=cfg.n_heads))
    this = _describe(cfg)
    return [PartRow(part, course[part], this[part], PAGES[part], course[part] != this[part]) for part in PAGES]
