"""Everyday text, written for this project and found in no training text, and how a model reads it.

The default model's targets are measured here (bench/everyday.py prints them; the build writes them into the card;
a test recomputes the model's figures from the shipped weights). Bits per byte = the sum of −log₂ p over the
predicted tokens ÷ the UTF-8 bytes of those tokens: it does not depend on the tokenizer, so models with different
vocabularies (and an n-gram over cl100k_base) compare fairly. Each text is read on its own; its first token is
not predicted.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..analysis.blocks import logits_of
from ..analysis.surprise import token_nats
from ..model.trace import run
from ..text.inputs import prepare, real_ids
from ..text.tokenizer import encode_by_line, load_encoding

ENGLISH = (
    "I'm going to the store to buy some milk and bread.",
    "Can you send me the report before the meeting tomorrow morning?",
    "The weather is nice today, so we are having lunch outside.",
    "My brother just started a new job at a hospital in the city.",
    "We watched a movie last night and then went to bed early.",
    "Please call me when you get home so I know you are safe.",
    "The train was late again, and I missed the first half of the class.",
    "She said that the children would be back from school at four o'clock.",
    "I think we should ask the teacher for more time to finish the project.",
    "There is a small coffee shop on the corner of the street near my house.",
    "He has been working on this problem for three weeks without a break.",
    "Don't forget to bring your passport and your ticket to the airport.",
)
CHINESE = (
    "今天天气很好，我们一起去公园散步吧。",
    "我明天早上八点要去公司开会。",
    "这家餐厅的菜很好吃，价格也不贵。",
    "请问附近有没有地铁站？",
    "周末我想在家看书，不想出门。",
    "他昨天买了一部新手机，用起来很方便。",
    "孩子们放学以后在学校门口等妈妈。",
    "这个问题我们需要再讨论一下。",
    "我觉得这本书写得非常好，推荐大家去看看。",
    "下个月我们公司要搬到新的办公楼。",
)
CODE = (
    "def add(a, b):\n    return a + b",
    "for i in range(10):\n    print(i * i)",
    "const total = items.reduce((sum, x) => sum + x.price, 0);",
)
EMOJI = (
    "Happy birthday! 🎂🎉 See you at the party tonight 😊",
    "生日快乐🎂！晚上见😊",
)
GROUPS = {"english": ENGLISH, "chinese": CHINESE, "code": CODE, "emoji": EMOJI}
PROMPT = "After dinner we sat in the garden and"  # the greedy-continuation checks
PROMPTS = {"english": PROMPT, "chinese": "我们明天早上"}
# The targets per group: bits per byte at most, top-1 at least (top-1 counts the model's own tokens: a whole word is
# harder to guess than a piece of one).
TARGETS = {"english": {"bits_per_byte": 1.8, "top1": 0.30}, "chinese": {"bits_per_byte": 2.1, "top1": 0.25}}

# Copying what it has read: each text written twice ("S S"), the second copy read word by word. Written for this
# project, found in no training text (a test checks); the lists are unrelated words.
REPEAT_EN = (
    "My sister bought a red bicycle for her son last week.",
    "The kitchen light stopped working after the storm on Tuesday.",
    "We need to leave early because the road to the lake is closed.",
    "He always drinks a cup of green tea before he starts work.",
    "Our neighbour plays the piano every evening after dinner.",
    "The doctor told me to rest for a few days and drink more water.",
    "I lost my keys somewhere between the bus stop and the office.",
    "They are planning a small party for their grandmother's birthday.",
    "The library opens at nine and closes at six on weekdays.",
    "Could you help me carry these boxes up to the second floor?",
    "The children built a snowman in the garden this morning.",
    "She wrote a long letter to her friend who lives in another country.",
    "The price of fresh fruit went up again this month.",
    "I usually take the train to work, but today I walked.",
    "The old bridge over the river was painted blue last summer.",
    "Remember to turn off the lights when you leave the room.",
    "A young man was waiting outside the bank with a large dog.",
    "The teacher asked the students to read the first chapter at home.",
    "We found a quiet table near the window and ordered soup.",
    "My phone battery died in the middle of an important call.",
)
REPEAT_ZH = (
    "我妹妹上周给她儿子买了一辆红色的自行车。",
    "暴风雨过后，厨房的灯就不亮了。",
    "我们得早点出发，因为去湖边的路封了。",
    "他每天开始工作以前都要喝一杯绿茶。",
    "我们的邻居每天晚饭后都弹钢琴。",
    "医生让我休息几天，多喝水。",
    "我在公交车站和办公室之间把钥匙弄丢了。",
    "他们正在为奶奶的生日准备一个小聚会。",
    "图书馆周一到周五早上九点开门，下午六点关门。",
    "你能帮我把这些箱子搬到二楼吗？",
    "孩子们今天早上在院子里堆了一个雪人。",
    "她给住在国外的朋友写了一封很长的信。",
    "这个月新鲜水果的价格又涨了。",
    "我平时坐火车上班，但是今天是走路去的。",
    "河上那座老桥去年夏天被漆成了蓝色。",
    "离开房间的时候记得把灯关掉。",
    "一个年轻人带着一条大狗在银行门口等着。",
    "老师让学生们回家读第一章。",
    "我们在窗户旁边找了一张安静的桌子，点了一碗汤。",
    "打重要电话打到一半，我的手机没电了。",
)
LISTS_EN = (
    "apple, river, chair, doctor, yellow, window, music, basket",
    "pencil, ocean, garden, ticket, orange, mountain, coffee, shoe",
    "table, summer, bottle, horse, letter, silver, village, cloud",
    "carpet, island, button, winter, kitchen, tiger, paper, bridge",
)
LISTS_ZH = (
    "苹果、河流、椅子、医生、黄色、窗户、音乐、篮子",
    "铅笔、海洋、花园、车票、橙子、高山、咖啡、鞋子",
    "桌子、夏天、瓶子、马匹、信件、银子、村庄、云彩",
    "地毯、岛屿、纽扣、冬天、厨房、老虎、纸张、桥梁",
)
COPY_GROUPS = {"english sentences": REPEAT_EN, "chinese sentences": REPEAT_ZH, "english lists": LISTS_EN,
               "chinese lists": LISTS_ZH}
COPY_TARGETS = {"top1": 0.8, "median_p": 0.5}  # of the words of the second copies
CAT = ("The cat sat on the mat. The cat sat on the", " mat")  # the classroom's first demonstration
SHARE_TARGETS = {"english_words_one_token": 0.9, "chinese_characters_whole": 0.9}


@dataclass
class Reading:
    """One group of texts as a model read them: summed surprise and bytes of the predicted tokens."""

    bits: float = 0.0
    bytes: int = 0
    correct: int = 0
    predicted: int = 0
    tokens: int = 0
    unknown: int = 0

    def add(self, other: Reading) -> None:
        for k in vars(self):
            setattr(self, k, getattr(self, k) + getattr(other, k))

    def summary(self) -> dict:
        return {"bits_per_byte": round(self.bits / max(self.bytes, 1), 4),
                "top1": round(self.correct / max(self.predicted, 1), 4), "tokens": self.tokens,
                "predicted": self.predicted, "bytes": self.bytes, "unknown": self.unknown}


@torch.no_grad()
def read_text(model, text: str) -> Reading:
    """How the model reads one text: bits and bytes of tokens 2..n, top-1 hits, ⟨unk⟩ count."""
    prep = prepare(model, text)
    ids = prep.src_ids[0]  # (T,) model ids
    logits = logits_of(model, prep)  # (T, vocab)
    nats = token_nats(logits, ids)  # (T-1,)
    hits = (logits[:-1].argmax(-1) == ids[1:]).sum()
    n_bytes = sum(len(t.raw) for t in prep.src.tokens[1:])
    return Reading(bits=float(nats.sum()) / math.log(2), bytes=n_bytes, correct=int(hits), predicted=len(ids) - 1,
                   tokens=len(ids), unknown=len(prep.src_unknown))


def read_groups(model, groups: dict[str, tuple[str, ...]] = GROUPS) -> dict[str, dict]:
    """Every group's bits per byte, top-1 accuracy and unknown tokens."""
    out = {}
    for name, texts in groups.items():
        total = Reading()
        for t in texts:
            total.add(read_text(model, t))
        out[name] = total.summary()
    return out


