"""Tokenizer page: token counts in words of both languages, and no label left in English on the Chinese page."""
import html
import re

import pytest

from harness.apptest import EN, ENGLISH_ONLY, SMALL, harness_language, open_app, shown_texts
from transformer_core.text.tokenizer import tokenize
from transformer_core.train.defaults import SHIPPED_LMS
from ui.figures import visible

DEFAULT_ENCODING = SHIPPED_LMS["everyday-gpt"]["subset"]["name"]  # the default model's vocabulary


def test_token_counts_are_singular_for_one_token_and_plural_otherwise():
    at = open_app("tokenizer", model=SMALL, text="hello", lang="en")
    assert not at.exception
    shown = [m.value for m in at.markdown]
    assert "**cl100k_base** · 1 token" in shown and "**r50k_base** · 1 token" in shown
    at.sidebar.text_area(key="text").set_value("hello world").run()
    assert "**cl100k_base** · 2 tokens" in [m.value for m in at.markdown]


def test_token_table_shows_whitespace_like_the_chips():
    at = open_app("tokenizer", model=SMALL, text="a b\tc\nd", lang="en")
    table = next(d.value for d in at.dataframe if "partial UTF-8" in d.value.columns)
    assert list(table["token"]) == [visible(x.text) for x in tokenize("a b\tc\nd", "cl100k_base").tokens]
    assert "".join(table["token"]) == "a␣b⇥c⏎d"


def test_a_blank_character_cut_into_pieces_is_named_in_the_groups_table():
    """The table of characters cut into pieces named a space that draws nothing (an em space, a narrow no-break one;
    the default's vocabulary cuts a no-break space too) as a blank."""
    at = open_app("tokenizer", model=SMALL, text="a\u2003b\u202fc", lang="en")
    groups = next(d.value for d in at.dataframe if EN["col_chars"] in d.value.columns)
    assert list(groups[EN["col_chars"]]) == ["⟨U+2003⟩", "⟨U+202F⟩"]


def test_chinese_page_counts_tokens_in_chinese_and_has_no_english_labels():
    with harness_language("zh"):
        at = open_app("tokenizer", model=SMALL, lang="zh", text="同志们!我踩着地雷了", tgt="我现在开始排雷。")
        assert not at.exception
        shown = [m.value for m in at.markdown]
        assert "**cl100k_base** · 13 个词元" in shown
        assert any(s.endswith("形状 `(2, 13)`") for s in shown)
        assert not [s for s in shown_texts(at) if s in ENGLISH_ONLY]
        assert not any("shape" in s or "token 数" in s for s in shown)


def why_sentence(at) -> str:
    return next(m.value for m in at.markdown if m.value.startswith("Why they differ"))


@pytest.mark.parametrize("model, text", [("shipped:everyday-gpt", "The cat sat on the mat and looked at the door."),
                                         ("shipped:everyday-gpt", "我们今天去公园散步 🙂"),
                                         (SMALL, "The cat sat on the mat and looked at the door."),
                                         (SMALL, "def f(x):\n    return x ** 2  # 平方")])
def test_the_r50k_sentence_follows_the_counts_it_cites(model, text):
    """On plain English both encodings used 14 tokens while the page said r50k "spends more tokens on Chinese, emoji
    and code (14 here)": the sentence now says more, as many or fewer from the two counts."""
    at = open_app("tokenizer", model=model, text=text, lang="en")
    assert not at.exception
    enc = DEFAULT_ENCODING if model.startswith("shipped") else "cl100k_base"
    ref = "cl100k_base"
    cut = {"shipped:everyday-gpt": 128, SMALL: 16}[model]  # the model's max_len: every column is cut to it
    c, b = (len(tokenize(text, e, max_tokens=cut).ids) for e in ("r50k_base", ref))  # as the columns count them
    shown = [m.value for m in at.markdown]
    assert f"**r50k_base** · {c} tokens" in shown and f"**{ref}** · {b} tokens" in shown
    why = why_sentence(at)
    if c > b:
        assert f"spends more tokens on this text ({c}, against {b} in {ref})" in why
    elif c == b:
        assert f"uses as many tokens here as {ref} ({c})" in why and "spends more" not in why
    else:
        assert f"uses fewer tokens on this text ({c}, against {b} in {ref})" in why
    if enc == DEFAULT_ENCODING:
        a = len(tokenize(text, enc, max_tokens=cut).ids)
        assert f"**{enc}** · {a} tokens" in shown
        assert f"({a} tokens against {b} in {ref})" in why or f"so both use {a} tokens" in why


