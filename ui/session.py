"""The shared sidebar, URL state and the per-page context (model + cached trace), with clear errors."""
from __future__ import annotations

import runpy
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from transformer_core import registry
from transformer_core.config import ConfigError
from transformer_core.model import DEFAULT_MASKS
from transformer_core.pipeline import InputError, Prepared
from transformer_core.tokenizer import EncodingUnavailable, available_encodings
from transformer_core.trace import Trace

from . import cache
from .i18n import LANGS, browser_lang, t

# The course's example sentences (doc 000): the default texts learners arrive with.
DEFAULT_TEXT = "同志们!我踩着地雷了"
DEFAULT_TARGET = "我现在开始排雷。"
URL_MAX_TEXT = 1500  # longer texts are not mirrored into the URL
TEXT_MAX_CHARS = 2_000_000  # hard cap on the text box; the model sees at most max_len tokens anyway
# keys whose values survive page changes and are mirrored into the URL
URL_KEYS = ("text", "tgt", "model", "enc", "lang", "layer", "head", "block")
PERSIST_KEYS = URL_KEYS + ("allow_special", "mask_mode", "gen_ids")


def _init_state() -> None:
    ss = st.session_state
    if ss.get("_initialised"):
        return
    qp = st.query_params
    keys = [e.key for e in registry.list_models()]
    ss.model = qp.get("model") if qp.get("model") in keys else registry.default_key()
    ss.text = qp.get("text", _example(ss.model, "example_src", DEFAULT_TEXT))
    ss.tgt = qp.get("tgt", _example(ss.model, "example_tgt", DEFAULT_TARGET))
    ss.enc = qp.get("enc", "cl100k_base")
    ss.lang = qp.get("lang") if qp.get("lang") in LANGS else browser_lang()
    for k in ("layer", "head"):
        ss[k] = int(qp.get(k, 0)) if str(qp.get(k, "0")).isdigit() else 0
    if qp.get("block"):
        ss.block = qp.get("block")
    ss.gen_ids = []
    ss._initialised = True


def _example(key: str, field: str, fallback: str) -> str:
    for e in registry.list_models():
        if e.key == key and e.meta.get(field) is not None:
            return e.meta[field]
    return fallback


def _persist() -> None:
    """Re-assign widget values so Streamlit keeps them when their page is not rendered."""
    for k in PERSIST_KEYS:
        if k in st.session_state:
            st.session_state[k] = st.session_state[k]


def on_model_change() -> None:
    """A newly selected model opens on its own example texts, from the first layer and head."""
    ss = st.session_state
    ss.text = _example(ss.model, "example_src", DEFAULT_TEXT)
    ss.tgt = _example(ss.model, "example_tgt", DEFAULT_TARGET)
    ss.gen_ids, ss.layer, ss.head = [], 0, 0


def _sync_url() -> None:
    ss = st.session_state
    params = {k: str(ss[k]) for k in URL_KEYS if k in ss and ss[k] is not None}
    if len(ss.get("text", "")) > URL_MAX_TEXT:
        params.pop("text")
    if len(ss.get("tgt", "")) > URL_MAX_TEXT:
        params.pop("tgt")
    if dict(st.query_params) != params:
        st.query_params.from_dict(params)


def sidebar() -> None:
    """The sidebar shared by all pages (call once per run from app.py, before the page)."""
    _init_state()
    _persist()
    ss = st.session_state
    entries = {e.key: e for e in registry.list_models()}
    with st.sidebar:
        st.radio(t("language"), list(LANGS), format_func=LANGS.get, key="lang", horizontal=True)
        st.selectbox(t("model"), list(entries), key="model", help=t("model_help"), on_change=on_model_change,
                     format_func=lambda k: f"{entries[k].label} · {t('kind_' + entries[k].kind)}")
        entry = entries[ss.model]
        if entry.kind == "preset":
            encs = available_encodings()
            if ss.enc not in encs:
                ss.enc = "cl100k_base"
            st.selectbox(t("encoding"), encs, key="enc", help=t("encoding_help"), on_change=clear_generated)
        elif entry.meta.get("encoding"):
            st.caption(t("encoding_fixed", enc=entry.meta["encoding"]))
        st.text_area(t("input_text"), key="text", help=t("input_help"), max_chars=TEXT_MAX_CHARS, height=90,
                     on_change=clear_generated)
        if model_is_encoder_decoder(entry):
            st.text_area(t("target_text"), key="tgt", help=t("target_help"), max_chars=TEXT_MAX_CHARS, height=70,
                         on_change=clear_generated)
        else:
            st.caption(t("target_unused"))
        st.checkbox(t("allow_special"), key="allow_special", help=t("allow_special_help"))
        generated_sidebar()
        _, dev_label = cache.get_device()
        st.caption(f"{t('device')}: **{dev_label}**")
        if len(ss.text) > URL_MAX_TEXT:
            st.caption(t("text_not_in_url"))
        else:
            st.caption(t("share_link"))
    _sync_url()


