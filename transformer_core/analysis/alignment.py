"""How much cross-attention lands where a task says it should (the diagonal of copy, the anti-diagonal of reverse)."""
from __future__ import annotations

import random
import re

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


# ---------------------------------------------------------------- dates: does each output field look at its source?

FIELDS = ("year", "month", "day")


def date_fields(text: str) -> dict[str, tuple[int, int]] | None:
    """Byte spans of year, month and day in an English date ("23 November 2026", "November 23, 2026") or a Chinese
    one ("2026年11月23日", after an optional "="); None when the text is not a date."""
    from ..train.translation import DMY, MDY

    m = re.fullmatch(r"=?(\d{4})年(\d{1,2})月(\d{1,2})日", text)
    if m:  # the Chinese answer: one byte per digit, three per 年 月 日
        spans = {f: m.span(i + 1) for i, f in enumerate(FIELDS)}
        return {f: (len(text[:a].encode()), len(text[:b].encode())) for f, (a, b) in spans.items()}
    for pattern, order in ((DMY, ("day", "month", "year")), (MDY, ("month", "day", "year"))):
        m = pattern.fullmatch(text)
        if m:
            return {f: m.span(i + 1) for i, f in enumerate(order)}  # ASCII: characters are bytes
    return None


def token_fields(raws: list[bytes], spans: dict[str, tuple[int, int]]) -> list[str | None]:
    """The field each token belongs to (its non-space bytes overlap the field's span), or None."""
    out, pos = [], 0
    for raw in raws:
        lo, hi = pos + (len(raw) - len(raw.lstrip())), pos + len(raw)
        out.append(next((f for f, (a, b) in spans.items() if lo < b and a < hi and lo < hi), None))
        pos += len(raw)
    return out


def alignment_rows(src_raws: list[bytes], tgt_raws: list[bytes], src_text: str, tgt_text: str,
                   weights: torch.Tensor) -> list[dict]:
    """For each answer token of a date that belongs to a field: the source token its query attends to most.

    weights (Tt, Ts) of one head. Decoder position q - 1 predicts the token at q, so the row that writes token q is
    q - 1: what the model looks at while choosing that token.
    """
    src_spans, tgt_spans = date_fields(src_text), date_fields(tgt_text)
    if src_spans is None or tgt_spans is None:
        return []
    src_f, tgt_f = token_fields(src_raws, src_spans), token_fields(tgt_raws, tgt_spans)
    rows = []
    for q in range(1, min(len(tgt_raws), weights.size(0) + 1)):
        if tgt_f[q] is None:
            continue
        best = int(weights[q - 1].argmax())
        rows.append({"position": q, "field": tgt_f[q], "source": best, "weight": float(weights[q - 1, best]),
                     "source_field": src_f[best], "hit": src_f[best] == tgt_f[q]})
    return rows


def prep_rows(prep, weights: torch.Tensor) -> list[dict]:
    """alignment_rows of a prepared source and target (text.inputs.Prepared) for one head's weights (Tt, Ts): the
    Attention page's alignment table and the head's `fields` score read these same rows."""
    if prep.tgt is None:
        return []
    return alignment_rows([x.raw for x in prep.src.tokens], [x.raw for x in prep.tgt.tokens], prep.src.text.strip(),
                          prep.tgt.text.strip(), weights)


def field_alignment(prep, weights: torch.Tensor) -> torch.Tensor | None:
    """(nh,) per head of one block's cross-attention weights (nh, Tt, Ts): the share of the answer's field tokens
    whose strongest weight falls on the same field of the source (prep_rows' hits over its rows); None when the
    texts are not both dates (or no answer token belongs to a field)."""
    rows = [prep_rows(prep, weights[h]) for h in range(weights.size(0))]
    if not rows or not rows[0]:
        return None
    return torch.tensor([sum(r["hit"] for r in head) / len(head) for head in rows])


@torch.no_grad()
def date_alignment(model: Transformer, pairs: list[tuple[str, str]]) -> dict:
    """Share of output year / month / day tokens whose strongest cross-attention falls on the matching source
    field, for every (layer, head); the best head, and each layer's best. pairs: (English date, "=" + Chinese)."""
    from ..text.inputs import prepare

    L, H = model.cfg.n_layers, model.cfg.n_heads
    hits, total = torch.zeros(L, H), 0
    names = [act_name("weights", layer=i, block="cross", cross=True) for i in range(L)]
    for src, tgt in pairs:
        prep = prepare(model, src, tgt)
        _, trace = run_with_trace(model, prep.src_ids, prep.tgt_ids, names=names)
        src_raws, tgt_raws = [x.raw for x in prep.src.tokens], [x.raw for x in prep.tgt.tokens]
        for i in range(L):
            w = trace.attention("cross", i).weights[0]  # (H, Tt, Ts)
            for h in range(H):
                rows = alignment_rows(src_raws, tgt_raws, src, tgt, w[h])
                hits[i, h] += sum(r["hit"] for r in rows)
                if i == 0 and h == 0:
                    total += len(rows)
    share = hits / max(total, 1)  # (L, H)
    best = int(share.argmax())
    return {"score": round(float(share.flatten()[best]), 4), "layer": best // H, "head": best % H,
            "tokens": total, "dates": len(pairs), "per_head": [[round(float(x), 4) for x in row] for row in share]}
