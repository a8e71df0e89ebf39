"""English dates and numbers -> Chinese: a deterministic generator, its vocabulary, batches and scoring.

Inputs (English)                              Output (Chinese)
  "23 November 2026"      (day month year)      "2026年11月23日"
  "November 23, 2026"     (month day, year)     "2026年11月23日"
  "four hundred and twelve" (number in words)   "四百一十二"
  "412"                    (number in digits)   "四百一十二"

Dates: years 1900..2099, every real calendar day (leap years: Gregorian rule). The Chinese date
writes the year, month and day in Arabic digits, no leading zeros, with 年 月 日.

English number words (British style, 0..99,999):
  - 0..19: zero one ... nineteen; tens: twenty ... ninety; 21..99 hyphenated ("forty-five").
  - h hundred [and rest]: "four hundred and twelve", "four hundred" (no "and" with nothing after).
  - t thousand [rest]: "one thousand two hundred and thirty-four"; "and" when the rest is below 100:
    "one thousand and five", "one thousand and fifty"; t itself may be 1..99 ("twelve thousand").

Chinese numbers (standard written form, 0..99,999,999; 二 is used everywhere, never 两):
  1. Digits: 零 一 二 三 四 五 六 七 八 九; units 十 百 千 within a group of four digits, 万 after the
     higher group (12345 = 一万二千三百四十五).
  2. A nonzero digit d at place p is written d + unit (unit "" for ones): 3 at hundreds -> 三百.
  3. Zeros: a run of zeros between two nonzero digits is one 零 (1005 -> 一千零五, 10010 -> 一万零一十);
     trailing zeros are dropped (1200 -> 一千二百); a group below 1000 after 万 gets a 零
     (10500 -> 一万零五百); 0 alone is 零.
  4. 十 at the very start: 10..19 are written 十, 十一 .. 十九 (no leading 一); inside a number the
     一 is kept: 110 -> 一百一十, 112 -> 一百一十二, 1010 -> 一千零一十, 100010 -> 十万零一十.
"""
from __future__ import annotations

import calendar
import random
from collections import Counter
from dataclasses import dataclass
from functools import cached_property

import torch

from ..model.config import TransformerConfig
from ..model.masks import pad_batch
from ..model.transformer import Transformer
from .corpora import is_heldout
from .data import IGNORE, Batch
from .tasks import Example as TaskExample
from .tasks import Task, encode
from .vocab import Vocab, build_vocab

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")
ONES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
        "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
ZH_DIGITS = "零一二三四五六七八九"
ZH_UNITS = ("", "十", "百", "千")

BOS_TEXT = "="  # cl100k id 28, as the project's other seq2seq tasks: the decoder starts with "="
BOS_REAL_ID = 28
EOS_REAL_ID = 100257  # cl100k's <|endoftext|> ends every answer
KINDS = ("date_dmy", "date_mdy", "words", "digits")
PROVENANCE = {
    "generator": "dates.py (deterministic rules in its docstring)",
    "kinds": KINDS,
    "years": "1900..2099",
    "numbers": "0..9999 (words and digits)",
    "split": "held-out = values (a date, or a number) with sha256('dates-heldout:' + key) < 0.05; "
             "both English forms of a held-out value are held out",
    "bos": "'=' (cl100k 28)", "eos": "<|endoftext|> (cl100k 100257)", "unk": "model id 0 (shown as ⟨unk⟩)",
}


# ---------------------------------------------------------------- the rules


