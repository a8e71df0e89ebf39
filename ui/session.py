"""The per-page context (the selected model and the cached trace of the sidebar's text, with clear errors), the
dates model's answer, the name-mover model's note on a text unlike its sentences, and the guard that runs a page
through app.py."""
from __future__ import annotations

import runpy
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from service import budget
from transformer_core.errors import InputError
from transformer_core.model.memory import KEEP_WEIGHTS
from transformer_core.model.trace import Trace
from transformer_core.model.transformer import DEFAULT_MASKS
from transformer_core.text.inputs import Prepared

from . import cache
from .errors import show_error
from .figures import md_quoted, plain
from .i18n import t
from .model_choice import cannot_take_text, load_selected_model, try_example, use_example
from .state import clear_generated, generated, keep_target, keep_view_in_model


@dataclass
class PageContext:
    key: str
    model: object
    card: dict
    device: str
    prep: Prepared
    trace: Trace
    layer: int
    masks: dict


def _traced(key: str, model, device: str, masks: dict, layer: int, keep=None) -> tuple[Prepared, Trace]:
    """The sidebar's text (and target, generated tokens) traced with these masks: ui.cache's trace, shared by every
    session that reads the same input (`keep`: ui.cache.get_trace's)."""
    ss = st.session_state
    tgt = ss.get("tgt") if model.is_encoder_decoder else None
    return cache.get_trace(key, device, ss.get("text", ""), tgt, tuple(sorted(masks.items())), layer,
                           bool(ss.get("allow_special")), generated(), keep=keep)


def page_context(layer: int | None = None, masks: dict | None = None) -> PageContext:
    """Model + cached trace of the sidebar's text; shows a clear message and stops on bad input."""
    ss = st.session_state
    key, model, meta, device = load_selected_model()
    if ss.get("_url_asked"):  # a link's layer 99 is said (and dropped from it) on any page, not only the Attention's
        keep_view_in_model(model.cfg.n_layers, model.cfg.n_heads, model.cfg.d_ffn)
    layer = min(int(ss.get("layer", 0)) if layer is None else layer, model.cfg.n_layers - 1)
    masks = {**DEFAULT_MASKS, **(masks or {})}
    try:
        with st.spinner("…"):
            prep, trace = _traced(key, model, device, masks, layer)
    except InputError as exc:
        if exc.code == "tokens_not_in_vocab":
            cannot_take_text(exc, meta)
        else:
            show_error(exc)
        st.stop()
    except Exception as exc:  # noqa: BLE001 - every other problem becomes a message too
        show_error(exc)
        st.stop()
    if prep.cut_from is not None:
        st.warning(t("err.trace_cut", n=prep.src_ids.size(1), total=prep.cut_from,
                     limit=budget.to_mb(budget.task_limit())), icon="✂️")
    if prep.src_unknown or prep.tgt_unknown:
        st.caption(t("note_unknown", n=len(prep.src_unknown) + len(prep.tgt_unknown)))
    if meta.get("task") == "dates":
        dates_answer(key, device, str(ss.get("text", "")))
    if meta.get("task") == "ioi":
        names_outside(str(ss.get("text", "")), model.cfg.encoding)
    if prep.src.truncated:
        st.info(t("note_truncated", n_chars=prep.src.n_chars, n_tokens=len(prep.src.tokens)), icon="✂️")
    if prep.src.cleaned or (prep.tgt is not None and prep.tgt.cleaned):
        st.info(t("note_cleaned"), icon="🩹")
    return PageContext(key, model, meta, device, prep, trace, layer, masks)


def traced_with(ctx: PageContext, masks: dict, keep=None) -> Trace | None:
    """The page's text traced with other masks ({block: mode} over the page's), cached as the page's own trace (the
    Attention view's other mask), or keeping what `keep` says; None where it cannot be (the page's own trace
    stands)."""
    try:
        _, trace = _traced(ctx.key, ctx.model, ctx.device, {**ctx.masks, **masks}, ctx.layer, keep)
    except Exception:  # noqa: BLE001 - the memory budget or a full server: the view keeps the page's mask only
        return None
    return trace


def layer_maps(ctx: PageContext, kind: str, masks: dict | None = None) -> tuple[Trace, list] | None:
    """(the trace, every layer's attention stages of `kind`) for the page's text (with other masks: {block: mode}
    over the page's): the page's trace where it kept every layer's, else a trace that keeps every layer's weights
    and masks alone (KEEP_WEIGHTS: a long text's trace keeps one layer's; cached and shared like the page's); None
    where it cannot be."""
    layers = range(ctx.model.cfg.n_layers)
    for keep in (None, KEEP_WEIGHTS):
        trace = ctx.trace if not masks and keep is None else traced_with(ctx, masks or {}, keep)
        got = None if trace is None else [trace.attention(kind, layer) for layer in layers]
        if got is not None and all(s is not None for s in got):
            return trace, got
    return None


DATES_EXAMPLE = ("23 November 2026", "=2026年11月23日")


def dates_answer(key: str, device: str, text: str) -> None:
    """The dates model's own translation of the text, checked against the rule; text outside its domain is said so
    (the pages still show what the model does with it)."""
    from transformer_core.train.translation import parse  # (only for this model: off the cold start)

    rule = parse(text)
    if rule is None:
        out_of_domain(st.session_state.model)
    answer = cache.translation(key, device, text)
    verdict = "" if rule is None else t("dates_right") if answer == rule[1] else t("dates_wrong", rule=rule[1])
    c1, c2 = st.columns([3, 1])
    c1.markdown(t("dates_answer", answer=answer or "∅", verdict=verdict))
    if (st.session_state.get("tgt") or "").strip() != "=" + answer:
        c2.button(t("dates_use_answer"), key="dates_use_answer", on_click=use_target, args=("=" + answer,))


def use_target(tgt: str) -> None:
    """Button callback: the decoder reads this target (teacher forcing) on every page."""
    st.session_state.tgt = tgt
    keep_target()
    clear_generated()


def follow_source(key: str, device: str) -> None:
    """The translator's decoder reads its own greedy answer to the text on screen: a new text (or another model)
    sets the target to "=" + that answer, so the cross-attention never pairs one text's answer with another text's
    tokens. A target the learner typed, a link's or an example's stays while its text does (call before the
    target's text box is drawn)."""
    ss = st.session_state
    if ss.get("_tgt_for") == (ss.get("model"), ss.get("text")):
        return
    try:
        answer = cache.translation(key, device, str(ss.get("text", "")))
    except Exception:  # noqa: BLE001 - the page shows why the model cannot read this text; the target empties
        answer = ""
    ss.tgt = "=" + answer
    keep_target()
    clear_generated()


def out_of_domain(model_key: str) -> None:
    """The dates model was given text it was not built for: say what it translates, offer an example."""
    st.warning(t("dates_out_of_domain"), icon="🧭")
    st.button(t("dates_try", text=DATES_EXAMPLE[0]), key="dates_try", on_click=try_example,
              args=(model_key, *DATES_EXAMPLE))


def names_outside(text: str, encoding: str) -> None:
    """The name-mover model was given a text unlike the sentences it learned: say why and offer its example (the
    pages still show what it does with the text)."""
    from transformer_core.train.ioi import outside  # (only for this model: off the cold start)

    why = outside(text, encoding)
    if why is None:
        return
    pieces = " + ".join(md_quoted(p) for p in why.pieces)
    st.warning(f"{t('ioi_' + why.reason, name=plain(why.name), pieces=pieces)} {t('ioi_outside')}", icon="🧭")
    st.button(t("use_example"), key="ioi_example", on_click=use_example, icon=":material/edit_note:")


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
