"""Small render helpers shared by pages: explanation blocks, charts and tables with downloads, token chips.

pandas is imported where a table is built (about half a second of a cold start the first page does not need)."""
from __future__ import annotations

import html
import re

import numpy as np
import streamlit as st

from .chart_theme import PALETTES
from .figures import text_px, visible
from .i18n import strings, t
from .plain_figures import sendable

IMAGE_FORMATS = ("png", "svg")  # what the chart toolbar's camera downloads (a sidebar choice)
CHIP_COLOURS = ("#fde2e4", "#e2ece9", "#dfe7fd", "#fff1e6", "#e9f5db", "#f0e6ef", "#d7f9f1", "#fcf4dd")


def in_rows(items, per_row: int):
    """(column, item) pairs, `per_row` columns to a row, each row its own st.columns: a narrow window (a phone) stacks
    them in the items' order (columns of the whole list stacked the first column's items before the second's)."""
    items = list(items)
    for first in range(0, len(items), per_row):
        yield from zip(st.columns(per_row), items[first:first + per_row])


def within(text: str, cap: int, words: str = "box_cut") -> str:
    """A box's text cut to its first `cap` characters, with a line saying so. A box's own max_chars would drop a
    longer paste whole and keep its old text, with no word (a pasted training text, a word of 201 characters)."""
    if len(text) <= cap:
        return text
    st.info(t(words, n=f"{len(text):,}", cap=f"{cap:,}"), icon="✂️")
    return text[:cap]


PHONE_MAX_PX = 640  # a phone's window is at most this wide: formulas, titles and cell words change below it


def wide_formula() -> str:
    """A formula wider than its column (a phone: the attention formula needs 430 px) scrolls sideways instead of being
    cut, and a soft shadow on the side where more of it lies says so: the shadows stay at the box's edges, and two
    covers in the page's colour, which scroll with the formula, hide each shadow once that end is in view (a formula
    that fits shows none). On a phone formulas are a tenth smaller: the attention formula fits at 420 px."""
    bg = PALETTES["dark" if st.context.theme.type == "dark" else "light"][3]
    shade = "rgba(128,128,128,.7)"
    # the formula's box as wide as the column (Streamlit's is as wide as the formula, rounded down: a formula that
    # fitted overflowed by a pixel or two and showed the right shadow on a wide window)
    return ("<style>.stMain .stMarkdown:has(.katex-display)>div,.stMain .stMarkdown:has(.katex-display)>div>div"
            "{width:100%}.stMain .katex-display{overflow-x:auto;overflow-y:hidden;background:"
            f"linear-gradient(90deg,{bg} 70%,{bg}00) 0 0/1.2em 100% no-repeat local,"
            f"linear-gradient(270deg,{bg} 70%,{bg}00) 100% 0/1.2em 100% no-repeat local,"
            f"linear-gradient(90deg,{shade},transparent) 0 0/.8em 100% no-repeat scroll,"
            f"linear-gradient(270deg,{shade},transparent) 100% 0/.8em 100% no-repeat scroll"
            f"}}@media (max-width:{PHONE_MAX_PX}px){{.stMain .katex-display{{font-size:.9em}}}}</style>")


def explain(key: str, latex: str | None = None) -> None:
    """Two or three sentences and the step's formula."""
    st.markdown(t(key))
    if latex:
        st.latex(latex)
        st.html(wide_formula())


# st.code's look without its syntax highlighter: Streamlit loads that (every grammar, ~1 MB) the first time a tab
# shows a code block, ~0.5-0.9 s of the browser's main thread on the page that shows one (the Model page at 2.0 s)
PRE_STYLE = ("font-family:'Source Code Pro',monospace;font-size:0.875rem;line-height:1.6;white-space:pre;"
             "overflow-x:auto;padding:1rem;border-radius:0.5rem;background:rgba(128,128,128,0.1);margin:0 0 1rem")


def preformatted(text: str) -> None:
    """Monospace text as printed (an architecture, a command): selectable, never read as HTML."""
    st.html(f'<pre style="{PRE_STYLE}">{html.escape(text)}</pre>')


