"""Compare two texts side by side through the same model: the next-token distribution, the per-token surprise and
one head's attention of text A (the sidebar's) and text B (typed here), with what differs highlighted."""
import html

import numpy as np
import pandas as pd
import streamlit as st

from service import budget
from service.budget import MemoryBudgetError
from transformer_core.analysis.blocks import kinds
from transformer_core.analysis.compare import compare
from transformer_core.analysis.export import export_npz, notebook_snippet
from transformer_core.errors import ExplorerError
from transformer_core.model.memory import trace_bytes
from transformer_core.text.inputs import prepare, token_labels
from ui import cache
from ui.errors import show_error
from ui.figures import DIVERGING, axis_labels, bars, token_heatmap, visible
from ui.i18n import t
from ui.session import page_context, through_app
from ui.widgets import chart, explain, file_stem, table

through_app()
ss = st.session_state
CUTS_SHOWN: set[str] = set()  # this run's notes that a section read fewer tokens (each said once)
TEXT_B_MAX = 20_000  # characters kept of text B (the model reads at most max_len tokens of it anyway)
TOP = 10


def export_panel(result, view: str, ctx, **params) -> None:
    """The view's numbers as .npz and the notebook code that recomputes them."""
    with st.expander(t("xp_title")):
        try:
            st.download_button(t("xp_npz"), export_npz(result), mime="application/octet-stream",
                               file_name=f"{file_stem('transformer-explorer', view, ctx.key.split(':')[-1])}.npz",
                               key=f"xp_npz_{view}")
            code = notebook_snippet(view, model=ctx.key.removeprefix("shipped:"), text=ss.get("text", ""),
                                    target=ss.get("tgt") if ctx.model.is_encoder_decoder else None, **params)
        except ExplorerError:
            st.caption(t("xp_unavailable"))
            return
        st.caption(t("xp_snippet"))
        st.code(code, language="python")
        if ss.get("gen_ids") or ss.get("allow_special"):
            st.caption(t("xp_generated"))


def inputs(ctx) -> tuple:
    """What a cached computation depends on: model, device, text, target, special tokens, generated tokens."""
    tgt = ss.get("tgt") if ctx.model.is_encoder_decoder else None
    return ctx.key, ctx.device, ss.get("text", ""), tgt, bool(ss.get("allow_special")), tuple(ss.get("gen_ids") or ())


def _longest(prep) -> int:
    return max(prep.src_ids.size(1), 0 if prep.tgt_ids is None else prep.tgt_ids.size(1))


def _fit(model, prep, keep):
    """The input cut to what one task may hold in the server's memory budget when the analysis keeps `keep`
    (KEEP_ALL, a layer, KEEP_NONE); MemoryBudgetError when not even one token fits."""
    fits = budget.trace_tokens(model.cfg, _longest(prep), keep=keep)
    if fits < 1:
        raise MemoryBudgetError("memory_too_big", mb=budget.to_mb(trace_bytes(model.cfg, 1, 1, keep=keep)),
                                limit=budget.to_mb(budget.task_limit()), setting=budget.SETTING_NAME)
    return prep.cut(fits)


def _prep(key, device, text, tgt, special, gen, keep):
    """The shared model and the sidebar's input for it, cut to what fits (see _fit)."""
    model, _ = cache.get_model(key, device)
    return model, _fit(model, prepare(model, text, tgt, allow_special=special, extra=gen), keep)


def _reserve(model, *preps, keep):
    """Hold the memory of one traced forward of the longest of these inputs while the analysis runs."""
    n_src = max(p.src_ids.size(1) for p in preps)
    n_tgt = None if preps[0].tgt_ids is None else max(p.tgt_ids.size(1) for p in preps)
    return budget.trace_reservation(model.cfg, n_src, n_tgt, keep=keep)


