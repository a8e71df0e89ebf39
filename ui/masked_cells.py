"""Masked cells of an attention map: grey, with an ✕ on a small map, answering hover instead of a gap (the same look
in the plotly charts and in the browser's own attention views)."""
from __future__ import annotations

import numpy as np

from .plain_figures import add

MASK_COLOUR = "rgba(120,120,120,0.35)"
MARK_CAP = 32 * 32  # maps of up to this many cells mark each masked one with an ✕ (one text element each: at 64
# tokens the ✕s of the large map and the after-mask map took about a quarter of a head switch's redraw in Chromium)


def marks_masked(masked) -> bool:
    """Whether mark_cells draws an ✕ on the masked cells of this map (else they are grey only: titles say which)."""
    return np.asarray(masked).size <= MARK_CAP


def mark_cells(fig, masked, *, hovertemplate: str, value: float = 1.0, row=None, col=None,
               marks: bool | None = None, step: int = 1) -> None:
    """Masked cells (the heatmap holds NaN there) in grey, with an ✕ on a small map (marks_masked), answering hover
    instead of the gap (`step`: cells of step × step tokens, as token_heatmap's)."""
    masked = np.asarray(masked, dtype=bool)
    if not masked.any():
        return
    marks = marks_masked(masked) if marks is None else marks
    n_q, n_k = masked.shape
    categorical = row is None and fig.layout.xaxis.type == "category"  # token_heatmap's categories: the same names
    add(fig, dict(type="heatmap",
        z=np.where(masked, float(value), np.nan).astype(np.float32),
        x=fig.data[0].x if categorical else list(range(0, n_k * step, step)),
        y=fig.data[0].y if categorical else list(range(0, n_q * step, step)), showscale=False,
        colorscale=[[0, MASK_COLOUR], [1, MASK_COLOUR]],
        hoverongaps=False,
        hovertemplate=hovertemplate + "<extra></extra>",
        text=np.where(masked, "✕", "").tolist() if marks else None, texttemplate="%{text}" if marks else None,
        textfont={"color": "#555"}, name="mask"), row=row, col=col)