def file_stem(*parts: str) -> str:
    """A download's file name: page, view and model, in letters, digits and dashes."""
    stem = "-".join(re.sub(r"[^\w]+", "-", str(p), flags=re.ASCII).strip("-") for p in parts if p)
    return stem[:80] or "chart"


def picture_download(key: str) -> tuple[str, str]:
    """(format, file name without its ending) of chart `key`'s download: the sidebar's format, the page's view and
    the model in the name."""
    fmt = st.session_state.get("img_fmt", "png")
    stem = file_stem("transformer-explorer", key, str(st.session_state.get("model", "")).split(":")[-1])
    return (fmt if fmt in IMAGE_FORMATS else "png"), stem


def chart(fig, key: str, *, on_select: bool = False):
    """A plotly chart; its toolbar camera downloads it as PNG or SVG (the sidebar's choice) under a file name
    that says what it is. With on_select, clicks select points and the selection event is returned."""
    fmt, stem = picture_download(key)
    config = {"displaylogo": False, "toImageButtonOptions": {"format": fmt, "scale": 2, "filename": stem}}
    phone_title(fig, key)
    phone_cells(fig, key)
    fig = sendable(fig, st.context.theme.type)  # the look written into the chart (ui.chart_theme): drawn once
    if on_select:
        return st.plotly_chart(fig, key=key, config=config, width="stretch", theme=None, on_select="rerun",
                               selection_mode="points")
    st.plotly_chart(fig, key=key, config=config, width="stretch", theme=None)
    return None


# a chart title's line wider than this many ems is cut on a phone: 16 px type in a 388 px chart; Source Sans's
# latin letters about 0.45 em on average (59 of them took 405 px), a Chinese character 1 em
PHONE_TITLE_EMS = 23
PHONE_CHART_PX = 388
PLOTLY_TAGS = re.compile(r"</?(?:b|i|em|sub|sup|span)[^>]*>|<br\s*/?>", re.IGNORECASE)


def key_class(key: str) -> str:
    """Streamlit's CSS class for the element of a keyed widget or chart (st-key-…), for a style aimed at it alone."""
    return "st-key-" + re.sub(r"[^a-zA-Z0-9_-]", "-", key.strip())


def phone_title(fig, key: str) -> None:
    """A long chart title written again above the chart, shown instead of the chart's own on a narrow window: a
    plotly title is one line of SVG text and never wraps, so on a phone it was cut at the chart's edge. Wide windows
    see the chart's title alone (the copy's element is hidden, gap included), and a downloaded picture keeps it."""
    title = (fig._layout or {}).get("title") or {}
    text = title if isinstance(title, str) else title.get("text") or ""
    if max((text_px(line, narrow=0.45) for line in re.split(r"<br\s*/?>", text)), default=0) <= PHONE_TITLE_EMS:
        return
    words = html.escape(re.sub(r"\s+", " ", PLOTLY_TAGS.sub(" ", text)).strip())
    phone_line(key, ".gtitle", "phone-title", "font-weight:600", words)


def phone_line(key: str, hidden: str, cls: str, style: str, words: str) -> None:
    """A line (HTML) above the chart drawn next under `key`, shown on a phone's window only, where the chart's part
    `hidden` (a CSS selector inside its element) is hidden instead; wider windows see the chart as drawn and not the
    line (its element hidden, gap included)."""
    st.html(f"<style>@media (min-width:{PHONE_MAX_PX + 1}px){{.stMain .stElementContainer:has(>div>.{cls},>.{cls})"
            f"{{display:none}}}}@media (max-width:{PHONE_MAX_PX}px){{.stMain .{key_class(key)} {hidden}"
            f"{{display:none}}}}</style><p class='{cls}' style='{style};margin:0 0 -0.5rem'>{words}</p>")


# a chart's plot area on a phone: the chart's 388 px less its left labels, its right margin and a colour bar's
PHONE_BAR_PX = 70


