"""Page 1: the text as tokens (ids, bytes, partial-UTF-8 groups), two encodings, the padded batch."""
import pandas as pd
import streamlit as st

from transformer_core.text.compare import compare_counts
from transformer_core.text.inputs import missing_positions, padded_batch, unknown_id
from transformer_core.text.tokenizer import available_encodings, tokenize
from ui.errors import show_error
from ui.figures import visible
from ui.guidance import look_for
from ui.i18n import sentences, t
from ui.model_choice import load_selected_model
from ui.session import through_app
from ui.widgets import count_text, explain, linked_token_view, table, token_chips

through_app()

st.title(t("nav_tokenizer"))
explain("tok_intro", rf"\text{{{t('tex_text')}}} \xrightarrow{{\text{{BPE}}}} [t_1, \dots, t_n],\quad "
        r"t_i \in \{0, \dots, |V|-1\}")
# The tokenizer works on any text with any model: the model only decides the encoding, and which tokens it knows.
_, model, card, _ = load_selected_model()
ss = st.session_state
encoding = model.cfg.encoding
if not str(ss.get("text", "")).strip():
    st.warning(t("err.empty_input"), icon="✍️")
    st.stop()
try:
    tok = tokenize(ss.text, encoding, allow_special=bool(ss.get("allow_special")), max_tokens=model.cfg.max_len)
except Exception as exc:  # noqa: BLE001 - an encoding that cannot load
    show_error(exc)
    st.stop()
if tok.truncated:
    st.info(t("note_truncated", n_chars=tok.n_chars, n_tokens=len(tok.tokens)), icon="✂️")
if tok.cleaned:
    st.info(t("note_cleaned"), icon="🩹")
missing = missing_positions(tok, model)
if missing:
    key = "tok_unknown" if unknown_id(model) is not None else "tok_outside_alphabet"
    st.info(t(key, n=len(missing), total=len(tok.tokens), model=card.get("name", "")), icon="🔤")

c1, c2, c3 = st.columns(3)
c1.metric(t("tok_counts"), tok.n_chars)
c2.metric(t("tok_bytes"), tok.n_bytes)
c3.metric(t("tok_tokens"),
          f"{len(tok.tokens)} / {tok.n_tokens_before_truncation}+" if tok.truncated else len(tok.tokens))
partial = sum(x.partial for x in tok.tokens)
spaced = "" if any(" " in x.text for x in tok.tokens) else "_nospace"  # "a space belongs to the word after it"
if partial:
    look_for(f"tokens{spaced}", n=partial, total=len(tok.tokens))
else:
    look_for(f"tokens_plain{spaced}")
st.subheader(f"{t('tok_chips')} · {encoding}")
linked_token_view(tok, unknown=missing)
st.caption(t("tok_hover_link"))
df = pd.DataFrame({
    t("col_position"): range(len(tok.tokens)),
    t("col_token"): [visible(x.text) for x in tok.tokens],
    t("col_id"): [x.id for x in tok.tokens],
    t("col_bytes"): [x.raw.hex(" ") for x in tok.tokens],
    t("col_partial"): [x.partial for x in tok.tokens],
})
with st.expander(t("tok_table"), expanded=len(tok.tokens) <= 40):
    table(df, "tokens")

st.subheader(t("tok_groups"))
groups = [(chars, idx) for chars, idx in tok.groups if len(idx) > 1]
if groups:
    table(pd.DataFrame({
        t("col_chars"): [visible(c) for c, _ in groups],  # a no-break space, a zero-width one: named
        t("col_tokens"): [" + ".join(visible(tok.tokens[i].text) for i in idx) for _, idx in groups],
        t("col_id"): [", ".join(str(tok.tokens[i].id) for i in idx) for _, idx in groups],
    }), "groups")
else:
    st.caption(t("tok_no_groups"))

st.subheader(t("tok_compare"))
shown = list(dict.fromkeys((encoding, "cl100k_base", "r50k_base")))  # the model's own first
allow = bool(ss.get("allow_special"))