def ngram_bits_per_byte(kn, texts: tuple[str, ...], encoding: str = "cl100k_base") -> float:
    """The same texts' bits per byte under an n-gram over `encoding`'s tokens (read one line at a time)."""
    enc, bits, n_bytes = load_encoding(encoding), 0.0, 0
    for t in texts:
        ids = encode_by_line(enc, t)
        bits += sum(kn.bits(ids))
        n_bytes += sum(len(enc.decode_single_token_bytes(i)) for i in ids[1:])
    return round(bits / max(n_bytes, 1), 4)


def continuation(model, prompt: str = PROMPT, steps: int = 10) -> dict:
    """Greedy continuation: the text, and the most times one token repeats in it."""
    from ..analysis.next_token import generate
    from ..text.inputs import model_text

    prep = prepare(model, prompt)
    new = generate(model, prep.src_ids[0].tolist(), steps)
    return {"prompt": prompt, "text": model_text(model, new), "tokens": len(new),
            "most_repeats": max((real_ids(model, new).count(i) for i in set(real_ids(model, new))), default=0)}


# What each language's n-gram baseline learns from: the same training text the model read.
BASELINE_CORPORA = {"english": ("brown", "wordnet"), "chinese": ("reviews", "peoples-daily")}


def trigram_baselines(train_texts: dict[str, str], encoding: str = "cl100k_base") -> dict[str, float]:
    """Bits per byte of an interpolated Kneser-Ney trigram over `encoding`'s tokens, built from each language's
    training text (corpus name -> text), on that language's everyday texts."""
    from .kneser_ney import KneserNeyTrigram
    from .vocab import encode_lines

    enc, out = load_encoding(encoding), {}
    for lang, corpora in BASELINE_CORPORA.items():
        read = [c for c in corpora if c in train_texts]  # (a model may have read only some of them)
        if read:
            kn = KneserNeyTrigram([encode_lines(enc, train_texts[c]) for c in read], enc.n_vocab)
            out[lang] = ngram_bits_per_byte(kn, GROUPS[lang], encoding)
    return out


