"""Plotly figure builders shared by the pages: heatmaps (masked cells marked), head grids, lines, bars.

Data go to the browser as float32 arrays (plotly encodes them compactly); axes are categorical labels
"i·token", so repeated tokens stay distinct and hover shows the token without extra per-cell data.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

DIVERGING = "RdBu_r"
SEQUENTIAL = "Blues"
MASK_COLOUR = "rgba(120,120,120,0.35)"


WHITESPACE = str.maketrans({" ": "␣", "\t": "⇥", "\n": "⏎", "\r": "␍"})


def visible(token: str) -> str:
    """A token's text with its whitespace made visible (space ␣, tab ⇥, newline ⏎, carriage return ␍)."""
    return str(token).translate(WHITESPACE)


def axis_labels(tokens: list[str]) -> list[str]:
    """Unique category labels: position and token (whitespace made visible)."""
    return [f"{i}·{visible(tok)}" for i, tok in enumerate(tokens)]


def _f32(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float32)


def heatmap(z, x_labels, y_labels, *, title="", colorscale=DIVERGING, zmid=None, zmin=None, zmax=None, x_title="",
            y_title="", height=None) -> go.Figure:
    """One heatmap (NaN cells are gaps: mark masked ones with add_mask_marks)."""
    fig = go.Figure()
    add_heatmap(fig, z, x_labels, y_labels, colorscale=colorscale, zmid=zmid, zmin=zmin, zmax=zmax)
    n = max(len(y_labels), 1)
    fig.update_layout(title=title, height=height or min(160 + 22 * n, 720), margin=dict(l=10, r=10, t=40, b=10),
                      xaxis_title=x_title, yaxis_title=y_title)
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(type="category", tickangle=-60)
    return fig


def add_heatmap(fig, z, x_labels, y_labels, *, colorscale=DIVERGING, zmid=None, zmin=None, zmax=None, row=None,
                col=None, coloraxis=None, showscale=True) -> None:
    fig.add_trace(go.Heatmap(
        z=_f32(z), x=x_labels, y=y_labels, colorscale=None if coloraxis else colorscale, zmid=zmid, zmin=zmin,
        zmax=zmax, coloraxis=coloraxis, showscale=showscale and not coloraxis, hoverongaps=False,
        hovertemplate="%{y}<br>%{x}<br>%{z:.4f}<extra></extra>",
    ), row=row, col=col)


def heatmap_grid(mats, titles, x_labels, y_labels, *, cols=4, colorscale=SEQUENTIAL, zmin=None, zmax=None, zmid=None,
                 row_height=None, x_title="", y_title="") -> go.Figure:
    """Several heatmaps with one shared colour scale (e.g. every head of a layer).

    Row labels only on the first column and column labels only under the lowest heatmap of each column, so no
    heatmap's labels are drawn over its neighbour.
    """
    n = len(mats)
    cols = min(cols, n)
    rows = (n + cols - 1) // cols
    row_h = row_height or min(120 + 16 * len(y_labels), 420)
    gap, top, below = 46, 40, 90  # px: room for each row's subplot titles, and for the bottom x labels
    plot_h = rows * row_h + (rows - 1) * gap
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=0.015,
                        vertical_spacing=gap / plot_h if rows > 1 else 0.02)
    finite = [m[np.isfinite(m)] for m in map(_f32, mats)]
    lo = zmin if zmin is not None else min((f.min() for f in finite if f.size), default=0.0)
    hi = zmax if zmax is not None else max((f.max() for f in finite if f.size), default=1.0)
    for i, m in enumerate(mats):
        add_heatmap(fig, m, x_labels, y_labels, row=i // cols + 1, col=i % cols + 1, coloraxis="coloraxis")
    fig.update_layout(coloraxis=dict(colorscale=colorscale, cmin=float(lo), cmax=float(hi),
                                     cmid=zmid), margin=dict(l=10, r=10, t=top, b=10), height=plot_h + top + below)
    fig.update_yaxes(autorange="reversed", type="category", showticklabels=False, tickfont_size=10)
    fig.update_xaxes(type="category", showticklabels=False, tickangle=-60, tickfont_size=10)
    for i in range(n):
        r, c = i // cols + 1, i % cols + 1
        if c == 1:
            fig.update_yaxes(showticklabels=True, title_text=y_title, row=r, col=c)
        if i + cols >= n:  # no heatmap below this one
            fig.update_xaxes(showticklabels=True, title_text=x_title, row=r, col=c)
    return fig


def lines(x, series: dict[str, list], *, title="", x_title="", y_title="", height=320) -> go.Figure:
    """Line chart of named series over x."""
    fig = go.Figure([go.Scatter(x=list(x), y=_f32(y).tolist(), mode="lines", name=name) for name, y in series.items()])
    fig.update_layout(title=title, xaxis_title=x_title, yaxis_title=y_title, height=height,
                      margin=dict(l=10, r=10, t=40, b=10))
    return fig


def bars(labels, values, *, title="", x_title="", y_title="", height=360, secondary=None, x_format=None,
         hover_format=None) -> go.Figure:
    """Horizontal bars (largest on top); `secondary` adds a second series for comparison.

    `x_format` / `hover_format`: d3 formats of the value axis ticks and the hover value (e.g. "~%", ".4~g").
    """
    fig = go.Figure(go.Bar(x=_f32(values).tolist(), y=labels, orientation="h", name=y_title or "value"))
    if secondary is not None:
        name, vals = secondary
        fig.add_trace(go.Bar(x=_f32(vals).tolist(), y=labels, orientation="h", name=name, opacity=0.5))
    fig.update_layout(title=title, xaxis_title=x_title, height=height, barmode="overlay",
                      margin=dict(l=10, r=10, t=40, b=10))
    fig.update_yaxes(autorange="reversed", type="category")
    if x_format:
        fig.update_xaxes(tickformat=x_format)
    if hover_format:
        fig.update_traces(hovertemplate=f"%{{y}}<br>%{{fullData.name}}: %{{x:{hover_format}}}<extra></extra>")
    return fig


def add_mask_marks(fig, masked, x_labels, y_labels, *, hovertemplate="query %{y}<br>key %{x}<br>masked (−∞)",
                   row=None, col=None, marks: bool | None = None, value: float = 1.0) -> None:
    """Mark masked cells compactly: one grey overlay heatmap, ✕ as cell text (`marks`, default up to 64×64 cells).

    The marked heatmap should already hold NaN there; its gaps stop answering hover, the overlay does instead.
    The overlay's cells hold `value` (e.g. 0 for softmax weights), which `hovertemplate` may show as %{z}.
    """
    masked = np.asarray(masked, dtype=bool)
    if not masked.any():
        return
    marks = masked.size <= 64 * 64 if marks is None else marks
    fig.update_traces(hoverongaps=False, selector={"type": "heatmap"})
    fig.add_trace(go.Heatmap(
        z=np.where(masked, float(value), np.nan).astype(np.float32), x=x_labels, y=y_labels, showscale=False,
        colorscale=[[0, MASK_COLOUR], [1, MASK_COLOUR]], hoverongaps=False,
        hovertemplate=hovertemplate + "<extra></extra>",
        text=np.where(masked, "✕", "").tolist() if marks else None, texttemplate="%{text}" if marks else None,
        textfont={"color": "#555"}, name="mask",
    ), row=row, col=col)