def english_number(n: int) -> str:
    """0..999,999 in British English words ("four hundred and twelve")."""
    if not 0 <= n < 1_000_000:
        raise ValueError(f"english_number covers 0..999999, got {n}")
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + ("" if n % 10 == 0 else "-" + ONES[n % 10])
    if n < 1000:
        rest = n % 100
        return ONES[n // 100] + " hundred" + ("" if rest == 0 else " and " + english_number(rest))
    rest = n % 1000
    head = english_number(n // 1000) + " thousand"
    if rest == 0:
        return head
    return head + (" and " if rest < 100 else " ") + english_number(rest)


def _group_zh(n: int, leading: bool) -> str:
    """1..9999 in Chinese; `leading` = this group starts the number (十二 rather than 一十二)."""
    digits = [int(c) for c in f"{n:04d}"]  # thousands, hundreds, tens, ones
    out, zero_pending, started = [], False, False
    for pos, d in enumerate(digits):
        place = 3 - pos
        if d == 0:
            zero_pending = zero_pending or started
            continue
        if zero_pending:
            out.append("零")
            zero_pending = False
        if place == 1 and d == 1 and leading and not started:
            out.append("十")  # rule 4: 十 at the very start
        else:
            out.append(ZH_DIGITS[d] + ZH_UNITS[place])
        started = True
    return "".join(out)


def chinese_number(n: int) -> str:
    """0..99,999,999 in Chinese numerals (rules 1-4 in the module docstring)."""
    if not 0 <= n < 100_000_000:
        raise ValueError(f"chinese_number covers 0..99999999, got {n}")
    if n == 0:
        return "零"
    high, low = divmod(n, 10_000)
    if high == 0:
        return _group_zh(low, leading=True)
    out = _group_zh(high, leading=True) + "万"
    if low == 0:
        return out
    return out + ("零" if low < 1000 else "") + _group_zh(low, leading=False)


def english_date(y: int, m: int, d: int, style: str) -> str:
    if style == "date_dmy":
        return f"{d} {MONTHS[m - 1]} {y}"
    if style == "date_mdy":
        return f"{MONTHS[m - 1]} {d}, {y}"
    raise ValueError(f"unknown date style {style!r}")


def chinese_date(y: int, m: int, d: int) -> str:
    return f"{y}年{m}月{d}日"


# ---------------------------------------------------------------- examples and the split


@dataclass(frozen=True)
class Example:
    src: str
    tgt: str
    kind: str
    key: str  # the value ("date:2026-11-23", "num:412"): the held-out split is decided on it


def date_examples(years: range = range(1900, 2100)) -> list[Example]:
    out = []
    for y in years:
        for m in range(1, 13):
            for d in range(1, calendar.monthrange(y, m)[1] + 1):
                key = f"date:{y:04d}-{m:02d}-{d:02d}"
                out += [Example(english_date(y, m, d, s), chinese_date(y, m, d), s, key)
                        for s in ("date_dmy", "date_mdy")]
    return out


def number_examples(top: int = 9999) -> list[Example]:
    out = []
    for n in range(top + 1):
        zh, key = chinese_number(n), f"num:{n}"
        out += [Example(english_number(n), zh, "words", key), Example(str(n), zh, "digits", key)]
    return out


def universe(top: int = 9999, years: range = range(1900, 2100)) -> list[Example]:
    """Every input the generator can produce (about 166,000 for the defaults)."""
    return date_examples(years) + number_examples(top)


def split(examples: list[Example], fraction: float = 0.05) -> tuple[list[Example], list[Example]]:
    """(train, heldout) by a hash of each example's value key."""
    held = [is_heldout(e.key, fraction, salt="dates-heldout") for e in examples]
    return [e for e, h in zip(examples, held) if not h], [e for e, h in zip(examples, held) if h]


# ---------------------------------------------------------------- the task the training loop and the app use


class TranslationTask(Task):
    """English dates and numbers -> Chinese, as an encoder-decoder task: src = the English, tgt = BOS + the Chinese
    + EOS. The held-out values (5 %, by hash) are never sampled for training; accuracy is exact match on them."""

    name = "dates"
    arch = "encoder_decoder"
    description = ("Translation: English dates and numbers into Chinese (23 November 2026 → 2026年11月23日, "
                   "four hundred and twelve → 四百一十二).")
    description_zh = ("翻译：把英文的日期和数字译成中文（23 November 2026 → 2026年11月23日，"
                      "four hundred and twelve → 四百一十二）。")
    metric = "exact match of the greedy answer (token by token until EOS) on held-out values never trained on"
    example = TaskExample("23 November 2026", "=2026年11月23日")
    max_len = 32

    @cached_property
    def splits(self) -> tuple[list[Example], list[Example]]:
        return split(universe())

    @cached_property
    def vocab(self) -> Vocab:
        counts: Counter = Counter()
        for e in universe():
            counts.update(encode(e.src))
            counts.update(encode(e.tgt))
        return build_vocab(counts, None, extra=(("bos", BOS_REAL_ID), ("eos", EOS_REAL_ID)))

    @cached_property
    def vocab_map(self) -> tuple[int, ...]:
        return self.vocab.real_ids

    @cached_property
    def index(self) -> dict[int, int]:
        return self.vocab.index()

    def sample(self, rng: random.Random) -> TaskExample:
        kind = rng.choice(KINDS)  # the four forms equally often
        pool = self._train_by_kind[kind]
        e = pool[rng.randrange(len(pool))]
        return TaskExample(e.src, e.tgt)

    @cached_property
    def _train_by_kind(self) -> dict[str, list[Example]]:
        return {k: [e for e in self.splits[0] if e.kind == k] for k in KINDS}

    def vocab_texts(self) -> list[str]:
        return []

    def pair(self, e: TaskExample) -> tuple[list[int], list[int]]:
        """(source model ids, BOS + answer model ids + EOS)."""
        return self.to_ids(e.src), [self.vocab.special("bos"), *self.to_ids(e.tgt), self.vocab.special("eos")]

    def batch(self, examples: list[TaskExample], *, scored: bool = False) -> Batch:
        pairs = [self.pair(e) for e in examples]
        src, src_lengths = pad_batch([s for s, _ in pairs])  # (B, Ts), (B,)
        tgt_in, tgt_lengths = pad_batch([t[:-1] for _, t in pairs])  # (B, Tt) BOS + answer
        labels = pad_batch([t[1:] for _, t in pairs], IGNORE)[0]  # (B, Tt) answer + EOS
        return Batch(src, labels, tgt_in, src_lengths, tgt_lengths)

    @torch.no_grad()
    def answers(self, model: Transformer, sources: list[str], max_steps: int = 24) -> list[list[int]]:
        """Greedy answers (model ids, without BOS/EOS), generated token by token until EOS."""
        from ..analysis.next_token import generate_batch

        src, lengths = pad_batch([self.to_ids(s) for s in sources])
        bos, eos = self.vocab.special("bos"), self.vocab.special("eos")
        out = generate_batch(model, torch.full((len(sources), 1), bos), max_steps, src=src, src_lengths=lengths)
        return [row[: row.index(eos)] if eos in row else row for row in out.tolist()]

    def accuracy(self, model: Transformer, n: int = 256, seed: int = 2024) -> float:
        """Exact match on n held-out examples (all of them when n is larger)."""
        held = self.splits[1]
        picked = held if n >= len(held) else random.Random(seed).sample(held, n)
        hits = 0
        for i in range(0, len(picked), 256):
            chunk = picked[i : i + 256]
            got = self.answers(model, [e.src for e in chunk])
            hits += sum(a == self.to_ids(e.tgt) for a, e in zip(got, chunk))
        return hits / max(1, len(picked))

    def translate(self, model: Transformer, text: str) -> str:
        """The model's Chinese for one English date or number."""
        from ..text.inputs import model_text

        return model_text(model, self.answers(model, [text])[0])

    def model_config(self, **changes) -> TransformerConfig:
        base = dict(arch=self.arch, vocab_size=self.vocab.size, vocab_map=self.vocab_map, d_model=128, n_heads=4,
                    n_layers=2, d_ffn=512, dropout=0.0, max_len=self.max_len, encoding="cl100k_base")
        return TransformerConfig(**{**base, **changes})
