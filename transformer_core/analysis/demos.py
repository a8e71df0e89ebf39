"""The demo gallery's classic demonstrations, measured on the model they run on when they are shown.

Each demonstration is a text on a model and the view that shows it (a page and the values of its link); a function
here runs the model and returns that view with every figure and token the two lines of "what you should see" cite,
and which wording of each line holds (the copied token is the top guess, or only ranked; the head attends to it
most, or not): a retrained model changes the figures, never the truth of the lines. No Streamlit: the gallery page
(pages/15_demos.py) draws these, tests recompute them another way.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import InputError
from ..model.hooks import act_name
from ..model.kv_cache import start as cache_start
from ..model.kv_cache import step as cache_step
from ..model.trace import run, run_with_trace
from ..model.transformer import Transformer
from ..text.inputs import end_of_text_id, model_text, prepare, real_ids, token_labels, unknown_id
from ..text.tokenizer import load_encoding, text_around, token_bytes
from .answers import score_answers
from .blocks import block_weights, sequence
from .corruptions import next_word, repeated_name
from .head_effects import head_effects
from .heads import previous_token
from .kv_steps import cache_layout
from .neurons import NeuronIndex, neuron_on_text
from .next_token import Sampling, distribution, generate
from .positions import position_table, similarity

INDUCTION_TEXT = "The cat sat on the mat. The cat sat on the"
IOI_TEXTS = {"en": "When Tom and Anna arrived at the party, Anna handed the gift to",
             "zh": "张伟和李娜到了聚会上，李娜把礼物递给了"}
DATES_TEXT = "23 November 2026"
PLAIN_TEXT = "The weather was nice, so we walked to the park after lunch."  # when a card has no example of its own
KV_STEPS = 5  # tokens generated before the cache is read
IOI_MODE = "zero"  # how the Ablation & patching page switches a head off unless the learner picks otherwise
NEURON_CONTEXT = 12  # tokens of held-out text before a neuron's strongest activation in its demo text (3 after)
SPACED_WORD = re.compile(r" [^\W\d_]{3,}")
CJK_WORD = re.compile(r"[\u3400-\u9fff]+")


@dataclass(frozen=True)
class View:
    """A page (its name: pages/<n>_<page>.py) and the link values that open the demonstration on it (besides the
    model): service.urlstate's names (text, tgt, layer, head, block, gen, nlayer, neuron)."""

    page: str
    values: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Reading:
    """One demonstration measured: the wording of each of its two lines ("top", "ranked", ...), the figures they cite
    (numbers, and tokens as the model spells them: `tokens`), and the views to open (the first is the demo's own)."""

    demo: str
    lines: tuple[str, str]
    numbers: dict
    tokens: dict
    views: tuple[View, ...]


def _ids(model: Transformer, text: str, tgt: str | None = None):
    prep = prepare(model, text, tgt)
    return prep, sequence(prep, "decoder")  # (T,)


def page_sampling(model: Transformer) -> Sampling:
    """What the Logits page reads the next token with by default: temperature 1, its ⟨unk⟩ left out where the
    vocabulary has one (the page's "leave out ⟨unk⟩" box starts ticked)."""
    unk = unknown_id(model)
    return Sampling(banned=(unk,) if unk is not None else ())


def copy_target(ids: list[int]) -> tuple[int, int]:
    """(position of the last token's latest earlier occurrence, position of the token after it): what an induction
    head attends to and copies. InputError when the last token did not occur before."""
    last = len(ids) - 1
    earlier = [j for j in range(last - 1) if ids[j] == ids[last]]
    if not earlier:
        raise InputError("demo_no_repeat")
    return earlier[-1], earlier[-1] + 1


