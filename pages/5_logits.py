"""Page 4: one position's logits and softmax, temperature / top-k / top-p, and step-by-step generation."""
from dataclasses import replace

import pandas as pd
import streamlit as st

from transformer_core.analysis.kv_steps import cache_layout, cache_report
from transformer_core.analysis.next_token import GREEDY, Sampling, distribution, generate, top_ids
from transformer_core.analysis.next_word import FIRST_TOKENS, MAX_PIECES, next_words
from transformer_core.errors import SamplingError
from transformer_core.text.inputs import end_of_text_id, real_ids, sequence_labels, token_labels, unknown_id
from transformer_core.text.tokenizer import tokens_of
from ui.errors import error_text, show_error
from ui.figures import bars, lines, md_quoted, quoted, ranked_labels, visible
from ui.guidance import look_for
from ui.i18n import sentences, t
from ui.own_words import number_box
from ui.sampling_view import MAX_SHOWN, RANGES, in_browser, sampling_view, view_data
from ui.session import page_context, through_app
from ui.state import generated, set_generated, sync_url
from ui.widgets import chart, count_text, explain, table, token_chips

through_app()

st.title(t("nav_logits"))
explain("log_intro", r"\operatorname{softmax}(z_i / T) = \frac{e^{z_i / T}}{\sum_j e^{z_j / T}}")
ctx = page_context()
ss = st.session_state
model, cfg = ctx.model, ctx.model.cfg
model_key, device = ctx.key, ctx.device
if ctx.key.startswith("preset:"):
    st.info(t("log_random_note"), icon="🎲")

dec = ctx.trace.decoder_ids.tolist()  # model ids of the decoder-side sequence (incl. generated ones)
src = ctx.trace.src_ids[0].tolist()
n_gen = len(generated())
gen_note = f" · {count_text('log_generated', n_gen)}" if n_gen else ""
st.markdown(count_text("log_sequence", len(dec)) + gen_note)
token_chips(tokens_of(real_ids(model, dec), cfg.encoding))

labels = sequence_labels(model, dec)
if len(dec) > 1:  # the key carries the length, so a grown sequence opens on its new last position
    pos = st.slider(t("log_position"), 0, len(dec) - 1, len(dec) - 1, key=f"log_pos_{len(dec)}")
else:
    pos = 0
    st.caption(t("log_one_position"))
st.caption(t("log_position_caption", pos=pos, tok=md_quoted(labels[pos]), next=pos + 1))

# the controls' values may come from a shared link: defaults are set once, then the widgets own them
for key, default, lo, hi in (("log_T", *RANGES["T"][:3]), ("log_topk", 0, 0, cfg.vocab_size),
                             ("log_topp", *RANGES["p"][:3]), ("log_seed", 0, 0, 2**31 - 1)):
    ss[key] = min(max(ss.get(key, default), lo), hi)
unk = unknown_id(model)  # a compacted vocabulary's ⟨unk⟩ stands for every token it lacks: a learner may rule it out


def rule_now(greedy: bool = False) -> Sampling:
    """The rule the controls set now (read from them: the distribution below redraws without the rest of the page,
    so a button of the generation part reads the controls at its click, not as they were when it was drawn)."""
    banned = (unk,) if unk is not None and ss.get("log_no_unk", True) else ()
    if greedy:
        return replace(GREEDY, banned=banned)
    return Sampling(temperature=float(ss.log_T), top_k=int(ss.log_topk), top_p=float(ss.log_topp), banned=banned)