def cut_note(result, ctx) -> None:
    """Say so when the analysis read fewer tokens than the page's trace (a long text on a big model)."""
    _, n, total = result
    text = t("err.trace_cut", n=n, total=total, limit=budget.to_mb(budget.task_limit()))
    if total is not None and n < _longest(ctx.prep) and text not in CUTS_SHOWN:
        CUTS_SHOWN.add(text)
        st.warning(text, icon="✂️")


@st.cache_data(show_spinner=False, max_entries=64, ttl=1800)
def comparison(key, device, text, tgt, special, gen, text_b, tgt_b, kind: str, layer: int, head: int):
    model, prep = _prep(key, device, text, tgt, special, gen, layer)
    prep_b = _fit(model, prepare(model, text_b, tgt_b, allow_special=special), layer)
    with _reserve(model, prep, prep_b, keep=layer):
        return compare(model, prep, prep_b, kind, layer, head, top=TOP), _longest(prep), prep.cut_from


# --- text B (shared with the intervene page through the "_text_b" / "_tgt_b" keys, which outlive the widgets) ----

def _default_b(text: str) -> str:
    """A second text to start from: the sidebar's words in reverse order (its characters, for one word)."""
    words = text.split()
    return " ".join(reversed(words)) if len(words) > 1 else text[::-1]


def _keep_b(widget: str, shadow: str) -> None:
    value = ss.get(widget) or ""
    if len(value) > TEXT_B_MAX:
        ss[widget] = value = value[:TEXT_B_MAX]
        ss["_text_b_cut"] = True
    ss[shadow] = value


def text_b(prefix: str, model) -> tuple[str, str | None]:
    """Text area(s) for text B (and its target, for an encoder-decoder model); their values."""
    widgets = {"_text_b": (f"{prefix}_text_b", _default_b(ss.get("text", ""))),
               "_tgt_b": (f"{prefix}_tgt_b", ss.get("tgt") or "")}
    for shadow, (widget, default) in widgets.items():
        if widget not in ss:
            ss[widget] = ss.get(shadow, default)
    st.text_area(t("tb_text"), key=f"{prefix}_text_b", height=80, help=t("tb_help"), on_change=_keep_b,
                 args=(f"{prefix}_text_b", "_text_b"))
    tgt = None
    if model.is_encoder_decoder:
        st.text_area(t("tb_tgt"), key=f"{prefix}_tgt_b", height=70, on_change=_keep_b,
                     args=(f"{prefix}_tgt_b", "_tgt_b"))
        tgt = ss[f"{prefix}_tgt_b"]
    if ss.pop("_text_b_cut", False):
        st.caption(t("tb_cut", n=f"{TEXT_B_MAX:,}"))
    return ss[f"{prefix}_text_b"], tgt


def check_b(model, text: str, tgt: str | None):
    """Text B prepared for the model, or None after a clear message."""
    if not text.strip():
        st.warning(t("tb_empty"), icon="✍️")
        return None
    if model.is_encoder_decoder and not (tgt or "").strip():
        st.warning(t("tb_tgt_empty"), icon="✍️")
        return None
    try:
        prep = prepare(model, text, tgt, allow_special=bool(ss.get("allow_special")))
    except Exception as exc:  # noqa: BLE001 - a text the model cannot read, a broken tokenizer: a message
        show_error(exc)
        return None
    if prep.src.truncated or (prep.tgt is not None and prep.tgt.truncated):
        st.info(t("tb_truncated", n=model.cfg.max_len), icon="✂️")
    return prep


# --- chips coloured by surprise -----------------------------------------------------------------------------------

def prob_colour(p: float) -> str:
    """Red (the model did not expect it) through yellow to green (it was sure)."""
    return f"hsl({120 * min(max(p, 0.0), 1.0):.0f}, 75%, 80%)"