@torch.inference_mode()
def induction(model: Transformer, text: str = INDUCTION_TEXT) -> Reading:
    """The repeated sentence: the Logits page's guess after its last token against the token that followed that token
    the first time, and the head (above layer 0: a layer-0 head cannot shift keys) that puts the most weight from the
    last position on that token (the Attention page on that head)."""
    prep, ids = _ids(model, text)
    seq = ids.tolist()
    before, copy_pos = copy_target(seq)
    dist = distribution(run(model, ids[None])[0, -1], page_sampling(model), top=model.cfg.vocab_size)
    rank = dist.ids.index(seq[copy_pos]) + 1
    weights = block_weights(model, ids[None], None)  # (kind, layer) -> (1, nh, T, T)
    low = 1 if model.cfg.n_layers > 1 else 0
    (kind, layer), head = max(((where, h) for where in weights if where[1] >= low
                               for h in range(model.cfg.n_heads)),
                              key=lambda wh: float(weights[wh[0]][0, wh[1], -1, copy_pos]))
    row = weights[(kind, layer)][0, head, -1]  # (T,)
    key_rank = int((row > row[copy_pos]).sum()) + 1
    top, copied, last = token_labels(model, [dist.ids[0], seq[copy_pos], seq[-1]])
    return Reading("induction", ("top" if rank == 1 else "ranked", "most" if key_rank == 1 else "ranked"),
                   {"p_top": dist.probs[0], "p_copy": dist.probs[rank - 1], "rank": rank, "layer": layer,
                    "head": head, "weight": float(row[copy_pos]), "key_rank": key_rank, "pos": copy_pos,
                    "query": len(seq) - 1, "first": before},
                   {"top": top, "copy": copied, "last": last},
                   (View("logits", {"text": text}),
                    View("attention", {"text": text, "layer": layer, "head": head, "block": kind})))


def circuit_head(card: dict | None, lang: str, n_layers: int, n_heads: int) -> tuple[int, int] | None:
    """The top name-mover head a name-mover model's card names for a language (`circuit.by_language.<lang>.heads.top`,
    [layer, head]), or None when the card names none inside the model."""
    try:
        layer, head = (int(x) for x in card["circuit"]["by_language"][lang]["heads"]["top"])
    except (KeyError, TypeError, ValueError):
        return None
    return (layer, head) if 0 <= layer < n_layers and 0 <= head < n_heads else None


@torch.inference_mode()
def name_movers(model: Transformer, text: str, card: dict | None = None, lang: str = "en") -> Reading:
    """The IOI sentence on the Ablation & patching page: the right name (said once) against the repeated one, as the
    page scores them (summed log-probability; for one-token names the logit difference), and what switching off one
    head does to that difference (the page's default, zero ablation): the card's top name mover for the language, or,
    without one, the head whose loss lowers it most."""
    names = repeated_name(text)
    if names is None:
        raise InputError("demo_no_names")
    repeated, right = names
    prep, _ = _ids(model, text)
    a, b = score_answers(model, prep, [next_word(n) for n in (right, repeated)])
    fx = head_effects(model, prep, "logit_diff", next_word(right), next_word(repeated), mode=IOI_MODE)
    grid_kind = "dec_self" if "dec_self" in fx.heads else next(iter(fx.heads))
    grid = fx.heads[grid_kind]  # (L, H)
    found = circuit_head(card, lang, *grid.shape)
    layer, head = found if found is not None else np.unravel_index(int(np.argmin(grid)), grid.shape)
    change = float(grid[layer, head])
    kind, big_layer, big_head, big_change = fx.largest()
    which = "card" if found is not None else "sweep" if change < 0 else "none"
    if which != "none" and (kind, big_layer, big_head) == (grid_kind, layer, head):
        which += "_same"  # the head named is also the one that moves the difference most: said once
    return Reading("ioi", ("wins" if fx.intact > 0 else "loses", which),
                   {"p_right": a.prob, "p_repeated": b.prob, "lp_right": a.total, "lp_repeated": b.total,
                    "diff": fx.intact, "layer": int(layer), "head": int(head), "change": change,
                    "share": -change / fx.intact if fx.intact else 0.0, "largest_layer": big_layer,
                    "largest_head": big_head, "largest_change": big_change},
                   {"right": next_word(right), "repeated": next_word(repeated)},
                   (View("intervene", {"text": text}),))


