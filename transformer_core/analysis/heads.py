"""Head detector: what each attention head mostly looks at, on the learner's text and on a random sequence
repeated twice. Every score is a mean attention weight (0..1) on the key a pattern names:

- previous_token: key i - 1, mean over queries i >= 1;
- first_token:    key 0 (the "attention sink"), mean over queries i >= 1 (cross-attention: every query);
- self:           key i (the diagonal), mean over queries i >= 1 (query 0 of causal attention has only itself);
- induction:      on random tokens r (length L) repeated (r + r), from query L + j to key j + 1, the token after
                  the earlier copy of the current one, mean over j = 0 .. L - 2;
- diagonal / anti_diagonal (cross-attention): from decoder query i to source key i / Ts - 1 - i, only where the
  map is square (Tt = Ts: what copy and reverse learn; between texts of different lengths "same position" means
  nothing);
- fields (cross-attention, when both texts are dates): the share of the answer's year / month / day tokens whose
  strongest weight falls on the same field of the source (analysis.alignment's table: its ✓ rows over its rows).

One labelling rule (`label`), used by every page and the model card: a head's label is its pattern with the highest
score above THRESHOLD (0.5: more than half its weight goes where the pattern says; a uniform head over three or more
keys stays below it), among every score measured for it: its patterns on a text and, wherever the probe was run,
induction on the probe. previous_token, first_token, self and induction are the scores the shipped models' cards keep.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import torch

from ..errors import InputError
from ..model.transformer import Transformer, param_counts
from ..text.inputs import UNK, Prepared
from ..text.tokenizer import load_encoding
from .blocks import KIND_ORDER, block_weights, check_fraction

THRESHOLD = 0.5
PROBE_COUNT = 16  # random sequences the induction score averages over: the same probe on every page and card
MIN_PROBE_COUNT = 4  # a big model reads fewer of them (probe_count), never fewer than this
PROBE_FLOPS = 1e11  # what the probe may cost a big model: about a second of this 2-core CPU
SELF_PATTERNS = ("previous_token", "first_token", "self", "induction")
PROBE_PATTERNS = ("induction",)  # measured on the probe (random tokens written twice), not on the learner's text
CROSS_PATTERNS = ("first_token", "diagonal", "anti_diagonal", "fields")


def _mean(x: torch.Tensor) -> torch.Tensor:
    """(B, nh, n) -> (nh,) mean over the n positions of each item, then over the batch; NaN when n = 0."""
    if x.size(-1) == 0:
        return torch.full((x.size(1),), float("nan"))
    return x.float().mean(-1).mean(0)


def previous_token(w: torch.Tensor) -> torch.Tensor:
    """(B, nh, T, T) weights -> (nh,) mean weight of query i on key i - 1 (queries i >= 1)."""
    return _mean(w[:, :, 1:, :].diagonal(offset=0, dim1=2, dim2=3))  # (B, nh, T-1): w[i+1, i]


def first_token(w: torch.Tensor, from_query: int = 1) -> torch.Tensor:
    """(B, nh, Tq, Tk) weights -> (nh,) mean weight on key 0 over queries i >= from_query."""
    return _mean(w[:, :, from_query:, 0])  # (B, nh, Tq - from_query)


def self_token(w: torch.Tensor) -> torch.Tensor:
    """(B, nh, T, T) weights -> (nh,) mean weight of query i on key i (queries i >= 1)."""
    return _mean(w.diagonal(dim1=2, dim2=3)[:, :, 1:])  # (B, nh, T-1)


def diagonal(w: torch.Tensor) -> torch.Tensor:
    """(B, nh, Tq, Tk) -> (nh,) mean weight of query i on key i, i < min(Tq, Tk)."""
    return _mean(w.diagonal(dim1=2, dim2=3))  # (B, nh, min(Tq, Tk))


def anti_diagonal(w: torch.Tensor) -> torch.Tensor:
    """(B, nh, Tq, Tk) -> (nh,) mean weight of query i on key Tk - 1 - i, i < min(Tq, Tk)."""
    return _mean(w.flip(-1).diagonal(dim1=2, dim2=3))  # (B, nh, min(Tq, Tk)): w[i, Tk-1-i]


def induction(w: torch.Tensor, length: int) -> torch.Tensor:
    """(B, nh, 2L, 2L) weights on r + r -> (nh,) mean weight from query L + j to key j + 1, j = 0 .. L - 2."""
    j = torch.arange(0, length - 1)
    return _mean(w[:, :, length + j, j + 1])  # (B, nh, L-1)


def vocab_ids(model: Transformer) -> np.ndarray:
    """Model ids random sequences draw from: every id but the unknown one (compacted vocabularies), else the
    tokenizer's ordinary tokens (no special tokens) that the model's vocabulary holds."""
    vmap = model.cfg.vocab_map
    if vmap:
        return _known(vmap)
    n = min(model.cfg.vocab_size, len(load_encoding(model.cfg.encoding)._mergeable_ranks))
    return np.arange(n)


@lru_cache(maxsize=8)
def _known(vmap: tuple[int, ...]) -> np.ndarray:
    """The model ids of a vocabulary map that are not the unknown id (once per map: 12k ids took a millisecond)."""
    return np.flatnonzero(np.asarray(vmap) != UNK)


def induction_batch(ids: np.ndarray, length: int, count: int, seed: int = 0) -> torch.Tensor:
    """(count, 2 * length): random tokens drawn uniformly from `ids`, each row repeated twice."""
    rng = np.random.default_rng(seed)
    r = rng.choice(ids, size=(count, length))  # (count, L)
    return torch.from_numpy(np.concatenate([r, r], axis=1)).long()  # (count, 2L)


@dataclass(frozen=True)
class HeadRecord:
    """One head's scores (pattern -> mean weight; None where undefined, e.g. a one-token text) and its label."""

    kind: str
    layer: int
    head: int
    scores: dict[str, float | None] = field(default_factory=dict)
    label: str | None = None  # label(scores): the pattern with the highest score above the threshold, or None

    @property
    def labels(self) -> tuple[str, ...]:
        """(label,), or () for a head with no score above the threshold."""
        return (self.label,) if self.label else ()

    @property
    def best(self) -> tuple[str | None, float]:
        """(pattern, score) of the highest score on the text whatever the threshold ((None, 0.0) when none is
        defined): what an unlabelled head comes closest to on the learner's text."""
        have = {k: v for k, v in self.scores.items() if v is not None and k not in PROBE_PATTERNS}
        return (max(have, key=have.get), have[max(have, key=have.get)]) if have else (None, 0.0)

    @property
    def strongest(self) -> str | None:
        """The label (kept for callers that name it so), or None."""
        return self.label

    @property
    def strength(self) -> float:
        """The label's score (0 when unlabelled): sort by it to list the clearest heads first."""
        return self.scores[self.label] if self.label else 0.0

    def key(self) -> tuple[int, int, int]:
        """Forward order: encoder self-attention, then per decoder layer; heads in order."""
        return KIND_ORDER.index(self.kind), self.layer, self.head

    def row(self) -> dict:
        return {"kind": self.kind, "layer": self.layer, "head": self.head, **self.scores, "label": self.label}