def test_a_decoder_only_model_s_padded_batch_pairs_the_text_with_its_first_half():
    """The heading "The padded batch of the two texts" stood over nothing on a decoder-only model (no second
    text): the batch now holds the text and its first half, its mask rows as long as each."""
    text = "The cat sat on the mat and looked at the door."
    at = open_app("tokenizer", model=SMALL, text=text, lang="en")
    assert not at.exception
    assert EN["tok_batch_half"] in [h.value for h in at.subheader] and EN["tok_batch"] not in [
        h.value for h in at.subheader]
    lengths = [len(tokenize(x, "cl100k_base").ids) for x in (text, text[: len(text) // 2])]
    mask = next(d.value for d in at.dataframe if len(d.value) == 2 and set(d.value.iloc[1]) <= {0, 1})
    assert mask.sum(axis=1).tolist() == lengths and mask.shape == (2, max(lengths))
    at = open_app("tokenizer", model=SMALL, text="a", lang="en")
    assert EN["tok_batch_none"].split(":")[0] in " ".join(m.value for m in at.markdown)


def test_every_chip_and_the_text_span_it_came_from_share_a_class_that_one_hover_rule_lights():
    text = "Hi 你好, 踩 🙂!"
    at = open_app("tokenizer", model=SMALL, text=text, lang="en")
    assert not at.exception
    view = next(h.value for h in at.main.html if "class='tkv'" in h.value)
    tok = tokenize(text, "cl100k_base")
    n = len(tok.tokens)
    chips = re.findall(r"<span class='k(\d+)' title='#(\d+) id (\d+)", view)
    assert [(int(a), int(b), int(c)) for a, b, c in chips] == [(i, i, x.id) for i, x in enumerate(tok.tokens)]
    spans = re.findall(r"<span class='((?:k\d+ ?)+)'>([^<]*)</span>", view)
    assert "".join(html.unescape(s) for _, s in spans) == text  # the text, whole, in token spans
    assert sorted(int(k[1:]) for cls, _ in spans for k in cls.split()) == list(range(n))
    assert any(len(cls.split()) > 1 for cls, _ in spans)  # 踩 and 🙂 are several byte tokens: one span lights all
    rules = re.search(r"<style>(.*?)\{", view).group(1).split(",")
    assert rules == [f".tkv:has(.k{i}:hover) .k{i}" for i in range(n)]


@pytest.mark.parametrize("text", ["我们明天早上去公园散步。", "The cat sat on the mat.",
                                  "Supercalifragilistic 今天天气很好 🙂"])
def test_why_they_differ_says_what_the_counts_above_it_show(text):
    """The sentence said "every token cl100k_base uses on this text is kept, so both use 11 tokens here" under
    columns of 11 and 14 tokens: the default's vocabulary also holds whole characters cl100k_base spells in pieces."""
    at = open_app("tokenizer", model="shipped:everyday-gpt", text=text, lang="en")
    said = next(m.value for m in at.markdown if m.value.startswith("Why they differ"))
    ours, base = (len(tokenize(text, name).ids) for name in (DEFAULT_ENCODING, "cl100k_base"))
    whole = sum(i >= 100_277 for i in tokenize(text, DEFAULT_ENCODING).ids)  # its own tokens: past cl100k_base's
    if ours == base and not whole:
        assert f"so both use {ours} tokens" in said
    else:
        assert f"({ours} tokens against {base} in cl100k_base)" in said and "both use" not in said
        assert (f"{whole} character" in said) == bool(whole)


@pytest.mark.parametrize("lang, text, spaced", [("zh", "我们明天早上去公园散步。", False),
                                                ("zh", "The weather was nice today.", True),
                                                ("en", "我们明天早上去公园散步。", False)])
def test_what_to_look_for_speaks_of_spaces_only_when_the_text_has_them(lang, text, spaced):
    """"空格属于它后面的词（␣）" above a Chinese sentence that has no space."""
    with harness_language(lang):
        at = open_app("tokenizer", model="shipped:everyday-gpt", text=text, lang=lang)
    assert not at.exception
    look = next(i.value for i in at.info if i.value.startswith(("What to look for", "看点")))
    assert ("␣" in look) is spaced, look
