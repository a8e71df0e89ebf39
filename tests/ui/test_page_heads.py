"""Head catalogue page through the real app: every head's label and score equal detect_heads on the learner's text,
the kind filter, opening a head on the attention page, attention sinks and removing one; bad input, Chinese."""
import numpy as np
import pytest
import torch

from harness.apptest import (
    EN,
    ENGLISH_ONLY,
    SMALL,
    array,
    assert_clean,
    figure,
    harness_language,
    messages,
    open_app,
    open_export,
    shown_head,
    shown_texts,
)
from transformer_core import load_model, prepare
from transformer_core.analysis.heads import PROBE_COUNT, detect_heads
from transformer_core.analysis.sinks import find_sinks, remove_sink

PAGE = "heads"
SCORE, LABEL = EN["hd_col_score"], EN["hd_col_label"]


def catalogue(at):
    return next(d.value for d in at.dataframe if LABEL in d.value.columns)


def sink_table(at):
    return next(d.value for d in at.dataframe if EN["sk_col_weight"] in d.value.columns)


def test_reverse_catalogue_equals_detect_heads_and_layer_1_cross_attention_is_anti_diagonal():
    at = open_app(PAGE, model="shipped:reverse", text="d a c b", tgt="= b c a", lang="en")
    assert_clean(at)
    model, _ = load_model("reverse")
    records = detect_heads(model, prepare(model, "d a c b", "= b c a"), length=4, count=PROBE_COUNT)  # the toy default
    df = catalogue(at)
    assert len(df) == 3 * 2 * 4  # three kinds of attention, 2 layers, 4 heads
    np.testing.assert_allclose(df[SCORE], [r.strength for r in records], atol=1e-6)
    np.testing.assert_allclose(df[EN["hd_pat_anti_diagonal"]].dropna(),
                               [r.scores["anti_diagonal"] for r in records if r.kind == "cross"], atol=1e-6)
    assert list(df[LABEL]) == [" + ".join(EN[f"hd_pat_{k}"] for k in r.labels) or EN["hd_pat_none"] for r in records]
    cross1 = df[(df[EN["hd_col_block"]] == EN["hd_kind_cross"]) & (df[EN["hd_col_layer"]] == 1)]
    assert set(cross1[LABEL]) == {EN["hd_pat_anti_diagonal"]}
    grid_fig = figure(at, "hd_grid_0")
    cells, heads = grid_fig["data"]  # 3 kinds × 2 layers, 4 heads
    assert len(heads["customdata"]) == 24 and cells["zmax"] == 1 and array(cells["z"]).shape == (6, 4)
    # three blocks: each row names its block (a grid of one block names it once, on its axis: the next test)
    assert grid_fig["layout"]["yaxis"]["ticktext"][-1] == EN["hd_row"].format(block=EN["hd_kind_cross"], layer=1)
    assert not grid_fig["layout"]["yaxis"].get("title", {}).get("text")
    grid = array(cells["z"])  # each cell: the head's best score (its label's when it has one)
    np.testing.assert_allclose([grid[i // 4, r.head] for i, r in enumerate(records)],
                               [r.strength if r.labels else r.best[1] for r in records], atol=1e-6)
    # each cell names one label, the pattern of the head's highest score above the threshold (as the intro says):
    # never two joined ("first+induct")
    text = [cells["text"][i // 4][r.head] for i, r in enumerate(records)]
    highest = [max((k for k, v in r.scores.items() if v is not None and v > 0.5), key=r.scores.get, default=None)
               for r in records]
    assert [x for x, h in zip(text, highest) if h] == [EN[f"hd_short_{h}"] for h in highest if h]
    assert not any("+" in x for x in text)


def test_repeat_has_induction_heads_in_layer_1_only():
    at = open_app(PAGE, model="shipped:repeat", text="d a c b g f d a c", lang="en")
    assert_clean(at)
    df = catalogue(at)
    induction = df[df[LABEL] == EN["hd_pat_induction"]]
    assert len(induction) >= 2 and set(induction[EN["hd_col_layer"]]) == {1}
    assert (df[df[EN["hd_col_layer"]] == 0][EN["hd_pat_induction"]] < 0.1).all()


def test_the_kind_filter_and_the_detector_settings():
    at = open_app(PAGE, model="shipped:reverse", text="d a c b", tgt="= b c a", lang="en")
    at.multiselect(key="hd_filter_8").set_value(["anti_diagonal"]).run()
    assert_clean(at)
    df = catalogue(at)
    assert len(df) >= 4 and set(df[LABEL]) == {EN["hd_pat_anti_diagonal"]}
    at.slider(key="hd_threshold").set_value(0.9).run()  # a stricter label: fewer heads keep one
    assert_clean(at)
    assert 1 <= len(catalogue(at)) < len(df)
    assert "{" not in " ".join(m.value for m in at.markdown)


def test_opening_a_head_switches_to_its_attention_map():
    at = open_app(PAGE, model="shipped:reverse", text="d a c b", tgt="= b c a", lang="en")
    at.selectbox(key="hd_open_24").set_value(21).run()  # cross-attention, layer 1, head 1 (forward order)
    at.button(key="hd_open_button").click().run()
    assert_clean(at)
    assert at.title[0].value == EN["nav_attention"]
    ss = at.session_state
    assert (ss["block"], ss["layer"], ss["head"], ss["mask_mode"]) == ("cross", 1, 1, "padding")
    assert shown_head(at) == 1 and at.selectbox(key="block").value == "cross"


def test_sinks_and_removing_one_equal_the_core_functions():
    at = open_app(PAGE, model="shipped:reverse", text="d a c b", tgt="= b c a", lang="en")
    assert_clean(at)
    model, _ = load_model("reverse")
    prep = prepare(model, "d a c b", "= b c a")
    sinks = find_sinks(model, prep)
    df = sink_table(at)
    assert (df[EN["hd_col_layer"]].tolist(), df[EN["hd_col_head"]].tolist()) == ([s.layer for s in sinks],
                                                                             [s.head for s in sinks])
    np.testing.assert_allclose(df[EN["sk_col_weight"]], [s.first_weight for s in sinks], atol=1e-6)
    removal = remove_sink(model, prep, sinks[0].kind, sinks[0].layer, sinks[0].head)
    np.testing.assert_allclose(array(figure(at, "sk_after")["data"][0]["z"]), removal.weights_after.numpy(), atol=1e-6)
    np.testing.assert_allclose(array(figure(at, "sk_change")["data"][0]["y"]), removal.block_change.numpy(), atol=1e-5)
    kl = next(m.value for m in at.metric if m.label == EN["sk_kl"])
    assert float(kl) == pytest.approx(removal.effect.kl, rel=1e-3, abs=1e-9)
    mean_kl = next(m.value for m in at.metric if m.label == EN["sk_kl_mean"])
    assert float(mean_kl) == pytest.approx(removal.mean_kl, rel=1e-3, abs=1e-9)
    loss = removal.effect.loss_change
    small = removal.mean_kl < 0.01 and abs(loss) < 0.01  # over the whole text, the positions the loss is taken over
    verdict = " ".join(m.value for m in at.markdown)
    assert ("parked" in verdict) == small and ("not only a parking place" in verdict) == (not small)
    assert f"over the text's {prep.src_ids.size(1)} positions" in verdict and f"{loss:+.4f} nats per token" in verdict
    assert f"KL {removal.mean_kl:.2g} nats on average ({removal.effect.kl:.2g} at the last position)" in verdict
    code = [c.value for c in open_export(at, "remove_sink").code if "remove_sink" in c.value][0]
    scope: dict = {}
    exec(code, scope)  # the page's notebook code recomputes the numbers it shows
    np.testing.assert_allclose(scope["arrays"]["weights_after"], removal.weights_after.numpy(), atol=1e-6)


def test_the_heads_snippet_recomputes_the_catalogue():
    at = open_app(PAGE, model="shipped:copy", text="d a c b", tgt="= d a c", lang="en")
    assert_clean(at)
    code = [c.value for c in open_export(at, "heads").code if "detect_heads" in c.value][0]
    assert "length=4" in code and f"count={PROBE_COUNT}" in code
    scope: dict = {}
    exec(code, scope)
    df = catalogue(at)
    np.testing.assert_allclose(scope["arrays"]["diagonal"][-8:], df[EN["hd_pat_diagonal"]].dropna(), atol=1e-6)
    assert set(df[df[EN["hd_col_block"]] == EN["hd_kind_cross"]][LABEL]) == {EN["hd_pat_diagonal"]}


def test_no_sink_above_the_threshold_still_lets_one_be_removed():
    at = open_app(PAGE, model=SMALL, lang="en")
    assert_clean(at)
    assert any(m.startswith("No head puts more than 0.50") for m in messages(at))
    assert figure(at, "sk_after") and at.selectbox(key="sk_pick_8_0")


def test_a_long_text_on_a_big_model_is_cut_to_what_the_memory_budget_allows(server_env):
    base = "preset:course-base@cl100k_base"
    assert not open_app(PAGE, model=base, lang="en").exception  # the model loads (and stays cached) first
    server_env(TRANSFORMER_EXPLORER_MEMORY_BUDGET_MB=200)  # then one task may hold 100 MB
    text = " ".join(f"w{i}" for i in range(60))  # about 120 tokens; each traced stack keeps every head's maps
    at = open_app(PAGE, model=base, text=text, tgt=text, lang="en")
    assert not at.exception and not at.error
    cuts = [m for m in messages(at) if m.startswith("Only the first")]
    assert len(cuts) == 2 and cuts[0] != cuts[1]  # the trace (one layer kept), then the catalogue and sinks (all)
    assert len(catalogue(at)) == 3 * 6 * 8


def test_bad_inputs_give_messages_not_tracebacks():
    at = open_app(PAGE, model=SMALL, lang="en")
    for text in ("", "x", "<script>alert(1)</script>", "同志们!我踩着地雷了 " * 10_000):
        at.sidebar.text_area(key="text").set_value(text).run()
        assert not at.exception, text[:20]
        assert not at.error, text[:20]
    at.sidebar.text_area(key="text").set_value("").run()
    assert EN["err.empty_input"] in messages(at)


def test_chinese_page_has_no_english_labels():
    with harness_language("zh"):
        at = open_app(PAGE, model="shipped:reverse", lang="zh")
        assert_clean(at)
        assert at.title[0].value == "注意力头目录"
        assert not [s for s in shown_texts(at) if s in ENGLISH_ONLY]


@pytest.mark.parametrize("key, text", [("kjv-tang-gpt", "In the beginning God created the heaven and the earth."),
                                       ("repeat", "d a c b g f d a c")])
def test_what_to_look_for_names_this_models_clearest_heads_and_its_induction_pair(key, text):
    at = open_app(PAGE, model=f"shipped:{key}", text=text, lang="en")
    assert_clean(at)
    df = catalogue(at)
    look = next(m for m in messages(at) if m.startswith("What to look for: the clearest head"))
    block = EN["hd_kind_gpt_self"]
    for label in set(df[LABEL]) - {EN["hd_pat_none"]}:  # the strongest head of every pattern, with its score
        best = df[df[LABEL] == label].sort_values(SCORE, ascending=False, kind="stable").iloc[0]
        name = EN["hd_head_name"].format(block=block, layer=best[EN["hd_col_layer"]], head=best[EN["hd_col_head"]])
        assert EN["look_named_head"].format(head=name, kind=label, score=best[SCORE]) in look
    ind = sorted(set(df[df[LABEL] == EN["hd_pat_induction"]][EN["hd_col_layer"]]))
    prev = sorted(set(df[df[LABEL] == EN["hd_pat_previous_token"]][EN["hd_col_layer"]]))
    pair = EN["look_heads_pair"].format(ind="layer 1", prev="layer 0")
    if key == "kjv-tang-gpt":  # measured: previous-token heads in layer 0, induction heads in layer 1
        assert ind == [1] and prev == [0] and pair in look
    else:  # repeat has induction heads but no previous-token head above the threshold on this text: no pair
        assert ind == [1] and not prev and "Induction heads sit" not in look
    model, _ = load_model(key)
    every = find_sinks(model, prepare(model, text), threshold=0.0)
    first = EN["hd_head_name"].format(block=block, layer=every[0].layer, head=every[0].head)
    look = EN["look_sinks"].format(head=first, weight=every[0].first_weight, small="0.01")
    assert (look in messages(at)) == (every[0].first_weight > 0.5)  # a head named as parking weight only past 0.5


def test_what_to_look_for_says_so_when_no_head_has_a_pattern():
    at = open_app(PAGE, model=SMALL, lang="en")
    assert_clean(at)
    at.slider(key="hd_threshold").set_value(0.95).run()
    df = catalogue(at)
    scores = df[[c for c in df.columns if c in {EN[f"hd_pat_{p}"] for p in ("previous_token", "first_token", "self",
                                                                            "induction")}]]
    assert (df[SCORE] == 0).all()
    look = next(m for m in messages(at) if m.startswith("What to look for: on this text no head"))
    assert f"({scores.max().max():.2f})" in look and "0.95" in look


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_sink_verdict_is_a_measured_claim_with_its_threshold(lang):
    """Below the threshold no head is called a sink and the page says why none is expected; the verdict for the
    picked head names its first-token weight and the threshold, and its % change leaves out emptied rows."""
    from ui.i18n import strings as all_strings

    text = "The weather was nice, so we walked to the park after lunch."
    with harness_language(lang):
        at = open_app(PAGE, model="shipped:everyday-gpt", text=text, lang=lang)
    assert not at.exception
    model, _ = load_model("everyday-gpt")
    prep = prepare(model, text)
    every = find_sinks(model, prep, threshold=0.0)
    shown = " ".join(messages(at) + [m.value for m in at.markdown])
    words = {k: v[lang] for k, v in all_strings().items()}
    if every[0].first_weight <= 0.5:
        assert words["sk_none_why"] in shown
        assert words["sk_verdict_not_sink"].split("{")[0] in shown
        assert words["sk_verdict_small"].split("}")[-1] not in shown  # "... a way for the head to do nothing."
        assert words["look_sinks"].split("{")[0] not in shown  # no head said to park weight where none is a sink
    else:
        assert words["look_sinks"].split("{")[0] in shown
    removal = remove_sink(model, prep, every[0].kind, every[0].layer, every[0].head)
    assert f"{100 * removal.largest_change('block'):.0f}%" in shown
    assert f"{every[0].first_weight:.3f}" in shown


def test_one_induction_probe_gives_one_number_on_the_card_the_heads_page_and_the_attention_page():
    """A head's induction score is measured once, on one probe (default_length random tokens written twice,
    PROBE_COUNT sequences, seed 0): the model card, the Heads page's catalogue and the Attention page's labels
    (ui.cache.induction_by_block) show the same number."""
    import json

    from transformer_core.analysis.heads import default_length, induction_scores
    from ui import cache

    model, card = load_model("everyday-gpt")
    probe = induction_scores(model)
    on_card = {(r["layer"], r["head"]): r["induction"] for r in card["heads"]}
    for (_kind, layer), scores in probe.items():
        for h, v in enumerate(scores.tolist()):
            assert v == pytest.approx(on_card[layer, h], abs=5e-4), (layer, h)
    shared = cache.induction_by_block("shipped:everyday-gpt", "cpu")
    assert all(torch.equal(shared[k], probe[k]) for k in probe)
    at = open_app(PAGE, model="shipped:everyday-gpt", text="the cat sat on the mat", lang="en")
    df = catalogue(at)
    ind = df[EN["hd_pat_induction"]].tolist()
    assert ind == pytest.approx([round(v, 4) for k in sorted(probe) for v in probe[k].tolist()], abs=1e-6)
    assert any(f"{PROBE_COUNT} random sequences of {default_length(model)} tokens" in c.value for c in at.caption)
    assert json.dumps(card["heads"])  # (the card's rows are plain numbers)


def test_the_head_grid_tiles_its_cells_and_an_unlabelled_head_shows_its_best_pattern():
    at = open_app(PAGE, model="shipped:everyday-gpt", text="The weather was nice, so we walked to the park.",
                  lang="en")
    assert_clean(at)
    grid_fig = figure(at, "hd_grid_0")
    cells, heads = grid_fig["data"]
    assert cells["type"] == "heatmap" and cells["xgap"] > 0 and cells["ygap"] > 0  # cells never overlap
    model, _ = load_model("everyday-gpt")
    # one block: its name once, on the axis, the rows "layer N" (on each row it took most of a phone's width)
    axis = grid_fig["layout"]["yaxis"]
    assert axis["title"]["text"] == EN["hd_kind_gpt_self"]
    assert axis["ticktext"] == [EN["hd_row_layer"].format(layer=n) for n in range(model.cfg.n_layers)]
    assert array(cells["z"]).shape == (model.cfg.n_layers, model.cfg.n_heads)
    df = catalogue(at)
    for text_row, z_row in zip(cells["text"], array(cells["z"])):
        for txt, z in zip(text_row, z_row):
            assert txt and txt != "·"  # every cell says something: a label, or its best pattern in brackets
            assert 0.0 <= z <= 1.0
    unlabelled = df[df[LABEL] == EN["hd_pat_none"]]
    assert (unlabelled[EN["hd_col_best_text"]] != "—").all()  # the best pattern and its score, not a lone 0.000


def test_layers_are_named_as_a_phrase_in_either_language():
    """"a previous-token head in layer 0, 1" read as broken grammar; "第 0，1 层" likewise."""
    from ui.guidance import layers_phrase

    lists = ([1], [0, 1], [0, 1, 2])
    with harness_language("en"):
        assert [layers_phrase(x) for x in lists] == ["layer 1", "layers 0 and 1", "layers 0, 1 and 2"]
    with harness_language("zh"):
        assert [layers_phrase(x) for x in lists] == ["第 1 层", "第 0 和 1 层", "第 0、1 和 2 层"]
