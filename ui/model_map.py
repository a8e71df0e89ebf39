"""The whole model in one picture (the home page): boxes for the blocks, arrows between them and dotted residual
paths, each box carrying its live shape and summary, a click opening its page."""
from __future__ import annotations

import plotly.graph_objects as go

from .plain_figures import figure

BLOCK_COLOURS = {"text": "#eeeeee", "embed": "#d9f2d9", "attn": "#dbe8fb", "cross": "#e6dbfb", "norm": "#f2f2f2",
                 "ffn": "#fde9d4", "out": "#f6dbe8"}


def route(a: dict, b: dict) -> list[tuple[float, float]]:
    """The path of an arrow from block a to block b: straight along a row or down a column, else down into the gap
    below a, across, and down into b (like a line break)."""
    if abs(a["y"] - b["y"]) < 0.1:  # same row
        sign = 1 if b["x"] > a["x"] else -1
        return [(a["x"] + sign * a["w"] / 2, a["y"]), (b["x"] - sign * b["w"] / 2, b["y"])]
    start, end = (a["x"], a["y"] + a["h"] / 2), (b["x"], b["y"] - b["h"] / 2)
    if abs(a["x"] - b["x"]) < 0.1:
        return [start, end]
    mid = (start[1] + end[1]) / 2
    return [start, (a["x"], mid), (b["x"], mid), end]


NARROW_UNITS = 16.0  # a model map wider than this many units has narrow boxes (see model_map)
SUBLAYER_UNITS = 2.5  # boxes narrower than this hold one sublayer (pages/0_home.py: 1.9); wider ones span a stack


def unit_px(width: float, px_per_unit: int = 60) -> int:
    """Pixels per unit the map's labels are sized for (more for a wide map: its boxes are narrow)."""
    return round(px_per_unit * 1.3) if width > NARROW_UNITS else px_per_unit


LABEL_UNIT_PX = (85, 36)  # the labels fit their boxes from about this many pixels per unit (a map of normal, of narrow
# boxes: smaller font, one fact per line), measured in Chromium


def scroll_style(box: str, key: str, width: float) -> str:
    """CSS for the chart drawn under `key` in the container `box`: never narrower than its labels need, the container
    scrolling it sideways in a narrower column (a phone: plotly keeps a label's font size while it shrinks the boxes,
    and at 420 px the labels ran out of their boxes). Streamlit sizes a chart to its element, so the element is set."""
    least = round(width * LABEL_UNIT_PX[width > NARROW_UNITS])
    return (f"<style>.stMain .st-key-{box} {{overflow-x:auto}}"
            f".stMain .st-key-{box} [class*='st-key-{key}_'] {{min-width:{least}px}}</style>")


def model_map(blocks: list[dict], arrows: list, *, width: float, height: float, px_per_unit: int = 60) -> go.Figure:
    """The whole model as boxes: each block dict has id, x, y (centre), w, h, kind (a BLOCK_COLOURS key), title,
    detail (shape and live summary) and page (where a click goes). Arrows join block ids (a, b), routed by `route`,
    or are explicit point lists."""
    # Built in one go, and drawn as three traces (arrows, labels, click targets) over the boxes' shapes: as
    # plotly annotations the labels and arrowheads took 85 ms of the browser's first drawing, as traces 13 ms
    # (plotly.js timed in Chromium), which is part of the first page of a freshly started server.
    where = {b["id"]: b for b in blocks}
    # A wide model (an encoder beside a decoder: 10 boxes a row) gets about 70 px per box on a 900 px page: its
    # small boxes get a smaller font, one fact per line, and taller rows, so no text runs out of its box.
    narrow = width > NARROW_UNITS
    px_per_unit = unit_px(width, px_per_unit)
    shapes, labels = [], []
    for b in blocks:
        shapes.append(dict(type="rect", x0=b["x"] - b["w"] / 2, x1=b["x"] + b["w"] / 2, y0=b["y"] - b["h"] / 2,
                           y1=b["y"] + b["h"] / 2, fillcolor=BLOCK_COLOURS[b["kind"]],
                           line={"color": "#777", "width": 1}, layer="below"))
        title, detail = b["title"], b["detail"]
        if narrow and b["w"] < SUBLAYER_UNITS:
            title = title.replace(" ", "<br>", 1) if len(title) > 10 else title
            detail = detail.replace(" · ", "<br>")
        labels.append(f"<b>{title}</b><br>{detail}")
    # every arrow a polyline (None between two), an arrowhead at its end only; a list starting "residual" is a
    # residual connection (dashed, green): x skips the sublayer and is added to its output in Add & Norm
    lines = {"arrows": ([], [], []), "residual": ([], [], [])}
    for arrow in arrows:
        kind = "residual" if arrow[0] == "residual" else "arrows"
        points = arrow[1:] if kind == "residual" else route(where[arrow[0]], where[arrow[1]]) \
            if isinstance(arrow[0], str) else arrow
        xs, ys, heads = lines[kind]
        xs += [p[0] for p in points] + [None]
        ys += [p[1] for p in points] + [None]
        heads += [0] * (len(points) - 1) + [11 if kind == "arrows" else 9, 0]
    colour = {"arrows": "#555", "residual": "#2a9d5c"}
    traces = [
        dict(type="scatter", x=xs, y=ys, mode="lines+markers", name=kind, hoverinfo="skip", showlegend=False,
                   line={"color": colour[kind], "width": 1.4, "dash": "dot" if kind == "residual" else "solid"},
                   marker={"symbol": "arrow", "angleref": "previous", "size": heads, "color": colour[kind]})
        for kind, (xs, ys, heads) in lines.items() if xs] + [
        dict(type="scatter", x=[b["x"] for b in blocks], y=[b["y"] for b in blocks], text=labels, mode="text",
             name="labels",
                   textfont={"size": 10 if narrow else 12, "color": "#222"}, hoverinfo="skip", showlegend=False),
        dict(type="scatter",  # a click on a block (anywhere near its centre) opens its page
            x=[b["x"] for b in blocks], y=[b["y"] for b in blocks], mode="markers",
            marker={"size": [min(b["w"], b["h"]) * px_per_unit * 0.9 for b in blocks], "symbol": "square",
                    "color": "rgba(0,0,0,0)", "line": {"width": 0}},
            customdata=[b["page"] for b in blocks], hovertext=[b.get("hover", b["title"]) for b in blocks],
            hovertemplate="%{hovertext}<extra></extra>", showlegend=False, name="blocks"),
    ]
    return figure(traces, {
        "shapes": shapes, "height": int(height * px_per_unit) + 20, "margin": dict(l=0, r=0, t=10, b=10),
        "xaxis": {"visible": False, "range": [0, width], "fixedrange": True},
        "yaxis": {"visible": False, "range": [height, 0], "fixedrange": True},
        "plot_bgcolor": "white", "clickmode": "event+select", "dragmode": False})
