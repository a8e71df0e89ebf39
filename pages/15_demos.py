"""The demo gallery: the classic demonstrations (induction, name movers, the translator's alignment, a previous-token
head, positions, the KV cache, a neuron that reads one token), each measured now on its model, one click from its
view. A page of its own, listed right under the overview: a teacher finds it first, and the overview stays as quick
as it is (the gallery loads up to four models and measures eight demos the first time it is shown)."""
import streamlit as st

from ui.demos import follow, gallery
from ui.i18n import t
from ui.session import through_app

through_app()
follow()  # a demo's button was pressed: open its view
st.title(t("nav_demos"))
st.markdown(t("demo_intro"))
gallery()
