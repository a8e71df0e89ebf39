"""The Attention view's maps (ui/attention_view.py draws them; static/views/attention.js keeps them): the softmax
weights of every head of a block, sent as blocks of (mask set, layer), the kept cells to 4 decimals with the tiny ones'
log (`encode`), each mask set's mask as bits. The browser keeps every block it was sent for the text (`text_key`); the
server sends a block once (`attention_maps`, a fragment: the session remembers what it sent). The page's run sends the
chosen block and those that fit beside it (`first_blocks`, FIRST_CELLS); the view asks for the others (the element's
state "want") when the pointer or the focus reaches its Layer list or mask radio, and that ask reruns this fragment
alone (ASK_CELLS at most). A run that brings nothing new sends the same data, which Streamlit's browser keeps: a
reference on the wire."""
from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np
import streamlit as st
import torch

from transformer_core.model.masks import MASK_MODES, attention_mask, block_mode

from .figures import LOG_FLOOR
from .i18n import lang
from .views import b64, component

# kept cells the page's own run sends: the chosen layer's maps, then its mask's other layers, then the other mask's,
# up to this many in all (48 KB encoded, about 42 KB on the wire, base64 in the websocket's compression): the default
# model's 4 layers x 8 heads up to 38 tokens (both masks up to 22), the course's 6 x 8 up to 31 (18). So a short
# text's every switch is drawn at once, and entering the page stays light (at 64 tokens every layer would send 89 KB
# more than one)
FIRST_CELLS = 24_000
# kept cells one ask is answered with at most (about 1.8 bytes each on the wire): the default model's other three
# causal layers at 64 tokens (49,920), its layer under no mask (32,768), or two more layers of it
ASK_CELLS = 72_000
LOG_LOW = float(np.log10(LOG_FLOOR))  # the log scale's lowest value (-6)
_maps = component("attention_maps", "attention")
MAPS_KEY = "attention_maps"
MAX_HEADS = 4096  # a pick beyond this is no head (or layer) of any model: refused outright
Block = tuple[int, int]  # (mask set, layer)


def text_key(model_key: str, kind: str, ids: list) -> str:
    """What the maps depend on besides the mask and the layer: the model, the block, the tokens (and the language of
    the heads' labels). The browser keeps the maps of one key; a new key starts again."""
    return hashlib.sha256(repr((model_key, kind, ids, lang())).encode()).hexdigest()[:16]


def mask_sets(kind: str, n_q: int, n_k: int) -> tuple[dict[str, int], dict[int, str], list[np.ndarray]]:
    """The mask modes grouped by the mask they give one text's `kind` block: {mode: set}, each set's first mode (the
    one its maps are traced with) and each set's mask ((Tq, Tk) bool, True: kept; every head's). A sequence has no
    padding, so "padding" keeps what "none" keeps and "both" what "causal" does; cross-attention is never causal."""
    sets, first, seen = {}, {}, []
    for mode in MASK_MODES:
        m = attention_mask(block_mode(kind, mode), 1, n_q, n_k, torch.tensor([n_k]))
        m = np.ones((n_q, n_k), dtype=bool) if m is None else m[0, 0].numpy()
        i = next((j for j, other in enumerate(seen) if np.array_equal(other, m)), None)
        if i is None:
            i, first[len(seen)] = len(seen), mode
            seen.append(m)
        sets[mode] = i
    return sets, first, seen


def is_set_mask(stages, mask: np.ndarray) -> bool:
    """Whether a block's mask ((1, heads or 1, Tq, Tk)) is this mask set's ((Tq, Tk): what the view's maps of that set
    are drawn with; a trace of the weights alone may be cut to another length on a tight server)."""
    m = stages.mask[0].numpy()
    return m.shape[-2:] == mask.shape and bool((m == mask).all())


