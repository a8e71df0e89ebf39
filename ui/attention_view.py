"""The Attention page's layer, mask, head and colour scale, answered in the browser: one component (st.components.v2,
its script in static/views/attention.js) holds the softmax weights of every head of the block (those the mask keeps, to
4 decimals, the tiny ones with their log: `encode`; the mask as bits), of every layer where they fit in LAYERS_CELLS
(else of the chosen layer; up to EVERY_CELLS the view asks for every layer with a run of its own, the state "every",
once the pointer or the focus reaches its Layer list), and where they fit with the other mask too (a text's mask either
has the causal part or not: one sequence has no padding) under both; it draws the chosen head large and every head of
its layer small. A pick of the layer or mask (where the view holds them), the head (its list, a small map) or the colour
scale redraws there at once, before the server hears of it.

The browser then tells the server the pick (the component's state "pick"): that run records it in the link and
redraws what depends on the layer, mask and head (its label, before/after masking, one query step by step). The
view's data holds nothing the pick changes, so Streamlit's browser, which keeps any element of 10 KB or more it has
seen, is sent a reference to it instead of the maps again. A click on a cell (state "cell") asks the server for that
cell's arithmetic (q·k, the scaling, the weight), which the server computes as before.

The server's own picks (a link, the model view's click, another model) reach the view as "pick" in its data, with a
serial that changes only then. Maps of more than VIEW_TOKENS tokens keep the server's charts (pooled, hover only)."""
from __future__ import annotations

import base64
import hashlib

import numpy as np
import streamlit as st
import torch

from service.urlstate import SCALES
from transformer_core.model.masks import MASK_MODES, attention_mask

from .chart_theme import PALETTES
from .figures import LOG_FLOOR, MASK_COLOUR
from .i18n import t
from .views import component
from .widgets import picture_download

VIEW_TOKENS = 64  # up to this many queries and keys: 8 heads of a causal 64 x 64 map are 33 KB (encode)
# kept cells of the maps together up to which the view holds every layer (a layer switch drawn in the browser), and
# every layer under both masks (a mask switch too): 48 KB encoded, about 42 KB on the wire (base64 in the websocket's
# compression). The default model's 4 layers x 8 heads up to 38 tokens (both masks up to 22), the course's 6 x 8 up to
# 31 (18); beyond, the chosen layer's maps only, so that entering the page stays light (at 64 tokens every layer would
# send 89 KB more than one)
LAYERS_CELLS = 24_000
# every layer's kept cells up to which the view, drawn with the chosen layer's, asks for every layer (the state
# "every", answered by a run of its own, 100-135 KB on the wire) when the pointer or the focus reaches its Layer list:
# the default model's causal texts up to 64 tokens (66,560 cells), the course's up to 54. So the switch is drawn in
# the browser, the page's own run stays as light as before, and a learner who never switches layers fetches nothing
# more. Beyond (no mask at 64 tokens: 131,072 cells), a layer switch is a server run
EVERY_CELLS = 72_000
LOG_LOW = float(np.log10(LOG_FLOOR))  # the log scale's lowest value (-6)
_view = component("attention_view", "attention")
KEY = "attention_view"
MAX_HEADS = 4096  # a pick beyond this is no head (or layer) of any model: refused outright


def in_browser(n_q: int, n_k: int) -> bool:
    return max(n_q, n_k) <= VIEW_TOKENS


def fits(kept_cells: int) -> bool:
    """Whether maps of this many kept cells in all go to the browser's view beside the chosen layer's: LAYERS_CELLS."""
    return kept_cells <= LAYERS_CELLS


def every_fits(kept_cells: int) -> bool:
    """Whether the view may ask for every layer's maps of this many kept cells in all: EVERY_CELLS."""
    return kept_cells <= EVERY_CELLS


def every_key(model_key: str, kind: str, ids: list, mask: torch.Tensor) -> str:
    """What every layer's maps depend on besides the layer: the model, the block, the tokens and the mask. The view
    asks for them under this key; a run whose state "every" holds it sends them."""
    digest = hashlib.sha256(repr((model_key, kind, ids)).encode())
    digest.update(np.packbits(mask.detach().cpu().numpy().astype(bool)).tobytes())
    return digest.hexdigest()[:16]


def asked(key: str) -> bool:
    """Whether the browser's view asked for every layer under `key` ({"key", "at"}: a new ask is a new value)."""
    every = (st.session_state.get(KEY) or {}).get("every")
    return isinstance(every, dict) and every.get("key") == key


def mask_sets(modes: tuple[str, ...], n_q: int, n_k: int) -> tuple[dict[str, int], dict[int, str], list[int]]:
    """The mask modes grouped by the mask they give one text: {mode: set}, each set's first mode (whose trace the
    view's set holds) and the cells a head's map keeps under it. A sequence has no padding, so "padding" keeps what
    "none" keeps and "both" what "causal" does."""
    sets, first, seen = {}, {}, []
    for mode in modes:
        m = attention_mask(mode, 1, n_q, n_k, torch.tensor([n_k]))
        m = torch.ones(n_q, n_k, dtype=torch.bool) if m is None else m[0, 0]
        i = next((j for j, other in enumerate(seen) if torch.equal(other, m)), None)
        if i is None:
            i, first[len(seen)] = len(seen), mode
            seen.append(m)
        sets[mode] = i
    return sets, first, [int(m.sum()) for m in seen]


