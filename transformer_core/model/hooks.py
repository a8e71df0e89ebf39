"""Named hook points (TransformerLens style) that capture intermediates without changing the math.

Capture is per thread/context (a ContextVar), so one shared model can be traced by many
Streamlit sessions at once: nothing is registered on the module itself. Edits (`intervene`) are per
thread/context the same way. `act_name` is the one place that spells a hook point's path.
"""
from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

_ACTIVE: contextvars.ContextVar[_Capture | None] = contextvars.ContextVar("capture", default=None)
_EDITS: contextvars.ContextVar[dict[str, Callable[[torch.Tensor], torch.Tensor]] | None] = contextvars.ContextVar(
    "edits", default=None)


class HookPoint(nn.Module):
    """Identity module; inside intervene() it returns edit(x) instead; while a capture is active it stores a
    detached snapshot of what it returns (so a trace shows the edit)."""

    def __init__(self) -> None:
        super().__init__()
        self.name = ""  # set by name_hook_points() to the attribute path

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        edits = _EDITS.get()
        if edits and self.name in edits:
            x = edits[self.name](x)
        store = _ACTIVE.get()
        if store is not None:
            store.save(self.name, x)
        return x


class CaptureDone(Exception):
    """Raised by a capture with stop_when_done once every wanted hook point is stored (ends the forward)."""


class _Capture:
    def __init__(self, wanted: Callable[[str], bool], until: set[str] | None = None, on_device: bool = False) -> None:
        self.wanted = wanted
        self.until = until  # stop the forward once all of these are stored
        self.on_device = on_device  # keep snapshots where the forward ran (a Trace brings them over when read)
        self.tensors: dict[str, torch.Tensor] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}  # every hook point reached, stored or not

    def save(self, name: str, x: torch.Tensor) -> None:
        self.shapes[name] = tuple(x.shape)
        if self.wanted(name):
            self.tensors[name] = snapshot(x, self.on_device)
            if self.until is not None and self.until <= self.tensors.keys():
                raise CaptureDone


def snapshot(x: torch.Tensor, on_device: bool = False) -> torch.Tensor:
    """A detached tensor that nothing else can write, on the CPU (on its own device with `on_device`): views,
    tensors of other devices and ones outside inference mode are copied; a fresh result of an inference-mode op is
    kept as is (inference tensors refuse in-place updates)."""
    if not on_device and x.device.type != "cpu":
        return x.detach().to("cpu")
    if x._is_view() or not x.is_inference():
        return x.detach().clone()
    return x.detach()


def capturing() -> bool:
    """Whether a capture is active in this thread / context."""
    return _ACTIVE.get() is not None


def observed(names: Iterable[str] | None = None) -> bool:
    """Whether hook points may matter in this thread / context: a capture is active, or an edit is set (when `names`
    are given: a capture that keeps one of them, or an edit of one of them). A block may skip the hook points nobody
    observes (a fused kernel of the same formula)."""
    edits, store = _EDITS.get(), _ACTIVE.get()
    if names is None:
        return store is not None or bool(edits)
    names = tuple(names)
    return any((store is not None and store.wanted(n)) or (bool(edits) and n in edits) for n in names)


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
def capture_all(names: Iterable[str] | Callable[[str], bool] | None = None,
                stop_when_done: bool = False, on_device: bool = False) -> Iterator[_Capture]:
    """Like capture(), yielding the store itself (tensors chosen by `names`, plus every hook's shape).
    stop_when_done (names: a list of hook paths): CaptureDone is raised once all are stored. on_device: the
    tensors stay on the forward's device (a Trace's; capture() hands out CPU tensors)."""
    if stop_when_done and (names is None or callable(names)):
        raise ValueError("stop_when_done needs the hook paths as a list")
    store = _Capture(_selector(names), set(names) if stop_when_done else None, on_device)
    token = _ACTIVE.set(store)
    try:
        yield store
    finally:
        _ACTIVE.reset(token)


class _Count:
    """What a trace would keep, by hook path: (bytes, storage or None for a view, which a trace copies); a storage
    another hook point kept already counts 0. Nothing is stored: for measuring on the meta device."""

    def __init__(self) -> None:
        self.sizes: dict[str, tuple[int, int | None]] = {}
        self._seen: set[int] = set()
        self._held: list = []  # the storages counted stay alive, so no later tensor reuses their address

    def save(self, name: str, x: torch.Tensor) -> None:
        key = None if x._is_view() else x.untyped_storage()._cdata
        self.sizes[name] = (0 if key in self._seen else x.numel() * x.element_size(), key)
        if key is not None:
            self._seen.add(key)
            self._held.append(x.untyped_storage())


@contextmanager
def counting() -> Iterator[dict[str, tuple[int, int | None]]]:
    """Count (never keep) what every hook point of forwards run in this context would keep in a trace."""
    store = _Count()
    token = _ACTIVE.set(store)
    try:
        yield store.sizes
    finally:
        _ACTIVE.reset(token)


@contextmanager
def intervene(edits: dict[str, Callable[[torch.Tensor], torch.Tensor]]) -> Iterator[None]:
    """Forwards run in this context (this thread only) see edits[name](x) at hook point `name` instead of x.

    The model is never changed. An edit must return a new tensor of the same shape (never write into x), or of a
    batch of n where x has a batch of one (the head sweep: n knock-outs that share everything before their edit).
    Nested contexts compose: an inner edit of the same hook runs on the outer edit's result.
    """
    outer = _EDITS.get() or {}
    merged = dict(outer)
    for name, edit in edits.items():
        merged[name] = _then(outer[name], edit) if name in outer else edit
    token = _EDITS.set(merged)
    try:
        yield
    finally:
        _EDITS.reset(token)


