"""Memory before work (transformer_core.model.memory, measured by model/footprint.py): the estimates against real
runs, for every family the core builds (the course's translator and GPT, GPT-2's layout, today's decoders).

Stated factors, pinned here:
* parameters: exact (== sum(p.numel()) of the built model, for every preset and a grid of options);
* a loaded model measured on its device and its config measured on the meta device: the same figures;
* a trace's kept tensors + logits + probabilities: an upper bound within 1.15x of the bytes the trace holds;
* a forward's peak: an upper bound within 1.5x of the peak RSS growth of a fresh process (glibc told to return freed
  blocks, MALLOC_MMAP_THRESHOLD_, as deploy/Dockerfile does: the estimate counts live tensors, not allocator slack);
* training: activations within 1x-2.5x of what autograd really saves; the step's peak within 1x-2.5x of the RSS growth.
"""
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from transformer_core.model import footprint, memory
from transformer_core.model.config import PRESETS, TransformerConfig
from transformer_core.model.trace import run_with_trace
from transformer_core.model.transformer import Transformer, build_model

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("one_torch_thread")
WIDE = dict(d_model=32, n_heads=4, n_layers=2, d_ffn=64, vocab_size=512, max_len=1024, dropout=0.0)
FAMILIES = {  # the architectures the core builds; memory.py has no formula for any of them
    "translator": TransformerConfig(arch="encoder_decoder", **WIDE),
    "course-gpt": TransformerConfig(arch="decoder_only", **WIDE),
    "gpt2-layout": TransformerConfig(arch="decoder_only", positional="learned", norm_first=True, final_norm=True,
                                     tie_embeddings=True, activation="gelu_tanh", output_bias=False, **WIDE),
    "modern": TransformerConfig(arch="decoder_only", positional="rope", norm="rmsnorm", ffn="gated",
                                activation="silu", n_kv_heads=2, norm_first=True, final_norm=True, linear_bias=False,
                                tie_embeddings=True, output_bias=False, **WIDE),
}


def meta_counts(cfg: TransformerConfig) -> tuple[int, int]:
    with torch.device("meta"):
        model = Transformer(cfg)
    return sum(p.numel() for p in model.parameters()), sum(b.numel() for b in model.buffers())


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_param_count_equals_the_built_presets(name):
    params, buffers = meta_counts(PRESETS[name])
    assert memory.param_count(PRESETS[name]) == params
    assert memory.param_bytes(PRESETS[name]) == 4 * (params + buffers)


@pytest.mark.parametrize(("arch", "positional", "final_norm", "tie", "bias"), list(itertools.product(
    ["encoder_decoder", "decoder_only"], ["sinusoidal", "learned", "none"], [False, True], [False, True],
    [False, True])))
def test_param_count_covers_every_option(arch, positional, final_norm, tie, bias):
    cfg = TransformerConfig(arch=arch, d_model=8, n_heads=2, n_layers=3, d_ffn=12, vocab_size=37, max_len=11,
                            positional=positional, final_norm=final_norm, tie_embeddings=tie, output_bias=bias)
    params, buffers = meta_counts(cfg)
    assert (memory.param_count(cfg), memory.param_bytes(cfg)) == (params, 4 * (params + buffers))


@pytest.mark.parametrize(("norm", "ffn", "positional", "kv"), list(itertools.product(
    ["layernorm", "rmsnorm"], ["mlp", "gated"], ["rope", "learned"], [0, 1])))
def test_param_count_covers_todays_decoders(norm, ffn, positional, kv):
    cfg = TransformerConfig(arch="decoder_only", d_model=8, n_heads=2, n_layers=3, d_ffn=12, vocab_size=37,
                            max_len=11, norm=norm, ffn=ffn, positional=positional, n_kv_heads=kv, qkv_bias=kv == 0,
                            linear_bias=False)
    real = build_model(cfg, "cpu")
    assert memory.param_count(cfg) == sum(p.numel() for p in real.parameters())
    assert memory.param_bytes(cfg) == memory.module_bytes(real)


def test_huge_configs_are_counted_without_allocating_anything():
    cfg = TransformerConfig(d_model=16_384, n_heads=256, n_layers=256, d_ffn=65_536, vocab_size=1_000_000,
                            max_len=100_000)
    assert memory.param_count(cfg) > 10**12  # would be terabytes: counted on the meta device, never allocated
    assert memory.param_bytes(cfg) > 4 * memory.param_count(cfg)  # plus the sine/cosine tables


def stored_bytes(tensors) -> int:
    """Bytes of the distinct storages behind some tensors (what they really hold)."""
    seen = {}
    for t in tensors:
        st = t.untyped_storage()
        seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("keep", [memory.KEEP_ALL, 0, 1, 9, memory.KEEP_WEIGHTS])