@torch.inference_mode()
def alignment(model: Transformer, card: dict | None = None, text: str = DATES_TEXT) -> Reading:
    """The translator on an English date: its own answer (greedy; the decoder then reads "=" + it) and the
    cross-attention head whose answer's year / month / day tokens look most at the same field of the source (the
    card's best head, else the head with the most such rows): the Attention page's alignment table."""
    from ..train.translation import parse, translate
    from .alignment import prep_rows

    answer = translate(model, text)
    prep = prepare(model, text, "=" + answer)
    weights = block_weights(model, prep.src_ids, prep.tgt_ids)
    rows = {(layer, h): prep_rows(prep, w[0, h]) for (kind, layer), w in weights.items() if kind == "cross"
            for h in range(model.cfg.n_heads)}
    best = (card or {}).get("cross_attention") or {}
    chosen = (best.get("layer"), best.get("head"))
    if chosen not in rows:
        chosen = max(rows, key=lambda lh: (sum(r["hit"] for r in rows[lh]), -lh[0], -lh[1]))
    layer, head = chosen
    hits, n = sum(r["hit"] for r in rows[chosen]), len(rows[chosen])
    rule = parse(text)
    right = rule is not None and answer == rule[1]
    return Reading("alignment", ("right" if right else "wrong", "all" if n and hits == n else "some"),
                   {"hits": hits, "n": n, "layer": layer, "head": head},
                   {"answer": answer, "rule": rule[1] if rule else ""},
                   (View("attention", {"text": text, "tgt": "=" + answer, "layer": layer, "head": head,
                                       "block": "cross"}),))


def card_previous_head(card: dict | None, n_layers: int, n_heads: int) -> tuple[int, int] | None:
    """The head of the card's heads table with the highest previous-token score (None when it has none)."""
    rows = [r for r in (card or {}).get("heads") or [] if isinstance(r, dict)
            and isinstance(r.get("previous_token"), (int, float)) and r.get("kind", "dec_self") in (
                "dec_self", "previous_token", None)
            and 0 <= int(r.get("layer", -1)) < n_layers and 0 <= int(r.get("head", -1)) < n_heads]
    if not rows:
        return None
    best = max(rows, key=lambda r: r["previous_token"])
    return int(best["layer"]), int(best["head"])


@torch.inference_mode()
def previous_token_head(model: Transformer, card: dict | None = None, text: str = PLAIN_TEXT) -> Reading:
    """The card's best previous-token head (else the best on this text) on a sentence: its mean weight on the token
    just before each query, and on how many queries that token is the key it attends to most."""
    _, ids = _ids(model, text)
    weights = block_weights(model, ids[None], None)
    found = card_previous_head(card, model.cfg.n_layers, model.cfg.n_heads)
    if found is None:
        found = max(((layer, h) for (_, layer), w in weights.items() for h in range(model.cfg.n_heads)),
                    key=lambda lh: float(previous_token(weights[("dec_self", lh[0])])[lh[1]]))
    layer, head = found
    w = weights[("dec_self", layer)]  # (1, nh, T, T)
    score = float(previous_token(w)[head])
    top = w[0, head].argmax(-1)  # (T,) the key each query attends to most
    hits = int(sum(int(top[i]) == i - 1 for i in range(1, ids.numel())))
    return Reading("previous", ("card" if card_previous_head(card, model.cfg.n_layers, model.cfg.n_heads) else "text",
                                "all" if hits == ids.numel() - 1 else "most" if 2 * hits > ids.numel() - 1 else "few"),
                   {"layer": layer, "head": head, "score": score, "hits": hits, "n": ids.numel() - 1},
                   {}, (View("attention", {"text": text, "layer": layer, "head": head, "block": "dec_self"}),))


def positions(model: Transformer, text: str = PLAIN_TEXT) -> Reading:
    """What the model adds for each position of the text (the Embeddings & positions page's similarity map): the dot
    product of two positions' vectors at the same distance, at the start and at the end of the text, and how alike
    a position is to its neighbour and to the text's last position."""
    _, ids = _ids(model, text)
    n = max(ids.numel(), 3)  # (a text of fewer tokens still shows three positions' products)
    sim = similarity(position_table(model, n))  # (n, n)
    if not bool(sim.abs().max() > 0):
        raise InputError("demo_no_positions")
    same, later = float(sim[0, 2]), float(sim[n - 3, n - 1])
    numbers = {"n": n, "same": same, "later": later, "last": n - 1, "a": n - 3, "self": float(sim[0, 0]),
               "near": float(sim[0, 1]), "far": float(sim[0, n - 1])}
    equal = abs(same - later) <= 1e-3 * max(1.0, abs(same))
    return Reading("positions", ("equal" if equal else "differ", "closer" if numbers["near"] > numbers["far"]
                                 else "farther"), numbers, {}, (View("embeddings", {"text": text}),))


