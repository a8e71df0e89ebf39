"""The demo gallery's figures, recomputed another way on the shipped models: every number a demo's two lines cite
(transformer_core.analysis.demos) comes back from a plain forward, a full trace, a hook of our own or a formula, and
the wording each line chose is the one that holds (the copied token is the top guess or only ranked, the right name
wins or loses, ...). The name-mover model and GPT-2 small skip cleanly when this checkout has neither."""
import math

import numpy as np
import pytest
import torch

from transformer_core.analysis import demos
from transformer_core.analysis.neurons import shipped_index
from transformer_core.model.hooks import act_name
from transformer_core.sources import Places, load_model
from transformer_core.sources.gpt2 import weights_file
from transformer_core.text.inputs import end_of_text_id, prepare, real_ids, trace_text, unknown_id
from transformer_core.text.tokenizer import load_encoding

SHIPPED = Places().shipped_dir


def shipped(name: str):
    if not (SHIPPED / name / "model.safetensors").is_file():
        pytest.skip(f"assets/models/{name} is not in this checkout (it is built by train.build --only {name})")
    return load_model(f"shipped:{name}")


@pytest.fixture(scope="module")
def everyday():
    return shipped("everyday-gpt")


@pytest.fixture(scope="module")
def name_movers():
    return shipped("name-movers")


def plain_probs(model, ids: list[int]) -> np.ndarray:
    """The next-token distribution after `ids` from a plain forward, the ⟨unk⟩ token (if any) left out as the Logits
    page does by default: float64."""
    with torch.no_grad():
        logits = model(torch.tensor([ids]))[0, -1].double()
    unk = unknown_id(model)
    if unk is not None:
        logits[unk] = -math.inf
    return torch.softmax(logits, -1).numpy()


def text_ids(model, text: str) -> list[int]:
    return prepare(model, text).src_ids[0].tolist()


def test_every_demo_of_the_gallery_has_a_model_and_wording_for_each_of_its_lines():
    import json

    strings = {}
    for path in (SHIPPED.parents[0] / "strings").glob("*.json"):
        strings.update(json.loads(path.read_text(encoding="utf-8")))
    assert {d.name for d in demos.DEMOS} >= {"induction", "ioi", "ioi_gpt2", "alignment", "previous", "positions",
                                             "kv", "neuron"}
    for demo in demos.DEMOS:
        assert f"demo_{demo.name}_title" in strings and ":" in demo.model
    keys = [k for k in strings if k.startswith("demo_") and "_see" in k]
    for name in ("induction", "ioi", "alignment", "previous", "positions", "kv", "neuron"):
        assert any(k.startswith(f"demo_{name}_see1_") for k in keys) and any(
            k.startswith(f"demo_{name}_see2_") for k in keys)


def test_induction_guess_and_head_match_a_plain_forward_and_the_trace(everyday):
    model, _ = everyday
    r = demos.induction(model)
    ids = text_ids(model, demos.INDUCTION_TEXT)
    enc = load_encoding(model.cfg.encoding)
    words = [enc.decode_single_token_bytes(i) for i in real_ids(model, ids)]
    assert words[-1].strip() == b"the" and words.count(words[-1]) == 2  # the sentence repeats its last token once
    first = words.index(words[-1])
    copied = ids[first + 1]  # the token that followed " the" the first time
    probs = plain_probs(model, ids)
    order = np.argsort(-probs, kind="stable")
    rank = int(np.flatnonzero(order == copied)[0]) + 1
    assert (r.numbers["rank"], r.numbers["pos"], r.numbers["query"]) == (rank, first + 1, len(ids) - 1)
    assert r.numbers["p_copy"] == pytest.approx(probs[copied], abs=1e-5)
    assert r.numbers["p_top"] == pytest.approx(probs[order[0]], abs=1e-5)
    assert r.lines[0] == ("top" if rank == 1 else "ranked")
    _, trace = trace_text(model, demos.INDUCTION_TEXT)
    rows = {(layer, h): trace.attention("dec_self", layer).weights[0, h, -1]
            for layer in range(1, model.cfg.n_layers) for h in range(model.cfg.n_heads)}
    best = max(rows, key=lambda lh: float(rows[lh][first + 1]))
    assert (r.numbers["layer"], r.numbers["head"]) == best
    row = rows[best]
    assert r.numbers["weight"] == pytest.approx(float(row[first + 1]), abs=1e-5)
    assert r.numbers["key_rank"] == int((row > row[first + 1]).sum()) + 1
    assert r.lines[1] == ("most" if int(row.argmax()) == first + 1 else "ranked")
    logits, attention = r.views
    assert (logits.page, attention.page) == ("logits", "attention")
    assert attention.values == {"text": demos.INDUCTION_TEXT, "layer": best[0], "head": best[1], "block": "dec_self"}


