"""Tracing: traced == untraced, the pinned hook names, attention invariants, masks, cleanup, threads, isolation."""
import math
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from transformer_core import act_name, build_model, capture, preset, run, run_with_trace
from transformer_core.model.hooks import capturing
from transformer_core.text.inputs import padded_batch

SENT_1 = "同志们!我踩着地雷了"
SENT_2 = "我现在开始排雷。"

# The hook points of the tiny encoder-decoder (2 + 2 layers), in forward order. Generated once, read by eye.
EXPECTED_NAMES_TINY = [
    "encoder.embed.hook_tok",
    "encoder.embed.hook_scaled",
    "encoder.embed.pos.hook_pe",
    "encoder.embed.hook_sum",
    "encoder.layers.0.self_attn.hook_q",
    "encoder.layers.0.self_attn.hook_k",
    "encoder.layers.0.self_attn.hook_v",
    "encoder.layers.0.self_attn.hook_scores",
    "encoder.layers.0.self_attn.hook_scaled",
    "encoder.layers.0.self_attn.hook_mask",
    "encoder.layers.0.self_attn.hook_masked",
    "encoder.layers.0.self_attn.hook_weights",
    "encoder.layers.0.self_attn.hook_z",
    "encoder.layers.0.self_attn.hook_concat",
    "encoder.layers.0.self_attn.hook_out",
    "encoder.layers.0.addnorm1.hook_in",
    "encoder.layers.0.addnorm1.hook_out",
    "encoder.layers.0.ffn.hook_hidden",
    "encoder.layers.0.ffn.hook_out",
    "encoder.layers.0.addnorm2.hook_in",
    "encoder.layers.0.addnorm2.hook_out",
    "encoder.layers.1.self_attn.hook_q",
    "encoder.layers.1.self_attn.hook_k",
    "encoder.layers.1.self_attn.hook_v",
    "encoder.layers.1.self_attn.hook_scores",
    "encoder.layers.1.self_attn.hook_scaled",
    "encoder.layers.1.self_attn.hook_mask",
    "encoder.layers.1.self_attn.hook_masked",
    "encoder.layers.1.self_attn.hook_weights",
    "encoder.layers.1.self_attn.hook_z",
    "encoder.layers.1.self_attn.hook_concat",
    "encoder.layers.1.self_attn.hook_out",
    "encoder.layers.1.addnorm1.hook_in",
    "encoder.layers.1.addnorm1.hook_out",
    "encoder.layers.1.ffn.hook_hidden",
    "encoder.layers.1.ffn.hook_out",
    "encoder.layers.1.addnorm2.hook_in",
    "encoder.layers.1.addnorm2.hook_out",
    "encoder.hook_out",
    "decoder.embed.hook_tok",
    "decoder.embed.hook_scaled",
    "decoder.embed.pos.hook_pe",
    "decoder.embed.hook_sum",
    "decoder.layers.0.self_attn.hook_q",
    "decoder.layers.0.self_attn.hook_k",
    "decoder.layers.0.self_attn.hook_v",
    "decoder.layers.0.self_attn.hook_scores",
    "decoder.layers.0.self_attn.hook_scaled",
    "decoder.layers.0.self_attn.hook_mask",
    "decoder.layers.0.self_attn.hook_masked",
    "decoder.layers.0.self_attn.hook_weights",
    "decoder.layers.0.self_attn.hook_z",
    "decoder.layers.0.self_attn.hook_concat",
    "decoder.layers.0.self_attn.hook_out",
    "decoder.layers.0.addnorm1.hook_in",
    "decoder.layers.0.addnorm1.hook_out",
    "decoder.layers.0.cross_attn.hook_q",
    "decoder.layers.0.cross_attn.hook_k",
    "decoder.layers.0.cross_attn.hook_v",
    "decoder.layers.0.cross_attn.hook_scores",
    "decoder.layers.0.cross_attn.hook_scaled",
    "decoder.layers.0.cross_attn.hook_mask",
    "decoder.layers.0.cross_attn.hook_masked",
    "decoder.layers.0.cross_attn.hook_weights",
    "decoder.layers.0.cross_attn.hook_z",
    "decoder.layers.0.cross_attn.hook_concat",
    "decoder.layers.0.cross_attn.hook_out",
    "decoder.layers.0.addnorm2.hook_in",
    "decoder.layers.0.addnorm2.hook_out",
    "decoder.layers.0.ffn.hook_hidden",
    "decoder.layers.0.ffn.hook_out",
    "decoder.layers.0.addnorm3.hook_in",
    "decoder.layers.0.addnorm3.hook_out",
    "decoder.layers.1.self_attn.hook_q",
    "decoder.layers.1.self_attn.hook_k",
    "decoder.layers.1.self_attn.hook_v",
    "decoder.layers.1.self_attn.hook_scores",
    "decoder.layers.1.self_attn.hook_scaled",
    "decoder.layers.1.self_attn.hook_mask",
    "decoder.layers.1.self_attn.hook_masked",
    "decoder.layers.1.self_attn.hook_weights",
    "decoder.layers.1.self_attn.hook_z",
    "decoder.layers.1.self_attn.hook_concat",
    "decoder.layers.1.self_attn.hook_out",
    "decoder.layers.1.addnorm1.hook_in",
    "decoder.layers.1.addnorm1.hook_out",
    "decoder.layers.1.cross_attn.hook_q",
    "decoder.layers.1.cross_attn.hook_k",
    "decoder.layers.1.cross_attn.hook_v",
    "decoder.layers.1.cross_attn.hook_scores",
    "decoder.layers.1.cross_attn.hook_scaled",
    "decoder.layers.1.cross_attn.hook_mask",
    "decoder.layers.1.cross_attn.hook_masked",
    "decoder.layers.1.cross_attn.hook_weights",
    "decoder.layers.1.cross_attn.hook_z",
    "decoder.layers.1.cross_attn.hook_concat",
    "decoder.layers.1.cross_attn.hook_out",
    "decoder.layers.1.addnorm2.hook_in",
    "decoder.layers.1.addnorm2.hook_out",
    "decoder.layers.1.ffn.hook_hidden",
    "decoder.layers.1.ffn.hook_out",
    "decoder.layers.1.addnorm3.hook_in",
    "decoder.layers.1.addnorm3.hook_out",
    "decoder.hook_out",
    "hook_logits",
]


