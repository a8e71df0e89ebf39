"""Model page through the real app: parameter counts, every shape in forward order, device and timing."""
import json
import re

import pytest

from harness.apptest import EN, ROOT, SMALL, harness_language, messages, open_app
from service import catalog
from transformer_core.model.device import device_name, pick_device

PAGE = "model"
BASE = "preset:course-base@cl100k_base"
VOCAB = 100277


def frame(at, column):
    return next(df.value for df in at.dataframe if column in df.value.columns)


def shape_rows(at) -> dict[str, str]:
    df = frame(at, "shape")
    return dict(zip(df["name"], df["shape"], strict=True))


def test_parameter_total_equals_sum_of_numel():
    at = open_app(PAGE, model=SMALL)
    assert not at.exception
    model = catalog.load(SMALL, "cpu")[0]
    total = sum(p.numel() for p in model.parameters())
    assert at.metric[0].value == f"{total:,}"
    counts = frame(at, "parameters")
    assert counts["parameters"].iloc[-1] == total
    assert counts["parameters"].iloc[:-1].sum() == total
    assert counts["parameters"].iloc[0] == VOCAB * 64  # token embedding; sinusoidal PE has no parameters
    assert counts["component"].tolist()[-1] == "total"
    assert any("hand count is wrong" in i.value for i in at.info)
    printed = [h.value for h in at.html]  # ui.widgets.preformatted: monospace, no syntax highlighter
    assert any("PositionWiseFFN: 64 → 256 → 64" in v for v in printed) and not at.code
    assert any("Transformer(" in v for v in printed)  # str(model) in the expander


def test_shapes_table_lists_every_hook_in_forward_order():
    at = open_app(PAGE, model=SMALL)
    rows = shape_rows(at)
    names = list(rows)
    assert names[0] == "src_ids" and rows["src_ids"] == "(1, 13)"
    assert rows["hook_logits"] == f"(1, 13, {VOCAB})" and names[-1] == "probs"
    # per-head tensors of layer 7 were not kept, but their shapes are listed
    assert rows["decoder.layers.7.self_attn.hook_weights"] == "(1, 4, 13, 13)"
    assert names.index("decoder.embed.hook_tok") < names.index("decoder.layers.0.self_attn.hook_q")


def test_course_base_shapes_and_parameters():
    at = open_app(PAGE, model=BASE)
    assert not at.exception
    rows = shape_rows(at)
    assert rows["src_ids"] == "(1, 13)" and rows["tgt_ids"] == "(1, 7)"
    assert rows["hook_logits"] == f"(1, 7, {VOCAB})"
    assert rows["decoder.layers.5.cross_attn.hook_weights"] == "(1, 8, 7, 13)"
    assert rows["encoder.hook_out"] == "(1, 13, 512)"
    model = catalog.load(BASE, "cpu")[0]
    assert at.metric[0].value == f"{sum(p.numel() for p in model.parameters()):,}"
    config = frame(at, "field")
    assert dict(zip(config["field"], config["value"], strict=True))["d_model"] == "512"


def test_device_and_measured_forward_time():
    at = open_app(PAGE, model=SMALL)
    device = next(m.value for m in at.metric if m.label == "Device")
    assert device == device_name(pick_device())  # "CPU", or the GPU's name on a CUDA machine
    at.button(key="mdl_measure").click().run()  # a model of more than 10 M parameters is timed on request
    text = next(m.value for m in at.markdown if "for one forward" in m.value)
    match = re.fullmatch(r"([\d.]+) ms for one forward of this text on (.+) \(median of 5\)\.", text)
    assert match and float(match.group(1)) > 0 and match.group(2) == device


@pytest.mark.parametrize("text", ["<|endoftext|>", "<script>alert(1)</script>",
                                  "👩‍👩‍👧‍👦 🏳️‍🌈 שלום عربي e\u0301 a\u0308\u0323", "x" * 100_000])
def test_bad_inputs_never_raise(text):
    at = open_app(PAGE, model=SMALL)
    at.sidebar.text_area(key="text").set_value(text).run()
    assert not at.exception
    n = int(re.match(r"\(1, (\d+)\)", shape_rows(at)["src_ids"]).group(1))
    assert 1 <= n <= 16  # course-gpt: max_len 16


