"""Ablation and patching, live: switch off heads and FFNs and see the next token and the loss change against the
intact model; sweep every head and FFN for a metric on any answer; patch one head's output from a second text, and
patch the clean text's activations into a corrupted one per layer × position and per head. Every edit runs in this
request's own intervention context: the shared model is never changed."""
import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st

from transformer_core.analysis.answers import MAX_TOKENS, answer_of_text, score_answers
from transformer_core.analysis.blocks import kinds, sequence, sides
from transformer_core.analysis.corruptions import next_word, random_tokens, repeated_name, replace_word, words
from transformer_core.analysis.head_effects import (
    CHUNK_BYTES,
    METRICS,
    head_effects,
    head_patching,
    residual_effects,
)
from transformer_core.analysis.interventions import ABLATION_MODES, ALIGNMENTS, ablate, patch, patch_source
from transformer_core.errors import InputError
from transformer_core.model.memory import KEEP_NONE
from transformer_core.model.transformer import param_counts
from transformer_core.text.inputs import sequence_labels, token_labels
from ui.answers import Picked, answer_picker, names_note, preset_names, several_tokens, spelled
from ui.errors import show_error
from ui.figures import Readable, axis_labels, bars, quoted, ranked_labels, signed_format, token_heatmap, visible
from ui.guidance import try_these
from ui.head_grid import head_grid
from ui.i18n import sentences, t
from ui.nav import open_head
from ui.own_words import number_box, pick_many
from ui.session import page_context, through_app
from ui.tools import (
    TEXT_B_MAX,
    check_b,
    cut_note,
    export_panel,
    head_rows,
    inputs,
    kind_name,
    prep_for,
    prepared,
    reserve,
    text_b,
)
from ui.widgets import chart, clicked, count_text, delta, explain, table, within

through_app()
ss = st.session_state
AUTO_SWEEP_WORK = 2e9  # parameters × parts knocked out: below it the sweep runs with the page (the default: 0.2e9)
PRESETS = ("swap", "random", "hand")  # where text B comes from: two words swapped, random tokens, typed by hand


@st.cache_data(show_spinner=False, max_entries=64, ttl=1800)
def ablation_of(key, device, text, tgt, special, gen, heads: tuple, ffns: tuple, mode: str):
    model, prep = prep_for(key, device, text, tgt, special, gen, KEEP_NONE)
    with reserve(model, prep, keep=KEEP_NONE):
        return ablate(model, prep, list(heads), list(ffns), mode=mode), prep.longest, prep.cut_from


@st.cache_data(show_spinner=False, max_entries=64, ttl=1800)
def effects_of(key, device, text, tgt, special, gen, metric: str, ids_a: tuple | None, ids_b: tuple | None,
               mode: str):
    model, prep = prep_for(key, device, text, tgt, special, gen, KEEP_NONE)
    with reserve(model, prep, keep=KEEP_NONE, batches_of=CHUNK_BYTES):
        return head_effects(model, prep, metric, ids_a, ids_b, mode=mode), prep.longest, prep.cut_from


@st.cache_data(show_spinner=False, max_entries=64, ttl=1800)
def scores_of(key, device, text, tgt, special, gen, answers: tuple):
    """Each answer's summed log-probability after the text (one forward of the text and its tokens but the last)."""
    model, prep = prep_for(key, device, text, tgt, special, gen, KEEP_NONE)
    with reserve(model, prep, keep=KEEP_NONE, at_least=prep.longest + MAX_TOKENS):
        return score_answers(model, prep, [list(ids) for ids in answers]), prep.longest, prep.cut_from


