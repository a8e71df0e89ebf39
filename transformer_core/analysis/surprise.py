"""How surprised the model is by each actual next token: its probability, surprisal in bits and nats, the mean
loss (nats per token) and perplexity of the text. Encoder-decoder models: over the target, given the source."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import InputError
from ..model.transformer import Transformer
from ..text.inputs import Prepared, sequence_labels, token_labels, unknown_id
from .blocks import logits_of, sequence


def token_nats(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """(T - 1,) float64 −ln p(ids[t + 1] | ids[..t]) from (T, vocab) logits: what cross-entropy averages."""
    logp = torch.log_softmax(logits[:-1].double(), dim=-1)  # (T-1, vocab) position t predicts token t + 1
    return -logp.gather(-1, ids[1:].long().to(logp.device)[:, None])[:, 0]  # (T-1,)


def mean_loss(logits: torch.Tensor, ids: torch.Tensor) -> float | None:
    """Mean next-token loss in nats per token (F.cross_entropy of logits[:-1] vs ids[1:]); None for one token."""
    return float(token_nats(logits, ids).mean()) if ids.numel() >= 2 else None


@dataclass(frozen=True)
class Surprise:
    """Entry t is about token t + 1 of the decoder sequence, predicted from the tokens before it."""

    ids: list[int]  # (T,) the decoder sequence, model ids (the target for encoder-decoder models)
    labels: list[str]  # (T,) how the tokenizer shows them
    prob: torch.Tensor  # (T-1,) float64 p(actual next token)
    nats: torch.Tensor  # (T-1,) −ln p
    bits: torch.Tensor  # (T-1,) −log₂ p
    unknown: list[int]  # positions (1..T-1) whose actual token is the model's unknown id (its surprise is the unk's)
    expected_ids: list[int] = field(default_factory=list)  # (T-1,) the model's top-1 next token at each position
    expected_prob: torch.Tensor | None = None  # (T-1,) float64 its probability
    expected_labels: list[str] = field(default_factory=list)  # (T-1,) how the tokenizer shows them

    @property
    def mean_loss(self) -> float:
        """Mean loss, nats per token (what training minimises)."""
        return float(self.nats.mean())

    @property
    def bits_per_token(self) -> float:
        return float(self.bits.mean())

    @property
    def perplexity(self) -> float:
        """exp(mean loss): the model is as unsure as a uniform choice among this many tokens."""
        return math.exp(self.mean_loss)

    def table(self) -> list[dict]:
        """One row per predicted token: position, token, probability, bits, nats, and what the model expected there
        (its top-1 token and that token's probability)."""
        return [{"position": t + 1, "token": self.labels[t + 1], "prob": float(self.prob[t]),
                 "bits": float(self.bits[t]), "nats": float(self.nats[t]), "unknown": t + 1 in self.unknown,
                 "expected": self.expected_labels[t], "expected_prob": float(self.expected_prob[t])}
                for t in range(len(self.prob))]

    def extremes(self) -> tuple[int, int]:
        """The positions (1..T-1) of the most and of the least surprising token (the first such on a tie)."""
        return int(self.bits.argmax()) + 1, int(self.bits.argmin()) + 1

    def arrays(self) -> dict[str, np.ndarray]:
        return {"ids": np.array(self.ids, dtype=np.int64), "prob": self.prob.float().numpy(),
                "bits": self.bits.float().numpy(), "nats": self.nats.float().numpy(),
                "mean_loss": np.float32(self.mean_loss), "perplexity": np.float32(self.perplexity),
                "expected_ids": np.array(self.expected_ids, dtype=np.int64),
                "expected_prob": self.expected_prob.float().numpy()}


def surprise_from_logits(model: Transformer, ids: torch.Tensor, logits: torch.Tensor) -> Surprise:
    """Surprise of a (T,) decoder sequence from its (T, vocab) logits; InputError when T < 2."""
    ids = ids.long().cpu()
    if ids.numel() < 2:
        raise InputError("surprise_one_token")
    nats = token_nats(logits.cpu(), ids)  # (T-1,)
    top_p, top = torch.softmax(logits[:-1].double().cpu(), dim=-1).max(dim=-1)  # (T-1,) what it expected instead
    unk = unknown_id(model)
    return Surprise(ids=ids.tolist(), labels=sequence_labels(model, ids.tolist()), prob=torch.exp(-nats), nats=nats,
                    bits=nats / math.log(2), unknown=[t for t in range(1, len(ids)) if int(ids[t]) == unk],
                    expected_ids=top.tolist(), expected_prob=top_p,
                    expected_labels=token_labels(model, top.tolist(), context=ids.tolist()))


def surprise(model: Transformer, prep: Prepared) -> Surprise:
    """Per-token probability and surprisal of a prepared text (the target, given the source, for encoder-decoder)."""
    ids = sequence(prep, "decoder")  # (T,)
    if ids.numel() < 2:
        raise InputError("surprise_one_token")
    return surprise_from_logits(model, ids, logits_of(model, prep))
