"""BPE merge playback page through the real app: every step's merged pair is the pair tiktoken's ranks say, the
last step is the token, the text's tokens and merge counts equal tiktoken's; bad input and Chinese."""
import re

import numpy as np
import pytest

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
    shown_texts,
)
from transformer_core import load_encoding
from transformer_core.train.defaults import SHIPPED_LMS
from ui.figures import visible

DEFAULT_ENCODING = SHIPPED_LMS["everyday-gpt"]["subset"]["name"]  # the default model's vocabulary

PAGE = "bpe"
COURSE = "同志们!我踩着地雷了"


def steps(at):
    return next(d.value for d in at.dataframe if EN["bpe_col_rank"] in d.value.columns)


def chip_texts(html: str) -> list[str]:
    return re.findall(r"font-family:monospace'>([^<]*)<", html)


def test_the_course_sentence_tokens_and_merge_counts_equal_tiktoken():
    at = open_app(PAGE, model=SMALL, text=COURSE, lang="en")
    assert_clean(at)
    enc = load_encoding("cl100k_base")
    ids = enc.encode_ordinary(COURSE)
    merges = [len(enc.decode_single_token_bytes(i)) - 1 for i in ids]
    np.testing.assert_array_equal(array(figure(at, "bpe_merges")["data"][0]["x"]), merges)
    axis = figure(at, "bpe_merges")["layout"]["xaxis"]
    assert axis["dtick"] >= 1 and float(axis["dtick"]).is_integer() and axis["tick0"] == 0  # no 0.5 ticks
    assert [m.value for m in at.metric][:2] == [str(len(ids)), str(sum(merges))]
    assert merges[5:8] == [0, 0, 0]  # 踩 stays three single bytes, as the caption says
    whole = at.main.html[-1].value  # the whole text's chips, each with its merge count
    assert re.findall(r"<sub[^>]*>(\d+)</sub>", whole) == [str(m) for m in merges]
    assert at.selectbox(key=f"bpe_pick_text_{len(ids)}").value == 0  # the first token with the most merges (2)


def test_stepping_a_word_replays_tiktokens_merges_lowest_rank_first():
    at = open_app(PAGE, model=SMALL, lang="en")
    at.radio(key="bpe_source").set_value("word").run()
    at.text_input(key="bpe_word").input(" Transformer").run()
    assert_clean(at)
    enc = load_encoding("cl100k_base")
    ranks = enc._mergeable_ranks
    [tid] = enc.encode_ordinary(" Transformer")
    df = steps(at)
    assert len(df) == 11
    for left, right, rank in zip(df[EN["bpe_col_left"]], df[EN["bpe_col_right"]], df[EN["bpe_col_rank"]],
                                 strict=True):
        pair = (left + right).replace("␣", " ").encode("utf-8")
        assert ranks[pair] == rank  # the merged pair is a token whose rank is the one shown
    assert df[EN["bpe_col_rank"]].iloc[-1] == tid
    slider = at.slider(key=f"bpe_step_cl100k_base_{tid}")
    assert slider.value == 0
    assert chip_texts(at.html[0].value) == list("␣Transformer")  # step 0: the bytes
    slider.set_value(4).run()
    assert chip_texts(at.html[0].value) == ["␣T", "r", "an", "s", "f", "or", "m", "er"]
    assert "rank 350" in " ".join(c.value for c in at.caption)
    at.slider(key=f"bpe_step_cl100k_base_{tid}").set_value(11).run()
    assert chip_texts(at.html[0].value) == ["␣Transformer"]
    code = next(c.value for c in open_export(at, "bpe_token").code if "token_playback" in c.value)
    scope: dict = {}
    exec(code, scope)  # the page's notebook code recomputes the ranks it shows
    np.testing.assert_array_equal(scope["arrays"]["ranks"], df[EN["bpe_col_rank"]])


def test_a_single_byte_token_needs_no_merge_and_special_text_is_plain():
    at = open_app(PAGE, model="shipped:reverse", text="<|endoftext|>", lang="en")
    assert_clean(at)
    enc = load_encoding("cl100k_base")
    ids = enc.encode_ordinary("<|endoftext|>")
    np.testing.assert_array_equal(array(figure(at, "bpe_merges")["data"][0]["x"]),
                                  [len(enc.decode_single_token_bytes(i)) - 1 for i in ids])
    at.radio(key="bpe_source").set_value("word").run()
    at.text_input(key="bpe_word").input("!").run()
    assert_clean(at)
    assert EN["bpe_single"] in messages(at)