def label(scores: dict[str, float | None], threshold: float = THRESHOLD) -> str | None:
    """The one labelling rule (every page and the model card): the pattern with the highest score above the
    threshold, None when none is. `scores` holds every score measured for the head, the text's patterns and, where
    the probe was run, induction: a head that is "itself 0.91" on a sentence and "induction 0.68" on random repeats
    is labelled "itself" (its table row still shows both)."""
    have = {k: v for k, v in scores.items() if v is not None and v > threshold}
    return max(have, key=have.get) if have else None


def _value(x: torch.Tensor, h: int) -> float | None:
    v = float(x[h])
    return None if v != v else round(v, 4)


def probe_count(model: Transformer, length: int | None = None) -> int:
    """How many random sequences the probe reads: PROBE_COUNT, or fewer (at least MIN_PROBE_COUNT) where that many
    would cost more than PROBE_FLOPS (2 × the blocks' parameters per token: SmolLM2-135M reads 4, a first visit of
    its Attention page took 5.8 s with 16). Every shipped model reads PROBE_COUNT, as its card says."""
    length = default_length(model) if length is None else length
    blocks = sum(n for c, n in param_counts(model).items() if c in ("attention", "ffn", "norms"))
    per_sequence = 2 * blocks * 2 * length  # FLOPs of one forward of the 2L tokens, the output layer skipped
    return max(MIN_PROBE_COUNT, min(PROBE_COUNT, int(PROBE_FLOPS // max(per_sequence, 1))))


def induction_scores(model: Transformer, length: int | None = None, count: int | None = None,
                     seed: int = 0) -> dict[tuple[str, int], torch.Tensor]:
    """(kind, layer) -> (nh,) induction score of every self-attention block, one random sequence at a time
    (bounded memory: one forward holds 2L positions of logits); the mean over sequences of each one's mean.
    The defaults (default_length, probe_count, seed 0) are the one probe every page and every card shows."""
    length = default_length(model) if length is None else length
    count = probe_count(model, length) if count is None else count
    seqs = induction_batch(vocab_ids(model), length, count, seed)  # (count, 2L)
    total: dict[tuple[str, int], torch.Tensor] = {}
    for seq in seqs:
        one = seq[None]  # (1, 2L)
        for where, w in block_weights(model, one, one if model.is_encoder_decoder else None).items():
            if where[0] != "cross":
                total[where] = total.get(where, 0.0) + induction(w, length) / count  # (nh,)
    return total


def unrepeated_batch(ids: np.ndarray, length: int, count: int, seed: int = 0) -> torch.Tensor:
    """(count, 2 * length): random tokens drawn uniformly from `ids`, no span written twice (the probe's control)."""
    rng = np.random.default_rng(seed + 1)  # never the probe's own tokens
    return torch.from_numpy(rng.choice(ids, size=(count, 2 * length))).long()  # (count, 2L)


def own_copy(w: torch.Tensor, length: int) -> torch.Tensor:
    """(B, nh, 2L, 2L) weights -> (nh,) mean weight from query L + j on key j, j = 0 .. L - 2: on the probe, the
    earlier copy of the query's own token (one cell left of induction's)."""
    j = torch.arange(0, length - 1)
    return _mean(w[:, :, length + j, j])  # (B, nh, L-1)


def induction_parts(model: Transformer, length: int | None = None, count: int = PROBE_COUNT,
                    seed: int = 0) -> dict[str, dict[tuple[str, int], torch.Tensor]]:
    """What a head's induction score is made of, where it cannot be induction (a layer-0 head: no earlier layer
    has moved a token's predecessor into its key): name -> (kind, layer) -> (nh,) of every self-attention block.
    "control": the induction cells (query L + j on key j + 1) on random tokens that repeat nothing, the weight
    given by position alone; "own_copy": on the probe, the weight on the earlier copy of the query's own token;
    "own_copy_control": the same cells when nothing repeats (a head that avoids its own token puts less on the
    copy, and so more on its neighbours, the induction cell among them); "even": the induction cells of attention
    spread evenly over every earlier token, what a head that has learned nothing gets (an untrained model's)."""
    length = default_length(model) if length is None else length
    probe = block_weights(model, induction_batch(vocab_ids(model), length, count, seed), None)
    plain = block_weights(model, unrepeated_batch(vocab_ids(model), length, count, seed), None)
    self_blocks = [where for where in probe if where[0] != "cross"]
    causal = torch.tril(torch.ones(2 * length, 2 * length))
    even = induction((causal / causal.sum(-1, keepdim=True))[None, None], length)  # (1,)
    return {"even": {k: even.expand(probe[k].size(1)) for k in self_blocks},
            "control": {k: induction(plain[k], length) for k in self_blocks},
            "own_copy": {k: own_copy(probe[k], length) for k in self_blocks},
            "own_copy_control": {k: own_copy(plain[k], length) for k in self_blocks}}


def default_length(model: Transformer) -> int:
    """The random sequence's length: half the context, at most 64, and short enough for a small vocabulary
    (at most 1/8 of it, but at least 4 tokens) that a span rarely repeats a token inside itself, as in the text a
    model learned."""
    vocab = len(vocab_ids(model))
    half = model.cfg.max_len // 2
    return max(min(4, half), min(half, 64, vocab // 8))  # at least 4 tokens: a toy vocabulary still gets a span


def cross_scores(w: torch.Tensor, prep: Prepared | None = None) -> dict[str, torch.Tensor]:
    """(nh,) scores of a cross-attention block's weights (B, nh, Tt, Ts): first_token always; diagonal and
    anti_diagonal only where the map is square; fields when `prep`'s source and target are both dates."""
    scores = {"first_token": first_token(w, from_query=0)}
    if w.size(-2) == w.size(-1):
        scores |= {"diagonal": diagonal(w), "anti_diagonal": anti_diagonal(w)}
    if prep is not None and prep.tgt is not None and w.size(0) == 1:
        from .alignment import field_alignment  # (only for an encoder-decoder model: off a decoder's pages)

        fields = field_alignment(prep, w[0])
        if fields is not None:
            scores["fields"] = fields
    return scores


def label_block(kind: str, layer: int, weights: torch.Tensor, induction_of_block: torch.Tensor | None = None,
                threshold: float = THRESHOLD, prep: Prepared | None = None) -> list[HeadRecord]:
    """The records of one block's heads from its weights (B, nh, Tq, Tk) on a text, plus its induction scores
    (nh,) when known: what a page that already traced the block can label without another forward. `prep`: the
    text those weights were traced on (a translator's cross-attention is also scored on its date fields)."""
    w = weights.float()
    if kind == "cross":
        scores = cross_scores(w, prep)
    else:
        scores = {"previous_token": previous_token(w), "first_token": first_token(w), "self": self_token(w)}
        if induction_of_block is not None:
            scores["induction"] = induction_of_block
    records = []
    for h in range(w.size(1)):
        values = {k: _value(v, h) for k, v in scores.items()}
        records.append(HeadRecord(kind, layer, h, values, label(values, threshold)))
    return records


def detect_heads(model: Transformer, prep: Prepared, *, threshold: float = THRESHOLD, length: int | None = None,
                 count: int | None = None, seed: int = 0, induction: dict | None = None) -> list[HeadRecord]:
    """Score and label every head: patterns on the learner's text, induction on `count` random sequences of
    `length` tokens (default: default_length) repeated twice (self-attention blocks; both stacks read them).
    `induction`: those scores already measured (induction_scores of the same length, count and seed): they do
    not depend on the text, so a server measures them once per model."""
    threshold = check_fraction(threshold)
    length = default_length(model) if length is None else length
    if isinstance(length, bool) or not isinstance(length, int) or not 2 <= length <= model.cfg.max_len // 2:
        raise InputError("heads_length", lo=2, hi=model.cfg.max_len // 2, max_len=model.cfg.max_len)
    count = probe_count(model, length) if count is None else count
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 256:
        raise InputError("heads_count", lo=1, hi=256)
    text = block_weights(model, prep.src_ids, prep.tgt_ids)
    ind = induction_scores(model, length, count, seed) if induction is None else induction
    records = [r for (kind, layer), w in text.items() for r in label_block(kind, layer, w, ind.get((kind, layer)),
                                                                          threshold, prep)]
    return sorted(records, key=HeadRecord.key)
