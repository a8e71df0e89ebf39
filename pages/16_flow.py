"""Where the information flowed: for one prediction, the graph from the input tokens through the layers to it, each
attention edge (a key's term, its heads together) and each FFN weighted by its share of the stream it adds to,
pruned by a threshold (transformer_core.analysis.flow). A click on an edge opens its head at that query and key (with
the split of its score), or its FFN."""
import numpy as np
import pandas as pd
import streamlit as st

from transformer_core.analysis.flow import THRESHOLD, flow_names, information_flow
from transformer_core.model.memory import KEEP_ALL
from transformer_core.model.trace import run_with_trace
from transformer_core.text.inputs import token_labels
from ui.chart_theme import HEAD_COLOURS
from ui.errors import show_error
from ui.figures import axis_labels, md_visible, prob_text, visible
from ui.guidance import try_these
from ui.i18n import t
from ui.nav import open_ffn, open_head
from ui.plain_figures import figure
from ui.session import page_context, through_app
from ui.tools import cut_note, export_panel, inputs, prep_for, reserve
from ui.widgets import clicked, explain, table

through_app()
ss = st.session_state
WIDTHS = ((0.5, 9), (0.25, 6), (0.1, 3.5), (0.0, 1.8))  # an edge's share at least this: drawn this wide
RESIDUAL, FFN_COLOUR = "#9e9e9e", "#424242"


@st.cache_data(show_spinner=False, max_entries=32, ttl=1800)
def flow_of(key, device, text, tgt, special, gen):
    """(the flow of every position, the model ids read, tokens before a cut or None): one forward keeping only what
    the flow reads (attention weights, values and outputs, FFN outputs, the sums), then the shares."""
    model, prep = prep_for(key, device, text, tgt, special, gen, KEEP_ALL)
    with reserve(model, prep, keep=KEEP_ALL):
        _, trace = run_with_trace(model, prep.src_ids, prep.tgt_ids, names=flow_names(model))
        return information_flow(model, trace), prep.longest, prep.cut_from


def row_of(node: tuple) -> int:
    """The graph's row of a node: the stream entering layer ℓ at 2ℓ, after its attention at 2ℓ + 1."""
    stage, layer, _ = node
    return 2 * layer + (stage == "M")


def width(share: float) -> float:
    return next(w for least, w in WIDTHS if share >= least)


