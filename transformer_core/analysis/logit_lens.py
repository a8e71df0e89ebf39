"""The logit lens: read the decoder's residual stream after the embeddings and after each layer as if it were
the last one (the final LayerNorm when the model has one, then the output layer, then softmax).

The residual after decoder layer l is the output of its last Add & Norm (post-norm: LN(x + FFN(x)); pre-norm:
x + FFN(LN(x))), so the lens of the last layer is exactly the model's own logits.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import InputError
from ..model.hooks import act_name
from ..model.trace import Trace, run_with_trace
from ..model.transformer import Transformer
from ..text.inputs import Prepared, sequence_labels, token_labels
from .blocks import check_top

EMBEDDINGS = -1  # the row of the embeddings (before layer 0)


def residual_names(model: Transformer) -> list[str]:
    """Hook names of the decoder's residual stream: the embeddings (with positions), then each layer's output."""
    cross = model.is_encoder_decoder
    return [act_name("embed", side="decoder")] + [
        act_name("addnorm_out", layer=i, block="dec_ffn", cross=cross) for i in range(model.cfg.n_layers)]


def lens_logits(model: Transformer, resid: torch.Tensor) -> torch.Tensor:
    """(..., d) residual -> (..., vocab) logits: final norm (when cfg.final_norm) then the output layer."""
    device = next(model.parameters()).device
    with torch.inference_mode():
        return model.out(model.decoder.norm(resid.to(device)))  # (..., vocab)


@dataclass(frozen=True)
class LogitLens:
    """Top-k tokens per (row, position): row 0 reads the embeddings, row l + 1 the output of layer l."""

    layers: list[int]  # (R,) EMBEDDINGS (-1), 0, 1, ..., n_layers - 1
    labels: list[str]  # (T,) the decoder's tokens (what each position has read so far ends here)
    ids: torch.Tensor  # (R, T, k) model ids, most likely first
    probs: torch.Tensor  # (R, T, k) float32 softmax probabilities
    tokens: list[list[list[str]]]  # (R, T, k) how the tokenizer shows ids
    final_prob: torch.Tensor  # (R, T) float32: each row's probability of the model's own top token (last row's)
    final_rank: torch.Tensor  # (R, T) int64: that token's rank in each row (1 = the row's top token)
    kl: torch.Tensor  # (R, T) float32: KL(final ‖ row) in nats, how far each row's whole distribution is from the end
    first: int = 0  # the text position of column 0 (a lens of a window of the text: positions first .. first + T - 1)

    def table(self) -> list[dict]:
        """One row per (layer, position, rank)."""
        return [{"layer": layer, "position": t, "token": self.labels[t], "rank": r + 1,
                 "next": self.tokens[i][t][r], "id": int(self.ids[i, t, r]), "prob": float(self.probs[i, t, r])}
                for i, layer in enumerate(self.layers) for t in range(len(self.labels))
                for r in range(self.ids.size(-1))]

    def settled_rows(self) -> torch.Tensor:
        """(T,) int64: for each position, the first row from which the top token is the model's final one in every
        row below (0 = already after the embeddings)."""
        same = self.ids[:, :, 0] == self.ids[-1:, :, 0]  # (R, T); the last row is always True
        run = same.flip(0).long().cumprod(0).sum(0)  # (T,) rows, counted from the bottom, that agree unbroken
        return len(self.layers) - run

    def arrays(self) -> dict[str, np.ndarray]:
        return {"layers": np.array(self.layers, dtype=np.int64), "ids": self.ids.numpy(),
                "probs": self.probs.numpy(), "final_prob": self.final_prob.numpy(),
                "final_rank": self.final_rank.numpy(), "kl": self.kl.numpy()}


def lens_from_trace(model: Transformer, trace: Trace, k: int = 5, window: tuple[int, int] | None = None) -> LogitLens:
    """The logit lens of batch item 0 of a trace that kept the residual hooks (residual_names); computed once
    per trace, k and window (the trace is shared by every page and session that traced this input). `window`
    (first, end): only those positions, each read exactly as in the whole lens (a position's reading depends on
    its own residual alone): a page that draws 48 positions of a long text reads no more through the output layer."""
    k, names = check_top(k, hi=100), kept_residuals(model, trace)
    window = lens_window(trace, window)
    return trace.memo(("logit_lens", k, window), lambda: _lens(model, trace, names, k, window=window))


def lens_window(trace: Trace, window: tuple[int, int] | None) -> tuple[int, int] | None:
    """A window (first, end) checked against the trace's decoder positions; None for the whole text."""
    if window is None:
        return None
    T = trace.decoder_ids.numel()
    first, end = (int(w) for w in window)
    if not 0 <= first < end <= T:
        raise InputError("dla_range", last=T - 1)
    return None if (first, end) == (0, T) else (first, end)