def test_trace_estimate_bounds_the_bytes_a_trace_holds(family, keep):
    cfg = FAMILIES[family]
    model = build_model(cfg, "cpu")
    for T in (7, 96):
        src = torch.randint(0, cfg.vocab_size, (1, T))
        tgt = torch.randint(0, cfg.vocab_size, (1, T + 3)) if cfg.arch == "encoder_decoder" else None
        logits, trace = run_with_trace(model, src, tgt, names=None if keep == memory.KEEP_ALL else memory.wanted(keep))
        if keep == memory.KEEP_WEIGHTS:  # every attention block's weights and mask, nothing else (the logits returned,
            # their softmax as the estimate counts it)
            assert trace.tensors and all(n.endswith((".hook_weights", ".hook_mask")) for n in trace.tensors)
            assert len(trace.blocks()) == trace.n_blocks()
            held = stored_bytes([*trace.tensors.values(), logits, torch.softmax(logits, dim=-1)])
        else:
            held = stored_bytes([*trace.tensors.values(), trace.probs])
        est = memory.trace_estimate(cfg, T, T + 3, keep=keep)
        assert held <= est.kept + est.logits + est.probs <= 1.15 * held
        assert est.total >= est.kept + est.logits + est.probs


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_loaded_model_measures_what_its_config_measures_on_the_meta_device(family):
    """Two paths to one footprint: the built model run on the CPU, and its config run with shapes only."""
    cfg = FAMILIES[family].replace(seed=7)  # a config nobody measured yet in this process
    from_model = footprint.measure(build_model(cfg, "cpu"))
    footprint._FOOTPRINTS.clear()
    from_meta = footprint.footprint(cfg)
    assert from_model.hooks.keys() == from_meta.hooks.keys()
    for n_src, n_tgt in ((1, 1), (5, 9), (300, 200)):
        for keep in (memory.KEEP_ALL, 1):
            chosen = memory.wanted(keep)
            assert from_model.kept(chosen, n_src, n_tgt) == from_meta.kept(chosen, n_src, n_tgt) > 0
        assert from_model.logits(n_src, n_tgt) == from_meta.logits(n_src, n_tgt) == 4 * cfg.vocab_size * (
            n_tgt if cfg.arch == "encoder_decoder" else n_src)
        assert from_model.peak(n_src, n_tgt) == from_meta.peak(n_src, n_tgt)


def test_a_new_block_type_changes_the_estimate_with_no_formula():
    """A gated FFN keeps its gate and up projections: the estimate grows by exactly those (B, T, d_ffn) tensors."""
    plain = FAMILIES["course-gpt"]
    gated = plain.replace(ffn="gated")
    T = 50
    grew = memory.trace_estimate(gated, T).kept - memory.trace_estimate(plain, T).kept
    assert grew == plain.n_layers * 2 * T * plain.d_ffn * 4


def test_keeping_one_layer_costs_less_than_keeping_all_and_more_than_none():
    cfg = PRESETS["course-base"]
    all_, one, weights, none = (memory.trace_bytes(cfg, 1000, keep=k) for k in (memory.KEEP_ALL, 0,
                                                                                memory.KEEP_WEIGHTS, memory.KEEP_NONE))
    assert all_ > one > weights > none
    # a 1000-token trace of the course preset is about 1.1 GB; pages keep one layer's heads
    assert 1.0e9 < one < 2.0e9


HIGH_WATER_MARK = r"""
def peak():  # this process's own high-water mark (ru_maxrss would carry the parent's over fork and exec)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the high-water mark starts again at the current RSS
except OSError:
    pass
before = peak()
"""  # a fresh process measures its own peak RSS from here on: `before`, then `peak()`

PEAK_SCRIPT = r"""
import gc, json, sys
import torch
torch.set_num_threads(1)
from transformer_core.model import footprint, memory
from transformer_core.model.config import TransformerConfig
from transformer_core.model.hooks import layer_filter
from transformer_core.model.trace import run, run_with_trace
from transformer_core.model.transformer import build_model

T, keep = int(sys.argv[1]), sys.argv[2]
keep = int(keep) if keep.isdigit() else keep
cfg = TransformerConfig.from_dict(json.loads(sys.argv[3]))
arch = cfg.arch
model = build_model(cfg, "cpu")
src = torch.randint(0, cfg.vocab_size, (1, T))
tgt = torch.randint(0, cfg.vocab_size, (1, T)) if arch == "encoder_decoder" else None
run_with_trace(model, src[:, :4], None if tgt is None else tgt[:, :4])[1].probs  # load every kernel first
gc.collect()
""" + HIGH_WATER_MARK + r"""if keep == "none":
    out = run(model, src, tgt)
else:
    _, trace = run_with_trace(model, src, tgt, names=None if keep == "all" else layer_filter(keep))
    trace.probs
print(json.dumps({"grew": peak() - before,
                  "estimate": memory.trace_bytes(cfg, T, T, keep=keep, probs=keep != "none")}))
"""