@pytest.fixture(scope="module")
def batch():
    """The course's padded batch as src, and a shorter padded target batch."""
    src, src_lengths, _ = padded_batch([SENT_1, SENT_2])  # (2, 13), lengths 13 and 7
    tgt, tgt_lengths, _ = padded_batch([SENT_2, "雷"])  # (2, 7), lengths 7 and 1
    return src, tgt, src_lengths, tgt_lengths


def float_tensors(trace):
    return {n: t for n, t in trace.tensors.items() if t.is_floating_point()}


# --- traced == untraced -----------------------------------------------------------------------------------


def test_traced_logits_equal_untraced_logits_encoder_decoder(tiny, batch):
    src, tgt, sl, tl = batch
    traced, trace = run_with_trace(tiny, src, tgt, src_lengths=sl, tgt_lengths=tl)
    untraced = run(tiny, src, tgt, src_lengths=sl, tgt_lengths=tl)
    assert torch.equal(traced, untraced)
    assert torch.equal(trace.logits, untraced)


def test_traced_logits_equal_untraced_logits_decoder_only(tiny_gpt, batch):
    src, _, sl, _ = batch
    traced, trace = run_with_trace(tiny_gpt, src, src_lengths=sl)
    assert torch.equal(traced, run(tiny_gpt, src, src_lengths=sl))
    assert torch.equal(trace.logits, traced)


def test_hook_names_in_forward_order_for_tiny_encoder_decoder(tiny):
    _, trace = run_with_trace(tiny, torch.tensor([[1, 2, 3, 4]]), torch.tensor([[5, 6, 7]]))
    assert trace.names() == EXPECTED_NAMES_TINY
    assert sorted(tiny.hook_names) == sorted(EXPECTED_NAMES_TINY)


