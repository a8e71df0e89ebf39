"""Every URL parameter parsed defensively: a bad or oversized value falls back to its default with a notice that
has a message in both languages, never a traceback; links leave out defaults and texts too long for a URL."""
import json
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service import urlstate
from service.urlstate import MAX_QUERY_CHARS, UrlNotice, clamp, encode, parse

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = json.loads((ROOT / "assets" / "strings" / "errors.json").read_text(encoding="utf-8"))
MODELS = ["shipped:reverse", "preset:course-base@cl100k_base", "user:m-0123456789abcdef"]


def codes(notices) -> list[str]:
    return [n.code for n in notices]


def test_no_parameters_give_every_default():
    values, notices = parse({})
    assert values == urlstate.defaults() and notices == []
    assert values["layer"] == 0 and values["scale"] == "01" and values["text"] is None  # None: the page decides


def test_good_values_are_typed():
    values, notices = parse({"model": "shipped:reverse", "text": "d a c b", "tgt": "= b c a", "enc": "r50k_base",
                             "lang": "zh", "layer": "1", "head": "3", "block": "cross", "mask": "causal",
                             "scale": "log", "T": "0.7", "k": "40", "p": "0.9", "seed": "42", "gen": "5,0,17",
                             "nlayer": "2", "neuron": "1449"},
                            models=MODELS)
    assert notices == []
    assert values == {"model": "shipped:reverse", "text": "d a c b", "tgt": "= b c a", "enc": "r50k_base",
                      "lang": "zh", "layer": 1, "head": 3, "block": "cross", "mask": "causal", "scale": "log",
                      "T": 0.7, "k": 40, "p": 0.9, "seed": 42, "gen": (5, 0, 17), "nlayer": 2, "neuron": 1449}


@pytest.mark.parametrize(("name", "raw", "code"), [
    ("layer", "²", "url_value"),  # str.isdigit() says yes, int() says no
    ("layer", "٣", "url_value"),  # int() would read Arabic-Indic digits
    ("layer", "9" * 5000, "url_value"),  # int() refuses over 4300 digits with a ValueError
    ("layer", "1e3", "url_value"),
    ("layer", "256", "url_value"),
    ("head", "-1", "url_value"),
    ("head", " 1", "url_value"),
    ("block", "../etc", "url_value"),
    ("mask", "all", "url_value"),
    ("scale", "<script>", "url_value"),
    ("enc", "../../../etc/passwd", "url_value"),
    ("lang", "fr", "url_value"),
    ("T", "nan", "url_value"),
    ("T", "inf", "url_value"),
    ("T", "0", "url_value"),
    ("T", "1000", "url_value"),
    ("p", "0", "url_value"),  # top-p must be above 0
    ("p", "1.5", "url_value"),
    ("k", "-5", "url_value"),
    ("seed", "99999999999", "url_value"),
    ("gen", "1,,2", "url_value"),
    ("gen", ",".join(["1"] * 300), "url_value"),
    ("gen", "99999999", "url_value"),
    ("neuron", "-1", "url_value"),
    ("nlayer", "256", "url_value"),
    ("text", "x" * (urlstate.MAX_TEXT_CHARS + 1), "url_text_too_long"),
    ("tgt", "字" * (urlstate.MAX_TEXT_CHARS + 1), "url_text_too_long"),
    ("model", "user:m-ffffffffffffffff", "url_model_unknown"),  # not one the viewer may open
    ("model", "/etc/passwd", "url_model_unknown"),
    ("model", "user:../../x", "url_model_unknown"),
])
def test_a_bad_value_falls_back_to_its_default_with_a_notice(name, raw, code):
    other = "seed" if name != "seed" else "head"
    values, notices = parse({other: "2", name: raw}, models=MODELS)
    assert values[name] == urlstate.PARAMS[name].default
    assert codes(notices) == [code] and values[other] == 2  # the other values are kept
    for lang in ("en", "zh"):
        text = notices[0].text(lang)
        assert text and "{" not in text and f"err.{code}" in MESSAGES


def test_a_link_too_long_as_a_whole_is_ignored():
    values, notices = parse({"text": "a" * 1000, **{k: "9" * 10 for k in ("layer", "head", "k", "seed")},
                             "tgt": "b" * urlstate.MAX_PARAM_CHARS})
    assert values == urlstate.defaults() and codes(notices) == ["url_too_long"]


def test_lists_and_junk_never_raise():
    assert parse({"layer": ["1", "2"]})[0]["layer"] == 2  # the last of repeated parameters
    assert codes(parse({"layer": None})[1]) == ["url_value"]
    assert codes(parse({"layer": 3})[1]) == ["url_value"]
    assert parse(None)[0] == urlstate.defaults()
    assert parse({"unknown": "x", "page": "attention"}) == (urlstate.defaults(), [])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from([*urlstate.PARAMS, "x"]), st.text(max_size=60), max_size=8))
def test_parse_never_raises_on_any_text(params):
    values, notices = parse(params, models=MODELS)
    assert set(values) == set(urlstate.PARAMS)
    assert all(isinstance(n, UrlNotice) and n.text("zh") for n in notices)


