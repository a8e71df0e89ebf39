"""A link reproduces the view: every control that changes what is shown round-trips through the URL, in a fresh
session; bad or oversized values fall back to their defaults with a one-line notice, never a traceback."""
import pytest

from harness.apptest import SMALL, harness_language, open_app
from service import urlstate

BASE = "preset:course-base@cl100k_base"


def test_an_attention_link_opens_the_same_view_in_a_fresh_session():
    params = {"model": BASE, "text": "the cat sat", "tgt": "le chat", "layer": "2", "head": "5", "block": "dec_self",
              "mask": "causal", "scale": "log", "lang": "zh"}
    with harness_language("zh"):
        at = open_app("attention", **params)
    assert not at.exception and not at.error
    ss = at.session_state
    assert (ss["model"], ss["text"], ss["tgt"], ss["layer"], ss["head"], ss["block"], ss["mask_mode"],
            ss["att_scale"], ss["lang"]) == (BASE, "the cat sat", "le chat", 2, 5, "dec_self", "causal", "log", "zh")
    assert dict(at.query_params) == params  # and the page writes the same link back


@pytest.mark.parametrize("model, block", [("shipped:repeat", "dec_self"), ("shipped:reverse", "cross")])
def test_an_attention_link_that_names_its_mask_without_its_block_keeps_the_mask(model, block, monkeypatch):
    """The block then is the model's default, the mask the link's (it was reset to the block's default mask: the
    server's charts showed another mask than the link's, and the browser's view corrected it a run later, a race with
    a learner's next click). A block the model lacks still takes the model's block with its default mask."""
    monkeypatch.setattr("ui.attention_view.VIEW_TOKENS", 0)  # the server's charts (a text past the browser's view)
    at = open_app("attention", model=model, layer="1", mask="none")
    assert not at.exception and not at.error
    assert (at.session_state["block"], at.session_state["mask_mode"]) == (block, "none")
    assert at.radio(key="mask_mode").value == "none"
    at = open_app("attention", model="shipped:repeat", block="cross", mask="none")
    assert (at.session_state["block"], at.session_state["mask_mode"]) == ("dec_self", "both")


def test_a_logits_link_restores_sampling_settings_and_generated_tokens():
    at = open_app("logits", model=SMALL, text="hello world", T="0.7", k="5", p="0.9", seed="3", gen="11,12")
    assert not at.exception and not at.error
    assert at.slider(key="log_T").value == pytest.approx(0.7) and at.number_input(key="log_topk").value == 5
    assert at.slider(key="log_topp").value == pytest.approx(0.9) and at.number_input(key="log_seed").value == 3
    assert at.session_state["gen_ids"] == [11, 12]
    assert any("2 generated here" in m.value or "the last 2" in m.value for m in at.markdown)
    assert at.query_params["gen"] == "11,12" and at.query_params["T"] == "0.7"


def test_changing_the_text_drops_generated_tokens_from_the_link():
    at = open_app("logits", model=SMALL, text="hello world", gen="11,12")
    at.sidebar.text_area(key="text").set_value("another text").run()
    assert "gen" not in at.query_params and not at.session_state["gen_ids"]


@pytest.mark.parametrize("params", [
    {"layer": "²"}, {"layer": "9" * 5000}, {"head": "-3"}, {"model": "nonsense:model"}, {"block": "<script>"},
    {"T": "nan"}, {"p": "0"}, {"gen": "1,2,x"}, {"text": "a" * 5000}, {"lang": "xx"}, {"scale": "../../etc"},
])
def test_bad_link_values_fall_back_with_a_notice(params):
    at = open_app(None, **({"model": SMALL} | params))  # the link's first run shows the notice
    assert not at.exception and not at.error
    notes = [c.value for c in at.sidebar.caption if c.value.startswith("🔗")]
    assert len(notes) == 1
    assert at.session_state["layer"] == 0 and at.session_state["head"] == 0
    at.switch_page("pages/3_attention.py").run()
    assert not at.exception and not at.error


@pytest.mark.parametrize("page", ["intervene", "lens", "ffn"])
def test_a_layer_beyond_the_model_is_said_and_dropped_on_every_page(page):
    """Only the Attention page checked a link's layer: /intervene?layer=99 said nothing and wrote layer=99 back."""
    at = open_app(page, model=SMALL, layer="99", lang="en")
    assert not at.exception and not at.error
    notes = [c.value for c in at.sidebar.caption if c.value.startswith("🔗")]
    assert len(notes) == 1 and "99" in notes[0]
    assert at.session_state["layer"] == 0 and "layer" not in at.query_params


@pytest.mark.parametrize("params, said", [({"nlayer": "99", "neuron": "3"}, "nlayer 99"),
                                          ({"nlayer": "1", "neuron": "999999"}, "neuron 999999")])
def test_a_neuron_beyond_the_model_is_said_and_dropped(params, said):
    """/ffn?nlayer=99&neuron=999999 was ignored in silence and stayed in the link (layer=99 is said): a neuron the
    model does not have is said too, and the FFN page reads its first neuron."""
    at = open_app("ffn", model="shipped:everyday-gpt", lang="en", **params)
    assert not at.exception and not at.error
    notes = [c.value for c in at.sidebar.caption if c.value.startswith("🔗")]
    assert len(notes) == 1 and said in notes[0], notes
    assert "nlayer" not in at.query_params and "neuron" not in at.query_params
    assert "nr_layer" not in at.session_state and "nr_neuron" not in at.session_state


def test_a_neuron_inside_the_model_opens_from_a_link():
    at = open_app("ffn", model="shipped:everyday-gpt", lang="en", nlayer="2", neuron="17")
    assert not at.exception and not at.error
    assert not [c.value for c in at.sidebar.caption if c.value.startswith("🔗")]
    assert (at.query_params["nlayer"], at.query_params["neuron"]) == ("2", "17")


def test_links_carry_opaque_ids_and_stay_short():
    values = urlstate.defaults() | {"model": "user:m-0123456789abcdef", "text": "x" * 3000, "layer": 1}
    encoded = urlstate.encode(values)
    assert "text" not in encoded and encoded.text_left_out and "/" not in encoded["model"]
    assert urlstate.query_length(encoded) <= urlstate.MAX_QUERY_CHARS


@pytest.mark.parametrize("name, key", [("dates-zh", "shipped:dates-zh"), ("modern-gpt", "shipped:modern-gpt")])
def test_a_link_opens_a_model_named_by_its_plain_name(name, key):
    """Before: `?model=dates-zh` opened the default with "not available to you here"; the link is rewritten with
    the model's key."""
    from harness.apptest import EN

    at = open_app("model", model=name, lang="en")
    assert not at.exception and not at.error
    assert at.session_state["model"] == key and at.query_params["model"] == key
    shown = " ".join(c.value for c in at.sidebar.caption)
    assert EN["err.url_model_unknown"] not in shown and "🔗" not in shown.replace(EN["share_link"], "")


def test_a_model_that_reads_no_target_leaves_the_last_target_out_of_the_link():
    """After the date translator, a decoder-only model's link still carried tgt=六万一千零一十六."""
    at = open_app("attention", model="shipped:dates-zh", text="June 3, 2004", tgt="二〇〇四年六月三日", lang="en")
    assert not at.exception and at.query_params["tgt"] == "二〇〇四年六月三日"
    at.sidebar.selectbox(key="model").set_value("shipped:everyday-gpt").run()
    assert not at.exception and at.session_state["model"] == "shipped:everyday-gpt"
    assert "tgt" not in at.query_params, dict(at.query_params)
