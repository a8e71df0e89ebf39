"""Today's decoder family on every page, through the real app: a random-init modern preset (RoPE, RMSNorm, SwiGLU,
grouped-query attention) renders every page in English and Chinese with no error, and the pages that show what
changed show it with numbers recomputed here."""
import json
import re

import numpy as np
import pytest
import torch

from harness.apptest import EN, array, figure, harness_language, open_app, open_export, page_names
from service import catalog
from transformer_core.analysis.positions import rope_offset_scores

MODERN = "preset:course-gpt-modern@cl100k_base"
QWEN3 = "preset:course-gpt-qwen3@cl100k_base"  # QK-norm and heads wider than d_model / n_heads (4 of 32 on 64)
TEXT = "The cat sat on the mat. 我今天去超市买了一些水果。"
PAGES = [p for p in page_names() if p != "train"]


@pytest.mark.parametrize("model, page, lang", [
    *((MODERN, p, lang) for p in PAGES for lang in ("en", "zh")),
    *((QWEN3, p, "en") for p in PAGES), *((QWEN3, p, "zh") for p in ("attention", "model", "ffn"))])
def test_every_page_renders_for_today_s_decoders(model, page, lang):
    with harness_language(lang):
        at = open_app(page, model=model, text=TEXT, lang=lang)
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]


def test_positions_page_shows_rope_angles_and_offset_only_scores():
    at = open_app("embeddings", model=MODERN, text=TEXT)
    angles = array(figure(at, "emb_rope_angles")["data"][0]["z"])
    model = catalog.load(MODERN, "cpu")[0]
    hs, theta = model.cfg.head_dim, model.cfg.rope_theta
    p, i = 5, 3
    assert abs(angles[p, i] - np.cos(p * theta ** (-2 * i / hs))) < 1e-5
    curves = figure(at, "emb_rope_offsets")["data"]
    assert len(curves) == 3
    first = array(curves[0]["y"])
    assert all(np.abs(array(c["y"]) - first).max() < 1e-3 for c in curves[1:])  # the offset only


def test_rope_scores_equal_the_attention_page_scores_of_the_model():
    """The offset demo's rotation is the model's: q·k at the real positions equals the traced raw score."""
    from transformer_core import trace_text

    model = catalog.load(MODERN, "cpu")[0]
    prep, trace = trace_text(model, TEXT)
    stages = trace.attention("dec_self", 0)
    qi, ki, head = 7, 2, 1
    curve = rope_offset_scores(stages.head("q", head)[qi], stages.head("k", head)[ki], model.cfg.rope_theta,
                               range(qi - ki, qi - ki + 1), (ki,))[ki]
    assert abs(curve[0] - float(stages.head("scores", head)[qi, ki])) < 1e-4
    assert torch.equal(stages.head("k", 0), stages.head("k", 1))  # heads 0 and 1 share K/V head 0


