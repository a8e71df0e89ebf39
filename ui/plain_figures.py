"""Plotly figures built from plain trace dicts without plotly's property validation (ui.figures' builders use them).

Validating a chart's arrays when it was built was about a third of the Attention page's CPU on a shared server; the
builders write known properties, so the JSON sent is the same (tests/ui/test_fast_paths.py compares it with a
validated build). What validation would still change is done here: None values dropped, a named colour scale
spelled out. Later update_* calls on such a figure validate as usual (they turn a title string into {"text": ...}).
"""
from __future__ import annotations

import plotly.graph_objects as go
from _plotly_utils.basevalidators import ColorscaleValidator

_SCALES = ColorscaleValidator("colorscale", "figure")


def _plain(props: dict) -> dict:
    """Properties as validation would leave them: no None at any depth, a named colour scale spelled out."""
    out = {}
    for k, v in props.items():
        if v is None:
            continue
        if isinstance(v, dict):
            v = _plain(v)
        elif isinstance(v, (list, tuple)) and v and isinstance(v[0], dict):
            v = [_plain(x) for x in v]
        elif k == "colorscale" and isinstance(v, str):
            v = _SCALES.validate_coerce(v)
        out[k] = v
    return out


def figure(data=(), layout: dict | None = None) -> go.Figure:
    """A plotly figure of plain trace dicts, not validated; later update_* calls are. Add a big trace with `add`."""
    return _validating(go.Figure([_plain(tr) for tr in data], _plain(layout or {}), _validate=False))


def _validating(fig: go.Figure) -> go.Figure:
    """Switch validation back on for what comes next (plotly keeps the switch per object: the figure, its layout,
    each trace)."""
    for obj in (fig, fig.layout, *fig.data):
        obj._validate = True
    return fig


def add(fig: go.Figure, trace: dict, **where) -> None:
    """Add one plain trace dict without validating it (row / col as plotly's add_trace)."""
    fig._validate = False
    try:
        fig.add_trace(_plain(trace), **where)
    finally:
        _validating(fig)
