"""What a model's forward keeps and peaks at, measured rather than described: the forward runs with the hook points
counting what a trace would keep and a torch-function mode following which tensors are alive after each operation.
Any family the core can build is measured the same way, so a new block type (RMSNorm, SwiGLU, grouped-query
attention, rotary q/k) needs no formula here.

A loaded model measures itself, on its own device, at a few short lengths (`measure`, called when a model is
loaded). A config not built yet (a training job, an upload, a preset before its load) is run on PyTorch's meta
device: shapes only, nothing computed or allocated; its first use in a process costs about a second (PyTorch
imports its compiler's guard for the meta kernels). Both give the same figures (tests/service/test_service_memory.py).

Two facts make it cheap and exact:
* every layer of a stack is the same module (every family today), so a one-layer model is measured and its
  layer's figures multiplied: the cost does not grow with depth;
* every tensor's size is a polynomial of degree at most 2 in the lengths (T·d, heads·T², T·vocab), so three short
  runs (six for an encoder-decoder's two lengths) give its exact coefficients for any length.
"""
from __future__ import annotations

import copy
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from .config import TransformerConfig
from .hooks import counting
from .transformer import Transformer

# Lengths measured: (source, target); a decoder-only model reads the source alone. Six points no conic passes
# through, so the six coefficients of 1, Ts, Tt, Ts², Tt², Ts·Tt are determined. No length 1: a reshape of one
# position is a view where longer ones copy (a trace of one token then holds a little less than the fit says).
POINTS = {"decoder_only": ((2, 2), (3, 2), (4, 2)),
          "encoder_decoder": ((2, 2), (3, 2), (4, 2), (2, 3), (2, 4), (3, 3))}
LAYER = ".layers.0."  # the measured model's one layer


def features(arch: str, n_src: int, n_tgt: int | None) -> np.ndarray:
    """The monomials the coefficients multiply."""
    s = float(n_src)
    if arch == "decoder_only":
        return np.array([1.0, s, s * s])
    t = float(n_tgt if n_tgt is not None else n_src)
    return np.array([1.0, s, t, s * s, t * t, s * t])


def one_layer(cfg: TransformerConfig, layers: int = 1) -> Transformer:
    """The config's model with `layers` layers per stack, on the meta device (no memory)."""
    with torch.device("meta"):
        return Transformer(cfg.replace(n_layers=layers, max_len=max(cfg.max_len, 4)))


def one_layer_of(model: Transformer) -> Transformer:
    """A shallow copy of a built model whose stacks hold only their first layer (parameters shared, nothing
    allocated; layer 0's hook points keep their names)."""
    short = copy.copy(model)
    short._modules = dict(model._modules)
    for side in ("encoder", "decoder"):
        stack = getattr(model, side)
        if stack is not None:
            one = copy.copy(stack)
            one._modules = {**stack._modules, "layers": torch.nn.ModuleList([stack.layers[0]])}
            short._modules[side] = one
    return short


def ids(batch: int, n: int, device="meta") -> torch.Tensor:
    return torch.zeros(batch, n, dtype=torch.long, device=device)


def storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


class _Alive(TorchFunctionMode):
    """Bytes of the storages alive after each operation (a storage lives while any tensor on it lives); the
    model's own parameters and buffers are not counted."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.own = {storage_key(t) for t in [*model.parameters(), *model.buffers()]}
        self.tensors: dict[int, int] = {}  # id(tensor) -> its storage
        self.refs: dict[int, int] = {}  # storage -> live tensors on it
        self.sizes: dict[int, int] = {}
        self.live = 0
        self.trail: list[int] = []  # live bytes after each operation

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):  # torch functions return a tensor or a few
            if isinstance(t, torch.Tensor) and id(t) not in self.tensors:
                self._follow(t)
        self.trail.append(self.live)
        return out

    def _follow(self, t: torch.Tensor) -> None:
        key = storage_key(t)
        if key in self.own:
            return
        self.tensors[id(t)] = key
        if not self.refs.get(key):
            self.sizes[key] = t.untyped_storage().nbytes()
            self.live += self.sizes[key]
        self.refs[key] = self.refs.get(key, 0) + 1
        weakref.finalize(t, self._drop, id(t), key)

    def _drop(self, tid: int, key: int) -> None:
        self.tensors.pop(tid, None)
        self.refs[key] -= 1
        if not self.refs[key]:
            self.live -= self.sizes.pop(key)


def _run(model: Transformer, batch: int, n_src: int, n_tgt: int) -> tuple[dict[str, tuple[int, int | None]],
                                                                          list[int]]:
    """(hook path -> (bytes a trace keeps, storage or None for a copy), live bytes after each operation)."""
    device = next(model.parameters()).device
    src, tgt = ids(batch, n_src, device), ids(batch, n_tgt, device) if model.is_encoder_decoder else None
    with torch.inference_mode(), counting() as kept, _Alive(model) as alive:
        model(src, tgt)
    return kept, alive.trail


def _solve(arch: str, rows: list[np.ndarray]) -> np.ndarray:
    """Coefficients (over `features`) of values measured at POINTS: rows (points, ...) -> (features, ...)."""
    A = np.stack([features(arch, s, t) for s, t in POINTS[arch]])
    return np.rint(np.linalg.solve(A, np.stack(rows))).astype(np.float64)


@dataclass(frozen=True)
class Footprint:
    """A traced forward of one config, as coefficients over `features(arch, n_src, n_tgt)`.

    hooks: per hook point of the one-layer model, the bytes a trace keeps (a hook whose tensor another hook kept
    already counts 0); live: bytes alive after each operation of the forward (what it works with, kept or not).
    """

    arch: str
    layers: int
    hooks: dict[str, np.ndarray]
    live: np.ndarray  # (operations, features)

    def kept(self, wanted, n_src: int, n_tgt: int | None) -> int:
        """Bytes the hook points chosen by wanted(path) keep, every layer counted (hook_logits left out)."""
        f = features(self.arch, n_src, n_tgt)
        total = 0.0
        for name, coef in self.hooks.items():
            if name == "hook_logits":
                continue
            copies = 1
            if LAYER in name:
                copies = sum(bool(wanted(name.replace(LAYER, f".layers.{j}."))) for j in range(self.layers))
            elif not wanted(name):
                copies = 0
            total += copies * float(coef @ f)
        return int(total)

    def logits(self, n_src: int, n_tgt: int | None) -> int:
        return int(self.hooks["hook_logits"] @ features(self.arch, n_src, n_tgt))

    def peak(self, n_src: int, n_tgt: int | None) -> int:
        """The most bytes alive at once during the forward (what it keeps is counted by `kept`)."""
        return int((self.live @ features(self.arch, n_src, n_tgt)).max())


_FOOTPRINTS: OrderedDict[tuple[TransformerConfig, int], Footprint] = OrderedDict()  # the most recent 256
_LOCK = threading.Lock()


def footprint(cfg: TransformerConfig, batch: int = 1) -> Footprint:
    """A config's forward: measured once (from its loaded model, see `measure`, or on the meta device)."""
    with _LOCK:
        found = _FOOTPRINTS.get((cfg, batch))
    return found if found is not None else _remember(cfg, batch, _measure(cfg, one_layer(cfg).eval(), batch))