@st.cache_data(show_spinner=False, max_entries=32, ttl=1800)
def patching_of(key, device, text, tgt, special, gen, text_b, metric: str, ids_a, ids_b, what: str):
    """Text B (the corrupted text) run with text A's (the clean one's) activations: per layer × position of the
    residual stream (what="residual") or per head (what="heads")."""
    model, prep = prep_for(key, device, text, tgt, special, gen, KEEP_NONE)
    prep_b = prepared(model, text_b, None, special, KEEP_NONE)
    sweep = residual_effects if what == "residual" else head_patching
    with reserve(model, prep, prep_b, keep=KEEP_NONE, batches_of=CHUNK_BYTES):
        return sweep(model, prep_b, prep, metric, ids_a, ids_b), prep.longest, prep.cut_from


@st.cache_data(show_spinner=False, max_entries=32, ttl=1800)
def source_of(key, device, text_b, tgt_b, special, kind: str, layer: int):
    """Text B's side of a patch (its z at the block, its next token): kept while text A and the head change."""
    model, prep_b = prep_for(key, device, text_b, tgt_b, special, (), layer)
    with reserve(model, prep_b, keep=layer):
        return patch_source(model, prep_b, kind, layer)


@st.cache_data(show_spinner=False, max_entries=64, ttl=1800)
def patch_of(key, device, text, tgt, special, gen, text_b, tgt_b, kind: str, layer: int, head: int, align: str):
    model, prep = prep_for(key, device, text, tgt, special, gen, layer)
    prep_b = prepared(model, text_b, tgt_b, special, layer)
    source = source_of(key, device, text_b, tgt_b, special, kind, layer)
    with reserve(model, prep, keep=layer, batch=2):  # A intact and patched: one forward of two copies
        return patch(model, prep, prep_b, kind, layer, head, align=align, source=source), prep.longest, prep.cut_from


@dataclass(frozen=True)
class Choice:
    """The metric the sweeps measure and its answers (None where the metric needs none, or none could be read)."""

    metric: str
    a: Picked | None
    b: Picked | None

    @property
    def problem(self) -> str | None:
        """The key of what is missing before the metric can be measured, or None."""
        if self.metric == "loss":
            return None
        if self.a is None or (self.metric == "logit_diff" and self.b is None):
            return "ans_missing"
        if self.metric == "logit_diff" and self.a.answer.ids == self.b.answer.ids:
            return "he_same"
        return None

    def ids(self, which: str) -> tuple | None:
        """An answer's model ids, where the metric reads it."""
        needed = {"a": self.metric != "loss", "b": self.metric == "logit_diff"}[which]
        picked = getattr(self, which)
        return picked.answer.ids if needed and picked is not None else None

    def spec(self, which: str):
        """How the notebook code writes an answer (its text, or its model ids)."""
        needed = {"a": self.metric != "loss", "b": self.metric == "logit_diff"}[which]
        picked = getattr(self, which)
        return picked.spec if needed and picked is not None else None

    @property
    def multi(self) -> bool:
        """Is an answer the metric reads longer than one token?"""
        return any(len(ids or ()) > 1 for ids in (self.ids("a"), self.ids("b")))

    @property
    def label(self) -> str:
        if self.metric == "logit_diff" and self.multi:
            return t("he_metric_logit_diff_multi")
        return t(f"he_metric_{self.metric}")


def head_option(option: str, model) -> str:
    """A short name that fits a picker's chip whole ("L1 H3", "cross L1 H3"; the caption spells it out)."""
    kind, layer, head = option.split(":")
    short = t(f"iv_kind_short_{kind}") if model.is_encoder_decoder else ""
    return t("iv_head_short", kind=short, layer=layer, head=head)


def ffn_option(option: str, model) -> str:
    side, layer = option.split(":")
    return t("iv_ffn_name", side=t(f"iv_side_{side}") if model.is_encoder_decoder else t("iv_side_gpt"), layer=layer)


