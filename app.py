"""Transformer Explorer: a thin entry (page config, sidebar, navigation). Pages live in pages/.

Adding a page: a file pages/<n>_<name>.py, its title "nav_<name>" in assets/strings/, and one line below.
"""
import pandas  # noqa: F401 - whole before any chart: plotly's checks read a half-imported pandas from sys.modules
import streamlit as st

from ui import runs  # Streamlit only

starting = runs.begin()  # the server's first run: no garbage collection until runs.end
try:
    st.set_page_config(page_title="Transformer Explorer", page_icon="🔭", layout="wide")
    preloading = runs.preload_charts()  # before the imports below (torch: about a second)

    from ui.i18n import link_lang, t  # after the preload was sent; Streamlit only
    from ui.nav import alias, page

    # a session's language, from its first run on (the link's, else the browser's; then the sidebar's), here so the
    # navigation's titles below are in it
    st.session_state.setdefault("lang", link_lang())
    PAGES = {
        t("nav_section_flow"): [
            page("home", ":material/account_tree:", default=True),
            alias("home"),  # hidden: "/home" opens the home page too
            page("demos", ":material/slideshow:"),
            page("tokenizer", ":material/text_fields:"),
            page("embeddings", ":material/grid_on:"),
            page("attention", ":material/visibility:"),
            page("ffn", ":material/stacked_line_chart:"),
            page("logits", ":material/bar_chart:"),
        ],
        t("nav_section_inside"): [
            page("model", ":material/memory:"),
            page("lens", ":material/search:"),
            page("flow", ":material/route:"),
            page("heads", ":material/category:"),
            page("intervene", ":material/content_cut:"),
            page("compare", ":material/compare_arrows:"),
            page("bpe", ":material/merge_type:"),
            page("surprise", ":material/bolt:"),
            page("learn", ":material/trending_down:"),
        ],
        t("nav_section_train"): [
            page("train", ":material/model_training:"),
        ],
    }
    # listed before the imports below (torch: seconds on a server's first run), so the sidebar shows the pages' titles
    # at once, not the pages/ folder's file names; every page listed (no English "View more")
    chosen = st.navigation(PAGES, expanded=True)

    from service.turns import page_turn
    from ui.cache import warm_loaded
    from ui.sidebar import sidebar

    with page_turn():  # at most a few pages computed at once, the others queued (service/turns.py)
        sidebar()
        runs.warm_fonts()
        preloading.empty()
        chosen.run()
    warm_loaded()  # the page is sent: what a model just loaded measures once, in the background
finally:
    runs.end(starting)
runs.freeze_startup_heap()  # once; a run that stops early (st.rerun, a page switch) leaves it to a later run
