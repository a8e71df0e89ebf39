"""English dates and numbers -> Chinese: a deterministic generator, its vocabulary, batches and scoring.

Inputs (English)                              Output (Chinese)
  "23 November 2026"      (day month year)      "2026年11月23日"
  "November 23, 2026"     (month day, year)     "2026年11月23日"
  "four hundred and twelve" (number in words)   "四百一十二"
  "412"                    (number in digits)   "四百一十二"

The domain (what the model is built for, and what `in_domain` accepts):
  - dates 1900..2099, every real calendar day (leap years: Gregorian rule), as "23 November 2026" or
    "November 23, 2026"; the Chinese date writes year, month and day in Arabic digits with 年 月 日;
  - whole numbers 0..99,999, in digits ("412", no leading zeros or separators) or in words (below).
Training samples the four forms equally often, and numbers by their count of digits (1 to 5 equally often), so a
two-digit number is as common as a five-digit one. Held out (never trained on, 5 % by a hash of the value): dates
and numbers of 10,000 and above. Every number below 10,000 is trained on.

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
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache

import torch

from ..model.config import TransformerConfig
from ..model.masks import pad_batch
from ..model.transformer import Transformer
from .corpora import is_heldout
from .data import IGNORE, Batch
from .task import Example as TaskExample
from .task import Task, encode
from .vocab import Vocab, build_vocab

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")
ONES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
        "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
NUMBER_TOP = 99_999
YEARS = range(1900, 2100)
ALWAYS_TRAINED = 10_000  # numbers below this are never held out: they are what learners type first
ZH_DIGITS = "零一二三四五六七八九"
ZH_UNITS = ("", "十", "百", "千")

BOS_TEXT = "="  # cl100k id 28, as the project's other seq2seq tasks: the decoder starts with "="
BOS_REAL_ID = 28
EOS_REAL_ID = 100257  # cl100k's <|endoftext|> ends every answer
KINDS = ("date_dmy", "date_mdy", "words", "digits")
# How often a number of 1..5 digits is drawn: with equal weights (the last recipe) 4 of 2,000 five-digit numbers
# in digits and 2 repeated-digit four-digit ones (8868, 8886) stayed wrong.
DIGIT_WEIGHTS = (1, 1, 1, 2, 3)
PROVENANCE = {
    "generator": "dates.py (deterministic rules in its docstring)",
    "kinds": KINDS,
    "years": "1900..2099",
    "numbers": "0..99999 (words and digits), sampled by their count of digits",
    "split": "held-out = dates and numbers ≥ 10,000 with sha256('dates-heldout:' + key) < 0.05; "
             "both English forms of a held-out value are held out; every number below 10,000 is trained on",
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


def date_examples(years: range = YEARS) -> list[Example]:
    out = []
    for y in years:
        for m in range(1, 13):
            for d in range(1, calendar.monthrange(y, m)[1] + 1):
                key = f"date:{y:04d}-{m:02d}-{d:02d}"
                out += [Example(english_date(y, m, d, s), chinese_date(y, m, d), s, key)
                        for s in ("date_dmy", "date_mdy")]
    return out


def number_examples(top: int = NUMBER_TOP) -> list[Example]:
    out = []
    for n in range(top + 1):
        zh, key = chinese_number(n), f"num:{n}"
        out += [Example(english_number(n), zh, "words", key), Example(str(n), zh, "digits", key)]
    return out


@lru_cache(maxsize=2)
def universe(top: int = NUMBER_TOP, years: range = YEARS) -> tuple[Example, ...]:
    """Every input the generator can produce (about 346,000 for the defaults; built once: the split, the vocabulary
    and the strata all read it)."""
    return (*date_examples(years), *number_examples(top))


def split(examples: Sequence[Example], fraction: float = 0.05) -> tuple[list[Example], list[Example]]:
    """(train, heldout) by a hash of each example's value key; numbers below ALWAYS_TRAINED are always trained."""
    held = [is_heldout(e.key, fraction, salt="dates-heldout") and not (e.key.startswith("num:")
            and int(e.key[4:]) < ALWAYS_TRAINED) for e in examples]
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
        texts = Counter(e.src for e in universe()) + Counter(e.tgt for e in universe())  # (each answer is two inputs')
        counts: Counter = Counter()
        for text, n in texts.items():
            for token, k in Counter(encode(text)).items():
                counts[token] += k * n
        return build_vocab(counts, None, extra=(("bos", BOS_REAL_ID), ("eos", EOS_REAL_ID)))

    @cached_property
    def vocab_map(self) -> tuple[int, ...]:
        return self.vocab.real_ids

    @cached_property
    def index(self) -> dict[int, int]:
        return self.vocab.index()

    def sample(self, rng: random.Random) -> TaskExample:
        """The four forms equally often; a number by its count of digits (DIGIT_WEIGHTS: the 90,000 five-digit
        numbers are drawn more often than the ten one-digit ones, which are still seen thousands of times), then half
        the time a round one (1 to digits-1 trailing zeros, equally often): 12,000 and 20,000 are 2 of 90,000
        five-digit numbers, and were missed ("二万零") while 99.8 % of the others were right."""
        kind = rng.choice(KINDS)
        digits = rng.choices((1, 2, 3, 4, 5), DIGIT_WEIGHTS)[0] if kind in ("words", "digits") else 0
        zeros = rng.randint(1, digits - 1) if digits > 1 and rng.random() < 0.5 else 0
        pool = self._train_by_kind[kind, digits, zeros]
        e = pool[rng.randrange(len(pool))]
        return TaskExample(e.src, e.tgt)

    @cached_property
    def _train_by_kind(self) -> dict[tuple[str, int, int], list[Example]]:
        """(kind, digits, trailing zeros) -> training examples (0, 0 for dates; zeros 0 holds every number)."""
        pools: dict[tuple[str, int, int], list[Example]] = {}
        for e in self.splits[0]:
            value = e.key[4:] if e.key.startswith("num:") else ""
            zeros = len(value) - len(value.rstrip("0")) if value != "0" else 0
            pools.setdefault((e.kind, len(value), 0), []).append(e)
            if zeros:
                pools.setdefault((e.kind, len(value), zeros), []).append(e)
        return pools

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
        out = generate_batch(model, torch.full((len(sources), 1), bos), max_steps, src=src, src_lengths=lengths,
                             stop_id=eos)
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
        return translate(model, text)

    def model_config(self, **changes) -> TransformerConfig:
        base = dict(arch=self.arch, vocab_size=self.vocab.size, vocab_map=self.vocab_map, d_model=128, n_heads=4,
                    n_layers=2, d_ffn=512, dropout=0.0, max_len=self.max_len, encoding="cl100k_base")
        return TransformerConfig(**{**base, **changes})


