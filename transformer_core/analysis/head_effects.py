"""Which heads matter for this prediction: knock out every head (and every FFN) one at a time and measure a metric
the learner picks, in one picture (layer × head); and activation patching from a second text, per layer × position
of the residual stream and per head, normalised as in the literature. Each knock-out or patch is one batch item (the
edit changes that part only in its own batch item). In a decoder-only model the parts of layer l are one batch that
starts from the intact residual stream entering layer l (the layers before it would compute what the intact run
did), and the residual-stream grid resumes the same way from the row it patches; a metric read at the last position
runs the last layer on that row only (Transformer.resume's last_only). An encoder-decoder runs whole forwards (an
encoder head moves the memory every decoder layer reads). Mean mode sets a part to its mean over the intact run's
positions of the text. bench/sweeps.py times it against one forward per head.

Metrics, read where the next token is read (the decoder's last position) or over the whole text; an answer is any
text or model ids (answers.py): a one-token answer is read at the last position, an answer of n tokens by its
summed log-probability, teacher-forced (the text and the answer's first n − 1 tokens are run, each answer token's
log p read at the position before it):
  logit_diff  logit(A) − logit(B) for one token each; in general log p(A) − log p(B), the difference of the two
              answers' summed log-probabilities (equal to the logit difference for one token each: the softmax's
              normaliser cancels)   "does this part make the model prefer A over B?"
  logprob     log p(A), summed over A's tokens
  prob        p(A) = exp(log p(A)), the product of A's tokens' probabilities
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
from .answers import Answer, as_answer, check_room, continued
from .blocks import kinds, sequence
from .interventions import ABLATION_MODES
from .logit_lens import residual_names
from .surprise import token_nats

METRICS = ("logit_diff", "logprob", "prob", "loss")
CHUNK_BYTES = 256 * 2**20  # one batched forward holds at most about this much
NORM_EPS = 1e-3  # |clean − corrupted| below this (in the metric's units): no normalised scale (it would divide by ~0)


@dataclass(frozen=True)
class _Run:
    """One decoder sequence a metric reads (the text, or the text and an answer's tokens but its last) and the
    answers read on it, each with its sign; reads is None for the loss (every position of the text)."""

    prep: Prepared
    reads: tuple[tuple[float, tuple[int, ...]], ...] | None


@dataclass(frozen=True)
class _Plan:
    metric: str
    answers: tuple[Answer | None, Answer | None]
    runs: tuple[_Run, ...]
    ids: torch.Tensor  # (T,) the text's decoder ids (the loss)

    def finish(self, total):
        """The metric from the sum of its runs' terms (p(A) is exp of its summed log-probability)."""
        return np.exp(total) if self.metric == "prob" else total


def _plan(model: Transformer, prep: Prepared, metric: str, token_a, token_b, allow_special: bool = False) -> _Plan:
    """The runs a metric needs on this input; InputError for a metric or answers it cannot be measured with."""
    if metric not in METRICS:
        raise InputError("effects_metric", choices=", ".join(METRICS))
    ids = sequence(prep, "decoder")  # (T,)
    if metric == "loss":
        if ids.numel() < 2:
            raise InputError("effects_short")
        return _Plan(metric, (None, None), (_Run(prep, None),), ids)
    if token_a is None or (metric == "logit_diff" and token_b is None):
        raise InputError("effects_tokens")
    a = as_answer(model, token_a, allow_special=allow_special)
    b = as_answer(model, token_b, allow_special=allow_special) if metric == "logit_diff" else None
    if b is not None and a.ids == b.ids:
        raise InputError("effects_same")
    runs: dict[tuple[int, ...], list] = {}  # answers that share their tokens but the last share a run
    for answer, sign in ((a, 1.0), (b, -1.0)):
        if answer is not None:
            check_room(model, prep, answer)
            runs.setdefault(answer.ids[:-1], [continued(prep, answer), []])[1].append((sign, answer.ids))
    return _Plan(metric, (a, b), tuple(_Run(p, tuple(reads)) for p, reads in runs.values()), ids)


def _value(model: Transformer, hidden: torch.Tensor, run: _Run, ids: torch.Tensor) -> torch.Tensor:
    """(B,) float64: a run's share of the metric from the decoder's output hidden (B, T', d) (its final norm
    applied; (B, 1, d) when only the last row was computed). An answer of n tokens is read on the last n rows."""
    with torch.inference_mode():
        if run.reads is None:
            return torch.stack([token_nats(row, ids).mean() for row in model.out(hidden).double()]).cpu()  # (B,)
        n = len(run.reads[0][1])  # every answer of a run has as many tokens (they share all but the last)
        logp = torch.log_softmax(model.out(hidden[:, -n:]).double(), dim=-1)  # (B, n, vocab)
        total = torch.zeros(hidden.size(0), dtype=torch.float64, device=logp.device)
        for sign, tokens in run.reads:
            at = torch.tensor(tokens, device=logp.device)  # (n,)
            total += sign * logp[:, torch.arange(n, device=logp.device), at].sum(-1)  # (B,)
        return total.cpu()


def _last_only(run: _Run) -> bool:
    """Does the run's metric read the last position only (one-token answers)?"""
    return run.reads is not None and len(run.reads[0][1]) == 1


@dataclass(frozen=True)
class HeadEffects:
    """metric(edited) − metric(intact) for each head ([kind][layer, head]) and each decoder FFN (layer,)."""

    metric: str
    mode: str
    token_a: tuple[int, ...] | None  # answer A's model ids (logit_diff, logprob, prob)
    token_b: tuple[int, ...] | None  # answer B's (logit_diff)
    intact: float
    heads: dict[str, np.ndarray]  # kind -> (n_layers, n_heads) change of the metric
    ffn: np.ndarray  # (n_layers,) change when the decoder's FFN of that layer is knocked out

    def largest(self) -> tuple[str, int, int, float]:
        """(kind, layer, head, change) of the head whose knock-out moves the metric most."""
        kind = max(self.heads, key=lambda k: float(np.abs(self.heads[k]).max()))
        layer, head = np.unravel_index(np.abs(self.heads[kind]).argmax(), self.heads[kind].shape)
        return kind, int(layer), int(head), float(self.heads[kind][layer, head])

    def most_needed(self) -> tuple[str, int, int, float] | None:
        """(kind, layer, head, change) of the head whose knock-out hurts most: lowers the metric most (raises it, for
        the loss), which need not be the head that moves it most (one may raise it more); None if none hurts."""
        sign = 1.0 if self.metric == "loss" else -1.0  # a hurt is a lower score, a higher loss
        kind = max(self.heads, key=lambda k: float((sign * self.heads[k]).max()))
        layer, head = np.unravel_index((sign * self.heads[kind]).argmax(), self.heads[kind].shape)
        change = float(self.heads[kind][layer, head])
        return (kind, int(layer), int(head), change) if sign * change > 0 else None

    def arrays(self) -> dict[str, np.ndarray]:
        out = {f"heads_{k}": v for k, v in self.heads.items()}
        return {**out, "ffn": self.ffn, "intact": np.array([self.intact], dtype=np.float64), **_answer_arrays(self)}


def _answer_arrays(result) -> dict[str, np.ndarray]:
    """The answers' model ids (empty when a metric has none)."""
    return {f"answer_{w}_ids": np.array(getattr(result, f"token_{w}") or (), dtype=np.int64) for w in "ab"}


def _ids(answer: Answer | None) -> tuple[int, ...] | None:
    return None if answer is None else answer.ids


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


def _chunk(model: Transformer, prep: Prepared) -> int:
    """How many copies of this input one batched forward may hold (CHUNK_BYTES)."""
    return max(1, CHUNK_BYTES // max(1, forward_bytes(model.cfg, prep.src_ids.size(1),
                                                      None if prep.tgt_ids is None else prep.tgt_ids.size(1))))