def draw(edges, labels: list[str], n_layers: int, position: int, threshold: float):
    """The graph: tokens along x, the stream's steps up the y axis; attention edges in their top head's colour, the
    residual grey, an FFN a square beside the stream; a marker in the middle of each coloured edge to click."""
    groups: dict[tuple, list] = {}  # (kind, head, width) -> segments, one trace each
    marks = []  # (x, y, colour, hover, what a click opens)
    for e in edges:
        (x0, y0), (x1, y1) = (e.source[2], row_of(e.source)), (e.target[2], row_of(e.target))
        if e.kind == "ffn":  # through the FFN's square, set off to the right of the stream
            fx, fy = x0 + 0.3, (y0 + y1) / 2
            groups.setdefault(("ffn", -1, width(e.share)), []).append(((x0, fx, x1), (y0, fy, y1)))
            marks.append((fx, fy, FFN_COLOUR, "square", t("flow_hover_ffn", layer=e.layer, tok=visible(labels[x0]),
                                                                     share=e.share), ("ffn", e.layer, x0)))
        else:
            groups.setdefault((e.kind, e.head, width(e.share)), []).append(((x0, x1), (y0, y1)))
            if e.kind == "attention":
                marks.append(((x0 + x1) / 2, (y0 + y1) / 2, HEAD_COLOURS[e.head % len(HEAD_COLOURS)], "circle",
                              t("flow_hover_attention", layer=e.layer, head=e.head, src=visible(labels[x0]),
                                dst=visible(labels[x1]), share=e.share), ("attention", e.layer, e.head, x1, x0)))
    data = []
    for (kind, head, w), segments in sorted(groups.items(), key=lambda kv: kv[0][0] != "residual"):
        xs, ys = [], []
        for sx, sy in segments:
            xs += [*sx, None]
            ys += [*sy, None]
        colour = {"residual": RESIDUAL, "ffn": FFN_COLOUR}.get(kind) or HEAD_COLOURS[head % len(HEAD_COLOURS)]
        data.append(dict(type="scatter", x=xs, y=ys, mode="lines", line={"color": colour, "width": w},
                         hoverinfo="skip", showlegend=False))
    data.append(dict(type="scatter", x=[position], y=[2 * n_layers], mode="markers+text", name=t("flow_prediction"),
                     marker={"size": 14, "color": "#d62728", "symbol": "star"}, text=[t("flow_prediction")],
                     textposition="top center", hoverinfo="skip", showlegend=False))
    data.append(dict(type="scatter", x=[m[0] for m in marks], y=[m[1] for m in marks], mode="markers", name="edges",
                     marker={"size": 11, "color": [m[2] for m in marks], "symbol": [m[3] for m in marks],
                             "line": {"width": 1, "color": "white"}},
                     hovertemplate="%{hovertext}<extra></extra>", hovertext=[m[4] for m in marks],
                     customdata=[[i] for i in range(len(marks))], showlegend=False))
    rows = [t("flow_row_embed") if r == 0 else t("flow_row_attn", layer=r // 2) if r % 2 else
            t("flow_row_layer", layer=r // 2 - 1) for r in range(2 * n_layers + 1)]
    shown = axis_labels(labels[:position + 1])
    fig = figure(data, {"height": max(360, 34 * len(rows) + 140), "margin": dict(l=10, r=10, t=50, b=10),
                        "title": {"text": t("flow_graph_title", tok=visible(labels[position]), tau=threshold)},
                        "xaxis": {"tickvals": list(range(position + 1)), "ticktext": shown, "tickangle": -45,
                                  "range": [-0.6, position + 0.6]},
                        "yaxis": {"tickvals": list(range(len(rows))), "ticktext": rows,
                                  "range": [-0.5, len(rows) - 0.2]}})
    return fig, [m[5] for m in marks]


st.title(t("nav_flow"))
explain("flow_intro", rf"\text{{{t('flow_share_sym')}}}(p) = "
                      r"\frac{\max\big(0,\ \lVert y\rVert_1 - \lVert y - p\rVert_1\big)}"
                      r"{\sum_{p'} \max\big(0,\ \lVert y\rVert_1 - \lVert y - p'\rVert_1\big)},\qquad "
                      r"y = x + \sum_j \sum_h A_h[i,j]\, W_O^h v_h[j]\ (+\, b_O)")
try_these("flow", dict(model="shipped:everyday-gpt", text="The cat sat on the mat. The cat sat on the"),
          dict(model="shipped:name-movers", text="When Mary and John went to the store, John gave a drink to"))
ctx = page_context()
model = ctx.model
if model.is_encoder_decoder:
    st.info(t("err.flow_decoder_only"), icon="ℹ️")
    st.stop()
try:
    with st.spinner("…"):
        flow, n, total = result = flow_of(*inputs(ctx))
except Exception as exc:  # noqa: BLE001 - a message, never a traceback
    show_error(exc)
    st.stop()
cut_note(result, ctx)
labels = token_labels(model, ctx.trace.decoder_ids[:n].tolist())
c1, c2 = st.columns([2, 3])
position = int(c1.selectbox(t("flow_position"), range(n), index=n - 1, format_func=lambda i: axis_labels(labels)[i],
                            key=f"flow_position_{n}"))
threshold = float(c2.slider(t("flow_threshold"), 0.01, 0.5, THRESHOLD, 0.01, key="flow_threshold",
                            help=t("flow_threshold_help")))
probs = ctx.trace.logits_at(position).float().softmax(-1)
top = int(probs.argmax())
st.markdown(t("flow_predicts", tok=md_visible(labels[position]), top=md_visible(token_labels(model, [top])[0]),
              p=prob_text(probs[top])))

edges = flow.routes(threshold, position)
fig, targets = draw(edges, labels, model.cfg.n_layers, position, threshold)
picked = clicked(fig, f"flow_graph_{position}", trace_name="edges")
if picked is not None:
    target = targets[int(picked)]
    if target[0] == "attention":
        _, layer, head, query, key = target
        open_head("dec_self", layer, head, cell=(query, key))
    else:
        open_ffn(target[1], target[2], len(labels))
st.caption(t("flow_click_hint"))

attention = [e for e in edges if e.kind == "attention"]
ffns = [e for e in edges if e.kind == "ffn"]
if attention:  # the strongest edge into the prediction's own token, else the strongest anywhere
    best = max(attention, key=lambda e: (e.target[2] == position, e.share))
    st.markdown(t("flow_summary" if best.target[2] == position else "flow_summary_any", n=len(edges),
                  attn=len(attention), ffn=len(ffns), layer=best.layer,
                  head=best.head, src=visible(labels[best.source[2]]), dst=visible(labels[best.target[2]]),
                  share=best.share))
else:
    st.markdown(t("flow_summary_none", n=len(edges), ffn=len(ffns)))


def breakdown(e) -> str:
    """An attention edge's heads, each with its own share (the three largest)."""
    per_head = flow.heads[e.layer, :, e.target[2], e.source[2]].astype(np.float64)
    return " · ".join(f"H{h} {per_head[h]:.3f}" for h in np.argsort(-per_head)[:3] if per_head[h] > 0)


kinds = {"attention": t("flow_kind_attention"), "residual": t("flow_kind_residual"), "ffn": "FFN"}
shown = sorted((e for e in edges if e.kind != "residual"), key=lambda e: -e.share)
table(pd.DataFrame({t("flow_col_kind"): [kinds[e.kind] for e in shown],
                    t("flow_col_layer"): [e.layer for e in shown],
                    t("flow_col_from"): [axis_labels(labels)[e.source[2]] for e in shown],
                    t("flow_col_to"): [axis_labels(labels)[e.target[2]] for e in shown],
                    t("flow_col_share"): [e.share for e in shown],
                    t("flow_col_heads"): [breakdown(e) if e.kind == "attention" else "" for e in shown]}),
      "flow_edges", formats={t("flow_col_share"): "%.3f"})
st.caption(t("flow_table_note"))
export_panel(flow, "flow", ctx, position=position)
