"""Direct logit attribution and the lens's rank / KL, recomputed here through an independent path: forward hooks
written in this test on the modules (not the model's hook points), a plain forward, and the formulas by hand."""
import json

import numpy as np
import pytest
import torch

from harness.apptest import array, figure, no_pages_dir_mode, open_app
from service import catalog
from transformer_core import prepare, trace_text
from transformer_core.analysis.attribution import direct_logit_attribution
from transformer_core.analysis.logit_lens import lens_from_trace
from transformer_core.errors import InputError

TEXT = "The weather was nice, so we walked to the park and"
MODELS = ["shipped:everyday-gpt", "preset:course-gpt-modern@cl100k_base",
          "preset:course-gpt-modern@cl100k_base|layernorm"]


def load(key: str):
    key, _, variant = key.partition("|")
    model = catalog.load(key, "cpu")[0]
    if variant == "layernorm":  # the same modern model with a final LayerNorm (GPT-2's): centred parts
        from transformer_core.model.transformer import build_model

        model = build_model(model.cfg.replace(norm="layernorm"), "cpu")
        with torch.no_grad():
            model.decoder.norm.bias.normal_(0, 0.5)
            model.decoder.norm.weight.normal_(1, 0.3)
    return model


def parts_by_hooks(model, ids: torch.Tensor, pos: int) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """What each module wrote at `pos`, captured by plain PyTorch forward hooks, and the final residual and logits."""
    seen, handles = {}, []

    def keep(name, what):
        def hook(module, inputs, output):
            seen[name] = (inputs[0] if what == "in" else output)[0, pos].detach().double()
        return hook

    handles.append(model.decoder.embed.register_forward_hook(keep("embed", "out")))
    for i, layer in enumerate(model.decoder.layers):
        handles.append(layer.self_attn.W_o.register_forward_hook(keep(f"concat{i}", "in")))
        handles.append(layer.ffn.register_forward_hook(keep(f"ffn{i}", "out")))
        handles.append(layer.register_forward_hook(keep(f"resid{i}", "out")))
    with torch.no_grad():
        logits = model(ids)
    for h in handles:
        h.remove()
    return seen, seen[f"resid{model.cfg.n_layers - 1}"], logits[0, pos].double()


@pytest.mark.parametrize("key", MODELS)
def test_direct_logit_attribution_equals_hand_computed_shares_and_sums_to_the_logit(key):
    model = load(key)
    prep, trace = trace_text(model, TEXT)
    ids, pos = prep.src_ids, prep.src_ids.size(1) - 2
    token = int(trace.logits[0, pos].argmax())
    got = direct_logit_attribution(model, trace, pos, token)
    seen, final, logits = parts_by_hooks(model, ids, pos)
    w = model.out.weight[token].detach().double()
    norm = model.decoder.norm
    if isinstance(norm, torch.nn.Identity):
        def share(x):
            return float(w @ x)
    elif isinstance(norm, torch.nn.LayerNorm):
        sigma = torch.sqrt(final.var(unbiased=False) + norm.eps)

        def share(x):
            return float(w @ (norm.weight.detach().double() * (x - x.mean()))) / float(sigma)
    else:
        rms = torch.sqrt((final * final).mean() + norm.eps)

        def share(x):
            return float(w @ (norm.weight.detach().double() * x)) / float(rms)
    hs = model.cfg.head_dim
    for i, layer in enumerate(model.decoder.layers):
        W_o = layer.self_attn.W_o.weight.detach().double()
        for h in range(model.cfg.n_heads):
            z = seen[f"concat{i}"][h * hs:(h + 1) * hs]
            assert got.heads[i, h] == pytest.approx(share(W_o[:, h * hs:(h + 1) * hs] @ z), abs=1e-4)
        assert got.ffn[i] == pytest.approx(share(seen[f"ffn{i}"]), abs=1e-4)
    assert got.embed == pytest.approx(share(seen["embed"]), abs=1e-4)
    assert got.logit == pytest.approx(float(logits[token]), abs=1e-4)
    assert abs(got.residue) < 1e-3 and got.total == pytest.approx(float(logits[token]), abs=1e-3)


