"""Which heads matter for this prediction: knock out every head (and every FFN) one at a time and measure a metric
the learner picks, in one picture (layer × head). Each knock-out is one batch item (the edit zeroes, or means, that
head's z only in its own batch item). In a decoder-only model the parts of layer l are one batch that starts from the
intact residual stream entering layer l (the layers before it would compute what the intact run did), and the
residual-stream grid resumes the same way from the row it patches; a metric read at the last position runs the last
layer on that row only (Transformer.resume's last_only). An encoder-decoder runs whole forwards (an encoder head moves
the memory every decoder layer reads). Mean mode sets a part to its mean over the intact run's positions.
bench/sweeps.py times it against one forward per head.

Metrics, read at the last position of the decoder (where the next token is read) or over the whole text:
  logit_diff  logit(A) − logit(B)   "does this head make the model prefer A over B?"
  prob        p(A)
  loss        mean next-token loss over the text (nats per token)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import InputError
from ..model.hooks import act_name, fused_attention, intervene
from ..model.memory import forward_bytes
from ..model.trace import run_with_trace
from ..model.transformer import Transformer
from ..text.inputs import Prepared
from .blocks import kinds, sequence
from .interventions import ABLATION_MODES
from .logit_lens import residual_names
from .surprise import token_nats

METRICS = ("logit_diff", "prob", "loss")
CHUNK_BYTES = 256 * 2**20  # one batched forward holds at most about this much


@dataclass(frozen=True)
class HeadEffects:
    """metric(edited) − metric(intact) for each head ([kind][layer, head]) and each decoder FFN (layer,)."""

    metric: str
    mode: str
    token_a: int | None  # model ids (logit_diff, prob)
    token_b: int | None
    intact: float
    heads: dict[str, np.ndarray]  # kind -> (n_layers, n_heads) change of the metric
    ffn: np.ndarray  # (n_layers,) change when the decoder's FFN of that layer is knocked out

    def largest(self) -> tuple[str, int, int, float]:
        """(kind, layer, head, change) of the head whose knock-out moves the metric most."""
        kind = max(self.heads, key=lambda k: float(np.abs(self.heads[k]).max()))
        layer, head = np.unravel_index(np.abs(self.heads[kind]).argmax(), self.heads[kind].shape)
        return kind, int(layer), int(head), float(self.heads[kind][layer, head])

    def arrays(self) -> dict[str, np.ndarray]:
        out = {f"heads_{k}": v for k, v in self.heads.items()}
        return {**out, "ffn": self.ffn, "intact": np.array([self.intact], dtype=np.float64),
                "tokens": np.array([-1 if x is None else x for x in (self.token_a, self.token_b)], dtype=np.int64)}


def _check(model: Transformer, metric: str, token_a, token_b, ids: torch.Tensor) -> None:
    """InputError for a metric the model cannot be measured on."""
    if metric not in METRICS:
        raise InputError("effects_metric", choices=", ".join(METRICS))
    needs = {"logit_diff": (token_a, token_b), "prob": (token_a,), "loss": ()}[metric]
    if any(not isinstance(x, int) or isinstance(x, bool) or not 0 <= x < model.cfg.vocab_size for x in needs):
        raise InputError("effects_tokens")
    if metric == "loss" and ids.numel() < 2:
        raise InputError("effects_short")


def _metric(metric: str, model: Transformer, hidden: torch.Tensor, ids: torch.Tensor, a: int | None,
            b: int | None) -> torch.Tensor:
    """(B,) the metric of each batch item from the decoder's output hidden (B, T, d) (its final norm applied); ids
    (T,) the decoder sequence. A logit difference or a probability needs one row of logits per item, not T."""
    with torch.inference_mode():
        if metric == "loss":
            return torch.stack([token_nats(row, ids).mean() for row in model.out(hidden).double()]).cpu()  # (B,)
        last = model.out(hidden[:, -1]).double()  # (B, vocab)
        return (last[:, a] - last[:, b] if metric == "logit_diff" else torch.softmax(last, dim=-1)[:, a]).cpu()


def _intact(model: Transformer, prep: Prepared, names: tuple[str, ...] = ()) -> tuple[list, torch.Tensor, dict]:
    """One intact forward: the decoder's residual stream entering each layer and after the last ((1, T, d) each,
    row r enters layer r: residual_names; none for an encoder-decoder, which never resumes), the decoder's output
    (1, T, d), and the hook points `names` besides."""
    rows = [] if model.is_encoder_decoder else residual_names(model)
    out = act_name("stack_out", side="decoder")
    with fused_attention():  # no map kept: the fused kernel (the knock-outs that follow run it too)
        _, trace = run_with_trace(model, prep.src_ids, prep.tgt_ids, names=[*rows, out, *names], stop_early=True)
    p = next(model.parameters())
    return [trace[n].to(p.device, p.dtype) for n in rows], trace[out].to(p.device, p.dtype), \
        {n: trace[n].to(p.device, p.dtype) for n in names}


def _resumed(model: Transformer, x: torch.Tensor, start: int, last_only: bool) -> torch.Tensor:
    """(B, T, d) decoder output from the stream x (B, T, d) entering layer `start` of a decoder-only model: the layers
    before it computed what the intact run did, so they are not run again (hooks inside layer start.. still edit).
    last_only: (B, 1, d), the last position's (a metric read there needs no other row of the last layer)."""
    with torch.inference_mode(), fused_attention():
        return model.resume(x, start, last_only)


