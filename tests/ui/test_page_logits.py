"""Logits page: the shown distribution (sums, entropy, top-k), bad sampling settings, step-by-step generation."""
import json
import math

import pytest
import torch

from harness.apptest import (
    EN,
    ENGLISH_ONLY,
    SMALL,
    attention_pair,
    harness_language,
    messages,
    metric,
    open_app,
    page_file,
    shown_texts,
)
from transformer_core.analysis.next_token import Sampling, distribution, generate, next_token_probs
from transformer_core.errors import SamplingError
from transformer_core.text.inputs import trace_text
from transformer_core.text.tokenizer import tokens_of
from ui import own_words
from ui.figures import axis_labels, visible


@pytest.fixture(autouse=True)
def server_side_distribution(monkeypatch):
    """The distribution as the server draws it (a fragment): every vocabulary larger than the browser takes. A
    smaller one goes to the browser instead (ui.sampling_view, tests/ui/test_sampling_view.py)."""
    monkeypatch.setattr("ui.sampling_view.BROWSER_VOCAB", 0)


SENT_1 = "同志们!我踩着地雷了"  # 13 cl100k tokens; the small preset's max_len is 16


def probs_column(at):
    """The top-k table's 'probability' column as floats."""
    frames = [d.value for d in at.dataframe if EN["col_prob"] in d.value.columns]
    assert frames, "no top-k table shown"
    return [float(x) for x in frames[0][EN["col_prob"]]]


def top_table(at):
    return next(d.value for d in at.dataframe if EN["col_prob_raw"] in d.value.columns)


def shapes_shown(at) -> dict[str, str]:
    """name -> shape string from the model page's table of every intermediate."""
    df = next(d.value for d in at.dataframe if EN["col_shape"] in d.value.columns)
    return dict(zip(df[EN["col_name"]], df[EN["col_shape"]]))


# --- transformer_core.next_token ----------------------------------------------------------------------------


def test_distribution_sums_to_one_and_matches_plain_softmax():
    logits = torch.randn(100_277, generator=torch.Generator().manual_seed(0)) * 3
    d = distribution(logits, Sampling(), top=10)
    assert d.total == pytest.approx(1.0, abs=1e-9)
    assert d.kept == 100_277
    assert d.probs == pytest.approx(d.raw, rel=1e-6)
    assert d.ids == torch.topk(logits, 10).indices.tolist()
    assert d.probs == sorted(d.probs, reverse=True)


def test_banned_ids_get_zero_probability_and_are_never_generated(tiny_gpt):
    logits = torch.tensor([5.0, 1.0, 0.5, -1.0])
    assert next_token_probs(logits, Sampling(banned=(0,)))[0] == 0
    d = distribution(logits, Sampling(banned=(0,)), top=4)
    assert d.ids[0] == 0 and d.probs[0] == 0 and d.raw[0] > 0.9 and d.kept == 3  # the plain softmax keeps it
    assert math.isclose(sum(d.probs), 1.0, rel_tol=1e-9)
    prompt = [1, 2, 3]
    greedy = generate(tiny_gpt, prompt, 6, stop_at_end=False)
    banned = tuple(sorted(set(greedy)))  # ban every token the greedy run chose: none may come back
    again = generate(tiny_gpt, prompt, 6, Sampling(greedy=True, banned=banned), stop_at_end=False)
    assert len(again) == 6 and not set(again) & set(banned)
    sampled = generate(tiny_gpt, prompt, 6, Sampling(temperature=2.0, banned=banned), seed=3, stop_at_end=False)
    assert not set(sampled) & set(banned)


def test_the_page_rules_out_unk_for_a_model_that_has_one():
    from transformer_core import load_model
    from transformer_core.text.inputs import unknown_id

    at = open_app("logits", model="shipped:dates-zh", text="23 November 2026", tgt="=", lang="en")
    assert not at.exception
    model, _ = load_model("dates-zh")
    unk = unknown_id(model)
    assert unk is not None and at.checkbox(key="log_no_unk").value is True
    df = top_table(at)
    shown = {tok: p for tok, p in zip(df[EN["col_token"]], df[EN["col_prob"]])}
    assert shown.get("⟨unk⟩", 0.0) == 0.0  # in the table only if it is among the top logits, with probability 0
    at.button(key="log_five").click().run()
    assert unk not in at.session_state["gen_ids"]
    at.checkbox(key="log_no_unk").uncheck().run()
    assert not at.exception
    plain = open_app("logits", model="shipped:everyday-gpt", text="Hello", lang="en")
    assert not plain.get("checkbox") or all(c.key != "log_no_unk" for c in plain.checkbox)  # no ⟨unk⟩: no option


