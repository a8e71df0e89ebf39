"""The Attention page's layer, mask, head and colour scale, answered in the browser. Two elements (st.components.v2,
one script: static/views/attention.js):

- the maps (`attention_maps`, drawn by a fragment of its own): the softmax weights of every head of a block, as
  blocks of (mask set, layer), the kept cells to 4 decimals with the tiny ones' log (`encode`), and each mask set's
  mask as bits. The browser keeps every block it was sent for the text; the server sends a block once. The page's
  run sends the chosen layer's under the chosen mask, and where they fit in FIRST_CELLS its mask's other layers
  (nearest first) and the other mask's. The rest the view asks for (the state "want") when the pointer or the focus
  reaches its Layer list (the mask's other layers) or its mask radio (the layer under the other mask): a learner
  about to switch. That run is the fragment's alone (the maps, no more: ASK_CELLS at most), so a learner who never
  switches fetches nothing more, and one who does sees the switch drawn at once;
- the view (`attention_view`): the chosen head large and every head of its layer small, the lists, the radios, the
  labels and the words. A pick of the layer, mask, head or colour scale redraws there at once, before the server
  hears of it; a pick whose maps have not come yet shows the maps drawn, faded, until they have.

The browser then tells the server the pick (the view's state "pick"): that run records it in the link and redraws
what depends on the layer, mask and head (its label, before/after masking, one query step by step). The maps'
element is the same as before (nothing new to send), so Streamlit's browser, which keeps any element of 10 KB or
more it has seen, is sent a reference to it instead of the maps again. A click on a cell (state "cell") asks the
server for that cell's arithmetic (q·k, the scaling, the weight), which the server computes as before.

The server's own picks (a link, the model view's click, another model) reach the view as "pick" in its data, with a
serial that changes only then. Maps of more than VIEW_TOKENS tokens keep the server's charts (pooled, hover only)."""
from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable

import numpy as np
import streamlit as st
import torch

from service.urlstate import SCALES
from transformer_core.model.masks import MASK_MODES, attention_mask, block_mode

from .chart_theme import PALETTES
from .figures import LOG_FLOOR, MASK_COLOUR
from .i18n import lang, t
from .views import component
from .widgets import picture_download

VIEW_TOKENS = 64  # up to this many queries and keys: 8 heads of a causal 64 x 64 map are 33 KB (encode)
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
_view = component("attention_view", "attention")
_maps = component("attention_maps", "attention")
KEY, MAPS_KEY = "attention_view", "attention_maps"
MAX_HEADS = 4096  # a pick beyond this is no head (or layer) of any model: refused outright
Block = tuple[int, int]  # (mask set, layer)


def in_browser(n_q: int, n_k: int) -> bool:
    return max(n_q, n_k) <= VIEW_TOKENS


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


def _shown() -> dict:
    """The page's layer, mask, head and scale: what the view shows once it has the server's pick."""
    ss = st.session_state
    return {"layer": int(ss.get("layer", 0)), "mask": ss.get("mask_mode"), "head": int(ss["head"]),
            "scale": ss["att_scale"]}


def server_pick() -> dict:
    """{"layer", "mask", "head", "scale", "serial"}: the page's layer, mask, head and scale, with a serial that changes
    only where the server changed them from what the view shows (a link, the model view's click, another model), not
    where it took the view's own: a view applies a pick whose serial it has not seen; a new view starts from the
    link."""
    ss = st.session_state
    now, seen, pick = _shown(), ss.get("_att_shown") or {}, ss.get("_att_pick")
    if pick is None or {k: seen.get(k) for k in now} != now:
        pick = ss["_att_pick"] = {**now, "serial": (pick or {}).get("serial", 0) + 1}
        ss["_att_shown"] = now
    return pick


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


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


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
        if not (isinstance(block, list) and len(block) == 2 and all(_index(v) for v in block)):
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


