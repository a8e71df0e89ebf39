"""Real browser (Debian Chromium): every link of the demo gallery, each opened in a tab of its own by a new learner
(a new session, no cookies) on a fresh server, the first of them as that server's very first request, shows what the
demo's two lines say: the figures they cite are read back from the opened page's own data (the numbers of its charts,
the sentences it writes). Then the gallery itself, in English and 中文: its cards show those lines and those links.
The name-mover model and GPT-2 small are skipped where this checkout has neither (the gallery then says so). With
SCREENSHOTS=1, screenshots go to screenshots/."""
import re

import pytest

from harness.browser import (
    MAIN,
    app_text,
    assert_clean,
    require_browser,
    s,
    screenshot,
    settle,
    view_state,
)
from harness.server import ROOT
from service import catalog
from transformer_core.analysis import demos
from ui.demos import href
from ui.figures import visible

sync_api = require_browser()
SHOTS = ROOT / "screenshots" / "demos"
FIRST_MS = 300_000  # a fresh server's first page loads torch and the model on 2 busy cores
# a keyed chart's trace, its arrays as plain lists (NaN -> None)
CHART_JS = """([key, name]) => {
    const p = document.querySelector(`.st-key-${key} .js-plotly-plot`);
    if (!p) return null;
    const d = name ? p._fullData.find(t => t.name === name) : p._fullData[0];
    const plain = v => (v === null || v === undefined || Number.isNaN(v)) ? null : v;
    const arr = a => a == null ? null : Array.from(a, v => (v !== null && typeof v === 'object')
        ? Array.from(v, plain) : plain(v));
    const title = p.layout.title ? (p.layout.title.text ?? p.layout.title) : '';
    return {x: arr(d.x), y: arr(d.y), z: arr(d.z), title: String(title)};
}"""
READINGS: dict[tuple[str, str], object] = {}


def available(demo) -> bool:
    if demo.model.startswith("shipped:"):
        return catalog.entry(demo.model) is not None
    from service.settings import settings
    from transformer_core.sources.gpt2 import weights_file

    return weights_file(settings().places) is not None


def reading(demo, lang: str):
    """The demo measured here, as the server measures it (same models, same code): what the lines cite; None when
    it cannot be measured (the gallery then says why: a model without a neuron index, ...)."""
    if (demo.name, lang) not in READINGS:
        from transformer_core.analysis.neurons import load_index
        from transformer_core.errors import InputError

        model, card = catalog.load(demo.model)
        index = load_index(catalog.shipped_folder(demo.model)) if demo.neurons else None
        try:
            READINGS[(demo.name, lang)] = demo.measure(model, card, lang if demo.by_language else "en", index)
        except InputError:
            READINGS[(demo.name, lang)] = None
    return READINGS[(demo.name, lang)]


def chart(page, key: str, name: str | None = None) -> dict:
    page.locator(f".st-key-{key} .js-plotly-plot").first.wait_for(state="attached", timeout=60_000)
    data = page.evaluate(CHART_JS, [key, name])
    assert data is not None, f"no chart {key!r} on {page.url}"
    return data


def number(template: str, field: str, text: str) -> float:
    """The number a page's sentence (a UI string `template`, filled) shows for `field`, read from its text."""
    pattern = re.escape(template.replace("**", ""))
    pattern = re.sub(r"\\\{" + field + r"(?::[^}]*)?\\\}", r"([-+]?[0-9][0-9,.]*)", pattern, count=1)
    pattern = re.sub(r"\\\{[a-z_]+(?::[^}]*)?\\\}", ".*?", pattern)
    found = re.search(pattern, text)
    assert found, f"{template!r} not found in the page"
    return float(found.group(1).replace(",", ""))


# ---- what each view must show, read from the page ------------------------------------------------------------------