def test_ffn_page_shows_swiglu_gate_up_product_and_both_norms():
    from transformer_core import trace_text
    from transformer_core.analysis.residual import norm_pair
    from transformer_core.model.hooks import act_name

    at = open_app("ffn", model=MODERN, text=TEXT)
    model = catalog.load(MODERN, "cpu")[0]
    _, trace = trace_text(model, TEXT)
    pos = trace.src_ids.size(1) - 1  # the page's default token: the last
    gate = trace[act_name("ffn_gate", layer=0)][0, pos]
    up = trace[act_name("ffn_up", layer=0)][0, pos]
    hidden = trace[act_name("ffn_hidden", layer=0)][0, pos]
    assert torch.allclose(gate * up, hidden, atol=1e-6)
    dots = figure(at, "ffn_gate_up")["data"][0]
    assert np.abs(array(dots["x"]) - gate.numpy()).max() < 1e-5 and np.abs(array(dots["y"]) - up.numpy()).max() < 1e-5
    from transformer_core.analysis.residual import GATE_OPEN, gate_up

    gu = gate_up(trace, "decoder", 0, pos)  # the open share and the top units, against the hooked tensors
    assert gu.open_share == pytest.approx(float((gate.abs() > GATE_OPEN).float().mean()))
    assert gu.top == sorted(range(gate.numel()), key=lambda i: -abs(float(hidden[i])))[:12]
    shown = next(df.value for df in at.dataframe if "gate ⊙ up" in df.value.columns)
    assert list(shown.iloc[:, 0]) == gu.top
    # SiLU is no 0-1 gate: the text says so, and cites this token's range and share recomputed from the hooks
    said = next(m.value for m in at.markdown if m.value.startswith("This FFN is gated"))
    assert "not a 0-to-1 switch" in said and "gates open" not in said
    assert f"runs from {float(gate.min()):.2f} to {float(gate.max()):.2f}" in said
    assert f"{float((gate.abs() > GATE_OPEN).float().mean()) * 100:.0f}% of the units have |SiLU(gate·x)| above" in said
    # both norms of the FFN's input, against torch's own modules (an independent path)
    x = trace[act_name("addnorm_in", layer=0, block="dec_ffn", cross=False)][0, pos]
    pair = norm_pair(x, 1e-5)
    ln = torch.nn.LayerNorm(x.numel(), eps=1e-5, elementwise_affine=False)(x)
    rms = torch.nn.RMSNorm(x.numel(), eps=1e-5, elementwise_affine=False)(x)
    assert (pair.layer_norm - ln).abs().max() < 1e-5 and (pair.rms_norm - rms).abs().max() < 1e-5
    lines_ = figure(at, "ffn_two_norms")["data"]
    assert [d["name"] for d in lines_][1:] == ["LayerNorm", "RMSNorm"]
    assert np.abs(array(lines_[2]["y"]) - rms.numpy()[:64]).max() < 1e-5
    check = next(c.value for c in at.caption if c.value.startswith("Check: the model's own RMSNorm"))
    assert float(check.rsplit("within ", 1)[1].rstrip(".")) < 1e-5  # the model's output = g ⊙ RMSNorm(x)


def test_attention_page_says_which_query_heads_share_each_kv_head():
    at = open_app("attention", model=MODERN, text=TEXT, head="3")
    shared = next(df.value for df in at.dataframe if "K/V head" in df.value.columns)
    assert shared["K/V head"].tolist() == [0, 1] and shared.iloc[:, 1].tolist() == ["0, 1", "2, 3"]
    assert any("Head 3 reads K/V head 1" in m.value for m in at.markdown)


def test_model_page_puts_the_course_beside_the_modern_decoder():
    at = open_app("model", model=MODERN, text=TEXT)
    shown = [m.value for m in at.markdown]
    assert "**RoPE: q and k rotated by position (base 10,000)**" in shown and "sine/cosine PE added to x" in shown
    assert "**4 query heads share 2 K/V heads (GQA)**" in shown and "4 heads, each with its own K and V" in shown
    assert any("SwiGLU" in m for m in shown) and any("RMSNorm x / rms(x)" in m for m in shown)
    with harness_language("zh"):
        zh = open_app("model", model=MODERN, text=TEXT, lang="zh")
    assert "**RoPE：按位置旋转 q 和 k（基数 10,000）**" in [m.value for m in zh.markdown]
    course = open_app("model", model="preset:course-gpt@cl100k_base", text=TEXT)
    assert not any(m.value.startswith("**") and "RoPE" in m.value for m in course.markdown)


def test_kv_cache_layout_of_a_gqa_model_is_the_real_cache_and_smaller():
    from transformer_core import prepare
    from transformer_core.analysis.kv_steps import cache_layout, cache_report

    model = catalog.load(MODERN, "cpu")[0]
    dec = prepare(model, TEXT).src_ids[0].tolist()[:12]
    rep = cache_report(model, dec, repeats=1)
    assert rep.max_abs_diff < 1e-4 and rep.layers == cache_layout(model, len(dec))
    course = model.cfg.replace(n_kv_heads=0)
    assert rep.layers[0].self_shape == (1, 2, len(dec), course.head_dim)  # 2 K/V heads cached, not 4