def moved_chart(model, eff, key: str, edited_name: str) -> None:
    """The tokens whose next-token probability moved most: intact and edited bars, and the same as a table."""
    names = ranked_labels(token_labels(model, [m[0] for m in eff.moved]))
    intact, edited = [m[1] for m in eff.moved], [m[2] for m in eff.moved]
    chart(bars(names, intact, title=t("iv_moved_title"), y_title=t("iv_intact"), x_title=t("iv_axis_prob"),
               secondary=(edited_name, edited), height=max(260, 26 * len(names) + 100), hover_format=".4f"), key)
    table(pd.DataFrame({t("iv_col_token"): names, t("iv_col_intact"): intact, t("iv_col_edited"): edited,
                        t("iv_col_change"): np.subtract(edited, intact)}),
          f"{key}_moved", formats={c: "%.4f" for c in (t("iv_col_intact"), t("iv_col_edited"), t("iv_col_change"))})


def summary(model, eff, key: str) -> None:
    """Loss and the intact top token's probability, intact vs edited, as a small table."""
    top = visible(token_labels(model, [eff.top_id])[0])
    loss = (np.nan, np.nan) if eff.loss_intact is None else (eff.loss_intact, eff.loss_edited)
    df = pd.DataFrame({
        t("iv_col_what"): [t("iv_row_loss"), t("iv_row_top", tok=top), t("iv_row_kl")],
        t("iv_col_intact"): [loss[0], eff.top_prob_intact, 0.0],
        t("iv_col_edited"): [loss[1], eff.top_prob_edited, eff.kl],
    })
    df[t("iv_col_change")] = df[t("iv_col_edited")] - df[t("iv_col_intact")]
    m1, m2, m3 = st.columns(3)
    m1.metric(t("iv_loss_change"), "—" if eff.loss_change is None else f"{eff.loss_change:+.4f}")
    m2.metric(t("iv_row_top", tok=top), f"{eff.top_prob_edited:.4f}",
              delta(eff.top_prob_edited - eff.top_prob_intact))
    m3.metric(t("iv_row_kl"), f"{eff.kl:.4g}")
    table(df, key, formats={c: "%.4f" for c in (t("iv_col_intact"), t("iv_col_edited"), t("iv_col_change"))})
    if eff.loss_intact is None:
        st.caption(t("iv_one_token"))
    for col, dist, name, which in zip(st.columns(2), (eff.intact, eff.edited), (t("iv_top_intact"), t("iv_top_edited")),
                                      ("intact", "edited"), strict=True):
        with col:
            st.markdown(f"**{name}**")
            table(pd.DataFrame({t("iv_col_token"): ranked_labels(token_labels(model, dist.ids)),
                                t("iv_col_prob"): dist.raw}), f"{key}_{which}_top", formats={t("iv_col_prob"): "%.4f"})


def heads_key(model_key: str) -> str:
    """The key of the heads-to-switch-off picker: one per model (its options are that model's heads)."""
    return f"iv_heads_{model_key}"


def pt_key(what: str, n: int) -> str:
    """The key of the patching layer / head picker for a model with n of them (a new range starts afresh)."""
    return f"iv_pt_{what}_{n}"


