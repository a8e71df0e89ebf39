"""Model: the course's printed numbers and shapes, parameter counts, config errors, devices, checkpoints."""
import json
import math
import pickle

import pytest
import torch
from torch import nn

from service.settings import Settings
from transformer_core import (
    AddNorm,
    CheckpointError,
    ConfigError,
    PositionalEncoding,
    TransformerConfig,
    build_model,
    load_checkpoint,
    param_counts,
    pick_device,
    preset,
    run,
    run_with_trace,
    save_checkpoint,
    sinusoid_table,
    tokenize,
)
from transformer_core.errors import DeviceError
from transformer_core.text.inputs import padded_batch
from transformer_core.text.tokenizer import load_encoding
from transformer_core.train.checkpoint import load_state_into, read_state_dict

SENT_1 = "同志们!我踩着地雷了"
SENT_2 = "我现在开始排雷。"

COURSE_PE_6x4 = torch.tensor([
    [0.0000, 1.0000, 0.0000, 1.0000],
    [0.8415, 0.5403, 0.0100, 0.9999],
    [0.9093, -0.4161, 0.0200, 0.9998],
    [0.1411, -0.9900, 0.0300, 0.9996],
    [-0.7568, -0.6536, 0.0400, 0.9992],
    [-0.9589, 0.2837, 0.0500, 0.9988],
])


@pytest.fixture(scope="module")
def course_base():
    return build_model(preset("course-base"), "cpu")


# --- the course's printed numbers -------------------------------------------------------------------


def test_sinusoid_table_matches_course_printout():
    torch.testing.assert_close(sinusoid_table(6, 4), COURSE_PE_6x4, atol=1e-4, rtol=0)


def test_positional_encoding_buffer_has_batch_dim_and_course_values():
    pe = PositionalEncoding(TransformerConfig(d_model=4, n_heads=1, max_len=6))
    assert pe.pe.shape == (1, 6, 4)
    torch.testing.assert_close(pe.pe[0], COURSE_PE_6x4, atol=1e-4, rtol=0)
    x = torch.zeros(2, 3, 4)
    torch.testing.assert_close(pe(x), COURSE_PE_6x4[:3].expand(2, 3, 4), atol=1e-4, rtol=0)


def test_softmax_of_1_2_3_matches_course():
    torch.testing.assert_close(
        torch.softmax(torch.tensor([1.0, 2.0, 3.0]), dim=-1), torch.tensor([0.0900, 0.2447, 0.6652]),
        atol=1e-4, rtol=0,
    )


LN_X = torch.tensor([[1.0, 2.0, 3.0, 4.0], [2.0, 3.0, 4.0, 5.0], [3.0, 4.0, 5.0, 6.0]])


def _course_layernorm_expected(eps=1e-5):
    mu = torch.tensor([[2.5], [3.5], [4.5]])
    assert torch.equal(LN_X.mean(-1, keepdim=True), mu)
    assert torch.allclose(LN_X.var(-1, correction=0), torch.tensor(1.25))
    return (LN_X - mu) / math.sqrt(1.25 + eps)


def test_layernorm_worked_example_equals_nn_layernorm():
    expected = _course_layernorm_expected()
    torch.testing.assert_close(nn.LayerNorm(4)(LN_X), expected, atol=1e-6, rtol=0)
    # every row is the same after normalising: (-1.342, -0.447, 0.447, 1.342)
    torch.testing.assert_close(expected[0], torch.tensor([-1.3416, -0.4472, 0.4472, 1.3416]), atol=1e-4, rtol=0)


def test_addnorm_layernorm_equals_course_worked_example():
    addnorm = AddNorm(TransformerConfig(d_model=4, n_heads=1, dropout=0.0)).eval()
    expected = _course_layernorm_expected(addnorm.ln.eps)
    torch.testing.assert_close(addnorm.ln(LN_X), expected, atol=1e-6, rtol=0)
    # post-norm with a zero sublayer: LN(x + 0)
    torch.testing.assert_close(addnorm(LN_X, torch.zeros_like), expected, atol=1e-6, rtol=0)