@pytest.mark.parametrize("key", [MODERN, "shipped:everyday-gpt", "shipped:dates-zh"])
def test_model_view_holds_every_heads_weights_in_a_light_mosaic(key):
    from transformer_core import prepare
    from transformer_core.analysis.all_heads import model_view
    from transformer_core.analysis.blocks import block_weights, kinds

    model = catalog.load(key, "cpu")[0]
    tgt = "=2026年11月23日" if model.is_encoder_decoder else None
    prep = prepare(model, "23 November 2026" if tgt else TEXT, tgt)
    kind = kinds(model)[-1]
    view = model_view(model, prep.src_ids, prep.tgt_ids, kind)
    weights = block_weights(model, prep.src_ids, prep.tgt_ids)  # an independent forward, every block's weights
    for layer in range(model.cfg.n_layers):
        for head in range(model.cfg.n_heads):
            w = weights[(kind, layer)][0, head].numpy()
            got = view.thumbnail(layer, head)[: w.shape[0], : w.shape[1]]
            shown = ~np.isnan(got)
            assert np.abs(got[shown] - w[shown]).max() <= 0.5 / 254 + 1e-6  # one byte per weight
            if kind == "dec_self":
                assert np.isnan(got[np.triu_indices(w.shape[0], 1)]).all()  # masked above the diagonal


def test_model_view_of_twelve_by_twelve_heads_at_64_tokens_stays_under_a_megabyte():
    import json

    from transformer_core.analysis.all_heads import model_view
    from transformer_core.model.config import TransformerConfig
    from transformer_core.model.transformer import build_model
    from ui.head_view import model_view_figure

    model = build_model(TransformerConfig(arch="decoder_only", d_model=96, n_heads=12, n_layers=12, d_ffn=64,
                                          vocab_size=500, max_len=200, dropout=0.0))
    view = model_view(model, torch.randint(0, 500, (1, 150)), None, "dec_self")
    assert view.step == 3 and view.size == 50  # 150 tokens pooled to 50 per side
    fig = model_view_figure(view, [str(h) for h in range(12)], [str(i) for i in range(12)])
    assert len(json.dumps(fig.to_plotly_json(), default=str)) < 1_000_000
    view64 = model_view(model, torch.randint(0, 500, (1, 64)), None, "dec_self")
    assert view64.mosaic.nbytes < 800_000 and view64.size == 64


def test_head_view_html_escapes_text_and_stays_light():
    from ui.head_view import head_view_data, page_html

    w = torch.softmax(torch.randn(12, 64, 64), -1).numpy()
    labels = ["</script><img src=x onerror=alert(1)>"] + [f"t{i}" for i in range(63)]
    html = page_html(head_view_data(w, labels, labels, [f"head {h}" for h in range(12)]))
    assert "<img" not in html and "</script><" not in html.split('type="application/json">')[1].split("</script>")[0]
    assert len(html.encode()) < 1_000_000


def test_attention_page_opens_all_heads_and_a_click_on_the_model_view_opens_that_head():
    at = open_app("attention", model="shipped:everyday-gpt", text=TEXT)
    at.session_state["att_all_open"] = True
    at.run()
    assert not at.exception, at.exception
    assert any("att_model_view" in c.proto.id for c in at.get("plotly_chart"))
    buttons = [b.proto.id for b in at.get("download_button")]  # the model view and head view take their numbers home
    assert any("xp_npz_model_view" in b for b in buttons) and any("xp_npz_head_view" in b for b in buttons), buttons
    assert sum("arrays_of(result)" in c.value for c in at.code) >= 2


