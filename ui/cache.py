"""Process-wide caches: one model per key for all sessions, one trace per (model, text, masks, layer).

Traces are cached with cache_resource (shared, no copy on read): a Trace is immutable (its tensors are
inference tensors that refuse in-place writes), so sharing it across sessions is safe and keeps reruns fast.
"""
from __future__ import annotations

import time

import streamlit as st
import torch

from transformer_core import registry
from transformer_core.device import device_name, pick_device
from transformer_core.pipeline import Prepared, prepare
from transformer_core.trace import Trace, layer_filter, run, run_with_trace


@st.cache_resource(show_spinner="Loading the model…", max_entries=6)
def get_model(key: str, device: str):
    """(model, meta) for a registry key, built once per server process and shared read-only."""
    return registry.load_model(key, device)


@st.cache_resource(show_spinner=False)
def get_device() -> tuple[str, str]:
    """(torch device string, readable name); an unusable TRANSFORMER_EXPLORER_DEVICE falls back to auto."""
    try:
        dev = pick_device()
    except ValueError:
        dev = pick_device("auto")
    return str(dev), device_name(dev)


@st.cache_resource(show_spinner=False, max_entries=48, ttl=3600)
def get_trace(key: str, device: str, text: str, tgt_text: str | None, masks: tuple, layer: int,
              allow_special: bool, extra: tuple = ()) -> tuple[Prepared, Trace]:
    """Tokenize and trace once per input; per-head tensors kept for `layer` only."""
    model, _ = get_model(key, device)
    prep = prepare(model, text, tgt_text, allow_special=allow_special, extra=extra)
    _, trace = run_with_trace(model, prep.src_ids, prep.tgt_ids, masks=dict(masks), names=layer_filter(layer))
    return prep, trace


@st.cache_resource(show_spinner=False, max_entries=48, ttl=3600)
def forward_time_ms(key: str, device: str, text: str, tgt_text: str | None, repeats: int = 5) -> float:
    """Median wall time of an untraced forward of this text."""
    model, _ = get_model(key, device)
    prep = prepare(model, text, tgt_text)
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        run(model, prep.src_ids, prep.tgt_ids)
        if torch.cuda.is_available() and device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return 1000 * sorted(times[1:])[len(times[1:]) // 2]
