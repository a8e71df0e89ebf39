"""Plotly figures built from plain trace dicts without plotly's property validation (ui.figures' builders use them).

Validating a chart's arrays when it was built was about a third of the Attention page's CPU on a shared server; the
builders write known properties, so the JSON sent is the same (tests/ui/test_fast_paths.py compares it with a
validated build). What validation would still change is done here: None values dropped, a named colour scale
spelled out. Later update_* calls on such a figure validate as usual (they turn a title string into {"text": ...}).
And how every chart is sent (`sendable`, ui.widgets.chart): without plotly's deep copy, its axes' labels never
measured by the browser for overflow.
"""
from __future__ import annotations

from functools import partial

import plotly.graph_objects as go
import plotly.io as pio
from _plotly_utils.basevalidators import ColorscaleValidator
from _plotly_utils.utils import is_homogeneous_array, is_skipped_key, to_typed_array_spec
from plotly.basedatatypes import BaseFigure

from .chart_theme import axis_names, themed

_SCALES = ColorscaleValidator("colorscale", "figure")
# Every chart is sent without a template (ui.chart_theme writes the look into it), so a new figure need not deep-copy
# plotly's default template into its layout first: 2 ms a figure, a tenth of a page's chart building on the server.
pio.templates.default = None


def _plain(props: dict) -> dict:
    """Properties as validation would leave them: no None at any depth, a named colour scale spelled out, a title
    string as {"text": ...}."""
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
        elif k == "title" and isinstance(v, str):  # every plotly title is an object
            v = {"text": v}
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
    # add_traces hands the trace to the figure's own copy of the data validator without the figure's switch
    validator = fig._data_validator
    validator.validate_coerce = partial(type(validator).validate_coerce, validator, _validate=False)
    try:
        fig.add_trace(_plain(trace), **where)
    finally:
        del validator.validate_coerce
        _validating(fig)


class _Spec(BaseFigure):
    """A figure as st.plotly_chart takes it, its spec already made. Plotly's to_dict deep-copies every array
    before it turns numpy arrays into base64 in place; `sendable` copies only what that conversion touches."""

    def __init__(self, spec: dict):  # not BaseFigure's: nothing here is validated or kept
        self._spec = spec

    def to_dict(self) -> dict:
        return self._spec


def sendable(fig: go.Figure, look: str | None = None) -> BaseFigure:
    """What a chart sends: fig.to_dict() without the deep copy (the figure is left as it was), every cartesian
    axis's tick labels allowed past the plot's edge (`label_overflow_allowed`), in Streamlit's light or dark look
    written into the chart itself (ui.chart_theme: drawn once, not twice)."""
    # an animation (frames) takes plotly's own copying to_dict
    spec = fig.to_dict() if fig._frame_objs else _converted({"data": fig._data, "layout": fig._layout})
    return _Spec(themed(label_overflow_allowed(spec), look))


CARTESIAN = {"scatter", "bar", "heatmap", "histogram", "box", "violin", "contour", "scattergl"}


def label_overflow_allowed(spec: dict) -> dict:
    """ticklabeloverflow "allow" on every cartesian axis that does not say otherwise. Plotly's default hides labels
    that pass the plot's edge by measuring each label in the browser (half of the FFN page's drawing at 128
    tokens); Streamlit's theme grows the margins to hold the labels (automargin), or a chart sets its own margins
    for them (figures.token_heatmap), so nothing passes the edge and nothing is hidden either way."""
    layout = spec["layout"] = dict(spec["layout"])
    axes = set(axis_names(layout))
    for trace in spec["data"]:
        if trace.get("type", "scatter") in CARTESIAN:
            axes |= {f"{a}axis{str(trace.get(a + 'axis', a))[1:]}" for a in "xy"}
    for name in axes:
        layout[name] = {"ticklabeloverflow": "allow", **(layout.get(name) or {})}
    return spec


def _converted(obj):
    """plotly's convert_to_base64 on a copy of the containers only: arrays and scalars are shared, not copied. A
    list is looked into when its first item is a container: plotly's lists hold one kind of item (a trace's values
    or labels, or objects such as annotations), and a label list of a 128-token map has 16,384 strings to skip."""
    if isinstance(obj, dict):
        return {k: v if is_skipped_key(k) else to_typed_array_spec(v) if is_homogeneous_array(v) else _converted(v)
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) and obj and isinstance(obj[0], (dict, list, tuple)):
        return type(obj)(_converted(v) for v in obj)
    return obj
