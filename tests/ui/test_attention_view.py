"""The Attention page's layer, mask, head and colour scale in the browser (ui.attention_maps, ui.attention_view):
what the page sends the browser is every head's weights of a block (mask set, layer) as the trace has them (to the 4
decimals shown, their log, the mask), the chosen block and those that fit beside it first, the others when the view
asks, each once; a pick in the browser sends no maps again; a pick the browser tells the server is taken as a link's
is and recorded in the link; a click on a cell is explained with the server's numbers. The browser's side
(attention.js) is tested in Chromium: tests/browser/test_browser_views.py."""
import base64
from contextlib import contextmanager
from unittest.mock import patch

import numpy as np

from harness.apptest import (
    CAT,
    DEFAULT,
    _components,
    array,
    assert_clean,
    attention_maps,
    attention_pair,
    attention_view,
    figure,
    open_app,
)
from transformer_core.text.inputs import sequence_labels
from ui import attention_maps as maps_module
from ui import attention_view as view_module
from ui.figures import LOG_FLOOR, axis_labels

TEXT = CAT


def decoded(maps: dict) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The maps element's blocks: (set, layer) -> (weights to 4 decimals as integers, log codes: -1 where the browser
    takes the log from the 4 decimals, the set's mask), each (heads, Tq, Tk)."""
    shape = (maps["heads"], maps["n_q"], maps["n_k"])
    masks = [np.unpackbits(np.frombuffer(base64.b64decode(m), dtype=np.uint8), bitorder="little")
             [: maps["n_q"] * maps["n_k"]].reshape(shape[1:]).astype(bool) for m in maps["masks"]]
    planes, start, out = base64.b64decode(maps["weights"]), 0, {}
    for s, layer in maps["blocks"]:
        mask = np.broadcast_to(masks[s], shape)
        size = int(mask.sum())
        four, log = maps_module.decode(planes[start:start + 2 * size], mask)
        out[(s, layer)] = (four, log, mask)
        start += 2 * size
    assert start == len(planes) and len(maps["labels"]) == len(maps["blocks"])
    return out


def test_the_browser_gets_every_heads_weights_of_every_layer_and_both_masks_as_the_trace_has_them(cat_trace):
    from transformer_core import trace_text

    model, prep, trace = cat_trace
    at = open_app("attention", model=DEFAULT, text=TEXT, layer="2")
    assert_clean(at)
    data, maps = attention_view(at), attention_maps(at)
    # one sequence has no padding: "padding" keeps what "none" keeps, "both" what "causal" keeps
    assert data["modes"] == {"none": 0, "causal": 1, "padding": 0, "both": 1}
    assert data["key"] == maps["key"] and data["layers"] == model.cfg.n_layers and data["heads"] == model.cfg.n_heads
    # a short text: every layer (a layer switch in the browser) under both masks, the chosen block first, then its
    # mask's other layers from the chosen one outwards, then the other mask's
    assert maps["blocks"] == [[1, 2], [1, 1], [1, 3], [1, 0], [0, 2], [0, 1], [0, 3], [0, 0]]
    _, unmasked = trace_text(model, TEXT, masks={"dec_self": "none"})
    for (s, layer), (four, log, mask) in decoded(maps).items():
        traced = (unmasked, trace)[s].attention("dec_self", layer)
        w, kept = traced.weights[0].float().numpy(), traced.mask[0].numpy().astype(bool)
        assert (maps["heads"], maps["n_q"], maps["n_k"]) == w.shape == (model.cfg.n_heads, 13, 13)
        assert np.array_equal(mask, kept)
        # the hover's number: the weight to 4 decimals, exactly as the server writes it (f"{w:.4f}")
        assert [f"{v / 1e4:.4f}" for v in four.ravel()] == [f"{v:.4f}" for v in w.ravel()]
        # the log scale's colours: log10 of the weight (floored at 1e-6) in 255 steps over 6 decades, sent for the
        # tiny weights (to half a step), taken from the 4 decimals for the others (a tenth of a step more)
        expected = (np.log10(np.maximum(w.astype(np.float64), LOG_FLOOR)) + 6) / 6 * 255
        tiny = log >= 0
        assert np.abs(log - expected)[tiny].max(initial=0) <= 0.5 + 1e-9
        from_four = np.rint((np.log10(four[mask & ~tiny] / 1e4) + 6) / 6 * 255)  # as attention.js reads it
        assert np.abs(from_four - expected[mask & ~tiny]).max() <= 0.6
        # masked weights are not sent (0, as softmax gives them)
        assert (four[~mask] == 0).all() and (w[~kept] == 0).all()
        assert s == 1 or mask.all()  # "none" keeps every cell, the causal mask the lower triangle
    tiny = [log[mask] >= 0 for _, log, mask in decoded(maps).values()]
    assert any(t.any() for t in tiny) and any((~t).any() for t in tiny)  # both kinds are in these maps
    labels = axis_labels(sequence_labels(model, prep.src_ids[0]))
    assert data["q"] == data["k"] == labels
    heads = list(range(model.cfg.n_heads))
    assert data["shown"] is None  # every head shown small (no kind filter)
    assert [len(t) for t in maps["labels"]] == [len(heads)] * 8
    assert data["pick"] == {"layer": 2, "mask": "both", "head": 0, "scale": "01", "serial": data["pick"]["serial"]}
    assert data["gen"] == 0
    # each layer's heads are labelled by that layer's patterns (the induction heads are layer 2's)
    assert maps["labels"][0] != maps["labels"][3]
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


