"""Plotly figure builders shared by the pages: heatmaps (their masked cells: ui/masked_cells.py), lines, bars (small
multiples and panels: ui/panels.py).

Data go to the browser as float32 arrays (plotly encodes them compactly). Token axes carry labels
"position ‘token’", so repeated tokens stay distinct and a number token is never mistaken for its position.
"""
from __future__ import annotations

import re
import unicodedata
import warnings

import numpy as np
import plotly.graph_objects as go

from .plain_figures import figure

DIVERGING = "RdBu_r"
SEQUENTIAL = "Blues"
_BREAKS = {"\t": "⇥", "\n": "⏎", "\r": "␍"}  # tab, newline, carriage return
LINE_BREAKS, WHITESPACE = str.maketrans(_BREAKS), str.maketrans({" ": "␣", **_BREAKS})
MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")  # what markdown, its LaTeX or a directive (:red[…]) reads
RTL = "\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufefe\U00010800-\U00010fff\U0001e800-\U0001efff"  # Hebrew, Arabic, Syriac...
RTL_RUN = re.compile(f"[{RTL}]+(?:[ ␣]+[{RTL}]+)*")  # right-to-left words with the spaces between them
# characters that draw nothing: controls, the soft hyphen, zero-width spaces and joiners, direction marks and
# isolates, the byte-order mark (a token of them alone showed as "" or " 1/3")
INVISIBLE = re.compile("[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e"
                       "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]")
# other spaces and blank fillers (Hangul, Braille), named where ␣ shows the ASCII space (a label showed U+2000 as a
# blank); a no-break space too, but the one before a piece's "1/3" (text.tokenizer.label_pieces: "踩 1/3")
OTHER_SPACES = "\u115f\u1160\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u2800\u3000\u3164\uffa0"
INVISIBLE_OR_SPACE = re.compile(f"{INVISIBLE.pattern[:-1]}{OTHER_SPACES}]|\u00a0(?!\\d+/\\d+)")


def visible(token: str, spaces: bool = True) -> str:
    """A token's text with its whitespace made visible (space ␣, tab ⇥, newline ⏎, carriage return ␍, other spaces
    named ⟨U+3000⟩; spaces=False leaves spaces as they are: running text in one line) and each character that draws
    nothing named by its code point (⟨U+200B⟩); each run of right-to-left words (Arabic, Hebrew) in a bidi isolate of
    its own, so a label's position number, its quotes and a piece's "2/2" stay where they are (one isolate round the
    whole label drew "ا 2/2" as "2/2 ا")."""
    text = str(token).translate(WHITESPACE if spaces else LINE_BREAKS)
    text = (INVISIBLE_OR_SPACE if spaces else INVISIBLE).sub(lambda m: f"⟨U+{ord(m.group()):04X}⟩", text)
    return RTL_RUN.sub(lambda m: f"\u2067{m.group()}\u2069", text)


def quoted(token: str) -> str:
    """A token as every label and sentence quotes it: ‘␣mat’ (visible() inside single curly quotes)."""
    return f"‘{visible(token)}’"


def plain(text: str) -> str:
    """A text shown as it is inside markdown (a token may be "**" or "$": two of them in one sentence made the text
    between them bold or a formula)."""
    return MARKDOWN.sub(r"\\\1", text)


def md_visible(token: str) -> str:
    """visible(), for a sentence drawn as markdown (st.markdown, st.caption, a metric's label, a message box)."""
    return plain(visible(token))


def md_quoted(token: str) -> str:
    """quoted(), for a sentence drawn as markdown."""
    return f"‘{md_visible(token)}’"


def axis_labels(tokens: list[str]) -> list[str]:
    """Unique labels: the position, then the token in quotes with its whitespace made visible ("3 ‘42’")."""
    return [f"{i} {quoted(tok)}" for i, tok in enumerate(tokens)]


def ranked_labels(tokens: list[str]) -> list[str]:
    """Unique labels for a ranking (not positions): "#1 ‘the’", "#2 ‘a’", ..."""
    return [f"#{i + 1} {quoted(tok)}" for i, tok in enumerate(tokens)]


