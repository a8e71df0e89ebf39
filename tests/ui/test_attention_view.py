"""The Attention page's head and colour scale in the browser (ui.attention_view): what the page sends the browser is
every head's weights of the chosen layer as the trace has them (to the 4 decimals shown, their log, the mask), and
nothing a pick in the browser changes; a pick the browser tells the server is taken as a link's is and recorded in
the link; a click on a cell is explained with the server's numbers. The browser's side (attention.js) is tested in
Chromium: tests/browser/test_browser_views.py."""
import base64
from contextlib import contextmanager
from unittest.mock import patch

import numpy as np

from harness.apptest import CAT, DEFAULT, array, assert_clean, attention_view, figure, open_app
from transformer_core.text.inputs import sequence_labels
from ui import attention_view as view_module
from ui.figures import LOG_FLOOR, axis_labels

TEXT = CAT


def decoded(data: dict) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per mask set: (weights to 4 decimals as integers, log codes: -1 where the browser takes the log from the 4
    decimals, mask), each (layers held, heads, Tq, Tk); the set's one mask repeated for every layer."""
    shape = (data["heads"], data["n_q"], data["n_k"])
    planes, start, out = base64.b64decode(data["weights"]), 0, []
    for bits64, size in zip(data["masks"], data["sizes"], strict=True):
        bits = np.frombuffer(base64.b64decode(bits64), dtype=np.uint8)
        mask = np.unpackbits(bits, bitorder="little")[: np.prod(shape)].reshape(shape).astype(bool)
        mask = np.broadcast_to(mask, (len(data["layers"]), *shape))
        assert int(mask.sum()) == size
        four, log = view_module.decode(planes[start:start + 2 * size], mask)
        out.append((four, log, mask))
        start += 2 * size
    assert start == len(planes)
    return out


def test_the_browser_gets_every_heads_weights_of_every_layer_and_both_masks_as_the_trace_has_them(cat_trace):
    from transformer_core import trace_text

    model, prep, trace = cat_trace
    at = open_app("attention", model=DEFAULT, text=TEXT, layer="2")
    assert_clean(at)
    data = attention_view(at)
    layers = range(model.cfg.n_layers)  # a short text: every layer (a layer switch in the browser) under both masks
    assert data["layers"] == list(layers)
    # one sequence has no padding: "padding" keeps what "none" keeps, "both" what "causal" keeps
    assert data["modes"] == {"none": 0, "causal": 1, "padding": 0, "both": 1}
    _, unmasked = trace_text(model, TEXT, masks={"dec_self": "none"})
    for (four, log, mask), traced in zip(decoded(data), (unmasked, trace), strict=True):
        w = np.stack([traced.attention("dec_self", layer).weights[0].float().numpy() for layer in layers])
        kept = np.broadcast_to(traced.attention("dec_self", 2).mask[0].numpy().astype(bool), w.shape)
        assert (data["heads"], data["n_q"], data["n_k"]) == w.shape[1:] == (model.cfg.n_heads, 13, 13)
        assert np.array_equal(mask, kept)
        # the hover's number: the weight to 4 decimals, exactly as the server writes it (f"{w:.4f}")
        assert [f"{v / 1e4:.4f}" for v in four.ravel()] == [f"{v:.4f}" for v in w.ravel()]
        # the log scale's colours: log10 of the weight (floored at 1e-6) in 255 steps over 6 decades, sent for the
        # tiny weights (to half a step), taken from the 4 decimals for the others (a tenth of a step more)
        expected = (np.log10(np.maximum(w.astype(np.float64), LOG_FLOOR)) + 6) / 6 * 255
        tiny = log >= 0
        assert tiny[mask].any() and (~tiny[mask]).any()  # both kinds are in these maps
        assert np.abs(log - expected)[tiny].max() <= 0.5 + 1e-9
        from_four = np.rint((np.log10(four[mask & ~tiny] / 1e4) + 6) / 6 * 255)  # as attention.js reads it
        assert np.abs(from_four - expected[mask & ~tiny]).max() <= 0.6
        # masked weights are not sent (0, as softmax gives them)
        assert (four[~mask] == 0).all() and (w[~kept] == 0).all()
    (_, _, none), (_, _, causal) = decoded(data)
    assert none.all() and causal.sum() < none.sum()  # "none" keeps every cell, the causal mask the lower triangle
    labels = axis_labels(sequence_labels(model, prep.src_ids[0]))
    assert data["q"] == data["k"] == labels
    heads = list(range(model.cfg.n_heads))
    assert data["shown"] == [[heads] * len(layers)] * 2
    assert [[len(t) for t in per_set] for per_set in data["titles"]] == [[len(heads)] * len(layers)] * 2
    assert data["pick"] == {"layer": 2, "mask": "both", "head": 0, "scale": "01", "serial": data["pick"]["serial"]}
    assert data["gen"] == 0
    # each layer's heads are titled by that layer's patterns (the induction heads are layer 2's)
    assert data["titles"][1][2] != data["titles"][1][0]
    # the view holds the layer, mask, head and scale: no Layer or Head box, mask or colour-scale radio, no server map
    assert not [w for w in at.selectbox if w.key in ("layer", "head")]
    assert not [r for r in at.radio if r.key in ("att_scale", "mask_mode")]
    assert not [c for c in at.get("plotly_chart") if c.proto.id.endswith("-att_main") or "-att_thumbs_" in c.proto.id]