def test_clamp_checks_ranges_that_depend_on_the_model():
    values, _ = parse({"layer": "7", "head": "3", "block": "cross"})
    out, notices = clamp(values, n_layers=6, n_heads=8, blocks=["dec_self"])  # a decoder-only model
    assert (out["layer"], out["head"], out["block"]) == (0, 3, None)
    assert codes(notices) == ["url_clamped", "url_value"]
    assert "layer 7" in notices[0].text("en") and "6" in notices[0].text("en")
    assert clamp(values, 8, 8, blocks=urlstate.BLOCKS) == (values, [])


def test_one_line_summary():
    _, notices = parse({"layer": "²", "head": "-1"})
    line = urlstate.summary(notices, "en")
    assert "head" in line and "layer" in line and "\n" not in line
    assert urlstate.summary(notices[:1], "zh") == notices[0].text("zh") and urlstate.summary([]) is None


def test_encode_leaves_out_defaults_and_round_trips():
    values = urlstate.defaults() | {"model": "shipped:reverse", "text": "d a c b", "layer": 1, "T": 0.7,
                                    "gen": (3, 1), "p": 1.0}
    link = encode(values)
    assert link == {"model": "shipped:reverse", "text": "d a c b", "layer": "1", "T": "0.7", "gen": "3,1"}
    assert not link.text_left_out
    assert parse(link, models=MODELS) == (values, [])
    assert "text" not in encode(values, page_defaults={"text": "d a c b"})  # the model's own example


def test_texts_too_long_for_a_link_are_left_out_and_flagged():
    values = urlstate.defaults() | {"model": "shipped:reverse", "text": "同志们!我踩着地雷了" * 40, "layer": 2}
    link = encode(values)  # 400 characters, but 9 per character once percent-encoded
    assert "text" not in link and link.text_left_out and link.left_out == ("text",)
    assert link == {"model": "shipped:reverse", "layer": "2"}
    short = encode(values | {"text": "同志们!我踩着地雷了"})
    assert short["text"] == "同志们!我踩着地雷了" and not short.text_left_out
    both = encode(values | {"text": "a" * 1500, "tgt": "b" * 1500})
    assert set(both.left_out) == {"tgt"} or set(both.left_out) == {"text"}  # the longest goes first, one suffices
    assert len(urlencode(both, quote_via=quote)) <= MAX_QUERY_CHARS
    over_cap = encode(values | {"text": "x" * (urlstate.MAX_TEXT_CHARS + 1)})
    assert over_cap.text_left_out


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=800), st.text(max_size=800), st.integers(0, 255), st.lists(st.integers(0, 10**7),
                                                                                      max_size=256))
def test_every_link_fits_and_parses_back(text, tgt, layer, gen):
    values = urlstate.defaults() | {"text": text or None, "tgt": tgt or None, "layer": layer, "gen": tuple(gen)}
    link = encode(values)
    assert len(urlencode(link, quote_via=quote)) <= MAX_QUERY_CHARS
    back, notices = parse(link)
    assert notices == []
    for name in ("text", "tgt", "layer", "gen"):
        if name not in link.left_out:
            assert back[name] == (values[name] if values[name] != () else urlstate.PARAMS[name].default)


def test_a_link_may_name_a_model_by_its_plain_name_where_that_names_one():
    """Before: `?model=dates-zh` or `?model=modern-gpt` opened the default ("not available to you here"); only
    `shipped:dates-zh` worked. A key, the key's name after its kind (without a preset's encoding) or the label
    opens the model it names; a name two models share opens the default and says which models it could be."""
    models = {"shipped:dates-zh": "dates-zh", "shipped:modern-gpt": "modern-gpt", "shipped:copy": "copy",
              "preset:course-gpt@cl100k_base": "course-gpt", "gpt2:small": "GPT-2 small",
              "user:m-0123456789abcdef": "copy"}
    for raw, key in [("dates-zh", "shipped:dates-zh"), ("modern-gpt", "shipped:modern-gpt"),
                     ("shipped:dates-zh", "shipped:dates-zh"), ("Dates-ZH", "shipped:dates-zh"),
                     ("course-gpt", "preset:course-gpt@cl100k_base"),
                     ("course-gpt@cl100k_base", "preset:course-gpt@cl100k_base"), ("GPT-2 small", "gpt2:small"),
                     ("small", "gpt2:small"), ("m-0123456789abcdef", "user:m-0123456789abcdef")]:
        values, notices = parse({"model": raw}, models=models)
        assert (values["model"], notices) == (key, []), raw
        assert parse({"model": raw}, models=list(models))[0]["model"] == key or raw in ("GPT-2 small", "Dates-ZH")
    values, notices = parse({"model": "copy"}, models=models)
    assert values["model"] is None and codes(notices) == ["url_model_ambiguous"]
    assert "shipped:copy, user:m-0123456789abcdef" in notices[0].text("en") and notices[0].text("zh")
    for raw in ("gpt", "dates", "x" * 500, "shipped:nope", ""):
        values, notices = parse({"model": raw}, models=models)
        assert values["model"] is None and codes(notices) == ["url_model_unknown"], raw
    assert "err.url_model_ambiguous" in MESSAGES