def test_course_handwritten_layernorm_with_unbiased_std_differs_from_nn_layernorm():
    """The seed's LayerNorm: (x - mean) / (unbiased std + 1e-9). Not what nn.LayerNorm computes."""
    mean = LN_X.mean(-1, keepdim=True)
    std = LN_X.std(-1, keepdim=True)  # unbiased: sqrt(5/3), not sqrt(1.25)
    handwritten = (LN_X - mean) / (std + 1e-9)
    reference = nn.LayerNorm(4)(LN_X).detach()
    assert not torch.allclose(handwritten, reference, atol=1e-3)
    # the gap is exactly the biased/unbiased factor sqrt((n-1)/n) = sqrt(3/4)
    torch.testing.assert_close(handwritten, reference * math.sqrt(3 / 4), atol=1e-4, rtol=0)


# --- course-base shapes -----------------------------------------------------------------------------


def test_course_base_padded_batch_embedding_shape(course_base):
    ids, _, _ = padded_batch([SENT_1, SENT_2])
    with torch.inference_mode():
        emb = course_base.encoder.embed(ids)
    assert emb.shape == (2, 13, 512)


def test_course_base_logits_shape_is_13_by_full_cl100k_vocab(course_base):
    ids, lengths, _ = padded_batch([SENT_1, SENT_2])
    assert course_base.cfg.vocab_size == 100277 == load_encoding("cl100k_base").n_vocab
    src, tgt = ids[:1], ids[1:]  # tgt: the second sentence padded to 13
    logits = run(course_base, src, tgt, src_lengths=lengths[:1], tgt_lengths=lengths[1:])
    assert logits.shape == (1, 13, 100277)
    assert torch.isfinite(logits).all()


def test_special_token_id_is_inside_the_vocabulary(course_base):
    enc = load_encoding("cl100k_base")
    assert max(enc.encode_single_token(s) for s in enc.special_tokens_set) < course_base.cfg.vocab_size
    ids = tokenize("<|endoftext|>", allow_special=True).ids
    assert ids == [100257] and ids[0] < course_base.cfg.vocab_size
    x = torch.tensor([ids])
    assert run(course_base, x, x).shape == (1, 1, 100277)


# --- parameter counts ---------------------------------------------------------------------------------


def _assert_counts_add_up(model):
    counts = param_counts(model)
    parts = {k: v for k, v in counts.items() if k != "total"}
    assert sum(parts.values()) == counts["total"] == sum(p.numel() for p in model.parameters())
    assert all(v >= 0 for v in parts.values())
    return counts


def test_param_counts_per_component_sum_to_total_for_course_base(course_base):
    counts = _assert_counts_add_up(course_base)
    d, v = 512, 100277
    assert counts["embeddings"] == 2 * v * d
    assert counts["output"] == d * v + v
    # 6 encoder self-attn + 6 decoder self-attn + 6 cross-attn, each 4 d x d linears with bias
    assert counts["attention"] == 18 * 4 * (d * d + d)
    assert counts["ffn"] == 12 * (d * 2048 + 2048 + 2048 * d + d)


def test_param_counts_per_component_sum_to_total_for_course_gpt():
    _assert_counts_add_up(build_model(preset("course-gpt"), "cpu"))


def test_param_counts_count_tied_embedding_once():
    tied = build_model(preset("tiny-gpt", tie_embeddings=True), "cpu")
    untied = build_model(preset("tiny-gpt"), "cpu")
    assert tied.out.weight is tied.decoder.embed.tok.weight
    counts = _assert_counts_add_up(tied)
    assert untied.cfg.vocab_size * untied.cfg.d_model == (
        param_counts(untied)["total"] - counts["total"]
    )


# --- build, config and forward errors -------------------------------------------------------------------


def test_same_seed_gives_identical_weights():
    a, b = build_model(preset("tiny"), "cpu"), build_model(preset("tiny"), "cpu")
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_different_seed_gives_different_weights():
    a, b = build_model(preset("tiny"), "cpu"), build_model(preset("tiny", seed=7), "cpu")
    assert not torch.equal(a.decoder.layers[0].self_attn.W_q.weight, b.decoder.layers[0].self_attn.W_q.weight)


def test_build_model_does_not_change_global_rng():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_model(preset("tiny-gpt"), "cpu")
    assert torch.equal(torch.rand(3), expected)


def test_d_model_not_divisible_by_heads_raises_config_error():
    with pytest.raises(ConfigError, match="divisible"):
        TransformerConfig(d_model=10, n_heads=3)
    with pytest.raises(ConfigError, match="divisible"):
        preset("tiny", n_heads=3)


