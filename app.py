"""Transformer Explorer: a thin entry (page config, sidebar, navigation). Pages live in pages/.

Adding a page: a file pages/<n>_<name>.py, its title "nav_<name>" in assets/strings/, and one line below.
"""
import gc

import streamlit as st

from ui.startup import first_run, preload_charts  # Streamlit only

starting = first_run()
if starting:
    gc.disable()  # no collection while the first run imports torch, plotly and our modules (150,000 objects)
    # and draws its page; turned back on at the end, however the run ends (a collection there cost 0.1 s)
st.set_page_config(page_title="Transformer Explorer", page_icon="🔭", layout="wide")
preloading = preload_charts()  # before the imports below (torch: about a second)

from ui.cache import collect_now_and_then, freeze_startup_heap  # noqa: E402 - after the preload was sent
from ui.i18n import t  # noqa: E402
from ui.nav import page  # noqa: E402
from ui.session import sidebar  # noqa: E402

collect_now_and_then()
sidebar()
preloading.empty()
PAGES = {
    t("nav_section_flow"): [
        page("home", ":material/account_tree:", default=True),
        page("tokenizer", ":material/text_fields:"),
        page("embeddings", ":material/grid_on:"),
        page("attention", ":material/visibility:"),
        page("ffn", ":material/stacked_line_chart:"),
        page("logits", ":material/bar_chart:"),
    ],
    t("nav_section_inside"): [
        page("model", ":material/memory:"),
        page("lens", ":material/search:"),
        page("heads", ":material/category:"),
        page("intervene", ":material/content_cut:"),
        page("compare", ":material/compare_arrows:"),
        page("bpe", ":material/merge_type:"),
        page("surprise", ":material/bolt:"),
    ],
    t("nav_section_train"): [
        page("train", ":material/model_training:"),
    ],
}
try:
    st.navigation(PAGES, expanded=True).run()  # every page listed (no English "View more")
finally:
    if starting:
        gc.enable()
freeze_startup_heap()  # after the page is sent: the first learner waits for neither the collection nor the
# freeze (0.08 s each time the heap is scanned); a run that stops early (st.rerun, a page switch) leaves it to
# a later run