def head_zeroed(model, layer: int, head: int):
    """A hook of our own (not the app's interventions): the head's slice of the output projection's input set to 0."""
    hs = model.cfg.head_dim
    attn = model.decoder.layers[layer].self_attn

    def zero(_module, args):
        x = args[0].clone()
        x[..., head * hs:(head + 1) * hs] = 0
        return (x, *args[1:])

    return attn.W_o.register_forward_pre_hook(zero)


def summed_logprob(model, ids: list[int], answer: list[int]) -> float:
    """log p of an answer's tokens after ids, teacher-forced, from one plain forward."""
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids + answer[:-1]]))[0].double(), -1)
    return float(sum(logp[len(ids) - 1 + i, a] for i, a in enumerate(answer)))


def check_name_movers(model, card, text: str, lang: str) -> demos.Reading:
    r = demos.name_movers(model, text, card, lang)
    ids = text_ids(model, text)
    right, repeated = (text_ids(model, r.tokens[k]) for k in ("right", "repeated"))
    diff = summed_logprob(model, ids, right) - summed_logprob(model, ids, repeated)
    assert r.numbers["diff"] == pytest.approx(diff, abs=1e-4)
    assert r.numbers["p_right"] == pytest.approx(math.exp(summed_logprob(model, ids, right)), rel=1e-4)
    assert r.lines[0] == ("wins" if diff > 0 else "loses")
    layer, head = r.numbers["layer"], r.numbers["head"]
    hook = head_zeroed(model, layer, head)
    try:
        changed = summed_logprob(model, ids, right) - summed_logprob(model, ids, repeated)
    finally:
        hook.remove()
    assert r.numbers["change"] == pytest.approx(changed - diff, abs=1e-4)
    top = demos.circuit_head(card, lang, model.cfg.n_layers, model.cfg.n_heads)
    which = "card" if top else "sweep" if r.numbers["change"] < 0 else "none"
    same = (r.numbers["largest_layer"], r.numbers["largest_head"]) == (layer, head)  # (a model of one block kind)
    assert r.lines[1] == (f"{which}_same" if same and which != "none" else which)  # the same head said once
    if top:
        assert (layer, head) == top
    assert r.views[0].page == "intervene" and r.views[0].values == {"text": text}
    return r


def test_name_movers_arithmetic_on_the_default_model(everyday):
    """The default model is no name mover, but the demo's figures must still be what a plain forward and a head of
    our own switched off give (the lines then say the model prefers the repeated name where it does)."""
    model, card = everyday
    r = check_name_movers(model, card, demos.IOI_TEXTS["en"], "en")
    assert (r.tokens["right"], r.tokens["repeated"]) == (" Tom", " Anna")


def test_name_movers_reads_the_cards_top_head_for_the_language(everyday):
    """A card that names its top name mover per language (`circuit.by_language.<lang>.heads.top`): the second line
    is about that head, measured; a head outside the model is ignored."""
    model, _ = everyday
    card = {"circuit": {"by_language": {"zh": {"heads": {"top": [2, 5]}}, "en": {"heads": {"top": [99, 0]}}}}}
    r = check_name_movers(model, card, demos.IOI_TEXTS["zh"], "zh")
    assert (r.numbers["layer"], r.numbers["head"]) == (2, 5) and r.lines[1].startswith("card")
    assert (r.tokens["right"], r.tokens["repeated"]) == ("张伟", "李娜")
    assert demos.circuit_head(card, "en", model.cfg.n_layers, model.cfg.n_heads) is None


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_name_movers_model_prefers_the_name_said_once_and_its_card_head_moves_it(name_movers, lang):
    model, card = name_movers
    r = check_name_movers(model, card, demos.IOI_TEXTS[lang], lang)
    assert r.lines[0] == "wins", r.numbers  # the demo's premise, on a held-out sentence
    assert r.lines[1].startswith("card") and r.numbers["change"] < 0  # its top name mover carries part of it


