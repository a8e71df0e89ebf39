"""Synthetic tasks written as text, tokenized by cl100k_base, with the vocabulary compacted to their tokens.

A learner who types "d a c b" in the app gets exactly the tokens the model was trained on: "d" at the
start and " a" after a space are different cl100k tokens, so every symbol is in the vocabulary in both forms.
"""
from __future__ import annotations

import random
from collections.abc import Callable

import torch

from ..analysis.next_token import generate_batch
from ..errors import TaskError
from ..model.masks import pad_batch
from ..model.transformer import Transformer
from ..text.tokenizer import load_encoding
from .data import IGNORE, Batch
from .task import BOS, ENCODING, LETTERS, DecoderTask, Example, Task, _pad_labels, encode, single_token  # noqa: F401

# (re-exported)


class SeqToSeqTask(Task):
    """Encoder-decoder: src = symbols, tgt = BOS + f(symbols); teacher forcing, greedy answers."""

    arch = "encoder_decoder"
    metric = "exact-token accuracy of the greedy answer (generated token by token after BOS)"

    def __init__(self, name: str, fn: Callable[[list[str]], list[str]], description: str, description_zh: str,
                 example: str, source_of: Callable[[int, int], int] | None = None,
                 symbols: tuple[str, ...] = LETTERS[:10], lengths: tuple[int, int] = (3, 10)):
        self.name, self.fn, self.symbols, self.lengths = name, fn, symbols, lengths
        self.source_of = source_of  # (answer position i, length L) -> the input position it copies
        self.description, self.description_zh = description, description_zh
        answer = self.fn(example.split())
        self.example = Example(example, " ".join([BOS, *answer[:-1]]))  # the decoder input of teacher forcing

    def sample(self, rng: random.Random) -> Example:
        syms = [rng.choice(self.symbols) for _ in range(rng.randint(*self.lengths))]
        return Example(" ".join(syms), f"{BOS} " + " ".join(self.fn(syms)))

    def vocab_texts(self) -> list[str]:
        return [BOS, *self.symbols, *(" " + s for s in self.symbols)]

    def batch(self, examples: list[Example], *, scored: bool = False) -> Batch:
        src, src_lengths = pad_batch([self.to_ids(e.src) for e in examples])  # (B, Ts), (B,)
        tgt = [self.to_ids(e.tgt) for e in examples]
        tgt_in, tgt_lengths = pad_batch([t[:-1] for t in tgt])  # (B, Tt) BOS + answer without its last
        return Batch(src, _pad_labels([t[1:] for t in tgt]), tgt_in, src_lengths, tgt_lengths)

    def greedy(self, model: Transformer, src: torch.Tensor, src_lengths: torch.Tensor, steps: int) -> torch.Tensor:
        """(B, steps) answers generated token by token after BOS, each step reading its own output."""
        bos = torch.full((src.size(0), 1), self.index[single_token(BOS)], dtype=torch.long)  # (B, 1)
        return generate_batch(model, bos, steps, src=src, src_lengths=src_lengths)  # (B, steps)

    def accuracy(self, model: Transformer, n: int = 256, seed: int = 2024) -> float:
        """Exact-token accuracy of greedy answers on n fresh examples."""
        b = self.make_batch(random.Random(seed), n)
        answers = self.greedy(model, b.src, b.src_lengths, b.labels.size(1))  # (B, T)
        scored = b.labels != IGNORE
        return float((answers == b.labels)[scored].float().mean())

    def expected_alignment(self, ex: Example) -> torch.Tensor:
        """(Tt, Ts) bool: the input positions answer step i should read (by position, else by symbol)."""
        src, answer = self.to_ids(ex.src), self.to_ids(ex.tgt)[1:]
        L = len(src)
        if self.source_of is not None:
            return torch.tensor([[j == self.source_of(i, L) for j in range(L)] for i in range(L)])
        symbol = {self.index[single_token(s)]: s for s in self.symbols} | {
            self.index[single_token(" " + s)]: s for s in self.symbols}
        return torch.tensor([[symbol[src[j]] == symbol[answer[i]] for j in range(L)] for i in range(L)])

    def solve(self, model: Transformer, src_text: str) -> str:
        """The model's greedy answer text for one input (as many tokens as the input has)."""
        ids = torch.tensor([self.to_ids(src_text)])
        if not 1 <= ids.size(1) < self.max_len:
            raise TaskError("task_length", most=self.max_len - 1, lo=self.lengths[0], hi=self.lengths[1])
        out = self.greedy(model, ids, torch.tensor([ids.size(1)]), ids.size(1))[0]
        return load_encoding(ENCODING).decode([self.vocab_map[i] for i in out.tolist()])