def test_direct_logit_attribution_refuses_a_post_norm_model_with_a_message():
    model = catalog.load("preset:course-gpt@cl100k_base", "cpu")[0]
    _, trace = trace_text(model, TEXT)
    with pytest.raises(InputError) as info:
        direct_logit_attribution(model, trace, 0, 5)
    assert info.value.code == "dla_post_norm"


@pytest.mark.parametrize("key", MODELS[:2])
def test_lens_rank_and_kl_to_final_match_a_full_softmax_of_each_layer(key):
    model = load(key)
    prep, trace = trace_text(model, TEXT)
    lens = lens_from_trace(model, trace, k=3)
    pos = prep.src_ids.size(1) - 1
    seen, _, logits = parts_by_hooks(model, prep.src_ids, pos)
    final = torch.log_softmax(logits, -1)
    own = int(logits.argmax())
    for row, name in enumerate(["embed"] + [f"resid{i}" for i in range(model.cfg.n_layers)]):
        with torch.no_grad():
            layer_logits = model.out(model.decoder.norm(seen[name].float())).double()
        logp = torch.log_softmax(layer_logits, -1)
        assert int(lens.final_rank[row, pos]) == int((layer_logits > layer_logits[own]).sum()) + 1
        kl = float((final.exp() * (final - logp)).sum())
        assert float(lens.kl[row, pos]) == pytest.approx(kl, abs=1e-3 + 1e-3 * kl)
    assert int(lens.final_rank[-1, pos]) == 1 and float(lens.kl[-1, pos]) == 0.0  # the model's own answer


def test_lens_page_draws_the_attribution_bars_and_the_rank_and_kl_curves():
    with no_pages_dir_mode():
        at = open_app("lens", model="shipped:everyday-gpt", text=TEXT)
        assert not at.exception and not at.error
        bars = figure(at, "dla_bars")["data"]
        model = load(MODELS[0])
        assert len([b for b in bars if b["type"] == "bar"]) == model.cfg.n_heads + 4  # + W_O bias, FFN, embed, const
        total = sum(np.sum(b["y"]) for b in bars if b["type"] == "bar")
        _, trace = trace_text(model, TEXT)
        pos = trace.decoder_ids.numel() - 1
        logit = float(trace.logits[0, pos].max())  # the default token: the model's top choice at the last position
        assert abs(total - logit) < 1e-3  # the bars add up to the logit
        looks = [json.dumps(b["marker"], sort_keys=True) for b in bars if b["type"] == "bar"]
        assert len(set(looks)) == len(looks)  # no two parts share a colour and hatch in the legend
        from ui.chart_theme import HEAD_COLOURS  # the head view's colours too: a head looks the same on both pages
        assert [b["marker"]["color"] for b in bars[:model.cfg.n_heads]] == list(HEAD_COLOURS[:model.cfg.n_heads])
        assert figure(at, "lens_rank")["data"][0]["y"][-1] == 1
        course = open_app("lens", model="preset:course-gpt@cl100k_base", text=TEXT)
        assert not course.exception and any("pre-norm" in m for m in [w.value for w in course.warning])


@pytest.mark.parametrize(("metric", "mode", "key"), [
    ("logit_diff", "zero", "shipped:everyday-gpt"), ("prob", "zero", "shipped:everyday-gpt"),
    ("loss", "zero", "shipped:everyday-gpt"), ("logit_diff", "mean", "shipped:everyday-gpt"),
    ("loss", "zero", "preset:course-gpt-modern@cl100k_base")])  # RoPE, RMSNorm, SwiGLU, GQA, a final norm