def test_decoder_only_forward_gives_logits_per_position():
    model = build_model(preset("tiny-gpt"), "cpu")
    logits = run(model, torch.tensor([[1, 2, 3, 4, 5]]))
    assert logits.shape == (1, 5, model.cfg.vocab_size)
    assert torch.isfinite(logits).all()


def test_sequence_longer_than_max_len_raises_clear_value_error(tiny):
    too_long = torch.zeros(1, tiny.cfg.max_len + 1, dtype=torch.long)
    with pytest.raises(ValueError, match="at most 64"):
        run(tiny, too_long, torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="at most"):
        run(build_model(preset("tiny-gpt"), "cpu"), too_long)


def test_encoder_decoder_without_target_raises_value_error(tiny):
    with pytest.raises(ValueError, match="target"):
        run(tiny, torch.tensor([[1, 2]]))


def test_scale_embedding_multiplies_token_embedding_by_sqrt_d_model():
    model = build_model(preset("tiny", scale_embedding=True), "cpu")
    _, trace = run_with_trace(model, torch.tensor([[5, 6, 7]]), torch.tensor([[8, 9]]))
    for side in ("encoder", "decoder"):
        tok, scaled = trace[f"{side}.embed.hook_tok"], trace[f"{side}.embed.hook_scaled"]
        torch.testing.assert_close(scaled, tok * math.sqrt(16))


def test_without_scale_embedding_scaled_equals_token_embedding(tiny):
    _, trace = run_with_trace(tiny, torch.tensor([[5, 6, 7]]), torch.tensor([[8, 9]]))
    assert torch.equal(trace["encoder.embed.hook_scaled"], trace["encoder.embed.hook_tok"])


# --- devices ----------------------------------------------------------------------------------------------


def test_pick_device_honours_argument():
    assert pick_device("cpu") == torch.device("cpu")


def test_device_setting_is_read_from_the_environment_by_settings_only():
    assert Settings.from_env({"TRANSFORMER_EXPLORER_DEVICE": "cpu"}).device == "cpu"
    assert pick_device(Settings.from_env({"TRANSFORMER_EXPLORER_DEVICE": "cpu"}).device) == torch.device("cpu")
    assert Settings.from_env({"TRANSFORMER_EXPLORER_DEVICE": "quantum"}).device == "auto"  # bad value: default


def test_pick_device_auto_without_preference():
    assert pick_device().type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_pick_device_unknown_name_raises_a_device_error_with_its_code():
    with pytest.raises(DeviceError) as err:
        pick_device("quantum")
    assert err.value.code == "device_unknown" and "unknown device" in str(err.value).lower()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_asking_for_cuda_without_cuda_raises_a_device_error():
    with pytest.raises(DeviceError) as err:
        pick_device("cuda")
    assert err.value.code == "device_no_cuda" and "no CUDA" in str(err.value)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_trace_stays_on_the_gpu_and_reads_as_cpu_tensors_matching_cpu():
    """A GPU trace keeps its tensors on the GPU (copying them all cost 20x the forward); everything read from it is
    a CPU tensor with the CPU trace's numbers, and a head's map brings over that head only."""
    cfg = preset("tiny")
    cpu, gpu = build_model(cfg, "cpu"), build_model(cfg, "cuda")
    src, tgt = torch.tensor([[1, 2, 3, 4, 5]]), torch.tensor([[6, 7, 8]])
    logits_cpu, trace_cpu = run_with_trace(cpu, src, tgt)
    logits_gpu, trace_gpu = run_with_trace(gpu, src, tgt)
    assert logits_gpu.device.type == "cuda"
    torch.testing.assert_close(logits_gpu.cpu(), logits_cpu, atol=1e-4, rtol=1e-4)
    assert trace_gpu.names() == trace_cpu.names()
    assert {t.device.type for t in trace_gpu.tensors.values()} == {"cuda"}
    trace_gpu.fetched_bytes = 0
    one = trace_gpu.attention("cross", 0).head("weights", 1)
    assert one.device.type == "cpu" and trace_gpu.fetched_bytes == one.numel() * 4
    torch.testing.assert_close(one, trace_cpu.attention("cross", 0).head("weights", 1), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(trace_gpu.logits_at(-1), trace_cpu.logits[0, -1], atol=1e-4, rtol=1e-4)
    for name in trace_cpu.names():
        assert trace_gpu[name].device.type == "cpu"
        a, b = trace_gpu[name], trace_cpu[name]
        if a.dtype == torch.bool:
            assert torch.equal(a, b), name
        else:
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4, msg=name)


