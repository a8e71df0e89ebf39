"""The Transformer: encoder-decoder (the course's translation model) or decoder-only (its small GPT)."""
from __future__ import annotations

import torch
from torch import nn

from ..errors import InputError
from .config import TransformerConfig
from .device import pick_device
from .hooks import HookPoint, name_hook_points
from .layers import Decoder, Encoder
from .masks import attention_mask, block_mode

DEFAULT_MASKS = {"enc_self": "padding", "dec_self": "both", "cross": "padding"}


class Transformer(nn.Module):
    """forward(src, tgt) -> logits (B, Tt, vocab); decoder-only models read `src` alone."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.encoder = Encoder(cfg) if cfg.arch == "encoder_decoder" else None
        self.decoder = Decoder(cfg, cross=self.encoder is not None)
        self.out = nn.Linear(cfg.d_model, cfg.vocab_size, bias=cfg.output_bias)
        if cfg.tie_embeddings:
            self.out.weight = self.decoder.embed.tok.weight
        self.hook_logits = HookPoint()
        self.hook_names = name_hook_points(self)

    @property
    def is_encoder_decoder(self) -> bool:
        return self.encoder is not None

    def check_ids(self, ids: torch.Tensor, what: str) -> None:
        """Clear errors for sequences the model cannot take."""
        if ids.dim() != 2 or ids.size(1) == 0:
            raise InputError("ids_shape", what=what, shape=tuple(ids.shape))
        if ids.size(1) > self.cfg.max_len:
            raise InputError("ids_too_long", what=what, n=ids.size(1), max_len=self.cfg.max_len)
        if ids.device.type == "meta":  # shapes only (memory.py measures forwards there): no values to check
            return
        if int(ids.min()) < 0 or int(ids.max()) >= self.cfg.vocab_size:
            raise InputError("ids_out_of_vocab", what=what, top=self.cfg.vocab_size - 1)

    def forward(self, src, tgt=None, *, src_lengths=None, tgt_lengths=None, masks=None):
        """src: (B, Ts) ids; tgt: (B, Tt) ids (encoder-decoder); lengths: (B,); masks: mode per block."""
        modes = {**DEFAULT_MASKS, **(masks or {})}
        if not self.is_encoder_decoder:  # GPT-like: the one sequence goes through the decoder
            self.check_ids(src, "src")
            B, T = src.shape
            self_mask = attention_mask(modes["dec_self"], B, T, T, src_lengths, src.device)
            return self.hook_logits(self.out(self.decoder(src, None, self_mask)))  # (B, T, vocab)
        if tgt is None:
            raise InputError("needs_target")
        self.check_ids(src, "src")
        self.check_ids(tgt, "tgt")
        (B, Ts), Tt = src.shape, tgt.size(1)
        enc_mask = attention_mask(modes["enc_self"], B, Ts, Ts, src_lengths, src.device)
        memory = self.encoder(src, enc_mask)  # (B, Ts, d)
        dec_mask = attention_mask(modes["dec_self"], B, Tt, Tt, tgt_lengths, tgt.device)
        cross_mask = attention_mask(block_mode("cross", modes["cross"]), B, Tt, Ts, src_lengths, src.device)
        hidden = self.decoder(tgt, memory, dec_mask, cross_mask)  # (B, Tt, d)
        return self.hook_logits(self.out(hidden))  # (B, Tt, vocab)

    def resume(self, x: torch.Tensor, start: int, last_only: bool = False) -> torch.Tensor:
        """Decoder-only: the decoder's output (B, T, d) from the residual stream x (B, T, d) entering decoder layer
        `start` (the embeddings when 0), with the forward's default causal mask; the output layer is left to the
        caller (a metric read at the last position needs one row of logits, not T; with last_only, (B, 1, d): the
        last layer runs on the last row only, see Decoder.stack)."""
        if self.is_encoder_decoder:
            raise ValueError("resume() runs a decoder-only model's stack")
        B, T = x.shape[:2]
        mask = attention_mask(DEFAULT_MASKS["dec_self"], B, T, T, None, x.device)
        return self.decoder.stack(x, None, mask, start=start, last_only=last_only)  # (B, T, d) or (B, 1, d)


def build_model(cfg: TransformerConfig, device: str | torch.device | None = None) -> Transformer:
    """Seeded init on the CPU (same weights on every machine), then moved to the device, in eval mode."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = Transformer(cfg)
    return model.to(pick_device(device)).eval()


COMPONENTS = ("embeddings", "attention", "ffn", "norms", "output")


def component_of(name: str) -> str:
    """Which course component a parameter belongs to."""
    if ".embed." in f".{name}":
        return "embeddings"
    if "attn." in name:
        return "attention"
    if ".ffn." in name:
        return "ffn"
    if name.startswith("out."):
        return "output"
    return "norms"


def param_counts(model: nn.Module) -> dict[str, int]:
    """Parameters per component plus 'total'; shared (tied) tensors counted once, as sum(p.numel())."""
    counts = dict.fromkeys(COMPONENTS, 0)
    for name, p in model.named_parameters():  # named_parameters() skips duplicates of tied weights
        counts[component_of(name)] += p.numel()
    counts["total"] = sum(counts[c] for c in COMPONENTS)
    return counts