def ablation(ctx) -> None:
    model, cfg = ctx.model, ctx.model.cfg
    st.header(t("iv_title"))
    explain("iv_intro")
    try_these("ablation", dict(model="shipped:reverse", text="d a c b", tgt="= b c a",
                               picks={heads_key("shipped:reverse"): [f"cross:1:{h}" for h in range(4)]}),
              dict(model="shipped:repeat", text="d a c b g f d a c",
                   picks={heads_key("shipped:repeat"): ["dec_self:1:3"]}))
    heads = [f"{k}:{layer}:{h}" for k in kinds(model) for layer in range(cfg.n_layers) for h in range(cfg.n_heads)]
    ffns = [f"{s}:{layer}" for s in sides(model) for layer in range(cfg.n_layers)]
    c1, c2 = st.columns(2)
    picked_heads = pick_many(c1, t("iv_heads"), heads, key=heads_key(ctx.key),
                             format_func=lambda o: head_option(o, model))
    picked_ffns = pick_many(c2, t("iv_ffns"), ffns, key=f"iv_ffns_{ctx.key}",
                            format_func=lambda o: ffn_option(o, model))
    c1.caption(t("iv_short_note", kinds=t("iv_short_kinds") if model.is_encoder_decoder else ""))
    mode = st.radio(t("iv_mode"), ABLATION_MODES, key="iv_mode", horizontal=True,
                    format_func=lambda m: t(f"iv_mode_{m}"))
    if not picked_heads and not picked_ffns:
        st.info(t("iv_pick_first"), icon="👆")
        return
    head_list = tuple((k, int(layer), int(h)) for k, layer, h in (o.split(":") for o in picked_heads))
    ffn_list = tuple((s, int(layer)) for s, layer in (o.split(":") for o in picked_ffns))
    try:
        with st.spinner(t("ab_running")):
            found = ablation_of(*inputs(ctx), head_list, ffn_list, mode)
    except Exception as exc:  # noqa: BLE001 - a message, never a traceback
        show_error(exc)
        return
    cut_note(found, ctx)
    result = found[0]
    summary(model, result.effect, "ablation_summary")
    moved_chart(model, result.effect, "iv_ablate", t("iv_ablated"))
    st.caption(t("iv_loss_note"))
    export_panel(result, "ablate", ctx, heads=list(head_list), ffn_layers=list(ffn_list), mode=mode)




def answer_scores(ctx, choice: Choice) -> None:
    """How each answer is scored: its tokens, log p of each (read after the text and the answer's tokens before it),
    the sum, and p."""
    picked = [(name, p) for name, p in (("A", choice.a), ("B", choice.b)) if choice.ids(name.lower()) is not None]
    try:
        found = scores_of(*inputs(ctx), tuple(p.answer.ids for _, p in picked))
    except Exception as exc:  # noqa: BLE001 - no room after the text, and anything else: a message
        show_error(exc)
        return
    rows = list(zip(picked, found[0], strict=True))
    table(pd.DataFrame({
        t("ans_col_answer"): [f"{name}: {quoted(p.answer.text)}" for (name, p), _ in rows],
        t("ans_col_tokens"): [" | ".join(visible(x) for x in p.answer.labels) for (_, p), _ in rows],
        t("ans_col_each"): [", ".join(f"{x:.4f}" for x in s.logprobs) for _, s in rows],
        t("ans_col_sum"): [s.total for _, s in rows],
        t("ans_col_prob"): [s.prob for _, s in rows],
    }), "he_scores", formats={t("ans_col_sum"): "%.4f", t("ans_col_prob"): "%.4g"})
    st.caption(t("ans_multi_note") if choice.multi else t("ans_single_note"))