# ---------------------------------------------------------------- the domain, and translating a learner's text


@lru_cache(maxsize=1)
def _number_words() -> dict[str, int]:
    return {english_number(n): n for n in range(NUMBER_TOP + 1)}


MONTH_NUMBER = {m: i + 1 for i, m in enumerate(MONTHS)}
DMY = re.compile(r"(\d{1,2}) ([A-Z][a-z]+) (\d{4})")
MDY = re.compile(r"([A-Z][a-z]+) (\d{1,2}), (\d{4})")


def parse(text: str) -> tuple[str, str] | None:
    """(kind, Chinese) for an input of the generator's domain, exactly as the generator writes it; else None."""
    text = text.strip() if isinstance(text, str) else ""
    if re.fullmatch(r"0|[1-9]\d{0,4}", text):
        return "digits", chinese_number(int(text))
    if text in _number_words():
        return "words", chinese_number(_number_words()[text])
    for kind, pattern, order in (("date_dmy", DMY, (2, 1, 0)), ("date_mdy", MDY, (2, 0, 1))):
        m = pattern.fullmatch(text)
        if m:
            y, month, d = (m.group(i + 1) for i in order)
            if month in MONTH_NUMBER and int(y) in YEARS and not d.startswith("0"):
                mo = MONTH_NUMBER[month]
                if 1 <= int(d) <= calendar.monthrange(int(y), mo)[1]:
                    return kind, chinese_date(int(y), mo, int(d))
    return None