def crowded_cells(fig) -> bool:
    """Whether the words a heatmap writes in its cells (texttemplate "%{text}") would run into each other in a 420 px
    window: plotly writes a cell's text whatever the cell's width (the Logit lens's tokens and the Heads grid's kinds
    overlapped there)."""
    layout = fig._layout or {}
    for tr in fig._data:
        if tr.get("type") != "heatmap" or tr.get("texttemplate") != "%{text}" or tr.get("text") is None:
            continue
        size = (tr.get("textfont") or {}).get("size") or 12
        words = np.asarray(tr["text"], dtype=object).ravel()
        widest = max((text_px(str(w), narrow=0.55) for w in words), default=0.0) * size + 4
        ticks = (layout.get("yaxis") or {}).get("ticktext") or [y for y in tr.get("y") or () if isinstance(y, str)]
        left = max((text_px(str(y), narrow=0.55) for y in ticks), default=2.0) * 12 + 10
        plot = PHONE_CHART_PX - left - (layout.get("margin") or {}).get("r", 10) - PHONE_BAR_PX
        if np.shape(tr.get("z"))[-1] * widest > plot:
            return True
    return False


def phone_cells(fig, key: str) -> None:
    """On a narrow window, a heatmap's cell words that would run into each other are left out, and a line above the
    chart says a tap on a cell reads it; wide windows and downloads keep them."""
    if not crowded_cells(fig):
        return
    phone_line(key, ".heatmap-label", "phone-cells", "font-size:0.875rem;opacity:0.7",
               html.escape(t("phone_cells"), quote=False))


def clicked(fig, key: str, trace_name: str | None = None):
    """Draw a chart whose points can be clicked; return the clicked point's customdata once (then the chart is
    drawn afresh, so an old click never fires again), or None."""
    n = st.session_state.get(f"_{key}_n", 0)
    event = chart(fig, f"{key}_{n}", on_select=True)
    points = (event or {}).get("selection", {}).get("points", []) if event else []
    names = [tr.name for tr in fig.data]
    points = [p for p in points if trace_name is None or names[p.get("curve_number", -1)] == trace_name]
    if not points or points[-1].get("customdata") is None:
        return None
    st.session_state[f"_{key}_n"] = n + 1
    data = points[-1]["customdata"]
    return data[0] if isinstance(data, list) and len(data) == 1 else data


def table(df, key: str, *, height: int | None = None, formats: dict[str, str] | None = None,
          numbered: bool = True, width: str | int = "stretch") -> None:
    """A dataframe with a CSV download button; `formats` maps number columns to a printf format ("%.4f").

    The formats change only what is shown: the values (and the CSV) keep full precision. `numbered=False` where the
    first column already names each row (a token with its position, a dimension): no row numbers, and the table goes
    as Arrow without pandas' description of its index and types (a 64-row table 15% fewer bytes on the wire).
    """
    config = {c: st.column_config.NumberColumn(format=f) for c, f in (formats or {}).items()}
    st.dataframe(df if numbered else _unnumbered(df), width=width, height=height or "auto",
                 column_config=config or None,
                 placeholder="—")  # a missing value (e.g. no probability for the first token), not "None"
    # the CSV is written when the button is clicked, not on every run of the page
    download(t("download_csv"), lambda: df.to_csv(index=False).encode("utf-8"), f"{key}.csv", "text/csv",
             key=f"dl_{key}")


def _unnumbered(df):
    """`df` as an Arrow table of its columns alone (what pandas' metadata adds: the index and each column's type)."""
    import pyarrow as pa

    try:
        return pa.Table.from_pandas(df, preserve_index=False).replace_schema_metadata(None)
    except (pa.ArrowException, TypeError, ValueError):  # a column Arrow cannot type: Streamlit's own conversion
        return df


def download(label: str, data, file_name: str, mime: str, *, key: str, **kw) -> None:
    """A download button whose file is built on the click (`data`: a function returning the bytes).

    The click does not rerun the page (on_click="ignore"). With a rerun, the browser asked for the file while the
    rerun replaced the button's file id; once the rerun had ended first (a busy server), the old id was gone and the
    button stayed grey with no file. A rerun would also resend the whole page for nothing."""
    st.download_button(label, data, file_name=file_name, mime=mime, key=key, on_click="ignore", **kw)