@torch.inference_mode()
def kv_cache(model: Transformer, text: str = PLAIN_TEXT, steps: int = KV_STEPS) -> Reading:
    """A few tokens generated greedily after the text (as the Logits page's button does, ⟨unk⟩ left out), and the
    cache they leave: its size after the last step, what each token adds, and that a step with it gives the same
    logits as recomputing every position."""
    _, ids = _ids(model, text)
    new = generate(model, ids.tolist(), steps, Sampling(greedy=True, banned=page_sampling(model).banned))
    dec = ids.tolist() + new
    layout = cache_layout(model, len(dec))
    per_token = sum(x.self_nbytes for x in layout) // len(dec)
    cache = cache_start(model, None)
    full = torch.tensor([dec], device=next(model.parameters()).device)  # (1, T)
    cache_step(model, cache, full[:, :-1])
    stepped = cache_step(model, cache, full[:, -1:])[0, -1].float()  # (vocab,) the cached step
    diff = float((stepped - run(model, full)[0, -1].float()).abs().max().cpu())
    cfg, item = model.cfg, next(model.parameters()).element_size()
    return Reading("kv", ("stopped" if new and new[-1] == end_of_text_id(model) else "steps", "same"),
                   {"new": len(new), "t": len(dec), "bytes": sum(x.nbytes for x in layout), "layers": len(layout),
                    "per_token": per_token, "heads": cfg.kv_heads, "d_k": cfg.head_dim, "item": item, "diff": diff},
                   {"added": model_text(model, new)},
                   (View("logits", {"text": text, "gen": tuple(new)}),))


def word_kind(text: str, lang: str = "en") -> int:
    """3 for a whole word of the language ("en": a space and three or more letters, " with"; "zh": Chinese
    characters), 2 for one of the other language, 1 for another piece holding a letter ("ime", " g"), 0 for none
    (spaces, punctuation, a byte piece)."""
    words = {"en": SPACED_WORD, "zh": CJK_WORD}
    if words.get(lang, SPACED_WORD).fullmatch(text):
        return 3
    if CJK_WORD.fullmatch(text) or SPACED_WORD.fullmatch(text):
        return 2
    return 1 if any(ch.isalpha() for ch in text) else 0


def one_token_neurons(model: Transformer, index: NeuronIndex,
                      lang: str = "en") -> list[tuple[int, float, float, int, int, int]]:
    """(word kind, share, mean activation, layer, neuron, model id) of every neuron whose strongest held-out
    activations kept in the index (those above 0: the FFN page's examples) fall on one token more than half the
    time, that token holding a letter; best first: whole words, those of the language first (word_kind), then the
    share of its activations on that token, then their mean."""
    enc = load_encoding(model.cfg.encoding)
    acts = index.acts.astype(np.float32)  # (L, F, K)
    where = index.where  # (L, F, K, 2) (chunk, position)
    ok = np.isfinite(acts) & (acts > 0)  # (L, F, K)
    tokens = np.where(ok, index.ids[where[..., 0], where[..., 1]], -1)  # (L, F, K) model ids
    same = (tokens[..., :, None] == tokens[..., None, :]) & ok[..., None, :]  # (L, F, K, K)
    counts = np.where(ok, same.sum(-1), 0)  # (L, F, K) kept activations on each one's token
    best = counts.argmax(-1)[..., None]  # (L, F, 1)
    count, token = np.take_along_axis(counts, best, -1)[..., 0], np.take_along_axis(tokens, best, -1)[..., 0]
    kept = ok.sum(-1)  # (L, F)
    kinds: dict[int, int] = {}
    out = []
    for layer, neuron in zip(*np.nonzero((2 * count > kept) & (kept > 0)), strict=True):
        tok = int(token[layer, neuron])
        if tok not in kinds:
            raw = token_bytes(enc, real_ids(model, [tok])[0]) or b""
            kinds[tok] = word_kind(raw.decode("utf-8", "ignore"), lang)
        if kinds[tok]:
            on = ok[layer, neuron] & (tokens[layer, neuron] == tok)
            out.append((kinds[tok], float(count[layer, neuron] / kept[layer, neuron]),
                        float(acts[layer, neuron][on].mean()), int(layer), int(neuron), tok))
    return sorted(out, key=lambda x: (-x[0], -x[1], -x[2], x[3], x[4]))