def head_effects(model: Transformer, prep: Prepared, metric: str = "logit_diff", token_a=None, token_b=None, *,
                 mode: str = "zero") -> HeadEffects:
    """Knock out each attention head and each decoder FFN alone; how the metric changes for each. token_a / token_b:
    the answers (a model id, model ids, or text)."""
    if mode not in ABLATION_MODES:
        raise InputError("ablation_mode", mode=str(mode)[:20], choices=", ".join(ABLATION_MODES))
    plan = _plan(model, prep, metric, token_a, token_b)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    jobs = [("head", k, layer, h) for k in kinds(model) for layer in range(L) for h in range(H)]
    jobs += [("ffn", "decoder", layer, None) for layer in range(L)]
    means = {}
    if mode == "mean":  # over the text's positions (the same edit whichever answer follows it)
        seen = _intact(model, prep, tuple(sorted({_hook(job) for job in jobs})))[2]
        means = {n: x.mean(dim=-2, keepdim=True) for n, x in seen.items()}  # z (1, nh, 1, hs), FFN (1, 1, d)
    # decoder-only: the parts of layer l knocked out together in a batch resumed at layer l; encoder-decoder: whole
    # forwards (an encoder head moves the memory every decoder layer reads)
    groups: dict[int, list[int]] = {}
    for i, (_, _, layer, _) in enumerate(jobs):
        groups.setdefault(-1 if model.is_encoder_decoder else layer, []).append(i)
    intact, edited = 0.0, np.zeros(len(jobs))
    for run in plan.runs:  # one per sequence the metric reads (the text, or the text and an answer's tokens)
        stream, hidden, _ = _intact(model, run.prep)
        intact += float(_value(model, hidden, run, plan.ids)[0])
        chunk = _chunk(model, run.prep)
        for start, members in groups.items():
            for first in range(0, len(members), chunk):
                part = members[first:first + chunk]
                with intervene(_edits([jobs[i] for i in part], means)):  # one stream in, widened at the first edit
                    out = _whole(model, run.prep, len(part)) if start < 0 else _resumed(
                        model, stream[start], start, _last_only(run))
                edited[part] += _value(model, out, run, plan.ids).numpy()
    intact, changes = float(plan.finish(intact)), plan.finish(edited) - plan.finish(intact)
    heads = {k: np.zeros((L, H)) for k in kinds(model)}
    ffn = np.zeros(L)
    for (what, k, layer, h), change in zip(jobs, changes, strict=True):
        if what == "head":
            heads[k][layer, h] = change
        else:
            ffn[layer] = change
    return HeadEffects(metric, mode, _ids(plan.answers[0]), _ids(plan.answers[1]), intact, heads, ffn)


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