@st.fragment
def distribution_view(row, random_init: bool) -> None:
    """Temperature, top-k, top-p and the distribution they give from `row`, the chosen position's logits: a change
    reruns only this part (no forward, no sidebar, nothing below sent again), and the link records it. A vocabulary
    the browser takes is drawn there instead, where a change redraws before any run (browser_distribution)."""
    st.subheader(t("log_controls"))
    if in_browser(row.numel()):
        browser_distribution(row, random_init)
        return
    c1, c2, c3, c4 = st.columns(4)
    (_, t_lo, t_hi, t_step), (_, p_lo, p_hi, p_step) = RANGES["T"], RANGES["p"]
    c1.slider(t("log_temperature"), t_lo, t_hi, step=t_step, key="log_T", help=t("log_temperature_help"))
    number_box(c2, t("log_topk"), 0, cfg.vocab_size, step=1, key="log_topk", help=t("log_topk_help"))
    c3.slider(t("log_topp"), p_lo, p_hi, step=p_step, key="log_topp", help=t("log_topp_help"))
    shown = number_box(c4, t("log_show"), 1, 100, 10, 1, key="log_show")
    if unk is not None:
        st.checkbox(t("log_no_unk"), True, key="log_no_unk", help=t("log_no_unk_help"))
    sync_url()
    try:
        dist = distribution(row, rule_now(), top=int(shown))
    except SamplingError as exc:
        st.warning(f"{t('log_bad_sampling')} {error_text(exc)}", icon="🎛️")
        return
    except Exception as exc:  # noqa: BLE001 - never a traceback
        show_error(exc)
        return
    m1, m2, m3 = st.columns(3)
    m1.metric(t("log_entropy"), f"{dist.entropy:.4f}")
    m2.metric(t("log_sum"), f"{dist.total:.6f}")
    m3.metric(t("log_kept"), dist.kept)
    names = token_labels(model, dist.ids, dec)
    if not random_init:
        look_for("logits", after=md_quoted(labels[pos]), tok=md_quoted(names[0]), p=dist.probs[0])
    chart(bars(ranked_labels(names), dist.probs, title=t("log_chart"), y_title=t("col_prob"), x_title=t("col_prob"),
               secondary=(t("col_prob_raw"), dist.raw), height=max(260, 26 * len(names) + 100), x_format="~%",
               hover_format=".4~g"), "log_probs")
    st.subheader(t("log_table"))
    table(pd.DataFrame({
        t("col_token"): [visible(x) for x in names],
        t("col_id"): real_ids(model, dist.ids),
        t("col_logit"): dist.logits,
        t("col_prob"): dist.probs,
        t("col_prob_raw"): dist.raw,
    }), "log_top", formats={t("col_logit"): "%.4f", t("col_prob"): "%.4g", t("col_prob_raw"): "%.4g"})
    next_word_table(dec[: pos + 1], src if model.is_encoder_decoder else None, len(names))


def browser_distribution(row, random_init: bool) -> None:
    """Temperature, top-k and top-p answered in the browser (ui.sampling_view): the whole row goes once, a change
    redraws there first, then reaches the server in a short run of this fragment (which records it in the link).
    How many tokens are shown and the ⟨unk⟩ rule are the server's."""
    c1, c2 = st.columns(2)
    shown = int(number_box(c1, t("log_show"), 1, 100, 10, 1, key="log_show"))
    if unk is not None:
        c2.checkbox(t("log_no_unk"), True, key="log_no_unk", help=t("log_no_unk_help"))
    sync_url()
    order = top_ids(row, MAX_SHOWN)
    names = token_labels(model, order, dec)
    look = None if random_init else {"after": quoted(labels[pos]), "tok": quoted(names[0])}
    sampling_view(view_data(row, names, real_ids(model, order), order, banned=rule_now().banned, shown=shown,
                            look=look))
    next_word_table(dec[: pos + 1], src if model.is_encoder_decoder else None, shown)


@st.cache_data(show_spinner=False, max_entries=64, ttl=600)
def words_after(key: str, device: str, prefix: tuple, src: tuple | None, top: int):
    from ui import cache

    model, _ = cache.get_model(key, device)
    return next_words(model, list(prefix), None if src is None else list(src), top)


def next_word_table(prefix: list[int], src_ids: list[int] | None, top: int) -> None:
    """The next word, pieces joined (" m" + "at" = " mat"), with the probability of writing it."""
    st.subheader(t("log_words_title"))
    try:
        words = words_after(model_key, device, tuple(prefix), None if src_ids is None else tuple(src_ids), top)
    except Exception as exc:  # noqa: BLE001 - never a traceback
        show_error(exc)
        return
    table(pd.DataFrame({
        t("col_word"): [visible(w.text) + ("" if w.complete else " …") for w in words],
        t("col_pieces"): [" + ".join(quoted(x) for x in token_labels(model, w.pieces[0], dec)) for w in words],
        t("col_prob"): [w.prob for w in words],
    }), "log_words", formats={t("col_prob"): "%.4g"})
    st.caption(t("log_words_caption", n=FIRST_TOKENS, k=MAX_PIECES))


distribution_view(ctx.trace.logits_at(pos).clone(), bool(ctx.card.get("random_init")))


def _append(model, src: list[int], dec: list[int], steps: int) -> None:
    """Button callback (runs before the rerun, so every page already sees the new tokens)."""
    greedy = ss.get("log_greedy", True) is True
    try:
        new = generate(model, dec, steps, rule_now(greedy), src=src if model.is_encoder_decoder else None,
                       seed=int(ss.get("log_seed", 0)))
    except Exception as exc:  # noqa: BLE001 - shown on the rerun, never a traceback
        ss["_log_flash"] = ("error", error_text(exc))
        return
    set_generated(list(generated()) + new)
    text = t("log_added", toks=" ".join(md_quoted(x) for x in token_labels(model, new))) if new else ""
    if new and new[-1] == end_of_text_id(model):
        ss["_log_flash"] = ("info", sentences(text, t("log_stopped_eot")))
    else:
        full_note = sentences(text, t("log_full", n=model.cfg.max_len))
        ss["_log_flash"] = ("warning", full_note) if len(new) < steps else ("success", text)


