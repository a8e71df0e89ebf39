"""Heatmaps side by side in one chart, sharing their rows (the tokens, labelled once on the left): one plotly chart
where there were three (Q, K and V of a head) lays out and draws a 128-token page's labels once, not three times."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ui.figures import DIVERGING, WIDTH_PX, label_step, text_px
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
    size = 12 if rows <= 30 else 10 if rows <= 64 else 9
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