def _then(first: Callable[[torch.Tensor], torch.Tensor],
          second: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda x: second(first(x))


_FUSED: contextvars.ContextVar[bool] = contextvars.ContextVar("fused", default=False)


@contextmanager
def fused_attention() -> Iterator[None]:
    """Forwards run in this context (this thread only) may compute attention with PyTorch's fused kernel wherever no
    capture is active and no map stage is edited (training always may): the same formula, 2-4x faster on a CPU, its
    floats a few last bits off the step-by-step path's (~1e-7). For analyses that run many forwards (the head sweep);
    a page's plain forward stays step by step, bit-for-bit the trace it is compared with."""
    token = _FUSED.set(True)
    try:
        yield
    finally:
        _FUSED.reset(token)


def fused_allowed() -> bool:
    """Whether fused_attention() is on in this thread / context."""
    return _FUSED.get()


def editing() -> bool:
    """Whether an intervention is active in this thread / context."""
    return bool(_EDITS.get())


# Which stack and module an attention block lives in; the course's three kinds of attention.
BLOCKS = {"enc_self": ("encoder", "self_attn"), "dec_self": ("decoder", "self_attn"),
          "cross": ("decoder", "cross_attn")}
# The one list of attention's traced stages, in the order they happen (MultiHeadAttention makes a hook point for each;
# the trace, the memory measurement, the exports and the pages read them from here).
ROTARY_STAGES = ("q_rot", "k_rot")  # after RoPE's rotation (rotary models only)
QK_NORM_STAGES = ("q_normed", "k_normed")  # after the per-head RMSNorm of q and k (Qwen3's QK-norm only)
MAP_STAGES = ("scores", "scaled", "mask", "masked", "weights")  # (B, h, Tq, Tk): one map per head
ATTENTION_STAGES = ("q", "k", "v", *QK_NORM_STAGES, *ROTARY_STAGES, *MAP_STAGES, "z", "concat", "out")
PER_HEAD_STAGES = ATTENTION_STAGES[:-2]  # all but concat and out, which are (B, T, d); k, v, k_rot: cfg.kv_heads
SIDE_STAGES = {  # stage -> path below a stack ("encoder" or "decoder")
    "embed_tok": "embed.hook_tok", "embed_scaled": "embed.hook_scaled", "pe": "embed.pos.hook_pe",
    "embed": "embed.hook_sum", "stack_out": "hook_out",
}
LAYER_STAGES = {"ffn_hidden": "ffn.hook_hidden", "ffn_out": "ffn.hook_out", "ffn_gate": "ffn.hook_gate",
                "ffn_up": "ffn.hook_up", "addnorm_in": "{addnorm}.hook_in", "addnorm_normed": "{addnorm}.hook_normed",
                "addnorm_out": "{addnorm}.hook_out"}
NORM_STAGES = ("addnorm_in", "addnorm_normed", "addnorm_out")  # addnorm_normed: the norm's output (pre-norm only)
SUBLAYERS = ("enc_self", "dec_self", "cross", "enc_ffn", "dec_ffn")  # what an Add & Norm wraps


def addnorm_index(sublayer: str, cross: bool) -> int:
    """The course's norm1 / norm2 / norm3: which AddNorm wraps a sub-layer (decoder FFN: 3 with cross-attention)."""
    return {"enc_self": 1, "dec_self": 1, "cross": 2, "enc_ffn": 2, "dec_ffn": 3 if cross else 2}[sublayer]


def act_name(stage: str, layer: int | None = None, block: str | None = None, side: str = "decoder",
             cross: bool = True) -> str:
    """The hook path of a traced quantity, e.g. act_name("weights", layer=2, block="cross") ->
    'decoder.layers.2.cross_attn.hook_weights'.

    Attention stages take `block` (enc_self, dec_self, cross); embeddings and stack outputs take `side`;
    ffn_hidden / ffn_out (ffn_gate / ffn_up: gated FFNs) take `side` and `layer`; addnorm_in / addnorm_normed /
    addnorm_out take `layer` and the sub-layer they wrap
    as `block` (enc_self, dec_self, cross, enc_ffn, dec_ffn; `cross` says whether the decoder has cross-attention).
    """
    if stage == "logits":
        return "hook_logits"
    if stage in ATTENTION_STAGES:
        stack, module = BLOCKS[block]
        return f"{stack}.layers.{int(layer)}.{module}.hook_{stage}"
    if stage in SIDE_STAGES:
        return f"{side}.{SIDE_STAGES[stage]}"
    if stage in NORM_STAGES:
        stack = "encoder" if block.startswith("enc") else "decoder"
        path = LAYER_STAGES[stage].format(addnorm=f"addnorm{addnorm_index(block, cross)}")
        return f"{stack}.layers.{int(layer)}.{path}"
    if stage in LAYER_STAGES:
        return f"{side}.layers.{int(layer)}.{LAYER_STAGES[stage]}"
    raise KeyError(f"unknown stage {stage!r}")


def layer_filter(layer: int) -> Callable[[str], bool]:
    """Keep everything except per-head attention tensors of other layers (bounded memory for long texts)."""
    mine = f".layers.{layer}."

    def wanted(name: str) -> bool:
        stage = name.rsplit(".hook_", 1)[-1]
        return stage not in PER_HEAD_STAGES or "_attn." not in name or mine in name

    return wanted


WEIGHT_STAGES = ("weights", "mask")  # what stages_filter keeps by default: the softmax weights and the mask


def stages_filter(stages: tuple[str, ...] = WEIGHT_STAGES) -> Callable[[str], bool]:
    """Keep these stages of every attention block and nothing else (every layer's maps at a fraction of the trace)."""

    def wanted(name: str) -> bool:
        return "_attn." in name and name.rsplit(".hook_", 1)[-1] in stages

    return wanted
