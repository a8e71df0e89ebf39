"""Home: the whole flow for the current text on one screen, each step linking to its page."""
import streamlit as st

from transformer_core.analysis.next_token import distribution
from transformer_core.model.transformer import param_counts
from transformer_core.text.inputs import token_labels
from ui import cache
from ui.i18n import lang, t
from ui.session import page_context, through_app

through_app()
st.title(t("app_title"))
st.markdown(t("home_intro"))
ctx = page_context()
cfg, trace = ctx.model.cfg, ctx.trace
description = ctx.card.get("description")
if isinstance(description, dict):
    st.info(description.get(lang()) or description.get("en", ""), icon=":material/school:")

side = "encoder" if ctx.model.is_encoder_decoder else "decoder"
n_blocks = trace.n_blocks()
last = trace.decoder_ids
top = distribution(trace.logits[0, -1], top=1)
steps = [
    ("pages/1_tokenizer.py", "nav_tokenizer", t("home_tokens", n=len(ctx.prep.src.tokens), enc=cfg.encoding)),
    ("pages/2_embeddings.py", "nav_embeddings", t("home_embed", shape=trace.shape("embed", side=side))),
    ("pages/3_attention.py", "nav_attention", t("home_attention", blocks=n_blocks, heads=cfg.n_heads)),
    ("pages/4_logits.py", "nav_logits", t("home_logits", tok=token_labels(ctx.model, top.ids)[0],
                                          after=token_labels(ctx.model, last[-1:])[0], p=top.probs[0])),
    ("pages/5_model.py", "nav_model", t("home_model", params=param_counts(ctx.model)["total"],
                                        device=cache.get_device()[1])),
]
for path, title_key, figure in steps:
    with st.container(border=True):
        st.page_link(path, label=t(title_key), icon=":material/arrow_forward:")
        st.markdown(figure)