def test_empty_text_shows_a_message():
    at = open_app(PAGE, model=SMALL)
    at.sidebar.text_area(key="text").set_value("").run()
    assert not at.exception and any("empty" in m for m in messages(at)) and not at.dataframe


def test_chinese_headings():
    at = open_app(PAGE, model=SMALL)
    at.sidebar.radio(key="lang").set_value("zh").run()  # switched last: AppTest re-formats options in English
    assert not at.exception
    assert at.title[0].value == "模型卡与参数"
    heads = [s.value for s in at.subheader]
    assert heads[:4] == ["模型卡", "模型结构", "课程里的 Transformer 与这个模型对照", "配置"]
    assert "每个中间张量的形状" in heads
    assert frame(at, "参数量")["组件"].iloc[-1] == "总计"


@pytest.mark.parametrize("model, sublayers", [("preset:course-base@cl100k_base", 6 * 2 + 6 * 3),
                                              ("shipped:everyday-gpt", 4 * 2)])
def test_the_whole_model_picture_draws_a_residual_connection_round_every_sublayer(model, sublayers):
    """One dotted path per sublayer shown: it leaves the sublayer's input and enters its Add & Norm box from the top
    (course-base shows all 6 layers of each stack: 2 sublayers per encoder layer, 3 per decoder layer)."""
    from harness.apptest import figure

    at = open_app(None, model=model, lang="en")
    assert not at.exception
    fig = figure(at, "model_map_0")
    residual = next(tr for tr in fig["data"] if tr.get("name") == "residual")
    paths = [[]]
    for x, y in zip(residual["x"], residual["y"]):
        if x is None:
            paths.append([])
        else:
            paths[-1].append((x, y))
    paths = [p for p in paths if p]
    assert len(paths) == sublayers
    shapes = fig["layout"]["shapes"]
    for path in paths:  # each ends on the top edge of a box: the Add & Norm it feeds
        (x, y) = path[-1]
        assert any(abs(s["y0"] - y) < 1e-6 and s["x0"] < x < s["x1"] for s in shapes), path
        assert path[0][1] >= y - 0.2  # it starts beside or above the sublayer, not from another row


def _card_with_a_kept_step():
    from ui.cards import show_card

    show_card({"steps": 12000, "tokens_seen": 98_304_000, "train_seconds": 291.5, "device": "cuda (NVIDIA H100)",
               "best_step": 9500, "train_config": {"eval_interval": 500}}, "gpu-card")


def test_a_card_whose_weights_are_an_earlier_step_s_says_which_and_names_the_gpu():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_card_with_a_kept_step, default_timeout=30).run()
    assert not at.exception
    assert any("12,000 training steps, 98,304,000 tokens seen, 291.5 s on cuda (NVIDIA H100)" in m.value
               for m in at.markdown)
    assert [c.value for c in at.caption if "step 9,500" in c.value] == [
        "Its weights are those of step 9,500: the evaluation with the lowest held-out loss (checked every 500 steps)."]


def _card_of_the_default():
    import json

    from transformer_core.train.build import DEFAULT_MODEL, OUT
    from ui.cards import show_card

    show_card(json.loads((OUT / DEFAULT_MODEL / "card.json").read_text(encoding="utf-8")), "default-card")


def test_the_default_s_card_names_every_corpus_as_a_learner_reads_it():
    from streamlit.testing.v1 import AppTest

    from transformer_core.train.build import DEFAULT_MODEL, OUT
    from ui.cards import corpus_label

    at = AppTest.from_function(_card_of_the_default, default_timeout=30).run()
    assert not at.exception
    keys = json.loads((OUT / DEFAULT_MODEL / "card.json").read_text(encoding="utf-8"))["by_corpus"]
    per_corpus = next(df.value for df in at.dataframe if "below bigram" in df.value.columns)
    names = per_corpus.iloc[:, 0].tolist()
    assert names == [corpus_label(k) for k in keys] and not set(names) & set(keys)  # "Brown Corpus …", never "brown"