def effects(ctx) -> Choice:
    """Every head (and FFN) knocked out alone, one picture: which parts this prediction depends on. Returns the
    metric and answers picked (the patching sweeps measure the same)."""
    model, cfg = ctx.model, ctx.model.cfg
    st.header(t("he_title"))
    explain("he_intro")
    top = ctx.trace.logits_at(-1).float().topk(min(10, cfg.vocab_size)).indices.tolist()  # the model's top choices
    # an IOI text: the answers start as its two names (A the right one)
    names = preset_names(ss.get("text", ""), f"he_a_{ctx.key}", f"he_b_{ctx.key}")
    # answers of several tokens (two-character Chinese names) are scored by log p: the metric says so by name
    several = any(several_tokens(model, f"he_{w}_{ctx.key}") for w in "ab")
    c1, c2 = st.columns(2)
    metric = c1.radio(t("he_metric"), METRICS, key="he_metric", horizontal=True, format_func=lambda m: t(
        "he_metric_logit_diff_multi" if m == "logit_diff" and several else f"he_metric_{m}"))
    mode = c2.radio(t("iv_mode"), ABLATION_MODES, key="he_mode", format_func=lambda m: t(f"iv_mode_{m}"),
                    horizontal=True)
    ca, cb = st.columns(2)
    context = ctx.trace.decoder_ids.tolist()
    a = answer_picker(t("he_token_a"), f"he_a_{ctx.key}", model, top, index=0, context=context,
                      disabled=metric == "loss", container=ca)
    b = answer_picker(t("he_token_b"), f"he_b_{ctx.key}", model, top, index=1, context=context,
                      disabled=metric != "logit_diff", container=cb)
    choice = Choice(metric, a, b)
    names_note(names, a, b)
    if choice.problem:
        st.info(t(choice.problem), icon="👆")
        return choice
    if metric != "loss":
        answer_scores(ctx, choice)
    n_parts = len(kinds(model)) * cfg.n_layers * cfg.n_heads + cfg.n_layers
    if param_counts(model)["total"] * n_parts > AUTO_SWEEP_WORK and not st.toggle(t("he_run", n=n_parts), key="he_run"):
        return choice  # a big model: hundreds of forwards of it, on request (a small one runs at once)
    try:
        with st.spinner(t("he_running", n=n_parts)):
            found = effects_of(*inputs(ctx), metric, choice.ids("a"), choice.ids("b"), mode)
    except Exception as exc:  # noqa: BLE001 - a message, never a traceback
        show_error(exc)
        return choice
    cut_note(found, ctx)
    res = found[0]
    rows = [(k, layer) for k in res.heads for layer in range(cfg.n_layers)]
    last = list(res.heads)[-1]  # the decoder's FFN sits beside its last attention block of each layer
    z = np.array([list(res.heads[k][layer]) + [res.ffn[layer] if k == last else np.nan] for k, layer in rows],
                 dtype=np.float32)
    span = float(np.nanmax(np.abs(z))) or 1.0
    columns = [str(h) for h in range(cfg.n_heads)] + ["FFN"]
    ticks, block = head_rows(rows, model)
    at = [(h, i) for i in range(len(rows)) for h in range(cfg.n_heads)]  # each head's (column, row), row by row
    cells = [[kind_name(rows[i][0], model), rows[i][1], h, rows[i][0]] for h, i in at]
    fig = head_grid(z, ticks, columns, at, customdata=cells,
                    marker_text=[format(float(z[i, h]), signed_format(span)) for h, i in at],
                    hovertemplate=t("he_hover") + "<extra></extra>", colorscale="RdBu", zmin=-span, zmax=span, zmid=0,
                    texttemplate=f"%{{z:{signed_format(span)}}}" if len(columns) <= 17 else None,
                    colorbar=t("he_change"), x_title=t("hd_col_head"), y_title=block, marker_px=22, row_px=40)
    picked = clicked(fig, "he_grid", trace_name="heads")
    if picked is not None:
        open_head(str(picked[3]), int(picked[1]), int(picked[2]))
    kind, layer, head, change = res.largest()
    ffn = int(np.abs(res.ffn).argmax())
    said = t("he_summary", metric=choice.label, intact=Readable(res.intact), block=kind_name(kind, model),
             layer=layer, head=head, change=Readable(change), ffn=ffn, fchange=Readable(res.ffn[ffn]))
    needed = res.most_needed()
    if needed is not None and needed[:3] != (kind, layer, head):  # the head that moves it most works against it
        n_kind, n_layer, n_head, n_change = needed
        said = sentences(said, t("he_summary_needed_loss" if metric == "loss" else "he_summary_needed",
                                 block=kind_name(n_kind, model), layer=n_layer, head=n_head,
                                 change=Readable(n_change)))
    st.markdown(said)
    st.caption(t("he_click"))
    export_panel(res, "head_effects", ctx, metric=metric, token_a=choice.spec("a"), token_b=choice.spec("b"),
                 mode=mode)
    return choice


def _hand() -> None:
    """Text B was edited: it is the learner's own from now on (no preset overwrites it)."""
    ss.iv_b_preset = "hand"


