"""The demo gallery's cards: each classic demonstration measured on its model (transformer_core.analysis.demos), its
two lines of "what you should see" filled with those figures, a button that opens its view in this tab and a link
that opens it anywhere (a new tab, a shared link, the first request to a fresh server)."""
from __future__ import annotations

from urllib.parse import quote, urlencode

import streamlit as st

from service import budget, catalog, urlstate
from transformer_core.analysis.demos import DEMOS, Demo, Reading, View
from transformer_core.analysis.head_effects import CHUNK_BYTES

from . import cache
from .errors import error_text
from .figures import plain, visible
from .i18n import lang, t
from .nav import switch
from .state import open_link, viewer
from .widgets import in_rows

ss = st.session_state
GO = "_demo_go"  # the page a demo's button asked for: the gallery switches to it on its next run
# what a view's own widgets remember in a session (a head picked, answers typed, a text B, a cell clicked): a demo
# opens its view afresh, as its link does in a new tab
VIEW_KEYS = ("att_cell", "att_query_idx", "he_", "iv_b_", "iv_text_b", "iv_pt_", "_text_b", "_tgt_b", "nr_layer_",
             "nr_neuron_", "log_pos_", "ffn_token_", "kv_measure", "rp_run")


@st.cache_data(show_spinner=False, max_entries=64, ttl=3600)
def reading(name: str, key: str, device: str, language: str) -> Reading:
    """A demo measured on its model (once per model, device and language on this server)."""
    demo = next(d for d in DEMOS if d.name == name)
    model, card = cache.get_model(key, device)
    index = cache.neuron_index(key) if demo.neurons else None
    with budget.reserve(CHUNK_BYTES, "demo"):  # a few forwards, the IOI sweep batched to at most this
        return demo.measure(model, card, language, index)


def query(view: View, key: str, language: str) -> dict[str, str]:
    """A view's link values in the URL's one schema (service.urlstate: defaults left out): model, language, view."""
    return dict(urlstate.encode(urlstate.defaults() | {"model": key, "lang": language} | dict(view.values)))


def href(view: View, key: str, language: str) -> str:
    """The link to a view, relative to the gallery's own address (so it works behind a path prefix too): the page's
    path and its query."""
    return f"{view.page}?{urlencode(query(view, key, language), quote_via=quote)}"


def go(view: View, key: str, language: str) -> None:
    """Button callback: this tab opens the view as its link would, its pages' own pickers started afresh."""
    for name in [k for k in ss if isinstance(k, str) and k.startswith(VIEW_KEYS)]:
        del ss[name]
    open_link(query(view, key, language))
    ss[GO] = view.page


def follow() -> None:
    """On the gallery, first: go to the page a demo's button asked for."""
    page = ss.pop(GO, None)
    if page:
        switch(page)


def unavailable(demo: Demo) -> str | None:
    """Why a demo cannot run on this server (its model is not here), in the learner's language; None if it can."""
    if demo.model.startswith("shipped:") and catalog.entry(demo.model, viewer()) is None:
        return t("demo_missing_model", name=demo.model.partition(":")[2])
    return None


def lines(demo: Demo, found: Reading, label: str) -> list[str]:
    """The two lines of "what you should see", every figure filled in."""
    pages = {f"page{i + 1 if i else ''}": t(f"nav_{v.page}") for i, v in enumerate(found.views)}
    fill = {**found.numbers, **{k: f"‘{plain(visible(v))}’" for k, v in found.tokens.items()}, **pages, "model": label}
    return [t(f"demo_{found.demo}_see{i + 1}_{variant}", **fill) for i, variant in enumerate(found.lines)]


def card(demo: Demo) -> None:
    """One demo: its title, its model and text, the two lines, and a button and a link per view."""
    language = lang()
    with st.container(border=True, key=f"demo_{demo.name}"):
        st.subheader(t(f"demo_{demo.name}_title"))
        entry = catalog.entry(demo.model, viewer())
        why = unavailable(demo)
        if why is not None:
            st.info(t("demo_unavailable", reason=why), icon="🧩")
            return
        device, _ = cache.get_device()
        try:
            with st.spinner(t("demo_measuring", title=t(f"demo_{demo.name}_title"))):
                found = reading(demo.name, demo.model, device, language if demo.by_language else "en")
        except Exception as exc:  # noqa: BLE001 - GPT-2 not downloaded, memory busy, ...: said in the card
            st.info(t("demo_unavailable", reason=error_text(exc)), icon="🧩")
            return
        label = entry.label if entry is not None else demo.model
        text = plain(visible(found.views[0].values.get("text", ""), spaces=False))
        st.caption(t("demo_model", model=plain(label), text=text))
        st.markdown(f"**{t('demo_see')}**\n\n" + "\n\n".join(f"- {line}" for line in lines(demo, found, label)))
        for i, view in enumerate(found.views):
            page = t(f"nav_{view.page}")
            c1, c2 = st.columns([3, 2], vertical_alignment="center")
            c1.button(t("demo_open", page=page), key=f"demo_{demo.name}_{i}", on_click=go,
                      args=(view, demo.model, language), type="primary" if i == 0 else "secondary")
            c2.markdown(f"[{t('demo_link')}]({href(view, demo.model, language)})")


def gallery() -> None:
    """Every demo, two cards a row (a phone stacks them in the gallery's order)."""
    for col, demo in in_rows(DEMOS, 2):
        with col:
            card(demo)
