"""Several heatmaps in one chart: panels side by side sharing their rows (the tokens, labelled once on the left: one
plotly chart where there were three, Q, K and V of a head, lays out and draws a 128-token page's labels once, not
three times), and small multiples (a thumbnail per head) on one colour scale."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import plotly.graph_objects as go

from ui.figures import DIVERGING, SEQUENTIAL, WIDTH_PX, as_f32, label_font, label_step, text_px
from ui.plain_figures import figure

BAR_PX = 56  # a panel's colour bar with its numbers, right of the panel


def panel_heatmaps(mats: list[np.ndarray], row_labels: list[str], titles: list[str], *, x_title: str,
                   hovertemplate: str, colorscale=DIVERGING, px_per_token: int = 14, min_height: int = 360,
                   max_height: int = 900, width_px: int = WIDTH_PX) -> go.Figure:
    """mats: (T, n_i) each, over the same T rows; each panel its own colour scale centred on 0 (Q, K and V differ in
    size), its columns numbered, its title above it; the rows labelled as token_heatmap labels them (every k-th
    where one per row would overlap)."""
    n = len(mats)
    rows = mats[0].shape[0]
    size = label_font(rows)
    height = int(min(max(min_height, 120 + px_per_token * rows), max_height))
    every = label_step(rows, height - 120, size)
    left = int(max(map(text_px, row_labels[::every]), default=0) * size) + 8
    plot_w = max(width_px - left, 1)
    gap = BAR_PX / plot_w  # each panel leaves room for its colour bar on its right
    w = (1 - n * gap) / n
    traces, layout, notes = [], {}, []
    ys = list(range(rows))
    for i, (m, title) in enumerate(zip(mats, titles, strict=True)):
        x0, k = i * (w + gap), "" if i == 0 else str(i + 1)
        m = np.asarray(m, dtype=np.float32)
        span = float(np.abs(m).max()) or 1.0
        layout[f"xaxis{k}"] = {"domain": [x0, x0 + w], "anchor": f"y{k}", "showgrid": False, "zeroline": False,
                               "automargin": False, "title": {"text": x_title}, "tickfont": {"size": size}}
        layout[f"yaxis{k}"] = {"anchor": f"x{k}", "showgrid": False, "zeroline": False, "autorange": "reversed",
                               "automargin": False,
                               **({"tickmode": "array", "tickvals": ys[::every], "ticktext": row_labels[::every],
                                   "tickfont": {"size": size, "color": "#222"}} if i == 0 else
                                  {"matches": "y", "showticklabels": False, "ticks": ""})}
        layout[f"coloraxis{k}"] = {"colorscale": colorscale, "cmin": -span, "cmax": span, "cmid": 0,
                                   "colorbar": {"thickness": 10, "x": x0 + w + gap * 0.1, "xanchor": "left",
                                                "xpad": 4, "y": 0.5, "yanchor": "middle", "len": 0.9,
                                                "tickfont": {"size": 9}}}  # every bar alike (the theme
        # places the first coloraxis's bar for a chart of its own)
        traces.append({"type": "heatmap", "z": m, "x": list(range(m.shape[1])), "y": ys,
                       "coloraxis": f"coloraxis{k}", "xaxis": f"x{k}", "yaxis": f"y{k}", "name": title,
                       "hovertemplate": hovertemplate + "<extra></extra>"})
        notes.append({"text": title, "x": x0 + w / 2, "y": 1, "xref": "paper", "yref": "paper", "xanchor": "center",
                      "yanchor": "bottom", "showarrow": False, "font": {"size": 13}})
    margin = {"l": 10 + left, "r": 10, "t": 40, "b": 10 + size + 8 + 50}  # numbered columns and their title
    return figure(traces, {**layout, "annotations": notes, "height": height, "margin": margin})


def _unit(x: float) -> float:
    """A paper coordinate kept within [0, 1] (sums of spacings can land a hair outside)."""
    return min(1.0, max(0.0, round(x, 9)))


TITLE_ROOM_PX = 46  # between two rows of thumbnails: a title of two 12 px lines and the gap below it


LEVELS = 63  # a thumbnail's colours: codes 0..63 span its scale, code 64 is a masked cell (transparent). 64 steps are
# more than a cell of two or three pixels shows, and compress better: a layer's 8 thumbnails at 64 tokens with no mask
# went from 17.7 to 10.6 KB on the wire (255 steps)


def colour_codes(m: np.ndarray, zmin: float, zmax: float) -> np.ndarray:
    """A map as one byte per cell (uint8: a quarter of float32 on the wire): its colour's step on the scale,
    LEVELS + 1 where it is NaN (masked). A thumbnail shows no numbers (no hover), only colours."""
    span = (zmax - zmin) or 1.0
    codes = np.clip(np.rint((np.nan_to_num(m, nan=zmin) - zmin) / span * LEVELS), 0, LEVELS)
    return np.where(np.isnan(m), LEVELS + 1, codes).astype(np.uint8)


@lru_cache(maxsize=16)
def _named_scale(name: str) -> tuple:
    from plotly.colors import get_colorscale

    return tuple(map(tuple, get_colorscale(name)))


def code_scale(colorscale) -> list:
    """The colour scale over codes 0..LEVELS, then transparent for the masked code."""
    stops = _named_scale(colorscale) if isinstance(colorscale, str) else colorscale
    top = LEVELS / (LEVELS + 1)
    return [[float(p) * top, c] for p, c in stops] + [[top + 1e-6, "rgba(0,0,0,0)"], [1.0, "rgba(0,0,0,0)"]]


def thumbnails(mats, titles, *, cols: int, colorscale=SEQUENTIAL, zmin=0.0, zmax=1.0, masked=None,
               size_px: int = 150, selected: int | None = None, ticks: dict | None = None) -> go.Figure:
    """Small multiples (one per head) on one colour scale, no tick labels; a click anywhere on one selects it
    (one large invisible marker per thumbnail). Each map is sent as colour codes (colour_codes), the colour bar
    labelled in the maps' own units (`ticks`: tickvals / ticktext of the scale, else five even steps)."""
    n = len(mats)
    rows = (n + cols - 1) // cols
    shown = [f"<b><span style='color:#d62728'>▶ {title}</span></b>" if i == selected else title
             for i, title in enumerate(titles)]  # the head shown large above
    # the grid laid out here, not by make_subplots: its per-subplot validation was half this chart's time
    height = rows * (size_px + 50) + 50
    # a row's two-line title (the head, its pattern) needs ~46 px above it, clear of the row above's axis line
    h_gap, v_gap = 0.02, min(0.3, TITLE_ROOM_PX / (height - 60)) if rows > 1 else 0.02
    w, h = (1 - h_gap * (cols - 1)) / cols, (1 - v_gap * (rows - 1)) / rows
    traces, layout, notes = [], {}, []
    axis = {"showticklabels": False, "ticks": "", "showgrid": False, "zeroline": False}
    for i, m in enumerate(mats):
        r, c = divmod(i, cols)
        x0, top = c * (w + h_gap), 1 - r * (h + v_gap)
        n = "" if i == 0 else str(i + 1)
        layout[f"xaxis{n}"] = dict(axis, domain=[_unit(x0), _unit(x0 + w)], anchor=f"y{n}")
        layout[f"yaxis{n}"] = dict(axis, domain=[_unit(top - h), _unit(top)], anchor=f"x{n}", autorange="reversed")
        notes.append(dict(text=shown[i], x=x0 + w / 2, y=top, xref="paper", yref="paper", xanchor="center",
                          yanchor="bottom", showarrow=False, font={"size": 12}))
        m = as_f32(m)
        if masked is not None:
            m = np.where(masked[i], np.nan, m)
        traces.append(dict(type="heatmap", z=colour_codes(m, zmin, zmax), coloraxis="coloraxis", hoverinfo="skip",
                           name=f"head {i}", xaxis=f"x{n}", yaxis=f"y{n}"))
        traces.append(dict(type="scatter", x=[(m.shape[1] - 1) / 2], y=[(m.shape[0] - 1) / 2], mode="markers",
                           marker={"size": size_px * 0.9, "symbol": "square", "color": "rgba(0,0,0,0)",
                                   "line": {"width": 0}},
                           customdata=[i], hovertemplate=f"{titles[i]}<extra></extra>".replace("<br>", " · "),
                           showlegend=False, name=f"pick {i}", xaxis=f"x{n}", yaxis=f"y{n}"))
    values = list((ticks or {}).get("tickvals") or np.linspace(zmin, zmax, 5).round(6).tolist())
    labels = list((ticks or {}).get("ticktext") or [f"{v:g}" for v in values])
    bar = {"tickvals": colour_codes(np.asarray(values, dtype=np.float32), zmin, zmax).tolist(), "ticktext": labels}
    return figure(traces, dict(
        layout, annotations=notes, coloraxis={"colorscale": code_scale(colorscale), "cmin": 0, "cmax": LEVELS + 1,
                                              "colorbar": bar},
        height=height, margin=dict(l=10, r=10, t=50, b=10), clickmode="event+select",
        dragmode=False))