def every_layer(model, text: str, mask: str = "both") -> np.ndarray:
    """(layers, heads, Tq, Tk) softmax weights of every layer of the text, traced alone."""
    from transformer_core import trace_text

    _, trace = trace_text(model, text, masks={"dec_self": mask})
    return np.stack([trace.attention("dec_self", layer).weights[0].float().numpy()
                     for layer in range(model.cfg.n_layers)])


def assert_as_traced(data: dict, w: np.ndarray) -> None:
    """The view's one mask set holds every layer's weights to the 4 decimals the hover shows, 0 where masked."""
    (four, _, mask), = decoded(data)
    assert four.shape == w.shape
    assert [f"{v / 1e4:.4f}" for v in four[mask]] == [f"{v:.4f}" for v in w[mask]]
    assert (w[~mask] == 0).all()


def test_a_longer_text_sends_the_chosen_layer_first_and_every_layer_once_the_view_asks(cat_trace):
    """The page's run stays light (the chosen layer's maps, the server's Layer box gone: the view's list offers every
    layer); attention.js asks for every layer under the data's key (the state "every") when a learner goes for the
    list, and that run
    sends them as the trace has them; a layer picked then leaves the data as it was (a reference on the wire)."""
    model, _, _ = cat_trace
    text = "The cat sat on the mat and looked at the dog, and the dog looked back at the cat for a very long while"
    text = text + ". " + text
    at = open_app("attention", model=DEFAULT, text=text, layer="1")
    assert_clean(at)
    data = attention_view(at)
    n = data["n_q"]
    cells = model.cfg.n_layers * model.cfg.n_heads * n * (n + 1) // 2
    assert 38 < n <= view_module.VIEW_TOKENS and not view_module.fits(cells) and view_module.every_fits(cells)
    assert data["layers"] == [1] and data["choices"] == [0, 1, 2, 3] and data["every"] and data["modes"] is None
    assert len(base64.b64decode(data["weights"])) == 2 * data["heads"] * n * (n + 1) // 2
    assert not [w for w in at.selectbox if w.key == "layer"] and at.radio(key="mask_mode").value == "both"
    w = every_layer(model, text)
    assert_as_traced(data, w[1:2])
    at.session_state[view_module.KEY] = {"every": {"key": "another text's key", "at": 1}}  # an ask of before
    at.run()
    assert attention_view(at) == data  # not this text's: not answered
    at.session_state[view_module.KEY] = {"every": {"key": data["every"], "at": 2}}  # as attention.js asks
    at.run()
    assert_clean(at)
    every = attention_view(at)
    assert every["layers"] == every["choices"] == [0, 1, 2, 3] and every["every"] == data["every"]
    assert_as_traced(every, w)
    assert [len(t) for t in every["titles"][0]] == [model.cfg.n_heads] * 4
    with state_of(at):  # the view drew layer 3 at once, then tells the server
        view_module.adopt({"layer": 3, "head": 2, "scale": "01"})
    at.run()
    assert_clean(at)
    assert (at.query_params["layer"], at.query_params["head"]) == ("3", "2")
    assert attention_view(at) == every  # every layer was in it: a reference again, no maps on the wire
    at.radio(key="mask_mode").set_value("causal").run()  # the server's radio: the same cells kept
    assert_clean(at)
    assert at.query_params["mask"] == "causal" and attention_view(at) == every  # the view's data as it was
    with state_of(at):  # no mask: more kept cells than EVERY_CELLS at this length, the server's Layer box is back
        view_module.adopt({"layer": 3, "mask": "none", "head": 2, "scale": "01"})
    at.run()
    assert_clean(at)
    unmasked = attention_view(at)
    assert unmasked["layers"] == unmasked["choices"] == [3] and unmasked["every"] is None
    assert at.selectbox(key="layer").value == 3
    assert_as_traced(unmasked, every_layer(model, text, "none")[3:4])