def _undo() -> None:
    ids = list(generated())
    set_generated(ids[:-1])
    if not ids:
        ss["_log_flash"] = ("info", t("log_nothing_to_undo"))


st.subheader(t("log_generate"))
st.markdown(t("log_gen_intro"))
g1, g2 = st.columns(2)
greedy = g1.radio(t("log_mode"), [True, False], key="log_greedy", horizontal=True,
                  format_func=lambda g: t("log_greedy") if g else t("log_sample")) is True
number_box(g2, t("log_seed"), 0, 2**31 - 1, step=1, key="log_seed", help=t("log_seed_help"), disabled=greedy)
full = len(dec) >= cfg.max_len
ended = bool(n_gen) and dec[-1] == end_of_text_id(model)  # it wrote the end of the text: nothing follows
b1, b2, b3 = st.columns(3)
blocked = full or ended  # a sampling rule the controls cannot give is said by the callback (as a message)
b1.button(t("log_next"), key="log_next", on_click=_append, args=(model, src, dec, 1), disabled=blocked)
b2.button(t("log_steps"), key="log_five", on_click=_append, args=(model, src, dec, 5), disabled=blocked)
b3.button(t("log_undo"), key="log_undo", on_click=_undo, disabled=not n_gen)
flash = ss.pop("_log_flash", None)
if flash:
    getattr(st, flash[0])(flash[1])
elif full:
    st.warning(t("log_full", n=model.cfg.max_len), icon="🧱")
elif ended:
    st.info(t("log_stopped_eot"), icon="🏁")


@st.cache_data(show_spinner=False, max_entries=32, ttl=600)
def kv_report(key: str, device: str, dec: tuple, src: tuple | None):
    from ui import cache

    model, _ = cache.get_model(key, device)
    return cache_report(model, list(dec), None if src is None else list(src))


def kv_section() -> None:
    """The cache the last generation step left (its layout read from the config: no forward), its growth, and, on
    request, a cached step against a full recompute measured now (a few forwards: not on every rerun of a room)."""
    st.subheader(t("kv_title"))
    if not n_gen:
        st.caption(t("kv_none"))
        return
    st.markdown(t("kv_intro"))
    cross = model.is_encoder_decoder
    layout = cache_layout(model, len(dec), len(src) if cross else None)
    table(pd.DataFrame({
        t("kv_col_layer"): [x.layer for x in layout],
        t("kv_col_self"): [" × ".join(map(str, x.self_shape)) for x in layout],
        **({t("kv_col_cross"): [" × ".join(map(str, x.cross_shape)) for x in layout]} if cross else {}),
        t("kv_col_bytes"): [x.nbytes for x in layout],
    }), "kv_cache", formats={t("kv_col_bytes"): "localized"})  # 67,584, not 67584
    st.caption(t("kv_total", bytes=f"{sum(x.nbytes for x in layout):,}", n=len(layout), t=len(dec)))
    start, per_token = len(dec) - n_gen, layout[0].self_nbytes * len(layout) // max(1, len(dec))
    fig = lines(list(range(max(1, start), len(dec) + 1)),
                {t("kv_axis_bytes"): [n * per_token for n in range(max(1, start), len(dec) + 1)]},
                title=t("kv_growth_title"), x_title=t("kv_axis_tokens"), y_title=t("kv_axis_bytes"), height=260,
                mode="lines+markers",  # whole tokens only on the x axis
                x_axis={"tickformat": "d", "dtick": max(1, -(-(len(dec) - start + 1) // 10))},
                y_axis={"rangemode": "tozero", "tickformat": ",d"})  # from 0: growth drawn to its true scale
    chart(fig, "kv_growth")
    if not st.toggle(t("kv_measure"), key="kv_measure"):
        return
    try:
        rep = kv_report(model_key, device, tuple(dec), tuple(src) if cross else None)
    except Exception as exc:  # noqa: BLE001 - never a traceback
        show_error(exc)
        return
    k1, k2, k3 = st.columns(3)
    k1.metric(t("kv_cached"), f"{rep.cached_ms:.1f} ms")
    k2.metric(t("kv_full"), f"{rep.full_ms:.1f} ms")
    k3.metric(t("kv_positions", n=rep.length), f"1 / {rep.length}")
    st.caption(t("kv_same", diff=f"{rep.max_abs_diff:.1e}")
               + ("" if rep.cached_ms < 0.8 * rep.full_ms else " " + t("kv_small_note", n=rep.length)))


kv_section()
del ctx  # the distribution's fragment keeps this script's globals until the next full run: not the trace with them
