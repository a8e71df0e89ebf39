"""Real browser (Debian Chromium): grids and labels stay readable at the largest sizes the pages take on:
a model of 16 layers × 16 heads and a text of 128+ tokens. Every text element Chromium drew in every chart of the Head
catalogue and the Attention page is measured against every other: no two may overlap (cell labels of the heads grid,
tick labels of every axis, colour-bar titles and ticks, subplot titles).

The 16 × 16 model is a random-init checkpoint written into this module's own checkpoints folder (a learner's trained
model is listed the same way). With SCREENSHOTS=1, screenshots go to screenshots/ (git-ignored).
"""
import re
from dataclasses import replace

import pytest

from harness.browser import (
    app_url,
    assert_clean,
    hover_texts,
    pair_hover,
    pair_state,
    plot_index,
    plots,
    require_browser,
    s,
    screenshot,
    settle,
)
from harness.server import ROOT, fresh_app

sync_api = require_browser()
SHOTS = ROOT / "screenshots"
TEXT = "the quick brown fox jumps over the lazy dog " * 15  # 135 tokens in cl100k_base
MODEL = "user:sixteen"

# every drawn text of chart i with a box, and every pair whose boxes overlap by more than 1 px both ways
OVERLAP_JS = """(i) => {
    const p = document.querySelectorAll("[data-testid='stPlotlyChart'] .js-plotly-plot")[i];
    const boxes = Array.from(p.querySelectorAll('text')).filter(t => t.textContent.trim())
        .map(t => [t.getBoundingClientRect(), t.textContent, t.parentNode.getAttribute('class') || ''])
        .filter(([r]) => r.width > 0 && r.height > 0);
    const bad = [];
    for (let a = 0; a < boxes.length; a++) for (let b = a + 1; b < boxes.length; b++) {
        const r = boxes[a][0], s = boxes[b][0];
        const w = Math.min(r.right, s.right) - Math.max(r.left, s.left);
        const h = Math.min(r.bottom, s.bottom) - Math.max(r.top, s.top);
        if (w > 1 && h > 1)
            bad.push([boxes[a][1], boxes[a][2], boxes[b][1], boxes[b][2], Math.round(w), Math.round(h)]);
    }
    return {texts: boxes.length, overlaps: bad.slice(0, 10), count: bad.length};
}"""


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    import torch

    from transformer_core.model.config import preset
    from transformer_core.model.transformer import build_model
    from transformer_core.train.checkpoint import save_checkpoint

    folder = tmp_path_factory.mktemp("checkpoints")
    torch.manual_seed(0)
    cfg = replace(preset("course-gpt"), n_layers=16, n_heads=16, d_model=64, d_ffn=128, max_len=1024)
    save_checkpoint(build_model(cfg, "cpu"), folder / "sixteen", {"name": "sixteen by sixteen"})
    with fresh_app(folder) as running:
        yield running


def overlaps(page) -> dict[str, dict]:
    """chart title -> its drawn texts and overlapping pairs, for every chart of the page."""
    return {f"{i} {p['title'][:50]}": page.evaluate(OVERLAP_JS, i) for i, p in enumerate(plots(page))}


@pytest.mark.parametrize("path, lang, least", [("heads", "zh", 256), ("attention", "en", 100)])
def test_no_two_drawn_labels_overlap_at_16_by_16_heads_and_135_tokens(app, tab, path, lang, least):
    tab.goto(app_url(app, path, lang, model=MODEL, text=TEXT))
    settle(tab, charts=True, timeout=300_000)
    assert_clean(tab, app, f"/{path} ({lang}) with 16 × 16 heads")
    found = overlaps(tab)
    screenshot(tab, SHOTS / f"grid_{path}_{lang}.png")
    assert max(f["texts"] for f in found.values()) >= least  # the grid's 256 cell labels / the map's labels drawn
    bad = {title: f["overlaps"] for title, f in found.items() if f["count"]}
    assert not bad, bad


def test_a_long_map_names_its_tokens_on_hover(app, tab):
    """300 tokens: the large map is drawn in blocks of 2 × 2 tokens with a readable subset of labels, and hover
    names the block's query and key tokens (the axes' categories), as the window of single tokens before and after
    masking names its own."""
    from transformer_core.text.tokenizer import load_encoding

    enc = load_encoding("cl100k_base")
    text = enc.decode(enc.encode("the quick brown fox jumps over the lazy dog " * 40)[:300])
    tab.goto(app_url(app, "attention", "en", model=MODEL, text=text))
    settle(tab, charts=True, timeout=300_000)
    assert_clean(tab, app, "/attention with 300 tokens")
    main = plot_index(tab, s("att_main_title", "en", layer=0, head=0, scale=s("att_scale_01", "en")))
    shown = " ".join(hover_texts(tab, main, 5, 20))  # block 20 (tokens 40–41) → block 5 (tokens 10–11)
    found = re.search(r"queries: (\d+)–(\d+): \1 ‘.+’ \d+ ‘.+’\s*keys: (\d+)–(\d+): \3 ‘.+’", shown)
    # (under load the mouse can land a block off: cells of ~3 px; what matters is that hover names the tokens)
    assert found and abs(int(found[1]) - 40) <= 4 and abs(int(found[3]) - 10) <= 4, shown
    assert int(found[2]) == int(found[1]) + 1 and s("att_block_max", "en") in shown, shown
    pair = pair_state(tab)  # the window of single tokens before and after masking, drawn in the browser
    assert (pair["n_q"], pair["n_k"]) == (256, 256) and all(p["height"] <= 1000 for p in pair["panels"]), pair["panels"]
    for panel in (0, 1):
        shown = " ".join(pair_hover(tab, panel, 200, 3))  # cells of 1–3 px: the cell under the mouse, named
        found = re.search(r"queries: (\d+) ‘.+’\s*keys: (\d+) ‘.+’ (-?\d+\.\d{4})$", shown)
        assert found and abs(int(found[1]) - 200) <= 1 and abs(int(found[2]) - 3) <= 1, shown
        assert float(found[3]) == pytest.approx(pair["before"][int(found[1])][int(found[2])], abs=1e-9), shown