def run_fresh(script: str, *args: str) -> dict:
    """Run a script in a fresh Python (its peak RSS is its own) with glibc returning freed blocks at once."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, timeout=300,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("family", "keep"), [("translator", "all"), ("course-gpt", "0"), ("translator", "none"),
                                              ("modern", "all"), ("modern", "none")])
def test_trace_estimate_bounds_the_measured_peak_of_a_fresh_process(family, keep):
    got = run_fresh(PEAK_SCRIPT, "768", keep, FAMILIES[family].to_json())
    assert got["grew"] > 20 * 2**20  # the run is big enough to measure
    assert got["grew"] <= got["estimate"] <= 1.5 * got["grew"], got


def saved_for_backward(cfg: TransformerConfig, batch: int, T: int) -> int:
    """Bytes of the activations autograd saves in one training forward (parameters not counted)."""
    model = build_model(cfg, "cpu").train()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            seen[st.data_ptr()] = st.nbytes()
        return t

    src = torch.randint(0, cfg.vocab_size, (batch, T))
    tgt = torch.randint(0, cfg.vocab_size, (batch, T))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(src) if cfg.arch == "decoder_only" else model(src, tgt)
        F.cross_entropy(logits.flatten(0, 1), tgt.flatten())
    return sum(seen.values())


@pytest.mark.parametrize(("arch", "dropout", "activation", "batch", "T"), [
    ("encoder_decoder", 0.1, "relu", 2, 256), ("encoder_decoder", 0.0, "gelu", 8, 64),
    ("decoder_only", 0.1, "gelu", 4, 128), ("decoder_only", 0.0, "relu", 8, 32)])
def test_training_activation_estimate_bounds_what_autograd_saves(arch, dropout, activation, batch, T):
    cfg = TransformerConfig(arch=arch, d_model=64, n_heads=4, n_layers=2, d_ffn=256, vocab_size=1000, max_len=512,
                            dropout=dropout, activation=activation)
    saved = saved_for_backward(cfg, batch, T)
    assert saved <= memory.train_activation_bytes(cfg, batch, T, T) <= 2.5 * saved


@pytest.mark.parametrize("family", ["modern", "gpt2-layout"])
def test_training_activation_estimate_bounds_what_autograd_saves_in_other_families(family):
    cfg = FAMILIES[family].replace(dropout=0.1)
    saved = saved_for_backward(cfg, 4, 128)
    assert saved <= memory.train_activation_bytes(cfg, 4, 128, 128) <= 2.5 * saved


TRAIN_SCRIPT = r"""
import gc, json, sys
import torch
import torch.nn.functional as F
torch.set_num_threads(1)
from transformer_core.model import footprint, memory
from transformer_core.model.config import TransformerConfig
from transformer_core.model.transformer import build_model

arch, B, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cfg = TransformerConfig(arch=arch, d_model=64, n_heads=4, n_layers=2, d_ffn=256, vocab_size=2000, max_len=1024,
                        dropout=0.1)
model = build_model(cfg, "cpu").train()
opt = torch.optim.AdamW(model.parameters())
src, tgt = torch.randint(0, 2000, (B, T)), torch.randint(0, 2000, (B, T))
gc.collect()
""" + HIGH_WATER_MARK + r"""logits = model(src) if arch == "decoder_only" else model(src, tgt)
loss = F.cross_entropy(logits.flatten(0, 1), tgt.flatten())
del logits
opt.zero_grad(set_to_none=True)
loss.backward()
opt.step()  # the first step allocates AdamW's two moments
grew = peak() - before
print(json.dumps({"grew": grew, "estimate": memory.train_bytes(cfg, B, T, T) - memory.param_bytes(cfg)}))
"""


@pytest.mark.parametrize(("arch", "batch", "T"), [("encoder_decoder", 2, 512), ("decoder_only", 8, 128)])
def test_training_estimate_bounds_the_measured_peak_of_a_training_step(arch, batch, T):
    got = run_fresh(TRAIN_SCRIPT, arch, str(batch), str(T))
    assert got["grew"] <= got["estimate"] <= 2.5 * got["grew"], got


def test_max_tokens_that_fit_is_the_largest_length_within_the_budget():
    cfg = PRESETS["course-base"]
    for keep in (memory.KEEP_ALL, 0, memory.KEEP_NONE):
        budget = 600 * 2**20
        n = memory.max_tokens_that_fit(cfg, budget, keep=keep)
        assert 0 < n < cfg.max_len
        assert memory.trace_bytes(cfg, n, n, keep=keep) <= budget < memory.trace_bytes(cfg, n + 1, n + 1, keep=keep)
    assert memory.max_tokens_that_fit(cfg, 10) == 0  # not even one token
    assert memory.max_tokens_that_fit(PRESETS["tiny"], 2**40) == PRESETS["tiny"].max_len  # capped by the model