def test_distribution_entropy_grows_with_temperature():
    logits = torch.randn(1000, generator=torch.Generator().manual_seed(1)) * 2
    entropies = [distribution(logits, Sampling(temperature=t)).entropy for t in (0.25, 0.5, 1.0, 2.0, 4.0)]
    assert entropies == sorted(entropies) and entropies[0] < entropies[-1] - 1
    assert entropies[-1] <= math.log2(1000)


def test_distribution_top_k_keeps_k_tokens_summing_to_one():
    logits = torch.randn(5000, generator=torch.Generator().manual_seed(2))
    d = distribution(logits, Sampling(top_k=5), top=10)
    assert d.kept == 5
    assert sum(d.probs[:5]) == pytest.approx(1.0, abs=1e-12) and d.probs[5:] == [0.0] * 5


def test_distribution_rejects_impossible_settings():
    with pytest.raises(SamplingError, match="temperature"):
        distribution(torch.zeros(10), Sampling(temperature=0.0))
    with pytest.raises(SamplingError, match="(?i)top-p"):
        distribution(torch.zeros(10), Sampling(top_p=0.0))


def test_generate_greedy_appends_the_argmax_of_the_traced_last_position(tiny_gpt):
    _, trace = trace_text(tiny_gpt, SENT_1)
    new = generate(tiny_gpt, trace.decoder_ids.tolist(), 1, Sampling(greedy=True))
    assert new == [int(trace.logits[0, -1].argmax())]


def test_generate_seeds_each_step_so_five_at_once_equals_five_single_steps(tiny_gpt):
    _, trace = trace_text(tiny_gpt, SENT_1)
    dec, s = trace.decoder_ids.tolist(), Sampling(temperature=1.5)
    at_once = generate(tiny_gpt, dec, 5, s, seed=7)
    one_by_one = []
    for _ in range(5):
        one_by_one += generate(tiny_gpt, dec + one_by_one, 1, s, seed=7)
    assert at_once == one_by_one and len(at_once) == 5
    assert generate(tiny_gpt, dec, 5, s, seed=7) == at_once


def test_generate_never_passes_max_len(tiny_gpt):
    dec = [0] * (tiny_gpt.cfg.max_len - 2)
    assert len(generate(tiny_gpt, dec, 5, Sampling(greedy=True))) == 2
    assert generate(tiny_gpt, dec + [0, 0], 5, Sampling(greedy=True)) == []


def test_generate_extends_the_target_of_an_encoder_decoder(tiny):
    prep, trace = trace_text(tiny, SENT_1, "我现在开始排雷。")
    assert trace.decoder_ids.tolist() == prep.tgt_ids[0].tolist()
    new = generate(tiny, prep.tgt_ids[0].tolist(), 1, Sampling(greedy=True), src=prep.src_ids[0].tolist())
    assert new == [int(trace.logits[0, -1].argmax())]


def test_tokens_of_groups_partial_bytes_and_marks_ids_without_a_token():
    toks = tokens_of([42016, 164, 116, 102, 100256], "cl100k_base")
    assert [t.text for t in toks] == ["同", "<0xE8>", "<0xB8>", "<0xA9>", "<100256>"]
    assert [t.partial for t in toks] == [False, True, True, True, False]
    assert toks[1].group == toks[2].group == toks[3].group != toks[0].group


# --- the page (AppTest, small decoder-only preset) ----------------------------------------------------------


@pytest.fixture()
def page():
    at = open_app("logits", model=SMALL, text=SENT_1)
    assert not at.exception
    return at


def test_page_shows_probabilities_summing_to_one(page):
    assert metric(page, EN["log_sum"]) == "1.000000"
    assert metric(page, EN["log_kept"]) == "100277"
    probs = probs_column(page)
    assert len(probs) == 10 and probs == sorted(probs, reverse=True) and 0 < probs[0] < 1
    assert float(metric(page, EN["log_entropy"])) > 15  # random weights: nearly log2(100277) = 16.6 bits
    assert EN["log_random_note"] in messages(page)


