"""Streamlit's chart look written into each chart's own layout and traces, so the browser draws a chart once.

With `theme="streamlit"`, Streamlit's chart element rebuilds the figure through a JSON round trip once it is on
screen; the rebuilt `layout.template` is a new object, and plotly.js compares a template by identity, so every chart
was laid out and drawn twice (counted in Chromium: 15 full draws for the 5 charts of a page). Without a template,
and with a `datarevision` that names the data (plotly then skips comparing data arrays by identity), the second pass
finds nothing changed. The values below are what Streamlit's theme resolves to in the browser (light and dark,
read from a drawn chart's `layout.template`); a chart's own settings win over them, as over a template.
The look follows `st.context.theme.type` (ui.widgets.chart): a learner who switches between light and dark while
on a page sees the charts in the old look until the next run (any click), where Streamlit's theme switched at once.
"""
from __future__ import annotations

import hashlib
import json
import re

FONT = '"Source Sans", sans-serif'
BLUES = ("#e4f5ff", "#c7ebff", "#a6dcff", "#83c9ff", "#60b4ff", "#3d9df3", "#1c83e1", "#0068c9", "#0054a3", "#004280")
DIVERGING = ("#7d353b", "#bd4043", "#ff4b4b", "#ff8c8c", "#ffc7c7", "#a6dcff", "#60b4ff", "#1c83e1", "#0054a3",
             "#004280")
