"""The FFN page's "read a neuron" through the app, in English and Chinese, on the shipped modern-gpt (the default
model is not pinned here): its top examples shaded token by token with the values of a fresh forward, the activation
histogram of the held-out tokens, the search by token whose buttons open a neuron, and bad searches answered with a
message in the page's language."""
import html
import re

import numpy as np
import pytest
import torch

from harness.apptest import ENGLISH_ONLY, array, figure, harness_language, messages, open_app, shown_texts
from harness.neurons import absent_word
from service import catalog
from transformer_core import load_model
from transformer_core.analysis.neurons import (
    SEARCH_TOP,
    neurons_for_token,
    shipped_index,
    token_search,
    top_snippets,
)
from transformer_core.errors import message
from ui.figures import md_quoted, plain
from ui.i18n import strings

MODEL = "shipped:modern-gpt"
TEXT = "The king said to his people."
WAIT = 300  # seconds a run may take on a busy 2-core machine (a neuron's examples are one small forward)
S = strings()


def examples_html(at) -> str:
    return next(h.proto.body for h in at.get("html") if "nr-examples" in h.proto.body)


def shown_values(body: str) -> list[list[float]]:
    """Per example row, the activation each shaded span's hover gives for each of its tokens."""
    rows = []
    for row in body.split("border-bottom")[1:]:
        titles = [html.unescape(x) for x in re.findall(r"title='([^']*)'", row)]
        rows.append([float(line.rsplit(": ", 1)[1]) for title in titles for line in title.split("\n")])
    return rows


def fresh(model, index, chunk: int, layer: int, neuron: int) -> np.ndarray:
    """(T,) the neuron's activation over one held-out chunk, by a plain hook on the FFN's down-projection."""
    seen = {}
    hook = model.decoder.layers[layer].ffn.linear2.register_forward_hook(lambda m, i, o: seen.update(h=i[0]))
    try:
        with torch.no_grad():
            model(torch.tensor(index.ids[chunk:chunk + 1], dtype=torch.long))
    finally:
        hook.remove()
    return seen["h"][0, :, neuron].numpy()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_neuron_reads_as_shaded_examples_and_a_histogram_in_both_languages(lang):
    layer, neuron = 3, 5
    with harness_language(lang):
        at = open_app("ffn", timeout=WAIT, model=MODEL, text=TEXT, nlayer=str(layer), neuron=str(neuron), lang=lang)
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    model, index = catalog.load(MODEL, "cpu")[0], shipped_index("modern-gpt")
    snippets = top_snippets(model, index, layer, neuron)
    rows = shown_values(examples_html(at))
    assert len(rows) == len(snippets) >= 20 and all(len(r) >= 24 for r in rows)
    for row, s in zip(rows, snippets, strict=True):  # every token's shade is its activation in a fresh forward
        np.testing.assert_allclose(row, fresh(model, index, s.chunk, layer, neuron)[s.start:s.start + len(row)],
                                   atol=6e-4)
    firing = [r[s.fire] for r, s in zip(rows, snippets, strict=True)]
    assert firing == sorted(firing, reverse=True)
    hist = figure(at, "nr_histogram")
    counts = array(hist["data"][0]["y"])
    assert hist["data"][0]["y"]["dtype"] == "f4" and counts.sum() == index.n_tokens
    share = (index.positive[layer, neuron] / index.n_tokens)
    assert f"{share:.1%}" in hist["layout"]["title"]["text"]
    said = S["nr_examples"][lang].format(n=len(snippets), layer=layer, neuron=neuron,
                                         top=f"{snippets[0].activation:.3g}")
    assert said in [m.value for m in at.markdown]
    if lang == "zh":
        assert not [s for s in shown_texts(at) if s in ENGLISH_ONLY]


def test_a_search_by_token_lists_the_neurons_that_fire_most_and_a_click_opens_one():
    at = open_app("ffn", timeout=WAIT, model=MODEL, text=TEXT)
    assert S["nr_find_hint"]["en"] in [c.value for c in at.caption]  # nothing typed yet: what the box does
    at.text_input(key="nr_find").set_value("king").run()
    model, index = catalog.load(MODEL, "cpu")[0], shipped_index("modern-gpt")
    token = token_search(model, index, "king").choices[0]  # the page starts on the most frequent form (" king")
    assert token.label == " king"
    hits = neurons_for_token(model, index, token.token, "mean", k=SEARCH_TOP)
    assert picks(at) == [S["nr_pick"]["en"].format(layer=lay, neuron=n, value=f"{v:.2f}") for lay, n, v in hits]
    at.radio(key="nr_find_by").set_value("max").run()
    by_max = neurons_for_token(model, index, token.token, "max", k=SEARCH_TOP)
    assert picks(at) == [S["nr_pick"]["en"].format(layer=lay, neuron=n, value=f"{v:.2f}") for lay, n, v in by_max]
    at.button(key="nr_pick_1").click().run()
    assert not at.exception, at.exception
    layer, neuron = by_max[1][:2]
    assert (at.selectbox(key=f"nr_layer_{model.cfg.n_layers}").value,
            at.number_input(key=f"nr_neuron_{model.cfg.d_ffn}").value) == (layer, neuron)
    assert (at.query_params["nlayer"], at.query_params["neuron"]) == (str(layer), str(neuron))  # the link follows
    assert len(shown_values(examples_html(at))) >= 20