def test_head_effects_equal_one_ablation_at_a_time(metric, mode, key):
    """The batched sweep (each layer's parts resumed from the intact stream entering that layer) against the ablation
    tool run alone for a few heads and an FFN (an independent whole forward)."""
    from transformer_core import prepare
    from transformer_core.analysis.head_effects import head_effects
    from transformer_core.analysis.interventions import ablation_edits, intervene

    model = catalog.load(key, "cpu")[0]
    prep = prepare(model, "When Mary and John went to the store, John gave a drink to")
    a, b = 11, 12
    res = head_effects(model, prep, metric, a if metric != "loss" else None, b if metric == "logit_diff" else None,
                       mode=mode)

    def value(logits):
        last = logits[0, -1].double()
        if metric == "logit_diff":
            return float(last[a] - last[b])
        if metric == "prob":
            return float(torch.softmax(last, -1)[a])
        return float(torch.nn.functional.cross_entropy(logits[0, :-1].double(), prep.src_ids[0, 1:]))

    with torch.no_grad():
        intact = value(model(prep.src_ids))
    assert res.intact == pytest.approx(intact, abs=1e-5)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    for layer, head in [(0, 2), (L - 1, H - 1), (1, H // 2)]:
        with intervene(ablation_edits(model, [("dec_self", layer, head)], mode=mode)), torch.no_grad():
            edited = value(model(prep.src_ids))
        assert res.heads["dec_self"][layer, head] == pytest.approx(edited - intact, abs=1e-5)
    with intervene(ablation_edits(model, ffn_layers=[("decoder", 2)], mode=mode)), torch.no_grad():
        assert res.ffn[2] == pytest.approx(value(model(prep.src_ids)) - intact, abs=1e-5)


def test_the_sweep_runs_each_layers_attention_once_for_the_parts_it_knocks_out():
    """A layer's knock-outs share its Q, K, V and attention (they differ from its z on): W_q of layer j reads one
    stream for the intact run and for layer j's own parts, and n streams for each earlier layer's parts."""
    from transformer_core import prepare
    from transformer_core.analysis.head_effects import head_effects

    model = catalog.load("shipped:everyday-gpt", "cpu")[0]
    prep = prepare(model, "When Mary and John went to the store, John gave a drink to")
    batches = {j: [] for j in range(model.cfg.n_layers)}
    handles = [layer.self_attn.W_q.register_forward_hook(lambda _m, x, _o, j=j: batches[j].append(x[0].size(0)))
               for j, layer in enumerate(model.decoder.layers)]
    try:
        head_effects(model, prep, "logit_diff", 11, 12)
    finally:
        for handle in handles:
            handle.remove()
    n = model.cfg.n_heads + 1  # a layer's heads and its FFN
    assert batches == {j: [1, *[n] * j, 1] for j in range(model.cfg.n_layers)}


def test_head_effects_of_an_encoder_decoder_equal_one_ablation_at_a_time():
    """Encoder-decoder (whole forwards: an encoder head moves the memory every decoder layer reads)."""
    from transformer_core import prepare
    from transformer_core.analysis.head_effects import head_effects
    from transformer_core.analysis.interventions import ablation_edits, intervene

    model = catalog.load("shipped:reverse", "cpu")[0]
    prep = prepare(model, "d a c b", "= b c a")
    res = head_effects(model, prep, "loss")
    ids = prep.tgt_ids[0]

    def loss():
        with torch.no_grad():
            logits = model(prep.src_ids, prep.tgt_ids)[0, :-1].double()
        return float(torch.nn.functional.cross_entropy(logits, ids[1:]))

    intact = loss()
    assert res.intact == pytest.approx(intact, abs=1e-5)
    for kind in ("enc_self", "dec_self", "cross"):
        with intervene(ablation_edits(model, [(kind, 0, 1)])):
            assert res.heads[kind][0, 1] == pytest.approx(loss() - intact, abs=1e-5)


def test_intervene_page_draws_the_head_effects_grid():
    with no_pages_dir_mode():
        at = open_app("intervene", model="shipped:everyday-gpt", text=TEXT)
        assert not at.exception and not at.error
        fig = next(f for f in at.get("plotly_chart") if "he_grid" in f.proto.id)
        data = json.loads(fig.proto.spec)["data"]
        model = catalog.load("shipped:everyday-gpt", "cpu")[0]
        assert array(data[0]["z"]).shape == (model.cfg.n_layers, model.cfg.n_heads + 1)
        assert any(m.value.startswith("Intact, logit(A) − logit(B) is") for m in at.markdown)
        z = array(data[0]["z"]).astype(float)
        largest = float(np.nanmax(np.abs(z)))
        written = f"{largest:{data[0]['texttemplate'][4:-1]}}"  # "%{z:+.Nf}": the largest change as a cell shows it
        assert abs(float(written)) >= 0.95 * largest and len(written.strip("+-0.")) >= 2  # two significant digits


def test_cells_show_small_changes_with_two_significant_digits():
    from ui.figures import signed_format

    assert [f"{x:{signed_format(x)}}" for x in (3.2, 0.046, 0.0046, -0.00046)] == ["+3.20", "+0.046", "+0.0046",
                                                                                 "-0.00046"]
    assert signed_format(0.0) == "+.2f"


@pytest.mark.parametrize("key", ["shipped:everyday-gpt", "preset:course-gpt-modern@cl100k_base"])
def test_residual_patching_grid_equals_one_patch_at_a_time_by_hooks(key):
    """The batched grid against single patches done with plain forward hooks on the decoder layers (the modern
    preset has a final norm: the last row is patched before it)."""
    from transformer_core import prepare
    from transformer_core.analysis.head_effects import residual_effects

    model = catalog.load(key, "cpu")[0]
    a = prepare(model, "When Mary and Jack went to the store, Jack gave a drink to")
    b = prepare(model, "When Mary and Jack went to the store, Mary gave a drink to")  # names of equal length
    token = int(model(a.src_ids)[0, -1].argmax())
    res = residual_effects(model, a, b, "prob", token)
    seen = {}
    rows = [model.decoder.embed, *model.decoder.layers]  # row 0: the embeddings; row l + 1: layer l's output
    hooks = [module.register_forward_hook(lambda m, i, o, n=n: seen.__setitem__(n, o.detach()))
             for n, module in enumerate(rows)]
    with torch.no_grad():
        model(b.src_ids)
    for h in hooks:
        h.remove()

    def prob_with(row: int, pos: int) -> float:
        def patch(m, i, o):
            o = o.clone()
            o[0, pos] = seen[row][0, pos]
            return o
        handle = rows[row].register_forward_hook(patch)
        with torch.no_grad():
            p = float(torch.softmax(model(a.src_ids)[0, -1].double(), -1)[token])
        handle.remove()
        return p

    with torch.no_grad():
        intact = float(torch.softmax(model(a.src_ids)[0, -1].double(), -1)[token])
    T = a.src_ids.size(1)
    L = model.cfg.n_layers
    for row, pos in [(1, 10), (L - 1, T - 1), (L, T - 1), (2, 3), (0, 5), (0, T - 1)]:
        # float32: the grid's batched forwards against one patched run each
        assert res.grid[row, pos] == pytest.approx(prob_with(row, pos) - intact, abs=1e-5)
    assert res.grid[-1, -1] == pytest.approx(res.source - res.intact, abs=1e-5)  # the whole difference


def test_intervene_page_draws_the_residual_patching_grid_on_request():
    a = "When Mary and Jack went to the store, Jack gave a drink to"  # " M|ary", " J|ack": the same token count
    b = "When Mary and Jack went to the store, Mary gave a drink to"
    with no_pages_dir_mode():
        at = open_app("intervene", model="shipped:everyday-gpt", text=a)
        at.text_area(key="iv_text_b").input(b).run()
        assert not [f for f in at.get("plotly_chart") if "rp_grid" in f.proto.id]  # not before it is asked for
        at.toggle(key="rp_run").set_value(True).run()
        assert not at.exception and not at.error
        grid = figure(at, "rp_grid")
        model = catalog.load("shipped:everyday-gpt", "cpu")[0]
        z = array(grid["data"][0]["z"])
        assert z.shape == (model.cfg.n_layers + 1, prepare(model, a).src_ids.size(1))
        at.text_area(key="iv_text_b").input("Something else entirely").run()
        assert not at.exception and any("same number of tokens" in w.value for w in at.warning)
