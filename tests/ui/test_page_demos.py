"""The demo gallery (pages/15_demos.py): every demo's card in English and 中文 with its two lines filled by figures
measured now, a link whose values parse back to the view, a button that opens that view in the same tab, and a
demo whose model is not here (the name-mover model not built yet, GPT-2 small not downloaded) said in the learner's
language, never a traceback."""
import re
from urllib.parse import parse_qsl

import pytest

from harness.apptest import (
    EN,
    array,
    figure,
    harness_language,
    messages,
    open_app,
    page_file,
    shown_head,
    shown_layer,
)
from service import catalog, urlstate
from transformer_core.analysis import demos
from transformer_core.errors import InputError
from ui.i18n import strings

ZH = {k: v["zh"] for k, v in strings().items()}
LINK = re.compile(r"\]\(([a-z]+)\?([^)]*)\)$")


def links(at) -> list[tuple[str, dict]]:
    """(page, query values) of every link the gallery shows, in order."""
    found = [LINK.search(m.value) for m in at.markdown]
    return [(m.group(1), dict(parse_qsl(m.group(2)))) for m in found if m]


def available(demo) -> bool:
    if demo.model.startswith("shipped:"):
        return catalog.entry(demo.model) is not None
    from service.settings import settings
    from transformer_core.sources.gpt2 import weights_file

    return weights_file(settings().places) is not None


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_gallery_shows_every_demo_with_its_figures_and_links(lang):
    words = EN if lang == "en" else ZH
    with harness_language(lang):
        at = open_app("demos", lang=lang, timeout=300)
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert at.title[0].value == words["nav_demos"]
    titles = [words[f"demo_{d.name}_title"] for d in demos.DEMOS]
    assert [s.value for s in at.subheader if s.value in titles] == titles  # in order: as a narrow window stacks them
    lines = [m.value for m in at.markdown if m.value.startswith(f"**{words['demo_see']}**")]
    notes = [m for m in messages(at) if m.startswith(words["demo_unavailable"].split("{")[0])]
    assert len(lines) + len(notes) == len(demos.DEMOS) and len(lines) >= 6  # each demo: its lines, or why not
    for text in lines:
        assert "{" not in text and re.search(r"\d", text), text
    if lang == "zh":
        prose = [re.sub(r"‘[^’]*’", "", x.split("**", 2)[2]) for x in lines]  # tokens are the model's own
        assert not [x for x in prose if re.search(r"\b(the|page|layer|head|token)\b", x)]
    got = links(at)
    assert len(got) == len(lines) + 1  # one link per view: the induction demo has two (Logits, Attention)
    for page, values in got:
        parsed, notices = urlstate.parse(values, catalog.link_models())
        assert notices == [] and parsed["lang"] == lang and page_file(page)
        assert parsed["model"] in {d.model for d in demos.DEMOS if available(d)} and parsed["text"]
    missing = [d for d in demos.DEMOS if not available(d)]
    assert len(notes) >= len(missing)
    if any(d.name == "ioi" for d in missing):
        assert any(words["demo_missing_model"].format(name="name-movers") in n for n in notes)
    if any(d.name == "ioi_gpt2" for d in missing):
        assert any(words["err.gpt2_not_downloaded"] in n for n in notes)


def test_a_demo_button_opens_its_view_in_this_tab_as_its_link_does():
    at = open_app("demos", lang="en", model="shipped:dates-zh", text="4817", timeout=300)  # another model, text
    at.session_state["layer"] = 1
    at.button(key="demo_induction_1").click().run()  # the induction head on the Attention page
    assert not at.exception and at.title[0].value == EN["nav_attention"]
    model, _ = catalog.load("shipped:everyday-gpt")
    found = demos.induction(model)
    view = found.views[1].values
    assert at.sidebar.selectbox(key="model").value == "shipped:everyday-gpt"
    assert at.sidebar.text_area(key="text").value == demos.INDUCTION_TEXT
    assert (shown_layer(at), shown_head(at)) == (view["layer"], view["head"])
    assert at.query_params["layer"] == str(view["layer"]) and at.query_params["head"] == str(view["head"])
    at.switch_page(page_file("demos")).run()
    at.button(key="demo_kv_0").click().run()  # the Logits page with the generated tokens and their cache
    assert not at.exception and at.title[0].value == EN["nav_logits"]
    kv = demos.kv_cache(model)
    assert at.query_params["gen"] == ",".join(map(str, kv.views[0].values["gen"]))
    total = EN["kv_total"].format(bytes=f"{kv.numbers['bytes']:,}", n=kv.numbers["layers"], t=kv.numbers["t"])
    assert total in [c.value for c in at.caption]