def distribution_shown(page) -> tuple[list[str], list[float]]:
    """The Logits page's ranked tokens and their probabilities: drawn in the browser (ui.sampling_view: the bars'
    labels, the table's probabilities) for a vocabulary it takes, else the server's bar chart."""
    view = page.locator(f"{MAIN} .sv")
    try:  # the view draws once its script has loaded, which may be after the run ended
        view.locator("table.top tbody tr").first.wait_for(timeout=15_000)
    except Exception:  # noqa: BLE001 - playwright's TimeoutError: no view, the server drew the distribution
        bars = chart(page, "log_probs")
        return bars["y"], bars["x"]
    labels = view.locator("svg text.tok").all_text_contents()  # (SVG text has no innerText)
    probs = [float(row.locator("td").nth(3).inner_text()) for row in view.locator("table.top tbody tr").all()]
    return labels, probs


def check_logits(page, r, lang: str) -> None:
    if r.demo == "kv":
        x = r.numbers
        assert s("kv_total", lang, bytes=f"{x['bytes']:,}", n=x["layers"], t=x["t"]) in app_text(page)
        return
    labels, probs = distribution_shown(page)
    assert labels[0] == f"#1 ‘{visible(r.tokens['top'])}’"
    assert probs[0] == pytest.approx(r.numbers["p_top"], abs=1e-4)
    if r.numbers["rank"] <= len(labels):
        k = r.numbers["rank"] - 1
        assert labels[k] == f"#{k + 1} ‘{visible(r.tokens['copy'])}’"
        assert probs[k] == pytest.approx(r.numbers["p_copy"], abs=1e-4)


def main_map(page) -> list[list[float | None]]:
    """The weights of the head the Attention page's view shows large (None where masked)."""
    view = view_state(page)
    return view["weights"][view["head"]]


def check_attention(page, r, lang: str) -> None:
    z = main_map(page)
    x = r.numbers
    if r.demo == "induction":
        row = z[x["query"]]
        assert row[x["pos"]] == pytest.approx(x["weight"], abs=1e-4)
        assert sum(v > row[x["pos"]] for v in row if v is not None) + 1 == x["key_rank"]
    elif r.demo == "previous":
        sub = [z[i][i - 1] for i in range(1, len(z))]
        assert sum(sub) / len(sub) == pytest.approx(x["score"], abs=1e-4)
        hits = sum(max(range(len(z[i])), key=lambda j: -1 if z[i][j] is None else z[i][j]) == i - 1
                   for i in range(1, len(z)))
        assert (hits, len(z) - 1) == (x["hits"], x["n"])
    else:  # the translator's cross-attention: the page's own alignment sentence
        line = s("att_align_summary", lang, hits=x["hits"], n=x["n"], layer=x["layer"], head=x["head"])
        assert line in app_text(page)
        boxes = page.locator("[data-testid='stSidebar'] textarea").evaluate_all("els => els.map(e => e.value)")
        assert f"={r.tokens['answer']}" in boxes  # the decoder reads the model's own answer


def check_intervene(page, r, lang: str) -> None:
    x = r.numbers
    run = page.locator(".st-key-he_run input")
    if run.count():  # a big model (GPT-2): the sweep runs on request
        run.first.click(force=True)
        settle(page, timeout=FIRST_MS)
    text = app_text(page)
    assert number(s("he_summary", lang), "intact", text) == pytest.approx(x["diff"], abs=1e-3)
    grid = chart(page, "he_grid_0", "cells")["z"]
    assert grid[x["layer"]][x["head"]] == pytest.approx(x["change"], abs=1e-3)
    assert number(s("he_summary", lang), "change", text) == pytest.approx(x["largest_change"], abs=1e-3)


def check_embeddings(page, r, lang: str) -> None:
    z, x = chart(page, "emb_sim")["z"], r.numbers
    for key, (p, q) in {"same": (0, 2), "later": (x["a"], x["last"]), "near": (0, 1), "far": (0, x["last"]),
                        "self": (0, 0)}.items():
        assert z[p][q] == pytest.approx(x[key], abs=1e-2), key
    assert len(z) == x["n"]


def check_ffn(page, r, lang: str) -> None:
    bars, x = chart(page, "nr_on_text"), r.numbers
    assert s("nr_on_text", lang, layer=x["layer"], neuron=x["neuron"]) in bars["title"]
    acts = bars["y"]
    from transformer_core.text.inputs import prepare

    model, _ = catalog.load("shipped:everyday-gpt")
    ids = prepare(model, r.views[0].values["text"]).src_ids[0].tolist()
    token = ids[x["pos"]]  # the token the neuron reads, where it fires most in this text
    assert acts[x["pos"]] == pytest.approx(x["fire"], abs=1e-3)
    assert max(v for i, v in enumerate(acts) if ids[i] == token) == pytest.approx(x["fire"], abs=1e-3)
    others = [v for i, v in enumerate(acts) if ids[i] != token]
    assert max(others) == pytest.approx(x["other"], abs=1e-3)


