"""Named hook points (TransformerLens style) that capture intermediates without changing the math.

Capture is per thread/context (a ContextVar), so one shared model can be traced by many
Streamlit sessions at once: nothing is registered on the module itself.
"""
from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

_ACTIVE: contextvars.ContextVar[_Capture | None] = contextvars.ContextVar("capture", default=None)


class HookPoint(nn.Module):
    """Identity module; while a capture is active it stores a detached CPU snapshot of its input."""

    def __init__(self) -> None:
        super().__init__()
        self.name = ""  # set by name_hook_points() to the attribute path

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        store = _ACTIVE.get()
        if store is not None:
            store.save(self.name, x)
        return x


class _Capture:
    def __init__(self, wanted: Callable[[str], bool]) -> None:
        self.wanted = wanted
        self.tensors: dict[str, torch.Tensor] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}  # every hook point reached, stored or not

    def save(self, name: str, x: torch.Tensor) -> None:
        self.shapes[name] = tuple(x.shape)
        if self.wanted(name):
            self.tensors[name] = snapshot(x)


def snapshot(x: torch.Tensor) -> torch.Tensor:
    """A detached CPU tensor that nothing else can write: GPU tensors and views are copied; a fresh
    CPU result of an inference-mode op is kept as is (inference tensors refuse in-place updates)."""
    if x.device.type != "cpu" or x._is_view() or not x.is_inference():
        return x.detach().to("cpu", copy=True)
    return x.detach()


def name_hook_points(root: nn.Module) -> list[str]:
    """Give every HookPoint its attribute path (e.g. 'decoder.layers.0.self_attn.hook_weights')."""
    names = []
    for name, module in root.named_modules():
        if isinstance(module, HookPoint):
            module.name = name
            names.append(name)
    return names


def _selector(names: Iterable[str] | Callable[[str], bool] | None) -> Callable[[str], bool]:
    if names is None:
        return lambda _: True
    if callable(names):
        return names
    chosen = set(names)
    return chosen.__contains__


@contextmanager
def capture(names: Iterable[str] | Callable[[str], bool] | None = None) -> Iterator[dict[str, torch.Tensor]]:
    """Collect hook-point tensors of forwards run in this context; always deactivates in finally."""
    with capture_all(names) as store:
        yield store.tensors


@contextmanager
def capture_all(names: Iterable[str] | Callable[[str], bool] | None = None) -> Iterator[_Capture]:
    """Like capture(), yielding the store itself (tensors chosen by `names`, plus every hook's shape)."""
    store = _Capture(_selector(names))
    token = _ACTIVE.set(store)
    try:
        yield store
    finally:
        _ACTIVE.reset(token)