def view_knows(stages, kind: str, mode: str) -> bool:
    """Whether the view can draw this block (its mask is the one its mask set, `mask_sets`, expects under `mode`);
    else the server's charts draw it."""
    modes, _, masks = mask_sets(kind, stages.n_q, stages.n_k)
    return is_set_mask(stages, masks[modes[mode]])


def nearest(layer: int, n_layers: int) -> list[int]:
    """The layers from `layer` outwards (1, 0, 2, 3 from 1): the order a learner's next pick is likeliest in."""
    return sorted(range(n_layers), key=lambda other: (abs(other - layer), other))


def first_blocks(chosen: Block, n_layers: int, cells: list[int]) -> list[Block]:
    """What the page's run sends for a text: the chosen block, then its mask's other layers, then the other masks'
    (the chosen layer first), as many as fit in FIRST_CELLS; `cells`: each set's kept cells of one layer."""
    s, layer = chosen
    order = [(s, other) for other in nearest(layer, n_layers)]
    order += [(o, other) for o in range(len(cells)) if o != s for other in nearest(layer, n_layers)]
    out, total = [], 0
    for block in order:
        total += cells[block[0]]
        if block != chosen and total > FIRST_CELLS:
            break
        out.append(block)
    return out


def index_ok(value: object) -> bool:
    """Whether the browser named a layer, head or mask set that could be one (an int from 0 below MAX_HEADS)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_HEADS


TINY = 95  # weights under 0.00945 (to 4 decimals, under 0.0095) carry their log code in their uint16 (`encode`)
TINY_BASE = 10_001  # a tiny weight's code: TINY_BASE + (its 4 decimals) * 256 + its log code


def encode(weights: np.ndarray, kept: np.ndarray) -> bytes:
    """float32 weights ((h, Tq, Tk), or (layers, h, Tq, Tk)) of the kept cells (`kept`, the mask; a masked weight is 0
    and is not sent) as the browser draws them, one uint16 each, in (layer, head, query, key) order: the weight to 4
    decimals (the number the hover shows, exactly as f"{w:.4f}"; the 0 – 1 and per-row colours), and for a weight
    under 0.00945, where 4 decimals say
    too little for the log scale, TINY_BASE + those 4 decimals * 256 + log10 of the weight, floored at LOG_FLOOR, in
    255 steps from -6 to 0 (the browser takes a larger weight's log from its 4 decimals: a tenth of a step off at most).
    The high bytes, then the low bytes: the high bytes repeat (most weights are small), which the websocket's
    compression packs tightly. A causal map of 64 tokens: 4,160 bytes a head, against 12,288 as two arrays of all."""
    w = np.asarray(weights, dtype=np.float64)[np.asarray(kept, dtype=bool)]  # float32 * 1e4 is exact in float64:
    four = np.rint(w * 1e4).astype(np.int64)  # rint rounds as "%.4f" does
    log = np.rint((np.log10(np.maximum(w, LOG_FLOOR)) - LOG_LOW) / -LOG_LOW * 255).astype(np.int64)
    code = np.where(four >= TINY, four, TINY_BASE + four * 256 + log).astype(">u2")
    return code.view(np.uint8).reshape(-1, 2).T.tobytes()


def decode(planes: bytes, kept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`encode`'s bytes back to (weights to 4 decimals as integers, log codes or -1 where the browser takes the log
    from the 4 decimals), each of `kept`'s shape, 0 and -1 where masked: what the browser reads (tests, benches)."""
    kept = np.asarray(kept, dtype=bool)
    b = np.frombuffer(planes, dtype=np.uint8).reshape(2, -1)
    code = b[0].astype(np.int64) << 8 | b[1]
    four, log = np.zeros(kept.shape, np.int64), np.full(kept.shape, -1, np.int64)
    tiny = code >= TINY_BASE
    four[kept] = np.where(tiny, (code - TINY_BASE) >> 8, code)
    log[kept] = np.where(tiny, (code - TINY_BASE) & 255, -1)
    return four, log


def maps_data(text: str, heads: int, masks: list[np.ndarray], blocks: list[tuple[Block, np.ndarray, list[str]]],
              answered: object = None) -> dict:
    """What the browser's maps element gets: the text's key (`text_key`; no words: the view beside it says what a
    failed load is), each mask set's mask as bits (1: kept;
    `mask_sets`), and for each block ((set, layer), its float32 (heads, Tq, Tk) weights, its heads' labels) the kept
    cells' weights (`encode`, one block after another, base64); `answered`: the ask this run answers (its "at")."""
    weights = b"".join(encode(w, np.broadcast_to(masks[s], w.shape)) for (s, _), w, _ in blocks)
    return {"role": "maps", "key": text, "heads": int(heads), "n_q": int(masks[0].shape[0]),
            "n_k": int(masks[0].shape[1]),
            "masks": [b64(np.packbits(m, axis=None, bitorder="little").tobytes()) for m in masks],
            "blocks": [[int(s), int(layer)] for (s, layer), _, _ in blocks], "weights": b64(weights),
            "labels": [list(labels) for _, _, labels in blocks], "answered": answered}


def _wanted(ask: object, text: str, n_sets: int, n_layers: int, cells: list[int]) -> list[Block] | None:
    """The blocks a well-formed ask for this text wants, in its order, as many as fit in ASK_CELLS; None: no ask."""
    if not (isinstance(ask, dict) and ask.get("key") == text and isinstance(ask.get("blocks"), list)):
        return None
    out, total = [], 0
    for block in ask["blocks"][: n_sets * n_layers]:
        if not (isinstance(block, list) and len(block) == 2 and all(index_ok(v) for v in block)):
            continue
        s, layer = block
        if s < n_sets and layer < n_layers and (s, layer) not in out and total + cells[s] <= ASK_CELLS:
            out.append((s, layer))
            total += cells[s]
    return out


def _on_want() -> None:
    """Nothing to take: the fragment's run reads it (`attention_maps`)."""


@st.fragment
def attention_maps(text: str, masks: list[np.ndarray], chosen: Block, n_layers: int, heads: int,
                   source: Callable[[Block], tuple[np.ndarray, list[str]] | None]) -> None:
    """The maps' element (see the module): sends the blocks the browser does not have yet, the chosen one (`chosen`)
    with those that fit beside it (`first_blocks`), or those the view asks for (its state "want": {"key", "blocks",
    "at"}); else the same data as before (a reference on the wire). `source(block)`: (weights, labels) or None where
    it cannot be. A fragment: the view's ask reruns this alone."""
    ss = st.session_state
    rec = ss.get("_att_maps")
    if rec is None or rec["text"] != text:
        rec = ss["_att_maps"] = {"text": text, "sent": set(), "data": None, "answered": None}
    cells = [int(m.sum()) * heads for m in masks]  # a layer's kept cells, each set
    ask = (ss.get(MAPS_KEY) or {}).get("want")
    at = ask.get("at") if isinstance(ask, dict) and isinstance(ask.get("at"), int | float | str) else None
    want = _wanted(ask, text, len(masks), n_layers, cells) if at is not None and at != rec["answered"] else None
    send = list(want or [])
    if chosen not in rec["sent"] and chosen not in send:
        send = [b for b in first_blocks(chosen, n_layers, cells) if b not in rec["sent"] and b not in send] + send
    answered = at if want is not None else rec["answered"]
    if send or answered != rec["answered"] or rec["data"] is None:
        got = [(block, *found) for block in send if (found := source(block)) is not None]
        rec["data"] = maps_data(text, heads, masks, got, answered)
    else:
        got = []
    _maps(key=MAPS_KEY, data=rec["data"], on_want_change=_on_want)
    rec["sent"] |= {block for block, _, _ in got}  # (after the element is out: a run stopped before it sent nothing)
    rec["answered"] = answered
