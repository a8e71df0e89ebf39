"""The logits page's computations: one position's next-token distribution, and seeded step-by-step growth."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .generation import Sampling, entropy_bits, next_token_probs, step
from .model import Transformer
from .tokenizer import Token, _group_tokens, _is_partial, display_bytes, load_encoding
from .trace import Trace


@dataclass(frozen=True)
class Distribution:
    """The top tokens of one position (by logit) and the whole distribution's summary numbers."""

    ids: list[int]  # model ids, highest logit first
    logits: list[float]
    probs: list[float]  # after temperature / top-k / top-p
    raw: list[float]  # plain softmax (T = 1)
    entropy: float  # bits, of the distribution after the controls
    total: float  # sum of every probability after the controls (1 up to rounding)
    kept: int  # tokens with probability > 0 after the controls


def decoder_ids(trace: Trace) -> torch.Tensor:
    """(T,) the decoder-side sequence whose positions have logits: the target, or the prompt (decoder-only)."""
    return (trace.tgt_ids if trace.tgt_ids is not None else trace.src_ids)[0]


def distribution(logits: torch.Tensor, s: Sampling, top: int = 10) -> Distribution:
    """(vocab,) logits -> the `top` tokens and the summary numbers; raises SamplingError on bad settings.

    The controls pick the kept tokens (next_token_probs); their probabilities are then computed in float64,
    the same softmax over the kept tokens, so 100k probabilities sum to 1 to the 6 decimals shown.
    """
    logits = logits.float().cpu()
    keep = next_token_probs(logits, s) > 0  # (vocab,)
    z = (logits.double() / s.temperature).masked_fill(~keep, float("-inf"))  # (vocab,)
    probs = torch.softmax(z, dim=-1)  # (vocab,) float64
    raw = torch.softmax(logits.double(), dim=-1)  # (vocab,) float64, T = 1
    order = torch.topk(logits, min(top, logits.numel())).indices  # (top,)
    return Distribution(
        ids=order.tolist(), logits=logits[order].tolist(), probs=probs[order].tolist(), raw=raw[order].tolist(),
        entropy=entropy_bits(probs), total=float(probs.double().sum()), kept=int((probs > 0).sum()),
    )


def grow(model: Transformer, src: list[int], dec: list[int], steps: int, s: Sampling, seed: int = 0) -> list[int]:
    """`steps` new model ids after `dec` (the prompt, or the target given `src`), never past max_len.

    Each step draws with its own generator seeded by (seed, position), so appending 5 tokens at once gives
    the same tokens as appending one 5 times.
    """
    dec, new = list(dec), []
    for _ in range(max(0, min(steps, model.cfg.max_len - len(dec)))):
        gen = torch.Generator().manual_seed(seed * 100_003 + len(dec))
        new.append(step(model, dec, s, src=src, generator=gen))
        dec.append(new[-1])
    return new


def tokens_of(real_ids: list[int], encoding: str) -> list[Token]:
    """Token objects (display text, bytes, UTF-8 groups) for tokenizer ids, e.g. a grown sequence."""
    enc = load_encoding(encoding)

    def raw(i: int) -> bytes | None:
        try:
            return enc.decode_single_token_bytes(int(i))
        except (KeyError, ValueError):  # an id with no token (holes in the vocabulary)
            return None

    raws = [raw(i) for i in real_ids]
    group_of, _ = _group_tokens([r or b"" for r in raws])
    return [Token(id=int(i), raw=r or b"", text=f"<{int(i)}>" if r is None else display_bytes(r), group=g,
                  partial=r is not None and _is_partial(r)) for i, r, g in zip(real_ids, raws, group_of)]
