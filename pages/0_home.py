"""The whole model in one picture, for the learner's text: every block with its live tensor shape and a small live
summary; a click on a block opens its page (on that layer and block)."""
import streamlit as st

from transformer_core.analysis.architecture import NORM_NAMES, vocab_parts
from transformer_core.analysis.next_token import distribution
from transformer_core.analysis.residual import active_fraction, stream, sublayers
from transformer_core.model.transformer import param_counts
from transformer_core.text.inputs import token_labels
from ui import cache
from ui.figures import visible
from ui.guidance import look_for
from ui.i18n import lang, t
from ui.model_map import model_map, scroll_style
from ui.nav import link, switch
from ui.session import page_context, through_app
from ui.widgets import clicked, count_text, in_rows

through_app()
ss = st.session_state
ROW_H, BOX_H, BOX_W, GAP = 1.6, 1.05, 1.9, 0.3
KIND = {"enc_self": "attn", "dec_self": "attn", "cross": "cross", "enc_ffn": "ffn", "dec_ffn": "ffn"}


def shown_layers(n: int) -> list[int | None]:
    """Every layer up to 8; beyond, the first three, a gap (None), and the last three."""
    return list(range(n)) if n <= 8 else [0, 1, 2, None, n - 3, n - 2, n - 1]


def stack_blocks(side: str, x0: float, y0: float, trace, cfg) -> tuple[list[dict], list[tuple[str, str]], float]:
    """The boxes of one stack (embeddings, then one row per layer) from (x0, y0); returns blocks, arrows, bottom."""
    steps = {(s.layer, s.sublayer): s for s in stream(trace, side, cfg.n_layers)}
    subs = sublayers(trace, side)
    row_w = len(subs) * 2 * (BOX_W + GAP)
    emb = steps[(None, "embed")]
    ids = trace.src_ids if side == "encoder" else trace.decoder_ids[None]
    blocks = [{"id": f"{side}-tokens", "x": x0 + row_w / 2, "y": y0, "w": row_w * 0.8, "h": 0.8, "kind": "text",
               "title": t("map_tokens", side=t(f"map_side_{side}")),
               "detail": t("map_tokens_detail", n=ids.size(1), enc=cfg.encoding), "page": "tokenizer"},
              {"id": f"{side}-embed", "x": x0 + row_w / 2, "y": y0 + ROW_H, "w": row_w * 0.8, "h": BOX_H,
               "kind": "embed", "title": t("map_embed"),
               "detail": t("map_shape_norm", shape=shape(trace.shape("embed", side=side)), norm=float(emb.norm.mean())),
               "page": "embeddings"}]
    arrows, skips = [(f"{side}-tokens", f"{side}-embed")], []
    where = {b["id"]: b for b in blocks}
    prev, y = f"{side}-embed", y0 + 2 * ROW_H
    for layer in shown_layers(cfg.n_layers):
        if layer is None:
            blocks.append({"id": f"{side}-gap", "x": x0 + row_w / 2, "y": y, "w": row_w * 0.8, "h": 0.6,
                           "kind": "norm", "title": t("map_more_layers", n=cfg.n_layers - 6), "detail": "",
                           "page": "ffn"})
            where[blocks[-1]["id"]] = blocks[-1]
            arrows.append((prev, f"{side}-gap"))
            prev, y = f"{side}-gap", y + ROW_H
            continue
        x = x0 + (BOX_W + GAP) / 2
        for sub in subs:
            step = steps.get((layer, sub))
            block_id, norm_id = f"{side}-{layer}-{sub}", f"{side}-{layer}-{sub}-norm"
            if sub.endswith("ffn"):
                frac = active_fraction(trace, side, layer)
                detail = t("map_ffn_detail", layer=layer, d=cfg.d_ffn, active=(frac or 0) * 100)
                title, page = t("map_ffn"), f"ffn:{layer}"
            else:
                added = float(step.added.mean()) if step is not None and step.added is not None else 0.0
                detail = t("map_attn_detail", layer=layer, h=cfg.n_heads, added=added)
                title, page = t(f"map_{sub}"), f"attention:{layer}:{sub}"
            blocks.append({"id": block_id, "x": x, "y": y, "w": BOX_W, "h": BOX_H, "kind": KIND[sub], "title": title,
                           "detail": detail, "page": page})
            norm = float(step.norm.mean()) if step is not None else 0.0
            blocks.append({"id": norm_id, "x": x + BOX_W + GAP, "y": y, "w": BOX_W, "h": BOX_H, "kind": "norm",
                           "title": t("map_add" if cfg.norm_first else "map_addnorm"),
                           "detail": t("map_norm_detail", layer=layer, norm=norm),
                           "page": f"ffn:{layer}"})
            where[norm_id] = blocks[-1]
            arrows += [(prev, block_id), (block_id, norm_id)]
            skips.append(residual_path(blocks[-2], blocks[-1], same_row=abs(where[prev]["y"] - y) < 0.1))
            prev, x = norm_id, x + 2 * (BOX_W + GAP)
        y += ROW_H
    return blocks, arrows + skips, y


