"""The next token: temperature / top-k / top-p, the distribution the logits page shows, and the one
generation loop (step by step, greedy or sampled) that the pages, the tasks and notebooks all use."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..errors import SamplingError
from ..model import kv_cache
from ..model.hooks import editing
from ..model.trace import run
from ..model.transformer import Transformer


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    greedy: bool = False
    banned: tuple[int, ...] = ()  # model ids never chosen (e.g. the unknown token of a compacted vocabulary)

    def validate(self) -> None:
        if not (math.isfinite(self.temperature) and 0.01 <= self.temperature <= 100.0):
            raise SamplingError("sampling_temperature", lo=0.01, hi=100)
        if self.top_k < 0:
            raise SamplingError("sampling_top_k")
        if not (0.0 < self.top_p <= 1.0):
            raise SamplingError("sampling_top_p")


GREEDY = Sampling(greedy=True)


def next_token_probs(logits: torch.Tensor, s: Sampling) -> torch.Tensor:
    """(vocab,) logits -> (vocab,) probabilities after temperature, top-k and top-p (filtered ones are 0)."""
    s.validate()
    z = without_banned(logits.float(), s) / s.temperature
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


def without_banned(logits: torch.Tensor, s: Sampling) -> torch.Tensor:
    """(..., vocab) logits with the banned ids at −∞ (probability 0 after any control, never the argmax)."""
    if not s.banned:
        return logits
    return logits.index_fill(-1, torch.tensor(s.banned, dtype=torch.long, device=logits.device), float("-inf"))


def entropy_bits(probs: torch.Tensor) -> float:
    """Shannon entropy in bits of a probability vector (0·log 0 = 0)."""
    p = probs[probs > 0].double()
    return float(-(p * p.log()).sum() / math.log(2))


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


def distribution(logits: torch.Tensor, s: Sampling = Sampling(), top: int = 10) -> Distribution:
    """(vocab,) logits -> the `top` tokens and the summary numbers; raises SamplingError on bad settings.

    The controls pick the kept tokens (next_token_probs); their probabilities are then computed in float64,
    the same softmax over the kept tokens, so 100k probabilities sum to 1 to the 6 decimals shown.
    """
    logits = logits.float().cpu()
    keep = next_token_probs(logits, s) > 0  # (vocab,)
    z = (logits.double() / s.temperature).masked_fill(~keep, float("-inf"))  # (vocab,) banned ids are not kept
    probs = torch.softmax(z, dim=-1)  # (vocab,) float64
    raw = torch.softmax(logits.double(), dim=-1)  # (vocab,) float64, T = 1
    order = torch.tensor(top_ids(logits, top), dtype=torch.long)  # (top,)
    return Distribution(
        ids=order.tolist(), logits=logits[order].tolist(), probs=probs[order].tolist(), raw=raw[order].tolist(),
        entropy=entropy_bits(probs), total=float(probs.double().sum()), kept=int((probs > 0).sum()),
    )


def top_ids(logits: torch.Tensor, n: int) -> list[int]:
    """The ids of the n highest (vocab,) logits, highest first: the order of the Logits page's table and bars."""
    return torch.topk(logits.float().cpu(), min(n, logits.numel())).indices.tolist()


def choose(probs: torch.Tensor, s: Sampling, generator: torch.Generator | None = None) -> int:
    """Greedy argmax or a sample from (vocab,) probs."""
    if s.greedy:
        return int(probs.argmax())
    return int(torch.multinomial(probs, 1, generator=generator))


