"""Tokenizer page: token counts in words of both languages, and no label left in English on the Chinese page."""
from harness.apptest import ENGLISH_ONLY, SMALL, harness_language, open_app, shown_texts
from transformer_core.text.tokenizer import tokenize
from ui.figures import visible


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


def test_chinese_page_counts_tokens_in_chinese_and_has_no_english_labels():
    with harness_language("zh"):
        at = open_app("tokenizer", model=SMALL, lang="zh", text="同志们!我踩着地雷了", tgt="我现在开始排雷。")
        assert not at.exception
        shown = [m.value for m in at.markdown]
        assert "**cl100k_base** · 13 个词元" in shown
        assert any(s.endswith("形状 `(2, 13)`") for s in shown)
        assert not [s for s in shown_texts(at) if s in ENGLISH_ONLY]
        assert not any("shape" in s or "token 数" in s for s in shown)