def test_chart_and_table_show_the_same_whitespace_visible_tokens_with_readable_numbers(page):
    chart = json.loads(next(c for c in page.get("plotly_chart") if c.proto.id.endswith("-log_probs")).proto.spec)
    table = top_table(page)
    assert [y.split(" ", 1)[1][1:-1] for y in chart["data"][0]["y"]] == list(table[EN["col_token"]])
    assert not any(ch.isspace() for tok in table[EN["col_token"]] for ch in tok)
    axis = chart["layout"]["xaxis"]  # percentages, not SI prefixes ("20μ"), and a named axis
    assert axis["tickformat"] == "~%" and axis["title"]["text"] == EN["col_prob"]
    shown = json.loads(next(d for d in page.dataframe if EN["col_prob_raw"] in d.value.columns).proto.columns)
    assert {c: v["type_config"]["format"] for c, v in shown.items()} == {
        EN["col_logit"]: "%.4f", EN["col_prob"]: "%.4g", EN["col_prob_raw"]: "%.4g"}


def test_visible_marks_spaces_tabs_and_newlines():
    assert visible("\t  a\r\n") == "⇥␣␣a␍⏎"
    # characters that draw nothing are named (the Surprise page said "most surprised by ‘ 3/3’")
    assert visible("a\u200bb\ufeff1/3") == "a⟨U+200B⟩b⟨U+FEFF⟩1/3" and visible("\x00") == "⟨U+0000⟩"
    # spaces other than ␣ are named too (a note drew U+2000 as a blank), but the no-break space a piece's label holds
    # ("踩 1/3"), and they are kept as they are in running text
    assert visible("\u2000a\u3000\u00a01/3") == "⟨U+2000⟩a⟨U+3000⟩\u00a01/3"
    assert visible("a\u3000b", spaces=False) == "a\u3000b"
    # a no-break space of the text is named (pasted from a web page it showed as a blank beside ‘␣’), and so is one a
    # piece stands for ("\u00a0" is two bytes: its first piece's label is the character, a no-break space, "1/2")
    assert visible("\u00a0") == "⟨U+00A0⟩" and visible("a\u00a0b") == "a⟨U+00A0⟩b"
    assert visible("\u00a0\u00a01/2") == "⟨U+00A0⟩\u00a01/2" and visible("a\u00a0b", spaces=False) == "a\u00a0b"
    assert visible("今天 ok é") == "今天␣ok␣é"  # printable text as it is
    assert axis_labels(["\t x", "y"]) == ["0 ‘⇥␣x’", "1 ‘y’"]


def test_counts_are_singular_for_one_token():
    at = open_app("logits", model=SMALL, text="hello", lang="en")
    assert "Decoder-side sequence: 1 token" in [m.value for m in at.markdown]
    at.button(key="log_next").click().run()
    assert "Decoder-side sequence: 2 tokens · the last one generated here" in [m.value for m in at.markdown]
    with harness_language("zh"):
        at = open_app("logits", model=SMALL, text="hello", lang="zh")
        assert "解码器一侧的序列：1 个词元" in [m.value for m in at.markdown]
        assert not [s for s in shown_texts(at) if s in ENGLISH_ONLY]


def test_a_number_out_of_range_is_answered_in_chinese_with_the_range():
    """Streamlit says "Number is outside the allowed range. Please enter a value between 1 and 100." in English on
    its box's error mark; in 中文 CSS writes ours, with the range of the box the pointer is on (the browser check:
    tests/browser/test_browser_tools.py)."""
    with harness_language("zh"):
        at = open_app("logits", model=SMALL, text="hello", lang="zh")
    css = "".join(h.value for h in at.html)
    for key, lo, hi in (("log_show", 1, 100), ("log_seed", 0, 2**31 - 1)):
        where = f"body:has(.st-key-{key} .stTooltipErrorHoverTarget:hover) {own_words.OUT_OF_RANGE}"
        words = own_words.css_string(f"超出允许的范围：请输入 {lo} 到 {hi} 之间的数。")
        assert f"{where}{{font-size:0}}{where}::after{{content:{words};" in css
    assert f"{own_words.OUT_OF_RANGE}::after{{content:{own_words.css_string('超出允许的范围。')};" in css
    assert "content:" not in "".join(h.value for h in open_app("logits", model=SMALL, text="hello").html)


def test_higher_temperature_shows_higher_entropy(page):
    entropies = []
    for temperature in (0.5, 1.0, 2.0):
        page.slider(key="log_T").set_value(temperature).run()
        entropies.append(float(metric(page, EN["log_entropy"])))
        assert metric(page, EN["log_sum"]) == "1.000000"
    assert entropies[0] < entropies[1] < entropies[2]


