"""Small render helpers shared by pages: explanation blocks, charts and tables with downloads, token chips."""
from __future__ import annotations

import html

import pandas as pd
import streamlit as st

from .figures import visible
from .i18n import strings, t

PLOTLY_CONFIG = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "scale": 2}}
CHIP_COLOURS = ("#fde2e4", "#e2ece9", "#dfe7fd", "#fff1e6", "#e9f5db", "#f0e6ef", "#d7f9f1", "#fcf4dd")


def explain(key: str, latex: str | None = None) -> None:
    """Two or three sentences and the step's formula."""
    st.markdown(t(key))
    if latex:
        st.latex(latex)


def chart(fig, key: str) -> None:
    """A plotly chart; its toolbar camera downloads a PNG."""
    st.plotly_chart(fig, key=key, config=PLOTLY_CONFIG, width="stretch")


def table(df: pd.DataFrame, key: str, *, height: int | None = None, formats: dict[str, str] | None = None) -> None:
    """A dataframe with a CSV download button; `formats` maps number columns to a printf format ("%.4f").

    The formats change only what is shown: the values (and the CSV) keep full precision.
    """
    config = {c: st.column_config.NumberColumn(format=f) for c, f in (formats or {}).items()}
    st.dataframe(df, width="stretch", height=height or "auto", column_config=config or None)
    st.download_button(t("download_csv"), df.to_csv(index=False).encode("utf-8"), file_name=f"{key}.csv",
                       mime="text/csv", key=f"dl_{key}")


def token_chips(tokens, *, show_ids: bool = True, unknown=()) -> None:
    """Tokens as coloured chips with id and bytes on hover; all user text is HTML-escaped.

    Positions in `unknown` (outside the model's vocabulary) are struck through on grey, with the reason on hover.
    """
    chips, unknown = [], set(unknown)
    for i, tok in enumerate(tokens):
        outside = i in unknown or getattr(tok, "unknown", False)
        colour = "#e0e0e0" if outside else CHIP_COLOURS[tok.group % len(CHIP_COLOURS)]
        border = "2px dashed #c0392b" if tok.partial else "2px dotted #555" if outside else "1px solid #bbb"
        label = html.escape(visible(tok.text))
        label = f"<s>{label}</s> ⟨unk⟩" if outside and not getattr(tok, "unknown", False) else label
        why = f" · {t('chip_unknown')}" if outside else ""
        title = html.escape(f"#{i} id {tok.id} bytes {tok.raw.hex(' ')}{why}", quote=True)
        sub = f"<sub style='color:#555'>{tok.id}</sub>" if show_ids and tok.id >= 0 else ""
        chips.append(f"<span title='{title}' style='background:{colour};border:{border};border-radius:4px;"
                     f"padding:2px 4px;margin:2px;display:inline-block;font-family:monospace'>{label}{sub}</span>")
    st.html(f"<div style='line-height:2.2'>{''.join(chips)}</div>")


def tensor_frame(mat, index, columns) -> pd.DataFrame:
    """A 2-D tensor/array as a DataFrame with token labels (rounded for reading)."""
    return pd.DataFrame(mat, index=index, columns=columns).round(4)


def count_text(key: str, n: int, **fmt) -> str:
    """t(key, n=n): the key's "_one" variant ("1 token") when n == 1 and that string exists."""
    one = f"{key}_one"
    return t(one if n == 1 and one in strings() else key, n=n, **fmt)
