"""The model: its card, architecture, config, parameters per component, every shape, device and timing."""
import dataclasses

import pandas as pd
import streamlit as st

from transformer_core.analysis.architecture import NORM_NAMES
from transformer_core.model.transformer import COMPONENTS, param_counts
from ui import cache
from ui.cards import show_card
from ui.errors import show_error
from ui.figures import bars
from ui.i18n import t
from ui.parts import parts_table
from ui.session import page_context, through_app
from ui.widgets import chart, download, explain, file_stem, preformatted, table

through_app()

AUTO_MEASURE_TOKENS = 64  # longer inputs, and big models, are timed on request only (a first visit stays fast)
AUTO_MEASURE_PARAMS = 10_000_000
EXPORT_MAX_PARAMS = 20_000_000  # the exported file (float32) stays under the upload limit of 80 MB unpacked
POSITION_CLASSES = {"sinusoidal": "PositionalEncoding", "learned": "LearnedPositions", "none": "NoPositions",
                    "rope": "RoPE"}

st.title(t("nav_model"))
explain("mdl_intro")
ctx = page_context()
cfg = ctx.model.cfg
ss = st.session_state

st.subheader(t("mdl_card"))
show_card(ctx.card, ctx.key.split(":")[-1])
if param_counts(ctx.model)["total"] <= EXPORT_MAX_PARAMS:
    download(t("mdl_export"), lambda: cache.model_file(ctx.key, ctx.device),
             f"{file_stem(ctx.card.get('name', 'model'))}.safetensors", "application/octet-stream",
             help=t("mdl_export_help"), icon=":material/download:", key="mdl_export")

st.subheader(t("mdl_arch"))
arch = "encdec" if ctx.model.is_encoder_decoder else "dec"
hd = str(cfg.head_dim) + (t("mdl_gqa", kv=cfg.kv_heads, g=cfg.n_heads // cfg.kv_heads) if cfg.kv_heads < cfg.n_heads
                          else "") + (t("mdl_rope") if cfg.positional == "rope" else "")
preformatted(t(f"mdl_arch_{arch}", n=cfg.n_layers, h=cfg.n_heads, hd=hd, d=cfg.d_model,
               ffn=f"{cfg.d_ffn}{t('mdl_swiglu') if cfg.ffn == 'gated' else ''}", vocab=cfg.vocab_size,
               pos=POSITION_CLASSES[cfg.positional], scale=" × √d_model" if cfg.scale_embedding else "",
               norm=("pre-norm" if cfg.norm_first else "post-norm") + f" {NORM_NAMES[cfg.norm]}",
               final=f" → {NORM_NAMES[cfg.norm]}" if cfg.final_norm else ""))

st.subheader(t("mdl_vs_course"))
st.markdown(t("mdl_vs_course_text"))
parts_table(cfg)

st.subheader(t("mdl_config"))
fields = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
fields["vocab_map"] = t("mdl_vocab_map", n=len(cfg.vocab_map)) if cfg.vocab_map else "—"
table(pd.DataFrame({t("col_field"): list(fields), t("col_value"): [str(v) for v in fields.values()]}), "config")
with st.expander(t("mdl_tree")):
    preformatted(str(ctx.model))

st.subheader(t("mdl_params"))
counts = param_counts(ctx.model)
comp_labels = [t(f"comp_{c}") for c in COMPONENTS]
st.metric(t("mdl_total_params"), f"{counts['total']:,}")
chart(bars(comp_labels, [counts[c] for c in COMPONENTS], x_title=t("col_params"), height=280), "params")
table(pd.DataFrame({
    t("col_component"): comp_labels + [t("comp_total")],
    t("col_params"): [counts[c] for c in (*COMPONENTS, "total")],
    t("col_share"): [round(100 * counts[c] / max(counts["total"], 1), 2) for c in (*COMPONENTS, "total")],
}), "param_counts")
st.info(t("mdl_param_pitfall"), icon="🧮")

st.subheader(t("mdl_shapes"))
st.caption(t("mdl_shapes_note"))
shapes = ctx.trace.shapes()
table(pd.DataFrame({t("col_name"): [n for n, _ in shapes], t("col_shape"): [str(tuple(s)) for _, s in shapes]}),
      "shapes")

st.subheader(t("mdl_time"))
_, dev_label = cache.get_device()
st.metric(t("device"), dev_label)
tgt = ss.get("tgt") if ctx.model.is_encoder_decoder else None
n_tokens = ctx.trace.src_ids.size(1) + (ctx.trace.tgt_ids.size(1) if ctx.trace.tgt_ids is not None else 0)
auto = n_tokens <= AUTO_MEASURE_TOKENS and counts["total"] <= AUTO_MEASURE_PARAMS
if auto or st.button(t("mdl_measure"), key="mdl_measure"):
    try:
        repeats = 5
        ms = cache.forward_time_ms(ctx.key, ctx.device, ss.get("text", ""), tgt, repeats)
        st.markdown(t("mdl_time_text", ms=ms, dev=dev_label, n=repeats))
    except Exception as exc:  # noqa: BLE001 - shown as a message, never a traceback
        show_error(exc)
else:
    st.caption(t("mdl_time_long", n=n_tokens))