def second_text(ctx) -> tuple[str, str | None, str | None]:
    """Text B from a preset (two words swapped, random tokens of the same length) or typed by hand; its text, its
    target (encoder-decoder) and, for a swap, the two words."""
    model, clean = ctx.model, ss.get("text", "")
    names = repeated_name(clean)
    if ss.get("iv_b_preset") not in PRESETS:  # a text B given elsewhere (Compare, a "Try it") is kept as typed
        ss.iv_b_preset = "hand" if "_text_b" in ss else "swap" if names else "random"
    preset = st.radio(t("cb_preset"), PRESETS, key="iv_b_preset", horizontal=True,
                      format_func=lambda p: t(f"cb_preset_{p}"), help=t("cb_preset_help"))
    tag = hashlib.sha1(clean.encode("utf-8", "replace")).hexdigest()[:10]  # a new text A: the pickers start afresh
    made, swapped = None, None
    try:
        if preset == "swap":
            found = words(clean)
            if not found:
                raise InputError("corrupt_no_words")
            c1, c2, c3 = st.columns([2, 2, 2])
            x = c1.selectbox(t("cb_swap_x"), found, index=found.index(names[0]) if names else 0, key=f"iv_b_x_{tag}")
            other = names[1] if names else next((w for w in found if w != x), "")
            y = within(c2.text_input(t("cb_swap_y"), value=other, key=f"iv_b_y_{tag}"), 60)
            every = c3.toggle(t("cb_swap_every"), key=f"iv_b_every_{tag}", help=t("cb_swap_every_help"))
            made, swapped = replace_word(clean, x, y, every=every), (x, y.strip())
            if names and (x, y.strip()) == names and not every:
                st.caption(t("cb_ioi_note", s=x, io=names[1]))
        elif preset == "random":
            seed = number_box(st, t("cb_seed"), 0, 10**6, 0, 1, key="iv_b_seed")
            made = random_tokens(model, len(ctx.prep.src.ids), int(seed))
            st.caption(t("cb_random_note", n=len(ctx.prep.src.ids)))
    except InputError as exc:
        show_error(exc)
    if made is not None:
        ss["iv_text_b"] = made[:TEXT_B_MAX]
    text, tgt = text_b("iv", model, edited=_hand)
    return text, tgt, swapped


def same_length(ctx, prep_b, swapped) -> bool:
    """Do text A and text B have the same number of tokens? If not, say so, and what still works."""
    if ctx.model.is_encoder_decoder:
        return True
    n_a, n_b = sequence(ctx.prep, "decoder").numel(), sequence(prep_b, "decoder").numel()
    if n_a == n_b:
        return True
    why = ""
    if swapped is not None:
        try:
            why = t("cb_lengths_words", x=spelled(answer_of_text(ctx.model, next_word(swapped[0]))),
                    y=spelled(answer_of_text(ctx.model, next_word(swapped[1]))))
        except InputError:
            why = ""
    st.warning(t("cb_lengths", a=n_a, b=n_b, why=why), icon="📏")
    return False


def patching(ctx, choice: Choice) -> None:
    model = ctx.model
    st.header(t("pt_title"))
    explain("pt_intro")
    # repeat has 2 layers of 4 heads: its pickers' keys
    try_these("patching", dict(model="shipped:repeat", text="d a c b g f d a c", text_b="e h k j e h k",
                               picks={"iv_b_preset": "hand", "iv_pt_kind": "dec_self", pt_key("layer", 2): 1,
                                      pt_key("head", 4): 3}))
    text, tgt, swapped = second_text(ctx)
    prep_b = check_b(model, text, tgt)
    if prep_b is None:
        return
    lined_up = same_length(ctx, prep_b, swapped)
    one_head(ctx, text, tgt)
    if not model.is_encoder_decoder:
        sweeps(ctx, text, choice, lined_up)