def test_the_card_s_heads_table_labels_by_the_pages_rule_and_names_its_scores():
    """Before: everyday-gpt's card showed "—" for the layer-2 heads with induction 0.96-0.99 that the Attention
    page calls induction, beside a column "score" that did not say which. The table's kind is the rule's label of
    the scores it shows (each in its own column), and the Attention page labels those heads the same."""
    from harness.apptest import EN
    from transformer_core.analysis.heads import label

    at = open_app(PAGE, model="shipped:everyday-gpt", lang="en")
    assert not at.exception and not at.error
    df = frame(at, EN["card_head_kind"])
    kinds = ("previous_token", "first_token", "self", "induction")
    assert {EN["card_head_score"], *(EN[f"head_kind_{k}"] for k in kinds)} <= set(df.columns)
    assert EN["card_head_score"] == "highest score" and any(EN["card_heads_note"] == c.value for c in at.caption)
    for _, row in df.iterrows():
        scores = {k: float(row[EN[f"head_kind_{k}"]]) for k in kinds}
        assert row[EN["card_head_kind"]] == EN[f"head_kind_{label(scores)}"], row.to_dict()
        assert float(row[EN["card_head_score"]]) == max(scores.values())
    induction = df[df[EN["head_kind_induction"]] > 0.9]
    assert len(induction) >= 4 and set(induction[EN["card_head_kind"]]) == {EN["head_kind_induction"]}
    # a text with a repeat, where the heads do what the probe measures (on one that repeats nothing they attend to
    # the first token, and the page labels them by what they do there)
    text = "The cat sat on the mat. The cat sat on the mat."
    att = open_app("attention", model="shipped:everyday-gpt", text=text, layer="2", lang="en")
    table = next(d.value for d in att.dataframe if EN["card_head_kind"] in d.value.columns)
    for h in induction[EN["hd_col_head"]]:
        assert table.set_index(EN["att_head"]).loc[int(h), EN["card_head_kind"]] == EN["head_kind_induction"]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_name_movers_card_says_which_name_its_top_head_reads_and_what_it_writes(lang):
    """The card's top head is not called a name mover when it reads the repeated name: the Model page says which name
    it reads at the answer and what it writes into that name's logit itself, beside what its knock-out removes."""
    if not catalog.entry("shipped:name-movers"):
        pytest.skip("the name-movers model is not shipped in this checkout")
    strings = json.loads((ROOT / "assets" / "strings" / "model.json").read_text(encoding="utf-8"))
    card = json.loads((ROOT / "assets" / "models" / "name-movers" / "card.json").read_text(encoding="utf-8"))
    with harness_language(lang):
        at = open_app(PAGE, model="shipped:name-movers", lang=lang)
    assert not at.exception
    captions = [c.value for c in at.caption]
    for key in ("en", "zh"):
        heads = card["circuit"]["by_language"][key]["heads"]
        layer, head = heads["top"]
        which = max(("answer", "repeated"), key=lambda n: heads[f"to_{n}"][layer][head])
        said = strings["card_circuit_reads"][lang].format(
            lang=strings[f"card_lang_{key}"][lang], layer=layer, head=head, share=f"{heads['top_removes']:.0%}",
            change=heads["top_change"], which=strings[f"card_circuit_which_{which}"][lang],
            att=heads[f"to_{which}"][layer][head], direct=heads[f"writes_{which}"][layer][head])
        assert said in captions, (said, captions)
    kinds = {row["kind"] for row in card["heads"]}
    assert "name_mover" not in kinds or all(  # a head labelled a name mover reads the right name in both languages
        card["circuit"]["by_language"][k]["heads"]["to_answer"][r["layer"]][r["head"]]
        >= card["circuit"]["by_language"][k]["heads"]["to_repeated"][r["layer"]][r["head"]]
        for r in card["heads"] if r["kind"] == "name_mover" for k in ("en", "zh"))