def kept_residuals(model: Transformer, trace: Trace) -> list[str]:
    """residual_names(model), each checked to be in the trace (InputError `trace_missing` naming the first not)."""
    names = residual_names(model)
    missing = [n for n in names if n not in trace]
    if missing:
        raise InputError("trace_missing", name=missing[0])
    return names


CHUNK_BYTES = 64 * 2**20  # the lens reads several rows per matrix product (faster on a CPU), up to this many bytes


def _row_logits(model: Transformer, trace: Trace, names: list[str], translate=None, cols: slice = slice(None)):
    """(T, vocab) float32 logits of each row, the last layer first: the model's own logits when the trace kept
    them, else its residual through the final norm and the output layer, a few rows per product (a product of
    8 rows × 64 positions ran 1.7x faster per row than one row alone: SmolLM2-135M's 49,152-token output layer).
    `translate(rows, resid)`: the tuned lens's maps of the rows (their indices, 0 = the embeddings) applied first;
    `cols`: the positions read."""
    names = list(reversed(names))
    if "hook_logits" in trace:
        yield trace.logits_at(cols).float()  # (T, vocab): only the positions read
        names = names[1:]
    T = trace[names[0]][:, cols].size(1) if names else 1
    at_once = max(1, CHUNK_BYTES // (4 * T * model.cfg.vocab_size))
    last = model.cfg.n_layers  # the row index of the last layer (the model's own logits: never translated)
    for i in range(0, len(names), at_once):
        resid = torch.cat([trace[n][:1, cols] for n in names[i:i + at_once]])  # (rows, T, d)
        if translate is not None:  # names[i] is row `last - i - skipped` (the last layer's logits skipped or not)
            skipped = int("hook_logits" in trace)
            resid = translate([last - skipped - i - j for j in range(len(resid))], resid)
        yield from lens_logits(model, resid).float().cpu()  # rows × (T, vocab)


def _lens(model: Transformer, trace: Trace, names: list[str], k: int, translate=None,
          window: tuple[int, int] | None = None) -> LogitLens:
    cols = slice(*window) if window else slice(None)
    ids, probs, final, ranks, kls, own, p_last, neg_entropy = [], [], [], [], [], None, None, None
    for logits in _row_logits(model, trace, names, translate, cols):  # the last layer first: its top is the model's
        # log-softmax of the few entries read, not softmax over the whole vocabulary (100k for cl100k_base)
        norm = torch.logsumexp(logits, dim=-1, keepdim=True)  # (T, 1)
        own = logits.argmax(-1) if own is None else own  # (T,)
        top = torch.topk(logits, min(k, logits.size(-1)))  # (T, k)
        ids.insert(0, top.indices)
        probs.insert(0, (top.values - norm).exp())
        own_logit = logits.gather(-1, own[:, None])  # (T, 1)
        final.insert(0, (own_logit - norm)[:, 0].exp())  # (T,)
        ranks.insert(0, (logits > own_logit).sum(-1) + 1)  # (T,)
        if p_last is None:  # the model's own distribution p (once, not once per row)
            p_last = (logits - norm).exp()  # (T, vocab)
            neg_entropy = (p_last * (logits - norm)).sum(-1)  # (T,) Σ p log p
            kls.insert(0, torch.zeros_like(neg_entropy))  # KL(p ‖ p) (the two sums below left 4e-5 nats of float32)
        else:  # KL(p ‖ this row) = Σ p log p − Σ p (logits − norm): a dot product per position, no (T, vocab) temporary
            kls.insert(0, (neg_entropy - torch.einsum("tv,tv->t", p_last, logits) + norm[:, 0]).clamp_min(0.0))
    ids_t = torch.stack(ids)  # (R, T, k)
    # one call for every row (a predicted piece of a character in the text is named by it, "买 1/2")
    flat = iter(token_labels(model, ids_t.flatten().tolist(), trace.decoder_ids.tolist()))
    tokens = [[[next(flat) for _ in row] for row in layer] for layer in ids_t]  # (R, T, k) strings
    return LogitLens(layers=[EMBEDDINGS, *range(model.cfg.n_layers)],
                     labels=sequence_labels(model, trace.decoder_ids.tolist())[cols], ids=ids_t,
                     probs=torch.stack(probs), tokens=tokens, final_prob=torch.stack(final),
                     final_rank=torch.stack(ranks), kl=torch.stack(kls).float(), first=cols.start or 0)


def logit_lens(model: Transformer, prep: Prepared, k: int = 5) -> LogitLens:
    """Top-k next tokens after the embeddings and after every decoder layer, at every decoder position."""
    _, trace = run_with_trace(model, prep.src_ids, prep.tgt_ids, names=residual_names(model))
    return lens_from_trace(model, trace, k)


@dataclass(frozen=True)
class AnswerRow:
    """One answer's first token read through the lens at one position: after the embeddings and after every layer
    (a logit is linear in the stream, so a multi-token answer is followed by its first token here)."""

    token: int  # model id
    position: int
    layers: list[int]  # (R,) EMBEDDINGS (-1), 0, 1, ..., n_layers - 1
    logits: np.ndarray  # (R,) float64: the token's logit read after each row
    probs: np.ndarray  # (R,) float64: its probability
    ranks: np.ndarray  # (R,) int64: its rank (1 = that row's top token)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"layers": np.array(self.layers, dtype=np.int64), "token_ids": np.array([self.token], dtype=np.int64),
                "logits": self.logits, "probs": self.probs, "ranks": self.ranks}


