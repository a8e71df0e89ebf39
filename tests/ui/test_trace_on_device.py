"""A trace kept on a GPU, simulated on the CPU: every page must read it through the trace's views (which bring what
they hand out to the CPU), never use its stored tensors as CPU tensors. Here the stored tensors are of a subclass that
refuses what a CUDA tensor refuses (its values read on the CPU, arithmetic with CPU tensors), and the trace's fetch
hands out plain tensors; each page then runs on it as it would on a GPU server."""
from __future__ import annotations

import pytest
import torch

import ui.cache
from harness.apptest import assert_clean, open_app, page_names
from transformer_core.model import hooks
from transformer_core.model.trace import Trace

READS = {"numpy", "tolist", "item", "__float__", "__int__", "__bool__", "__index__", "__array__"}


class OffCPU(torch.Tensor):
    """Behaves as if it lived on another device: reading its values, or arithmetic with a CPU tensor of more than one
    element, raises (as CUDA does); slicing, shapes and sizes work."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in READS:
            raise RuntimeError(f"a stored trace tensor read on the CPU ({name}) without the trace's fetch")
        flat = list(args) + list((kwargs or {}).values())
        if any(type(a) is torch.Tensor and a.dim() > 0 for a in flat):
            raise RuntimeError(f"a stored trace tensor mixed with a CPU tensor ({name}) without the trace's fetch")
        return super().__torch_function__(func, types, args, kwargs)


def off_cpu_snapshot(real):
    def snapshot(x, on_device=False):
        kept = real(x, on_device)
        return kept.as_subclass(OffCPU) if on_device else kept
    return snapshot


def plain_fetch(real):
    def fetch(self, x):  # the trace's own fetch (it counts), then a plain CPU tensor as a GPU's copy would be
        with torch._C.DisableTorchFunctionSubclass():
            return real(self, x).as_subclass(torch.Tensor).clone()
    return fetch


@pytest.fixture
def traces_off_cpu(monkeypatch):
    monkeypatch.setattr(hooks, "snapshot", off_cpu_snapshot(hooks.snapshot))
    monkeypatch.setattr(Trace, "fetch", plain_fetch(Trace.fetch))
    ui.cache.TRACES.clear()  # no trace of an earlier test (plain tensors) may stand in
    yield
    ui.cache.TRACES.clear()  # nor may these reach a later test


def test_the_simulated_device_refuses_what_cuda_refuses(traces_off_cpu):
    x = hooks.snapshot(torch.ones(2, 3), on_device=True)
    assert x[0].shape == (3,) and x.size(1) == 3
    for read in (lambda: x.numpy(), lambda: x.tolist(), lambda: float(x[0, 0]), lambda: x + torch.ones(2, 3)):
        with pytest.raises(RuntimeError, match="without the trace's fetch"):
            read()


NO_TRACE = {"demos", "tokenizer", "bpe", "learn"}  # pages that read no trace of the learner's text (they run clean)
CASES = [(page, "shipped:everyday-gpt") for page in page_names() if page != "train"] + [
    (page, model) for model in ("shipped:modern-gpt", "shipped:dates-zh")
    for page in ("attention", "embeddings", "lens", "flow", "logits", "intervene")]


@pytest.mark.parametrize(("page", "model"), CASES)
def test_every_page_reads_a_device_trace_through_its_views(traces_off_cpu, page, model):
    at = open_app(page, model=model, lang="en")
    assert_clean(at)
    stored = (t for value, _ in ui.cache.TRACES._items.values() for t in value[1].tensors.values())
    traced = any(isinstance(t, OffCPU) for t in stored)
    assert traced != (page in NO_TRACE)


def test_a_clicked_cell_and_the_exports_read_a_device_trace_through_its_views(traces_off_cpu):
    at = open_app("attention", model="shipped:modern-gpt", lang="en", text="The cat sat on the mat. The cat sat on the")
    at.session_state["att_cell"] = (10, 4)  # the query steps and the q·k attribution of one cell
    for view in ("attention", "qk_attribution"):
        at.session_state[f"xp_open_{view}"] = True
    at.run()
    assert_clean(at)
    assert any(s.value.startswith("Why 10 ‘") for s in at.subheader)
