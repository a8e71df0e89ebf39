"""Process-wide caches: one model per key for all sessions, one trace per (model, text, masks, layer); both
bounded by bytes (TRANSFORMER_EXPLORER_MODEL_CACHE_MB, TRANSFORMER_EXPLORER_TRACE_CACHE_MB).

Traces are shared by all sessions without copying: a Trace is immutable (its tensors are inference tensors
that refuse in-place writes). They live in a byte-bounded LRU (a 1000-token trace of the base model holds
hundreds of MB, so a count limit alone is not enough); concurrent requests for one key compute it once.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

import streamlit as st
import torch

from service import budget, catalog
from service.settings import settings
from transformer_core.errors import DeviceError
from transformer_core.model.device import device_name, pick_device
from transformer_core.model.memory import KEEP_ALL, module_bytes, trace_bytes, wanted
from transformer_core.model.trace import Trace, run, run_with_trace
from transformer_core.text.inputs import Prepared, prepare


def get_model(key: str, device: str):
    """(model, card) for a catalog key, built once per server process and shared read-only. Who may open a
    private model is checked before (ui.model_choice.load_selected_model), not here: the cache is shared. Models are
    kept in a byte-bounded LRU shared by every session (MODELS): opening many models evicts the least recently
    used, so one session cannot fill the server with them."""
    return MODELS.get((key, device), lambda: _loaded(key, device, catalog.load_any(key, device)))


def _loaded(key: str, device: str, found: tuple):
    """A model this run's thread just loaded: its text-independent measurements are due (warm_loaded, at the end of
    the same run; a run that fails leaves nothing due: its thread's list goes with it)."""
    _FRESH.__dict__.setdefault("keys", []).append((key, device))
    return found


_FRESH = threading.local()  # per script thread (a run): the models it loaded


def warm_loaded() -> None:
    """Call at the end of a run that got there (app.py): for each model this run loaded and the cache still holds,
    measure in a background thread what does not depend on the learner's text (the induction probe the Attention and
    Heads pages label heads with: 0.4 s of the default's first Attention page), so no learner waits for it; the run's
    page is already sent, and a page that asks meanwhile waits for this one measurement (PER_MODEL computes each key
    once). Not a daemon thread (a run's thread is one, and its threads too): the process waits for it at exit, where
    a daemon thread inside a torch op aborted it."""
    for key, device in dict.fromkeys(_FRESH.__dict__.pop("keys", [])):
        if MODELS.holds((key, device)):  # never load a model again only to measure it
            threading.Thread(target=_warm, args=(key, device), name=f"warm {key}", daemon=False).start()


def _warm(key: str, device: str) -> None:
    try:
        induction_by_block(key, device)
    except Exception:  # noqa: BLE001 - labels are extra: the page that needs them measures again (and says why not)
        pass


@st.cache_resource(show_spinner=False)
def get_device() -> tuple[str, str]:
    """(torch device string, readable name); an unusable device setting falls back to auto."""
    try:
        dev = pick_device(settings().device)
    except DeviceError:
        dev = pick_device("auto")
    return str(dev), device_name(dev)


def held_bytes(trace: Trace) -> int:
    return sum(t.numel() * t.element_size() for t in trace.tensors.values())


class BoundedCache:
    """Thread-safe LRU bounded by bytes; one computation per key even under concurrent requests."""

    def __init__(self, max_bytes: int, size_of: Callable[[object], int]) -> None:
        self.max_bytes, self.size_of = max_bytes, size_of
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple, tuple[object, int]] = OrderedDict()
        self._pending: dict[tuple, threading.Event] = {}

    def get(self, key: tuple, compute: Callable[[], object]):
        while True:
            with self._lock:
                if key in self._items:
                    self._items.move_to_end(key)
                    return self._items[key][0]
                event = self._pending.get(key)
                if event is None:
                    self._pending[key] = threading.Event()
                    break
            event.wait()  # another session is computing this key; an error there makes us retry
        try:
            value = compute()
            with self._lock:
                self._items[key] = (value, self.size_of(value))
                while self.total_bytes() > self.max_bytes and len(self._items) > 1:
                    self._items.popitem(last=False)
            return value
        finally:
            with self._lock:
                self._pending.pop(key).set()

    def holds(self, key: tuple) -> bool:
        with self._lock:
            return key in self._items

    def total_bytes(self) -> int:
        return sum(size for _, size in self._items.values())

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


# Intra-op threads of the pages' tensor work, set once as the server's first run imports this module; every later
# run's script thread starts with it. Many learners' pages run at once, and with OpenMP each calling thread gets its
# own team: two threads per op on two cores made the sessions wait on each other's spinning teams.
torch.set_num_threads(settings().page_threads)
TRACES = BoundedCache(settings().trace_cache_mb * 2**20, lambda value: held_bytes(value[1]))
MODELS = BoundedCache(settings().model_cache_mb * 2**20, lambda value: module_bytes(value[0]))
# what a model's pages measure once, whatever the text: {(kind, layer): (nh,) tensor}, a few KB each
PER_MODEL = BoundedCache(16 * 2**20, lambda value: sum(v.numel() * v.element_size() for v in value.values()))


WHOLE_TRACE_BYTES = 32 * 2**20  # a trace at most this big keeps every layer's heads: one per text for all views


