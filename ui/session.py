"""The shared sidebar, URL state and the per-page context (model + cached trace), with clear errors."""
from __future__ import annotations

import runpy
import uuid
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from service import budget, catalog, downloads, jobs, urlstate
from service.settings import settings
from transformer_core.errors import InputError, ModelSourceError
from transformer_core.model.trace import Trace
from transformer_core.model.transformer import DEFAULT_MASKS
from transformer_core.sources.presets import preset_key
from transformer_core.text.inputs import Prepared
from transformer_core.text.tokenizer import available_encodings

from . import cache
from .errors import error_text, show_error
from .i18n import LANGS, browser_lang, lang, t
from .tools import set_text_b
from .widgets import IMAGE_FORMATS

# The course's example sentences (doc 000): the default texts learners arrive with.
DEFAULT_TEXT = "同志们!我踩着地雷了"
DEFAULT_TARGET = "我现在开始排雷。"
TEXT_MAX_CHARS = 2_000_000  # hard cap on the text box; the model sees at most max_len tokens anyway
OWNER_COOKIE = "te_owner"  # the browser's random token: models it trains or uploads are visible to it only
# URL parameter -> session key of the control it mirrors (service.urlstate parses and writes the URL)
URL_STATE = {"model": "model", "text": "text", "tgt": "tgt", "enc": "enc", "lang": "lang", "layer": "layer",
             "head": "head", "block": "block", "mask": "mask_mode", "scale": "att_scale", "T": "log_T",
             "k": "log_topk", "p": "log_topp", "seed": "log_seed", "gen": "gen_ids"}
PERSIST_KEYS = (*URL_STATE.values(), "allow_special", "img_fmt", "log_greedy", "gen_for")


def viewer() -> str:
    """This browser's owner token (read from its cookie on a new session, else new; the cookie is set once)."""
    ss = st.session_state
    if "_owner" not in ss:
        try:
            cookie = st.context.cookies.get(OWNER_COOKIE)
        except Exception:  # noqa: BLE001 - no browser context (AppTest)
            cookie = None
        ok = isinstance(cookie, str) and 20 <= len(cookie) <= 64 and cookie.replace("-", "").replace("_", "").isalnum()
        ss._owner, ss._owner_set = (cookie, True) if ok else (catalog.new_token(), False)
    return ss._owner


def session_id() -> str:
    """This tab's id: its training job is keyed by it (one training per tab)."""
    return st.session_state.setdefault("_sid", uuid.uuid4().hex)


@st.cache_resource(show_spinner=False)
def _jobs_started() -> bool:
    """Once per server process: sweep trainings a restart interrupted, start the janitor."""
    jobs.startup()
    return True


def _heartbeat() -> None:
    """Tell the job table this tab is still open (a training whose tab closed is stopped within a minute)."""
    jobs.touch(session_id())


def _remember_owner() -> None:
    """Keep the token in a first-party cookie (a year), so a reload shows the same private models."""
    ss = st.session_state
    if ss.get("_owner_set"):
        return
    ss._owner_set = True
    token = viewer()  # our own random token (letters, digits, - and _): nothing from a learner goes in here
    st.iframe(f"<script>document.cookie = '{OWNER_COOKIE}={token}; path=/; max-age=31536000; "
              "SameSite=Strict';</script>", height=1)


def _init_state() -> None:
    """A new session: every control from the URL (bad values fall back to their defaults, with one notice)."""
    ss = st.session_state
    if ss.get("_initialised"):
        return
    values, notices = urlstate.parse(dict(st.query_params), [e.key for e in catalog.entries(viewer())])
    ss.model = values["model"] if values["model"] else catalog.default_key()
    ss.text = values["text"] if values["text"] is not None else _example(ss.model, "example_src", DEFAULT_TEXT)
    ss.tgt = values["tgt"] if values["tgt"] is not None else _example(ss.model, "example_tgt", DEFAULT_TARGET)
    ss.lang = values["lang"] or browser_lang()
    for param, key in URL_STATE.items():
        if param not in ("model", "text", "tgt", "lang") and values[param] is not None:
            ss[key] = list(values[param]) if param == "gen" else values[param]
    ss.gen_ids = list(values["gen"] or ())
    ss._url_asked = {name: values[name] for name in ("layer", "head") if values[name] is not None}
    ss.gen_for = _fingerprint() if ss.gen_ids else None
    if notices:
        ss._url_notice = urlstate.summary(notices, ss.lang)
    ss._initialised = True


def _fingerprint() -> tuple:
    """What generated tokens belong to: generation continues only from the sequence on screen."""
    ss = st.session_state
    return ss.get("model"), ss.get("text"), ss.get("tgt"), ss.get("enc")


def set_generated(ids: list[int]) -> None:
    """Generated tokens appended to the current sequence (every page traces them)."""
    st.session_state.gen_ids = list(ids)
    st.session_state.gen_for = _fingerprint()


def generated() -> tuple[int, ...]:
    """The generated tokens that belong to the current model and text (stale ones are dropped)."""
    ss = st.session_state
    if ss.get("gen_ids") and ss.get("gen_for") != _fingerprint():
        ss.gen_ids = []
    return tuple(ss.get("gen_ids") or ())


def _example(key: str, field: str, fallback: str) -> str:
    entry = catalog.entry(key, viewer())
    return entry.card[field] if entry is not None and entry.card.get(field) is not None else fallback