def residual_path(sub: dict, norm: dict, same_row: bool) -> list[tuple[float, float]]:
    """The residual connection around one sublayer: it leaves the sublayer's input before the box (in the gap on
    its left, or on the arrow coming down from the row above), passes over the box and enters Add & Norm from the
    top, where x + sublayer(x) is added."""
    over = sub["y"] - sub["h"] / 2 - 0.08  # above the box, below the lane of the row gap (cross-attention's memory)
    fork = (sub["x"] - sub["w"] / 2 - GAP / 2, sub["y"]) if same_row else (sub["x"], over)
    start = [fork, (fork[0], over)] if same_row else [fork]
    return ["residual", *start, (norm["x"], over), (norm["x"], norm["y"] - norm["h"] / 2)]


def shape(s) -> str:
    return "×".join(str(d) for d in s) if s else "—"


def vocab_text(cfg) -> str:
    """The logits' last axis, id by id: "2,048 tokens of cl100k_2k + 5 special tokens of cl100k_base (…)"."""
    v = vocab_parts(cfg)
    parts = [t("vocab_ordinary", n=f"{v.ordinary:,}", enc=v.encoding)]
    if v.special:
        parts.append(count_text("vocab_special", len(v.special), base=v.base,
                                names=", ".join(f"`{name}`" for name in v.special)))
    if v.unknown:
        parts.append(t("vocab_unknown"))
    if v.unused:
        parts.append(t("vocab_unused", n=f"{v.unused:,}", enc=v.encoding))
    return " + ".join(parts)


def headline_figures(trace, cfg, model, params: int, word: str, p: float) -> dict[str, str]:
    """One figure of each step for this text, the link to the step's page carries it."""
    n = trace.src_ids.size(1)
    side = "decoder" if not model.is_encoder_decoder else "encoder"
    fire = [f for f in (active_fraction(trace, side, layer) for layer in range(cfg.n_layers)) if f is not None]
    return {"tokenizer": count_text("home_fig_tokens", n),
            "embeddings": t("home_fig_embed", shape=shape(trace.shape("embed", side=side))),
            "attention": t("home_fig_attention", layers=cfg.n_layers, heads=cfg.n_heads, n=n),
            "ffn": (count_text("home_fig_ffn", len(fire), pct=100 * sum(fire) / len(fire)) if fire
                    else t("home_fig_ffn_units", d=f"{cfg.d_ffn:,}")),
            "logits": t("home_fig_logits", tok=word, p=p),
            "model": t("home_fig_params", n=f"{params:,}")}


def on_click(target: str) -> None:
    """Open a block's page; an attention or FFN block opens on its layer (and block)."""
    name, *rest = target.split(":")
    if name == "attention" and rest:
        ss.layer, ss.block = int(rest[0]), rest[1]
        ss.mask_mode = None  # the block's own default mask
    if name == "ffn" and rest:
        ss.ffn_layer = int(rest[0])
    switch(name)


