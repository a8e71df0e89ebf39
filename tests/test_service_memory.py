"""Memory before work (transformer_core.model.memory): the estimates against real runs.

Stated factors, pinned here:
* parameters: exact (== sum(p.numel()) of the built model, for every preset and a grid of options);
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

from transformer_core.model import memory
from transformer_core.model.config import PRESETS, TransformerConfig
from transformer_core.model.hooks import layer_filter
from transformer_core.model.trace import run_with_trace
from transformer_core.model.transformer import Transformer, build_model

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("one_torch_thread")
WIDE = dict(d_model=32, n_heads=4, n_layers=2, d_ffn=64, vocab_size=512, max_len=1024, dropout=0.0)


def meta_counts(cfg: TransformerConfig) -> tuple[int, int]:
    with torch.device("meta"):
        model = Transformer(cfg)
    return sum(p.numel() for p in model.parameters()), sum(b.numel() for b in model.buffers())


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_param_count_formula_equals_the_built_presets(name):
    params, buffers = meta_counts(PRESETS[name])
    assert memory.param_count(PRESETS[name]) == params
    assert memory.param_bytes(PRESETS[name]) == 4 * (params + buffers)


@pytest.mark.parametrize(("arch", "positional", "final_norm", "tie", "bias"), list(itertools.product(
    ["encoder_decoder", "decoder_only"], ["sinusoidal", "learned", "none"], [False, True], [False, True],
    [False, True])))
def test_param_count_formula_covers_every_option(arch, positional, final_norm, tie, bias):
    cfg = TransformerConfig(arch=arch, d_model=8, n_heads=2, n_layers=3, d_ffn=12, vocab_size=37, max_len=11,
                            positional=positional, final_norm=final_norm, tie_embeddings=tie, output_bias=bias)
    params, buffers = meta_counts(cfg)
    assert (memory.param_count(cfg), memory.param_bytes(cfg)) == (params, 4 * (params + buffers))


def test_huge_configs_are_counted_instantly_without_building_anything():
    cfg = TransformerConfig(d_model=16_384, n_heads=256, n_layers=256, d_ffn=65_536, vocab_size=1_000_000,
                            max_len=100_000)
    assert memory.param_count(cfg) > 10**12  # would be terabytes: a formula, not an allocation
    assert memory.param_bytes(cfg) > 4 * memory.param_count(cfg)  # plus the sine/cosine tables


def stored_bytes(tensors) -> int:
    """Bytes of the distinct storages behind some tensors (what they really hold)."""
    seen = {}
    for t in tensors:
        st = t.untyped_storage()
        seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
@pytest.mark.parametrize("keep", [memory.KEEP_ALL, 0, 1, 9])
def test_trace_estimate_bounds_the_bytes_a_trace_holds(arch, keep):
    cfg = TransformerConfig(arch=arch, **WIDE)
    model = build_model(cfg, "cpu")
    for T in (7, 96):
        src = torch.randint(0, cfg.vocab_size, (1, T))
        tgt = torch.randint(0, cfg.vocab_size, (1, T + 3)) if arch == "encoder_decoder" else None
        _, trace = run_with_trace(model, src, tgt, names=None if keep == memory.KEEP_ALL else layer_filter(keep))
        held = stored_bytes([*trace.tensors.values(), trace.probs])
        est = memory.trace_estimate(cfg, T, T + 3, keep=keep)
        assert held <= est.kept + est.logits + est.probs <= 1.15 * held
        assert est.total >= est.kept + est.logits + est.probs


def test_keeping_one_layer_costs_less_than_keeping_all_and_more_than_none():
    cfg = PRESETS["course-base"]
    all_, one, none = (memory.trace_bytes(cfg, 1000, keep=k) for k in (memory.KEEP_ALL, 0, memory.KEEP_NONE))
    assert all_ > one > none
    # the figure: a 1000-token trace of the course preset is about 1.1 GB; pages keep one layer's heads
    assert 1.0e9 < one < 2.0e9


PEAK_SCRIPT = r"""
import gc, json, sys
import torch
torch.set_num_threads(1)
from transformer_core.model import memory
from transformer_core.model.config import TransformerConfig
from transformer_core.model.hooks import layer_filter
from transformer_core.model.trace import run, run_with_trace
from transformer_core.model.transformer import build_model

arch, T, keep = sys.argv[1], int(sys.argv[2]), sys.argv[3]
keep = int(keep) if keep.isdigit() else keep
cfg = TransformerConfig(arch=arch, **json.loads(sys.argv[4]))
model = build_model(cfg, "cpu")
src = torch.randint(0, cfg.vocab_size, (1, T))
tgt = torch.randint(0, cfg.vocab_size, (1, T)) if arch == "encoder_decoder" else None
run_with_trace(model, src[:, :4], None if tgt is None else tgt[:, :4])[1].probs  # load every kernel first
gc.collect()
def peak():  # this process's own high-water mark (ru_maxrss would carry the parent's over fork and exec)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the high-water mark starts again at the current RSS
except OSError:
    pass
before = peak()
if keep == "none":
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


@pytest.mark.parametrize(("arch", "keep"), [("encoder_decoder", "all"), ("decoder_only", "0"),
                                            ("encoder_decoder", "none")])
def test_trace_estimate_bounds_the_measured_peak_of_a_fresh_process(arch, keep):
    got = run_fresh(PEAK_SCRIPT, arch, "768", keep, json.dumps(WIDE))
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


TRAIN_SCRIPT = r"""
import gc, json, sys
import torch
import torch.nn.functional as F
torch.set_num_threads(1)
from transformer_core.model import memory
from transformer_core.model.config import TransformerConfig
from transformer_core.model.transformer import build_model

arch, B, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cfg = TransformerConfig(arch=arch, d_model=64, n_heads=4, n_layers=2, d_ffn=256, vocab_size=2000, max_len=1024,
                        dropout=0.1)
model = build_model(cfg, "cpu").train()
opt = torch.optim.AdamW(model.parameters())
src, tgt = torch.randint(0, 2000, (B, T)), torch.randint(0, 2000, (B, T))
gc.collect()
def peak():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the high-water mark starts again at the current RSS
except OSError:
    pass
before = peak()
logits = model(src) if arch == "decoder_only" else model(src, tgt)
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