def _persist() -> None:
    """Re-assign widget values so Streamlit keeps them when their page is not rendered."""
    for k in PERSIST_KEYS:
        if k in st.session_state:
            st.session_state[k] = st.session_state[k]


def on_model_change() -> None:
    """A newly selected model keeps the learner's text (re-tokenised for it); an encoder-decoder model gets its
    own example target (what its decoder reads is specific to it). It opens on the first layer and head."""
    ss = st.session_state
    entry = catalog.entry(ss.model, viewer())
    if entry is not None and entry.arch == "encoder_decoder":
        ss.tgt = _example(ss.model, "example_tgt", ss.get("tgt") or DEFAULT_TARGET)
    ss.gen_ids, ss.layer, ss.head = [], 0, 0


def keep_view_in_model(n_layers: int, n_heads: int) -> None:
    """Layer and head inside the model shown. A value out of range that the link asked for falls back to the
    first layer / head with one notice in the sidebar (and leaves the URL); any other (an earlier model's) quietly."""
    ss = st.session_state
    asked = ss.pop("_url_asked", {})
    values = {name: ss.get(name) for name in ("layer", "head")}
    values = {k: v if isinstance(v, int) else 0 for k, v in values.items()}
    fixed, notices = urlstate.clamp(values, n_layers, n_heads)
    for name, v in fixed.items():
        if ss.get(name) != v:
            ss[name] = v
    notices = [n for n in notices if asked.get(n.params.get("name")) == n.params.get("value")]
    if notices:
        st.sidebar.caption(f"🔗 {urlstate.summary(notices, ss.lang)}")
    _sync_url()


def _sync_url() -> None:
    """Mirror every control that changes the view into the URL (defaults and over-long texts left out)."""
    ss = st.session_state
    values = {param: ss.get(key) for param, key in URL_STATE.items()}
    values["gen"] = tuple(generated())
    page_defaults = {"model": catalog.default_key(), "text": _example(ss.get("model"), "example_src", DEFAULT_TEXT),
                     "tgt": _example(ss.get("model"), "example_tgt", DEFAULT_TARGET), "lang": browser_lang()}
    params = urlstate.encode(values, page_defaults)
    ss._text_left_out = params.text_left_out
    if dict(st.query_params) != dict(params):
        st.query_params.from_dict(dict(params))


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
        st.radio(t("language"), list(LANGS), format_func=LANGS.get, key="lang", horizontal=True)
        st.selectbox(t("model"), list(entries), key="model", help=t("model_help"), on_change=on_model_change,
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
        _sync_url()
        st.caption(t("text_not_in_url") if ss.get("_text_left_out") else t("share_link"))
        if ss.get("_url_notice"):
            st.caption(f"🔗 {ss.pop('_url_notice')}")
        _remember_owner()  # last in the sidebar: nothing moves when it is gone on the next run
    job = jobs.get(session_id())
    if job is not None and job.active:  # while it trains, the open tab keeps saying so, whatever the page
        with st.sidebar:
            st.fragment(run_every=10)(_heartbeat)()


def on_text_change() -> None:
    """A new text or target: keep it within the cap (the model reads at most max_len tokens anyway) and start
    generation afresh. (A max_chars on the text box would show a "18/2000000" counter to every learner.)"""
    ss = st.session_state
    for key in ("text", "tgt"):
        if len(ss.get(key) or "") > TEXT_MAX_CHARS:
            ss[key] = ss[key][:TEXT_MAX_CHARS]
            ss._text_cut = True
    clear_generated()


def clear_generated() -> None:
    """Forget the tokens generated on the logits page (a new text, target or encoding starts afresh)."""
    st.session_state.gen_ids = []


def generated_sidebar() -> None:
    """Sidebar: how many generated tokens are appended to the sequence, and a button that clears them."""
    n = len(generated())
    if n:
        st.caption(t("log_gen_count", n=n))
        st.button(t("log_gen_clear"), key="gen_clear", on_click=clear_generated)


def model_key() -> str:
    """The catalog key of the selected model (presets carry the chosen encoding)."""
    ss = st.session_state
    key = ss.model
    if key.startswith("preset:"):
        key = preset_key(key.split(":", 1)[1].split("@")[0], ss.get("enc", "cl100k_base"))
    return key


def model_is_encoder_decoder(entry) -> bool:
    return entry.arch == "encoder_decoder"


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
                                          layer, bool(ss.get("allow_special")), generated())
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
    if prep.src.truncated:
        st.info(t("note_truncated", n_chars=prep.src.n_chars, n_tokens=len(prep.src.tokens)), icon="✂️")
    if prep.src.cleaned or (prep.tgt is not None and prep.tgt.cleaned):
        st.info(t("note_cleaned"), icon="🩹")
    return PageContext(key, model, meta, device, prep, trace, layer, masks)


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
    clear_generated()


def out_of_domain(model_key: str) -> None:
    """The dates model was given text it was not built for: say what it translates, offer an example."""
    st.warning(t("dates_out_of_domain"), icon="🧭")
    st.button(t("dates_try", text=DATES_EXAMPLE[0]), key="dates_try", on_click=try_example,
              args=(model_key, *DATES_EXAMPLE))


def use_example() -> None:
    """Button callback: the selected model's own example texts."""
    ss = st.session_state
    ss.text = _example(ss.model, "example_src", ss.text)
    ss.tgt = _example(ss.model, "example_tgt", ss.get("tgt", ""))
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