def test_top_k_five_keeps_five_tokens(page):
    page.number_input(key="log_topk").set_value(5).run()
    assert metric(page, EN["log_kept"]) == "5"
    probs = probs_column(page)
    assert sum(p > 0 for p in probs) == 5 and probs[5:] == [0.0] * 5
    assert sum(probs) == pytest.approx(1.0, abs=1e-6)


def test_top_p_keeps_fewer_tokens(page):
    page.slider(key="log_T").set_value(0.1).run()
    page.slider(key="log_topp").set_value(0.5).run()
    kept = int(metric(page, EN["log_kept"]))
    assert 1 <= kept < 100277
    assert metric(page, EN["log_sum"]) == "1.000000"


def test_sampling_sliders_only_offer_valid_values(page):
    """Temperature 0 and top-p 0 are impossible settings: the sliders start just above them."""
    assert page.slider(key="log_T").min == 0.05 and page.slider(key="log_topp").min == 0.01
    page.slider(key="log_T").set_value(0.05).run()
    page.slider(key="log_topp").set_value(0.01).run()
    assert not page.exception and not [m for m in messages(page) if m.startswith(EN["log_bad_sampling"])]
    assert int(metric(page, EN["log_kept"])) == 1  # the smallest top-p keeps the top token only


def test_greedy_append_adds_the_top_token_and_every_page_sees_it(page):
    top_id = int(top_table(page)[EN["col_id"]].iloc[0])
    page.button(key="log_next").click().run()
    assert not page.exception
    assert len(page.session_state["gen_ids"]) == 1
    assert page.session_state["gen_ids"][0] == top_id  # identity vocabulary: model id == tokenizer id
    assert page.slider(key="log_pos_14").value == 13  # the grown sequence opens on its new last position
    assert EN["log_gen_count"].format(n=1) in [c.value for c in page.sidebar.caption]
    page.switch_page(page_file("model")).run()
    assert not page.exception and shapes_shown(page)["src_ids"] == "(1, 14)"
    assert shapes_shown(page)["hook_logits"] == "(1, 14, 100277)"
    page.switch_page(page_file("attention")).run()
    assert not page.exception
    rows = attention_pair(page)["q"]  # the scores before and after masking (drawn in the browser): a 14th token
    assert len(rows) == 14 and rows[13].startswith("13 ‘")
    page.switch_page(page_file("tokenizer")).run()
    assert not page.exception
    page.switch_page(page_file("logits")).run()
    page.button(key="log_undo").click().run()
    assert page.session_state["gen_ids"] == []
    page.switch_page(page_file("model")).run()
    assert shapes_shown(page)["src_ids"] == "(1, 13)"


def test_undo_removes_the_last_token(page):
    page.button(key="log_next").click().run()
    page.button(key="log_next").click().run()
    two = list(page.session_state["gen_ids"])
    page.button(key="log_undo").click().run()
    assert page.session_state["gen_ids"] == two[:1]
    assert page.slider(key="log_pos_14").max == 13
    page.button(key="log_undo").click().run()
    assert page.session_state["gen_ids"] == [] and page.button(key="log_undo").disabled


def test_append_five_stops_at_max_len_with_a_message(page):
    page.button(key="log_five").click().run()
    assert not page.exception
    assert len(page.session_state["gen_ids"]) == 3  # 13 tokens + 3 = max_len 16
    assert any(EN["log_full"].format(n=16) in m for m in messages(page))  # the context it fills, and what to do
    assert page.button(key="log_next").disabled and page.button(key="log_five").disabled


def test_sampled_generation_is_reproducible_with_the_seed():
    runs = []
    for _ in range(2):
        at = open_app("logits", model=SMALL, text=SENT_1)
        at.radio(key="log_greedy").set_value(False).run()
        at.number_input(key="log_seed").set_value(7).run()
        at.slider(key="log_T").set_value(3.0).run()
        at.button(key="log_five").click().run()
        runs.append(list(at.session_state["gen_ids"]))
    assert runs[0] == runs[1] and len(runs[0]) == 3


def test_generation_reads_the_sampling_controls_at_the_click():
    """The controls and their distribution redraw on their own (a fragment); the buttons below read the controls
    when clicked: sampling with top-k 1 writes what greedy writes."""
    greedy = open_app("logits", model=SMALL, text=SENT_1)
    greedy.button(key="log_five").click().run()
    at = open_app("logits", model=SMALL, text=SENT_1)
    at.radio(key="log_greedy").set_value(False).run()
    at.slider(key="log_T").set_value(5.0).run()
    at.number_input(key="log_topk").set_value(1).run()
    at.button(key="log_five").click().run()
    assert not at.exception and len(greedy.session_state["gen_ids"]) == 3
    assert at.session_state["gen_ids"] == greedy.session_state["gen_ids"]