def normalised(patched, corrupted: float, clean: float) -> np.ndarray | None:
    """(patched − corrupted) / (clean − corrupted): 0 = the corrupted run, 1 = the clean one (activation patching's
    usual scale); None when clean and corrupted are within NORM_EPS of each other (the scale would divide by ~0)."""
    span = float(clean) - float(corrupted)
    if not np.isfinite(span) or abs(span) < NORM_EPS:
        return None
    return (np.asarray(patched, dtype=np.float64) - float(corrupted)) / span


def _pair(model: Transformer, prep_a: Prepared, prep_b: Prepared, metric: str, token_a, token_b):
    """The plans of a patch's two texts (the same answers after each); InputError unless both are decoder-only
    texts with the same number of tokens."""
    if model.is_encoder_decoder:
        raise InputError("rp_decoder_only")
    ids_a, ids_b = sequence(prep_a, "decoder"), sequence(prep_b, "decoder")
    if ids_a.numel() != ids_b.numel():
        raise InputError("rp_lengths", a=ids_a.numel(), b=ids_b.numel())
    plan_a = _plan(model, prep_a, metric, token_a, token_b)
    return plan_a, _plan(model, prep_b, metric, plan_a.answers[0], plan_a.answers[1])


@dataclass(frozen=True)
class ResidualEffects:
    """metric(A with the residual stream at (row, position) taken from B) − metric(A): row 0 is the embeddings,
    row l + 1 the output of decoder layer l. Where a patch moves the metric most is where B's difference lives. As in
    the literature (denoising), A is the corrupted text and B the clean one: normalised() is 0 at A, 1 at B."""

    metric: str
    token_a: tuple[int, ...] | None
    token_b: tuple[int, ...] | None
    intact: float  # the metric on A (the corrupted run)
    source: float  # the metric on B (the clean run)
    grid: np.ndarray  # (n_layers + 1, T) change of the metric

    @property
    def patched(self) -> np.ndarray:
        """(n_layers + 1, T) the metric itself in each patched run."""
        return self.grid + self.intact

    def normalised(self) -> np.ndarray | None:
        return normalised(self.patched, self.intact, self.source)

    def arrays(self) -> dict[str, np.ndarray]:
        norm = self.normalised()
        return {"grid": self.grid, "patched": self.patched, "intact_source": np.array([self.intact, self.source]),
                "normalised": np.full_like(self.grid, np.nan) if norm is None else norm, **_answer_arrays(self)}