def test_bad_inputs_give_messages_not_tracebacks():
    at = open_app(PAGE, model=SMALL, lang="en")
    at.sidebar.text_area(key="text").set_value("").run()
    assert not at.exception and EN["bpe_empty"] in messages(at)
    at.sidebar.text_area(key="text").set_value("<script>alert(1)</script><img src=x onerror=alert(1)>").run()
    assert_clean(at)
    body = "".join(h.value for h in at.html)
    assert "<script" not in body and "<img" not in body and "&lt;script" in body
    at.sidebar.text_area(key="text").set_value("同志们!我踩着地雷了 " * 10_000).run()
    assert_clean(at)
    assert EN["bpe_cut"].format(cap="5,000") in messages(at)
    assert len(array(figure(at, "bpe_merges")["data"][0]["x"])) == 120
    at.radio(key="bpe_source").set_value("word").run()
    assert not at.exception and EN["bpe_empty_word"] in messages(at)
    at.text_input(key="bpe_word").input("👩‍👩‍👧‍👦 e\u0301").run()
    assert_clean(at)
    assert visible(steps(at)[EN["bpe_col_left"]].iloc[0])


def test_chinese_page_has_no_english_labels():
    with harness_language("zh"):
        at = open_app(PAGE, model=SMALL, lang="zh")
        assert_clean(at)
        assert at.title[0].value == "BPE 合并过程"
        assert not [s for s in shown_texts(at) if s in ENGLISH_ONLY]


def test_chinese_chips_and_bars_show_characters_not_bytes():
    text = "我踩着地雷了"
    at = open_app(PAGE, model=SMALL, text=text, lang="en")
    assert_clean(at)
    chips = re.findall(r">([^<>]+)<sub", at.main.html[-1].value)
    assert chips == ["我", "踩\u00a01/3", "踩\u00a02/3", "踩\u00a03/3", "着\u00a01/2", "着\u00a02/2", "地", "雷", "了"]
    labels = figure(at, "bpe_merges")["data"][0]["y"]
    assert not any("<0x" in str(x) for x in labels) and any("踩\u00a02/3" in str(x) for x in labels)


def look_caption(at) -> str:
    return next(c.value for c in at.caption if c.value.startswith(EN["bpe_look_intro"]))


@pytest.mark.parametrize("model", ["shipped:everyday-gpt", SMALL])
def test_what_to_look_for_is_built_by_the_model_s_own_encoding(model):
    """The hint said "' hello' is built in 5 merges (… rank 24748 last)" on a model whose vocabulary spells it
    ␣h|el|lo and has no token 24748: every figure now comes from the model's encoding, recomputed here with
    tiktoken's own encoder and ranks."""
    at = open_app(PAGE, model=model, lang="en")
    assert_clean(at)
    encoding = at.session_state["enc"] if model.startswith("preset") else DEFAULT_ENCODING
    enc = load_encoding(encoding)
    ranks = enc._mergeable_ranks
    text = look_caption(at)
    for word in (" hello", " Transformer"):
        parts = [enc.decode_single_token_bytes(i) for i in enc.encode_ordinary(word)]
        raw = word.encode()
        first = min(ranks[raw[i:i + 2]] for i in range(len(raw) - 1) if raw[i:i + 2] in ranks)
        merges = sum(len(p) - 1 for p in parts)
        if len(parts) == 1:
            assert f"‘{visible(word)}’ is one token" in text and f"{merges} merges" in text
            if word == " hello":
                assert f"at rank {first} first, the whole token at rank {ranks[raw]} last" in text
        else:
            shown = " · ".join(f"‘{visible(p.decode())}’" for p in parts)
            assert (f"‘{visible(word)}’ is {len(parts)} tokens in {encoding}, {shown}, built by {merges} merges" in text
                    or f"‘{visible(word)}’ is {len(parts)} tokens, {shown}, built by {merges} merges" in text)
            assert f"at rank {first} first" in text
    common = next(c for c in "的是人我中" if len(enc.encode_ordinary(c)) == 1)
    assert f"such as {common} is 3 bytes and one token after 2 merges" in text
    if len(enc.encode_ordinary(" hello")) > 1:  # a vocabulary without the token never cites its rank
        assert "24748" not in text
    else:
        assert "rank 24748 last" in text