def test_the_distribution_fragment_keeps_no_trace(monkeypatch):
    """A server keeps a fragment (its function, with the page script's globals, and its arguments) until the
    session's next full run: it must hold the chosen row of logits, not the trace (the trace cache's budget is the
    bound on the traces a server holds)."""
    import streamlit as st

    from transformer_core.model.trace import Trace

    kept, real = [], st.fragment

    def spy(func=None, **kw):  # st.fragment, recording what each call of the fragment is given
        if func is None:
            return lambda f: spy(f, **kw)
        wrapped = real(func, **kw)

        def call(*args, **kwargs):
            kept.append((func, args, kwargs))
            return wrapped(*args, **kwargs)
        return call

    monkeypatch.setattr(st, "fragment", spy)
    at = open_app("logits", model=SMALL, text=SENT_1)
    assert not at.exception and kept
    for func, args, kwargs in kept:
        held = [*func.__globals__.values(), *args, *kwargs.values()]
        traces = [v for v in held if isinstance(v, Trace) or isinstance(getattr(v, "trace", None), Trace)]
        assert traces == [], f"{func.__name__} keeps a trace"


def test_sidebar_button_clears_generated_tokens(page):
    page.button(key="log_next").click().run()
    page.sidebar.button(key="gen_clear").click().run()
    assert page.session_state["gen_ids"] == []
    assert page.slider(key="log_pos_13").max == 12


def test_editing_the_text_clears_generated_tokens(page):
    page.button(key="log_next").click().run()
    page.sidebar.text_area(key="text").set_value("hello world").run()
    assert not page.exception and page.session_state["gen_ids"] == []
    assert page.slider(key="log_pos_2").max == 1


def test_encoder_decoder_generates_into_the_target():
    at = open_app("logits", model="preset:course-base@cl100k_base", text=SENT_1, tgt="我现在开始排雷。")
    assert not at.exception
    assert at.slider(key="log_pos_7").value == 6  # positions of the target, not of the source
    at.button(key="log_next").click().run()
    assert not at.exception and len(at.session_state["gen_ids"]) == 1
    at.switch_page(page_file("model")).run()
    shapes = shapes_shown(at)
    assert shapes["src_ids"] == "(1, 13)" and shapes["tgt_ids"] == "(1, 8)"


def kv_table(at):
    return next(d.value for d in at.dataframe if EN["kv_col_self"] in d.value.columns)


def test_the_generation_stepper_shows_the_cache_growing_and_the_work_it_saves():
    from transformer_core import load_model, prepare
    from transformer_core.analysis.kv_steps import cache_layout, cache_report

    text = "The weather was nice, so we walked"
    at = open_app("logits", model="shipped:everyday-gpt", text=text, lang="en")
    assert not at.exception
    assert any(EN["kv_none"] == c.value for c in at.caption)  # nothing generated yet: nothing cached to show
    model, _ = load_model("everyday-gpt")
    n = prepare(model, text).src_ids.size(1)
    heads, d_k = model.cfg.n_heads, model.cfg.d_model // model.cfg.n_heads
    for step in (1, 2):
        at.button(key="log_next").click().run()
        assert not at.exception
        df = kv_table(at)
        assert len(df) == model.cfg.n_layers
        assert set(df[EN["kv_col_self"]]) == {f"1 × {heads} × {n + step} × {d_k}"}  # one more position per step
        assert list(df[EN["kv_col_bytes"]]) == [2 * heads * (n + step) * d_k * 4] * model.cfg.n_layers
        growth = json.loads(next(c for c in at.get("plotly_chart") if "kv_growth" in c.proto.id).proto.spec)
        assert growth["data"][0]["x"][-1] == n + step
        # the y axis from 0 (from near the first value, the growth looked ten times larger than it is)
        assert growth["layout"]["yaxis"]["rangemode"] == "tozero" and growth["layout"]["yaxis"]["tickformat"] == ",d"
        config = json.loads(next(d for d in at.dataframe if EN["kv_col_self"] in d.value.columns).proto.columns)
        assert config[EN["kv_col_bytes"]]["type_config"]["format"] == "localized"  # 67,584: a thousands separator
    dec = prepare(model, text).src_ids[0].tolist() + at.session_state["gen_ids"]
    rep = cache_report(model, dec)
    assert rep.max_abs_diff < 1e-4 and rep.length == n + 2
    assert rep.layers == cache_layout(model, n + 2)  # the page's layout (from the config) is the real cache's
    assert not [m for m in at.metric if m.label == EN["kv_cached"]]  # timing only on request (a room of learners)
    at.toggle(key="kv_measure").set_value(True).run()
    assert metric(at, EN["kv_positions"].format(n=n + 2)) == f"1 / {n + 2}"
    assert float(metric(at, EN["kv_cached"]).split()[0]) > 0