def test_the_neuron_link_opens_the_ffn_page_on_its_neuron_and_a_new_pick_goes_into_the_link():
    at = open_app("ffn", model="shipped:everyday-gpt", text="The cat sat on the mat.", nlayer="2", neuron="106")
    assert not at.exception
    model, _ = catalog.load("shipped:everyday-gpt")
    layer_key, neuron_key = f"nr_layer_{model.cfg.n_layers}", f"nr_neuron_{model.cfg.d_ffn}"
    assert (at.selectbox(key=layer_key).value, at.number_input(key=neuron_key).value) == (2, 106)
    assert EN["nr_on_text"].format(layer=2, neuron=106) in figure(at, "nr_on_text")["layout"]["title"]["text"]
    at.number_input(key=neuron_key).set_value(7).run()
    assert (at.query_params["nlayer"], at.query_params["neuron"]) == ("2", "7")
    at = open_app("ffn", model="shipped:everyday-gpt", text="The cat.", nlayer="9", neuron="99999")  # not in it
    assert not at.exception and at.selectbox(key=layer_key).value == 0


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_demo_whose_model_is_missing_or_whose_text_fails_says_so_in_the_learners_language(monkeypatch, lang):
    words = EN if lang == "en" else ZH

    def broken(model, card, language, index=None):
        raise InputError("demo_no_repeat")

    patched = (demos.Demo("induction", "shipped:no-such-model", broken), demos.Demo("previous",
                                                                                  "shipped:everyday-gpt", broken))
    monkeypatch.setattr("ui.demos.DEMOS", patched)
    from ui.demos import reading

    reading.clear()  # measured by the tests before: measure them afresh with the patched demos
    with harness_language(lang):
        at = open_app("demos", lang=lang, timeout=300)
    assert not at.exception and not at.error
    shown = messages(at)
    assert words["demo_unavailable"].format(reason=words["demo_missing_model"].format(name="no-such-model")) in shown
    assert words["demo_unavailable"].format(reason=words["err.demo_no_repeat"]) in shown


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_ioi_view_measures_what_the_demos_lines_say(lang):
    """The Ablation & patching page opened from the IOI demo's link starts on the two names (A said once, B
    repeated), the logit difference and zero ablation: its answers' scores and its head grid give the demo's figures.
    On the name-mover model where this checkout has it, else on the default model (the same arithmetic)."""
    key = "shipped:name-movers" if catalog.entry("shipped:name-movers") else "shipped:everyday-gpt"
    model, card = catalog.load(key)
    r = demos.name_movers(model, demos.IOI_TEXTS[lang], card, lang)
    with harness_language(lang):
        at = open_app("intervene", model=key, text=demos.IOI_TEXTS[lang], lang=lang)
    assert not at.exception and not at.error
    assert at.session_state[f"he_a_{key}_text"] == r.tokens["right"]
    assert at.session_state[f"he_b_{key}_text"] == r.tokens["repeated"]
    grid = array(figure(at, "he_grid_0")["data"][0]["z"])  # (layers, heads + the FFN column)
    assert grid[r.numbers["layer"], r.numbers["head"]] == pytest.approx(r.numbers["change"], abs=1e-4)
    words = EN if lang == "en" else ZH
    summary = next(m.value for m in at.markdown if m.value.startswith(words["he_summary"].split("{")[0]))
    assert f"**{r.numbers['diff']:.4f}**" in summary and f"**{r.numbers['largest_change']:+.4f}**" in summary