def test_a_short_text_of_long_words_holds_every_layer_from_the_first_run(cat_trace):
    """A text whose bytes could make more tokens than the page's trace keeps every layer for (ui.cache.trace_keep)
    but whose tokens fit LAYERS_CELLS: the view's every layer come from a trace of the weights alone."""
    from ui.cache import trace_keep

    model, _, _ = cat_trace
    text = ("Extraordinary international environmental organizations systematically investigated unprecedented "
            "agricultural transformations throughout Mediterranean communities yesterday.")
    assert trace_keep(model.cfg, text, None, (), 1) == 1  # the page's trace keeps layer 1's maps only
    at = open_app("attention", model=DEFAULT, text=text, layer="1")
    assert_clean(at)
    data = attention_view(at)
    assert 22 < data["n_q"] <= 38 and data["layers"] == [0, 1, 2, 3] and data["every"] is None
    assert not [w for w in at.selectbox if w.key == "layer"]
    assert_as_traced(data, every_layer(model, text))


def test_a_text_too_long_for_both_masks_holds_every_layer_under_its_own_and_the_mask_radio_stays():
    at = open_app("attention", model=DEFAULT, text="The cat sat on the mat and the dog sat on the rug. " * 2, layer="1")
    assert_clean(at)
    data = attention_view(at)
    assert 22 < data["n_q"] <= 38  # 4 layers x 8 heads: both masks' kept cells > LAYERS_CELLS, the causal's not
    assert data["layers"] == [0, 1, 2, 3] and data["modes"] is None and len(data["masks"]) == 1
    assert at.radio(key="mask_mode").value == "both" and not [w for w in at.selectbox if w.key == "layer"]


@contextmanager
def state_of(at):
    """st.session_state as the test's AppTest state inside ui.attention_view (its callbacks run in a script run)."""
    with patch.object(view_module.st, "session_state", at.session_state):
        yield at.session_state


def test_a_pick_the_browser_tells_is_kept_in_the_link_and_leaves_the_views_data_as_it_was(cat_trace):
    at = open_app("attention", model=DEFAULT, text=TEXT, layer="1")
    before = attention_view(at)
    with state_of(at) as ss:  # what the view's "pick" callback does with what the browser sent
        view_module.adopt({"layer": 1, "head": 5, "scale": "log"})
        assert (ss["layer"], ss["head"], ss["att_scale"]) == (1, 5, "log")
    at.run()
    assert_clean(at)
    assert (at.query_params["head"], at.query_params["scale"]) == ("5", "log")
    # the same data: Streamlit's browser is sent a reference to the view, not the maps again
    assert attention_view(at) == before
    # what depends on the head is the new head's: one query's arithmetic
    steps = next(df.value for df in at.dataframe if "softmax weight" in df.value.columns)
    _, _, trace = cat_trace
    query = at.session_state["att_query_idx"]
    np.testing.assert_allclose(steps["softmax weight"].to_numpy(dtype=float),
                               trace.attention("dec_self", 1).head("weights", 5)[query].numpy(), atol=1e-6)


def test_a_layer_the_browser_picks_is_kept_in_the_link_and_leaves_the_views_data_as_it_was(cat_trace):
    at = open_app("attention", model=DEFAULT, text=TEXT, layer="1", head="5")
    before = attention_view(at)
    with state_of(at) as ss:  # the view's list of layers: the view drew layer 3 at once, then tells the server
        view_module.adopt({"layer": 3, "head": 5, "scale": "01"})
        assert ss["layer"] == 3
    at.run()
    assert_clean(at)
    assert at.query_params["layer"] == "3"
    assert attention_view(at) == before  # every layer was in it: a reference again, no maps on the wire
    steps = next(df.value for df in at.dataframe if "softmax weight" in df.value.columns)  # layer 3's head 5
    _, _, trace = cat_trace
    np.testing.assert_allclose(steps["softmax weight"].to_numpy(dtype=float),
                               trace.attention("dec_self", 3).head("weights", 5)[at.session_state["att_query_idx"]]
                               .numpy(), atol=1e-6)


def test_a_mask_the_browser_picks_is_kept_in_the_link_and_leaves_the_views_data_as_it_was(cat_trace):
    from transformer_core import trace_text

    at = open_app("attention", model=DEFAULT, text=TEXT, layer="2", head="1")
    before = attention_view(at)
    with state_of(at) as ss:  # the view's mask radio: drawn at once from the maps it holds, then told
        view_module.adopt({"layer": 2, "mask": "none", "head": 1, "scale": "01"})
        assert ss["mask_mode"] == "none"
    at.run()
    assert_clean(at)
    assert at.query_params["mask"] == "none"
    assert attention_view(at) == before  # both masks were in it: a reference again, no maps on the wire
    model, _, _ = cat_trace
    _, unmasked = trace_text(model, TEXT, masks={"dec_self": "none"})
    steps = next(df.value for df in at.dataframe if "softmax weight" in df.value.columns)  # now unmasked
    np.testing.assert_allclose(steps["softmax weight"].to_numpy(dtype=float),
                               unmasked.attention("dec_self", 2).head("weights", 1)[at.session_state["att_query_idx"]]
                               .numpy(), atol=1e-5)  # (the page's threads sum in another order: 2e-6 apart)
    assert (steps["softmax weight"].to_numpy(dtype=float) > 0).all()