def surprise_chips(labels: list[str], probs: list[float] | None, bits: list[float] | None, mark=()) -> None:
    """Tokens as chips coloured by p(actual token | the tokens before it) (none for the first, or without
    probabilities); positions in `mark` get a thick red border. User text is escaped."""
    chips, mark = [], set(mark)
    for i, tok in enumerate(labels):
        p = None if i == 0 or probs is None else probs[i - 1]
        colour = "#eeeeee" if p is None else prob_colour(p)
        tip = t("sur_chip_first") if p is None else t("sur_chip_hover", p=f"{p:.4f}", bits=f"{bits[i - 1]:.2f}")
        border = "2px solid #c0392b" if i in mark else "1px solid #bbb"
        data = "" if p is None else f" data-p='{p!r}'"
        chips.append(f"<span{data} title='{html.escape(f'#{i} · {tip}', quote=True)}' style='background:{colour};"
                     f"border:{border};border-radius:4px;padding:2px 4px;margin:2px;display:inline-block;"
                     f"font-family:monospace'>{html.escape(visible(tok))}</span>")
    st.html(f"<div style='line-height:2.2'>{''.join(chips)}</div>")


# --- the page -----------------------------------------------------------------------------------------------------

def kind_name(kind: str, model) -> str:
    return t("hd_kind_gpt_self") if not model.is_encoder_decoder else t(f"hd_kind_{kind}")


def selectors(model) -> tuple[str, int, int]:
    cfg, options = model.cfg, list(kinds(model))
    if ss.get("cmp_kind") not in options:
        ss.cmp_kind = ss.get("block") if ss.get("block") in options else options[-1]
    c1, c2, c3 = st.columns([3, 1, 1])
    kind = c1.selectbox(t("pt_kind"), options, key="cmp_kind", format_func=lambda k: kind_name(k, model))
    layer = c2.selectbox(t("pt_layer"), range(cfg.n_layers), key=f"cmp_layer_{cfg.n_layers}",
                         index=min(int(ss.get("layer", 0) or 0), cfg.n_layers - 1))
    head = c3.selectbox(t("pt_head"), range(cfg.n_heads), key=f"cmp_head_{cfg.n_heads}",
                        index=min(int(ss.get("head", 0) or 0), cfg.n_heads - 1))
    return kind, int(layer), int(head)


def side_view(model, side, name: str, other_labels: list[str], key: str, zmax: float) -> None:
    """One text's column: chips (tokens the other text lacks marked), loss, next token, the head's weights."""
    st.subheader(name)
    sur = side.surprise
    surprise_chips(side.labels, None if sur is None else sur.prob.tolist(), None if sur is None else sur.bits.tolist(),
                   mark=[i for i, x in enumerate(side.labels) if x not in set(other_labels)])
    m1, m2 = st.columns(2)
    m1.metric(t("cmp_loss"), "—" if sur is None else f"{sur.mean_loss:.4f}")
    m2.metric(t("cmp_ppl"), "—" if sur is None else f"{sur.perplexity:.4g}")
    nt = side.next_token
    names = axis_labels([visible(x) for x in token_labels(model, nt.ids)])
    fig = bars(names, nt.raw, title=t("cmp_next_title"), y_title=t("cmp_col_prob"), x_title=t("cmp_col_prob"),
               height=max(260, 24 * len(names) + 100), hover_format=".4f")
    fig.update_xaxes(range=[0, 1])
    chart(fig, f"cmp_next_{key}")
    q, k = axis_labels(side.query_labels), axis_labels(side.key_labels)
    chart(token_heatmap(side.weights.numpy(), q, k, title=t("cmp_attention_title"), zmin=0.0, zmax=zmax,
                        px_per_token=16, min_height=280, max_height=800,
                        hovertemplate="%{y} → %{x}: %{z:.4f}<extra></extra>"), f"cmp_att_{key}")