def test_the_translation_stepper_stops_at_the_end_of_text_and_caches_the_encoder_once():
    at = open_app("logits", model="shipped:dates-zh", text="23 November 2026", tgt="=", lang="en")
    assert not at.exception
    for _ in range(4):
        if at.button(key="log_five").disabled:
            break
        at.button(key="log_five").click().run()
    assert at.button(key="log_next").disabled  # it wrote the end of the text: nothing follows
    assert any(EN["log_stopped_eot"] in m for m in messages(at))
    df = kv_table(at)
    cross = set(df[EN["kv_col_cross"]])
    assert len(cross) == 1 and " × 5 × " in next(iter(cross))  # the five source tokens' keys, computed once
    from transformer_core import load_model, prepare
    from transformer_core.analysis.kv_steps import cache_layout, cache_report

    model, _ = load_model("dates-zh")
    prep = prepare(model, "23 November 2026", "=")
    dec = prep.tgt_ids[0].tolist() + at.session_state["gen_ids"]
    assert cache_report(model, dec, prep.src_ids[0].tolist()).layers == cache_layout(model, len(dec), 5)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_next_word_table_joins_the_pieces_of_mat(lang):
    """"The cat sat on the mat. The cat sat on the": the top token is the piece " m", the top word " mat"."""
    from transformer_core import load_model, prepare
    from transformer_core.analysis.next_word import next_words
    from ui.i18n import strings

    text = "The cat sat on the mat. The cat sat on the"
    with harness_language(lang):
        at = open_app("logits", model="shipped:everyday-gpt", text=text, lang=lang)
    assert not at.exception, at.exception
    word_col = strings()["col_word"][lang]
    words = next(d.value for d in at.dataframe if word_col in d.value.columns)
    assert words.iloc[0, 0] == visible(" mat") and words.iloc[0, 1] == f"‘{visible(' m')}’ + ‘at’"
    model, _ = load_model("everyday-gpt")
    want = next_words(model, prepare(model, text).src_ids[0].tolist(), top=len(words))
    assert [float(x) for x in words.iloc[:, 2]] == [w.prob for w in want]
    top = next(d.value for d in at.dataframe if strings()["col_prob_raw"][lang] in d.value.columns)
    assert top.iloc[0, 0] == visible(" m")  # the top token: a piece


def test_the_position_caption_quotes_its_token_as_every_label_does():
    """It said "Position 3 reads up to the token '\\n'" (Python's quoting) where every other label draws ‘⏎’."""
    at = open_app("logits", model="shipped:everyday-gpt", text="Hello\n", lang="en")
    assert not at.exception
    caption = next(c.value for c in at.caption if c.value.startswith("Position "))
    assert "‘⏎’" in caption and "'\\n'" not in caption


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_name_mover_model_says_when_a_text_is_unlike_its_sentences_and_offers_its_example(lang):
    """"Tom and Anna went to the store, Anna gave a drink to" opens with a bare "Tom" (tokens 'T' 'om', not the ' Tom'
    it learned): the model answers 'om' and no page said why. The page says so and its button sets the example, on
    which nothing is said."""
    from ui.i18n import strings

    words = {k: v[lang] for k, v in strings().items()}
    text = "Tom and Anna went to the store, Anna gave a drink to"
    with harness_language(lang):
        at = open_app("logits", model="shipped:name-movers", text=text, lang=lang)
        assert not at.exception and not at.error
        said = words["ioi_bare"].format(name="Tom", pieces="‘T’ + ‘om’") + " " + words["ioi_outside"]
        assert said in messages(at), messages(at)
        top = next(d.value for d in at.dataframe if words["col_prob_raw"] in d.value.columns)
        assert top[words["col_token"]].iloc[0] == "om"  # what the note is for
        at.button(key="ioi_example").click().run()
        assert at.session_state["text"] == "When Mary and John went to the store, John gave a drink to"
        assert not [m for m in messages(at) if words["ioi_outside"] in m]
        assert lang == "en" or not [s for s in shown_texts(at) if s in ENGLISH_ONLY]