def generate_batch(model: Transformer, dec: torch.Tensor, steps: int, s: Sampling = GREEDY, *,
                   src: torch.Tensor | None = None, src_lengths: torch.Tensor | None = None,
                   seed: int = 0, stop_id: int | None = None) -> torch.Tensor:
    """(B, steps) new model ids after `dec` (B, T): the prompt, or (encoder-decoder) the target given `src`.
    With `stop_id` (an end-of-text token) it stops early once every row has written it (fewer columns then).

    The model sees the last max_len tokens. Each step draws with a generator seeded by (seed, position), so
    appending five tokens at once gives the same tokens as appending one five times.
    """
    s.validate()
    dec = dec.cpu()
    steps, start = max(0, steps), dec.size(1)
    done = torch.zeros(dec.size(0), dtype=torch.bool)  # (B,) rows that wrote stop_id
    device = next(model.parameters()).device
    # a key/value cache unless the window must slide, or an intervention edits per-position values (a cached step
    # sees only the newest position, so e.g. a mean over positions would change meaning)
    cached = dec.size(1) + steps <= model.cfg.max_len and not editing()
    if cached:
        cache = kv_cache.start(model, None if src is None else src[:, -model.cfg.max_len:].to(device),
                               None if src_lengths is None else src_lengths.to(device))
        fresh = dec.to(device)  # the first step reads the whole prompt, then one token at a time
    for _ in range(steps):
        if cached:
            last = kv_cache.step(model, cache, fresh, last_only=True)[:, -1].float().cpu()  # (B, vocab)
        else:
            window = dec[:, -model.cfg.max_len:]  # (B, T)
            logits = run(model, None if src is None else src[:, -model.cfg.max_len:], window,
                         src_lengths=src_lengths) if model.is_encoder_decoder else run(model, window)
            last = logits[:, -1].float().cpu()  # (B, vocab)
        gen = torch.Generator().manual_seed(seed * 100_003 + dec.size(1))
        new = ([choose(next_token_probs(row, s), s, gen) for row in last] if not s.greedy
               else without_banned(last, s).argmax(-1).tolist())
        dec = torch.cat([dec, torch.tensor(new, dtype=torch.long)[:, None]], dim=1)  # (B, T + 1)
        fresh = dec[:, -1:].to(device)
        if stop_id is not None:
            done |= dec[:, -1] == stop_id
            if bool(done.all()):
                break
    return dec[:, start:]


def generate(model: Transformer, dec: list[int], steps: int, s: Sampling = GREEDY, *, src: list[int] | None = None,
             seed: int = 0, stop_at_end: bool = True) -> list[int]:
    """Up to `steps` new model ids after `dec` (one sequence), never past the model's max_len; it stops after writing
    the end-of-text token (which it returns) unless stop_at_end is False."""
    from ..text.inputs import end_of_text_id

    steps = max(0, min(steps, model.cfg.max_len - len(dec)))
    src_t = None if src is None else torch.tensor([src])
    stop = end_of_text_id(model) if stop_at_end else None
    return generate_batch(model, torch.tensor([dec]), steps, s, src=src_t, seed=seed, stop_id=stop)[0].tolist()


def next_tokens(model: Transformer, text: str, tgt_text: str | None = None, top: int = 10,
                s: Sampling = Sampling()) -> list[tuple[str, float]]:
    """(token, probability) of the `top` most likely next tokens after a text (notebook helper)."""
    from ..text.inputs import prepare, token_labels

    prep = prepare(model, text, tgt_text)
    logits = run(model, prep.src_ids, prep.tgt_ids)[0, -1]  # (vocab,)
    d = distribution(logits, s, top)
    return list(zip(token_labels(model, d.ids), d.probs))


def generate_text(model: Transformer, text: str, steps: int = 20, s: Sampling = GREEDY, *,
                  tgt_text: str | None = None, seed: int = 0) -> str:
    """The text the model writes after `text` (encoder-decoder: after the target, given the text)."""
    from ..text.inputs import model_text, prepare

    prep = prepare(model, text, tgt_text)
    src = prep.src_ids[0].tolist()
    dec = src if prep.tgt_ids is None else prep.tgt_ids[0].tolist()
    new = generate(model, dec, steps, s, src=None if prep.tgt_ids is None else src, seed=seed)
    return model_text(model, new)