# Streamlit's chart colours in (dark, light) pairs, which the dark theme swaps
COLOURS = ("#0068c9", "#83c9ff", "#ff2b2b", "#ffabab", "#29b09d", "#7defa1", "#ff8700", "#ffd16a", "#6d3fc0")
# one colour per attention head wherever heads are told apart by colour (the head view's lines, the logit
# attribution's bars), the same head the same colour; no greys: those mark the parts that are not heads
HEAD_COLOURS = (*COLOURS, "#c39bd3", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#393b79", "#843c39")


def _swapped_pairs(colours: tuple) -> tuple:
    """(a, b, c, d, e) -> (b, a, d, c, e): each (dark, light) pair the other way round."""
    return tuple(c for i in range(0, len(colours), 2) for c in colours[i:i + 2][::-1])


PALETTES = {  # text, title, legend text, background, grid, hover border, colours (the dark theme swaps pairs)
    "light": ("#808495", "#2F2D2B", "#262730", "#FFFFFF", "#e6eaf1", "#DCD8D4",
              (*COLOURS, "#d5dae5"), BLUES),
    "dark": ("#e6eaf1", "#EDEBE8", "#fafafa", "#171614", "#31333F", "#4A4742",
             (*_swapped_pairs(COLOURS), "#d5dae5"), BLUES[::-1]),
}


def _scale(colours) -> list:
    return [[i / (len(colours) - 1), c] for i, c in enumerate(colours)]


def _looks(kind: str) -> tuple[dict, dict, str]:
    """(layout defaults, per-trace-type defaults, grid colour) of Streamlit's light or dark chart theme."""
    text, title, legend, bg, grid, hover, colorway, seq = PALETTES[kind]
    # A template's colours only colour what is on; in a layout, a grid or zero-line colour also turns that line on,
    # and a tick colour turns ticks on: those are added per axis in `themed`, only where plotly would draw them.
    axis = {"tickfont": {"color": text, "size": 12}, "automargin": True}
    layout = {
        "font": {"color": text, "family": FONT, "size": 12, "weight": 400},
        "title": {"font": {"family": FONT, "size": 16, "color": title}, "pad": {"l": 4}, "xanchor": "left", "x": 0},
        # the legend in rows under the chart, plotly making room for them (Streamlit's on the right left a phone's
        # plot a sixth of the chart's width)
        "legend": {"title": {"font": {"size": 12, "color": text}, "side": "top"}, "valign": "top",
                   "bordercolor": "transparent", "borderwidth": 0, "font": {"size": 12, "color": legend},
                   "orientation": "h", "x": 0, "xanchor": "left", "y": 0, "yanchor": "bottom", "yref": "container"},
        "paper_bgcolor": bg, "plot_bgcolor": bg, "colorway": list(colorway),
        "colorscale": {"sequential": _scale(seq), "sequentialminus": _scale(seq), "diverging": _scale(DIVERGING)},
        "margin": {"pad": 8, "r": 0, "l": 0},
        "hoverlabel": {"bgcolor": bg, "bordercolor": hover, "font": {"color": text, "family": FONT, "size": 12}},
        # labels that do not fit level turn 45° or 90°: plotly's own first choice, 30°, let long names overlap (the FFN
        # page's step names on a phone)
        "xaxis": {**axis, "showgrid": False, "zeroline": False, "autotickangles": [0, -45, -90],
                  "title": {"font": {"color": text, "size": 14}, "standoff": 20}},
        "yaxis": {**axis, "ticklabelposition": "outside",
                  "title": {"font": {"color": text, "size": 14}, "standoff": 24}},
        "coloraxis": {"colorscale": _scale(seq), "colorbar": {
            "thickness": 16, "xpad": 24, "ticklabelposition": "outside", "outlinecolor": "transparent",
            "outlinewidth": 8, "len": 0.75, "y": 0.5745, "title": {"font": {"color": text, "size": 14}},
            "tickfont": {"color": text, "size": 12}}},
    }
    traces = {"heatmap": {"colorscale": _scale(seq)}, "contour": {"colorscale": _scale(seq)},
              "scatter": {"marker": {"line": {"width": 0}}}}
    return layout, traces, grid


LOOKS = {kind: _looks(kind) for kind in PALETTES}


def merged(defaults: dict, own: dict | None) -> dict:
    """`own` over `defaults`, nested dicts merged (new dicts: neither argument is changed)."""
    out = dict(defaults)
    for k, v in (own or {}).items():
        out[k] = merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def themed(spec: dict, kind: str | None) -> dict:
    """The spec (data, layout) in the theme's look, its titles bold as Streamlit's, no template, and a datarevision
    that changes whenever anything in the spec does (plotly then redraws; an unchanged chart is left alone)."""
    layout_defaults, trace_defaults, grid = LOOKS.get(kind or "light", LOOKS["light"])
    layout = {k: v for k, v in spec["layout"].items() if k != "template"}
    for name in axis_names(layout):  # every x axis takes the template's xaxis, every y axis its yaxis
        own, axis = layout.get(name) or {}, dict(layout_defaults[name[0] + "axis"])
        if own.get("showgrid", name[0] == "y" and not _categories_along(spec["data"], name)):
            axis.update(gridcolor=grid, zerolinecolor=grid)  # where plotly draws the grid (the template's x: never)
        if own.get("ticks"):
            axis["tickcolor"] = grid
        layout[name] = merged(axis, own)
        ink = layout[name].get("tickfont", {}).get("color")
        if kind == "dark" and _dark(ink):  # a chart's dark labels (token names: "#222") on the dark page: light ink
            layout[name]["tickfont"] = {**layout[name]["tickfont"], "color": PALETTES["dark"][2]}
    layout = merged({k: v for k, v in layout_defaults.items() if k not in ("xaxis", "yaxis")}, layout)
    ink = PALETTES[kind if kind in PALETTES else "light"][2]  # the page's text colour (the chart text's is grey)
    if layout.get("annotations"):  # a chart's words (a thumbnail's title and label) in it, unless it chose one
        layout["annotations"] = [merged({"font": {"color": ink}}, a) for a in layout["annotations"]]
    title = layout.get("title", {})
    if title.get("text") and not str(title["text"]).startswith("<b>"):
        layout["title"] = {**title, "text": f"<b>{title['text']}</b>"}
    data = [merged(trace_defaults[t.get("type", "scatter")], t) if t.get("type", "scatter") in trace_defaults else t
            for t in spec["data"]]
    out = {**spec, "data": data, "layout": layout}
    out["layout"]["datarevision"] = revision(out)
    return out


def axis_names(layout: dict) -> list[str]:
    """The cartesian axes a layout holds ("xaxis", "yaxis2", ...; plain_figures.label_overflow_allowed has added
    every axis a cartesian trace uses)."""
    return [k for k in layout if re.fullmatch(r"[xy]axis\d*", k)]


def _dark(colour) -> bool:
    """Whether a colour is a dark grey or black written as #rgb or #rrggbb (the labels charts set for a light page)."""
    if not (isinstance(colour, str) and colour.startswith("#") and len(colour) in (4, 7)):
        return False
    digits = colour[1:] if len(colour) == 7 else "".join(c * 2 for c in colour[1:])
    try:
        r, g, b = (int(digits[i : i + 2], 16) for i in (0, 2, 4))
    except ValueError:
        return False
    return max(r, g, b) - min(r, g, b) < 40 and 0.2126 * r + 0.7152 * g + 0.0722 * b < 100  # grey, and dark


ORIENTED = {"bar", "box", "violin", "histogram", "waterfall", "funnel"}


def _categories_along(data: list, axis: str) -> bool:
    """Whether bars (or boxes...) lie along this y axis: plotly draws no grid across them unless asked."""
    ref = "y" + axis[5:]  # "yaxis2" -> "y2"
    return any(t.get("type") in ORIENTED and t.get("orientation") == "h" and t.get("yaxis", "y") == ref for t in data)


def revision(spec: dict) -> str:
    """A short name of everything in the spec: its arrays (base64 strings by now) hashed each on its own, the rest
    dumped as JSON (a third of the time of dumping the whole spec)."""
    body = json.dumps(_digested(spec), default=str, separators=(",", ":"), sort_keys=True).encode()
    return hashlib.blake2b(body, digest_size=8).hexdigest()


def _digested(obj):
    if isinstance(obj, dict):
        return {k: _digested(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) and obj and isinstance(obj[0], (dict, list, tuple)):
        return [_digested(v) for v in obj]
    if isinstance(obj, str) and len(obj) > 256:
        return hashlib.blake2b(obj.encode(), digest_size=8).hexdigest()
    if isinstance(obj, list) and len(obj) > 256 and all(isinstance(v, str) for v in obj):  # per-cell hover labels
        return hashlib.blake2b("\x00".join(obj).encode(), digest_size=8).hexdigest()  # (dumping them: 2 ms a map)
    return obj