def test_names_argument_captures_only_the_chosen_hooks(tiny):
    chosen = ["decoder.layers.1.cross_attn.hook_weights", "hook_logits"]
    _, trace = run_with_trace(tiny, torch.tensor([[1, 2, 3]]), torch.tensor([[4, 5]]), names=chosen)
    assert trace.names() == chosen
    _, trace = run_with_trace(tiny, torch.tensor([[1, 2, 3]]), torch.tensor([[4, 5]]),
                              names=lambda n: n.endswith("hook_weights"))
    assert trace.blocks() == [("enc_self", 0), ("enc_self", 1), ("dec_self", 0), ("cross", 0), ("dec_self", 1),
                              ("cross", 1)]
    assert [act_name("weights", layer=n, block=k) for k, n in trace.blocks()] == [
        "encoder.layers.0.self_attn.hook_weights", "encoder.layers.1.self_attn.hook_weights",
        "decoder.layers.0.self_attn.hook_weights", "decoder.layers.0.cross_attn.hook_weights",
        "decoder.layers.1.self_attn.hook_weights", "decoder.layers.1.cross_attn.hook_weights",
    ]


def test_stop_early_ends_the_forward_once_the_chosen_hooks_are_captured(tiny):
    src, tgt = torch.tensor([[1, 2, 3, 4]]), torch.tensor([[5, 6, 7]])
    chosen = ["encoder.layers.1.self_attn.hook_weights", "decoder.layers.0.cross_attn.hook_weights"]
    full_logits, full = run_with_trace(tiny, src, tgt)
    logits, trace = run_with_trace(tiny, src, tgt, names=chosen, stop_early=True)
    assert logits is None and trace.names() == chosen  # the output layer never ran
    assert all(torch.equal(trace[n], full[n]) for n in chosen)
    reached = list(trace.all_shapes)
    assert reached[-1] == chosen[-1] and "hook_logits" not in reached  # stopped right after the last one
    # a hook that never fires (no such block): the forward runs to the end, logits as usual
    logits, trace = run_with_trace(tiny, src, tgt, names=[chosen[0], "decoder.layers.9.cross_attn.hook_weights"],
                                   stop_early=True)
    assert torch.equal(logits, full_logits) and trace.names() == [chosen[0]]
    with pytest.raises(ValueError):
        run_with_trace(tiny, src, tgt, names=lambda n: True, stop_early=True)


def test_memo_computes_once_per_trace_and_key(tiny):
    _, trace = run_with_trace(tiny, torch.tensor([[1, 2, 3]]), torch.tensor([[4, 5]]))
    calls = []
    assert trace.memo(("x", 1), lambda: calls.append(1) or "one") == "one"
    assert trace.memo(("x", 1), lambda: calls.append(1) or "again") == "one"
    assert trace.memo(("x", 2), lambda: calls.append(2) or "two") == "two"
    assert calls == [1, 2]


# --- attention invariants -----------------------------------------------------------------------------------


def assert_attention_invariants(trace, block):
    stages = trace.attention(*block)
    weights, mask = stages["weights"], stages["mask"]
    assert weights.shape == mask.shape, block
    assert not torch.isnan(weights).any(), block
    assert torch.all(weights[~mask] == 0), f"{block}: masked cells must be exactly 0"
    live = mask.any(-1)  # queries with at least one key to attend to
    sums = weights.sum(-1)
    torch.testing.assert_close(sums[live], torch.ones_like(sums[live]), atol=1e-6, rtol=0, msg=block)
    assert torch.all(sums[~live] == 0), f"{block}: a query with every key masked attends to nothing"


def test_every_attention_block_has_zero_masked_weights_and_rows_summing_to_one(tiny, batch):
    src, tgt, sl, tl = batch
    _, trace = run_with_trace(tiny, src, tgt, src_lengths=sl, tgt_lengths=tl)
    blocks = trace.blocks()
    assert len(blocks) == 6  # 2 encoder self, 2 decoder masked self, 2 cross
    for block in blocks:
        assert_attention_invariants(trace, block)
        assert trace.attention(*block)["mask"].all(-1).logical_not().any(), f"{block} masks something"