def neuron_text(model: Transformer, index: NeuronIndex, layer: int, neuron: int, token: int) -> str:
    """The held-out text around the neuron's strongest activation on `token` (NEURON_CONTEXT tokens before, 3 after),
    whole characters only."""
    enc = load_encoding(model.cfg.encoding)
    for act, (chunk, pos) in zip(index.acts[layer, neuron], index.where[layer, neuron], strict=True):
        if np.isfinite(act) and act > 0 and int(index.ids[int(chunk), int(pos)]) == token:
            lo, hi = max(0, int(pos) - NEURON_CONTEXT), min(index.ids.shape[1], int(pos) + 6)
            ids = index.ids[int(chunk), lo:hi].tolist()
            raws = [token_bytes(enc, i) or b"" for i in real_ids(model, ids)]
            before, after = text_around(raws, int(pos) - lo)
            if lo > 0 and " " in before.strip():  # from the first whole word (the window may start inside one)
                before = before[before.index(" ", 1 if before.startswith(" ") else 0):]
            if hi < index.ids.shape[1] and " " in after.strip():  # up to the last whole word
                after = after[:after.rstrip().rindex(" ")]
            return (before + raws[int(pos) - lo].decode("utf-8", "ignore") + after).strip()
    raise InputError("demo_no_neuron")


@torch.inference_mode()
def one_token_neuron(model: Transformer, index: NeuronIndex | None, lang: str = "en") -> Reading:
    """A neuron of the shipped index whose strongest held-out activations fall mostly on one token, read on the text
    around its strongest one (the FFN page's "read a neuron"): how many of its kept activations are on that token,
    and how it fires on that token in the text against every other token there. A word of the gallery's language
    (`lang`) is chosen where one qualifies."""
    if index is None:
        raise InputError("demo_no_index")
    found = one_token_neurons(model, index, lang)
    if not found:
        raise InputError("demo_no_neuron")
    _, share, _, layer, neuron, token = found[0]
    acts_kept = index.acts[layer, neuron]
    kept = int((np.isfinite(acts_kept) & (acts_kept > 0)).sum())
    text = neuron_text(model, index, layer, neuron, token)
    _, ids = _ids(model, text)
    _, trace = run_with_trace(model, ids[None], names=[act_name("ffn_hidden", layer=layer)])
    acts = neuron_on_text(trace, layer, neuron)  # (T,)
    on = np.asarray(ids.tolist()) == token
    if not on.any():
        raise InputError("demo_no_neuron")
    fire = float(acts[on].max())
    other = float(acts[~on].max()) if (~on).any() else float("nan")
    return Reading("neuron", ("all" if round(share * kept) == kept else "most", "above" if fire > other else "below"),
                   {"layer": layer, "neuron": neuron, "count": round(share * kept), "kept": kept, "fire": fire,
                    "other": other, "pos": int(np.flatnonzero(on)[np.argmax(acts[on])])},
                   {"token": token_labels(model, [token])[0]},
                   (View("ffn", {"text": text, "nlayer": layer, "neuron": neuron}),))


@dataclass(frozen=True)
class Demo:
    """A demonstration of the gallery: its name (its title is the string demo_<name>_title), the model it runs on (a
    catalog key) and how it is measured there: measure(model, card, language, neuron index or None)."""

    name: str
    model: str
    measure: Callable[..., Reading]
    neurons: bool = False  # it reads the model's shipped neuron index
    by_language: bool = False  # what it shows depends on the gallery's language (else measured once, in English)


def _ioi(model: Transformer, card: dict, lang: str, index=None) -> Reading:
    """The name-mover model on the sentence in the gallery's language."""
    return name_movers(model, IOI_TEXTS[lang], card, lang)


def _ioi_english(model: Transformer, card: dict, lang: str, index=None) -> Reading:
    """GPT-2 small on the English sentence (its Chinese is a few bytes per character)."""
    return name_movers(model, IOI_TEXTS["en"], card, "en")


DEMOS = (
    Demo("induction", "shipped:everyday-gpt", lambda model, card, lang, index=None: induction(model)),
    Demo("ioi", "shipped:name-movers", _ioi, by_language=True),
    Demo("ioi_gpt2", "gpt2:small", _ioi_english),
    Demo("alignment", "shipped:dates-zh", lambda model, card, lang, index=None: alignment(model, card)),
    Demo("previous", "shipped:everyday-gpt", lambda model, card, lang, index=None: previous_token_head(model, card)),
    Demo("positions", "shipped:everyday-gpt", lambda model, card, lang, index=None: positions(model)),
    Demo("kv", "shipped:everyday-gpt", lambda model, card, lang, index=None: kv_cache(model)),
    Demo("neuron", "shipped:everyday-gpt", lambda model, card, lang, index=None: one_token_neuron(model, index, lang),
         neurons=True, by_language=True),
)
