"""Next-token distributions (temperature, top-k, top-p), entropy, and step-by-step generation."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .model import Transformer
from .trace import run


class SamplingError(ValueError):
    """Impossible sampling settings (the message says which)."""


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    greedy: bool = False

    def validate(self) -> None:
        if not (0.01 <= self.temperature <= 100.0):
            raise SamplingError("temperature must be between 0.01 and 100")
        if self.top_k < 0:
            raise SamplingError("top-k must be 0 (off) or a positive number of tokens")
        if not (0.0 < self.top_p <= 1.0):
            raise SamplingError("top-p must be in (0, 1]")


def next_token_probs(logits: torch.Tensor, s: Sampling) -> torch.Tensor:
    """(vocab,) logits -> (vocab,) probabilities after temperature, top-k and top-p (filtered ones are 0)."""
    s.validate()
    z = logits.float() / s.temperature
    if s.top_k:
        kth = torch.topk(z, min(s.top_k, z.numel())).values[-1]
        z = z.masked_fill(z < kth, float("-inf"))
    probs = torch.softmax(z, dim=-1)
    if s.top_p < 1.0:
        sorted_p, order = probs.sort(descending=True)
        keep_sorted = sorted_p.cumsum(0) - sorted_p < s.top_p  # keep until the mass reaches top_p
        keep = torch.zeros_like(probs, dtype=torch.bool).scatter(0, order, keep_sorted)
        probs = probs.masked_fill(~keep, 0.0)
        probs = probs / probs.sum()
    return probs


def entropy_bits(probs: torch.Tensor) -> float:
    """Shannon entropy in bits of a probability vector (0·log 0 = 0)."""
    p = probs[probs > 0].double()
    return float(-(p * p.log()).sum() / math.log(2))


def choose(probs: torch.Tensor, s: Sampling, generator: torch.Generator | None = None) -> int:
    """Greedy argmax or a sample from probs."""
    if s.greedy:
        return int(probs.argmax())
    return int(torch.multinomial(probs, 1, generator=generator))


def step(model: Transformer, dec: list[int], s: Sampling, *, src: list[int] | None = None,
         generator: torch.Generator | None = None) -> int:
    """The next model id after `dec` (its last max_len tokens; encoder-decoder: the target, given src)."""
    window = torch.tensor([dec[-model.cfg.max_len:]])  # (1, T)
    if model.is_encoder_decoder:
        logits = run(model, torch.tensor([src[-model.cfg.max_len:]]), window)  # (1, T, vocab)
    else:
        logits = run(model, window)  # (1, T, vocab)
    return choose(next_token_probs(logits[0, -1].float().cpu(), s), s, generator)


def generate(model: Transformer, ids: list[int], steps: int, s: Sampling, *, src: list[int] | None = None,
             seed: int = 0) -> list[int]:
    """Append `steps` tokens to ids (decoder-only: the prompt; encoder-decoder: the target, given src)."""
    gen = torch.Generator().manual_seed(seed)
    ids = list(ids)
    for _ in range(steps):
        ids.append(step(model, ids, s, src=src, generator=gen))
    return ids