def test_default_masks_are_padding_causal_and_padding(tiny, batch):
    src, tgt, sl, tl = batch
    _, trace = run_with_trace(tiny, src, tgt, src_lengths=sl, tgt_lengths=tl)
    enc = trace["encoder.layers.0.self_attn.hook_mask"]  # (B, nh, Ts, Ts)
    dec = trace["decoder.layers.0.self_attn.hook_mask"]  # (B, nh, Tt, Tt)
    cross = trace["decoder.layers.0.cross_attn.hook_mask"]  # (B, nh, Tt, Ts)
    keys_src = torch.arange(13)[None, :] < sl[:, None]  # (B, Ts)
    keys_tgt = torch.arange(7)[None, :] < tl[:, None]  # (B, Tt)
    tril = torch.ones(7, 7, dtype=torch.bool).tril()
    assert torch.equal(enc, keys_src[:, None, None, :].expand(2, 2, 13, 13))
    assert torch.equal(dec, (tril[None, None] & keys_tgt[:, None, None, :]).expand(2, 2, 7, 7))
    assert torch.equal(cross, keys_src[:, None, None, :].expand(2, 2, 7, 13))
    assert bool(enc[0, 0, 0, 3])  # '!' (id 0) is a real token that the encoder attends to


def expected_mask(mode, lengths, Tq, Tk):
    """The mask a mode should give, written out by hand: (B, Tq, Tk) True = attend."""
    B = lengths.numel()
    mask = torch.ones(B, Tq, Tk, dtype=torch.bool)
    if mode in ("causal", "both"):
        mask &= torch.tensor([[k <= q + (Tk - Tq) for k in range(Tk)] for q in range(Tq)])
    if mode in ("padding", "both"):
        mask &= torch.tensor([[k < n for k in range(Tk)] for n in lengths.tolist()])[:, None, :]
    return mask


@pytest.mark.parametrize("mode", ["none", "causal", "padding", "both"])
def test_mask_modes_give_the_expected_masks_and_zero_weights(tiny, batch, mode):
    src, tgt, sl, tl = batch
    masks = {"enc_self": mode, "dec_self": mode, "cross": "padding" if mode == "none" else mode}
    _, trace = run_with_trace(tiny, src, tgt, src_lengths=sl, tgt_lengths=tl, masks=masks)
    assert trace.masks == masks
    for block, lengths, Tq, Tk, block_mode in [
        (("enc_self", 1), sl, 13, 13, mode),
        (("dec_self", 1), tl, 7, 7, mode),
        # cross-attention is never causal over the memory: causal/both fall back to padding
        (("cross", 1), sl, 7, 13, "padding"),
    ]:
        stages = trace.attention(*block)
        want = expected_mask(block_mode, lengths, Tq, Tk)[:, None].expand(-1, 2, -1, -1)
        assert torch.equal(stages["mask"], want), block
        assert (act_name("mask", layer=block[1], block=block[0]) in trace) == (block_mode != "none")
        assert_attention_invariants(trace, block)
        if block_mode == "none":
            assert torch.all(stages["weights"] > 0)


def test_mask_modes_work_for_decoder_only(tiny_gpt, batch):
    src, _, sl, _ = batch
    for mode in ("none", "causal", "padding", "both"):
        logits, trace = run_with_trace(tiny_gpt, src, src_lengths=sl, masks={"dec_self": mode})
        assert logits.shape == (2, 13, tiny_gpt.cfg.vocab_size)
        for block in trace.blocks():
            assert_attention_invariants(trace, block)


def test_unknown_mask_mode_raises_value_error(tiny_gpt):
    with pytest.raises(ValueError, match="mask mode"):
        run_with_trace(tiny_gpt, torch.tensor([[1, 2]]), masks={"dec_self": "diagonal"})


def test_query_with_all_keys_masked_gets_zero_weights_and_no_nan(tiny):
    src, tgt = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]]), torch.tensor([[1, 2, 3], [4, 5, 6]])
    sl, tl = torch.tensor([4, 0]), torch.tensor([3, 0])  # the second row has no real token at all
    logits, trace = run_with_trace(tiny, src, tgt, src_lengths=sl, tgt_lengths=tl)
    for block in trace.blocks():
        weights = trace.attention(*block)["weights"]
        assert torch.all(weights[1] == 0), block
        assert_attention_invariants(trace, block)
    for name, t in float_tensors(trace).items():
        assert not torch.isnan(t).any(), name
    assert torch.isfinite(logits).all()
    assert not torch.isnan(trace.probs).any()


