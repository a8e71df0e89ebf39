"""The Attention page's layer, mask, head and colour scale, answered in the browser. Two elements (st.components.v2,
one script: static/views/attention.js):

- the maps (ui/attention_maps.py, drawn by a fragment of its own): every head's weights of a block of (mask set,
  layer), each block sent once. The page's run sends the chosen layer's under the chosen mask and what fits beside
  them; the rest the view asks for when the pointer or the focus reaches its Layer list (the mask's other layers) or
  its mask radio (the layer under the other mask): a learner about to switch. That run is the fragment's alone, so a
  learner who never switches fetches nothing more, and one who does sees the switch drawn at once;
- the view (`attention_view`): the chosen head large and every head of its layer small, the lists, the radios, the
  labels and the words. A pick of the layer, mask, head or colour scale redraws there at once, before the server
  hears of it; a pick whose maps have not come yet shows the maps drawn, faded, until they have.

The browser then tells the server the pick (the view's state "pick"): that run records it in the link and redraws
what depends on the layer, mask and head (its label, the scores before and after masking: ui/attention_pair.py, one
query step by step). The maps' element is the same as before (nothing new to send), so Streamlit's browser, which
keeps every element it has seen (.streamlit/config.toml), is sent a reference to it instead of the maps again. A
click on a cell (state "cell") asks the server for that cell's arithmetic (q·k, the scaling, the weight), which the
server computes as before.

The server's own picks (a link, the model view's click, another model) reach the view as "pick" in its data, with a
serial that changes only then. Maps of more than VIEW_TOKENS tokens keep the server's charts (pooled, hover only)."""
from __future__ import annotations

import streamlit as st

from service.urlstate import SCALES
from transformer_core.model.masks import MASK_MODES

from .attention_maps import ASK_CELLS, Block, index_ok
from .chart_theme import PALETTES
from .i18n import t
from .masked_cells import MASK_COLOUR
from .views import component, keys
from .widgets import picture_download

VIEW_TOKENS = 80  # up to this many queries and keys: 8 heads of a causal 80 x 80 map are 52 KB (attention_maps.encode)
_view = component("attention_view", "attention")
KEY = "attention_view"


def in_browser(n_q: int, n_k: int) -> bool:
    return max(n_q, n_k) <= VIEW_TOKENS


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
    now, pick = _shown(), ss.get("_att_pick")
    if pick is None or ss.get("_att_shown") != now:
        pick = ss["_att_pick"] = {**now, "serial": (pick or {}).get("serial", 0) + 1}
        ss["_att_shown"] = now
    return pick


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
        "modes": modes, "cap": ASK_CELLS, "q": list(q_lab), "k": keys(q_lab, k_lab),
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


def adopt(pick: object) -> None:
    """Take the layer, mask, head and scale the browser set ({"layer", "mask", "head", "scale"}, from "pick" or
    "cell"), each checked; a bad one (or none) leaves the page's value as it was."""
    if not isinstance(pick, dict):
        return
    ss = st.session_state
    # a layer or head past the model's is clamped by the page's next run (ui.state.keep_view_in_model), as a link's is
    checks = {"layer": ("layer", index_ok), "head": ("head", index_ok), "mask": ("mask_mode", MASK_MODES.__contains__)}
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
