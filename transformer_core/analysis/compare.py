"""Two texts side by side through the same model: each one's next-token distribution, per-token surprise and one
head's attention weights, and what differs (tokens, top-token probability, distance between the predictions)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import InputError
from ..model.hooks import act_name
from ..model.trace import run_with_trace
from ..model.transformer import Transformer
from ..text.inputs import Prepared, sequence_labels, token_labels
from .answers import Answer, as_answer, score_answers
from .blocks import check_head, check_top, key_side, query_side, sequence
from .interventions import kl_divergence
from .next_token import Distribution, distribution
from .surprise import Surprise, surprise_from_logits


@dataclass(frozen=True)
class Side:
    """One text: its decoder tokens, next token, surprise (None for a one-token text) and the head's weights."""

    labels: list[str]  # (T,) the decoder sequence
    next_token: Distribution
    surprise: Surprise | None
    weights: torch.Tensor  # (Tq, Tk) float32 the chosen head's softmax rows
    query_labels: list[str]  # (Tq,)
    key_labels: list[str]  # (Tk,)
    ids: tuple[int, ...] = ()  # (T,) the decoder sequence, model ids


@dataclass(frozen=True)
class Difference:
    only_a: list[str]  # tokens of A's decoder sequence that B lacks (first appearance order)
    only_b: list[str]
    top_id: int  # A's most likely next token
    top_prob_a: float  # its probability after A
    top_prob_b: float  # its probability after B
    total_variation: float  # ½ Σ |p_A − p_B| over the vocabulary (0 same .. 1 disjoint)
    kl_ab: float  # KL(p_A ‖ p_B), nats
    kl_ba: float  # KL(p_B ‖ p_A), nats
    more_a: list[tuple[str, int, int]] = field(default_factory=list)  # (token, count in A, in B): A has it more often
    more_b: list[tuple[str, int, int]] = field(default_factory=list)  # (token, count in B, in A): B has it more often

    @property
    def same_tokens(self) -> bool:
        """Whether A and B hold the same tokens the same number of times (as multisets: perhaps in another order)."""
        return not self.more_a and not self.more_b

    @property
    def top_prob_change(self) -> float:
        """How much A's top token gains (+) or loses (−) when the text is B."""
        return self.top_prob_b - self.top_prob_a


@dataclass(frozen=True)
class Comparison:
    kind: str
    layer: int
    head: int
    a: Side
    b: Side
    diff: Difference

    def arrays(self) -> dict[str, np.ndarray]:
        out = {}
        for name, side in (("a", self.a), ("b", self.b)):
            out[f"{name}_next_ids"] = np.array(side.next_token.ids, dtype=np.int64)
            out[f"{name}_next_probs"] = np.array(side.next_token.raw, dtype=np.float32)
            out[f"{name}_weights"] = side.weights.numpy()
            if side.surprise is not None:
                out |= {f"{name}_{k}": v for k, v in side.surprise.arrays().items()}
        d = self.diff
        out["difference"] = np.array([d.top_prob_a, d.top_prob_b, d.total_variation, d.kl_ab, d.kl_ba], np.float32)
        return out


def total_variation(logits_a: torch.Tensor, logits_b: torch.Tensor) -> float:
    """½ Σ |softmax(a) − softmax(b)| of two (vocab,) logit vectors, in float64."""
    return float(0.5 * (torch.softmax(logits_a.double(), -1) - torch.softmax(logits_b.double(), -1)).abs().sum())


def _only(model: Transformer, ids: list[int], other: list[int]) -> list[str]:
    seen = set(other)
    fresh = list(dict.fromkeys(i for i in ids if i not in seen))
    return token_labels(model, fresh)


def _more(model: Transformer, ids: list[int], other: list[int]) -> list[tuple[str, int, int]]:
    """(token, its count in ids, in other) for each token ids holds more often than other (first appearance order)."""
    mine, theirs = Counter(ids), Counter(other)
    more = [i for i in dict.fromkeys(ids) if mine[i] > theirs[i]]
    return [(label, mine[i], theirs[i]) for i, label in zip(more, token_labels(model, more), strict=True)]


