"""The forward's two shortcuts for analyses that run many forwards, against the step-by-step path: PyTorch's fused
attention (hooks.fused_attention) where nobody observes the attention maps, and a resumed decoder's last layer run on
the last row only (Transformer.resume(last_only=True))."""
import pytest
import torch

from service import catalog
from transformer_core import prepare
from transformer_core.model.hooks import act_name, fused_attention, intervene, observed
from transformer_core.model.trace import run, run_with_trace

TEXT = "The weather was nice, so we walked to the park and"
# the course's post-norm decoder with sinusoidal positions; the default (pre-norm); today's (RoPE, RMSNorm, GQA)
MODELS = ["preset:course-gpt@cl100k_base", "shipped:everyday-gpt", "preset:course-gpt-modern@cl100k_base"]


@pytest.fixture(scope="module", params=MODELS)
def model_ids(request):
    model = catalog.load(request.param, "cpu")[0]
    return model, prepare(model, TEXT).src_ids  # (1, T) a decoder-only model reads them


def stream_in(model, ids, layer: int) -> torch.Tensor:
    """The residual stream entering decoder layer `layer` (the embeddings when 0), by a plain forward hook."""
    seen = {}
    module = model.decoder.layers[layer] if layer < model.cfg.n_layers else model.decoder.norm
    handle = module.register_forward_pre_hook(lambda m, inputs: seen.setdefault("x", inputs[0].detach()))
    try:
        run(model, ids)
    finally:
        handle.remove()
    return seen["x"]


def test_fused_attention_runs_where_allowed_and_nothing_watches_and_equals_the_step_by_step_forward(model_ids,
                                                                                                    monkeypatch):
    model, ids = model_ids
    calls = []
    fused = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda *a, **k: calls.append(1) or fused(*a, **k))
    plain = run(model, ids)
    assert not calls  # a page's plain forward: step by step, bit-for-bit its trace
    traced, trace = run_with_trace(model, ids)
    assert torch.equal(plain, traced.to(plain))
    with fused_attention():
        fast = run(model, ids)
        assert len(calls) == model.cfg.n_layers  # one per attention block
        run_with_trace(model, ids)
        assert len(calls) == model.cfg.n_layers  # a trace keeps the maps: step by step
    assert trace[act_name("weights", layer=0, block="dec_self")].shape[-1] == ids.size(1)
    torch.testing.assert_close(fast, plain, atol=2e-5, rtol=1e-5)


def test_a_capture_that_keeps_no_map_runs_fused_and_keeps_what_the_step_by_step_forward_keeps(model_ids, monkeypatch):
    model, ids = model_ids
    calls = []
    fused = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda *a, **k: calls.append(1) or fused(*a, **k))
    names = [act_name("addnorm_out", layer=0, block="dec_ffn", cross=False), act_name("z", layer=0, block="dec_self")]
    plain_logits, plain = run_with_trace(model, ids, names=names)
    with fused_attention():
        fast_logits, fast = run_with_trace(model, ids, names=names)
        assert len(calls) == model.cfg.n_layers
        weights = act_name("weights", layer=1, block="dec_self")
        assert observed([weights]) is False
        _, with_map = run_with_trace(model, ids, names=[*names, weights])
        assert len(calls) == 2 * model.cfg.n_layers - 1  # the block whose map is kept: step by step
    for n in names:
        torch.testing.assert_close(fast[n], plain[n], atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(fast_logits, plain_logits, atol=2e-4, rtol=1e-5)
    assert with_map[weights].shape[-1] == ids.size(1)


def test_an_edit_of_z_runs_on_the_fused_path_and_an_edit_of_a_map_on_the_step_by_step_one(model_ids):
    model, ids = model_ids
    z = act_name("z", layer=0, block="dec_self")
    weights = act_name("weights", layer=0, block="dec_self")
    block = model.decoder.layers[0].self_attn

    def zero_head(x):
        out = x.clone()
        out[:, 1] = 0
        return out

    with intervene({z: zero_head}), fused_attention():
        assert not observed(block.map_hooks())  # fused: z's hook still edits its output
        edited = run(model, ids)
    with intervene({z: zero_head}):
        reference = run(model, ids)  # step by step
    torch.testing.assert_close(edited, reference, atol=2e-5, rtol=1e-5)
    assert not torch.allclose(edited, run(model, ids))  # the edit did something
    with intervene({weights: zero_head}), fused_attention():
        assert observed(block.map_hooks())  # a map edited: step by step
        no_head_weights = run(model, ids)
    torch.testing.assert_close(no_head_weights, edited, atol=2e-5, rtol=1e-5)  # zero weights = zero z


@pytest.mark.parametrize("start", [0, 1, 2])
def test_resuming_with_the_last_row_only_equals_the_last_row_of_a_full_resume(model_ids, start):
    model, ids = model_ids
    start = min(start, model.cfg.n_layers)
    x = stream_in(model, ids, start).expand(3, -1, -1).clone()
    x[1, 2] += 0.5  # items that differ: a patched row before the last, and the last row itself
    x[2, -1] -= 0.5
    with torch.inference_mode():
        full = model.resume(x, start)  # (3, T, d)
        last = model.resume(x, start, last_only=True)  # (3, 1, d)
        with fused_attention():
            torch.testing.assert_close(model.resume(x, start, last_only=True), last, atol=2e-5, rtol=1e-5)
    assert last.shape == (3, 1, model.cfg.d_model)
    torch.testing.assert_close(last, full[:, -1:], atol=2e-5, rtol=1e-5)
    with torch.inference_mode():  # from the stream after the last layer: the final norm only
        after = stream_in(model, ids, model.cfg.n_layers)
        torch.testing.assert_close(model.resume(after, model.cfg.n_layers, last_only=True),
                                   model.resume(after, model.cfg.n_layers)[:, -1:])


def test_the_resumed_last_row_gives_the_forward_logits(model_ids):
    model, ids = model_ids
    with torch.inference_mode():
        hidden = model.resume(stream_in(model, ids, 0), 0, last_only=True)  # (1, 1, d)
        logits = model.out(hidden)[0, -1]
    torch.testing.assert_close(logits, run(model, ids)[0, -1], atol=2e-4, rtol=1e-5)


def test_a_one_token_text_resumes_with_no_rows_before_it(model_ids):
    model, ids = model_ids
    one = ids[:, :1]
    with torch.inference_mode():
        x = stream_in(model, one, 0)
        torch.testing.assert_close(model.resume(x, 0, last_only=True), model.resume(x, 0), atol=2e-5, rtol=1e-5)
