"""Streamlit's own words in the learner's language: it writes some in English whatever the page's language (its file
box's button and size line; a list's "Select all" and "No results", drawn outside the page's main area) and has no
setting for them, so outside English CSS writes ours in their place."""
from __future__ import annotations

import streamlit as st

from .i18n import lang, t
from .widgets import key_class

UPLOAD_WORDS = "[data-testid='stBaseButton-secondary'] [data-testid='stMarkdownContainer'] p"
UPLOAD_LIMIT = "[data-testid='stFileUploaderDropzoneInstructions'] span"
SELECT_ALL = "[role='option'][data-key='__select_all__'] [data-item-hl]"
NO_RESULTS = "[role='listbox'][data-empty='true'] [role='option'] span"  # a list filtered by typing down to nothing
# a box's "Press Enter to apply" while it is typed in (a text area's: "Press Ctrl+Enter to apply", ⌘ on a Mac)
APPLY = "[data-testid='InputInstructions'] span:first-child"
# a number box's "Number is outside the allowed range…", in a tooltip on its error mark (drawn outside the page's area)
OUT_OF_RANGE = "[data-testid='stTooltipErrorContent'] p"


def own_words(rules: list[tuple[str, str]], english_too: bool = False) -> None:
    """Outside English (in English too if asked), CSS writes our words in place of Streamlit's own at these
    (selector, words); it has no setting for them."""
    if lang() == "en" and not english_too:
        return
    css = "".join(f"{where}{{font-size:0}}{where}::after{{content:{css_string(words)};font-size:0.875rem}}"
                  f"{where} *{{font-size:0}}" for where, words in rules)  # (and its own parts: a bold "Error")
    st.html(f"<style>{css}</style>")


def css_string(text: str) -> str:
    """A text as a CSS string (content: "…"): quotes, backslashes and angle brackets escaped."""
    return '"' + "".join(c if c.isalnum() or c in " ，。、（）·-" else f"\\{ord(c):x} " for c in text) + '"'


def file_box(label: str, key: str, *, max_mb: int | None = None, checked_mb: int | None = None,
             help: str | None = None):
    """st.file_uploader with its button and size line in the page's language. checked_mb: a limit the page checks
    itself (the browser takes files up to the server's, so that a larger one is refused in the learner's language):
    the size line says it, in English too (it said the server's "20MB per file" under "at most 1 MB")."""
    up = st.file_uploader(label, key=key, help=help, max_upload_size=max_mb)
    box = ".stMain ." + key_class(key)
    mb = checked_mb or max_mb or st.get_option("server.maxUploadSize")
    own_words([(f"{box} {UPLOAD_WORDS}", t("upload_button"))])
    own_words([(f"{box} {UPLOAD_LIMIT}", t("upload_limit", mb=mb))], english_too=checked_mb is not None)
    return up


def pick_many(where, label: str, options, **kwargs) -> list:
    """where.multiselect (st or a column) with its placeholder in the page's language (its list: every_page_words)."""
    return where.multiselect(label, options, placeholder=t("iv_pick"), **kwargs)


def number_box(where, label: str, lo, hi, *args, key: str, **kwargs):
    """where.number_input from lo to hi (st or a column) whose message on a number out of range is in the page's
    language, with the range (while the pointer is on that box's error mark: one tooltip shows at a time)."""
    value = where.number_input(label, lo, hi, *args, key=key, **kwargs)
    own_words([(f"body:has(.{key_class(key)} .stTooltipErrorHoverTarget:hover) {OUT_OF_RANGE}",
                t("number_range", lo=lo, hi=hi))])
    return value


def every_page_words() -> None:
    """Streamlit's words of every page's controls in the page's language: a list's "Select all" and "No results" (the
    sidebar's model box is one), a box's "Press Enter to apply" and a number box's "outside the allowed range"
    (number_box names the range)."""
    own_words([(SELECT_ALL, t("select_all")), (NO_RESULTS, t("no_results")), (OUT_OF_RANGE, t("number_range_any")),
               (f":is([data-testid='stTextInput'],[data-testid='stNumberInput']) {APPLY}", t("apply_enter")),
               (f"[data-testid='stTextArea'] {APPLY}", t("apply_ctrl_enter"))])
