"""What the analysis pages (lens, heads, ablation and patching, compare, surprise, BPE) share: inputs cut to the
memory budget, a second text B, surprise chips, and the export panel (.npz and a notebook snippet)."""
from __future__ import annotations

import html

import streamlit as st

from service import budget
from transformer_core.analysis.export import export_npz, notebook_snippet
from transformer_core.errors import ExplorerError
from transformer_core.model.memory import KEEP_ALL
from transformer_core.text.inputs import prepare

from . import cache
from .errors import show_error
from .figures import prob_text, visible
from .i18n import t
from .widgets import download, file_stem

ss = st.session_state
CUTS_SHOWN: set[str] = set()  # this run's notes that a section read fewer tokens (each said once)
TEXT_B_MAX = 20_000  # characters kept of text B (the model reads at most max_len tokens of it anyway)


def export_panel(result, view: str, ctx=None, *, key: str = "", boxed: bool = True, **params) -> None:
    """The view's numbers as .npz and the notebook code that recomputes them (ctx: the page's model and text;
    without one, `params` say everything the snippet needs). `result` may be a function that computes it, called on
    the download click. boxed=False: in place, for a view that already sits in an expander (Streamlit allows no
    expander inside another)."""
    if ctx is not None:
        key = ctx.key.split(":")[-1]
        params = {"model": ctx.key.removeprefix("shipped:"), "text": ss.get("text", ""),
                  "target": ss.get("tgt") if ctx.model.is_encoder_decoder else None, **params}
    box = st.expander(t("xp_title"), key=f"xp_open_{view}", on_change="rerun") if boxed else st.container(border=True)
    if boxed and not box.open:  # built when opened: a code block's highlighter cost the FFN page 0.7 s of browser CPU
        return
    with box:
        if not boxed:
            st.markdown(f"**{t('xp_title')}**")
        try:
            model = None if ctx is None else ctx.model  # the .npz is built on the click, not on every run
            download(t("xp_npz"), lambda: export_npz(result() if callable(result) else result, model),
                     f"{file_stem('transformer-explorer', view, key)}.npz", "application/octet-stream",
                     key=f"xp_npz_{view}")
            code = notebook_snippet(view, **params)
        except ExplorerError:
            st.caption(t("xp_unavailable"))
            return
        st.caption(t("xp_snippet"))
        st.code(code, language="python")
        if ctx is not None and (ss.get("gen_ids") or ss.get("allow_special")):
            st.caption(t("xp_generated"))


def inputs(ctx) -> tuple:
    """What a cached computation depends on: model, device, text, target, special tokens, generated tokens."""
    tgt = ss.get("tgt") if ctx.model.is_encoder_decoder else None
    return ctx.key, ctx.device, ss.get("text", ""), tgt, bool(ss.get("allow_special")), tuple(ss.get("gen_ids") or ())


def prepared(model, text, tgt, special, keep, gen=()):
    """A text (and target) prepared for this model, cut to what one task may hold when the analysis keeps `keep`
    (KEEP_ALL, a layer, KEEP_NONE): service.budget.cut_to_fit."""
    return budget.cut_to_fit(model.cfg, prepare(model, text, tgt, allow_special=special, extra=gen), keep=keep)


def prep_for(key, device, text, tgt, special, gen, keep):
    """The shared model and the sidebar's input for it, cut to what fits (see prepared)."""
    model, _ = cache.get_model(key, device)
    return model, prepared(model, text, tgt, special, keep, gen)


def reserve(model, *preps, keep, at_least: int = 0, batches_of: int = 0, batch: int = 1):
    """Hold the memory of one traced forward of the longest of these inputs (or of `at_least` tokens, e.g. a probe
    sequence the analysis runs besides the text; `batch`: or an untraced forward of that many copies) while the
    analysis runs; an analysis that runs its forwards in batches of at most `batches_of` bytes (the sweeps of the
    Intervene page) holds that instead."""
    if batches_of:
        return budget.reserve(batches_of, "batched forwards")
    n_src = max(at_least, *(p.src_ids.size(1) for p in preps))
    n_tgt = None if preps[0].tgt_ids is None else max(at_least, *(p.tgt_ids.size(1) for p in preps))
    return budget.trace_reservation(model.cfg, n_src, n_tgt, keep=keep, batch=batch)


