"""How much cross-attention lands where a task says it should (the diagonal of copy, the anti-diagonal of reverse)."""
from __future__ import annotations

import random

import torch

from ..model.hooks import act_name
from ..model.trace import run_with_trace
from ..model.transformer import Transformer
from ..train.tasks import Example, SeqToSeqTask


def cross_attention(model: Transformer, task: SeqToSeqTask, ex: Example) -> torch.Tensor:
    """(n_layers, Tt, Ts) cross-attention weights of one example, averaged over heads (teacher forcing)."""
    b = task.batch([ex])
    layers = range(model.cfg.n_layers)
    names = [act_name("weights", layer=i, block="cross") for i in layers]
    _, trace = run_with_trace(model, b.src, b.tgt, names=names)
    return torch.stack([trace.attention("cross", i).weights[0].mean(0) for i in layers])


def alignment_mass(model: Transformer, task: SeqToSeqTask, n: int = 100, seed: int = 7) -> list[float]:
    """Per decoder layer: the mean head-averaged weight a query puts on its expected input positions."""
    rng, total = random.Random(seed), torch.zeros(model.cfg.n_layers)
    for _ in range(n):
        ex = task.sample(rng)
        weights, expected = cross_attention(model, task, ex), task.expected_alignment(ex)  # (nl, T, T), (T, T)
        total += (weights * expected).sum(-1).mean(-1)  # (nl,)
    return [round(float(x), 4) for x in total / n]