def extra_positions(ids: list[int], other: list[int]) -> list[int]:
    """Positions of ids whose token occurs there more times than in other: each occurrence beyond other's count (a
    token other lacks, or the second " Mary" where other has one)."""
    theirs, seen, out = Counter(other), Counter(), []
    for pos, i in enumerate(ids):
        seen[i] += 1
        if seen[i] > theirs[i]:
            out.append(pos)
    return out


def _side(model: Transformer, prep: Prepared, kind: str, layer: int, head: int,
          top: int) -> tuple[Side, torch.Tensor]:
    name = act_name("weights", layer=layer, block=kind, cross=model.is_encoder_decoder)
    logits, trace = run_with_trace(model, prep.src_ids, prep.tgt_ids, names=[name])
    logits = logits[0].float().cpu()  # (T, vocab)
    ids = sequence(prep, "decoder")  # (T,)
    side = Side(labels=sequence_labels(model, ids.tolist()), next_token=distribution(logits[-1], top=top),
                surprise=surprise_from_logits(model, ids, logits) if ids.numel() >= 2 else None,
                weights=trace[name][0, head].float(),
                query_labels=sequence_labels(model, sequence(prep, query_side(kind)).tolist()),
                key_labels=sequence_labels(model, sequence(prep, key_side(kind)).tolist()), ids=tuple(ids.tolist()))
    return side, logits[-1]


def compare(model: Transformer, prep_a: Prepared, prep_b: Prepared, kind: str = "dec_self", layer: int = 0,
            head: int = 0, *, top: int = 10) -> Comparison:
    """Both texts through the model; the head (kind, layer, head)'s weights of each; their differences."""
    kind, layer, head = check_head(model, kind, layer, head)
    top = check_top(top)
    if (prep_a.tgt_ids is None) != (prep_b.tgt_ids is None):
        raise InputError("patch_mismatch")
    a, last_a = _side(model, prep_a, kind, layer, head, top)
    b, last_b = _side(model, prep_b, kind, layer, head, top)
    ids_a, ids_b = sequence(prep_a, "decoder").tolist(), sequence(prep_b, "decoder").tolist()
    top_id = int(last_a.argmax())
    pa, pb = torch.softmax(last_a.double(), -1), torch.softmax(last_b.double(), -1)  # (vocab,)
    diff = Difference(only_a=_only(model, ids_a, ids_b), only_b=_only(model, ids_b, ids_a), top_id=top_id,
                      top_prob_a=float(pa[top_id]), top_prob_b=float(pb[top_id]),
                      total_variation=total_variation(last_a, last_b), kl_ab=kl_divergence(last_a, last_b),
                      kl_ba=kl_divergence(last_b, last_a), more_a=_more(model, ids_a, ids_b),
                      more_b=_more(model, ids_b, ids_a))
    return Comparison(kind, layer, head, a, b, diff)


@dataclass(frozen=True)
class PairScore:
    """Two answers the learner picks, x and y, each scored after text A and after text B (summed log-probability,
    analysis.answers): how much each text makes the model prefer x to y."""

    x: Answer
    y: Answer
    a: tuple[float, float]  # (log p(x), log p(y)) after A, nats
    b: tuple[float, float]  # the same after B

    @property
    def margin_a(self) -> float:
        """log p(x) − log p(y) after A (for two one-token answers: their logit difference)."""
        return self.a[0] - self.a[1]

    @property
    def margin_b(self) -> float:
        return self.b[0] - self.b[1]

    def arrays(self) -> dict[str, np.ndarray]:
        return {"x_ids": np.array(self.x.ids, dtype=np.int64), "y_ids": np.array(self.y.ids, dtype=np.int64),
                "logprobs_a": np.array(self.a, dtype=np.float64), "logprobs_b": np.array(self.b, dtype=np.float64)}


def score_pair(model: Transformer, prep_a: Prepared, prep_b: Prepared, x, y, *,
               allow_special: bool = False) -> PairScore:
    """Answers x and y (text, a model id or ids: analysis.answers.as_answer) scored after A and after B."""
    x, y = (as_answer(model, v, allow_special=allow_special) for v in (x, y))
    scores = {name: tuple(s.total for s in score_answers(model, prep, (x, y)))
              for name, prep in (("a", prep_a), ("b", prep_b))}
    return PairScore(x, y, scores["a"], scores["b"])
