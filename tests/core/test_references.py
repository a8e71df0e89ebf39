"""Our attention and layers against PyTorch's own implementations (code nobody here wrote), weights copied."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_core import (
    DecoderLayer,
    EncoderLayer,
    MultiHeadAttention,
    attention,
    capture,
    preset,
)
from transformer_core.model.hooks import name_hook_points
from transformer_core.model.masks import padding_mask, subsequent_mask

CFG = preset("tiny")  # d_model 16, 2 heads, d_ffn 32, dropout 0
B, TQ, TK = 3, 5, 7
SRC_LENGTHS = torch.tensor([7, 4, 1])
TGT_LENGTHS = torch.tensor([5, 3, 2])
ATOL = 1e-5


def seeded(seed=0):
    torch.manual_seed(seed)


def causal(T):
    return subsequent_mask(T)[None, None]  # (1, 1, T, T) True = attend


def key_padding(lengths, T):
    return padding_mask(lengths, T)[:, None, None, :]  # (B, 1, 1, T) True = attend


def close(actual, expected):
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=1e-5)


# --- attention() vs F.scaled_dot_product_attention -------------------------------------------------------

SDPA_MASKS = {
    "none": lambda: None,
    "causal": lambda: causal(TQ).expand(B, 1, TQ, TQ),
    "padding": lambda: key_padding(torch.tensor([5, 3, 1]), TQ),
    "both": lambda: causal(TQ) & key_padding(torch.tensor([5, 3, 1]), TQ),
}


@pytest.mark.parametrize("mode", sorted(SDPA_MASKS))
def test_attention_equals_scaled_dot_product_attention(mode):
    seeded(1)
    q, k, v = (torch.randn(B, 2, TQ, 8) for _ in range(3))
    mask = SDPA_MASKS[mode]()
    ours, weights = attention(q, k, v, mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # bool: True = take part
    close(ours, ref)
    close(weights.sum(-1), torch.ones(B, 2, TQ))


def test_attention_causal_equals_sdpa_is_causal():
    seeded(2)
    q, k, v = (torch.randn(2, 2, TQ, 8) for _ in range(3))
    close(attention(q, k, v, causal(TQ))[0], F.scaled_dot_product_attention(q, k, v, is_causal=True))


# --- MultiHeadAttention vs nn.MultiheadAttention ---------------------------------------------------------


def copy_mha(ours: MultiHeadAttention, ref: nn.MultiheadAttention) -> None:
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.W_q.weight, ours.W_k.weight, ours.W_v.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.W_q.bias, ours.W_k.bias, ours.W_v.bias]))
        ref.out_proj.weight.copy_(ours.W_o.weight)
        ref.out_proj.bias.copy_(ours.W_o.bias)


def mha_pair(seed=3):
    seeded(seed)
    ours = MultiHeadAttention(CFG).eval()
    name_hook_points(ours)  # a standalone module: its hook points get their bare names (hook_weights)
    ref = nn.MultiheadAttention(CFG.d_model, CFG.n_heads, dropout=0.0, batch_first=True).eval()
    copy_mha(ours, ref)
    return ours, ref


def run_ours_mha(ours, x, kv=None, mask=None):
    with capture({"hook_weights"}) as store:
        out = ours(x, kv=kv, mask=mask)
    return out, store["hook_weights"]


def test_self_attention_without_mask_equals_nn_multihead_attention():
    ours, ref = mha_pair()
    x = torch.randn(B, TQ, CFG.d_model)
    out, weights = run_ours_mha(ours, x)
    ref_out, ref_weights = ref(x, x, x, average_attn_weights=False)
    close(out, ref_out)
    close(weights, ref_weights)


def test_self_attention_with_causal_mask_equals_nn_multihead_attention():
    ours, ref = mha_pair()
    x = torch.randn(B, TQ, CFG.d_model)
    out, weights = run_ours_mha(ours, x, mask=causal(TQ).expand(B, 1, TQ, TQ))
    # nn.MultiheadAttention: True = NOT allowed, so invert ours
    ref_out, ref_weights = ref(x, x, x, attn_mask=~subsequent_mask(TQ), average_attn_weights=False)
    close(out, ref_out)
    close(weights, ref_weights)


def test_self_attention_with_padding_mask_equals_nn_multihead_attention():
    ours, ref = mha_pair()
    x = torch.randn(B, TK, CFG.d_model)
    out, weights = run_ours_mha(ours, x, mask=key_padding(SRC_LENGTHS, TK))
    ref_out, ref_weights = ref(
        x, x, x, key_padding_mask=~padding_mask(SRC_LENGTHS, TK), average_attn_weights=False
    )
    close(out, ref_out)
    close(weights, ref_weights)


def test_self_attention_with_causal_and_padding_mask_equals_nn_multihead_attention():
    ours, ref = mha_pair()
    x = torch.randn(B, TQ, CFG.d_model)
    out, weights = run_ours_mha(ours, x, mask=causal(TQ) & key_padding(TGT_LENGTHS, TQ))
    ref_out, ref_weights = ref(
        x, x, x, attn_mask=~subsequent_mask(TQ), key_padding_mask=~padding_mask(TGT_LENGTHS, TQ),
        average_attn_weights=False,
    )
    close(out, ref_out)
    close(weights, ref_weights)


def test_cross_attention_reads_memory_like_nn_multihead_attention():
    ours, ref = mha_pair()
    x, memory = torch.randn(B, TQ, CFG.d_model), torch.randn(B, TK, CFG.d_model)
    out, weights = run_ours_mha(ours, x, kv=memory, mask=key_padding(SRC_LENGTHS, TK))
    ref_out, ref_weights = ref(
        x, memory, memory, key_padding_mask=~padding_mask(SRC_LENGTHS, TK), average_attn_weights=False
    )
    assert weights.shape == (B, CFG.n_heads, TQ, TK)
    close(out, ref_out)
    close(weights, ref_weights)


# --- EncoderLayer / DecoderLayer vs nn.TransformerEncoderLayer / nn.TransformerDecoderLayer --------------


def copy_linear(dst: nn.Linear, src: nn.Linear) -> None:
    with torch.no_grad():
        dst.weight.copy_(src.weight)
        dst.bias.copy_(src.bias)


def copy_norm(dst: nn.LayerNorm, src: nn.LayerNorm) -> None:
    with torch.no_grad():
        dst.weight.copy_(src.weight)
        dst.bias.copy_(src.bias)


def randomise(module: nn.Module) -> None:
    """Give LayerNorms non-trivial weights too, so copying them is actually tested."""
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn_like(p))


def encoder_pair(norm_first: bool):
    cfg = CFG.replace(norm_first=norm_first)
    seeded(4)
    ours = EncoderLayer(cfg).eval()
    randomise(ours)
    ref = nn.TransformerEncoderLayer(
        cfg.d_model, cfg.n_heads, dim_feedforward=cfg.d_ffn, dropout=0.0, activation="relu",
        layer_norm_eps=cfg.layer_norm_eps, batch_first=True, norm_first=norm_first,
    ).eval()
    copy_mha(ours.self_attn, ref.self_attn)
    copy_linear(ref.linear1, ours.ffn.linear1)
    copy_linear(ref.linear2, ours.ffn.linear2)
    copy_norm(ref.norm1, ours.addnorm1.ln)
    copy_norm(ref.norm2, ours.addnorm2.ln)
    return ours, ref


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_encoder_layer_equals_nn_transformer_encoder_layer_with_padding(norm_first):
    ours, ref = encoder_pair(norm_first)
    x = torch.randn(B, TK, CFG.d_model)
    out = ours(x, key_padding(SRC_LENGTHS, TK))
    ref_out = ref(x, src_key_padding_mask=~padding_mask(SRC_LENGTHS, TK))
    close(out, ref_out)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_encoder_layer_equals_nn_transformer_encoder_layer_fast_path(norm_first):
    """Under inference mode PyTorch may take its fused fast path; still the same numbers at real tokens."""
    ours, ref = encoder_pair(norm_first)
    x = torch.randn(B, TK, CFG.d_model)
    real = padding_mask(SRC_LENGTHS, TK)
    with torch.inference_mode():
        out = ours(x, key_padding(SRC_LENGTHS, TK))
        ref_out = ref(x, src_key_padding_mask=~real)
    close(out[real], ref_out[real])


def decoder_pair(norm_first: bool):
    cfg = CFG.replace(norm_first=norm_first)
    seeded(5)
    ours = DecoderLayer(cfg, cross=True).eval()
    randomise(ours)
    ref = nn.TransformerDecoderLayer(
        cfg.d_model, cfg.n_heads, dim_feedforward=cfg.d_ffn, dropout=0.0, activation="relu",
        layer_norm_eps=cfg.layer_norm_eps, batch_first=True, norm_first=norm_first,
    ).eval()
    copy_mha(ours.self_attn, ref.self_attn)
    copy_mha(ours.cross_attn, ref.multihead_attn)
    copy_linear(ref.linear1, ours.ffn.linear1)
    copy_linear(ref.linear2, ours.ffn.linear2)
    copy_norm(ref.norm1, ours.addnorm1.ln)
    copy_norm(ref.norm2, ours.addnorm2.ln)
    copy_norm(ref.norm3, ours.addnorm3.ln)
    return ours, ref


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_decoder_layer_equals_nn_transformer_decoder_layer_with_causal_and_memory_padding(norm_first):
    ours, ref = decoder_pair(norm_first)
    x, memory = torch.randn(B, TQ, CFG.d_model), torch.randn(B, TK, CFG.d_model)
    out = ours(x, memory, self_mask=causal(TQ), cross_mask=key_padding(SRC_LENGTHS, TK))
    ref_out = ref(
        x, memory, tgt_mask=~subsequent_mask(TQ), memory_key_padding_mask=~padding_mask(SRC_LENGTHS, TK),
    )
    close(out, ref_out)


def test_decoder_cross_attention_depends_on_the_encoder_memory():
    """The seed's bug fed X to its 'cross' attention; ours must change when the memory changes."""
    ours, _ = decoder_pair(False)
    x = torch.randn(1, TQ, CFG.d_model)
    a = ours(x, torch.randn(1, TK, CFG.d_model), self_mask=causal(TQ))
    b = ours(x, torch.randn(1, TK, CFG.d_model), self_mask=causal(TQ))
    assert not torch.allclose(a, b)