def one_head(ctx, text: str, tgt: str | None) -> None:
    """One head's output in A replaced by the same head's on text B."""
    model, cfg = ctx.model, ctx.model.cfg
    st.subheader(t("pt_one_title"))
    options = list(kinds(model))
    if ss.get("iv_pt_kind") not in options:
        ss.iv_pt_kind = options[-1]
    c1, c2, c3, c4 = st.columns([3, 1, 1, 3])
    kind = c1.selectbox(t("pt_kind"), options, key="iv_pt_kind", format_func=lambda k: kind_name(k, model))
    ss.setdefault(pt_key("layer", cfg.n_layers), cfg.n_layers - 1)  # the last layer first; a "Try it" may set it
    layer = c2.selectbox(t("pt_layer"), range(cfg.n_layers), key=pt_key("layer", cfg.n_layers))
    head = c3.selectbox(t("pt_head"), range(cfg.n_heads), key=pt_key("head", cfg.n_heads))
    align = c4.radio(t("pt_align"), ALIGNMENTS, key="iv_pt_align", horizontal=True,
                     format_func=lambda a: t(f"pt_align_{a}"), help=t("pt_align_help"))
    try:
        with st.spinner(t("pt_running")):
            found = patch_of(*inputs(ctx), text, tgt, kind, int(layer), int(head), align)
    except Exception as exc:  # noqa: BLE001 - unequal lengths for "exact", and anything else: a message
        show_error(exc)
        return
    cut_note(found, ctx)
    result = found[0]
    b_top = visible(token_labels(model, [result.source_top_id])[0])
    p0, p1 = result.source_top_in_a
    m1, m2 = st.columns(2)
    m1.metric(t("pt_b_top", tok=b_top), f"{p1:.4f}", delta(p1 - p0))
    m2.metric(t("iv_row_kl"), f"{result.effect.kl:.4g}")
    st.markdown(count_text("pt_result", len(result.positions), tok=b_top, p0=f"{p0:.4f}", p1=f"{p1:.4f}"))
    summary(model, result.effect, "patch_summary")
    moved_chart(model, result.effect, "iv_patch", t("pt_patched"))
    export_panel(result, "patch", ctx, text_b=text, target_b=tgt, kind=kind, layer=int(layer), head=int(head),
                 align=align)


def sweeps(ctx, text_b: str, choice: Choice, lined_up: bool) -> None:
    """Text B (corrupted) run with text A's (clean) residual stream at one (layer, position), and with one head's
    output, at a time; normalised so that 0 is B's value and 1 is A's."""
    st.subheader(t("rp_title"))
    w = {k: rf"\text{{{t('rp_f_' + k)}}}" for k in ("normalised", "patched", "clean", "corrupted")}
    explain("rp_intro", rf"{w['normalised']} = \frac{{m({w['patched']}) - m({w['corrupted']})}}"
                        rf"{{m({w['clean']}) - m({w['corrupted']})}}")
    if choice.problem:
        st.info(t(choice.problem), icon="👆")
        return
    if choice.metric == "loss":
        st.info(t("rp_no_loss"), icon="👆")
        return
    if not lined_up:  # the note above says why and what still works
        st.caption(t("rp_needs_same"))
        return
    if not st.toggle(t("rp_run"), key="rp_run"):  # L × T and L × H forwards in batches: on request
        return
    for what in ("residual", "heads"):
        try:
            with st.spinner(t("rp_running")):
                found = patching_of(*inputs(ctx), text_b, choice.metric, choice.ids("a"), choice.ids("b"), what)
        except Exception as exc:  # noqa: BLE001 - no room for an answer, and anything else: a message
            show_error(exc)
            continue
        cut_note(found, ctx)
        (residual_view if what == "residual" else heads_view)(ctx, found[0], text_b, choice)