def test_name_movers_on_gpt2_small_when_it_is_downloaded():
    if weights_file(Places()) is None:
        pytest.skip("GPT-2 small is not downloaded here")
    model, card = load_model("gpt2:small")
    r = check_name_movers(model, card, demos.IOI_TEXTS["en"], "en")
    assert r.lines[0] == "wins" and r.lines[1].startswith("sweep")


def test_translator_alignment_matches_the_rule_and_the_traced_cross_attention():
    from transformer_core.train.translation import parse

    model, card = shipped("dates-zh")
    r = demos.alignment(model, card)
    assert r.tokens["answer"] == parse(demos.DATES_TEXT)[1] and r.lines[0] == "right"
    prep, trace = trace_text(model, demos.DATES_TEXT, "=" + r.tokens["answer"])
    w = trace.attention("cross", r.numbers["layer"]).weights[0, r.numbers["head"]]  # (Tt, Ts)
    src = [t.raw.decode() for t in prep.src.tokens]
    tgt = [t.raw.decode() for t in prep.tgt.tokens]
    # each field by its characters: the source "23 November 2026" (day, month, year), the answer "=2026年11月23日"
    day, month, year = demos.DATES_TEXT.split()
    fields_src = {"day": day, "month": month, "year": year}
    fields_tgt = {"year": year, "month": "11", "day": day}

    def field_of(tokens, spans, i):
        """The field whose characters hold token i's (its spaces aside), or None."""
        start = sum(len(x) for x in tokens[:i]) + len(tokens[i]) - len(tokens[i].lstrip())
        end = start + len(tokens[i].strip())
        text = "".join(tokens)
        for name, value in spans.items():
            at = text.find(value)
            if at >= 0 and at <= start and end <= at + len(value) and end > start:
                return name
        return None

    rows = [(i, field_of(tgt, fields_tgt, i)) for i in range(1, len(tgt))]
    rows = [(i, f) for i, f in rows if f is not None]
    hits = sum(field_of(src, fields_src, int(w[i - 1].argmax())) == f for i, f in rows)  # row i - 1 writes token i
    assert (r.numbers["hits"], r.numbers["n"]) == (hits, len(rows))
    assert r.lines[1] == ("all" if hits == len(rows) else "some")
    best = card.get("cross_attention") or {}
    if {"layer", "head"} <= set(best):
        assert (r.numbers["layer"], r.numbers["head"]) == (best["layer"], best["head"])
    assert r.views[0].values["block"] == "cross" and r.views[0].values["tgt"] == "=" + r.tokens["answer"]


def test_previous_token_head_is_the_cards_best_and_its_stripe_is_measured_on_the_trace(everyday):
    model, card = everyday
    r = demos.previous_token_head(model, card)
    rows = [x for x in card.get("heads", []) if isinstance(x.get("previous_token"), (int, float))]
    if rows:
        best = max(rows, key=lambda x: x["previous_token"])
        assert (r.numbers["layer"], r.numbers["head"]) == (best["layer"], best["head"]) and r.lines[0] == "card"
    _, trace = trace_text(model, demos.PLAIN_TEXT)
    w = trace.attention("dec_self", r.numbers["layer"]).weights[0, r.numbers["head"]].double()  # (T, T)
    T = w.size(0)
    assert r.numbers["score"] == pytest.approx(float(np.mean([w[i, i - 1] for i in range(1, T)])), abs=1e-4)
    hits = sum(int(w[i].argmax()) == i - 1 for i in range(1, T))
    assert (r.numbers["hits"], r.numbers["n"]) == (hits, T - 1)
    assert r.lines[1] == ("all" if hits == T - 1 else "most" if 2 * hits > T - 1 else "few")