def _whole(model: Transformer, prep: Prepared, n: int) -> torch.Tensor:
    """(n, T, d) decoder output of n copies of the input, each edited by the hooks as its batch item says."""
    device, out = next(model.parameters()).device, act_name("stack_out", side="decoder")
    tgt = None if prep.tgt_ids is None else prep.tgt_ids.expand(n, -1)
    _, trace = run_with_trace(model, prep.src_ids.expand(n, -1), tgt, names=[out], stop_early=True)
    return trace[out].to(device)


def head_effects(model: Transformer, prep: Prepared, metric: str = "logit_diff", token_a: int | None = None,
                 token_b: int | None = None, *, mode: str = "zero") -> HeadEffects:
    """Knock out each attention head and each decoder FFN alone; how the metric changes for each."""
    if mode not in ABLATION_MODES:
        raise InputError("ablation_mode", mode=str(mode)[:20], choices=", ".join(ABLATION_MODES))
    ids = sequence(prep, "decoder")  # (T,)
    _check(model, metric, token_a, token_b, ids)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    jobs = [("head", k, layer, h) for k in kinds(model) for layer in range(L) for h in range(H)]
    jobs += [("ffn", "decoder", layer, None) for layer in range(L)]
    stream, hidden, seen = _intact(model, prep, tuple(sorted({_hook(job) for job in jobs})) if mode == "mean" else ())
    means = {n: x.mean(dim=-2, keepdim=True) for n, x in seen.items()}  # over positions: z (1, nh, 1, hs), FFN (1,1,d)
    intact = float(_metric(metric, model, hidden, ids, token_a, token_b)[0])
    chunk = max(1, CHUNK_BYTES // max(1, forward_bytes(model.cfg, prep.src_ids.size(1),
                                                       None if prep.tgt_ids is None else prep.tgt_ids.size(1))))
    # decoder-only: the parts of layer l knocked out together in a batch resumed at layer l; encoder-decoder: whole
    # forwards (an encoder head moves the memory every decoder layer reads)
    groups: dict[int, list[int]] = {}
    for i, (_, _, layer, _) in enumerate(jobs):
        groups.setdefault(-1 if model.is_encoder_decoder else layer, []).append(i)
    changes = np.zeros(len(jobs))
    for start, members in groups.items():
        for first in range(0, len(members), chunk):
            part = members[first:first + chunk]
            with intervene(_edits([jobs[i] for i in part], means)):  # one stream in, widened at the first edit
                out = _whole(model, prep, len(part)) if start < 0 else _resumed(model, stream[start], start,
                                                                                metric != "loss")
            changes[part] = _metric(metric, model, out, ids, token_a, token_b).numpy() - intact
    heads = {k: np.zeros((L, H)) for k in kinds(model)}
    ffn = np.zeros(L)
    for (what, k, layer, h), change in zip(jobs, changes, strict=True):
        if what == "head":
            heads[k][layer, h] = change
        else:
            ffn[layer] = change
    return HeadEffects(metric, mode, token_a, token_b, intact, heads, ffn)


