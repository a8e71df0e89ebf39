"""Qwen3 (2025): a Qwen2 block with three changes, each a config choice of our one Transformer: QK-norm (an RMSNorm
over each head's q and k before RoPE, `qk_norm`), no biases on q, k and v, and a head width set on its own
(Qwen3-0.6B: hidden 1024, 16 heads of 128, `d_head`). Everything else (loading, the tokenizer, the download) is
hf_decoder's, which finds this family by its FAMILY.
"""
from __future__ import annotations

from ..errors import ModelSourceError
from .hf_decoder import Family


def _qwen3(hf: dict) -> dict:
    """Qwen3's own fields of a config.json. Its attention_bias covers q, k, v and o while its MLP has none, which our
    one `linear_bias` (o and the FFN together) cannot hold: refused, as a sliding window on any layer is."""
    if hf.get("attention_bias"):
        raise ModelSourceError("hf_config", field="attention_bias")
    if any(kind != "full_attention" for kind in hf.get("layer_types") or ()):
        raise ModelSourceError("hf_config", field="layer_types")
    return {"qkv_bias": False, "linear_bias": False, "qk_norm": True}


FAMILY = Family("qwen3", _qwen3, tensors={"self_attn.q_norm.weight": "self_attn.q_norm.weight",
                                         "self_attn.k_norm.weight": "self_attn.k_norm.weight"},
                hub={"qwen3-0.6b": ("Qwen3-0.6B", "Qwen/Qwen3-0.6B")},
                published=dict(hidden_size=1024, intermediate_size=3072, num_attention_heads=16, num_key_value_heads=8,
                               head_dim=128, num_hidden_layers=28, vocab_size=151936, max_position_embeddings=40960,
                               rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, attention_bias=False,
                               use_sliding_window=False, hidden_act="silu"))
