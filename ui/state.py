"""A browser session's state: who it is (owner token, tab id), its controls read from and written back to the URL,
the text and the tokens generated after it, and the selected model's key."""
from __future__ import annotations

import uuid

import streamlit as st

from service import catalog, urlstate
from transformer_core.sources.presets import preset_key

from .i18n import browser_lang

# The texts learners arrive with on a model that has no example of its own (the course's untrained presets): a
# greeting and its answer, 13 and 7 cl100k tokens like the course's pair, so its presets' short contexts hold them
DEFAULT_TEXT = "早上好!我们今天一起学习"
DEFAULT_TARGET = "现在开始上课。"
TEXT_MAX_CHARS = 2_000_000  # hard cap on the text box; the model sees at most max_len tokens anyway
OWNER_COOKIE = "te_owner"  # the browser's random token: models it trains or uploads are visible to it only
# URL parameter -> session key of the control it mirrors (service.urlstate parses and writes the URL)
URL_STATE = {"model": "model", "text": "text", "tgt": "tgt", "enc": "enc", "lang": "lang", "layer": "layer",
             "head": "head", "block": "block", "mask": "mask_mode", "scale": "att_scale", "T": "log_T",
             "k": "log_topk", "p": "log_topp", "seed": "log_seed", "gen": "gen_ids", "nlayer": "nr_layer",
             "neuron": "nr_neuron"}
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
    values, notices = urlstate.parse(dict(st.query_params), catalog.link_models(viewer()))  # key or plain name
    ss.model = values["model"] if values["model"] else catalog.default_key()
    ss.text = values["text"] if values["text"] is not None else _example(ss.model, "example_src", DEFAULT_TEXT)
    ss.tgt = values["tgt"] if values["tgt"] is not None else _example(ss.model, "example_tgt", DEFAULT_TARGET)
    if values["tgt"] is not None:  # a link's target is the one its text was shown with
        keep_target()
    for param, key in URL_STATE.items():
        if param not in ("model", "text", "tgt", "lang") and values[param] is not None:
            ss[key] = list(values[param]) if param == "gen" else values[param]
    ss.gen_ids = list(values["gen"] or ())
    ss._url_asked = {name: values[name] for name in ("layer", "head", "nlayer", "neuron") if values[name] is not None}
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


def keep_target() -> None:
    """The decoder text now in the session belongs to the text on screen (a link's, an example's, the learner's
    own): ui.session.follow_source leaves a translator's target alone until the text or the model changes."""
    ss = st.session_state
    ss._tgt_for = (ss.get("model"), ss.get("text"))


