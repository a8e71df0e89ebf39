"""The course's building blocks: Embeddings, PositionWiseFFN, AddNorm, encoder/decoder layers and stacks."""
from __future__ import annotations

import math

import torch
from torch import nn

from .attention import MultiHeadAttention
from .config import TransformerConfig
from .hooks import HookPoint
from .norms import make_norm
from .positional import POSITIONS


class Embeddings(nn.Module):
    """Token embedding (optionally × √d_model) plus positions."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        if cfg.embed_std:  # tied embeddings want small vectors (N(0, 1/d)), scaled by √d at the input
            nn.init.normal_(self.tok.weight, std=cfg.embed_std)
        self.scale = math.sqrt(cfg.d_model) if cfg.scale_embedding else 1.0
        self.pos = POSITIONS[cfg.positional](cfg)
        self.dropout = nn.Dropout(cfg.dropout)
        self.hook_tok, self.hook_scaled, self.hook_sum = HookPoint(), HookPoint(), HookPoint()

    def forward(self, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """ids: (B, T); offset: the position of the first one (generation with a key/value cache)."""
        x = self.hook_tok(self.tok(ids))  # (B, T, d)
        x = self.hook_scaled(x * self.scale if self.scale != 1.0 else x)  # (B, T, d)
        return self.dropout(self.hook_sum(self.pos(x, offset)))  # (B, T, d)


ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "gelu_tanh": lambda: nn.GELU(approximate="tanh"), "silu": nn.SiLU}


class PositionWiseFFN(nn.Module):
    """linear2(act(linear1(x))) (the course), or gated: linear2(act(gate(x)) ⊙ linear1(x)) (SwiGLU with SiLU,
    Llama's down(silu(gate) ⊙ up)); applied to every position independently."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        bias = cfg.linear_bias
        self.linear1 = nn.Linear(cfg.d_model, cfg.d_ffn, bias=bias)  # the up-projection
        self.gate = nn.Linear(cfg.d_model, cfg.d_ffn, bias=bias) if cfg.ffn == "gated" else None
        self.act = ACTIVATIONS[cfg.activation]()
        self.linear2 = nn.Linear(cfg.d_ffn, cfg.d_model, bias=bias)  # the down-projection
        self.dropout = nn.Dropout(cfg.dropout)
        if self.gate is not None:  # hook points only where the model has them
            self.hook_gate, self.hook_up = HookPoint(), HookPoint()
        self.hook_hidden, self.hook_out = HookPoint(), HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate is None:
            h = self.hook_hidden(self.act(self.linear1(x)))  # (B, T, d_ffn)
        else:  # each hidden unit: the up-projection scaled by its own gate
            gate, up = self.hook_gate(self.act(self.gate(x))), self.hook_up(self.linear1(x))  # (B, T, d_ffn) each
            h = self.hook_hidden(gate * up)  # (B, T, d_ffn)
        return self.hook_out(self.linear2(self.dropout(h)))  # (B, T, d)


class AddNorm(nn.Module):
    """Residual + LayerNorm: post-norm LN(X + sublayer(X)) (course), or pre-norm X + sublayer(LN(X))."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.ln = make_norm(cfg)  # LayerNorm, or RMSNorm (the name stays the course's)
        self.dropout = nn.Dropout(cfg.dropout)
        self.norm_first = cfg.norm_first
        self.hook_in, self.hook_out = HookPoint(), HookPoint()
        if self.norm_first:  # post-norm's norm output is hook_out itself
            self.hook_normed = HookPoint()

    def read(self, x: torch.Tensor) -> torch.Tensor:
        """What the sub-layer reads: LN(x) in pre-norm order (hook_normed), x itself in post-norm order."""
        return self.hook_normed(self.ln(self.hook_in(x))) if self.norm_first else x  # (B, T, d)

    def forward(self, x: torch.Tensor, sublayer) -> torch.Tensor:
        if self.norm_first:
            return self.hook_out(x + self.dropout(sublayer(self.read(x))))  # (B, T, d)
        return self.hook_out(self.ln(self.hook_in(x + self.dropout(sublayer(x)))))  # (B, T, d)


class EncoderLayer(nn.Module):
    """Self-attention then FFN, each wrapped in Add & Norm."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.self_attn, self.addnorm1 = MultiHeadAttention(cfg, rotary=True), AddNorm(cfg)
        self.ffn, self.addnorm2 = PositionWiseFFN(cfg), AddNorm(cfg)

    def forward(self, x, mask=None):
        x = self.addnorm1(x, lambda h: self.self_attn(h, mask=mask))  # (B, T, d)
        return self.addnorm2(x, self.ffn)  # (B, T, d)


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over the encoder memory (encoder-decoder only), FFN."""

    def __init__(self, cfg: TransformerConfig, cross: bool) -> None:
        super().__init__()
        self.self_attn, self.addnorm1 = MultiHeadAttention(cfg, rotary=True), AddNorm(cfg)
        if cross:  # the course's norm1 / norm2 / norm3
            self.cross_attn, self.addnorm2 = MultiHeadAttention(cfg), AddNorm(cfg)
        self.ffn = PositionWiseFFN(cfg)
        self.addnorm_ffn = f"addnorm{3 if cross else 2}"
        setattr(self, self.addnorm_ffn, AddNorm(cfg))

    def forward(self, x, memory=None, self_mask=None, cross_mask=None, cache=None):
        """cache: this layer's key/value store while generating ({"self": {}, "cross": {}}), else None."""
        c = cache or {}
        x = self.addnorm1(x, lambda h: self.self_attn(h, mask=self_mask, cache=c.get("self")))  # (B, Tt, d)
        if memory is not None:  # queries from the decoder, keys and values from the encoder memory
            x = self.addnorm2(x, lambda h: self.cross_attn(h, kv=memory, mask=cross_mask, cache=c.get("cross"),
                                                            static=True))  # (B, Tt, d)
        return getattr(self, self.addnorm_ffn)(x, self.ffn)  # (B, Tt, d)

    def prefix(self, x: torch.Tensor) -> dict:
        """A key/value store (as generation keeps) of the self-attention's keys and values of x (B, T, d): the rows
        that follow then attend to x's rows without the rest of the layer running on them."""
        _, k, v = self.self_attn.keys_values(self.addnorm1.read(x))  # (B, n_kv, T, hs) each
        return {"self": {"k": k, "v": v}}


class Encoder(nn.Module):
    """Embeddings, n_layers EncoderLayers, optional final LayerNorm."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.embed = Embeddings(cfg)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_layers))
        self.norm = make_norm(cfg) if cfg.final_norm else nn.Identity()
        self.hook_out = HookPoint()

    def forward(self, ids, mask=None):
        x = self.embed(ids)  # (B, Ts, d)
        for layer in self.layers:
            x = layer(x, mask)  # (B, Ts, d)
        return self.hook_out(self.norm(x))  # (B, Ts, d) the memory


class Decoder(nn.Module):
    """Embeddings, n_layers DecoderLayers (with cross-attention if cross), optional final LayerNorm."""

    def __init__(self, cfg: TransformerConfig, cross: bool) -> None:
        super().__init__()
        self.embed = Embeddings(cfg)
        self.layers = nn.ModuleList(DecoderLayer(cfg, cross) for _ in range(cfg.n_layers))
        self.norm = make_norm(cfg) if cfg.final_norm else nn.Identity()
        self.hook_out = HookPoint()

    def forward(self, ids, memory=None, self_mask=None, cross_mask=None, cache=None, offset: int = 0):
        """cache: one key/value store per layer while generating (see KVCache), else None."""
        return self.stack(self.embed(ids, offset), memory, self_mask, cross_mask, cache)  # (B, Tt, d)

    def stack(self, x, memory=None, self_mask=None, cross_mask=None, cache=None, start: int = 0,
              last_only: bool = False):
        """Layers `start`, start + 1, ... and the final norm over the residual stream x (B, Tt, d) entering layer
        `start` (start > 0: what the layers before it wrote is reused, e.g. by the head sweep). last_only (decoder-only,
        no cache): the output at the last position only (B, 1, d); the last layer then runs on that row alone, its
        keys and values of the rows before it computed from them (nothing else of the layer runs there)."""
        end = len(self.layers) - 1 if last_only and start < len(self.layers) else len(self.layers)
        for i in range(start, end):
            x = self.layers[i](x, memory, self_mask, cross_mask, None if cache is None else cache[i])  # (B, Tt, d)
        if end < len(self.layers):
            mask = None if self_mask is None else self_mask[..., -1:, :]  # (B, 1, 1, Tt) the last query's row
            x = self.layers[end](x[:, -1:], None, mask, None, self.layers[end].prefix(x[:, :-1]))  # (B, 1, d)
        elif last_only:
            x = x[:, -1:]  # (B, 1, d) every layer already ran
        return self.hook_out(self.norm(x))  # (B, Tt, d), or (B, 1, d) last_only