def trace_keep(cfg, text: str, tgt_text: str | None, extra: tuple, layer: int):
    """What a page's trace keeps: every layer (KEEP_ALL) when the longest input this text can make fits in
    WHOLE_TRACE_BYTES, so switching layers or pages reuses one trace (a small model: the room's load test spent a
    fifth of the Attention page's CPU tracing the same text again per layer); else only `layer`'s per-head maps.
    Decided from the config and the text's bytes (a token is at least one byte), before tokenizing."""
    longest = min(cfg.max_len, len(str(text).encode("utf-8", "replace")) + len(extra) + 2)
    n_tgt = None if tgt_text is None else min(cfg.max_len, len(str(tgt_text).encode("utf-8", "replace")) + 2)
    whole = trace_bytes(cfg, longest, n_tgt, keep=KEEP_ALL) <= WHOLE_TRACE_BYTES
    return KEEP_ALL if whole else layer


def get_trace(key: str, device: str, text: str, tgt_text: str | None, masks: tuple, layer: int,
              allow_special: bool, extra: tuple = (), keep=None) -> tuple[Prepared, Trace]:
    """Tokenize and trace once per input (shared by all sessions); per-head tensors kept for `layer` only, or
    for every layer when that is small (trace_keep); or what `keep` says (KEEP_WEIGHTS: every layer's weights)."""
    model, _ = get_model(key, device)
    keep = trace_keep(model.cfg, text, tgt_text, tuple(extra), layer) if keep is None else keep

    def compute():
        prep = budget.cut_to_fit(model.cfg, prepare(model, text, tgt_text, allow_special=allow_special, extra=extra),
                                 keep=keep)  # a long text on a big model: what fits
        n_tgt = None if prep.tgt_ids is None else prep.tgt_ids.size(1)
        with budget.trace_reservation(model.cfg, prep.src_ids.size(1), n_tgt, keep=keep):  # in-flight work counts
            _, trace = run_with_trace(model, prep.src_ids, prep.tgt_ids, masks=dict(masks),
                                      names=None if keep == KEEP_ALL else wanted(keep))
        return prep, trace

    return TRACES.get((key, device, text, tgt_text, masks, keep, allow_special, tuple(extra)), compute)


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


@st.cache_data(show_spinner=False, max_entries=256, ttl=3600)
def translation(key: str, device: str, text: str) -> str:
    """A translation model's greedy answer for a text (once per text, not on every rerun of every page)."""
    from transformer_core.train.translation import translate

    model, _ = get_model(key, device)
    return translate(model, text)


@st.cache_data(show_spinner=False, max_entries=4, ttl=600)
def model_file(key: str, device: str) -> bytes:
    """The model as one .safetensors file (weights, with the config in its metadata), for download."""
    import tempfile
    from pathlib import Path

    from transformer_core.train.checkpoint import WEIGHTS, save_checkpoint

    model, card = get_model(key, device)
    with tempfile.TemporaryDirectory() as tmp:
        return (save_checkpoint(model, Path(tmp) / "m", {}) / WEIGHTS).read_bytes()


@st.cache_resource(show_spinner=False, max_entries=8)
def neuron_index(key: str):
    """The neuron index shipped beside a model (read once per server), or None."""
    from transformer_core.analysis.neurons import load_index

    folder = catalog.shipped_folder(key)
    return None if folder is None else load_index(folder)


@st.cache_resource(show_spinner=False, max_entries=8)
def tuned_lens(key: str, device: str):
    """The tuned lens's translators shipped beside a model (read once per server), or None."""
    from transformer_core.analysis.tuned_lens import load

    folder = catalog.shipped_folder(key)
    return None if folder is None else load(folder, get_model(key, device)[0])


# a neuron's top examples with every window token's activation: a few KB each, computed once per server
EXAMPLES = BoundedCache(16 * 2**20, lambda value: 512 + sum(s.acts.nbytes + 64 * len(s.tokens) for s in value))


def neuron_examples(key: str, device: str, layer: int, neuron: int) -> list:
    """One neuron's top held-out examples from the model's shipped index, each token of each window shaded by its
    activation (analysis.neurons.top_snippets: one forward of the chunks they are in, up to the layer, held in the
    memory budget while it runs); [] when the model ships no index."""
    from transformer_core.analysis.neurons import TOP, top_snippets

    index = neuron_index(key)
    if index is None:
        return []
    model, _ = get_model(key, device)

    def compute():
        need = trace_bytes(model.cfg, index.ids.shape[1], keep=layer, batch=min(TOP, len(index.ids)), probs=False)
        with budget.reserve(need, "neuron examples"):
            return top_snippets(model, index, layer, neuron)

    return EXAMPLES.get(("examples", key, device, layer, neuron), compute)


def induction_by_block(key: str, device: str, length: int | None = None) -> dict:
    """(kind, layer) -> (nh,) induction scores of a model on the detector's probe (probe_count random sequences of
    `length` tokens, default_length by default, each written twice): they do not depend on the learner's text, so
    each model is measured once per server, and every page shows the same number as the model card."""
    from transformer_core.analysis.heads import default_length, induction_scores

    model, _ = get_model(key, device)
    length = default_length(model) if length is None else int(length)
    # keyed by the probe's resolved length: the Attention page (the default) and the Heads page (the same length,
    # given) share one measurement (they were two, 5.8 s each on SmolLM2-135M)
    return PER_MODEL.get(("induction", key, device, length), lambda: induction_scores(model, length))