def _hook(job: tuple) -> str:
    """The hook point a job (what, kind, layer, head) knocks out at: a head's z or an FFN's output."""
    what, k, layer, _ = job
    return act_name("z", layer=layer, block=k) if what == "head" else act_name("ffn_out", layer=layer, side=k)


def _edits(jobs: list[tuple], means: dict[str, torch.Tensor]) -> dict:
    """Hook name -> edit: batch item i has its own component (head or FFN) knocked out: zeroed, or (mean mode) set to
    its mean over the positions of the intact run, `means` by hook name (the same whichever rows a resumed run
    computes: a knock-out leaves the layers before it, and so its own input, intact). A resumed batch enters its
    layer as one stream (B = 1): the items are the same up to their first edit (the layer's z), where it becomes n
    copies, so the layer's Q, K, V and attention run once, not n times (later additions broadcast to n)."""
    by_hook: dict[str, list[tuple[int, int | None]]] = {}
    for i, job in enumerate(jobs):
        by_hook.setdefault(_hook(job), []).append((i, job[3]))

    n = len(jobs)

    def make(name: str, items: list[tuple[int, int | None]]):
        def edit(x: torch.Tensor) -> torch.Tensor:  # z (B, nh, T, hs) or FFN output (B, T, d)
            out = x.expand(n, *x.shape[1:]).clone()  # B = 1: the batch's first edit widens the one stream into n
            for i, h in items:
                part = out[i, h] if h is not None else out[i]  # (T, hs) or (T, d)
                mean = means.get(name)
                part.copy_(torch.zeros_like(part) if mean is None else (mean[0, h] if h is not None else mean[0]))
            return out
        return edit

    return {name: make(name, items) for name, items in by_hook.items()}


@dataclass(frozen=True)
class ResidualEffects:
    """metric(A with the residual stream at (row, position) taken from B) − metric(A): row 0 is the embeddings,
    row l + 1 the output of decoder layer l. Where a patch moves the metric most is where B's difference lives."""

    metric: str
    token_a: int | None
    token_b: int | None
    intact: float  # the metric on A
    source: float  # the metric on B
    grid: np.ndarray  # (n_layers + 1, T)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"grid": self.grid, "intact_source": np.array([self.intact, self.source])}


def residual_effects(model: Transformer, prep_a: Prepared, prep_b: Prepared, metric: str = "logit_diff",
                     token_a: int | None = None, token_b: int | None = None) -> ResidualEffects:
    """Patch the decoder's residual stream from B into A at one (layer, position) at a time (activation patching,
    decoder-only models, texts of the same number of tokens)."""
    if model.is_encoder_decoder:
        raise InputError("rp_decoder_only")
    ids_a, ids_b = sequence(prep_a, "decoder"), sequence(prep_b, "decoder")
    if ids_a.numel() != ids_b.numel():
        raise InputError("rp_lengths", a=ids_a.numel(), b=ids_b.numel())
    _check(model, metric, token_a, token_b, ids_a)
    (stream_a, hidden_a, _), (stream_b, hidden_b, _) = _intact(model, prep_a), _intact(model, prep_b)
    intact = float(_metric(metric, model, hidden_a, ids_a, token_a, token_b)[0])
    source = float(_metric(metric, model, hidden_b, ids_b, token_a, token_b)[0])
    T, rows = ids_a.numel(), len(stream_a)
    chunk = max(1, min(T, CHUNK_BYTES // max(1, forward_bytes(model.cfg, T))))
    grid = np.zeros((rows, T))
    for r in range(rows):  # row r is the stream entering layer r (r = n_layers: after the last layer)
        for first in range(0, T, chunk):
            pos = torch.arange(first, min(T, first + chunk))
            x = stream_a[r].expand(len(pos), -1, -1).clone()  # (n, T, d): item i patched at position pos[i]
            x[torch.arange(len(pos)), pos] = stream_b[r][0, pos]
            out = _resumed(model, x, r, metric != "loss")
            grid[r, pos.numpy()] = _metric(metric, model, out, ids_a, token_a, token_b).numpy()
    return ResidualEffects(metric, token_a, token_b, intact, source, grid - intact)