def in_domain(text: str) -> bool:
    """Whether the text is a date or number this model was built for (the generator's exact forms)."""
    return parse(text) is not None


@torch.no_grad()
def translate_batch(model: Transformer, texts: list[str], max_steps: int = 24, batch_size: int = 256) -> list[str]:
    """Greedy translations of English texts, batched, read as the app reads them (a token outside the vocabulary
    becomes ⟨unk⟩, so any text gets an answer); each answer ends at the end-of-text token."""
    from ..analysis.next_token import generate_batch
    from ..text.inputs import model_text, to_model_ids
    from ..text.tokenizer import tokenize

    vmap = model.cfg.vocab_map
    bos, eos = vmap.index(BOS_REAL_ID), vmap.index(EOS_REAL_ID)
    out = []
    texts = [" ".join(str(t).split()) for t in texts]  # "  12 " reads as "12": spaces are no part of the domain
    for i in range(0, len(texts), batch_size):
        chunk = texts[i : i + batch_size]
        ids = [to_model_ids(tokenize(t or " ", model.cfg.encoding, max_tokens=model.cfg.max_len), model)[0]
               for t in chunk]
        src, lengths = pad_batch(ids)  # (B, Ts), (B,)
        rows = generate_batch(model, torch.full((len(chunk), 1), bos), max_steps, src=src, src_lengths=lengths,
                              stop_id=eos)
        out += [model_text(model, row[: row.index(eos)] if eos in row else row) for row in rows.tolist()]
    return out


def translate(model: Transformer, text: str) -> str:
    """The model's Chinese for one English text (greedy, until the end-of-text token)."""
    return translate_batch(model, [text])[0]


# ---------------------------------------------------------------- exact match by stratum (card, bench, tests)

def strata(sample: int | None = None, seed: int = 5) -> dict[str, list[Example]]:
    """The inputs the card reports on: every value of every stratum (sample=None; 90,000 five-digit numbers per form
    take a few minutes on a CPU), or a stratified sample of the five-digit numbers (sample=N, quicker checks)."""
    numbers, dates = number_examples(), date_examples()
    big = range(ALWAYS_TRAINED, NUMBER_TOP + 1)
    picked = set(big if sample is None else random.Random(seed).sample(list(big), sample))
    label = "(all)" if sample is None else f"({sample:,} drawn)"
    held = {e.key for e in split(universe())[1]}
    return {
        "digits 0–9,999 (all)": [e for e in numbers if e.kind == "digits" and int(e.key[4:]) < ALWAYS_TRAINED],
        "words 0–9,999 (all)": [e for e in numbers if e.kind == "words" and int(e.key[4:]) < ALWAYS_TRAINED],
        f"digits 10,000–99,999 {label}": [e for e in numbers if e.kind == "digits" and int(e.key[4:]) in picked],
        f"words 10,000–99,999 {label}": [e for e in numbers if e.kind == "words" and int(e.key[4:]) in picked],
        "numbers ≥ 10,000 held out (all)": [e for e in numbers if e.key in held],
        "dates, 23 November 2026 (all)": [e for e in dates if e.kind == "date_dmy"],
        "dates, November 23, 2026 (all)": [e for e in dates if e.kind == "date_mdy"],
        "dates held out (all)": [e for e in dates if e.key in held],
    }


def exact_match(model: Transformer, examples: list[Example]) -> dict:
    """Exact match of the greedy translations; a few wrong answers to show."""
    got = translate_batch(model, [e.src for e in examples])
    wrong = [(e.src, g, e.tgt) for e, g in zip(examples, got) if g != e.tgt]
    return {"exact": round(1 - len(wrong) / max(len(examples), 1), 5), "n": len(examples),
            "wrong": len(wrong), "examples_wrong": wrong[:5]}
