"""The name-mover task (indirect object identification, Wang et al. 2022): "When Mary and John went to the store,
John gave a drink to" → " Mary". Two names are introduced, one of them (the subject, S) comes back, and the answer is
the other one (the indirect object, IO): a model must find which name is repeated and move the other to the output.

Templates and names are split: the model trains on some and is measured on the others (held-out names it never saw
in any sentence, and held-out templates), in English and Chinese. Every English name is one token of the default's
vocabulary (`cl100k_words` keeps these names whole), every Chinese name is two characters whose surnames all differ,
so the two names of a sentence always differ in their first token: the logit difference of those first tokens is
the task's metric, as in the literature.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from ..model.masks import pad_batch
from ..model.trace import run
from ..text.inputs import vocab_index
from ..text.tokenizer import load_encoding
from .task import DecoderTask, Example
from .vocab import full_vocab

WORDS = "cl100k_words"  # the default's vocabulary: every name of NAMES_EN is one token after a space
VOCAB = "cl100k_names"  # the demo's own: the bytes and the default's tokens of these sentences (names_vocabulary)

_EN = (
    "Mary John Tom Anna James Sarah David Emma Michael Lisa Robert Linda William Susan Richard Karen Thomas Nancy "
    "Charles Betty Daniel Helen Paul Laura Mark Alice Peter Kate Steven Amy Kevin Ruth Brian Jane George Rose "
    "Edward Julia Jason Diana Jack Grace Henry Emily Frank Lucy Ryan Sophie Eric Anne Adam Claire Sam Ellen Ben "
    "Molly Chris Jenny Tim Nina Joe Sally Max Rachel Luke Clara Dan Megan Mike Holly Matt Olivia Alex Chloe Jim "
    "Irene Bob Maria Ian Fiona Carl Hannah Leo Ella Nick Eva Andrew Joan Greg Vera Simon Wendy Harry Judy Roger "
    "Paula Jerry Tina Walter Sara Arthur Diane Oscar Lily Victor Rita Martin Ivy Neil Amber Kyle Zoe Sean Jill "
    "Louis Marie Philip Ann Fred Beth Albert Carol Jacob Jean Ray Janet ")
_ZH = (
    "张伟 王芳 李娜 刘洋 陈静 杨帆 赵磊 黄丽 周杰 吴敏 徐明 孙亮 马超 朱琳 胡军 郭峰 何平 "
    "高远 林涛 罗兰 郑爽 梁宇 谢婷 宋佳 唐宁 许晴 韩雪 冯刚 曹阳 彭磊 曾敏 肖红 田甜 董洁 "
    "袁野 潘悦 于波 蒋欣 蔡琴 余华 杜鹃 叶青 程功 苏醒 魏然 吕梁 丁一 任重 沈岚 姚远 卢森 "
    "姜山 崔健 钟声 谭晶 陆地 汪洋 范冰 金鑫 石磊 廖凡 贾玲 夏雨 方圆 白雪 邹静 孟凡 熊伟 "
    "秦岚 邱实 江涛 尹正 薛强 段誉 雷鸣 侯亮 龙飞 史进 陶然 黎明 顾城 郝云 龚琳 邵兵 万里 "
    "钱多 严肃 武松 戴军 莫言 孔明 向阳 常青 ")
NAMES_EN, NAMES_ZH = tuple(_EN.split()), tuple(_ZH.split())  # 126 and 93

# "{A} and {B}" introduce the two names, "{S}" repeats one of them; the answer is the other. No template starts with
# a name (a name after a space is one token: " Mary"), and the Chinese templates end right before the answer.
TEMPLATES_EN = (
    "When {A} and {B} went to the store, {S} gave a drink to",
    "When {A} and {B} got a snack at the cafe, {S} decided to give it to",
    "After {A} and {B} went to the park, {S} gave a ball to",
    "While {A} and {B} were working at the office, {S} handed the report to",
    "Then, {A} and {B} had a long argument. Afterwards {S} said to",
    "Tonight {A} and {B} were cooking dinner, and {S} passed the salt to",
    "After the meeting, {A} and {B} went home. {S} sent a message to",
    "Then {A} and {B} found a letter on the table, and {S} read it to",
    "When {A} and {B} visited the museum, {S} bought a ticket for",
    "At the station, {A} and {B} waited for the train, and {S} gave a coffee to",
    "Yesterday {A} and {B} played chess, and {S} lost the game to",
    "Later {A} and {B} were walking home when {S} threw the keys to",
    "In the morning, {A} and {B} cleaned the house, and {S} gave the broom to",
    "When {A} and {B} finished lunch, {S} paid the bill for",
    "Last week {A} and {B} went to the library, and {S} lent a book to",
    "On Sunday {A} and {B} went fishing, and {S} gave the biggest fish to",
    "After class {A} and {B} walked to the bus stop, and {S} showed a photo to",
    "When {A} and {B} opened the door, {S} pointed at the box and said to",
    "It was late, so {A} and {B} called a taxi, and {S} gave the address to",
    "At the market {A} and {B} bought some fruit, and {S} handed an orange to",
    "Because {A} and {B} were hungry, {S} made a sandwich for",
    "The next day {A} and {B} met at the bank, where {S} gave the money to",
    "When {A} and {B} started the game, {S} passed the cards to",
    "So {A} and {B} sat by the fire, and {S} told a story to",
    "Then {A} and {B} went to the kitchen, and {S} poured some tea for",
    "After {A} and {B} watched the film, {S} explained the ending to",
)
HELD_EN = (  # never trained on: the name movers must work on sentences the model has not seen
    "When {A} and {B} arrived at the party, {S} handed the gift to",
    "After {A} and {B} left the school, {S} wrote a note to",
    "Then {A} and {B} sat down at the beach, and {S} offered an apple to",
    "During the trip, {A} and {B} got lost, so {S} passed the map to",
    "Before {A} and {B} went to sleep, {S} said good night to",
)
TEMPLATES_ZH = (
    "{A}和{B}去了商店，{S}把一瓶水给了",
    "{A}和{B}在咖啡馆吃点心的时候，{S}决定把蛋糕送给",
    "{A}和{B}去公园以后，{S}把球扔给了",
    "{A}和{B}在办公室工作，{S}把报告交给了",
    "{A}和{B}在做晚饭，{S}把盐递给了",
    "开完会以后，{A}和{B}一起回家，{S}发了一条短信给",
    "{A}和{B}在桌子上发现了一封信，{S}把信念给",
    "{A}和{B}去参观博物馆，{S}买了一张票送给",
    "在车站，{A}和{B}等火车，{S}把咖啡递给了",
    "昨天{A}和{B}下棋，{S}把这盘棋输给了",
    "早上{A}和{B}打扫房间，{S}把扫帚交给了",
    "{A}和{B}吃完午饭，{S}把钱包借给了",
    "下课以后{A}和{B}走到车站，{S}把照片给",
    "{A}和{B}打开门，{S}指着箱子对",
    "天太晚了，{A}和{B}叫了一辆出租车，{S}把地址告诉了",
    "{A}和{B}在市场买水果，{S}把一个橙子递给了",
    "因为{A}和{B}都饿了，{S}做了一个三明治给",
    "第二天{A}和{B}在银行见面，{S}把钱交给了",
    "{A}和{B}开始玩游戏，{S}把牌发给了",
    "{A}和{B}坐在火旁边，{S}讲了一个故事给",
)
HELD_ZH = (
    "{A}和{B}到了聚会上，{S}把礼物递给了",
    "{A}和{B}放学以后，{S}写了一张纸条给",
    "{A}和{B}坐在海边，{S}把一个苹果递给了",
    "旅行的时候{A}和{B}迷路了，{S}把地图交给了",
)
HELD_NAMES = 0.2  # the last fifth of each name list is held out
# Half the training sentences put two other words in the names' places (" Table and River went to the store, River
# gave a drink to" → " Table"): with only names, it learned each training name (right 82% of the time on held-out
# names with training templates, against 100% on training names) instead of moving whichever word is not repeated.
SYMBOL_SHARE = 0.5
# On held-out names and templates: the right name wins this often, by this mean logit difference; and knocking out
# the top name-mover head alone removes at least this share of the difference.
NAME_TARGETS = {"right_name_wins": 0.95, "mean_logit_diff": 3.0, "top_head_removes": 0.5}


def names(lang: str, held: bool) -> tuple[str, ...]:
    """The training or the held-out names of a language."""
    pool = NAMES_EN if lang == "en" else NAMES_ZH
    cut = len(pool) - int(len(pool) * HELD_NAMES)
    return pool[cut:] if held else pool[:cut]


# More training templates, composed: an opening, where the two went, what the repeated one gave. None of their words
# is a held-out template's own (party, gift, school, note, beach, apple, trip, map; 聚会, 礼物, 纸条, 海边, 苹果, 地图):
# held-out sentences stay unseen. With the written templates alone it learned their wording (right 87% of the time
# on held-out English templates with training names, against 100% on training templates).
OPENINGS_EN = ("When", "After", "Once", "As soon as", "Just after", "Right after", "The moment", "Soon after", "Before",
               "Just before", "Whenever", "Each time")
EVENTS_EN = ("went to the", "got to the", "arrived at the", "walked into the", "came back from the", "visited the",
             "left the")
PLACES_EN = ("store", "park", "office", "station", "museum", "library", "restaurant", "hospital", "market", "cinema",
             "garden", "airport", "hotel", "farm", "zoo", "bank", "bakery", "stadium")
GIFTS_EN = ("gave a drink to", "handed the keys to", "passed the salt to", "sent a letter to", "threw a ball to",
            "showed a photo to", "offered a cake to", "gave a book to", "sold a ticket to", "lent a pen to",
            "brought some water to", "read a story to", "sang a song to", "wrote a message to", "said hello to",
            "explained the plan to", "gave the flowers to", "handed a cup to", "passed the bread to",
            "said goodbye to", "waved to", "whispered a secret to", "gave a hug to", "sold a bike to",
            "showed the way to", "gave a coin to", "tossed a pillow to")
PLACES_ZH = ("去了商店", "到了公园", "在办公室", "去了车站", "在餐厅吃饭", "去了图书馆", "去了医院", "逛了市场",
             "去了电影院", "在花园里", "到了机场", "住进了酒店", "去了农场", "去了动物园", "去了银行", "在面包店")
OPENINGS_ZH = ("", "昨天", "早上", "下午", "晚上", "周末")
GIFTS_ZH = ("把一本书给了", "把一杯水递给了", "把钥匙交给了", "把照片给", "把一封信寄给了", "把球扔给了",
            "把蛋糕送给了", "把一张票卖给了", "把笔借给了", "把花送给了", "把面包递给了", "把计划讲给", "把杯子递给了")


# More shapes: a time, then what happened to both, "so" the repeated one gave; a reason first; a time clause, then a
# new sentence; "and" before the repeated name; in Chinese a clause before the names ("…的时候"). Each shape is drawn
# equally often (a template is drawn within its shape): with the templates drawn alike, the first shape's thousands
# of places and gifts made nine draws in ten, and the held-out templates it missed most had a clause before the
# names ("During the trip, … got lost, so …": 82%; "旅行的时候…迷路了，…": 65%).
TIMES_EN = ("Later that day,", "In the evening,", "On Monday,", "Last night,", "This morning,", "At noon,",
            "During the meeting,", "On the way home,", "At the concert,", "During lunch,", "After the game,")
STATES_EN = ("were tired", "felt hungry", "were bored", "got wet in the rain", "missed the bus", "finished their work",
             "had a long day", "were cold", "won the game", "were late", "fell asleep", "had a fight", "felt sick")
BECAUSE_EN = ("Because", "Since", "While", "Although")
THEN_EN = ("Then", "Later", "Next", "So")
STATES_ZH = ("累了", "饿了", "错过了公交车", "淋湿了", "赢了比赛", "迟到了", "冷了", "睡着了", "吵架了", "生病了")
AFTER_ZH = ("下班", "吃完饭", "看完电影", "开完会", "散完步", "做完作业")
CLAUSES_ZH = ("吃饭的时候", "下雨的时候", "上班的路上", "放假的时候", "散步的时候", "比赛的时候", "买东西的时候")


def shapes(lang: str) -> list[tuple[str, ...]]:
    """The training templates of a language by shape: the written ones, then each composed shape."""
    if lang == "en":
        return [TEMPLATES_EN,
                tuple(f"{o} {{A}} and {{B}} {e} {p}, {{S}} {g}" for o in OPENINGS_EN for e in EVENTS_EN
                      for p in PLACES_EN for g in GIFTS_EN),
                tuple(f"{t} {{A}} and {{B}} {v}, so {{S}} {g}" for t in TIMES_EN for v in STATES_EN for g in GIFTS_EN),
                tuple(f"{b} {{A}} and {{B}} {v}, {{S}} {g}" for b in BECAUSE_EN for v in STATES_EN for g in GIFTS_EN),
                tuple(f"{t} {{A}} and {{B}} {v}. {{S}} {g}" for t in TIMES_EN for v in STATES_EN for g in GIFTS_EN),
                tuple(f"{o} {{A}} and {{B}} {e} {p}, and {{S}} {g}" for o in THEN_EN for e in EVENTS_EN
                      for p in PLACES_EN for g in GIFTS_EN)]
    return [TEMPLATES_ZH,
            tuple(f"{o}{{A}}和{{B}}{p}，{{S}}{g}" for o in OPENINGS_ZH for p in PLACES_ZH for g in GIFTS_ZH),
            tuple(f"{o}{{A}}和{{B}}{v}，所以{{S}}{g}" for o in OPENINGS_ZH for v in STATES_ZH for g in GIFTS_ZH),
            tuple(f"{{A}}和{{B}}{a}以后，{{S}}{g}" for a in AFTER_ZH for g in GIFTS_ZH),
            tuple(f"{c}{{A}}和{{B}}{v}，{{S}}{g}" for c in CLAUSES_ZH for v in STATES_ZH for g in GIFTS_ZH),
            tuple(f"{c}{{A}}和{{B}}{p}，{{S}}{g}" for c in CLAUSES_ZH for p in PLACES_ZH for g in GIFTS_ZH)]


def composed(lang: str) -> tuple[str, ...]:
    """Every composed training template of a language."""
    return tuple(t for shape in shapes(lang)[1:] for t in shape)


def templates(lang: str, held: bool) -> tuple[str, ...]:
    if held:
        return HELD_EN if lang == "en" else HELD_ZH
    return _TRAINING[lang]


_SHAPES = {lang: shapes(lang) for lang in ("en", "zh")}
_TRAINING = {lang: tuple(t for shape in _SHAPES[lang] for t in shape) for lang in ("en", "zh")}


def draw_template(rng: random.Random, lang: str, held: bool) -> str:
    """A template: held out, or a training one of a shape drawn first (each shape equally often)."""
    return rng.choice(templates(lang, True) if held else rng.choice(_SHAPES[lang]))


def prompt(template: str, a: str, b: str, s: str) -> str:
    """A template with the two names and the repeated one filled in (a space before each English name)."""
    return template.format(A=a, B=b, S=s)


def answer_text(lang: str, name: str) -> str:
    """What follows the prompt: the answer name (" Mary", "张伟")."""
    return f" {name}" if lang == "en" else name



SYMBOLS_EN, SYMBOLS_ZH = 2000, 3000  # the default's most frequent capitalised words and Chinese characters


def symbol_words() -> tuple[list[str], list[str]]:
    """The words that stand in for names in half the training sentences: the default vocabulary's capitalised
    English words (" Table": one token, in its rank order, which follows cl100k's frequency) and its single Chinese
    characters, none of them a name of NAMES_EN or a character of NAMES_ZH (held-out names stay unseen) or of a
    Chinese template ("和" in a name would read as the template's "and")."""
    enc = load_encoding(WORDS)
    taken = set(NAMES_EN) | {c for n in NAMES_ZH for c in n} | {c for t in TEMPLATES_ZH + HELD_ZH for c in t}
    english, chinese = [], []
    for token, _ in sorted(enc._mergeable_ranks.items(), key=lambda tr: tr[1]):
        text = token.decode("utf-8", "ignore")
        if text[:1] == " " and text[1:].isalpha() and text[1:].isascii() and text[1].isupper() and len(text) > 3:
            english.append(text[1:])
        elif len(text) == 1 and "\u4e00" <= text <= "\u9fff" and len(token) == 3:
            chinese.append(text)
    return ([w for w in english if w not in taken][:SYMBOLS_EN], [c for c in chinese if c not in taken][:SYMBOLS_ZH])


def names_vocabulary() -> dict[bytes, int]:
    """The demo's vocabulary: the 256 bytes and every token of the default's vocabulary that a sentence of the task
    uses (every template, training and held-out, with every name and every stand-in word), with their merge parts:
    the same tokens as the default for these sentences, any other text in smaller pieces (byte fallback), and an
    output layer a third of the default's (the demo trains in minutes)."""
    from ..text.subset import merge_parts

    enc = load_encoding(WORDS)
    ranks, keep = enc._mergeable_ranks, {bytes([b]) for b in range(256)}
    english, chinese = symbol_words()
    words = [f" {w}" for w in english] + chinese
    used = set()  # the token ids the sentences use (each one's merge parts are then found once, not per use)
    for lang in ("en", "zh"):
        pool = NAMES_EN if lang == "en" else NAMES_ZH
        written = (*(TEMPLATES_EN if lang == "en" else TEMPLATES_ZH), *templates(lang, True))
        texts = [prompt(t, n, n, n) + answer_text(lang, n) + ".。" for t in written for n in pool]
        texts += [prompt(t, pool[0], pool[1], pool[0]) for t in templates(lang, False)]  # (the composed ones)
        for text in texts + words:
            used.update(enc.encode_ordinary(text))
    for tok in used:
        keep.update(merge_parts(enc.decode_single_token_bytes(tok), ranks))
    return {t: ranks[t] for t in sorted(keep, key=ranks.__getitem__)}


def write_names_vocabulary() -> str:
    """Write assets/encodings/cl100k_names.{tiktoken,json} (the build's first step for the demo)."""
    from ..text import tokenizer
    from ..text.subset import write_subset

    about = {"chosen_from": "every sentence of the name-mover task (train/ioi.py), tokenized by " + WORDS,
             "command": "python -m transformer_core.train.build --only name-movers",
             "why": "the bytes and the default's tokens of the task's sentences: any text encodes"}
    write_subset(tokenizer.BUNDLED, VOCAB, names_vocabulary(), "cl100k_base", about)
    tokenizer._cache.pop(VOCAB, None)
    return VOCAB


@dataclass(frozen=True)
class Outside:
    """Why a text is not a sentence the name-mover model learned to finish: `reason`, the name concerned and the
    tokens the model reads it as (labels: "␣Qu", "inn"; "龘 1/3" for a piece of a character)."""

    reason: str  # "no_pair" | "pieces" | "bare" | "same_start"
    name: str = ""
    pieces: tuple[str, ...] = ()


def outside(text: str, encoding: str = VOCAB) -> Outside | None:
    """None when the text is a sentence of the kind the model learned: two names and one of them again (no_pair
    otherwise), each name one token wherever it stands (pieces: " Quinn" is ' Qu' + 'inn'; bare: a name that opens
    the text, or follows no space, is another token than the " Tom" it learned), the two names starting with
    different tokens (same_start: 小明 and 小红 both start with 小, and the answer is one token). On such texts the
    model answers nonsense ("Tom and Anna went to the store, Anna gave a drink to" → 'om'), so the pages say so."""
    from ..analysis.corruptions import CJK, WORD, mentions, repeated_name
    from ..text.tokenizer import display_bytes, label_pieces

    pair = repeated_name(text)
    enc = load_encoding(encoding)
    if pair is None:  # a name that opens the text is taken for a sentence's first word: is it one?
        opened = repeated_name("So " + text)
        first = WORD.match(text)
        if opened is None or first is None or first.group() not in opened:
            return Outside("no_pair")
        pair = opened

    def read(piece: str) -> tuple[list[int], tuple[str, ...]]:
        ids = enc.encode_ordinary(piece)
        raws = [enc.decode_single_token_bytes(i) for i in ids]
        return ids, tuple(label_pieces(raws, [display_bytes(r) for r in raws]))

    firsts = []
    for name in pair:
        chinese = bool(CJK.search(name))
        ids, labels = read(name[0] if chinese else " " + name)
        if len(ids) > 1:
            return Outside("pieces", name, labels)
        if not chinese:
            for m in mentions(text, name):
                if m.start() == 0 or text[m.start() - 1] != " ":
                    return Outside("bare", name, read(text[max(0, m.start() - 1):m.end()].lstrip(" "))[1])
        firsts.append(ids[0])
    if firsts[0] == firsts[1]:
        return Outside("same_start", f"{pair[1]}, {pair[0]}", read(pair[0][0])[1])
    return None


@dataclass(frozen=True)
class NameExample(Example):
    """A name-mover sentence: the prompt, its answer (the indirect object) and the repeated name (the subject)."""

    prompt: str = ""
    io: str = ""
    s: str = ""
    lang: str = "en"


class NameMoverTask(DecoderTask):
    """The name-mover sentences over the default's whole-word vocabulary (byte fallback: any text reads)."""

    name = "ioi"
    encoding = VOCAB
    description = ("Two names, then one of them again: \"When Mary and John went to the store, John gave a drink "
                   "to\" → \" Mary\". The model must say the name that was not repeated (English and Chinese).")
    description_zh = ("先出现两个名字，其中一个又出现一次：“张伟和李娜去了商店，李娜把一瓶水给了”→“张伟”。"
                      "模型要说出没有重复的那个名字（英文和中文）。")
    metric = ("the right name's logit above the repeated name's at the answer, on held-out names and templates "
              "(the first token of each name)")
    example = NameExample("When Mary and John went to the store, John gave a drink to Mary.",
                          prompt="When Mary and John went to the store, John gave a drink to", io="Mary", s="John")
    max_len = 48

    @cached_property
    def symbols(self) -> tuple[list[str], list[str]]:
        """The English stand-in words and the Chinese stand-in characters."""
        return symbol_words()

    def sample(self, rng: random.Random, held: bool = False, lang: str | None = None) -> NameExample:
        lang = lang or rng.choice(("en", "zh"))
        stand_in = not held and rng.random() < SYMBOL_SHARE
        if stand_in and lang == "zh":  # two characters, like the names, paired afresh each time: with 750 fixed pairs
            c = rng.sample(self.symbols[1], 4)  # it learned those pairs (right 75% of the time on held-out names)
            a, b = c[0] + c[1], c[2] + c[3]
        else:
            a, b = rng.sample(self.symbols[0] if stand_in else names(lang, held), 2)
        s, io = (b, a) if rng.random() < 0.5 else (a, b)  # ABBA or ABAB: the repeated name is either one
        text = prompt(draw_template(rng, lang, held), a, b, s)
        end = "." if lang == "en" else "。"
        return NameExample(text + answer_text(lang, io) + end, prompt=text, io=io, s=s, lang=lang)

    @cached_property
    def vocab_map(self) -> tuple[int, ...]:
        enc = load_encoding(self.encoding)
        return full_vocab(enc, [(s.strip("<|>"), i) for s, i in sorted(enc._special_tokens.items(),
                                                                       key=lambda si: si[1])]).real_ids

    @cached_property
    def index(self) -> dict[int, int]:
        """Tokenizer id -> model id in vocab_map's own order (the app's): the tokens cl100k_base lacks are ranked
        after its special tokens, so the sorted order the other tasks use would shift them."""
        return vocab_index(self.vocab_map)

    def to_ids(self, text: str) -> list[int]:
        """Model ids of any text (the vocabulary has byte fallback)."""
        return [self.index[i] for i in load_encoding(self.encoding).encode(text, allowed_special=set(),
                                                                           disallowed_special=())]

    def vocab_texts(self) -> list[str]:
        return []  # (the whole vocabulary: no list of symbols)

    def targets(self, ex: NameExample) -> tuple[list[int], list[bool], list[bool]]:
        ids = self.to_ids(ex.src)
        k = len(self.to_ids(ex.prompt))  # ids[k] is the answer's first token, predicted at k - 1
        return ids, [True] * (len(ids) - 1), [t == k - 1 for t in range(len(ids) - 1)]

    def model_config(self, **changes):
        return super().model_config(**{"encoding": self.encoding, **changes})

    def first_ids(self, ex: NameExample) -> tuple[int, int]:
        """Model ids of the first token of the right name and of the repeated one, after the prompt."""
        io, s = (self.to_ids(answer_text(ex.lang, n))[0] for n in (ex.io, ex.s))
        return io, s

    @torch.no_grad()
    def logit_diffs(self, model, examples: list[NameExample]) -> np.ndarray:
        """logit(right name) − logit(repeated name) at the end of each prompt (the first token of each)."""
        src, lengths = pad_batch([self.to_ids(e.prompt) for e in examples])  # (B, T), (B,)
        logits = run(model, src, src_lengths=lengths)  # (B, T, V)
        last = logits[torch.arange(len(examples)), lengths - 1]  # (B, V)
        pairs = torch.tensor([self.first_ids(e) for e in examples])  # (B, 2)
        return (last.gather(1, pairs[:, :1]) - last.gather(1, pairs[:, 1:])).squeeze(1).cpu().numpy()

    def held_out(self, n: int, seed: int, lang: str, held: bool = True) -> list[NameExample]:
        rng = random.Random(seed)
        return [self.sample(rng, held=held, lang=lang) for _ in range(n)]

    def accuracy(self, model, n: int = 256, seed: int = 2024) -> float:
        """The share of held-out sentences (names and templates) where the right name wins."""
        diffs = np.concatenate([self.logit_diffs(model, self.held_out(n // 2, seed + k, lang))
                                for k, lang in enumerate(("en", "zh"))])
        return float((diffs > 0).mean())


READS_NAMES = 0.25  # a head that moves a name reads one at the answer: this much of its attention from the last
# position on the two names' tokens (a head that attends elsewhere, yet whose knock-out lowers the difference on
# average, changes what later layers read, and on some sentences raises the difference instead)


def name_reading(model, task: NameMoverTask, examples: list[NameExample]) -> dict[str, np.ndarray]:
    """(L, H) each, the mean over `examples`: every head's attention from the last position to the right name's
    tokens and to the repeated name's (both of its places), and what the head writes straight into each name's
    logit there (direct logit attribution: the path through the parts after it not counted)."""
    from ..analysis.attribution import direct_logit_attribution
    from ..model.trace import run_with_trace
    from ..text.inputs import prepare

    rows = {key: [] for key in ("to_answer", "to_repeated", "writes_answer", "writes_repeated")}
    for ex in examples:
        ids = prepare(model, ex.prompt).src_ids  # (1, T)
        _, trace = run_with_trace(model, ids)
        last = np.stack([trace.attention("dec_self", layer).head("weights")[:, -1].numpy()
                         for layer in range(model.cfg.n_layers)])  # (L, H, T): from the last position
        tokens = np.asarray(ids[0].tolist())
        for name, tok in zip(("answer", "repeated"), task.first_ids(ex), strict=True):
            rows[f"to_{name}"].append(last[:, :, tokens == tok].sum(-1))
            rows[f"writes_{name}"].append(direct_logit_attribution(model, trace, len(tokens) - 1, tok).heads)
    return {key: np.mean(value, axis=0) for key, value in rows.items()}


def reads_a_name(heads: dict) -> np.ndarray:
    """(L, H) bool: the heads of a card's circuit row (`to_answer`, `to_repeated`) that read a name at the answer."""
    return np.asarray(heads["to_answer"]) + np.asarray(heads["to_repeated"]) >= READS_NAMES


def name_read(heads: dict) -> np.ndarray:
    """(L, H) of "answer" or "repeated": the name each head of a card's circuit row attends to more from the answer
    position (the right one on a tie)."""
    return np.where(np.asarray(heads["to_answer"]) >= np.asarray(heads["to_repeated"]), "answer", "repeated")


def circuit_report(model, task: NameMoverTask, n: int = 200, seed: int = 77, sweep: int = 24) -> dict:
    """What the card says: per language, on training and held-out names and templates, the share of sentences
    the right name wins and the mean logit difference; and which heads move the names, found with the app's own
    head sweep (each head knocked out alone, mean-ablated over the sentence, on `sweep` held-out sentences per
    language): the mean change of the logit difference per head over the mean difference, each head's attention
    from the last position to the two names and what it writes straight into their logits (name_reading), and the
    top head: the one whose knock-out removes most among those that read a name there (READS_NAMES), with the share
    it removes and the change itself (to set beside its direct writes: the rest passes through the parts after it)."""
    from ..analysis.head_effects import head_effects
    from ..text.inputs import prepare

    out: dict = {"by_language": {}}
    for lang in ("en", "zh"):
        row = {}
        for split, held in (("train", False), ("held_out", True)):
            d = task.logit_diffs(model, task.held_out(n, seed, lang, held))
            row[split] = {"right_name_wins": round(float((d > 0).mean()), 4),
                          "mean_logit_diff": round(float(d.mean()), 3), "sentences": n}
        changes, intact, examples = [], [], task.held_out(sweep, seed + 1, lang)
        for ex in examples:
            io, s = task.first_ids(ex)
            fx = head_effects(model, prepare(model, ex.prompt), "logit_diff", io, s, mode="mean")
            changes.append(fx.heads["dec_self"])  # (L, H) how the logit difference moves with the head knocked out
            intact.append(fx.intact)
        share = np.mean(changes, axis=0) / max(float(np.mean(intact)), 1e-6)  # (L, H) of the mean difference
        heads = {"relative_change": np.round(share, 3).tolist(),
                 **{key: np.round(v, 3).tolist() for key, v in name_reading(model, task, examples).items()}}
        reading = np.where(reads_a_name(heads), share, np.inf)
        top = np.unravel_index(np.argmin(reading if np.isfinite(reading).any() else share), share.shape)
        row["heads"] = {**heads, "top": [int(top[0]), int(top[1])], "top_removes": round(float(-share[top]), 3),
                        "top_change": round(float(np.mean(changes, axis=0)[top]), 3)}
        out["by_language"][lang] = row
    return out
