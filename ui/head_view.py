"""The head view (BertViz's picture): queries on the left, keys on the right, one line per head and pair whose
weight is above a floor, its opacity the weight, each head its own colour. Hover a token: only its lines stay.
A small self-contained SVG drawn by a few lines of JavaScript (no network); tokens are set as text, never HTML."""
from __future__ import annotations

import json

import numpy as np
import plotly.graph_objects as go
import streamlit.components.v1 as components

from .chart_theme import HEAD_COLOURS
from .plain_figures import figure

FLOOR = 0.02  # lines below this weight are left out (the data stays light)
ROW_PX = 18

SCRIPT = """
const D = JSON.parse(document.getElementById('data').textContent);
const svg = document.getElementById('v'), NS = 'http://www.w3.org/2000/svg';
const W = 520, X0 = 150, X1 = W - 150, R = D.row;
svg.setAttribute('width', W); svg.setAttribute('height', R * Math.max(D.q.length, D.k.length) + 10);
const on = D.heads.map(() => true); let focus = null;
function el(tag, attrs, text) { const e = document.createElementNS(NS, tag);
  for (const a in attrs) e.setAttribute(a, attrs[a]); if (text !== undefined) e.textContent = text; return e; }
const lines = el('g', {}); svg.appendChild(lines);
function draw() {
  lines.replaceChildren();
  for (const [h, i, j, w] of D.lines) {
    if (!on[h] || (focus && ((focus[0] === 'q' && focus[1] !== i) || (focus[0] === 'k' && focus[1] !== j)))) continue;
    lines.appendChild(el('line', {x1: X0, y1: R * i + R / 2 + 4, x2: X1, y2: R * j + R / 2 + 4,
      stroke: D.colours[h % D.colours.length], 'stroke-width': focus ? 2.5 : 1.5,
      'stroke-opacity': Math.min(1, w * (focus ? 1.2 : 0.9))}));
  }
}
function labels(list, x, anchor, side) {
  list.forEach((t, n) => { const e = el('text', {x: x, y: R * n + R / 2 + 8, 'text-anchor': anchor,
      'font-size': 12, 'font-family': 'monospace', style: 'cursor:pointer'}, t);
    e.addEventListener('mouseenter', () => { focus = [side, n]; e.setAttribute('font-weight', 'bold'); draw(); });
    e.addEventListener('mouseleave', () => { focus = null; e.removeAttribute('font-weight'); draw(); });
    svg.appendChild(e); });
}
labels(D.q, X0 - 6, 'end', 'q'); labels(D.k, X1 + 6, 'start', 'k');
const bar = document.getElementById('heads');
D.heads.forEach((name, h) => { const b = document.createElement('label');
  b.style.cssText = 'margin-right:8px;font:12px sans-serif;color:' + D.colours[h % D.colours.length];
  const c = document.createElement('input'); c.type = 'checkbox'; c.checked = true;
  c.addEventListener('change', () => { on[h] = c.checked; draw(); });
  b.appendChild(c); b.appendChild(document.createTextNode(name)); bar.appendChild(b); });
draw();
"""


def head_view_data(weights: np.ndarray, q_labels: list[str], k_labels: list[str], head_names: list[str]) -> dict:
    """What the page sends: [head, query, key, weight] for every weight above FLOOR, and the labels."""
    h, i, j = np.nonzero(weights > FLOOR)
    lines = np.stack([h, i, j], axis=1).tolist()
    ws = np.round(weights[h, i, j], 3).tolist()
    return {"q": list(q_labels), "k": list(k_labels), "heads": list(head_names), "colours": list(HEAD_COLOURS),
            "row": ROW_PX, "lines": [[*a, w] for a, w in zip(lines, ws, strict=True)]}


def page_html(data: dict) -> str:
    """The component's whole document; the data is JSON in a script tag, '<' escaped so no text can end it."""
    blob = json.dumps(data, ensure_ascii=False).replace("<", "\\u003c").replace(">", "\\u003e")
    return (f'<div id="heads"></div><svg id="v"></svg><script id="data" type="application/json">{blob}</script>'
            f"<script>{SCRIPT}</script>")


def head_view(weights: np.ndarray, q_labels: list[str], k_labels: list[str], head_names: list[str]) -> int:
    """Draw it; returns the bytes sent (the page says so; a test keeps it under 1 MB)."""
    html = page_html(head_view_data(weights, q_labels, k_labels, head_names))
    height = ROW_PX * max(len(q_labels), len(k_labels)) + 60
    components.html(html, height=min(height, 1400), scrolling=height > 1400)
    return len(html.encode("utf-8"))


def model_view_figure(view, head_names: list[str], layer_names: list[str]) -> go.Figure:
    """Every layer × head as one heatmap of bytes (the mosaic: one trace, light in the browser), a gap between the
    thumbnails, white where masked; an invisible marker on each thumbnail names it and makes it clickable."""
    span = view.size + 2  # thumbnail plus the gap (analysis.all_heads.GAP)
    colours = [[0.0, "#ffffff"], [1 / 255, "#f7fbff"], [1.0, "#08306b"]]  # 0: gap / masked; 1..255: weight 0..1
    cells = [(layer, head) for layer in range(view.n_layers) for head in range(view.n_heads)]
    fig = figure([
        dict(type="heatmap", z=view.mosaic, zmin=0, zmax=255, colorscale=colours, showscale=False, hoverinfo="skip",
                   name="mosaic"),
        dict(type="scatter", x=[h * span + view.size / 2 for _, h in cells],
                   y=[layer * span + view.size / 2 for layer, _ in cells], mode="markers",
                   marker={"symbol": "square", "size": max(8, 600 / max(view.n_heads, view.n_layers)),
                           "color": "rgba(0,0,0,0)"},
                   customdata=[[layer, h] for layer, h in cells], name="heads", showlegend=False,
                   hovertext=[f"{layer_names[layer]} · {head_names[h]}" for layer, h in cells],
                   hovertemplate="%{hovertext}<extra></extra>")])
    fig.update_xaxes(tickmode="array", tickvals=[h * span + view.size / 2 for h in range(view.n_heads)],
                     ticktext=head_names, side="top", showgrid=False, zeroline=False)
    fig.update_yaxes(tickmode="array", tickvals=[layer * span + view.size / 2 for layer in range(view.n_layers)],
                     ticktext=layer_names, autorange="reversed", showgrid=False, zeroline=False, scaleanchor="x")
    width = min(1100, 70 * view.n_heads + 120)  # about the page's width; the thumbnails stay square (scaleanchor)
    fig.update_layout(height=int(width * view.n_layers / max(view.n_heads, 1)) + 120, clickmode="event+select",
                      margin=dict(l=10, r=10, t=40, b=10), dragmode=False)
    return fig