def in_training(train_texts: dict[str, str]) -> list[str]:
    """Everyday texts (or their lines) found verbatim in a training text: must be none."""
    every = (*GROUPS.values(), *COPY_GROUPS.values())
    lines = {line.strip() for texts in every for t in texts for line in t.splitlines() if line.strip()}
    return sorted(line for line in lines if any(line in text for text in train_texts.values()))


def twice(text: str) -> tuple[str, int]:
    """A text written twice as a learner types it (a space between English copies, a full stop after a list), and
    the UTF-8 byte offset where the second copy starts."""
    joiner = (". " if "," in text else " ") if text[:1].isascii() else ("。" if "、" in text else "")
    return text + joiner + text, len((text + joiner).encode("utf-8"))


def word_starts(model, ids: list[int]) -> list[bool]:
    """Which tokens start a word: an English token that begins with a letter after a space (or at the start), or
    holds a Chinese character; not punctuation, not the second piece of a split word."""
    enc, out = load_encoding(model.cfg.encoding), []
    for k, real in enumerate(real_ids(model, ids)):
        text = enc.decode_single_token_bytes(real).decode("utf-8", "replace")
        han = any("\u4e00" <= c <= "\u9fff" for c in text)
        out.append(han or (text[:1] == " " or k == 0) and text.strip()[:1].isalpha())
    return out


@torch.no_grad()
def copy_report(model, groups: dict[str, tuple[str, ...]] = COPY_GROUPS) -> dict:
    """Per group: the share of the second copies' words whose first token is the model's top guess, the median
    probability it gives that token, and each text's own share; plus the cat sentence's answer and its rank."""
    out = {}
    for name, texts in groups.items():
        hits, probs, per_text = [], [], []
        for text in texts:
            doubled, at = twice(text)
            prep = prepare(model, doubled)
            ids = prep.src_ids[0]
            ends = np.cumsum([len(tok.raw) for tok in prep.src.tokens])
            second = [k for k, end in enumerate(ends) if end - len(prep.src.tokens[k].raw) >= at]  # the 2nd copy
            p = torch.softmax(logits_of(model, prep).float(), -1)  # (T, V)
            starts = word_starts(model, ids.tolist())
            scored = [k for k in second[1:] if starts[k]]  # its first token cannot be known
            h = [bool(p[k - 1].argmax() == ids[k]) for k in scored]
            hits += h
            probs += [float(p[k - 1, ids[k]]) for k in scored]
            per_text.append(round(sum(h) / max(len(h), 1), 3))
        out[name] = {"top1": round(sum(hits) / max(len(hits), 1), 4), "median_p": round(float(np.median(probs)), 4),
                     "words": len(hits), "texts": len(texts), "per_text": per_text}
    prompt, answer = CAT
    prep = prepare(model, prompt)
    p = torch.softmax(logits_of(model, prep)[-1].float(), -1)  # (V,)
    want = prepare(model, prompt + answer).src_ids[0][len(prep.src_ids[0])]
    out["cat"] = {"prompt": prompt, "answer": answer, "p": round(float(p[want]), 4),
                  "rank": int((p > p[want]).sum()) + 1}
    return out