def differences(model, comp) -> None:
    d = comp.diff
    top = visible(token_labels(model, [d.top_id])[0])
    st.subheader(t("cmp_diff"))
    m1, m2, m3, m4 = st.columns(4)
    m1.metric(t("cmp_top", tok=top), f"{d.top_prob_b:.4f}", f"{d.top_prob_change:+.4f}", help=t("cmp_top_help"))
    m2.metric(t("cmp_tv"), f"{d.total_variation:.4f}", help=t("cmp_tv_help"))
    m3.metric(t("cmp_kl_ab"), f"{d.kl_ab:.4g}")
    m4.metric(t("cmp_kl_ba"), f"{d.kl_ba:.4g}")
    st.markdown(t("cmp_top_text", tok=top, pa=f"{d.top_prob_a:.4f}", pb=f"{d.top_prob_b:.4f}"))
    if d.only_a or d.only_b:
        shown = ", ".join(f"‘{visible(x)}’" for x in d.only_a) or "—"
        st.markdown(t("cmp_only", a=shown, b=", ".join(f"‘{visible(x)}’" for x in d.only_b) or "—"))
    else:
        st.markdown(t("cmp_same_tokens"))


def per_token(comp) -> None:
    """Per position: each text's token and the probability the model gave it; differing tokens marked."""
    a, b = comp.a, comp.b
    if a.surprise is None or b.surprise is None:
        st.caption(t("cmp_one_token"))
        return
    n = max(len(a.labels), len(b.labels))

    def col(side, i, what):
        if i >= len(side.labels):
            return None
        if what == "token":
            return visible(side.labels[i])
        return None if i == 0 else float(side.surprise.prob[i - 1])

    df = pd.DataFrame({
        t("cmp_col_pos"): list(range(n)),
        t("cmp_col_token_a"): [col(a, i, "token") for i in range(n)],
        t("cmp_col_p_a"): [col(a, i, "p") for i in range(n)],
        t("cmp_col_token_b"): [col(b, i, "token") for i in range(n)],
        t("cmp_col_p_b"): [col(b, i, "p") for i in range(n)],
    })
    df[t("cmp_col_diff")] = df[t("cmp_col_p_b")] - df[t("cmp_col_p_a")]
    df[t("cmp_col_same")] = [t("cmp_yes") if x == y else t("cmp_no") for x, y in
                             zip(df[t("cmp_col_token_a")], df[t("cmp_col_token_b")], strict=True)]
    table(df, "compare_surprise", formats={c: "%.4f" for c in (t("cmp_col_p_a"), t("cmp_col_p_b"), t("cmp_col_diff"))})


st.title(t("nav_compare"))
explain("cmp_intro")
st.caption(t("cmp_look"))
ctx = page_context()
model = ctx.model
text, tgt = text_b("cmp", model)
kind, layer, head = selectors(model)
if check_b(model, text, tgt) is None:
    st.stop()
try:
    found = comparison(*inputs(ctx), text, tgt, kind, layer, head)
except Exception as exc:  # noqa: BLE001 - a message, never a traceback
    show_error(exc)
    st.stop()
cut_note(found, ctx)
comp = found[0]

differences(model, comp)
zmax = 1.0
for col, side, other, name, key in zip(st.columns(2), (comp.a, comp.b), (comp.b, comp.a),
                                       (t("cmp_a"), t("cmp_b")), ("a", "b"), strict=True):
    with col:
        side_view(model, side, name, other.labels, key, zmax)
st.caption(t("cmp_chips_note"))
wa, wb = comp.a.weights.numpy(), comp.b.weights.numpy()
if wa.shape == wb.shape:
    delta = wb - wa
    lim = float(np.abs(delta).max()) or 1.0
    fig = token_heatmap(delta, axis_labels(comp.a.query_labels), axis_labels(comp.a.key_labels),
                        title=t("cmp_delta_title"), colorscale=DIVERGING, zmin=-lim, zmax=lim, zmid=0.0,
                        px_per_token=16, min_height=280, max_height=800,
                        hovertemplate="%{y} → %{x}: %{z:+.4f}<extra></extra>")
    chart(fig, "cmp_delta")
else:
    st.caption(t("cmp_delta_shape"))
st.subheader(t("cmp_per_token"))
per_token(comp)
export_panel(comp, "compare", ctx, text_b=text, target_b=tgt, kind=kind, layer=layer, head=head, top=TOP)
