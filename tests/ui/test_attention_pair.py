"""The Attention page's scores before and after masking, drawn in the browser for a text the view takes
(ui.attention_pair): the chosen head's scaled scores as the trace has them (to the 4 decimals the hover shows), the
head's mask, one colour scale for both, an ✕ on a small map's masked cells and a title that says grey on a larger one;
a head picked in the view brings that head's; a longer text keeps the server's two charts. The drawing is tested in
Chromium (tests/browser/test_browser_views.py)."""
import numpy as np
import pytest

from harness.apptest import CAT, DEFAULT, EN, assert_clean, figure, open_app
from harness.apptest import attention_pair as pair
from harness.apptest import pair_drawn as drawn_of
from ui import attention_pair as pair_module
from ui import attention_view as view_module
from ui.i18n import strings

ZH = {k: v["zh"] for k, v in strings().items()}


def four(values) -> list[str]:
    """Each number as the hover shows it (plotly's and attention.js's 4 decimals: no "-0.0000")."""
    return [f"{v:.4f}".replace("-0.0000", "0.0000") for v in np.ravel(values)]




def test_scores_go_to_the_browser_to_the_four_decimals_the_hover_shows():
    rng = np.random.default_rng(0)
    scores = (rng.standard_normal((9, 7)) * rng.choice([0.001, 1, 30, 5000], (9, 7))).astype(np.float32)
    scores[0, :3] = [0.0, -0.00005, 214748.3]
    got = pair_module.decode(pair_module.encode(scores), 9, 7)
    assert four(got) == four(scores)
    assert len(pair_module.encode(scores)) == 4 * scores.size


def test_the_pair_is_the_chosen_heads_scores_and_mask_as_traced_and_a_head_picked_in_the_view_brings_its_own(
        cat_trace):
    _, _, trace = cat_trace
    at = open_app("attention", model=DEFAULT, text=CAT, layer="2", head="3")
    assert_clean(at)
    scores, mask, data = drawn_of(at)
    stages = trace.attention("dec_self", 2)
    scaled, kept = stages.head("scaled", 3).numpy(), stages.head("mask", 3).numpy().astype(bool)
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
    scores, mask, _ = drawn_of(at)
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


def test_a_text_longer_than_the_view_sends_its_pair_too_and_a_window_of_a_longer_one(cat_trace):
    """Past the view's 64 tokens the pair is drawn in the browser too (the large map is the server's chart); past
    SIDE_CAP tokens a window of it, from where the slider says."""
    from transformer_core import trace_text

    model, _, _ = cat_trace
    text = " ".join(["The cat sat on the mat."] * 11)  # 88 tokens on the default
    at = open_app("attention", model=DEFAULT, text=text, lang="en", layer="1", head="2")
    assert_clean(at)
    scores, kept, data = drawn_of(at)
    stages = trace_text(model, text)[1].attention("dec_self", 1)
    assert view_module.VIEW_TOKENS < stages.n_q == data["n_q"] and figure(at, "att_main")
    # (to 4 decimals; the page's threads sum in another order: 1e-6 apart at most)
    assert np.abs(scores - stages.head("scaled", 2).numpy()).max() <= 5e-5 + 1e-5
    assert np.array_equal(kept, stages.head("mask", 2).numpy().astype(bool))
    import ui.cache
    from transformer_core.text.tokenizer import load_encoding

    enc = load_encoding("cl100k_base")  # 300 tokens on the course's model (a context of 512): a window of 256
    text = enc.decode(enc.encode("the quick brown fox jumps over the lazy dog " * 40)[:300])
    at = open_app("attention", model="preset:course-base@cl100k_base", lang="en", text=text, tgt="short target",
                  block="enc_self")
    at.slider(key="att_window").set_value(20).run()
    assert_clean(at)
    scores, kept, data = drawn_of(at)
    [trace] = [v[1] for v, _ in ui.cache.TRACES._items.values() if v[1].src_ids.shape[-1] == 300]
    stages = trace.attention("enc_self", 0)
    assert scores.shape == (256, 256) and data["q"][0].startswith("20 ‘") and data["k"][0].startswith("20 ‘")
    assert four(scores) == four(stages.head("scaled", 0).numpy()[20:276, 20:276]) and kept.all()


def test_a_score_that_is_no_number_is_sent_as_one():
    """A broken checkpoint's scores (NaN, or past what an int32 of 4 decimals holds) reach the browser as no number,
    never as a wrong one; the colour scale spans the others."""
    scores = np.array([[1.5, np.nan], [-np.inf, 3e6]], dtype=np.float32)
    got = pair_module.decode(pair_module.encode(scores), 2, 2)
    assert got[0, 0] == 1.5 and np.isnan(got[[0, 1, 1], [1, 0, 1]]).all()