def _scale(res, choice: Choice) -> tuple[np.ndarray, bool]:
    """What a patching grid shows: the normalised effect, or (clean ≈ corrupted) the raw change, after a note."""
    norm = res.normalised()
    if norm is None:
        st.info(t("rp_norm_none", metric=choice.label, clean=Readable(res.source), corrupted=Readable(res.intact)),
                icon="⚖️")
        return res.grid, False
    return norm, True


def _grid_figure(z, rows, cols, res, normed: bool, hover_key: str, y_title: str | None = None):
    """A diverging heatmap of a patching grid; hover: the cell's value and the raw metric of the patched run."""
    span = max(1.0, float(np.abs(z).max())) if normed else (float(np.abs(z).max()) or 1.0)
    custom = np.stack([res.patched, res.patched - res.intact], axis=-1).astype(np.float32)
    value = t("rp_value_norm" if normed else "rp_value_raw")
    hover = t(hover_key, value=value, corrupted=f"{Readable(res.intact):.4f}", clean=f"{Readable(res.source):.4f}")
    return token_heatmap(z, rows, cols, colorscale="RdBu", zmin=-span, zmax=span, zmid=0, px_per_token=30,
                         min_height=200, customdata=custom.tolist(), hovertemplate=hover + "<extra></extra>",
                         colorbar={"title": {"text": value, "side": "right"}}, y_title=y_title)


def residual_view(ctx, res, text_b: str, choice: Choice) -> None:
    model = ctx.model
    z, normed = _scale(res, choice)
    n = z.shape[1]  # the text's positions (an answer's own tokens are read, never patched)
    a_labels = sequence_labels(model, ctx.prep.src_ids[0, :n].tolist())
    b_labels = sequence_labels(model, prepared(model, text_b, None, bool(ss.get("allow_special")),
                                               KEEP_NONE).src_ids[0, :n].tolist())
    pairs = zip(a_labels, b_labels, strict=True)
    cols = axis_labels([x if x == y else f"{x}→{y}" for x, y in pairs])  # clean→corrupted where they differ
    rows = [t("lens_row_embed")] + [t("lens_row_layer", layer=layer) for layer in range(model.cfg.n_layers)]
    chart(_grid_figure(z, rows, cols, res, normed, "rp_hover"), "rp_grid")
    r, p = np.unravel_index(np.abs(z).argmax(), z.shape)
    st.markdown(t("rp_summary", metric=choice.label, clean=Readable(res.source), corrupted=Readable(res.intact),
                  row=rows[r], pos=cols[p], value=Readable(z[r, p]),
                  what=t("rp_value_norm" if normed else "rp_value_raw")))
    if choice.multi:
        st.caption(t("rp_multi_note"))
    export_panel(res, "residual_patch", ctx, text=text_b, text_b=ss.get("text", ""), target_b=None,
                 metric=choice.metric, token_a=choice.spec("a"), token_b=choice.spec("b"))


def heads_view(ctx, res, text_b: str, choice: Choice) -> None:
    model = ctx.model
    st.markdown(f"**{t('hp_title')}**")
    z, normed = _scale(res, choice)
    rows, block = head_rows([("dec_self", layer) for layer in range(model.cfg.n_layers)], model)
    cols = [t("hp_head", h=h) for h in range(model.cfg.n_heads)]
    chart(_grid_figure(z, rows, cols, res, normed, "hp_hover", block), "hp_grid")
    layer, head = np.unravel_index(np.abs(z).argmax(), z.shape)
    st.markdown(t("hp_summary", layer=int(layer), head=int(head), value=Readable(z[layer, head]),
                  what=t("rp_value_norm" if normed else "rp_value_raw")))
    export_panel(res, "head_patch", ctx, text=text_b, text_b=ss.get("text", ""), target_b=None,
                 metric=choice.metric, token_a=choice.spec("a"), token_b=choice.spec("b"))


st.title(t("nav_intervene"))
ctx = page_context()
ablation(ctx)
measured = effects(ctx)
patching(ctx, measured)
