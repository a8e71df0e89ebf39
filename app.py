"""Transformer Explorer: a thin entry (page config, sidebar, navigation). Pages live in pages/."""
import streamlit as st

from ui.i18n import t
from ui.session import sidebar

st.set_page_config(page_title="Transformer Explorer", page_icon="🔭", layout="wide")
sidebar()
PAGES = [
    st.Page("pages/0_home.py", title=t("nav_home"), icon=":material/home:", default=True),
    st.Page("pages/1_tokenizer.py", title=t("nav_tokenizer"), url_path="tokenizer"),
    st.Page("pages/2_embeddings.py", title=t("nav_embeddings"), url_path="embeddings"),
    st.Page("pages/3_attention.py", title=t("nav_attention"), url_path="attention"),
    st.Page("pages/4_logits.py", title=t("nav_logits"), url_path="logits"),
    st.Page("pages/5_model.py", title=t("nav_model"), url_path="model"),
    st.Page("pages/6_train.py", title=t("nav_train"), url_path="train"),
]
st.navigation(PAGES).run()