def _shown() -> dict:
    """The page's layer, mask, head and scale: what the view shows once it has the server's pick."""
    ss = st.session_state
    return {"layer": int(ss.get("layer", 0)), "mask": ss.get("mask_mode"), "head": int(ss["head"]),
            "scale": ss["att_scale"]}


def server_pick(masks: bool = True) -> dict:
    """{"layer", "mask", "head", "scale", "serial"}: the page's layer, mask, head and scale, with a serial that changes
    only where the server changed them from what the view shows (a link, the model view's click, another model), not
    where it took the view's own: a view applies a pick whose serial it has not seen; a new view starts from the
    link. masks=False (a view that holds one mask: the server's radio picks it): no mask, and a new mask is no new
    pick, so the view's data, and with it the maps, stays as it was where the mask keeps the same cells."""
    ss = st.session_state
    keys = [k for k in ("layer", "mask", "head", "scale") if masks or k != "mask"]
    full, seen = _shown(), ss.get("_att_shown") or {}
    now = {k: full[k] for k in keys}
    pick = ss.get("_att_pick")
    if pick is None or {k: seen.get(k) for k in keys} != now or sorted(pick) != sorted([*keys, "serial"]):
        pick = ss["_att_pick"] = {**now, "serial": (pick or {}).get("serial", 0) + 1}
        ss["_att_shown"] = full
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


def view_data(layers: list[int], sets: list[tuple[torch.Tensor, list[torch.Tensor]]], modes: dict[str, int] | None,
              q_lab: list[str], k_lab: list[str], titles: list, shown: list, *, generated: int,
              every: str | None = None, choices: list[int] | None = None) -> dict:
    """What the browser gets: for each mask set it holds (`sets`: (the block's (heads, Tq, Tk) mask, every layer's
    weights)), the weights of the kept cells of each layer it holds (`layers`: every layer, or the chosen one;
    `encode` of the sets and layers stacked, base64) and the mask as bits (1: kept; every layer's is the same), each
    set's and layer's head titles (its number, its pattern) and heads shown small; the mask modes' sets (`mask_sets`;
    None: the view holds the chosen mask's only, the server's radio switches it), the axis labels, how many last rows
    are generated, the server's pick, the colours, how the chart downloads and the page's words; `every`: the key
    under which the view asks for every layer (`every_key`; None: it does not ask) and `choices` the layers its list
    offers (default: those it holds). Not the pick the view holds (see the module)."""
    kept = [m.detach().cpu().numpy().astype(bool) for m, _ in sets]
    maps = [np.stack([w.detach().float().cpu().numpy() for w in ws]) for _, ws in sets]  # each (layers, h, Tq, Tk)
    fmt, stem = picture_download("att_main")
    look = PALETTES["dark" if st.context.theme.type == "dark" else "light"]
    b64 = lambda b: base64.b64encode(b).decode("ascii")
    weights = b"".join(encode(w, np.broadcast_to(k, w.shape)) for w, k in zip(maps, kept, strict=True))
    # (one encode's bytes per set: high bytes then low bytes of that set's cells)
    return {
        "layers": [int(layer) for layer in layers], "choices": [int(layer) for layer in (choices or layers)],
        "every": every, "heads": int(maps[0].shape[1]), "n_q": int(maps[0].shape[2]),
        "n_k": int(maps[0].shape[3]), "weights": b64(weights), "sizes": [int(k.sum()) * len(layers) for k in kept],
        "masks": [b64(np.packbits(k, axis=None, bitorder="little").tobytes()) for k in kept], "modes": modes,
        "q": list(q_lab), "k": list(k_lab), "titles": titles, "shown": [[[int(h) for h in heads] for heads in per_set]
                                                                         for per_set in shown],
        "gen": int(generated), "pick": server_pick(masks=modes is not None), "scales": list(SCALES),
        "colours": {"scale": list(look[-1]), "masked": MASK_COLOUR, "mark": "rgba(90,90,90,0.9)"},
        "chart": {"format": fmt, "file": f"{stem}.{fmt}"},
        "text": {"load_failed": t("view_load_failed"), "layer": t("att_layer"), "mask": t("att_mask_mode"),
                 "mask_names": {m: t(f"mask_{m}") for m in (modes or {})},
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


def _on_every() -> None:
    """Nothing to take: the run the ask starts reads it (`asked`)."""


def attention_view(data: dict) -> None:
    """Draw the view (its key keeps the browser's element, and the pick made there, across the page's runs)."""
    _view(key=KEY, data=data, height="content", on_pick_change=_on_pick, on_cell_change=_on_cell,
          on_every_change=_on_every)