def clear_generated() -> None:
    """Forget the tokens generated on the logits page (a new text, target or encoding starts afresh)."""
    st.session_state.gen_ids = []


def generated_sidebar() -> None:
    """Sidebar: how many generated tokens are appended to the sequence, and a button that clears them."""
    n = len(st.session_state.get("gen_ids") or ())
    if n:
        st.caption(t("log_gen_count", n=n))
        st.button(t("log_gen_clear"), key="gen_clear", on_click=clear_generated)


def model_key() -> str:
    """The registry key of the selected model (presets carry the chosen encoding)."""
    ss = st.session_state
    key = ss.model
    if key.startswith("preset:"):
        key = registry.preset_key(key.split(":", 1)[1].split("@")[0], ss.get("enc", "cl100k_base"))
    return key


def model_is_encoder_decoder(entry: registry.ModelEntry) -> bool:
    return entry.meta.get("arch", "encoder_decoder") == "encoder_decoder"


@dataclass
class PageContext:
    key: str
    model: object
    meta: dict
    device: str
    prep: Prepared
    trace: Trace
    layer: int
    masks: dict


def show_error(exc: BaseException) -> None:
    """A clear message for a known error; never a traceback."""
    if isinstance(exc, InputError):
        msg = t("err_empty") if "empty" in str(exc) else f"{t('err_input')} {exc}"
        st.warning(msg, icon="✍️")
    elif isinstance(exc, EncodingUnavailable):
        st.error(f"{t('err_encoding')} {exc}", icon="🔌")
    elif isinstance(exc, ConfigError):
        st.error(f"{t('err_config')} {exc}", icon="⚙️")
    else:
        st.error(f"{t('err_unexpected')} {type(exc).__name__}: {exc}", icon="⚠️")


def load_selected_model():
    """(key, model, meta, device) or a shown error and st.stop()."""
    key = model_key()
    device, _ = cache.get_device()
    try:
        model, meta = cache.get_model(key, device)
    except Exception as exc:  # noqa: BLE001 - shown to the learner as a message
        show_error(exc)
        st.stop()
    return key, model, meta, device


def page_context(layer: int | None = None, masks: dict | None = None) -> PageContext:
    """Model + cached trace of the sidebar's text; shows a clear message and stops on bad input."""
    ss = st.session_state
    key, model, meta, device = load_selected_model()
    layer = min(int(ss.get("layer", 0)) if layer is None else layer, model.cfg.n_layers - 1)
    masks = {**DEFAULT_MASKS, **(masks or {})}
    tgt = ss.get("tgt") if model.is_encoder_decoder else None
    try:
        with st.spinner("…"):
            prep, trace = cache.get_trace(key, device, ss.get("text", ""), tgt, tuple(sorted(masks.items())),
                                          layer, bool(ss.get("allow_special")), tuple(ss.get("gen_ids", ())))
    except Exception as exc:  # noqa: BLE001 - every input error becomes a message
        show_error(exc)
        st.stop()
    if prep.src.truncated:
        st.info(t("note_truncated", n_chars=prep.src.n_chars, n_tokens=len(prep.src.tokens)), icon="✂️")
    if prep.src.cleaned or (prep.tgt is not None and prep.tgt.cleaned):
        st.info(t("note_cleaned"), icon="🩹")
    return PageContext(key, model, meta, device, prep, trace, layer, masks)


APP_PATH = Path(__file__).resolve().parents[1] / "app.py"


def through_app() -> None:
    """Run this page through app.py when Streamlit ran it directly (call first in every page).

    A shared deep link (/attention?...) that is the first request to a fresh server makes Streamlit's
    legacy `pages/` mode run the page file alone (no sidebar, no state). Then run the entry, which
    routes back to this page with everything set up, and stop the direct run.
    """
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory:
        runpy.run_path(str(APP_PATH), run_name="__main__")
        st.stop()