st.title(t("app_title"))
st.markdown(t("home_intro", box=t("input_text")))  # the box is below the list of pages: the sentence says so
ctx = page_context()
cfg, trace, model = ctx.model.cfg, ctx.trace, ctx.model
description = ctx.card.get("description")
if isinstance(description, dict):
    st.info(description.get(lang()) or description.get("en", ""), icon=":material/school:")

blocks, arrows, bottom = [], [], 0.0
x = 0.0
if model.is_encoder_decoder:
    blocks, arrows, bottom = stack_blocks("encoder", 0.0, 0.5, trace, cfg)
    x = len(sublayers(trace, "encoder")) * 2 * (BOX_W + GAP) + 0.8
    blocks.append({"id": "memory", "x": x / 2 - 0.4, "y": bottom, "w": 3.0, "h": 0.8, "kind": "embed",
                   "title": t("map_memory"), "detail": shape(trace.shape("stack_out", side="encoder")),
                   "page": "attention:0:cross"})
    arrows.append((blocks[-2]["id"], "memory"))
    memory = blocks[-1]
dec_blocks, dec_arrows, dec_bottom = stack_blocks("decoder", x, 0.5, trace, cfg)
blocks += dec_blocks
arrows += dec_arrows
if model.is_encoder_decoder:
    cross = next(b for b in dec_blocks if b["id"].endswith("-cross"))
    lane, gap_y = x - 0.4, cross["y"] - ROW_H / 2 + 0.12  # between the stacks, then along the gap above the row
    arrows.append([(memory["x"] + memory["w"] / 2, memory["y"]), (lane, memory["y"]), (lane, gap_y),
                   (cross["x"], gap_y), (cross["x"], cross["y"] - cross["h"] / 2)])
dec_w = len(sublayers(trace, "decoder")) * 2 * (BOX_W + GAP)
top = distribution(trace.logits_at(-1), top=1)
word = visible(token_labels(model, top.ids)[0])
out_x, y = x + dec_w / 2, dec_bottom
blocks += [{"id": "logits", "x": out_x, "y": y, "w": dec_w * 0.8, "h": BOX_H, "kind": "out",
            "title": t("map_logits" + ("_norm" if cfg.final_norm else "")),
            "detail": shape(trace.logits_shape), "page": "logits"},
           {"id": "softmax", "x": out_x, "y": y + ROW_H, "w": dec_w * 0.8, "h": BOX_H, "kind": "out",
            "title": t("map_softmax"), "detail": t("map_softmax_detail", tok=word, p=top.probs[0]), "page": "logits"}]
arrows += [(dec_blocks[-1]["id"], "logits"), ("logits", "softmax")]
width = max(x + dec_w, 6.0)
height = max(b["y"] + b["h"] / 2 for b in blocks) + 0.3
st.subheader(t("map_title"))
look_for("map_pre" if cfg.norm_first else "map")
with st.container(key="home_map"):
    st.html(scroll_style("home_map", "model_map", width))
    picked = clicked(model_map(blocks, arrows, width=width, height=height), "model_map", trace_name="blocks")
st.caption(t("map_hint_pre", norm=NORM_NAMES[cfg.norm]) if cfg.norm_first else t("map_hint"))
st.caption(t("map_vocab", shape=shape(trace.logits_shape), size=f"{cfg.vocab_size:,}", parts=vocab_text(cfg)))
if isinstance(picked, str):
    on_click(picked)

counts = param_counts(model)
st.markdown(t("home_model", params=counts["total"], device=cache.get_device()[1]))
figures = headline_figures(trace, cfg, model, counts["total"], word, top.probs[0])
for col, (name, icon) in in_rows((("tokenizer", "🔤"), ("embeddings", "📐"), ("attention", "👀"), ("ffn", "➕"),
                                  ("logits", "🎲"), ("model", "🧮")), 2):  # in order, also on a phone; two
    # to a row: a link's label is one line, cut at its column's edge (three to a row cut four of six at 1300 px)
    with col:
        link(name, label=f"{t(f'nav_{name}')} · {figures[name]}", icon=icon)