def probe_length(model, length: int, keep=KEEP_ALL) -> int:
    """A probe of `length` random tokens written twice, shortened to what one task may trace (at least 2)."""
    return max(2, min(length, budget.trace_tokens(model.cfg, 2 * length, keep=keep) // 2))


def cut_note(result, ctx) -> None:
    """Say so when the analysis read fewer tokens than the page's trace (a long text on a big model)."""
    _, n, total = result
    text = t("err.trace_cut", n=n, total=total, limit=budget.to_mb(budget.task_limit()))
    if total is not None and n < ctx.prep.longest and text not in CUTS_SHOWN:
        CUTS_SHOWN.add(text)
        st.warning(text, icon="✂️")


def _default_b(text: str) -> str:
    """A second text to start from: the sidebar's words in reverse order (its characters, for one word)."""
    words = text.split()
    return " ".join(reversed(words)) if len(words) > 1 else text[::-1]


B_PAGES = ("cmp", "iv")  # the prefixes of the pages with a text B (Compare; Ablation & patching), which share it


def set_text_b(text: str | None, tgt: str | None = None) -> None:
    """Give every page's text B (and its target) these values (call from a callback, before the widgets)."""
    for value, field in ((text, "text_b"), (tgt, "tgt_b")):
        if value is not None:
            ss[f"_{field}"] = value  # the shadow each page's box starts from
            for prefix in B_PAGES:
                ss.pop(f"{prefix}_{field}", None)


def _keep_b(widget: str, shadow: str, edited=None) -> None:
    value = ss.get(widget) or ""
    if len(value) > TEXT_B_MAX:
        ss[widget] = value = value[:TEXT_B_MAX]
        ss["_text_b_cut"] = True
    ss[shadow] = value
    if edited is not None:
        edited()


def text_b(prefix: str, model, edited=None) -> tuple[str, str | None]:
    """Text area(s) for text B (and its target, for an encoder-decoder model); their values. `edited`: called when
    the learner edits text B (a page that fills it from presets switches to "typed by hand")."""
    widgets = {"_text_b": (f"{prefix}_text_b", _default_b(ss.get("text", ""))),
               "_tgt_b": (f"{prefix}_tgt_b", ss.get("tgt") or "")}
    for shadow, (widget, default) in widgets.items():
        if widget not in ss:
            ss[widget] = ss.get(shadow, default)
    st.text_area(t("tb_text"), key=f"{prefix}_text_b", height=80, help=t("tb_help"), on_change=_keep_b,
                 args=(f"{prefix}_text_b", "_text_b", edited))
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


def prob_colour(p: float) -> str:
    """Red (the model did not expect it) through yellow to green (it was sure)."""
    return f"hsl({120 * min(max(p, 0.0), 1.0):.0f}, 75%, 80%)"


def surprise_chips(labels: list[str], probs: list[float] | None, bits: list[float] | None, mark=(),
                   expected: tuple[list[str], list[float]] | None = None) -> None:
    """Tokens as chips coloured by p(actual token | the tokens before it) (none for the first, or without
    probabilities); positions in `mark` get a thick red border; `expected` (labels, probabilities of the model's
    top-1 at each prediction) adds what it expected instead to each chip's hover. User text is escaped."""
    chips, mark = [], set(mark)
    for i, tok in enumerate(labels):
        p = None if i == 0 or probs is None else probs[i - 1]
        colour = "#eeeeee" if p is None else prob_colour(p)
        tip = t("sur_chip_first") if p is None else t("sur_chip_hover", p=prob_text(p), bits=f"{bits[i - 1]:.2f}")
        if p is not None and expected is not None:
            tip += " · " + t("sur_chip_expected", tok=visible(expected[0][i - 1]), p=prob_text(expected[1][i - 1]))
        border = "2px solid #c0392b" if i in mark else "1px solid #bbb"
        data = "" if p is None else f" data-p='{p!r}'"
        chips.append(f"<span{data} title='{html.escape(f'#{i} · {tip}', quote=True)}' style='background:{colour};"
                     f"border:{border};border-radius:4px;padding:2px 4px;margin:2px;display:inline-block;"
                     f"font-family:monospace'>{html.escape(visible(tok))}</span>")
    st.html(f"<div style='line-height:2.2'>{''.join(chips)}</div>")


def kind_name(kind: str, model) -> str:
    return t("hd_kind_gpt_self") if not model.is_encoder_decoder else t(f"hd_kind_{kind}")


def head_rows(rows: list[tuple[str, int]], model) -> tuple[list[str], str]:
    """The row labels of a grid of heads, one row per (block kind, layer), and its y axis title: "layer N" under the
    block's name where every row is of one block (the name on each row took two thirds of a phone's width from the
    squares), else "<block> · layer N" and no title."""
    if len({kind for kind, _ in rows}) == 1:
        return [t("hd_row_layer", layer=layer) for _, layer in rows], kind_name(rows[0][0], model)
    return [t("hd_row", block=kind_name(kind, model), layer=layer) for kind, layer in rows], ""