def test_a_circuit_card_measured_before_the_readings_gets_the_short_sentence():
    from ui.cards import top_head_text

    strings = json.loads((ROOT / "assets" / "strings" / "model.json").read_text(encoding="utf-8"))
    heads = {"top": [1, 3], "top_removes": 0.52}
    assert top_head_text(heads, "English") == strings["card_circuit_top"]["en"].format(
        lang="English", layer=1, head=3, share="52%")
    heads |= {"to_answer": [[0.0] * 4, [0.0, 0.0, 0.0, 0.7]], "to_repeated": [[0.0] * 4, [0.0] * 4],
              "writes_answer": [[0.0] * 4, [0.0, 0.0, 0.0, 2.5]], "top_change": -4.0}  # no writes_repeated: still fine
    said = top_head_text(heads, "English")
    assert "reads the right name (attention 0.70) and writes +2.50" in said and "(-4.00)" in said


def test_the_default_s_card_gives_each_figure_once_and_names_the_token_it_measured():
    """The card said "99.8% of Chinese characters whole" in its summary and "100% of 524 Chinese characters" below
    (rounded to a whole percent), and "→ “ mat”: rank 1, p 0.12" where 0.12 is its first token ‘␣m’'s."""
    from streamlit.testing.v1 import AppTest

    from transformer_core.train.build import DEFAULT_MODEL, OUT

    card = json.loads((OUT / DEFAULT_MODEL / "card.json").read_text(encoding="utf-8"))
    at = AppTest.from_function(_card_of_the_default, default_timeout=30).run()
    assert not at.exception
    shown = " ".join([m.value for m in at.markdown] + [c.value for c in at.caption])
    zh = card["everyday"]["vocabulary"]["chinese_characters_whole"]
    assert f"{zh:.1%}" in shown and f"{zh:.1%}" in card["summary"]["en"]
    cat = card["everyday"]["copy"]["cat"]
    assert f"its first token ‘␣m’ is rank {cat['rank']}, p {cat['p']:.2f}" in shown


def test_the_default_s_card_says_how_often_it_copies_a_word_into_a_short_sentence_of_a_learner_s_own():
    """The everyday sentences written twice are copied 85% of the time, but a word put in "The dog sat on the ___."
    written twice only 17%: the card's table of such texts (its words count, top-1 and median p) and why it matters
    in its help."""
    from streamlit.testing.v1 import AppTest

    from transformer_core.train.build import DEFAULT_MODEL, OUT

    card = json.loads((OUT / DEFAULT_MODEL / "card.json").read_text(encoding="utf-8"))
    slots = card["everyday"]["slots"]
    at = AppTest.from_function(_card_of_the_default, default_timeout=30).run()
    assert not at.exception
    heading = next(m for m in at.markdown if m.value == f"**{EN['card_slots']}**")
    assert "Try it on the Logits page" in heading.help and f"{slots['sentence']['words']} lower-case" in heading.help
    table = next(d.value for d in at.dataframe if EN["card_slots_frame"] in d.value.columns)
    assert list(table[EN["card_slots_frame"]]) == [f["frame"].replace("{}", "___") for f in slots.values()]
    assert list(table[EN["card_col_top1"]]) == [f"{f['top1']:.0%}" for f in slots.values()]
    assert list(table[EN["card_copy_median"]]) == [f["median_p"] for f in slots.values()]
    assert slots["sentence"]["top1"] < 0.5 < slots["list"]["top1"]