def test_cross_attention_keeps_one_mask_set_for_every_mode_as_the_model_does():
    """Cross-attention is never causal over the encoder's tokens (and one text has no padding): every mode keeps every
    key, so the view holds one set for all four and its radio switches with no new maps."""
    at = open_app("attention", model="shipped:reverse", text="b d a c")
    assert_clean(at)
    assert at.session_state["block"] == "cross"
    data = attention_view(at)
    assert data["modes"] == {"none": 0, "causal": 0, "padding": 0, "both": 0} and len(data["masks"]) == 1
    (_, _, mask), = decoded(data)
    assert mask.all() and data["layers"] == [0, 1]


def test_a_bad_pick_from_the_browser_leaves_the_head_and_scale_as_they_were():
    state = {"layer": 1, "mask_mode": "both", "head": 2, "att_scale": "row"}
    with patch.object(view_module.st, "session_state", state):
        for bad in ({"head": -1, "scale": "loud"}, {"head": "3"}, {"head": True}, {"head": 10_000}, None, "5",
                    {"head": 2.5, "scale": ["log"]}, {"layer": -2}, {"layer": "0"}, {"layer": 1e9}, {"layer": None},
                    {"mask": "all"}, {"mask": ["none"]}, {"mask": 0}, {"mask": "<script>"}):
            view_module.adopt(bad)
            assert (state["layer"], state["mask_mode"], state["head"], state["att_scale"]) == (1, "both", 2, "row"), bad


def test_the_servers_own_pick_reaches_the_view_with_a_new_serial():
    at = open_app("attention", model=DEFAULT, text=TEXT)
    first = attention_view(at)["pick"]
    at.run()
    assert attention_view(at)["pick"] == first  # nothing changed: the same data
    at.session_state["head"] = 6  # as the model view's click or a link sets it
    at.run()
    now = attention_view(at)["pick"]
    assert (now["head"], now["serial"]) == (6, first["serial"] + 1)
    with state_of(at):
        view_module.adopt({"head": 1, "scale": "01"})  # the browser's own pick: no new serial
    at.run()
    assert attention_view(at)["pick"] == now and at.query_params["head"] == "1"


def test_a_clicked_cell_is_explained_step_by_step():
    at = open_app("attention", model=DEFAULT, lang="en", text=TEXT)
    with state_of(at):  # what the view's "cell" callback stores for a click on (query 3, key 1) of head 0
        at.session_state[view_module.KEY] = {"cell": {"head": 0, "scale": "01", "q": 3, "k": 1}}
        view_module._on_cell()
    at.run()
    assert_clean(at)
    assert any(s.value.startswith("Why 3 ‘") and "1 ‘" in s.value for s in at.subheader)
    text = " ".join(m.value for m in at.markdown)
    assert "q·k =" in text and "softmax over the whole row" in text
    table = next(df.value for df in at.dataframe if "softmax weight" in df.value.columns)
    assert table["key token"].iloc[1].startswith("▶ ")


def test_a_clicked_cell_of_the_induction_head_is_split_by_where_q_and_k_came_from(cat_trace):
    from transformer_core.analysis.qk_attribution import qk_attribution

    model, _, trace = cat_trace
    at = open_app("attention", model=DEFAULT, lang="en", text=TEXT, layer="2", head="7")
    at.session_state["att_cell"] = (12, 5)  # the last " the" → " m": the induction head's copy
    at.run()
    assert_clean(at)
    assert any(s.value.startswith("Why 12 ‘") and "5 ‘" in s.value for s in at.subheader)
    a = qk_attribution(model, trace, 2, 7, 12, 5)
    np.testing.assert_allclose(array(figure(at, "att_qka")["data"][0]["z"]), a.matrix, atol=1e-5)
    said = " ".join(m.value for m in at.markdown)
    assert f"against the model's own {a.score:.4f}" in said and "the softmax ignores it" in said


def test_a_text_longer_than_the_view_takes_gets_the_servers_charts_and_boxes():
    at = open_app("attention", model=DEFAULT, text=" ".join(["The cat sat on the mat."] * 10))  # 70 tokens
    assert_clean(at)
    assert attention_view(at) is None
    assert figure(at, "att_main") and figure(at, "att_thumbs_0")
    assert at.selectbox(key="head").value == 0 and at.radio(key="att_scale").value == "01"
