"""Second ("corrupted") texts for activation patching: two words swapped (by default the IOI corruption), random
tokens of the same length, or a text typed by hand (nothing to compute).

The IOI corruption (Wang et al., 2022; TransformerLens's IOI demo pairs its prompts the same way): in "When Mary and
John went to the store, John gave a drink to" the name mentioned twice (John, the subject) is the one the model must
not answer. The corrupted text changes the repeated name's last mention to the other name ("…, Mary gave a drink
to"): the right answer flips from Mary to John while every other token stays, so the two texts line up position by
position. (Wang et al. also use an "ABC" text, a third name there instead: type it as the word to put in.) In
Chinese, where no space separates words, the two names are the two characters either side of 和 (与, 跟, 同) in
"王芳和李娜去了商店，李娜把一瓶水给了", the one that comes back being the repeated one.
"""
from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from ..errors import InputError
from ..model.transformer import Transformer
from ..text.inputs import UNK, real_ids, to_model_ids
from ..text.tokenizer import load_encoding, tokenize

WORD = re.compile(r"\w+")
CJK = re.compile(r"[\u3400-\u9fff]")
CJK_PAIR = re.compile(r"([\u3400-\u9fff]{2})[和与跟同]([\u3400-\u9fff]{2})")  # "王芳和李娜": two-character names
SENTENCE_END = re.compile(r"[.!?。！？]\s*$")
MAX_WORDS = 200  # words offered to pick from
RANDOM_TRIES = 20
WORD_TOKEN = re.compile(r"^ [A-Za-z]+$")  # a space and letters: read back as the same one token after any other


def words(text: str) -> list[str]:
    """The text's distinct words, in order of first mention (at most MAX_WORDS); in Chinese, the names of an IOI
    sentence first (a run of characters is no word)."""
    names = _cjk_names(text) or ()
    seen = dict.fromkeys([*names, *(m.group() for m in WORD.finditer(text))])
    return list(seen)[:MAX_WORDS]


def _cjk_names(text: str) -> tuple[str, str] | None:
    """(the repeated name, the other) of a Chinese IOI sentence: "X和Y…，Y…" gives (Y, X)."""
    for m in CJK_PAIR.finditer(text):
        rest = text[m.end():]
        for again, other in ((m.group(2), m.group(1)), (m.group(1), m.group(2))):
            if again != other and again in rest:
                return again, other
    return None


def repeated_name(text: str) -> tuple[str, str] | None:
    """(the name mentioned twice or more, another name mentioned once before its last mention): a name is a word
    written with a capital that is not only ever a sentence's first word. None when the text has no such pair."""
    mentions: dict[str, list[int]] = {}
    inside: set[str] = set()  # names seen somewhere else than a sentence's start
    for i, m in enumerate(WORD.finditer(text)):
        word = m.group()
        if not word[0].isupper():
            continue
        mentions.setdefault(word, []).append(i)
        if i and not SENTENCE_END.search(text[:m.start()]):
            inside.add(word)
    names = {w: at for w, at in mentions.items() if w in inside}
    twice = [w for w, at in names.items() if len(at) >= 2]
    if not twice:
        return _cjk_names(text)
    subject = max(twice, key=lambda w: names[w][-1])  # the name mentioned last, again
    others = [w for w, at in names.items() if len(at) == 1 and at[0] < names[subject][-1]]
    if not others:
        return None
    other = min(others, key=lambda w: abs(names[w][0] - names[subject][0]))  # the one beside its first mention
    return subject, other


def _pattern(word: str) -> str:
    """A word as a whole word; Chinese, written without spaces, as it is."""
    return re.escape(word) if CJK.search(word) else rf"(?<!\w){re.escape(word)}(?!\w)"


def mentions(text: str, word: str) -> list[re.Match]:
    """Every mention of a word in the text (a whole word; Chinese as it is)."""
    return list(re.finditer(_pattern(word), text))


def replace_word(text: str, old: str, new: str, *, every: bool = False) -> str:
    """The text with `old`'s last mention changed to `new` (the IOI corruption), or with every=True `old` and `new`
    swapped at every mention. InputError when `old` is not a word of the text or the two are the same."""
    old, new = old.strip(), new.strip()
    if not old or not new or old == new:
        raise InputError("corrupt_same")
    found = mentions(text, old)
    if not found:
        raise InputError("corrupt_no_words")
    if every:
        return re.sub(f"{_pattern(old)}|{_pattern(new)}", lambda m: new if m.group() == old else old, text)
    last = found[-1]
    return text[:last.start()] + new + text[last.end():]


def ioi_corruption(text: str) -> str | None:
    """The IOI corrupted text: the repeated name's last mention changed to the other name; None without names."""
    names = repeated_name(text)
    return None if names is None else replace_word(text, *names)


@lru_cache(maxsize=8)
def _word_tokens(encoding: str, vocab_map: tuple[int, ...], vocab_size: int) -> np.ndarray:
    """Model ids whose text is a space and letters (a whole word the tokenizer reads back as that one token)."""
    enc = load_encoding(encoding)
    real = vocab_map or range(vocab_size)
    ok = []
    for model_id, i in enumerate(real):
        if i == UNK:
            continue
        try:
            text = enc.decode_single_token_bytes(i).decode("utf-8")
        except (KeyError, ValueError):
            continue
        if WORD_TOKEN.match(text):
            ok.append(model_id)
    return np.array(ok, dtype=np.int64)


def random_tokens(model: Transformer, n: int, seed: int = 0) -> str:
    """A text of n random tokens of this model (words after a space, so it reads back as n tokens: texts of the same
    length patch position by position). InputError when the vocabulary cannot make one."""
    cfg = model.cfg
    n = max(1, int(n))
    pool = _word_tokens(cfg.encoding, tuple(cfg.vocab_map or ()), cfg.vocab_size)
    if len(pool) < 2:
        raise InputError("corrupt_random", n=n)
    rng = np.random.default_rng(seed)
    enc = load_encoding(cfg.encoding)
    for _ in range(RANDOM_TRIES):
        ids = rng.choice(pool, size=n).tolist()
        text = b"".join(enc.decode_single_token_bytes(i) for i in real_ids(model, ids)).decode("utf-8")
        tok = tokenize(text, cfg.encoding, by_line=bool(cfg.vocab_map))
        if len(tok.ids) == n and to_model_ids(tok, model)[0] == ids:
            return text
    raise InputError("corrupt_random", n=n)


def next_word(word: str) -> str:
    """A word as the text's next token spells it: after a space (" Mary"), except in Chinese ("李娜")."""
    return word if CJK.search(word[:1]) else " " + word