def picks(at) -> list[str]:
    """The found neurons' buttons as the page lists them (rows of five: a phone stacks them in rank order)."""
    found = [b for b in at.button if b.key and b.key.startswith("nr_pick_")]
    assert [int(b.key.rsplit("_", 1)[1]) for b in found] == list(range(len(found)))  # in rank order
    return [b.label for b in found]


def test_a_word_of_several_tokens_offers_its_pieces():
    at = open_app("ffn", timeout=WAIT, model=MODEL, text=TEXT)
    at.text_input(key="nr_find").set_value("Transformers").run()
    assert not at.exception and not at.error
    assert any(c.value.startswith("“Transformers” is ") for c in at.caption)
    radio = next(r for r in at.radio if r.key and r.key.startswith("nr_find_token_"))
    assert len(radio.options) > 1


def test_a_search_that_looks_like_markdown_is_written_as_typed():
    """A search of several tokens is named in a caption: "**x** $x$ [a](…)" drew x bold, a formula and a link, and
    "$\\rule{900px}{300px}$" a grey block over the page; each piece and the word itself are now text."""
    at = open_app("ffn", timeout=WAIT, model=MODEL, text=TEXT)
    for typed in ("**x** $x$ [a](javascript:alert(1)) `", "ab :red[hi] :smile: at 10:30"):
        at.text_input(key="nr_find").set_value(typed).run()
        assert not at.exception
        found = token_search(catalog.load(MODEL, "cpu")[0], shipped_index("modern-gpt"), typed)
        said = next(c.value for c in at.caption if c.value.startswith("“"))
        assert said == S["nr_find_pieces"]["en"].format(text=plain(typed), n=len(found.pieces),
                                                        pieces=" · ".join(md_quoted(p) for p in found.pieces))
        unescaped = re.sub(r"\\.", "", said)  # what markdown reads as markup: no star, dollar, bracket, colon
        assert not re.search(r"[*$\[\]`]|:\w", unescaped), said


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_bad_searches_get_a_message_in_the_pages_language(lang):
    absent = absent_word(catalog.load(MODEL, "cpu")[0], shipped_index("modern-gpt"))
    with harness_language(lang):
        at = open_app("ffn", timeout=WAIT, model=MODEL, text=TEXT, lang=lang)
        for text, code, params in [("   ", "neuron_search_empty", {}),
                                   ("x" * 500, "neuron_search_long", {"n": "500", "max": 40}),
                                   ("<|endoftext|>", "neuron_search_special", {"token": "<|endoftext|>"}),
                                   (absent, "neuron_search_absent", {"text": absent})]:
            at.text_input(key="nr_find").set_value(text).run()
            assert not at.exception, (text, at.exception)
            assert message(code, lang, **params) in messages(at), (text, messages(at))
            assert not picks(at)


@pytest.mark.parametrize("model, text", [
    ("shipped:everyday-gpt", "The cat sat on the mat. The cat sat on the"),  # pre-norm, the mean length grows
    ("shipped:name-movers", "When Tom and Anna arrived at the party, Anna handed the gift to"),  # pre-norm, it falls
    ("shipped:kjv-tang-gpt", "In the beginning God created the heaven"),  # post-norm
])
def test_what_to_look_for_says_how_the_streams_length_moved_in_the_chart_beside_it(model, text):
    """The hint's claim about the stream's length is the chart's: grown at every step, or fallen at some (a pre-norm
    stream is not normalised, and a sub-layer may shrink it), or kept by the Add & Norms of a post-norm model."""
    at = open_app("ffn", model=model, text=text, lang="en")
    assert not at.exception
    mean = array(figure(at, "ffn_stream_mean")["data"][0]["y"]).astype(float)  # the mean length after each step
    look = next(m for m in messages(at) if m.startswith("What to look for"))
    falls = int((np.diff(mean) < 0).sum())
    if not load_model(model.split(":", 1)[1])[0].cfg.norm_first:
        assert look.endswith(S["look_ffn"]["en"].split("}")[-1])
    elif falls:
        assert f"{mean[0]:.1f} → {mean[-1]:.1f} here, smaller after {falls} of the {mean.size - 1} steps" in look
    else:
        assert f"grew at every step here ({mean[0]:.1f} → {mean[-1]:.1f})" in look
    assert model != "shipped:name-movers" or falls  # the case this test is for: a pre-norm stream that shrinks
    # the step it names is the one that writes the most (the bar chart's longest bar), not the one where the stream's
    # length moves most: "the step where the stream changes most (L2 FFN)" sat above a chart where L0 FFN rose most
    table = next(d.value for d in at.dataframe if "‖added‖ (mean)" in d.value.columns)
    top = table.loc[table["‖added‖ (mean)"].idxmax()]
    assert f"writes the most into the stream is {top['step']} (mean ‖added‖ {top['‖added‖ (mean)']:.1f}," in look
