"""Every UI string in English and Chinese (assets/strings.json); the browser's locale picks the default."""
from __future__ import annotations

import json
import logging
from functools import lru_cache
from pathlib import Path

import streamlit as st

log = logging.getLogger(__name__)
STRINGS_DIR = Path(__file__).resolve().parents[1] / "assets" / "strings"


@lru_cache(maxsize=1)
def strings() -> dict[str, dict[str, str]]:
    """key -> {"en": ..., "zh": ...}, merged from every assets/strings/*.json (one file per page)."""
    merged: dict[str, dict[str, str]] = {}
    for path in sorted(STRINGS_DIR.glob("*.json")):
        merged.update(json.loads(path.read_text(encoding="utf-8")))
    return merged


def browser_lang() -> str:
    """'zh' when the browser asks for Chinese, else 'en'."""
    try:
        locale = (st.context.locale or "").lower()
    except Exception:  # noqa: BLE001 - no browser context (AppTest, bare mode)
        locale = ""
    return "zh" if locale.startswith("zh") else "en"


def link_lang() -> str:
    """The language a new session opens in: the link's ?lang= where the app has it, else the browser's (what the
    URL state gives the sidebar: ui.state), known before torch is imported (app.py's navigation, the start notice)."""
    asked = st.query_params.get("lang", "")
    return asked if asked in strings()["app_title"] else browser_lang()


def lang() -> str:
    return st.session_state.get("lang", "en")


class _Keep(dict):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def sentences(*parts: str) -> str:
    """Sentences of the current language one after another: a space between English ones, none after a Chinese
    full stop ("奈特。 在 B 之后" read as a stray space)."""
    return ("" if lang() == "zh" else " ").join(p for p in parts if p)


def t(key: str, **fmt) -> str:
    """The string for key in the current language, formatted with fmt; never the raw key (a test keeps every
    key used in the code present in both languages; should one slip through, the learner reads a neutral word)."""
    entry = strings().get(key)
    if entry is None:
        log.error("missing UI string %r", key)
        entry = strings()["missing_string"]
    text = entry.get(lang()) or entry["en"]
    return text.format_map(_Keep(fmt)) if fmt else text
