"""Home page: the instruction is true of the layout (the text box is under the list of pages), every link carries one
figure of its step for this text, and the logits' shape is explained id by id: each figure recomputed here."""
import pytest
import torch

from harness.apptest import EN, SMALL, assert_clean, open_app
from transformer_core import load_model, prepare, run, token_labels
from transformer_core.model.transformer import param_counts
from transformer_core.text.tokenizer import load_encoding
from ui.figures import visible

TEXT = "The weather was nice, so we walked to the park"


def links(at) -> dict[str, str]:
    """Each page link's label, by the page it opens."""
    return {el.proto.page.rsplit("_", 1)[-1].removesuffix(".py"): el.proto.label for el in at.get("page_link")}


def test_the_instruction_names_the_sidebar_box_and_where_it_is():
    at = open_app(None, model="shipped:everyday-gpt", text=TEXT, lang="en")
    assert_clean(at)
    intro = at.markdown[0].value
    box = at.sidebar.text_area(key="text").label
    assert f"**{box}**" in intro and "below the list of pages" in intro
    assert "Type a sentence in the sidebar" not in intro


@pytest.mark.parametrize("model", ["shipped:everyday-gpt", SMALL])
def test_every_link_carries_one_figure_of_its_step_recomputed_from_the_model(model):
    at = open_app(None, model=model, text=TEXT, lang="en")
    assert_clean(at)
    key = model.split(":", 1)[1]
    loaded = load_model(key.split("@")[0])[0] if model.startswith("shipped") else None
    if loaded is None:
        from transformer_core.model.config import preset
        from transformer_core.model.transformer import build_model

        loaded = build_model(preset("course-gpt"), "cpu")
    cfg = loaded.cfg
    prep = prepare(loaded, TEXT)
    n = prep.src_ids.size(1)
    shown = links(at)
    assert list(shown)[:6] == ["tokenizer", "embeddings", "attention", "ffn", "logits", "model"]  # in order (a phone)
    assert shown["tokenizer"] == f"{EN['nav_tokenizer']} · {n} tokens"
    assert shown["embeddings"] == f"{EN['nav_embeddings']} · a 1×{n}×{cfg.d_model} tensor"
    assert shown["attention"] == f"{EN['nav_attention']} · {cfg.n_layers} layers × {cfg.n_heads} heads over {n} tokens"
    assert shown["model"] == f"{EN['nav_model']} · {param_counts(loaded)['total']:,} parameters"
    assert shown["ffn"].startswith(f"{EN['nav_ffn']} · ") and "% of units fire" in shown["ffn"]
    if model.startswith("shipped"):  # a trained model's top token (a random preset's is a near tie)
        probs = torch.softmax(run(loaded, prep.src_ids)[0, -1].double(), -1)
        top = int(probs.argmax())
        word = visible(token_labels(loaded, [top])[0])
        assert shown["logits"] == f"{EN['nav_logits']} · next: ‘{word}’ p = {float(probs[top]):.3f}"


@pytest.mark.parametrize("model", ["shipped:everyday-gpt", "shipped:dates-zh", SMALL])
def test_the_logits_shape_is_explained_id_by_id(model):
    """logits "1 × 23 × 2053" stood beside a "2,048-token vocabulary": the caption now splits the last axis into
    the encoding's tokens, its base's special tokens, ⟨unk⟩ and ids with no token, counted here from the config and
    the encoding's own tables."""
    at = open_app(None, model=model, text=TEXT, lang="en", **({"tgt": "="} if "dates" in model else {}))
    assert_clean(at)
    caption = next(c.value for c in at.caption if c.value.startswith("The logits are"))
    if model.startswith("shipped"):
        cfg = load_model(model.split(":", 1)[1])[0].cfg
    else:
        from transformer_core.model.config import preset

        cfg = preset("course-gpt")
    enc = load_encoding(cfg.encoding)
    reals = list(cfg.vocab_map) or list(range(cfg.vocab_size))
    ranks = set(enc._mergeable_ranks.values())
    special = {i: s for s, i in enc._special_tokens.items()}
    ordinary = sum(r in ranks for r in reals)
    specials = [special[r] for r in sorted(reals) if r in special]
    unknown = sum(r == -1 for r in reals)
    unused = len(reals) - ordinary - len(specials) - unknown
    assert ordinary + len(specials) + unknown + unused == cfg.vocab_size
    assert f"last axis is the vocabulary, {cfg.vocab_size:,} ids = {ordinary:,} tokens of {cfg.encoding}" in caption
    if specials:
        base = "cl100k_base"
        assert f"{len(specials)} special token{'s' if len(specials) > 1 else ''} of {base}" in caption
        assert all(f"`{s}`" in caption for s in specials)
    assert ("⟨unk⟩" in caption) == bool(unknown)
    assert (f"{unused:,} ids with no token" in caption) == bool(unused)
    if model == "shipped:everyday-gpt":  # 2,053 = 2,048 + cl100k's 5 special tokens
        assert cfg.vocab_size == ordinary + 5


def test_the_model_map_is_never_drawn_narrower_than_its_labels_need():
    """At 420 px plotly shrank the boxes but not their labels ("masked self-attn" ran out of its box): the map's
    element keeps the width its labels need and its container scrolls; the rule names the chart's own element."""
    import json
    import re

    from ui.model_map import LABEL_UNIT_PX

    at = open_app(None, model="shipped:everyday-gpt", text=TEXT, lang="en")
    assert_clean(at)
    style = next(h.value for h in at.html if "min-width" in h.value)
    chart = next(c for c in at.get("plotly_chart") if "model_map_" in c.proto.id)
    spec = json.loads(chart.proto.spec)
    width = spec["layout"]["xaxis"]["range"][1]  # the map's width in units
    least = int(re.search(r"min-width:(\d+)px", style).group(1))
    assert least == round(width * LABEL_UNIT_PX[0]) and ".st-key-home_map" in style and "st-key-model_map_" in style
