"""Any text as an answer: encoded with the model's own tokenizer, and scored as the model would have written it.

A one-token answer is read at the text's last position. An answer of n tokens is scored by its summed
log-probability, teacher-forced: run the text followed by the answer's first n − 1 tokens once, and add
log p(answer token i) read at the position before it (the text's last position for the first token). The difference
of two answers' summed log-probabilities is the logit difference when both are one token (the softmax's
normaliser cancels). What is linear in one logit (direct logit attribution, the lens's answer row) reads the
answer's first token. An answer is encoded alone and appended (as TransformerLens does): " John" after "to" is the
token " John", never a merge across the boundary.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import InputError
from ..model.hooks import act_name
from ..model.trace import run_with_trace
from ..model.transformer import Transformer
from ..text.inputs import Prepared, missing_positions, model_text, to_model_ids, token_labels
from ..text.tokenizer import tokenize
from .blocks import sequence

MAX_CHARS = 200  # an answer longer than this is refused (a word, a name, a short phrase)
MAX_TOKENS = 16  # and one of more tokens than this


@dataclass(frozen=True)
class Answer:
    """An answer as model ids, with how the tokenizer split it."""

    text: str  # as typed (broken characters replaced by U+FFFD), or the text of the ids picked
    ids: tuple[int, ...]  # model ids, at least one
    labels: tuple[str, ...]  # each token as the pages show it
    cleaned: bool = False  # the typed text held broken characters (lone surrogates): replaced
    special_as_text: bool = False  # it spells a special token ("<|endoftext|>") that was read as plain text

    @property
    def first(self) -> int:
        return self.ids[0]

    def __len__(self) -> int:
        return len(self.ids)


def _special_names(encoding: str) -> tuple[str, ...]:
    from ..text.tokenizer import load_encoding

    return tuple(load_encoding(encoding).special_tokens_set)


def answer_of_text(model: Transformer, text: str, *, allow_special: bool = False) -> Answer:
    """The answer a learner typed, encoded as the model reads text; InputError (a message in the learner's language)
    for an empty or blank answer, one too long, or one with tokens the model's vocabulary does not hold."""
    text = text if isinstance(text, str) else str(text)
    if not text:
        raise InputError("answer_empty")
    if not text.strip():
        raise InputError("answer_blank")
    if len(text) > MAX_CHARS:
        raise InputError("answer_long", n=f"{len(text):,}", max=MAX_CHARS)
    cfg = model.cfg
    tok = tokenize(text, cfg.encoding, allow_special=allow_special, by_line=bool(cfg.vocab_map))
    if len(tok.ids) > MAX_TOKENS:
        raise InputError("answer_tokens", n=len(tok.ids), max=MAX_TOKENS)
    missing = missing_positions(tok, model)
    if missing:
        shown = ", ".join(repr(tok.tokens[p].text) for p in missing[:8])
        raise InputError("answer_unknown", tokens=shown)
    ids, _ = to_model_ids(tok, model)
    special = not allow_special and any(s in tok.text for s in _special_names(cfg.encoding))
    return Answer(tok.text, tuple(int(i) for i in ids), tuple(token_labels(model, ids)), tok.cleaned, special)


def answer_of_ids(model: Transformer, ids: Sequence[int]) -> Answer:
    """An answer given as model ids (a quick pick among the model's top tokens)."""
    ids = list(ids)
    if not ids:
        raise InputError("answer_empty")
    if len(ids) > MAX_TOKENS:
        raise InputError("answer_tokens", n=len(ids), max=MAX_TOKENS)
    if any(isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= int(i) < model.cfg.vocab_size
           for i in ids):
        raise InputError("effects_tokens")
    ids = [int(i) for i in ids]
    return Answer(model_text(model, ids), tuple(ids), tuple(token_labels(model, ids)))


def as_answer(model: Transformer, value, *, allow_special: bool = False) -> Answer:
    """An Answer from what a caller has: an Answer, a model id, a sequence of model ids, or text."""
    if isinstance(value, Answer):
        return value
    if isinstance(value, str):
        return answer_of_text(model, value, allow_special=allow_special)
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return answer_of_ids(model, [value])
    if isinstance(value, (list, tuple)):
        return answer_of_ids(model, value)
    raise InputError("effects_tokens")


def with_space(model: Transformer, answer: Answer) -> Answer | None:
    """The same answer written with a leading space (how a word after a space is spelled), when it starts with a
    letter or digit of a script that puts spaces between words and spells differently; None otherwise."""
    head = answer.text[:1]
    if not head.isalnum() or ord(head) >= 0x2E80:  # CJK and later blocks write no space between words
        return None
    try:
        spaced = answer_of_text(model, " " + answer.text)
    except InputError:
        return None
    return spaced if spaced.ids != answer.ids else None


def check_room(model: Transformer, prep: Prepared, answer: Answer) -> None:
    """InputError when the text and the answer's tokens but its last do not fit the model's positions."""
    n = sequence(prep, "decoder").numel()
    if n + len(answer) - 1 > model.cfg.max_len:
        raise InputError("answer_no_room", n=len(answer), room=max(1, model.cfg.max_len - n + 1),
                         max_len=model.cfg.max_len)


def continued(prep: Prepared, answer: Answer) -> Prepared:
    """The input with the answer's tokens but its last appended to the decoder's sequence (teacher forcing)."""
    if len(answer) == 1:
        return prep
    ids = sequence(prep, "decoder")
    more = torch.cat([ids, torch.tensor(answer.ids[:-1], dtype=ids.dtype, device=ids.device)])[None]  # (1, T + n - 1)
    if prep.tgt_ids is None:
        return Prepared(prep.src, prep.tgt, more, None, prep.src_unknown, [], prep.cut_from)
    return Prepared(prep.src, prep.tgt, prep.src_ids, more, prep.src_unknown, prep.tgt_unknown, prep.cut_from)


@dataclass(frozen=True)
class AnswerScore:
    """log p of each of an answer's tokens, read after the text and the answer's tokens before it."""

    answer: Answer
    logprobs: np.ndarray  # (n,) float64 natural log
    first_logit: float  # the first token's logit at the text's last position
    first_rank: int  # its rank there (1 = the model's top token)

    @property
    def total(self) -> float:
        """The answer's summed log-probability (its score)."""
        return float(self.logprobs.sum())

    @property
    def prob(self) -> float:
        """p(answer) = exp(summed log-probability): the product of its tokens' probabilities."""
        return float(np.exp(self.total))

    def arrays(self) -> dict[str, np.ndarray]:
        return {"ids": np.array(self.answer.ids, dtype=np.int64), "logprobs": self.logprobs,
                "total_logprob": np.array([self.total]),
                "first_logit_rank": np.array([self.first_logit, self.first_rank], dtype=np.float64)}


def score_answer(model: Transformer, prep: Prepared, answer, *, allow_special: bool = False) -> AnswerScore:
    """An answer's summed log-probability after the text (one forward of the text and the answer's tokens but its
    last), with each token's log p."""
    return score_answers(model, prep, [answer], allow_special=allow_special)[0]


def score_answers(model: Transformer, prep: Prepared, answers: Sequence, *,
                  allow_special: bool = False) -> list[AnswerScore]:
    """score_answer of each answer, with the forwards shared: answers that share their tokens but the last are read
    from one forward (every one-token answer from the text's own), and only the rows an answer is read on go through
    the output layer."""
    answers = [as_answer(model, a, allow_special=allow_special) for a in answers]
    T, read, scores = sequence(prep, "decoder").numel(), {}, []
    for answer in answers:
        check_room(model, prep, answer)
        if answer.ids[:-1] not in read:  # (n, vocab) logits at the text's last position and the answer's tokens
            read[answer.ids[:-1]] = _read_rows(model, continued(prep, answer), T - 1)
        logits, n = read[answer.ids[:-1]], len(answer)
        logp = torch.log_softmax(logits, dim=-1)  # (n, vocab)
        first = logits[0, answer.first]
        scores.append(AnswerScore(answer, logp[torch.arange(n), torch.tensor(answer.ids)].numpy(), float(first),
                                  int((logits[0] > first).sum()) + 1))
    return scores


def _read_rows(model: Transformer, prep: Prepared, start: int) -> torch.Tensor:
    """(T - start, vocab) float64 CPU logits of the decoder positions from `start` on: the forward stops at the
    decoder's output, and only those rows go through the output layer."""
    out = act_name("stack_out", side="decoder")
    _, trace = run_with_trace(model, prep.src_ids, prep.tgt_ids, names=[out], stop_early=True)
    p = next(model.parameters())
    with torch.inference_mode():
        return model.out(trace[out][0, start:].to(p.device, p.dtype)).double().cpu()