def signed_format(span: float) -> str:
    """A d3 format (Python's too) that writes the largest of some changes (|x| ≤ span) with two significant digits, at
    least two decimals ("+0.0046", not "+0.00": a probability's changes are often that small); changes below 1e-5 (the
    probability of an answer the model does not expect) in powers of ten ("+4.3e-7", not "+0.000000")."""
    span = abs(float(span))
    if 0 < span < 1e-5:
        return "+.1e"
    digits = int(min(6, max(2, 1 - np.floor(np.log10(span))))) if span > 0 else 2
    return f"+.{digits}f"


class Readable(float):
    """A number that a sentence's fixed format ("{p:.4f}") writes in powers of ten when it would read as zeros
    (4.3e-07, not 0.0000): a string keeps one format for the usual sizes and still says a tiny value."""

    def __format__(self, spec: str) -> str:
        if spec.endswith("f") and self != 0 and abs(self) < 5e-5:
            return format(float(self), spec.split(".")[0] + ".1e")
        return format(float(self), spec)


def prob_text(p: float) -> str:
    """A probability as a learner reads it: 4 decimals, or 2 significant digits when that would show 0.0000."""
    return f"{Readable(p):.4f}"


def as_f32(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float32)


def lines(x, series: dict[str, list], *, title="", x_title="", y_title="", height=320, mode="lines",
          x_axis: dict | None = None, y_axis: dict | None = None) -> go.Figure:
    """Line chart of named series over x; `x_axis` / `y_axis`: more axis properties (e.g. a log axis). One
    constructor call: an update_* call with titles re-validates the whole figure (several ms each)."""
    x = list(x)
    x_axis = {"title": {"text": x_title}, **(x_axis or {})}
    if x and isinstance(x[0], str):  # token labels: every k-th, so they never overlap (plotly's own thinning did)
        every = label_step(len(x), WIDTH_PX, 10)
        x_axis.update(type="category", tickmode="array", tickvals=x[::every], ticktext=x[::every],
                      tickfont={"size": 10}, tickangle=-60 if len(x) <= 30 else -90)
    return figure([dict(type="scatter", x=x, y=as_f32(y).tolist(), mode=mode, name=name)
                   for name, y in series.items()],
                  {"title": {"text": title}, "xaxis": x_axis, "yaxis": {"title": {"text": y_title}, **(y_axis or {})},
                   "height": height, "margin": dict(l=10, r=10, t=40, b=10)})