def _chip(i: int, tok, outside: bool, show_ids: bool, cls: str = "") -> str:
    """One token chip's HTML (escaped): id and bytes on hover; struck through on grey when outside the vocabulary."""
    colour = "#e0e0e0" if outside else CHIP_COLOURS[tok.group % len(CHIP_COLOURS)]
    border = "2px dashed #c0392b" if tok.partial else "2px dotted #555" if outside else "1px solid #bbb"
    label = html.escape(visible(tok.text))
    label = f"<s>{label}</s> ⟨unk⟩" if outside and not getattr(tok, "unknown", False) else label
    why = f" · {t('chip_unknown')}" if outside else ""
    title = html.escape(f"#{i} id {tok.id} bytes {tok.raw.hex(' ')}{why}", quote=True)
    sub = f"<sub style='color:#555'>{tok.id}</sub>" if show_ids and tok.id >= 0 else ""
    klass = f" class='{cls}'" if cls else ""
    return (f"<span{klass} title='{title}' style='background:{colour};border:{border};border-radius:4px;"
            f"padding:2px 4px;margin:2px;display:inline-block;font-family:monospace;color:#1f2328'>{label}{sub}</span>")


def token_chips(tokens, *, show_ids: bool = True, unknown=()) -> None:
    """Tokens as coloured chips with id and bytes on hover; all user text is HTML-escaped.

    Positions in `unknown` (outside the model's vocabulary) are struck through on grey, with the reason on hover.
    """
    unknown = set(unknown)
    chips = [_chip(i, tok, i in unknown or getattr(tok, "unknown", False), show_ids) for i, tok in enumerate(tokens)]
    st.html(f"<div style='line-height:2.2'>{''.join(chips)}</div>")


LINKED_MAX = 1024  # tokens whose chip and span are linked on hover (one CSS rule each)
LINK_LOOK = "{background:#ffd54f !important;outline:2px solid #e65100;color:#1f2328}"


def linked_token_view(tok, *, unknown=()) -> None:
    """The text with each token's span, then its chips: hovering a chip highlights its span in the text and a piece
    of the text highlights its token(s) (Tiktokenizer's view), with CSS only: chip and span share a class k<i>, and
    `.tkv:has(.k<i>:hover) .k<i>` lights both. A character split over several tokens is one span with all their
    classes. All user text is HTML-escaped."""
    unknown = set(unknown)
    n = min(len(tok.tokens), LINKED_MAX)
    spans = [f"<span class='{' '.join(f'k{m}' for m in members)}'>{html.escape(chars)}</span>"
             for chars, members in tok.groups]
    chips = [_chip(i, x, i in unknown, True, f"k{i}") for i, x in enumerate(tok.tokens)]
    rules = ",".join(f".tkv:has(.k{i}:hover) .k{i}" for i in range(n))
    st.html(f"<div class='tkv'><style>{rules}{LINK_LOOK}</style>"
            f"<div style='white-space:pre-wrap;font-family:monospace;line-height:1.7;padding:6px 8px;"
            f"border:1px solid rgba(128,128,128,0.4);border-radius:6px;margin-bottom:6px'>{''.join(spans)}</div>"
            f"<div style='line-height:2.2'>{''.join(chips)}</div></div>")


def tensor_frame(mat, index, columns):
    """A 2-D tensor/array as a pandas DataFrame with token labels (rounded for reading)."""
    import pandas as pd

    return pd.DataFrame(mat, index=index, columns=columns).round(4)


def count_text(key: str, n: int, **fmt) -> str:
    """t(key, n=n): the key's "_one" variant ("1 token") when n == 1 and that string exists."""
    one = f"{key}_one"
    return t(one if n == 1 and one in strings() else key, n=n, **fmt)


def delta(x: float, digits: int = 4) -> str | None:
    """A metric's change, signed; None (no arrow) when it rounds to zero, so -0.0000 never shows a red arrow."""
    return None if round(x, digits) == 0 else f"{x:+.{digits}f}"