def assert_as_traced(maps: dict, blocks: list, w: dict) -> None:
    """The maps element sent these blocks ((set, layer)), each every head's weights to the 4 decimals the hover shows,
    0 where masked; w: set -> every layer's weights (every_layer)."""
    got = decoded(maps)
    assert list(got) == blocks
    for (s, layer), (four, _, mask) in got.items():
        assert four.shape == w[s][layer].shape
        assert [f"{v / 1e4:.4f}" for v in four[mask]] == [f"{v:.4f}" for v in w[s][layer][mask]]
        assert (w[s][layer][~mask] == 0).all()


LONG = "The cat sat on the mat and looked at the dog, and the dog looked back at the cat for a very long while"
LONG = LONG + ". " + LONG  # 53 tokens


def ask(at, key: str, blocks: list, when: int):
    """What attention.js's ask does: the maps element's state "want" (its fragment's run; here the page's)."""
    at.session_state[maps_module.MAPS_KEY] = {"want": {"key": key, "blocks": blocks, "at": when}}
    return at.run()


def test_a_longer_text_sends_the_chosen_layer_first_and_the_rest_once_the_view_asks(cat_trace):
    """The page's run stays light (the chosen layer's maps and what fits beside them; the server's Layer box and mask
    radio gone: the view's offer every layer and mask); attention.js asks for the maps it lacks (the state "want")
    when a learner goes for its list or radio, and that run sends them as the traces have them, as many as ASK_CELLS
    allows; a pick of what the browser holds leaves the maps' element as it was (a reference on the wire)."""
    model, _, _ = cat_trace
    at = open_app("attention", model=DEFAULT, text=LONG, layer="1")
    assert_clean(at)
    data, maps = attention_view(at), attention_maps(at)
    n = data["n_q"]
    assert 38 < n <= view_module.VIEW_TOKENS
    w = {1: every_layer(model, LONG), 0: every_layer(model, LONG, "none")}
    causal = model.cfg.n_heads * n * (n + 1) // 2
    assert 2 * causal <= maps_module.FIRST_CELLS < 3 * causal  # the chosen layer and the nearest
    assert_as_traced(maps, [(1, 1), (1, 0)], w)
    assert maps["answered"] is None
    assert not [w for w in at.selectbox if w.key == "layer"] and not [r for r in at.radio if r.key == "mask_mode"]
    ask(at, "another text's key", [[1, 2]], 1)
    assert attention_maps(at) == maps  # not this text's: not answered
    ask(at, data["key"], [[1, 2], [1, 3]], 2)  # the pointer on the Layer list
    assert_clean(at)
    answer = attention_maps(at)
    assert_as_traced(answer, [(1, 2), (1, 3)], w)
    assert answer["answered"] == 2 and answer["key"] == data["key"]
    at.run()
    assert attention_maps(at) == answer  # the same ask: answered once
    with state_of(at):  # the view drew layer 3 at once, then tells the server
        view_module.adopt({"layer": 3, "head": 2, "scale": "01"})
    at.run()
    assert_clean(at)
    assert (at.query_params["layer"], at.query_params["head"]) == ("3", "2")
    assert attention_maps(at) == answer  # held: a reference again, no maps on the wire
    # the pointer on the mask radio, then the Layer list under no mask: every layer asked, as many as fit in ASK_CELLS
    ask(at, data["key"], [[0, 3]], 3)
    assert_as_traced(attention_maps(at), [(0, 3)], w)
    with state_of(at):
        view_module.adopt({"layer": 3, "mask": "none", "head": 2, "scale": "01"})
    at.run()
    assert_clean(at)
    held = attention_maps(at)
    assert at.query_params["mask"] == "none" and held["blocks"] == [[0, 3]]  # nothing more sent
    unmasked = model.cfg.n_heads * n * n
    assert 3 * unmasked <= maps_module.ASK_CELLS < 4 * unmasked
    ask(at, data["key"], [[0, 2], [0, 1], [0, 0], [0, 3]], 4)
    assert_as_traced(attention_maps(at), [(0, 2), (0, 1), (0, 0)], w)
    # the server's own pick of a block it has sent: nothing new
    at.session_state["layer"] = 0
    at.run()
    assert attention_maps(at)["blocks"] == [[0, 2], [0, 1], [0, 0]]
    # asks the browser could not have made: out of range, not pairs, not numbers; answered, with nothing
    ask(at, data["key"], [[9, 0], [0, -1], "x", [True, 1], [0, 99], [0, 1.5], None], 5)
    assert_clean(at)
    empty = attention_maps(at)
    assert empty["blocks"] == [] and empty["answered"] == 5 and empty["weights"] == ""