def view_data(text: str, n_layers: int, heads: int, modes: dict[str, int], q_lab: list[str], k_lab: list[str],
              shown: tuple[Block, list[int]], *, generated: int) -> dict:
    """What the browser's view gets: the text's key (its maps: `attention_maps`), the number of layers and heads, the
    mask modes' sets (`mask_sets`), the axis labels, the heads shown small for the chosen block where the kind filter
    hides some (every head for another), how many last rows are generated, the server's pick, the colours, how the chart
    downloads and the page's words. Not the pick the view holds (see the module)."""
    fmt, stem = picture_download("att_main")
    look = PALETTES["dark" if st.context.theme.type == "dark" else "light"]
    (s, layer), shown_heads = shown
    # (None where every head is shown: the data then stays the same across a pick of layer or mask, a reference)
    shown_data = None if list(shown_heads) == list(range(heads)) else {
        "set": int(s), "layer": int(layer), "heads": [int(h) for h in shown_heads]}
    return {
        "key": text, "layers": int(n_layers), "heads": int(heads), "n_q": len(q_lab), "n_k": len(k_lab),
        "modes": modes, "cap": ASK_CELLS, "q": list(q_lab), "k": list(k_lab),
        "shown": shown_data,
        "gen": int(generated), "pick": server_pick(), "scales": list(SCALES),
        "colours": {"scale": list(look[-1]), "masked": MASK_COLOUR, "mark": "rgba(90,90,90,0.9)"},
        "chart": {"format": fmt, "file": f"{stem}.{fmt}"},
        "text": {"load_failed": t("view_load_failed"), "layer": t("att_layer"), "mask": t("att_mask_mode"),
                 "mask_names": {m: t(f"mask_{m}") for m in modes},
                 "head": t("att_head"), "scale": t("att_scale"), "scale_help": t("att_scale_help"),
                 "scale_names": {s: t(f"att_scale_{s}") for s in SCALES},
                 "title": t("att_main_title", layer="{layer}", head="{head}", scale="{scale}"),
                 "asking": t("att_view_asking", layer="{layer}"),
                 "queries": t("attn_queries"),
                 "keys": t("attn_keys"), "weight": t("attn_col_weight"), "masked": t("att_masked_hover"),
                 "click_hint": t("att_view_click_hint"), "grid": t("att_grid"), "thumbs_hint": t("att_thumbs_hint"),
                 "download_chart": t("chart_download", fmt=fmt.upper())},
    }


def _index(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_HEADS


def adopt(pick: object) -> None:
    """Take the layer, mask, head and scale the browser set ({"layer", "mask", "head", "scale"}, from "pick" or
    "cell"), each checked; a bad one (or none) leaves the page's value as it was."""
    if not isinstance(pick, dict):
        return
    ss = st.session_state
    # a layer or head past the model's is clamped by the page's next run (ui.state.keep_view_in_model), as a link's is
    checks = {"layer": ("layer", _index), "head": ("head", _index), "mask": ("mask_mode", MASK_MODES.__contains__)}
    for name, (key, ok) in checks.items():
        value = pick.get(name)
        if ok(value) and value != ss.get(key):
            ss[key] = value
            if "att_cell" in ss:  # a cell's arithmetic belongs to the layer, head and mask it was clicked under
                del ss["att_cell"]
    if pick.get("scale") in SCALES:
        ss["att_scale"] = pick["scale"]
    ss["_att_shown"] = _shown()


def _on_pick() -> None:
    adopt((st.session_state.get(KEY) or {}).get("pick"))


def _on_cell() -> None:
    cell = (st.session_state.get(KEY) or {}).get("cell")
    adopt(cell)
    if isinstance(cell, dict) and all(isinstance(cell.get(k), int) and cell[k] >= 0 for k in ("q", "k")):
        st.session_state["att_cell"] = (cell["q"], cell["k"])


def attention_view(data: dict) -> None:
    """Draw the view (its key keeps the browser's element, and the pick made there, across the page's runs)."""
    _view(key=KEY, data=data, height="content", on_pick_change=_on_pick, on_cell_change=_on_cell)