def test_ffn_page_exports_the_neuron_it_reads():
    from transformer_core import trace_text
    from transformer_core.analysis.neurons import read_neuron, shipped_index

    at = open_app("ffn", model="shipped:modern-gpt", text=TEXT)
    assert not at.exception, at.exception
    assert not any("xp_npz_neuron" in b.proto.id for b in at.get("download_button"))  # built when opened
    open_export(at, "neuron")
    assert any("xp_npz_neuron" in b.proto.id for b in at.get("download_button"))
    code = next(c.value for c in at.code if "read_neuron" in c.value)
    ns = {}
    exec(compile(code, "neuron snippet", "exec"), ns)  # the snippet the page shows recomputes the page's reading
    layer, neuron = (int(x) for x in ns["arrays"]["layer_neuron"])
    model, _ = catalog.load("shipped:modern-gpt", "cpu")[:2]
    reading = read_neuron(model, trace_text(model, TEXT)[1], layer, neuron, shipped_index("modern-gpt"))
    assert np.allclose(ns["arrays"]["on_text"], reading.on_text) and len(reading.snippets) >= 20
    assert list(ns["arrays"]["snippet_before"]) == [s.before for s in reading.snippets]
    assert np.array_equal(ns["arrays"]["histogram_counts"], reading.histogram.counts)
    shown = next(h.proto.body for h in at.get("html") if "nr-examples" in h.proto.body)
    assert shown.count("border-bottom") == len(reading.snippets)  # one row per example


def test_ffn_page_checks_a_layernorm_with_its_bias_against_torch():
    """The default's pre-norm LayerNorm has a gain and a bias: its output is g ⊙ formula + b (found 6.4e-01 off when
    the page left b out)."""
    from transformer_core import trace_text
    from transformer_core.model.hooks import act_name

    at = open_app("ffn", model="shipped:everyday-gpt", text=TEXT)
    assert not at.exception, at.exception
    check = next(c.value for c in at.caption if c.value.startswith("Check: the model's own LayerNorm"))
    assert "+ b" in check and float(check.rsplit("within ", 1)[1].rstrip(".")) < 1e-5
    model, _ = catalog.load("shipped:everyday-gpt", "cpu")[:2]
    trace = trace_text(model, TEXT)[1]
    pos = trace.src_ids.size(1) - 1  # the page's default token (the last) and layer (0)
    x = trace[act_name("addnorm_in", layer=0, block="dec_ffn", cross=False)][0, pos]
    normed = trace[act_name("addnorm_normed", layer=0, block="dec_ffn", cross=False)][0, pos]
    ln = model.decoder.layers[0].addnorm2.ln
    with torch.inference_mode():
        ours = torch.nn.functional.layer_norm(x.float(), (x.numel(),), ln.weight.float(), ln.bias.float(), ln.eps)
        no_bias = ln.weight.float() * torch.nn.functional.layer_norm(x.float(), (x.numel(),), eps=ln.eps)
    assert (ours - normed.float()).abs().max() < 1e-4  # torch's LayerNorm with g and b is the model's output
    assert (ours - no_bias).abs().max() > 0.01  # without b it is not: the bias matters here


@pytest.mark.parametrize("key, norm_first", [("shipped:everyday-gpt", True), (MODERN, True),
                                             ("preset:course-base@cl100k_base", False)])
def test_ffn_and_home_pages_state_the_models_own_norm_order(key, norm_first):
    """Pre-norm models (the default, today's decoders) read x + Sublayer(Norm(x)); the course's post-norm model
    Norm(x + Sublayer(x)): the formula, the look-for box and the whole-model picture's boxes say which."""
    model = catalog.load(key, "cpu")[0]
    assert model.cfg.norm_first is norm_first
    at = open_app("ffn", model=key, text=TEXT)
    assert not at.exception, at.exception
    formula = at.latex[0].value
    norm = "RMSNorm" if model.cfg.norm == "rmsnorm" else "LayerNorm"
    pre, post = rf"x + \mathrm{{Sublayer}}\big(\mathrm{{{norm}}}(x)\big)", rf"\mathrm{{{norm}}}\big(x + \mathrm"
    assert (pre in formula) is norm_first and (post in formula) is not norm_first, formula
    look = next(i.value for i in at.info if i.value.startswith("What to look for"))
    assert ("pre-norm" in look) is norm_first and ("post-norm" in look) is not norm_first
    home = open_app("home", model=key, text=TEXT)
    hint = next(c.value for c in home.caption if "residual connections" in c.value)
    assert ("pre-norm" in hint) is norm_first
    drawn = json.dumps(figure(home, "model_map_0"), ensure_ascii=False)
    boxes = set(re.findall(r"Add(?: & Norm)?", drawn))  # each sub-layer's residual box, as titled in the picture
    assert boxes == ({"Add"} if norm_first else {"Add & Norm"}), boxes