# A teacher's own short sentence, written twice: one word of the vocabulary in a frame whose context favours other
# words ("on the" → " floor"), against the same word in a list, where nothing favours another. The gap between them
# is how far the model's copying gives way to what it expects; no target: what a learner's own sentence meets.
SLOT_FRAMES = {"sentence": ("The dog sat on the {}.", "The dog sat on the"),
               "sentence, another": ("I saw the {} yesterday.", "I saw the"),
               "list": ("apple, river, {},", "apple, river,")}


def slot_words(model, n: int, seed: int = 0) -> list[int]:
    """n model ids of lower-case English words of 3 letters or more with a space before them, drawn at random."""
    enc = load_encoding(model.cfg.encoding)
    words = [k for k, real in enumerate(model.cfg.vocab_map) if 0 <= real < enc.n_vocab
             and lower_word(enc.decode_single_token_bytes(real))]
    return sorted(np.random.default_rng(seed).choice(words, size=min(n, len(words)), replace=False).tolist())


def lower_word(raw: bytes) -> bool:
    text = raw.decode("utf-8", "replace")
    return text[:1] == " " and len(text) > 3 and text[1:].isascii() and text[1:].isalpha() and text[1:].islower()


@torch.no_grad()
def slot_copy(model, n: int = 200, seed: int = 0) -> dict:
    """Per frame: the share of n vocabulary words that the model's top guess copies into the second copy, and the
    median probability it gives them (the frame with the word, then the frame up to the word)."""
    enc, ids, out = load_encoding(model.cfg.encoding), slot_words(model, n, seed), {}
    words = [enc.decode_single_token_bytes(model.cfg.vocab_map[w]).decode()[1:] for w in ids]
    for name, (frame, again) in SLOT_FRAMES.items():
        # (n, T): each word is one token, so every row is as long
        rows = torch.cat([prepare(model, f"{frame.format(w)} {again}").src_ids for w in words])
        p = torch.softmax(run(model, rows)[:, -1].float(), -1)  # (n, V)
        got = p[torch.arange(len(ids)), torch.tensor(ids)]  # (n,)
        out[name] = {"frame": frame, "top1": round(float((p.argmax(-1) == torch.tensor(ids)).float().mean()), 4),
                     "median_p": round(float(got.median()), 4), "words": len(ids)}
    return out


def vocabulary_shares(encoding: str) -> dict:
    """How whole the tokens are on everyday text: the share of English words (the tokenizer's own word pieces, a
    contraction like "'s" counted on its own) that are one token, and of Chinese characters that one token holds
    whole (alone or with its neighbours), never cut into byte pieces."""
    import regex

    enc = load_encoding(encoding)
    english = [*ENGLISH, *REPEAT_EN, *LISTS_EN]
    words = [w for text in english for w in regex.findall(enc._pat_str, text) if any(c.isalpha() for c in w)]
    one = sum(len(enc.encode_ordinary(w)) == 1 for w in words)
    whole = chars = 0
    for text in (*CHINESE, *REPEAT_ZH, *LISTS_ZH):
        spans, at = [], 0
        for tok in enc.encode_ordinary(text):
            n = len(enc.decode_single_token_bytes(tok))
            spans.append((at, at + n))
            at += n
        at = 0
        for c in text:
            n = len(c.encode("utf-8"))
            if "\u4e00" <= c <= "\u9fff":
                chars += 1
                whole += any(a <= at and at + n <= b for a, b in spans)
            at += n
    return {"english_words_one_token": round(one / max(len(words), 1), 4), "english_words": len(words),
            "chinese_characters_whole": round(whole / max(chars, 1), 4), "chinese_characters": chars}


def report(model, train_texts: dict[str, str] | None = None) -> dict:
    """The card's `everyday` section: every group's figures, the trigram baselines (when the training text is at
    hand), the greedy continuations, copying, the vocabulary's shares, and the targets."""
    out = {"groups": read_groups(model), "continuation": continuation(model),
           "continuation_zh": continuation(model, PROMPTS["chinese"]), "targets": TARGETS,
           "texts": {k: len(v) for k, v in GROUPS.items()}, "copy": copy_report(model),
           "slots": slot_copy(model),
           "copy_targets": COPY_TARGETS, "vocabulary": vocabulary_shares(model.cfg.encoding),
           "vocabulary_targets": SHARE_TARGETS}
    if train_texts:
        out["trigram_bits_per_byte"] = trigram_baselines(train_texts)
        out["found_in_training"] = in_training(train_texts)
    return out
