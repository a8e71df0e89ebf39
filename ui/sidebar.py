"""The sidebar every page shares: language, model, encoding, the text boxes, device and image format; and what a
server does once per process and each run for its sessions (the job table's startup and heartbeat)."""
from __future__ import annotations

import streamlit as st

from service import catalog, jobs
from service.urlstate import LANGS  # the one list of languages (a link may name one)
from transformer_core.text.tokenizer import available_encodings

from . import cache
from .i18n import t
from .model_choice import model_is_encoder_decoder
from .own_words import every_page_words
from .session import follow_source
from .state import (
    TEXT_MAX_CHARS,
    _init_state,
    _persist,
    _remember_owner,
    clear_generated,
    generated,
    on_model_change,
    on_text_change,
    resend_choices,
    session_id,
    sync_url,
    viewer,
)
from .widgets import IMAGE_FORMATS


@st.cache_resource(show_spinner=False)
def _jobs_started() -> bool:
    """Once per server process: sweep trainings a restart interrupted, start the janitor."""
    jobs.startup()
    return True


def _heartbeat() -> None:
    """Tell the job table this tab is still open (a training whose tab closed is stopped within a minute)."""
    jobs.touch(session_id())


def _model_changed() -> None:
    on_model_change()
    resend_choices()  # options named after the model's parts


def sidebar() -> None:
    """The sidebar shared by all pages (call once per run from app.py, before the page)."""
    _jobs_started()
    _heartbeat()
    _init_state()
    _persist()
    ss = st.session_state
    entries = {e.key: e for e in catalog.entries(viewer())}
    if ss.model not in entries:  # a model that went away (or a stale key) falls back to the default
        ss.model = catalog.default_key()
    with st.sidebar:
        every_page_words()  # Streamlit's words of lists (drawn outside the sidebar too) and boxes, in 中文 too
        st.radio(t("language"), list(LANGS), format_func=LANGS.get, key="lang", horizontal=True,
                 on_change=resend_choices)
        st.selectbox(t("model"), list(entries), key="model", help=t("model_help"), on_change=_model_changed,
                     format_func=lambda k: f"{entries[k].label} · {t('kind_' + entries[k].kind)}")
        entry = entries[ss.model]
        if entry.kind == "preset":
            encs = available_encodings()
            if ss.enc not in encs:
                ss.enc = "cl100k_base"
            st.selectbox(t("encoding"), encs, key="enc", help=t("encoding_help"), on_change=clear_generated)
        elif entry.card.get("encoding"):
            st.caption(t("encoding_fixed", enc=entry.card["encoding"]))
        st.text_area(t("input_text"), key="text", help=t("input_help"), height=90, on_change=on_text_change)
        if model_is_encoder_decoder(entry):
            if entry.card.get("task") == "dates":  # the translator: its decoder text follows the text above
                follow_source(entry.key, cache.get_device()[0])
            st.text_area(t("target_text"), key="tgt", help=t("target_help"), height=70, on_change=on_text_change)
        else:
            st.caption(t("target_unused"))
        st.checkbox(t("allow_special"), key="allow_special", help=t("allow_special_help"))
        generated_sidebar()
        if ss.pop("_text_cut", False):
            st.caption(t("text_cut", n=f"{TEXT_MAX_CHARS:,}"))
        _, dev_label = cache.get_device()
        st.caption(f"{t('device')}: **{dev_label}**")
        st.radio(t("img_fmt"), IMAGE_FORMATS, key="img_fmt", horizontal=True, format_func=str.upper,
                 help=t("img_fmt_help"))
        sync_url()
        st.caption(t("text_not_in_url") if ss.get("_text_left_out") else t("share_link"))
        if ss.get("_url_notice"):
            st.caption(f"🔗 {ss.pop('_url_notice')}")
        _remember_owner()  # last in the sidebar: nothing moves when it is gone on the next run
    job = jobs.get(session_id())
    if job is not None and job.active:  # while it trains, the open tab keeps saying so, whatever the page
        with st.sidebar:
            st.fragment(run_every=10)(_heartbeat)()


def generated_sidebar() -> None:
    """Sidebar: how many generated tokens are appended to the sequence, and a button that clears them."""
    n = len(generated())
    if n:
        st.caption(t("log_gen_count", n=n))
        st.button(t("log_gen_clear"), key="gen_clear", on_click=clear_generated)