def test_the_server_sends_a_block_it_has_not_sent_when_it_picks_it(cat_trace):
    """A link or the model view's click picks a layer the browser has no maps of: that run sends them."""
    model, _, _ = cat_trace
    at = open_app("attention", model=DEFAULT, text=LONG, layer="1")
    at.session_state["layer"] = 3
    at.run()
    assert_clean(at)
    maps = attention_maps(at)
    assert maps["blocks"][0] == [1, 3] and [1, 1] not in maps["blocks"]
    assert_as_traced(maps, [tuple(b) for b in maps["blocks"]], {1: every_layer(model, LONG)})


def test_a_short_text_of_long_words_holds_every_layer_from_the_first_run(cat_trace):
    """A text whose bytes could make more tokens than the page's trace keeps every layer for (ui.cache.trace_keep)
    but whose tokens fit FIRST_CELLS: the view's every layer come from a trace of the weights alone (the other
    mask's, from one with that mask)."""
    from ui.cache import trace_keep

    model, _, _ = cat_trace
    text = ("Extraordinary international environmental organizations systematically investigated unprecedented "
            "agricultural transformations throughout Mediterranean communities yesterday.")
    assert trace_keep(model.cfg, text, None, (), 1) == 1  # the page's trace keeps layer 1's maps only
    at = open_app("attention", model=DEFAULT, text=text, layer="1")
    assert_clean(at)
    maps = attention_maps(at)
    assert 22 < maps["n_q"] <= 38
    # every layer under the causal mask; the chosen one under no mask too, as fits in FIRST_CELLS beside them
    assert_as_traced(maps, [(1, 1), (1, 0), (1, 2), (1, 3), (0, 1)],
                     {1: every_layer(model, text), 0: every_layer(model, text, "none")})


@contextmanager
def state_of(at):
    """st.session_state as the test's AppTest state inside ui.attention_view (its callbacks run in a script run)."""
    with patch.object(view_module.st, "session_state", at.session_state):
        yield at.session_state


def test_a_pick_the_browser_tells_is_kept_in_the_link_and_leaves_the_views_data_as_it_was(cat_trace):
    at = open_app("attention", model=DEFAULT, text=TEXT, layer="1")
    before, maps = attention_view(at), attention_maps(at)
    with state_of(at) as ss:  # what the view's "pick" callback does with what the browser sent
        view_module.adopt({"layer": 1, "head": 5, "scale": "log"})
        assert (ss["layer"], ss["head"], ss["att_scale"]) == (1, 5, "log")
    at.run()
    assert_clean(at)
    assert (at.query_params["head"], at.query_params["scale"]) == ("5", "log")
    # the same data: Streamlit's browser is sent a reference to the maps, not the maps again
    assert attention_view(at) == before and attention_maps(at) == maps
    # what depends on the head is the new head's: one query's arithmetic
    steps = next(df.value for df in at.dataframe if "softmax weight" in df.value.columns)
    _, _, trace = cat_trace
    query = at.session_state["att_query_idx"]
    np.testing.assert_allclose(steps["softmax weight"].to_numpy(dtype=float),
                               trace.attention("dec_self", 1).head("weights", 5)[query].numpy(), atol=1e-6)


def test_a_layer_the_browser_picks_is_kept_in_the_link_and_leaves_the_views_data_as_it_was(cat_trace):
    at = open_app("attention", model=DEFAULT, text=TEXT, layer="1", head="5")
    before = attention_maps(at)
    with state_of(at) as ss:  # the view's list of layers: the view drew layer 3 at once, then tells the server
        view_module.adopt({"layer": 3, "head": 5, "scale": "01"})
        assert ss["layer"] == 3
    at.run()
    assert_clean(at)
    assert at.query_params["layer"] == "3"
    assert attention_maps(at) == before  # every layer was in it: a reference again, no maps on the wire
    steps = next(df.value for df in at.dataframe if "softmax weight" in df.value.columns)  # layer 3's head 5
    _, _, trace = cat_trace
    np.testing.assert_allclose(steps["softmax weight"].to_numpy(dtype=float),
                               trace.attention("dec_self", 3).head("weights", 5)[at.session_state["att_query_idx"]]
                               .numpy(), atol=1e-6)