def test_reading_a_trace_brings_over_what_is_read_and_counts_it():
    """What a reader asks for is what crosses to the CPU (counted in fetched_bytes, on the CPU too): one head's map,
    one position's logits; a whole stage read twice from the same view crosses once; sizes cross nothing."""
    cfg = preset("tiny")
    model = build_model(cfg, "cpu")
    _, trace = run_with_trace(model, torch.tensor([[1, 2, 3, 4, 5]]), torch.tensor([[6, 7, 8]]))
    stages = trace.attention("cross", 0)
    assert (stages.n_heads, stages.n_q, stages.n_k) == (cfg.n_heads, 3, 5) and trace.fetched_bytes == 0
    assert stages.has("q") and not stages.has("q_rot") and stages.q_rot is None and trace.fetched_bytes == 0
    one = stages.head("weights", 1)
    assert trace.fetched_bytes == one.numel() * 4 == 3 * 5 * 4
    assert stages.weights is stages.weights and trace.fetched_bytes == 15 * 4 + cfg.n_heads * 15 * 4
    torch.testing.assert_close(one, stages.weights[0, 1])
    trace.fetched_bytes = 0
    assert torch.equal(trace.logits_at(-1), trace.logits[0, -1]) and trace.fetched_bytes == 4 * cfg.vocab_size * (1 + 3)


# --- checkpoints ------------------------------------------------------------------------------------------


def test_checkpoint_round_trip_gives_identical_logits(tiny, tmp_path):
    folder = save_checkpoint(tiny, tmp_path / "ckpt", {"note": "测试"})
    assert sorted(p.name for p in folder.iterdir()) == ["card.json", "config.json", "model.safetensors"]
    loaded, card = load_checkpoint(folder)
    assert card == {"note": "测试"}
    assert loaded.cfg == tiny.cfg
    assert not loaded.training
    src, tgt = torch.tensor([[3, 1, 4, 1, 5]]), torch.tensor([[9, 2, 6]])
    assert torch.equal(run(loaded, src, tgt), run(tiny, src, tgt))
    assert not any(p.name.startswith(".tmp") for p in tmp_path.iterdir())  # written atomically


def test_tied_checkpoint_stores_the_shared_matrix_once_and_round_trips(tmp_path):
    tied = build_model(preset("tiny-gpt", tie_embeddings=True, output_bias=False), "cpu")
    folder = save_checkpoint(tied, tmp_path / "tied")
    assert "out.weight" not in read_state_dict(folder / "model.safetensors")
    loaded, _ = load_checkpoint(folder)
    assert loaded.out.weight is loaded.decoder.embed.tok.weight
    ids = torch.tensor([[5, 6, 7]])
    assert torch.equal(run(loaded, ids), run(tied, ids))


def test_checkpoint_into_mismatched_config_raises_checkpoint_error(tiny, tmp_path):
    folder = save_checkpoint(tiny, tmp_path / "ckpt")
    other = build_model(preset("tiny", d_ffn=48), "cpu")
    with pytest.raises(CheckpointError) as info:
        load_state_into(other, read_state_dict(folder / "model.safetensors"))
    assert info.value.code == "checkpoint_mismatch"
    assert "linear1.weight" in str(info.value) and "(32, 16)" in str(info.value)
    # the same through the JSON config: edit it to claim another size
    doc = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    doc["d_ffn"] = 48
    (folder / "config.json").write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(CheckpointError, match="do not fit"):
        load_checkpoint(folder)


def test_checkpoint_with_missing_file_raises_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError):
        load_checkpoint(tmp_path / "nothing")


class _WritesAFile:
    """Unpickling this calls open(path, 'w'), which creates the file."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_checkpoint_with_pickled_code_is_refused_and_never_runs(tmp_path):
    sentinel = tmp_path / "pwned.txt"
    torch.save({"weight": torch.zeros(2), "payload": _WritesAFile(sentinel)}, tmp_path / "ckpt.pt")
    with pytest.raises(CheckpointError, match="refused"):
        read_state_dict(tmp_path / "ckpt.pt")
    assert not sentinel.exists()


def test_pickled_code_payload_is_live_under_plain_pickle(tmp_path):
    """Guards the test above: the payload really does create its file when unpickled unsafely."""
    sentinel = tmp_path / "live.txt"
    pickle.loads(pickle.dumps(_WritesAFile(sentinel))).close()
    assert sentinel.exists()