def test_positions_products_follow_the_sine_cosine_formula(everyday):
    model, _ = everyday
    if model.cfg.positional == "rope":  # nothing added to the embeddings: the gallery says why
        from transformer_core.errors import InputError

        with pytest.raises(InputError, match="demo_no_positions"):
            demos.positions(model)
        return
    r = demos.positions(model)
    n, d = len(text_ids(model, demos.PLAIN_TEXT)), model.cfg.d_model
    omega = [10000 ** (-2 * i / d) for i in range(d // 2)]

    def dot(p: int, q: int) -> float:  # PE(p)·PE(q) = Σ_i cos(ω_i (p − q))
        return sum(math.cos(w * (p - q)) for w in omega)

    x = r.numbers
    assert (x["n"], x["last"], x["a"]) == (n, n - 1, n - 3)
    for key, (p, q) in {"same": (0, 2), "later": (n - 3, n - 1), "near": (0, 1), "far": (0, n - 1),
                        "self": (0, 0)}.items():
        assert x[key] == pytest.approx(dot(p, q), abs=1e-2), key
    assert r.lines == ("equal", "closer")  # the sentences the gallery shows for this model


def test_kv_cache_figures_match_a_greedy_loop_and_the_config(everyday):
    model, _ = everyday
    r = demos.kv_cache(model)
    ids = text_ids(model, demos.PLAIN_TEXT)
    new, end = [], end_of_text_id(model)
    while len(new) < demos.KV_STEPS and (not new or new[-1] != end):  # greedy, stopping after the end of text
        new.append(int(np.argmax(plain_probs(model, ids + new))))
    x, cfg = r.numbers, model.cfg
    assert list(r.views[0].values["gen"]) == new and x["new"] == len(new)
    t = len(ids) + len(new)
    per_token = 2 * cfg.n_layers * cfg.kv_heads * cfg.head_dim * 4  # K and V, float32
    assert (x["t"], x["per_token"], x["bytes"], x["layers"]) == (t, per_token, per_token * t, cfg.n_layers)
    assert x["diff"] < 1e-3 and r.lines == ("stopped" if new[-1] == end else "steps", "same")


def test_one_token_neuron_reads_the_index_and_fires_on_its_token(everyday):
    model, _ = everyday
    index = shipped_index("everyday-gpt")
    if index is None:  # none, or one of an older format: an index of a little of its held-out text instead
        from transformer_core.analysis.neurons import build_index

        texts = [p.read_text(encoding="utf-8")[:1500] for p in sorted((SHIPPED / "everyday-gpt").glob("heldout_*"))]
        index = build_index(model, texts)
    r = demos.one_token_neuron(model, index)
    layer, neuron = r.numbers["layer"], r.numbers["neuron"]
    kept = np.isfinite(index.acts[layer, neuron]) & (index.acts[layer, neuron] > 0)  # the FFN page's examples
    tokens = [int(index.ids[c, p]) for c, p in index.where[layer, neuron][kept]]
    token = max(set(tokens), key=tokens.count)
    assert (r.numbers["count"], r.numbers["kept"]) == (tokens.count(token), int(kept.sum()))
    assert 2 * r.numbers["count"] > r.numbers["kept"]  # mostly one token
    assert r.lines[0] == ("all" if tokens.count(token) == len(tokens) else "most")
    text = r.views[0].values["text"]
    ids = text_ids(model, text)
    assert token in ids  # the demo's text holds the token
    _, trace = trace_text(model, text)
    acts = trace[act_name("ffn_hidden", layer=layer)][0, :, neuron].float().numpy()
    on = np.array(ids) == token
    assert r.numbers["fire"] == pytest.approx(float(acts[on].max()), abs=1e-4)
    assert r.numbers["other"] == pytest.approx(float(acts[~on].max()), abs=1e-4)
    assert r.lines[1] == ("above" if acts[on].max() > acts[~on].max() else "below")
    assert r.views[0].values["nlayer"] == layer and r.views[0].values["neuron"] == neuron


def test_a_text_that_repeats_nothing_is_refused_with_a_message():
    from transformer_core.errors import InputError

    with pytest.raises(InputError) as err:
        demos.copy_target([1, 2, 3, 4])
    assert err.value.code == "demo_no_repeat" and err.value.text("zh")