def bars(labels, values, *, title="", x_title="", y_title="", height=360, secondary=None, x_format=None,
         hover_format=None, x_axis: dict | None = None) -> go.Figure:
    """Horizontal bars (largest on top); `secondary` adds a second series for comparison.

    `x_format` / `hover_format`: d3 formats of the value axis ticks and the hover value (e.g. "~%", ".4~g");
    `x_axis`: more value-axis properties (e.g. its range).
    """
    hover = f"%{{y}}<br>%{{fullData.name}}: %{{x:{hover_format}}}<extra></extra>" if hover_format else None
    traces = [dict(type="bar", x=as_f32(values).tolist(), y=labels, orientation="h", name=y_title or x_title or title,
                   hovertemplate=hover)]
    if secondary is not None:
        name, vals = secondary
        traces.append(dict(type="bar", x=as_f32(vals).tolist(), y=labels, orientation="h", name=name, opacity=0.5,
                           hovertemplate=hover))
    x_axis = {"title": {"text": x_title}, "tickformat": x_format, **(x_axis or {})}
    if x_format == "d":  # counts: whole-number ticks only (plotly's own spacing gave 0.5, 1.5, ...)
        x_axis.update(tick0=0, dtick=max(1, -(-int(np.nanmax(as_f32(values), initial=0)) // 8)))
    return figure(traces, {"title": {"text": title}, "xaxis": x_axis, "yaxis": {"autorange": "reversed",
                           "type": "category"}, "height": height, "barmode": "overlay",
                           "margin": dict(l=10, r=10, t=40, b=10)})


LOG_FLOOR = 1e-6


def scaled_weights(w: np.ndarray, scale: str) -> tuple[np.ndarray, dict]:
    """Weights (…, Tq, Tk) as coloured on `scale`, and the colour-axis settings that go with it."""
    w = as_f32(w)
    if scale == "row":
        top = np.nanmax(np.where(np.isnan(w), -np.inf, w), axis=-1, keepdims=True)
        return np.where(top > 0, w / np.where(top > 0, top, 1), 0.0), {"zmin": 0.0, "zmax": 1.0}
    if scale == "log":
        ticks = [-6, -4, -2, 0]
        return np.log10(np.maximum(w, LOG_FLOOR)), {
            "zmin": -6.0, "zmax": 0.0, "colorbar": {"tickvals": ticks, "ticktext": [f"1e{k}" for k in ticks]}}
    return w, {"zmin": 0.0, "zmax": 1.0}


WIDTH_PX = 800  # the width a chart may count on for its column labels (the page is at least this wide)
COLUMN_PX = 340  # the same for a chart in one of two columns (st.columns(2)) beside its colour bar


def label_step(n: int, room_px: float, font_size: int) -> int:
    """Label every token while one label per row (or column) fits in room_px; beyond, every k-th token, so the
    labels never overlap (a label needs about font_size + 3 pixels across)."""
    fits = max(1, int(room_px // (font_size + 3)))
    return max(1, -(-n // fits))


def block_max(z: np.ndarray, step: int) -> np.ndarray:
    """A (Tq, Tk) map pooled into step × step blocks, each the largest value in it (NaN where a block is all NaN):
    a 1000-token map drawn as 250 × 250 cells keeps a sharp pattern visible and stays light in the browser."""
    if step <= 1:
        return as_f32(z)
    n_q, n_k = z.shape
    pad = np.full((-(-n_q // step) * step, -(-n_k // step) * step), np.nan, dtype=np.float32)
    pad[:n_q, :n_k] = z
    blocks = pad.reshape(pad.shape[0] // step, step, pad.shape[1] // step, step)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN (masked) block is NaN, on purpose
        return np.nanmax(blocks, axis=(1, 3))


def block_labels(labels: list[str], step: int, shown: int = 4) -> list[str]:
    """One unique name per block of `step` consecutive axis_labels: "8–11: 8 ‘a’ 9 ‘b’ …" (the first `shown` of
    them, then …), for the hover of a pooled map (block_max)."""
    out = []
    for lo in range(0, len(labels), step):
        part = labels[lo:lo + step]
        head = f"{lo}–{lo + len(part) - 1}: " if len(part) > 1 else ""
        out.append(head + " ".join(part[:shown]) + (" …" if len(part) > shown else ""))
    return out


BAR_BELOW_PX = 40  # a colour bar in a row under a chart: its bar and its numbers
TITLE_PX = 50  # an axis title with its standoff from the tick labels (Streamlit's theme: 20-32 px) and its line


def label_font(n: int) -> int:
    """The tick labels' font size for a chart of n tokens: smaller as they crowd (the same on every token chart)."""
    return 12 if n <= 30 else 10 if n <= 64 else 9


def text_px(text: str, narrow: float = 0.62) -> float:
    """A label's width in ems: CJK and other wide characters one em, the rest `narrow` (no font at hand here: 0.62
    holds tick labels with room to spare; Source Sans's latin letters average about 0.45)."""
    return sum(1.0 if unicodedata.east_asian_width(c) in "WF" else narrow for c in text)


def token_heatmap(z, q_labels, k_labels=None, *, title="", colorscale=SEQUENTIAL, zmin=None, zmax=None, zmid=None,
                  colorbar=None, customdata=None, names=None, hovertemplate=None, px_per_token=18, min_height=360,
                  max_height=1400, font_size=None, x0: int = 0, step: int = 1, categories=None,
                  width_px: int = WIDTH_PX, x_title: str | None = None, y_title: str | None = None,
                  fixed_margins: bool = False, colorbar_below: bool = False) -> go.Figure:
    """A heatmap on integer axes with its rows labelled (tokens), columns labelled too unless k_labels is None
    (then numbered); tall enough for one label per row up to max_height, then every k-th label (label_step: labels
    never overlap). Integer axes keep repeated tokens apart. `customdata` (Tq, Tk, n) numbers and `names` (two
    (Tq, Tk) string arrays, %{text} and %{hovertext}) feed a richer hover. `step` > 1: each cell is a block of
    step × step tokens (block_max), placed at its first token's position (hover and ticks read token indices).
    `categories` (one unique name per row, one per column: axis_labels or block_labels) makes the axes categorical
    with those names as coordinates, so hover names every token of a long map (%{y}, %{x}) for the price of one
    string per row and column, where per-cell names would cost rows × columns strings (> 1 MB above ~200 tokens).
    `fixed_margins`: margins computed here from the labels and the axis titles, so the browser lays the chart out
    once (Streamlit's theme turns on plotly's automargin, which measures every tick label and draws the chart
    again: half of the Attention page's drawing time at 100 tokens); only for a chart whose ticks and titles are
    all given here. `colorbar_below` (with fixed_margins): the colour bar in a row under the chart, so the map has the
    chart's whole width (on a phone a bar beside it took a fifth of it)."""
    z = as_f32(z)
    n_q, n_k = z.shape
    size = font_size or label_font(max(n_q, n_k))
    # slanted key labels sit 0.87 × the column spacing apart: upright (the least room) once a line of text (CJK is
    # taller) no longer fits between them; the plot is the chart's width less its row labels
    plot_px = width_px - max(map(text_px, q_labels), default=0) * size - 8
    angle = -60 if n_k <= 30 and plot_px / max(n_k, 1) * 0.87 >= size * 1.3 else -90
    # the slanted key labels need height of their own, or long ones (byte tokens "8 ‘<0xE7><0x9D>’") squeeze the rows
    longest = max(map(len, k_labels), default=0) if k_labels is not None else 0
    room = int(longest * size * 0.6 * abs(np.sin(np.radians(angle))))  # about 0.6 em per character
    height = int(min(max(min_height, 120 + px_per_token * n_q) + room, max_height))
    every_q = label_step(n_q, height - 120 - room, size)
    every_k = label_step(n_k, width_px, size)  # width_px: COLUMN_PX for a chart in one of two columns
    xs, ys = [x0 + i * step for i in range(n_k)], [i * step for i in range(n_q)]
    ticks = {"tickfont": {"size": size, "color": "#222"}, "showgrid": False, "zeroline": False}
    if categories is not None:  # the names are the coordinates (unique); ticks still show the short labels
        ys, xs = list(categories[0]), list(categories[1])
        ticks["type"] = "category"
    x_axis = dict(ticks) if k_labels is None else dict(  # numbered columns (e.g. embedding dimensions): plotly's ticks
        ticks, tickmode="array", tickvals=xs[::every_k], ticktext=list(k_labels)[::every_k], tickangle=angle)
    y_axis = dict(ticks, autorange="reversed", tickmode="array", tickvals=ys[::every_q],
                  ticktext=list(q_labels)[::every_q])
    margin = dict(l=10, r=10, t=40, b=10)
    for axis, axis_title in ((x_axis, x_title), (y_axis, y_title)):
        if axis_title:
            axis["title"] = {"text": axis_title}
    if fixed_margins:
        x_axis["automargin"] = y_axis["automargin"] = False
        slant = abs(np.sin(np.radians(angle)))
        labels_h = (max(map(text_px, x_axis["ticktext"]), default=0) * size * slant + size if k_labels is not None
                    else size) + 8  # slanted token labels, or plotly's numbers
        margin["l"] += int(max(map(text_px, y_axis["ticktext"]), default=0) * size) + 8 + (TITLE_PX if y_title else 0)
        margin["b"] += int(labels_h) + (TITLE_PX if x_title else 0)
    colorbar = {"thickness": 12, **(colorbar or {})}
    if fixed_margins and colorbar_below:  # under the axis title, in room of its own
        under = margin["b"]
        margin["b"] += BAR_BELOW_PX
        height += BAR_BELOW_PX
        plot_h = height - margin["t"] - margin["b"]
        colorbar |= {"orientation": "h", "thickness": 10, "len": 1, "x": 0, "xanchor": "left",
                     "y": -(under + 4) / plot_h, "yanchor": "top"}
    # one constructor call: each update_layout/update_xaxes re-validated the figure (3x the time to build)
    return figure([dict(
        type="heatmap", z=z, x=xs, y=ys, colorscale=colorscale, zmin=zmin, zmax=zmax, zmid=zmid,
        colorbar=colorbar, customdata=customdata, hoverongaps=False,
        text=None if names is None else names[0].tolist(), hovertext=None if names is None else names[1].tolist(),
        hoverinfo="skip" if hovertemplate == "skip" else None,
        hovertemplate=None if hovertemplate == "skip" else hovertemplate or "%{y} → %{x}: %{z:.4f}<extra></extra>",
        name="values")],
        layout={"title": {"text": title}, "height": height, "margin": margin, "xaxis": x_axis, "yaxis": y_axis})