CHECKS = {"logits": check_logits, "attention": check_attention, "intervene": check_intervene,
          "embeddings": check_embeddings, "ffn": check_ffn}
# every demo's views in English; in 中文 the demos whose text or pick follows the language
VIEWS = [(d.name, i, "en") for d in demos.DEMOS for i in range(2 if d.name == "induction" else 1)]
VIEWS += [("ioi", 0, "zh"), ("neuron", 0, "zh")]


@pytest.mark.parametrize(("name", "view", "lang"), VIEWS, ids=[f"{n}-{v}-{lang}" for n, v, lang in VIEWS])
def test_a_demo_link_opens_its_view_and_the_page_shows_the_lines_figures(app, tab, name, view, lang):
    demo = next(d for d in demos.DEMOS if d.name == name)
    if not available(demo):
        pytest.skip(f"{demo.model} is not on this server (the gallery says so)")
    r = reading(demo, lang)
    if r is None:
        pytest.skip(f"{name} cannot be measured on this checkout's {demo.model} (the gallery says why)")
    shown = r.views[view]
    tab.goto(f"{app.url}/{href(shown, demo.model, lang)}")  # a learner of its own: a new session, as a link gives
    settle(tab, timeout=FIRST_MS, charts=shown.page != "intervene")
    assert_clean(tab, app, f"{name} → /{shown.page} ({lang})")
    title = tab.locator(MAIN).locator("h1").first.inner_text()
    assert s(f"nav_{shown.page}", lang) in title
    CHECKS[shown.page](tab, r, lang)
    screenshot(tab, SHOTS / f"{name}-{view}-{lang}.png")


def expected_lines(demo, r, lang: str) -> list[str]:
    """The two lines as the gallery writes them (ui.demos.lines), markdown's escapes left out."""
    pages = {f"page{i + 1 if i else ''}": s(f"nav_{v.page}", lang) for i, v in enumerate(r.views)}
    fill = {**r.numbers, **{k: f"‘{visible(v)}’" for k, v in r.tokens.items()}, **pages}
    return [s(f"demo_{r.demo}_see{i + 1}_{variant}", lang, **fill) for i, variant in enumerate(r.lines)]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_gallery_shows_each_demos_lines_and_links(app, tab, lang):
    tab.goto(f"{app.url}/demos?lang={lang}")
    settle(tab, timeout=FIRST_MS)
    assert_clean(tab, app, f"/demos ({lang})")
    for demo in demos.DEMOS:
        card = tab.locator(f".st-key-demo_{demo.name}")
        text = card.inner_text()
        assert s(f"demo_{demo.name}_title", lang) in text
        r = reading(demo, lang) if available(demo) else None
        if r is None:
            assert s("demo_unavailable", lang).split("{")[0] in text
            continue
        for line in expected_lines(demo, r, lang):
            assert line in text, (line, text)
        links = card.locator("a[href]").evaluate_all(
            "els => els.map(e => e.getAttribute('href')).filter(h => !h.startsWith('#'))")
        assert links == [href(v, demo.model, lang) for v in r.views]
    screenshot(tab, SHOTS / f"gallery-{lang}.png")


def test_a_demo_button_opens_its_view_in_the_same_tab(app, tab):
    demo = next(d for d in demos.DEMOS if d.name == "positions")
    r = reading(demo, "en")
    tab.goto(f"{app.url}/demos?lang=en")
    settle(tab, timeout=FIRST_MS)
    tab.locator(".st-key-demo_positions_0 button").click()
    tab.wait_for_url(re.compile(r"/embeddings(\?|$)"), timeout=120_000)  # (default model and text: no query)
    settle(tab, timeout=FIRST_MS, charts=True)
    assert_clean(tab, app, "positions button")
    check_embeddings(tab, r, "en")