def test_a_mask_the_browser_picks_is_kept_in_the_link_and_leaves_the_views_data_as_it_was(cat_trace):
    from transformer_core import trace_text

    at = open_app("attention", model=DEFAULT, text=TEXT, layer="2", head="1")
    before = attention_maps(at)
    with state_of(at) as ss:  # the view's mask radio: drawn at once from the maps it holds, then told
        view_module.adopt({"layer": 2, "mask": "none", "head": 1, "scale": "01"})
        assert ss["mask_mode"] == "none"
    at.run()
    assert_clean(at)
    assert at.query_params["mask"] == "none"
    assert attention_maps(at) == before  # both masks were in it: a reference again, no maps on the wire
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
    data, maps = attention_view(at), attention_maps(at)
    assert data["modes"] == {"none": 0, "causal": 0, "padding": 0, "both": 0} and len(maps["masks"]) == 1
    got = decoded(maps)
    assert list(got) == [(0, 0), (0, 1)] and all(mask.all() for _, _, mask in got.values()) and data["layers"] == 2


def test_a_maps_labels_are_sent_once():
    """The keys of a self-attention map are its queries: the view sends the labels once ("k": null, which attention.js
    reads as the queries'), and the pair of the map the view draws reads the view's; cross-attention's keys are the
    encoder's tokens and come with the view's data."""
    at = open_app("attention", model=DEFAULT, text=TEXT, layer="1")
    view, pair = (d for d in _components(at, as_sent=True) if "q" in d)
    assert view["k"] is None and len(view["q"]) == view["n_k"]
    assert pair["from_view"] == view["key"] and pair["q"] is None and pair["k"] is None  # the view's labels
    at = open_app("attention", model="shipped:reverse", text="b d a c")
    assert at.session_state["block"] == "cross"
    view, pair = (d for d in _components(at, as_sent=True) if "q" in d)
    assert len(view["k"]) == view["n_k"] and view["k"] != view["q"] and pair["from_view"] == view["key"]
    assert attention_pair(at)["k"] == view["k"]


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
    at = open_app("attention", model=DEFAULT, text=" ".join(["The cat sat on the mat."] * 11))  # 88 tokens
    assert_clean(at)
    assert attention_view(at) is None
    assert figure(at, "att_main") and figure(at, "att_thumbs_0")
    assert at.selectbox(key="head").value == 0 and at.radio(key="att_scale").value == "01"


def test_the_kind_filter_narrows_the_chosen_blocks_small_maps(cat_trace):
    """The kind filter's pills (per layer, kept across a visit to another layer): the view shows small only the heads
    of the kinds picked, for the chosen layer and mask; without a filter its data names none (every head), so a pick
    of layer or mask leaves it as it was."""
    at = open_app("attention", model=DEFAULT, text=TEXT, layer="2")
    assert attention_view(at)["shown"] is None
    at.session_state["att_kinds_dec_self_2"] = ["induction"]
    at.run()
    assert_clean(at)
    shown, maps = attention_view(at)["shown"], attention_maps(at)
    labels = maps["labels"][maps["blocks"].index([1, 2])]  # the chosen block's heads, as their thumbnails name them
    induction = [h for h, label in enumerate(labels) if "induction" in label]
    assert shown == {"set": 1, "layer": 2, "heads": induction} and 0 < len(induction) < 8
    with state_of(at):  # another layer picked in the view, then layer 2 again: its filter is still picked
        view_module.adopt({"layer": 0, "head": induction[0], "scale": "01"})
    at.run()
    assert attention_view(at)["shown"] is None
    with state_of(at):
        view_module.adopt({"layer": 2, "head": induction[0], "scale": "01"})
    at.run()
    assert_clean(at)
    assert attention_view(at)["shown"] == shown and at.session_state["att_kinds_dec_self_2"] == ["induction"]


def test_the_view_draws_a_block_only_under_the_mask_its_set_expects(cat_trace):
    """The view's maps of a mask set are drawn with that set's mask: a block traced with it is the view's; one whose
    mask is another's, or of another length (a trace cut short), is not (the server's charts draw it)."""
    _, _, trace = cat_trace  # traced with the default "both": the causal set
    stages = trace.attention("dec_self", 1)
    modes, _, masks = maps_module.mask_sets("dec_self", stages.n_q, stages.n_k)
    assert maps_module.view_knows(stages, "dec_self", "both") and maps_module.view_knows(stages, "dec_self", "causal")
    assert not maps_module.view_knows(stages, "dec_self", "none")
    assert maps_module.is_set_mask(stages, masks[modes["causal"]])
    assert not maps_module.is_set_mask(stages, masks[modes["causal"]][:-1, :-1])