def answer_row(model: Transformer, trace: Trace, position: int, answer, translators=None) -> AnswerRow:
    """The lens's row for an answer (a model id, model ids or text: its first token) at `position` of a trace that
    kept the residual hooks; InputError for a position or an answer the model cannot read. `translators`: the tuned
    lens's (tuned_lens.Translators), applied to each row first (the last layer's row is never translated)."""
    from .answers import as_answer

    token = as_answer(model, answer).first
    names = residual_names(model)
    missing = [n for n in names if n not in trace]
    if missing:
        raise InputError("trace_missing", name=missing[0])
    T = trace[names[0]].size(1)
    if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position < T:
        raise InputError("dla_range", last=T - 1)
    resid = torch.stack([trace[n][0, position] for n in names])  # (R, d)
    if translators is not None:
        with torch.inference_mode():
            resid = translators(list(range(len(names))), resid[:, None].float())[:, 0].to(resid.dtype)  # (R, d)
    logits = lens_logits(model, resid).double().cpu()  # (R, vocab)
    own = logits[:, token]  # (R,)
    probs = torch.softmax(logits, dim=-1)[:, token]  # (R,)
    ranks = (logits > own[:, None]).sum(-1) + 1  # (R,)
    return AnswerRow(token, position, [EMBEDDINGS, *range(model.cfg.n_layers)], own.numpy(), probs.numpy(),
                     ranks.numpy().astype(np.int64))