def residual_effects(model: Transformer, prep_a: Prepared, prep_b: Prepared, metric: str = "logit_diff",
                     token_a=None, token_b=None) -> ResidualEffects:
    """Patch the decoder's residual stream from B into A at one (layer, position) of the text at a time (activation
    patching, decoder-only models, texts of the same number of tokens; an answer's own tokens are read, never
    patched)."""
    plan_a, plan_b = _pair(model, prep_a, prep_b, metric, token_a, token_b)
    T, rows = plan_a.ids.numel(), model.cfg.n_layers + 1
    intact, source, grid = 0.0, 0.0, np.zeros((rows, T))
    for run_a, run_b in zip(plan_a.runs, plan_b.runs, strict=True):
        (stream_a, hidden_a, _), (stream_b, hidden_b, _) = _intact(model, run_a.prep), _intact(model, run_b.prep)
        intact += float(_value(model, hidden_a, run_a, plan_a.ids)[0])
        source += float(_value(model, hidden_b, run_b, plan_b.ids)[0])
        chunk = max(1, min(T, _chunk(model, run_a.prep)))
        for r in range(rows):  # row r is the stream entering layer r (r = n_layers: after the last layer)
            for first in range(0, T, chunk):
                pos = torch.arange(first, min(T, first + chunk))
                x = stream_a[r].expand(len(pos), -1, -1).clone()  # (n, T', d): item i patched at position pos[i]
                x[torch.arange(len(pos)), pos] = stream_b[r][0, pos]
                out = _resumed(model, x, r, _last_only(run_a))
                grid[r, pos.numpy()] += _value(model, out, run_a, plan_a.ids).numpy()
    intact, source = float(plan_a.finish(intact)), float(plan_a.finish(source))
    return ResidualEffects(metric, _ids(plan_a.answers[0]), _ids(plan_a.answers[1]), intact, source,
                           plan_a.finish(grid) - intact)


@dataclass(frozen=True)
class HeadPatching:
    """metric(A with one head's output, at every position of the text, taken from B), per decoder layer and head; as
    ResidualEffects, A is the corrupted text and B the clean one."""

    metric: str
    token_a: tuple[int, ...] | None
    token_b: tuple[int, ...] | None
    intact: float  # the metric on A (the corrupted run)
    source: float  # the metric on B (the clean run)
    patched: np.ndarray  # (n_layers, n_heads) the metric in each patched run

    @property
    def grid(self) -> np.ndarray:
        """(n_layers, n_heads) change of the metric."""
        return self.patched - self.intact

    def normalised(self) -> np.ndarray | None:
        return normalised(self.patched, self.intact, self.source)

    def arrays(self) -> dict[str, np.ndarray]:
        norm = self.normalised()
        return {"patched": self.patched, "intact_source": np.array([self.intact, self.source]),
                "normalised": np.full_like(self.patched, np.nan) if norm is None else norm, **_answer_arrays(self)}


def head_patching(model: Transformer, prep_a: Prepared, prep_b: Prepared, metric: str = "logit_diff",
                  token_a=None, token_b=None) -> HeadPatching:
    """Patch each decoder head's output (its z, every position of the text) from B into A, one head at a time
    (decoder-only models, texts of the same number of tokens)."""
    plan_a, plan_b = _pair(model, prep_a, prep_b, metric, token_a, token_b)
    L, H, T = model.cfg.n_layers, model.cfg.n_heads, plan_a.ids.numel()
    names = [act_name("z", layer=layer, block="dec_self") for layer in range(L)]
    intact, source, patched = 0.0, 0.0, np.zeros((L, H))
    for run_a, run_b in zip(plan_a.runs, plan_b.runs, strict=True):
        stream_a, hidden_a, _ = _intact(model, run_a.prep)
        _, hidden_b, z_b = _intact(model, run_b.prep, tuple(names))
        intact += float(_value(model, hidden_a, run_a, plan_a.ids)[0])
        source += float(_value(model, hidden_b, run_b, plan_b.ids)[0])
        chunk = _chunk(model, run_a.prep)
        for layer in range(L):
            for first in range(0, H, chunk):
                heads = list(range(first, min(H, first + chunk)))
                with intervene({names[layer]: _take_heads(heads, z_b[names[layer]], T)}):
                    out = _resumed(model, stream_a[layer], layer, _last_only(run_a))
                patched[layer, heads] += _value(model, out, run_a, plan_a.ids).numpy()
    intact, source = float(plan_a.finish(intact)), float(plan_a.finish(source))
    return HeadPatching(metric, _ids(plan_a.answers[0]), _ids(plan_a.answers[1]), intact, source,
                        plan_a.finish(patched))


def _take_heads(heads: list[int], z_b: torch.Tensor, T: int):
    """An edit of a layer's z (1, nh, Tz, hs): batch item i takes head heads[i]'s z at the text's T positions from
    z_b (1, nh, T', hs), the other text's. Tz < T' when the last layer runs on its last rows only (last_only): z's
    rows are then the sequence's last Tz positions."""
    def edit(z: torch.Tensor) -> torch.Tensor:
        out = z.expand(len(heads), *z.shape[1:]).clone()  # (n, nh, Tz, hs): the one stream widened into n
        skip = z_b.size(2) - z.size(2)  # positions before z's first row
        lo, hi = skip, min(T, z_b.size(2))  # the text's positions among z's rows
        for i, h in enumerate(heads):
            if hi > lo:
                out[i, h, lo - skip:hi - skip] = z_b[0, h, lo:hi].to(out)
        return out
    return edit
