"""Pages by name: a page is the file pages/<n>_<name>.py, its URL path is <name> and its title the string
nav_<name>. app.py lists the pages (one line each); everything else links to a page by its name."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import streamlit as st

from .i18n import t

PAGES_DIR = Path(__file__).resolve().parents[1] / "pages"


@lru_cache(maxsize=64)
def file_of(name: str) -> str:
    """pages/<n>_<name>.py, relative to the app."""
    found = [p for p in PAGES_DIR.glob("*.py") if p.stem.split("_", 1)[-1] == name]
    if len(found) != 1:
        raise KeyError(f"no single page file for {name!r}")
    return f"pages/{found[0].name}"


DEFAULT_PATH = "start"  # the default page's inner name: Streamlit serves it at "/", and "/<its name>" is the alias's


def page(name: str, icon: str | None = None, *, default: bool = False) -> st.Page:
    """The navigation entry of a page, made once per session and language: st.Page resolves its file on the disk
    (a twentieth of a shared server's CPU when every run made fifteen). Never shared between sessions: st.navigation
    marks the page a run may call on the object itself. The default page is served at "/"; `alias(name)` answers
    "/<name>" for it."""
    title = t(f"nav_{name}")
    made = st.session_state.setdefault("_nav_pages", {})
    key = (name, title, icon, default)
    if key not in made:
        made[key] = st.Page(file_of(name), title=title, icon=icon, url_path=DEFAULT_PATH if default else name,
                            default=default)
    return made[key]


def alias(name: str) -> st.Page:
    """A hidden page at "/<name>" for the default page (Streamlit serves that one at "/" only, so "/home" said
    "Page not found"): it opens the default page, keeping the link's parameters."""
    title = t(f"nav_{name}")
    made = st.session_state.setdefault("_nav_pages", {})
    key = (name, title, "alias")
    if key not in made:
        made[key] = st.Page(lambda: st.switch_page(file_of(name), query_params=st.query_params.to_dict()),
                            title=title, url_path=name, visibility="hidden")
    return made[key]


def link(name: str, label: str | None = None, icon: str | None = None) -> None:
    """A link to a page by its name."""
    st.page_link(file_of(name), label=label or t(f"nav_{name}"), icon=icon)


def switch(name: str) -> None:
    st.switch_page(file_of(name))


def open_head(kind: str, layer: int, head: int, cell: tuple[int, int] | None = None) -> None:
    """The attention page, on this head (a click on a head anywhere: the head catalogue, the effects grid); with a
    (query, key) cell, that cell opened (its numbers and why the head looks there)."""
    from transformer_core.model.transformer import DEFAULT_MASKS

    ss = st.session_state
    ss.layer, ss.head, ss.block = int(layer), int(head), kind
    ss.mask_mode = DEFAULT_MASKS[kind]
    ss.pop("att_cell", None)
    if cell is not None:
        ss.att_cell = (int(cell[0]), int(cell[1]))
    switch("attention")


def open_ffn(layer: int, position: int, n_tokens: int) -> None:
    """The FFN page, on this layer and token (of a text of n_tokens tokens: its token picker's key)."""
    ss = st.session_state
    ss.ffn_layer, ss[f"ffn_token_{int(n_tokens)}"] = int(layer), int(position)
    switch("ffn")