def subset_sentence(why: dict, enc: str, a: int, b: int) -> str:
    """What a subset keeps of its base encoding (and adds), then what that does on this text: the base's tokens it
    spells in pieces, its own whole characters, from compare_counts (a and b: the two counts the columns show)."""
    base = why["base"]
    said = [t("tok_why_keeps", enc=enc, kept=why["kept"], base=base, base_size=why["base_size"])]
    if why["added"]:
        said.append(t("tok_why_adds", added=why["added"], base=base))
    here = [count_text(key, n, base=base) for key, n in (("tok_why_dropped", why["not_kept"]),
                                                          ("tok_why_whole", why["whole"])) if n]
    said.append(t("tok_why_here", parts=t("tok_why_and").join(here), a=a, b=b, base=base) if here
                else t("tok_why_same", base=base, a=a))
    return sentences(*said)


def r50k_sentence(counts: dict, ref: str) -> str:
    """r50k_base (GPT-2's) against `ref` on this text, from the two counts: more, as many, or fewer tokens."""
    c, b = counts["r50k_base"], counts[ref]
    return t("tok_r50k_more" if c > b else "tok_r50k_same" if c == b else "tok_r50k_fewer", c=c, b=b, ref=ref)


def column(name: str, tokens) -> None:
    st.markdown(f"**{name}** · {count_text('tok_n_tokens', len(tokens))}")
    token_chips(tokens)


for col, name in zip(st.columns(len(shown)), shown):
    with col:
        try:
            column(name, tok.tokens if name == encoding else
                   tokenize(ss.text, name, allow_special=allow, max_tokens=model.cfg.max_len).tokens)
        except Exception as exc:  # noqa: BLE001 - an encoding that cannot load offline
            show_error(exc)
try:
    # counted as the columns above were, so the sentence cites the counts they show
    why = compare_counts(ss.text, encoding, max_tokens=model.cfg.max_len, by_line=False, allow_special=allow)
    c = why["counts"]
    if why["subset"]:
        ref = why["base"]
        st.markdown(sentences(subset_sentence(why, encoding, c[encoding], c[ref]), r50k_sentence(c, ref)))
    else:
        ref = encoding if encoding != "r50k_base" else "cl100k_base"
        st.markdown(sentences(t("tok_why_base"), r50k_sentence(c, ref)))
except Exception as exc:  # noqa: BLE001 - an encoding that cannot load offline
    show_error(exc)
others = [e for e in available_encodings() if e not in shown]
with st.expander(t("tok_compare_more")):
    other = st.selectbox(t("tok_compare_with"), others, key="compare_enc", index=None,  # none loads until picked
                         placeholder=t("iv_pick"))
    try:
        if other is not None:
            column(other, tokenize(ss.text, other, allow_special=allow, max_tokens=model.cfg.max_len).tokens)
    except Exception as exc:  # noqa: BLE001 - an encoding that cannot load offline
        show_error(exc)

second = (ss.get("tgt") or "") if model.is_encoder_decoder else ""
if second.strip():  # the source and the target, padded together
    st.subheader(t("tok_batch"))
    st.markdown(t("tok_batch_intro"))
else:  # one text (a decoder reads one): pair it with its first half, so there is a shorter row to pad
    second = ss.text[: len(ss.text) // 2]
    st.subheader(t("tok_batch_half"))
    st.markdown(sentences(t("tok_batch_half_intro" if second.strip() else "tok_batch_none"), t("tok_batch_intro")))
texts = [ss.text, second]
if texts[1].strip():
    ids, lengths, mask = padded_batch(texts, encoding, max_tokens=model.cfg.max_len)
    cols = [str(i) for i in range(ids.size(1))]
    st.markdown(f"{t('tok_ids')} · {t('tok_shape', shape=f'`{tuple(ids.shape)}`')}")
    table(pd.DataFrame(ids.numpy(), columns=cols), "batch_ids")
    st.markdown(t("tok_mask"))
    table(pd.DataFrame(mask.int().numpy(), columns=cols), "batch_mask")
    zero_real = [(b, p) for b in range(ids.size(0)) for p in range(int(lengths[b])) if int(ids[b, p]) == 0]
    if zero_real:
        st.warning(t("tok_pitfall", pos=zero_real[0][1]), icon="⚠️")
