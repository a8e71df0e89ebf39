"""The Attention page's scores before and after masking, drawn in the browser for a text the view takes
(ui.attention_pair): the chosen head's scaled scores as the trace has them (to the 4 decimals the hover shows), the
head's mask, one colour scale for both, an ✕ on a small map's masked cells and a title that says grey on a larger one;
a head picked in the view brings that head's; a longer text keeps the server's two charts. The drawing is tested in
Chromium (tests/browser/test_browser_views.py)."""
import base64

import numpy as np
import pytest

from harness.apptest import CAT, DEFAULT, EN, assert_clean, figure, open_app
from harness.apptest import attention_pair as pair
from ui import attention_pair as pair_module
from ui import attention_view as view_module
from ui.i18n import strings

ZH = {k: v["zh"] for k, v in strings().items()}


def four(values) -> list[str]:
    """Each number as the hover shows it (plotly's and attention.js's 4 decimals: no "-0.0000")."""
    return [f"{v:.4f}".replace("-0.0000", "0.0000") for v in np.ravel(values)]


def drawn(data: dict) -> tuple[np.ndarray, np.ndarray]:
    """(scores to 4 decimals, kept) as attention.js reads them."""
    n_q, n_k = data["n_q"], data["n_k"]
    scores = pair_module.decode(base64.b64decode(data["scores"]), n_q, n_k)
    kept = np.unpackbits(np.frombuffer(base64.b64decode(data["mask"]), dtype=np.uint8), bitorder="little")
    return scores, kept[: n_q * n_k].reshape(n_q, n_k).astype(bool)


def test_scores_go_to_the_browser_to_the_four_decimals_the_hover_shows():
    rng = np.random.default_rng(0)
    scores = (rng.standard_normal((9, 7)) * rng.choice([0.001, 1, 30, 5000], (9, 7))).astype(np.float32)
    scores[0, :3] = [0.0, -0.00005, 214748.3]
    got = pair_module.decode(pair_module.encode(scores), 9, 7)
    assert four(got) == four(scores)
    assert len(pair_module.encode(scores)) == 4 * scores.size
    assert pair_module.fits(scores)
    assert not pair_module.fits(np.array([[np.nan, 1.0]])) and not pair_module.fits(np.array([[3e5]]))


def test_the_pair_is_the_chosen_heads_scores_and_mask_as_traced_and_a_head_picked_in_the_view_brings_its_own(
        cat_trace):
    _, _, trace = cat_trace
    at = open_app("attention", model=DEFAULT, text=CAT, layer="2", head="3")
    assert_clean(at)
    data = pair(at)
    stages = trace.attention("dec_self", 2)
    scaled, kept = stages.head("scaled", 3).numpy(), stages.head("mask", 3).numpy().astype(bool)
    scores, mask = drawn(data)
    assert four(scores) == four(scaled)
    assert np.array_equal(mask, kept) and not mask[0, 1:].any()  # causal: the first token sees itself only
    assert data["lim"] == pytest.approx(float(np.abs(scaled).max()))  # one colour scale, symmetric about 0
    assert data["marks"] and data["text"]["after"] == EN["att_after"]  # 13 × 13: an ✕ on each masked cell
    assert data["text"]["before"] == EN["att_before"] and (data["n_q"], data["n_k"]) == (13, 13)
    assert data["colours"]["scale"][0] == "#053061" and len(data["colours"]["scale"]) == 11  # RdBu_r, as the charts
    for key in ("att_before", "att_after"):  # not also the server's charts
        with pytest.raises(KeyError):
            figure(at, key)
    with_pick(at, {"layer": 0, "head": 5, "mask": "none", "scale": "01"})
    assert_clean(at)
    from transformer_core import trace_text

    _, unmasked = trace_text(at_model(), CAT, masks={"dec_self": "none"})
    scores, mask = drawn(pair(at))
    want = unmasked.attention("dec_self", 0).head("scaled", 5).numpy()
    assert np.abs(scores - want).max() <= 5e-5 + 1e-5 and mask.all()  # (the page's threads: 1e-6 apart at most)
    assert pair(at)["text"]["after"] == EN["att_after"]


def at_model():
    from service import catalog

    return catalog.load(DEFAULT)[0]


def with_pick(at, pick: dict) -> None:
    """What the view's "pick" callback does with a pick the browser tells, then the run it starts."""
    from unittest.mock import patch

    with patch.object(view_module.st, "session_state", at.session_state):
        view_module.adopt(pick)
    at.run()


def test_a_larger_map_says_grey_and_draws_no_x_and_a_chinese_page_speaks_chinese():
    text = " ".join(["The cat sat on the mat."] * 8)  # 56 tokens on the default: more than 32 × 32 cells
    at = open_app("attention", model=DEFAULT, text=text, lang="en")
    assert_clean(at)
    data = pair(at)
    assert data["n_q"] * data["n_k"] > 32 * 32 and not data["marks"]
    assert data["text"]["after"] == EN["att_after_grey"]
    at = open_app("attention", model=DEFAULT, text="我们明天早上去公园散步。", lang="zh")
    assert_clean(at)
    data = pair(at)
    assert data["text"]["before"] == ZH["att_before"] and data["text"]["masked"] == ZH["att_masked_hover"]
    assert data["text"]["download_chart"] == ZH["chart_download"].format(fmt="PNG")


def test_a_text_longer_than_the_view_keeps_the_servers_two_charts():
    text = " ".join(["The cat sat on the mat."] * 11)  # 77 tokens
    at = open_app("attention", model=DEFAULT, text=text, lang="en")
    assert_clean(at)
    assert pair(at) is None and view_module.VIEW_TOKENS < 77
    before, after = figure(at, "att_before"), figure(at, "att_after")
    assert EN["att_before"] in before["layout"]["title"]["text"]
    assert EN["att_after_grey"] in after["layout"]["title"]["text"]