# --- cleanup --------------------------------------------------------------------------------------------------


def test_capture_is_removed_when_forward_raises_on_ids_beyond_vocab(tiny):
    bad = torch.tensor([[tiny.cfg.vocab_size + 5]])
    with pytest.raises(ValueError, match="outside"):
        run_with_trace(tiny, bad, torch.tensor([[1]]))
    assert not capturing()
    with pytest.raises(ValueError), capture() as store:
        run(tiny, torch.tensor([[1, 2]]), bad)
    assert not capturing()
    run(tiny, torch.tensor([[1, 2]]), torch.tensor([[3]]))
    assert store == {}


def test_capture_is_removed_when_forward_raises_midway(tiny):
    asked = []

    def selector(name):
        asked.append(name)
        if name == "decoder.embed.hook_tok":
            raise RuntimeError("boom in the middle of the forward")
        return True

    with pytest.raises(RuntimeError, match="boom"), capture(selector) as store:
        run(tiny, torch.tensor([[1, 2]]), torch.tensor([[3, 4]]))
    assert not capturing()
    n_asked, n_stored = len(asked), len(store)
    assert n_stored > 0 and "encoder.hook_out" in store  # the encoder half was captured before the error
    run(tiny, torch.tensor([[1, 2]]), torch.tensor([[3, 4]]))  # a later untraced forward...
    assert len(asked) == n_asked and len(store) == n_stored  # ...captures nothing


def test_untraced_forward_captures_nothing_and_leaves_no_state(tiny):
    assert not capturing()
    run(tiny, torch.tensor([[1, 2]]), torch.tensor([[3]]))
    assert not capturing()
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in tiny.modules())


# --- threads -----------------------------------------------------------------------------------------------------


def _inputs(i):
    g = torch.Generator().manual_seed(100 + i)
    Ts, Tt = 3 + i, 2 + (i % 4)
    src = torch.randint(0, 1000, (2, Ts), generator=g)
    tgt = torch.randint(0, 1000, (2, Tt), generator=g)
    return src, tgt, torch.tensor([Ts, max(1, Ts - i)]), torch.tensor([Tt, 1])


def _traced(model, i):
    src, tgt, sl, tl = _inputs(i)
    logits, trace = run_with_trace(model, src, tgt, src_lengths=sl, tgt_lengths=tl)
    return logits, trace


def _assert_same_trace(a, b):
    (logits_a, trace_a), (logits_b, trace_b) = a, b
    assert torch.equal(logits_a, logits_b)
    assert trace_a.names() == trace_b.names()
    for name in trace_a.names():
        assert torch.equal(trace_a[name], trace_b[name]), name


def test_concurrent_traces_on_one_shared_model_equal_sequential_ones(tiny):
    n_threads, repeats = 8, 3
    sequential = [_traced(tiny, i) for i in range(n_threads)]
    jobs = [i for _ in range(repeats) for i in range(n_threads)]
    with ThreadPoolExecutor(max_workers=n_threads) as pool:
        results = list(pool.map(lambda i: (i, _traced(tiny, i)), jobs))
    for i, result in results:
        _assert_same_trace(result, sequential[i])
    assert not capturing()


# --- isolation -----------------------------------------------------------------------------------------------------


def test_trace_tensors_are_cpu_and_do_not_require_grad(tiny, batch):
    src, tgt, sl, tl = batch
    _, trace = run_with_trace(tiny, src, tgt, src_lengths=sl, tgt_lengths=tl)
    for name, t in trace.tensors.items():
        assert t.device.type == "cpu", name
        assert not t.requires_grad, name
    assert trace.src_ids.device.type == "cpu" and trace.tgt_ids.device.type == "cpu"