def _every_shipped_card():
    import json

    from transformer_core.train.build import OUT
    from ui.cards import show_card

    for folder in sorted(OUT.iterdir()):
        if (folder / "card.json").is_file():
            show_card(json.loads((folder / "card.json").read_text(encoding="utf-8")), folder.name)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_shipped_card_names_its_corpus_without_placeholders_or_module_paths(lang):
    """The task models' cards said "Trained on generated by rule (transformer_core.train.tasks) — (—); sha256 —…":
    a module path and placeholders where a program writes the examples. Each corpus line now says what it is."""
    from streamlit.testing.v1 import AppTest

    with harness_language(lang):
        at = AppTest.from_function(_every_shipped_card, default_timeout=60)
        at.session_state["lang"] = lang
        at.run()
    assert not at.exception
    strings = json.loads((ROOT / "assets" / "strings" / "model.json").read_text(encoding="utf-8"))
    generated = strings["card_corpus_generated"][lang]
    lines = [m.value for m in at.markdown if m.value.startswith((strings["card_corpus"][lang][:4], generated))]
    assert len(lines) >= len(list((ROOT / "assets" / "models").glob("*/card.json")))
    assert sum(line.startswith(generated) for line in lines) >= 8  # the task models and the two demos
    for line in lines:
        assert "transformer_core" not in line and "—" not in line and "generated by rule" not in line, line
    ioi = next(line for line in lines if "26 + 20" in line)
    assert "126 + 93" in ioi and "5 + 4" in ioi
    # a downloaded corpus's licence in the learner's language (中文 read "public domain (copyright expired; 1611)")
    licensed = [line for line in lines if not line.startswith(generated)]
    assert len(licensed) >= 12  # the default's and the modern model's five corpora, the KJV-Tang model's two
    english = ("public domain", "Copyright", "which ships", "redistribution", "Users may")
    assert all(any(w in line for w in english) != (lang == "zh") for line in licensed), licensed


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_name_movers_heads_table_says_what_its_figures_are(lang):
    """The name-mover demo's heads table showed its knock-out shares (some negative) as "highest score" under the
    caption written for attention weights (0 to 1, a kind above 0.5). Its shares are percentages of the right name's
    lead, under their own heading and caption."""
    if not catalog.entry("shipped:name-movers"):
        pytest.skip("the name-movers model is not shipped in this checkout")
    card = json.loads((ROOT / "assets" / "models" / "name-movers" / "card.json").read_text(encoding="utf-8"))
    with harness_language(lang):
        at = open_app(PAGE, model="shipped:name-movers", lang=lang)
    assert not at.exception
    from ui.i18n import strings as all_strings

    words = {k: v[lang] for k, v in all_strings().items()}
    assert any(m.value == f"**{words['card_knocks']}**" for m in at.markdown)
    assert not any(m.value == f"**{words['card_heads']}**" for m in at.markdown)
    captions = [c.value for c in at.caption]
    assert words["card_heads_note"] not in captions
    assert any(c.startswith(words["card_knock_note"][:20]) and "20%" in c and "0.25" in c for c in captions)
    df = next(d.value for d in at.dataframe if words["card_knock_kind"] in d.value.columns)
    top = max(card["heads"], key=lambda h: h["score"])
    row = df[(df[words["col_layer"]] == top["layer"]) & (df[words["hd_col_head"]] == top["head"])].iloc[0]
    assert row[words["card_knock_score"]] == pytest.approx(top["score"] * 100)
    assert row[words["head_kind_removes_en"]] == pytest.approx(top["removes_en"] * 100)


def test_the_default_s_headline_figures_say_which_corpus_they_measure():
    """The card's headline "held-out loss 4.558" (help: "text the model never trained on") and "35% below the bigram"
    are the Brown Corpus's row of the table below alone; the card now says so."""
    from streamlit.testing.v1 import AppTest

    from transformer_core.train.build import DEFAULT_MODEL, OUT
    from ui.cards import corpus_label

    card = json.loads((OUT / DEFAULT_MODEL / "card.json").read_text(encoding="utf-8"))
    first, figures = next(iter(card["by_corpus"].items()))
    assert figures["heldout_loss"] == card["heldout_loss"]
    at = AppTest.from_function(_card_of_the_default, default_timeout=30).run()
    assert not at.exception
    assert f"{card['heldout_loss']:.3f}" in [m.value for m in at.metric]
    assert any(corpus_label(first) in c.value and "each corpus" in c.value for c in at.caption)


def test_a_bigram_baseline_worse_than_the_unigram_one_is_said_with_the_unigram_gain():
    """The default's bigram baseline (7.006) is worse than its unigram one (6.982): "35% below the bigram baseline"
    alone flattered the model. The caption adds the gain over the unigram baseline, recomputed here."""
    from streamlit.testing.v1 import AppTest

    from transformer_core.train.build import DEFAULT_MODEL, OUT

    card = json.loads((OUT / DEFAULT_MODEL / "card.json").read_text(encoding="utf-8"))
    assert card["bigram_loss"] > card["unigram_loss"]  # the case
    at = AppTest.from_function(_card_of_the_default, default_timeout=30).run()
    gain = (1 - card["heldout_loss"] / card["unigram_loss"]) * 100
    assert any(EN["card_vs_unigram_too"].format(pct=gain) in c.value for c in at.caption)