class RepeatTask(DecoderTask):
    """A random span of distinct symbols, then the same span again: induction heads copy it."""

    name = "repeat"
    description = "A random span of letters, then the same span again: the model must copy the first half."
    description_zh = "随机的一串字母，然后把同一串再写一遍：模型要照抄前半段（归纳头）。"
    metric = "next-token accuracy on the second half after its first letter (the first is unpredictable)"
    example = Example("d a c b g f d")

    def __init__(self, symbols: tuple[str, ...] = LETTERS, lengths: tuple[int, int] = (3, 10)) -> None:
        self.symbols, self.lengths = symbols, lengths

    def sample(self, rng: random.Random) -> Example:
        span = rng.sample(self.symbols, rng.randint(*self.lengths))
        return Example(" ".join(span + span))

    def vocab_texts(self) -> list[str]:
        return [*self.symbols, *(" " + s for s in self.symbols)]

    def targets(self, ex: Example) -> tuple[list[int], list[bool], list[bool]]:
        ids = self.to_ids(ex.src)
        L = len(ids) // 2
        flags = [t >= L for t in range(len(ids) - 1)]  # predict ids[L + 1 :] from inside the second half
        return ids, flags, flags


class CountTask(DecoderTask):
    """Count up from a random start by a step of 1, 2 or 3: "4 7 10 13" continues " 16 19"."""

    name = "count"
    description = "Counting: numbers that go up by the same step (1, 2 or 3); the model continues the count."
    description_zh = "数数：数字按相同的步长（1、2 或 3）递增，模型接着往下数。"
    metric = "next-token accuracy on the numbers after the first two (the first two set start and step)"
    example = Example("4 7 10 13")

    def __init__(self, top: int = 99, steps: tuple[int, ...] = (1, 2, 3), counts: tuple[int, int] = (4, 8)) -> None:
        self.top, self.steps, self.counts = top, steps, counts

    def sample(self, rng: random.Random) -> Example:
        step, n = rng.choice(self.steps), rng.randint(*self.counts)
        start = rng.randint(0, self.top - step * (n - 1))
        return Example(" ".join(str(start + step * k) for k in range(n)))

    def vocab_texts(self) -> list[str]:
        return [" ", *(str(k) for k in range(self.top + 1))]

    def targets(self, ex: Example) -> tuple[list[int], list[bool], list[bool]]:
        ids = self.to_ids(ex.src)  # number, " ", number, " ", ...
        space = self.index[single_token(" ")]
        trained = [t >= 2 for t in range(len(ids) - 1)]  # after the second number is read
        scored = [t >= 2 and ids[t + 1] != space for t in range(len(ids) - 1)]
        return ids, trained, scored


TASKS: dict[str, Task] = {
    "copy": SeqToSeqTask(
        "copy", lambda s: list(s), "Copy the letters: the answer after '=' is the input again.",
        "复制：'=' 后面的答案就是输入的字母串。", "d a c b", lambda i, L: i,
    ),
    "reverse": SeqToSeqTask(
        "reverse", lambda s: s[::-1], "Reverse the letters: the answer after '=' is the input backwards.",
        "倒序：'=' 后面的答案是把输入的字母倒过来。", "d a c b", lambda i, L: L - 1 - i,
    ),
    "sort": SeqToSeqTask(
        "sort", sorted, "Sort the letters alphabetically: the answer after '=' is the input in order.",
        "排序：'=' 后面的答案是按字母顺序排好的输入。", "d a c b",
    ),
    "repeat": RepeatTask(),
    "count": CountTask(),
}

from .translation import TranslationTask  # noqa: E402 - it builds on Task, defined above

TASKS["dates"] = TranslationTask()

from .ioi import NameMoverTask  # noqa: E402 - registered beside the others

TASKS["ioi"] = NameMoverTask()


def get_task(name: str) -> Task:
    """A task by name, or TaskError listing the names."""
    if name not in TASKS:
        raise TaskError("unknown_task", name=str(name)[:40], choices=", ".join(sorted(TASKS)))
    return TASKS[name]