def clear_generated() -> None:
    """Forget the tokens generated on the logits page (a new text, target or encoding starts afresh)."""
    st.session_state.gen_ids = []


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
    own example target (what its decoder reads is specific to it). It opens on the first layer and head (and the
    FFN page on its own first pick of a neuron)."""
    ss = st.session_state
    entry = catalog.entry(ss.model, viewer())
    if entry is not None and entry.arch == "encoder_decoder":
        ss.tgt = _example(ss.model, "example_tgt", ss.get("tgt") or DEFAULT_TARGET)
    ss.gen_ids, ss.layer, ss.head = [], 0, 0
    for key in ("nr_layer", "nr_neuron"):
        ss.pop(key, None)


def _resendable(value) -> bool:
    """A value Streamlit lets a script set and an option widget may hold: no button's or chart's state (a bool, a dict,
    an upload), which cannot be set."""
    if isinstance(value, (list, tuple)):
        return all(_resendable(v) for v in value)
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


def resend_choices() -> None:
    """Send every control's value to the browser again, labelled afresh (call from a callback: before any widget of
    the run). The browser holds an option widget's value as its label, and Streamlit keeps a keyed widget from run to
    run: after the language, the model or the text relabels its options, a radio would show no option picked and a
    select box the old label, and the next action would send that old label back, which Streamlit resets to the
    default. Re-assigned, the value goes out with its new label. (Checkboxes and toggles hold a bool and no label;
    the one radio of bools is re-assigned on every run, ui.state.PERSIST_KEYS.)"""
    ss = st.session_state
    for key in list(ss.keys()):
        if _resendable(value := ss[key]):
            ss[key] = value


def on_text_change() -> None:
    """A new text or target: keep it within the cap (the model reads at most max_len tokens anyway) and start
    generation afresh. (A max_chars on the text box would show a "18/2000000" counter to every learner.)"""
    ss = st.session_state
    for key in ("text", "tgt"):
        if len(ss.get(key) or "") > TEXT_MAX_CHARS:
            ss[key] = ss[key][:TEXT_MAX_CHARS]
            ss._text_cut = True
    clear_generated()
    resend_choices()  # labels that name the text's tokens (a position, an answer) are the new text's


def keep_view_in_model(n_layers: int, n_heads: int, d_ffn: int | None = None) -> None:
    """Layer and head inside the model shown. A value out of range that the link asked for falls back to the
    first layer / head with one notice in the sidebar (and leaves the URL); any other (an earlier model's) quietly."""
    ss = st.session_state
    asked = ss.pop("_url_asked", {})
    values = {name: ss.get(name) for name in ("layer", "head")}
    values = {k: v if isinstance(v, int) else 0 for k, v in values.items()}
    # the FFN page's neuron, as the link named it (nlayer, neuron): one out of range is said, then dropped
    values |= {name: ss[URL_STATE[name]] for name in ("nlayer", "neuron") if isinstance(ss.get(URL_STATE[name]), int)}
    fixed, notices = urlstate.clamp(values, n_layers, n_heads, d_ffn=d_ffn)
    if any(name in values and fixed[name] is None for name in ("nlayer", "neuron")):
        fixed |= {"nlayer": None, "neuron": None}  # a neuron is its layer and its number: both go
    for name, v in fixed.items():
        key = URL_STATE[name]
        if v is None:
            ss.pop(key, None)
        elif ss.get(key) != v:
            ss[key] = v
    notices = [n for n in notices if asked.get(n.params.get("name")) == n.params.get("value")]
    if notices:
        st.sidebar.caption(f"🔗 {urlstate.summary(notices, ss.lang)}")
    sync_url()


def sync_url() -> None:
    """Mirror every control that changes the view into the URL (defaults and over-long texts left out)."""
    ss = st.session_state
    values = {param: ss.get(key) for param, key in URL_STATE.items()}
    values["gen"] = tuple(generated())
    entry = catalog.entry(ss.get("model") or "", viewer())
    if entry is not None and entry.arch != "encoder_decoder":
        values["tgt"] = None  # a model that reads no target: an earlier model's stays out of the link
    page_defaults = {"model": catalog.default_key(), "text": _example(ss.get("model"), "example_src", DEFAULT_TEXT),
                     "tgt": _example(ss.get("model"), "example_tgt", DEFAULT_TARGET), "lang": browser_lang()}
    params = urlstate.encode(values, page_defaults)
    ss._text_left_out = params.text_left_out
    if dict(st.query_params) != dict(params):
        st.query_params.from_dict(dict(params))


def model_key() -> str:
    """The catalog key of the selected model (presets carry the chosen encoding)."""
    ss = st.session_state
    key = ss.model
    if key.startswith("preset:"):
        key = preset_key(key.split(":", 1)[1].split("@")[0], ss.get("enc", "cl100k_base"))
    return key


def open_link(params: dict[str, str]) -> None:
    """Button callback: this tab takes a link's model, text and view as a new session takes its URL (_init_state);
    a view value the link leaves out goes back to its page's default, and the language stays the tab's."""
    ss = st.session_state
    values, _ = urlstate.parse(params, catalog.link_models(viewer()))
    ss.model = values["model"] or catalog.default_key()
    on_model_change()
    ss.text = values["text"] if values["text"] is not None else _example(ss.model, "example_src", DEFAULT_TEXT)
    ss.tgt = values["tgt"] if values["tgt"] is not None else _example(ss.model, "example_tgt", DEFAULT_TARGET)
    if values["tgt"] is not None:
        keep_target()
    for param, key in URL_STATE.items():
        if param in ("model", "text", "tgt", "lang", "gen"):
            continue
        if values[param] is None:
            ss.pop(key, None)
        else:
            ss[key] = values[param]
    set_generated(list(values["gen"] or ()))
