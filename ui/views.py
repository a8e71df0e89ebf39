"""The pages' own views drawn in the browser (st.components.v2): each one's script is ui/frontend/common.js (what
every view uses) followed by ui/frontend/<name>.js, with ui/frontend/<name>.css. Adding a view: those two files and
one `component` call in the module that sends its data."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

FRONTEND = Path(__file__).resolve().parent / "frontend"


def source(name: str) -> str:
    """The whole script of view `name` (also what the browser tests load)."""
    return "\n".join((FRONTEND / f).read_text(encoding="utf-8") for f in ("common.js", f"{name}.js"))


def component(key: str, name: str):
    return st.components.v2.component(key, js=source(name),
                                      css=(FRONTEND / f"{name}.css").read_text(encoding="utf-8"))