def test_modifying_trace_tensors_does_not_change_the_model(tiny, batch):
    src, tgt, sl, tl = batch
    pe_before = tiny.encoder.embed.pos.pe.clone()
    state_before = {k: v.clone() for k, v in tiny.state_dict().items()}
    logits_before, trace = run_with_trace(tiny, src, tgt, src_lengths=sl, tgt_lengths=tl)
    logits_before = logits_before.clone()
    pe = trace["encoder.embed.pos.hook_pe"]
    try:
        pe.add_(100.0)  # may be refused (inference tensor); either way the model must not see it
    except RuntimeError:
        pass
    for t in trace.tensors.values():
        try:
            t.zero_()
        except RuntimeError:
            pass
    assert torch.equal(tiny.encoder.embed.pos.pe, pe_before)
    assert torch.equal(tiny.decoder.embed.pos.pe, pe_before)
    after = tiny.state_dict()
    assert all(torch.equal(after[k], v) for k, v in state_before.items())
    assert torch.equal(run(tiny, src, tgt, src_lengths=sl, tgt_lengths=tl), logits_before)


# --- Trace helpers -------------------------------------------------------------------------------------------------


def test_trace_shapes_list_ids_first_and_probs_last(tiny, batch):
    src, tgt, sl, tl = batch
    _, trace = run_with_trace(tiny, src, tgt, src_lengths=sl, tgt_lengths=tl)
    shapes = trace.shapes()
    assert shapes[0] == ("src_ids", (2, 13))
    assert shapes[1] == ("tgt_ids", (2, 7))
    assert shapes[-2] == ("hook_logits", (2, 7, tiny.cfg.vocab_size))
    assert shapes[-1] == ("probs", (2, 7, tiny.cfg.vocab_size))
    assert [n for n, _ in shapes[2:-1]] == trace.names()


def test_trace_shapes_for_decoder_only_start_with_src_ids(tiny_gpt):
    _, trace = run_with_trace(tiny_gpt, torch.tensor([[1, 2, 3]]))
    shapes = trace.shapes()
    assert shapes[0] == ("src_ids", (1, 3))
    assert "tgt_ids" not in [n for n, _ in shapes]
    assert shapes[-1] == ("probs", (1, 3, tiny_gpt.cfg.vocab_size))


def test_trace_probs_rows_sum_to_one(tiny, batch):
    src, tgt, sl, tl = batch
    _, trace = run_with_trace(tiny, src, tgt, src_lengths=sl, tgt_lengths=tl)
    probs = trace.probs
    assert probs.shape == trace.logits.shape
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 7), atol=1e-5, rtol=0)
    assert torch.all(probs >= 0)
    assert trace.probs is probs  # computed once


def test_attention_stages_are_consistent(tiny):
    _, trace = run_with_trace(tiny, torch.tensor([[1, 2, 3, 4]]), torch.tensor([[5, 6, 7]]))
    st = trace.attention("dec_self", 0)
    head_dim = tiny.cfg.head_dim
    torch.testing.assert_close(st["scores"], st["q"] @ st["k"].transpose(-2, -1))
    torch.testing.assert_close(st["scaled"], st["scores"] / math.sqrt(head_dim))
    assert torch.equal(st["masked"][st["mask"]], st["scaled"][st["mask"]])
    assert torch.all(st["masked"][~st["mask"]] == float("-inf"))
    torch.testing.assert_close(st["z"], st["weights"] @ st["v"])


VARIANTS = {
    "learned_positions": {"positional": "learned"},
    "no_positions": {"positional": "none"},
    "pre_norm_final_norm": {"norm_first": True, "final_norm": True},
    "scaled_gelu": {"scale_embedding": True, "activation": "gelu"},
    "tied_no_bias": {"tie_embeddings": True, "output_bias": False},
}


@pytest.mark.parametrize("arch", ["tiny", "tiny-gpt"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_config_variants_trace_equal_untraced_and_never_alias_the_model(arch, variant):
    model = build_model(preset(arch, **VARIANTS[variant]), "cpu")
    src, tgt = torch.tensor([[5, 6, 7, 8]]), (torch.tensor([[9, 10, 11]]) if arch == "tiny" else None)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    logits, trace = run_with_trace(model, src, tgt)
    assert torch.equal(logits, run(model, src, tgt))
    for block in trace.blocks():
        weights = trace.attention(*block)["weights"]
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-6, rtol=0)
    expected = logits.clone()
    for t in trace.tensors.values():
        try:
            t.zero_()
        except RuntimeError:  # inference tensors refuse in-place updates: also fine
            continue
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())
    assert torch.equal(run(model, src, tgt), expected)
