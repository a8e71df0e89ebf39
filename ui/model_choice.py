"""The model a page shows: the selected one loaded (or why not: a message, a download with progress), examples
and the buttons that switch model or text."""
from __future__ import annotations

import streamlit as st

from service import catalog, downloads
from service.settings import settings
from transformer_core.errors import InputError, ModelSourceError

from . import cache
from .errors import error_text, show_error
from .i18n import lang, t
from .state import _example, clear_generated, keep_target, model_key, on_model_change, viewer
from .tools import set_text_b


def model_is_encoder_decoder(entry) -> bool:
    return entry.arch == "encoder_decoder"


def load_selected_model():
    """(key, model, meta, device) or a shown error and st.stop()."""
    key = model_key()
    device, _ = cache.get_device()
    try:
        if not key.startswith("preset:") and catalog.entry(key, viewer()) is None:
            raise ModelSourceError("model_unknown")  # another browser's private model, or gone
        model, meta = cache.get_model(key, device)
    except Exception as exc:  # noqa: BLE001 - shown to the learner as a message
        if getattr(exc, "code", "") in ("gpt2_not_downloaded", "hf_not_downloaded"):
            download_panel(key, exc)
        else:
            show_error(exc)
        st.stop()
    return key, model, meta, device


def download_panel(key: str, exc: Exception) -> None:
    """A hub model (GPT-2 small, SmolLM2, Qwen2.5) is not on this server yet: one click downloads it (once, for
    everyone), with progress."""
    st.info(error_text(exc), icon="📦")
    dl = downloads.current(key)
    if dl is None or dl.status == "error":
        if dl is not None:
            show_error(dl.error)
        if not settings().hf_offline:
            label = t("gpt2_download") if key == downloads.GPT2 else t("hf_download", model=exc.params.get("model"))
            st.button(label, on_click=downloads.start, args=(key,), key="gpt2_download", type="primary",
                      icon=":material/download:")
        return
    st.fragment(run_every=1.0)(_download_progress)(key)


def _download_progress(key: str) -> None:
    dl = downloads.current(key)
    if dl is None:
        return
    if dl.status == "done":
        st.rerun()  # the whole page: the model loads now
    total = f"{dl.total / 2**20:,.0f}" if dl.total else "?"
    st.progress(dl.fraction, text=t("hf_progress", done=f"{dl.done / 2**20:,.0f}", total=total))


def use_example() -> None:
    """Button callback: the selected model's own example texts."""
    ss = st.session_state
    ss.text = _example(ss.model, "example_src", ss.text)
    ss.tgt = _example(ss.model, "example_tgt", ss.get("tgt", ""))
    keep_target()  # the model's own pair
    clear_generated()


def try_example(model: str, text: str, tgt: str | None = None, text_b: str | None = None,
                tgt_b: str | None = None, picks: dict | None = None) -> None:
    """Button callback: a page's suggested experiment: its model, texts (B shared by Compare and Ablation) and
    widget picks (e.g. the heads to switch off)."""
    ss = st.session_state
    ss.model = model
    on_model_change()
    ss.text = text
    if tgt is not None:
        ss.tgt = tgt
        keep_target()
    set_text_b(text_b, tgt_b)
    ss.update(picks or {})
    clear_generated()


def open_default_model() -> None:
    """Button callback: the default model, keeping the learner's text."""
    st.session_state.model = catalog.default_key()
    on_model_change()


def cannot_take_text(exc: InputError, card: dict) -> None:
    """A model with its own small alphabet (a toy task) and a text outside it: what it reads, an example,
    and one click to its example or to a model that reads any text. Nothing else on the page is blocked."""
    st.warning(error_text(exc), icon="🔤")
    desc = card.get("description")
    if isinstance(desc, dict):
        st.markdown(t("model_reads", what=desc.get(lang()) or desc.get("en", "")))
    if card.get("example_src"):
        st.markdown(t("model_example", example=card["example_src"]))
    c1, c2 = st.columns(2)
    c1.button(t("use_example"), on_click=use_example, key="use_example", icon=":material/edit_note:")
    default = catalog.entry(catalog.default_key())
    if default is not None and default.key != st.session_state.model:
        c2.button(t("open_default", name=default.label), on_click=open_default_model, key="open_default",
                  type="primary", icon=":material/swap_horiz:")
