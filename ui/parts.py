"""The table of parts: the course's decoder, Qwen2.5, Qwen3 and this model side by side, one row per part today's
decoders changed, each row linking to the page that shows it (the Model page shows every part, the FFN page its
own)."""
from __future__ import annotations

import streamlit as st

from transformer_core.analysis.architecture import architecture_rows
from transformer_core.sources.hf_decoder import published_configs

from .i18n import t
from .nav import link

BESIDE = ("Qwen2.5-0.5B", "Qwen3-0.6B")  # the published configs shown beside the course's and this model's
# a page's name wraps in its narrow column instead of being cut ("FFN & residua" at 1300 px): Streamlit keeps a page
# link's label on one line
WRAP_LINKS = ("<style>.stMain .st-key-parts_table [data-testid='stPageLink-NavLink'] :is(span, div, p)"
              "{white-space:normal}</style>")


def parts_table(cfg, parts: tuple[str, ...] | None = None) -> None:
    """Columns: part, the course's choice, each of BESIDE, this model's (bold where it differs from the course),
    the page that shows it."""
    with st.container(key="parts_table"):
        st.html(WRAP_LINKS)
        _rows(cfg, parts)


def _rows(cfg, parts: tuple[str, ...] | None) -> None:
    known = published_configs()
    beside = [name for name in BESIDE if name in known]
    widths = [2, 3, *([3] * len(beside)), 3, 3]
    for col, text in zip(st.columns(widths), [t("mdl_vs_part"), t("mdl_vs_course_col"), *beside, t("mdl_vs_this"),
                                              t("mdl_vs_where")], strict=True):
        col.markdown(f"**{text}**")
    for row in architecture_rows(cfg, tuple(known[name] for name in beside)):
        if parts is not None and row.part not in parts:
            continue
        cols = st.columns(widths)
        cols[0].markdown(t(f"mdl_row_{row.part}"))
        cols[1].markdown(t(row.course[0], **row.course[1]))
        for col, (code, params) in zip(cols[2:-2], row.beside, strict=True):
            col.markdown(t(code, **params))
        this = t(row.this[0], **row.this[1])
        cols[-2].markdown(f"**{this}**" if row.changed else this)
        with cols[-1]:
            link(row.page)