def test_architecture_rows_for_any_head_count():
    """SmolLM2-135M has 9 heads of 64 (d_model 576): the course's side is drawn at the model's own sizes."""
    from transformer_core.analysis.architecture import architecture_rows
    from transformer_core.model.config import TransformerConfig

    cfg = TransformerConfig(arch="decoder_only", d_model=576, n_heads=9, n_kv_heads=3, n_layers=2, d_ffn=1536,
                            positional="rope", norm="rmsnorm", ffn="gated", activation="silu", qkv_bias=False,
                            linear_bias=False, norm_first=True, final_norm=True, tie_embeddings=True)
    rows = {r.part: r for r in architecture_rows(cfg)}
    assert rows["attention"].this == ("arch_attn_gqa", {"h": 9, "kv": 3}) and rows["attention"].changed
    assert all(r.changed for p, r in rows.items() if p not in ("head_width", "qk_norm"))  # Qwen3's two: not Llama's
    assert not rows["head_width"].changed and not rows["qk_norm"].changed
    assert rows["head_width"].this == ("arch_hd_split", {"hd": 64, "d": 576, "h": 9, "w": 576})


def _decodes(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_the_tokens_a_neuron_writes_towards_and_against_explain_their_byte_pieces():
    """"Writes against" listed byte tokens ("‹E7 A1›") unexplained: a caption says what a piece of a character is
    and, for each piece listed, which characters it can begin (recomputed here from its bytes) or that it ends one."""
    from transformer_core import load_model
    from transformer_core.analysis.neurons import output_tokens
    from transformer_core.text.inputs import real_ids, token_labels
    from transformer_core.text.tokenizer import load_encoding, token_bytes
    from ui.figures import md_quoted

    model, _ = load_model("everyday-gpt")
    enc = load_encoding(model.cfg.encoding)
    def pieces(raws):
        return sum(1 for r in raws if not _decodes(r))

    for neuron in range(model.cfg.d_ffn):  # the first neuron of layer 0 that writes towards / against two pieces
        up, down = output_tokens(model, 0, neuron, 10)
        ids = [i for i, _ in up + down]
        raws = [token_bytes(enc, r) for r in real_ids(model, ids)]
        if pieces(raws) >= 2:
            break
    at = open_app("ffn", model="shipped:everyday-gpt", text="我们今天去公园散步")
    at.selectbox(key=f"nr_layer_{model.cfg.n_layers}").set_value(0).run()
    at.number_input(key=f"nr_neuron_{model.cfg.d_ffn}").set_value(neuron).run()
    assert not at.exception
    note = next(c.value for c in at.caption if c.value.startswith("A token in ‹ › is only part of a character"))
    checked = 0
    for raw, label in zip(raws, token_labels(model, ids), strict=True):
        try:
            raw.decode("utf-8")
            continue
        except UnicodeDecodeError:
            pass
        lead = max((k for k, b in enumerate(raw) if b & 0xC0 != 0x80), default=None)
        if lead is None:
            assert f"{md_quoted(label)} is the end of a character" in note
        else:  # every character whose UTF-8 starts with the piece's last bytes
            tail = raw[lead:]
            chars = [chr(c) for c in range(0x80, 0x110000) if not 0xD800 <= c < 0xE000
                     and chr(c).encode("utf-8").startswith(tail)]
            # the first and last quoted as a token is (a blank U+2000 was written as it is)
            assert (f"{md_quoted(label)} begins one of {len(chars):,} characters, {md_quoted(chars[0])} to "
                    f"{md_quoted(chars[-1])}") in note
        checked += 1
    assert checked >= 2


def test_attention_page_shows_what_qk_norm_does_with_numbers_from_the_hooks():
    from transformer_core import trace_text
    from transformer_core.model.positional import RotaryEmbedding

    at = open_app("attention", model=QWEN3, text=TEXT)
    model = catalog.load(QWEN3, "cpu")[0]
    _, trace = trace_text(model, TEXT)
    stages = trace.attention("dec_self", 0)  # the page's default view: layer 0, head 0
    q, k = stages.q[0, 0], stages.k[0, 0]  # (T, 32) before the norms: head 0 reads K/V head 0
    lengths = {c["name"]: array(c["y"]) for c in figure(at, "att_qkn_lengths")["data"]}
    assert np.abs(lengths["|q| before"] - q.norm(dim=-1).numpy()).max() < 1e-4
    assert np.abs(lengths["|k| after"] - stages.k_normed[0, 0].norm(dim=-1).numpy()).max() < 1e-4
    # without the norms, by hand: RoPE on the raw q and k, q·k/√32, the causal mask, a softmax
    rope = RotaryEmbedding(32, model.cfg.rope_theta)
    s = rope(q[None, None])[0, 0] @ rope(k[None, None])[0, 0].T / 32 ** 0.5
    s = s.masked_fill(~torch.ones_like(s, dtype=torch.bool).tril(), float("-inf")).softmax(-1)
    assert np.abs(array(figure(at, "att_qkn_without")["data"][0]["z"]) - s.numpy()).max() < 1e-4
    with_ = array(figure(at, "att_qkn_with")["data"][0]["z"])
    assert np.abs(with_ - stages.weights[0, 0].numpy()).max() < 1e-4
    said = next(m.value for m in at.markdown if m.value.startswith("Before q·k, this model"))
    norms = q.norm(dim=-1)
    assert f"from {float(norms.min()):.2f} to {float(norms.max()):.2f}" in said
    # the course's preset has no QK-norm: no such section
    plain = open_app("attention", model=MODERN, text=TEXT)
    assert not any(m.value.startswith("Before q·k, this model") for m in plain.markdown)


def test_model_page_puts_qwen3_beside_qwen25_and_the_course():
    at = open_app("model", model=QWEN3, text=TEXT)
    cells = [m.value for m in at.markdown]
    assert "**Qwen2.5-0.5B**" in cells and "**Qwen3-0.6B**" in cells
    assert "128, set on its own: 16 × 128 = 2048, not d_model 1024" in cells  # Qwen3-0.6B's published heads
    assert "d_model ÷ heads = 64" in cells  # Qwen2.5-0.5B: 896 / 14
    assert "**32, set on its own: 4 × 32 = 128, not d_model 64**" in cells  # this model, bold: not the course's
    assert cells.count("RMSNorm over each head's q and k first (QK-norm)") == 1  # Qwen3's column; this one's is bold
    assert "**RMSNorm over each head's q and k first (QK-norm)**" in cells
    ffn = open_app("ffn", model=QWEN3, text=TEXT)
    assert "**Qwen3-0.6B**" in [m.value for m in ffn.markdown]


def test_the_parts_table_says_its_course_column_is_drawn_at_this_model_s_sizes():
    """The column "The course (2017)" read "W₂ ReLU(W₁x), d_ffn 1536" for the default model, where the course's FFN
    is 2048 wide: the column draws the course's design at this model's sizes (so that only the design is compared),
    and its heading says so."""
    model = catalog.load("shipped:everyday-gpt", "cpu")[0]
    assert model.cfg.d_ffn != 2048
    at = open_app("ffn", model="shipped:everyday-gpt", text=TEXT)
    assert not at.exception
    shown = [m.value for m in at.markdown]
    assert f"**{EN['mdl_vs_course_col']}**" in shown and "at this model's sizes" in EN["mdl_vs_course_col"]
    assert f"W₂ ReLU(W₁x), d_ffn {model.cfg.d_ffn}" in shown