def measure(model: Transformer, batch: int = 1) -> Footprint:
    """Measure a built model's forward on its own device (a few tokens through its first layer)."""
    with _LOCK:
        found = _FOOTPRINTS.get((model.cfg, batch))
    if found is not None:
        return found
    with torch.random.fork_rng(devices=[]):  # dropout is off in eval mode; keep every generator untouched anyway
        return _remember(model.cfg, batch, _measure(model.cfg, one_layer_of(model), batch))


def _remember(cfg: TransformerConfig, batch: int, found: Footprint) -> Footprint:
    with _LOCK:
        _FOOTPRINTS[(cfg, batch)] = found
        _FOOTPRINTS.move_to_end((cfg, batch))
        while len(_FOOTPRINTS) > 256:
            _FOOTPRINTS.popitem(last=False)
    return found


def _measure(cfg: TransformerConfig, model: Transformer, batch: int) -> Footprint:
    """Run the one-layer model of a config at the lengths of POINTS and fit every size."""
    runs = [_run(model, batch, s, t) for s, t in POINTS[cfg.arch]]
    names = list(runs[0][0])
    if any(list(r[0]) != names or len(r[1]) != len(runs[0][1]) for r in runs):
        raise RuntimeError("the forward's operations depend on the length")  # a family this module cannot fit
    hooks = _solve(cfg.arch, [np.array([r[0][n][0] for n in names], dtype=np.float64) for r in runs])
    live = _solve(cfg.arch, [np.array(r[1], dtype=np.float64) for r in runs])
    return Footprint(cfg.arch, cfg.n_layers, dict(zip(names, hooks.T)), live.T)


def _saved(cfg: TransformerConfig, layers: int, batch: int, n_src: int, n_tgt: int) -> int:
    """Bytes of the activations autograd saves in one training forward and loss (parameters not counted)."""
    model = one_layer(cfg, layers).train()
    own = {storage_key(p) for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if storage_key(t) not in own:
            seen[storage_key(t)] = t.untyped_storage().nbytes()
        return t

    src, tgt = ids(batch, n_src), ids(batch, n_tgt)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(src, tgt) if model.is_encoder_decoder else model(src)  # (B, T, vocab)
        F.cross_entropy(logits.flatten(0, 1), (tgt if model.is_encoder_decoder else src).flatten())
    return sum(seen.values())


@lru_cache(maxsize=256)
def saved_for_backward(cfg: TransformerConfig, batch: int, n_src: int, n_tgt: int) -> int:
    """What autograd saves in one training step of the config, from one- and two-layer models (the rest by layer)."""
    one, two = _saved(cfg, 1, batch, n_src, n_tgt), _saved(cfg, 2, batch, n_src, n_tgt)
    return one + (cfg.n_layers - 1) * (two - one)


@lru_cache(maxsize=256)
def parameters(cfg: TransformerConfig) -> tuple[int, int]:
    """(parameters, buffer elements) of the built model (tied weights once), from one- and two-layer models."""
    def count(layers: int) -> tuple[int, int]:
        with torch.device("meta"):
            model = Transformer(cfg.replace(n_layers=layers))
        return sum(p.numel() for p in model.parameters()), sum(b.numel() for b in model.buffers())

    (p1, b1), (p2, b2) = count(1), count(2)
    return p1 + (cfg.n_layers - 1) * (p2 - p1), b1 + (cfg.n_layers - 1) * (b2 - b1)
