"""The course's architecture beside a model's, part by part: what today's decoders (Llama, Qwen2) changed and which
page shows each part."""
from __future__ import annotations

from dataclasses import dataclass

from ..model.config import TransformerConfig

COURSE = TransformerConfig()  # the course's Transformer: sinusoidal positions, LayerNorm, ReLU FFN, one K/V per head


@dataclass(frozen=True)
class PartRow:
    part: str  # positions, norm, ffn, attention, biases, output
    course: str  # the course's choice, in formula words
    this: str  # this model's
    page: str  # the page that shows it
    changed: bool


def _describe(cfg: TransformerConfig) -> dict[str, str]:
    pos = {"sinusoidal": "sin/cos PE added to x", "learned": "learned table added to x", "none": "none",
           "rope": f"RoPE: q, k rotated (base {cfg.rope_theta:,.0f})"}[cfg.positional]
    norm = ("LayerNorm (x − mean) / std · g + b" if cfg.norm == "layernorm" else "RMSNorm x / rms(x) · g")
    norm += ", pre-norm" if cfg.norm_first else ", post-norm"
    act = {"relu": "ReLU", "gelu": "GELU", "gelu_tanh": "GELU", "silu": "SiLU"}[cfg.activation]
    ffn = (f"W₂ {act}(W₁x), d_ffn {cfg.d_ffn}" if cfg.ffn == "mlp"
           else f"down({act}(gate x) ⊙ up x), d_ffn {cfg.d_ffn}" + (" (SwiGLU)" if cfg.activation == "silu" else ""))
    attn = (f"{cfg.n_heads} heads, each its own K and V" if cfg.kv_heads == cfg.n_heads
            else f"{cfg.n_heads} query heads share {cfg.kv_heads} K/V heads (GQA)")
    biases = {(True, True): "every linear", (True, False): "q, k, v only", (False, True): "W_o and FFN only",
              (False, False): "none"}[(cfg.qkv_bias, cfg.linear_bias)]
    out = ("tied to the embedding" if cfg.tie_embeddings else "its own matrix") + (
        f", final {'RMSNorm' if cfg.norm == 'rmsnorm' else 'LayerNorm'}" if cfg.final_norm else "")
    return {"positions": pos, "norm": norm, "ffn": ffn, "attention": attn, "biases": biases, "output": out}


PAGES = {"positions": "embeddings", "norm": "ffn", "ffn": "ffn", "attention": "attention", "biases": "model",
         "output": "logits"}


def architecture_rows(cfg: TransformerConfig) -> list[PartRow]:
    """One row per part that today's decoders changed: the course's choice, this model's, and its page."""
    course, this = _describe(COURSE.replace(d_ffn=cfg.d_ffn, n_heads=cfg.n_heads)), _describe(cfg)
    return [PartRow(part, course[part], this[part], PAGES[part], course[part] != this[part]) for part in PAGES]
