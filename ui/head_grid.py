"""Every head of a model in one picture: a grid with one row per attention block and layer and a cell per head,
coloured by a number. Plotly selects scatter points, not heatmap cells, so an invisible square marker on each head's
cell carries its hover and its click (widgets.clicked). Cells tile (gaps between them), so none hides another at any
head count. The Head catalogue (each head's label) and the Intervene page (each head knocked out) draw it."""
from __future__ import annotations

import numpy as np

from .plain_figures import figure


def head_grid(z, row_names: list[str], col_names: list[str] | None, cells: list[tuple[int, int]], *, customdata: list,
              hovertemplate: str, hover: list[str] | None = None, marker_text: list[str] | None = None, text=None,
              texttemplate: str | None = None, font_size: int | None = None, colorscale="Blues", zmin=0.0, zmax=1.0,
              zmid=None, colorbar: str = "", x_title: str = "", y_title: str = "", title: str | None = None,
              marker_px: int = 24, row_px: int = 44):
    """z (rows, columns), NaN where there is no head; cells: each head's (column, row), in the order of customdata
    (what a click returns) and of hover / marker_text (the markers' hovertext / text, which hovertemplate reads).
    col_names None: the columns are numbered (head 0, 1, ...). text / texttemplate write inside the cells."""
    n_rows, n_cols = np.shape(z)
    return figure([
        dict(type="heatmap", z=z, x=list(range(n_cols)), y=list(range(n_rows)), zmin=zmin, zmax=zmax, zmid=zmid,
             colorscale=colorscale, text=text, texttemplate=texttemplate,
             textfont=None if font_size is None else {"size": font_size}, xgap=2, ygap=2, hoverinfo="skip",
             name="cells", colorbar={"title": {"text": colorbar, "side": "right"}, "thickness": 12}),
        dict(type="scatter", x=[c for c, _ in cells], y=[r for _, r in cells], mode="markers",
             marker={"symbol": "square", "size": marker_px, "color": "rgba(0,0,0,0)"}, customdata=customdata,
             text=marker_text, hovertext=hover, hovertemplate=hovertemplate, name="heads", showlegend=False)],
        {"xaxis": {"title": x_title, "tickmode": "array", "tickvals": list(range(n_cols)), "ticktext": col_names,
                   "range": [-0.5, n_cols - 0.5], "showgrid": False, "zeroline": False},
         "yaxis": {"title": y_title, "tickmode": "array", "tickvals": list(range(n_rows)), "ticktext": row_names,
                   "autorange": "reversed", "range": [n_rows - 0.5, -0.5], "showgrid": False, "zeroline": False},
         "title": title, "height": 120 + row_px * n_rows, "margin": dict(l=10, r=10, t=40 if title else 30, b=10),
         "clickmode": "event+select", "dragmode": False})
