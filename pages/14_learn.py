"""Watch a model learn: a small model trained with snapshots of its weights; a training-step slider moves through
its loss curve, every head's previous-token and induction scores, the in-context-learning score, and the attention
of a chosen head on the learner's own repeated text at that step."""
import json

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from service import catalog
from transformer_core import trace_text
from transformer_core.analysis.heads import default_length, induction_parts
from transformer_core.text.inputs import sequence_labels
from transformer_core.train.snapshots import default_view, load_snapshot, load_steps, phases
from transformer_core.train.task import LETTERS
from ui import cache
from ui.errors import show_error
from ui.figures import axis_labels, token_heatmap
from ui.i18n import t
from ui.plain_figures import figure
from ui.session import through_app
from ui.widgets import chart, download, explain, within

through_app()
ss = st.session_state
KEY = "shipped:induction-steps"
DEFAULT_TEXT = "d a c b g f d a c b g f"
GREY = "#9e9e9e"


@st.cache_resource(show_spinner=False, max_entries=48)
def snapshot(step: int):
    """The model at one snapshot (a private copy; the shared model is never changed)."""
    model, _ = cache.get_model(KEY, "cpu")
    return load_snapshot(model, catalog.shipped_folder(KEY), step)


@st.cache_data(show_spinner=False, max_entries=48)
def parts(step: int) -> dict[str, list[list[float]]]:
    """What each head's induction score is made of at one snapshot (analysis.heads.induction_parts: name -> per
    layer, per head)."""
    found = induction_parts(snapshot(step))
    return {name: [by_block["dec_self", layer].tolist() for layer in range(len(by_block))]
            for name, by_block in found.items()}


def over_steps(traces: list[dict], step: int, title: str, y_title: str, **y_axis) -> go.Figure:
    """Curves over training steps, the chosen step marked; a logarithmic step axis, since the change happens in the
    first few hundred steps. One constructor call (each update_* call re-validates the whole figure)."""
    return figure(traces, {
        "title": title, "height": 280, "margin": dict(l=10, r=10, t=40, b=10),
        "xaxis": {"type": "log", "title": t("learn_step")}, "yaxis": {"title": y_title, **y_axis},
        "shapes": [{"type": "line", "x0": step, "x1": step, "xref": "x", "y0": 0, "y1": 1, "yref": "y domain",
                    "line": {"color": "#d62728", "dash": "dash"}}]})


def score_lines(data: dict, what: str, title: str, step: int, grey_first: bool = False) -> go.Figure:
    """One curve per head over the steps; `grey_first`: layer 0's curves in grey (a score that does not apply)."""
    steps = data["steps"]
    first = data["measures"][str(steps[0])][what]
    return over_steps([dict(type="scatter", x=steps, y=[data["measures"][str(s)][what][layer][head] for s in steps],
                            mode="lines", name=t("learn_head", layer=layer, head=head),
                            line={"dash": "solid" if layer == 0 else "dot",
                                  **({"color": GREY, "width": 1} if grey_first and layer == 0 else {})})
                       for layer in range(len(first)) for head in range(len(first[layer]))],
                      step, title, t("learn_score"), range=[0, 1])


EVEN = 0.03  # scores this close to even attention's: the head has not learned where to look yet


def layer0_note(m: dict, step: int) -> None:
    """Why layer 0's induction curves are grey, and what the highest of them is made of at this step (looking a
    few tokens back, avoiding its own token), measured on the snapshot; in the first steps, that it is about what
    attention spread evenly gets (nothing learned yet)."""
    ind = m["induction"][0]
    head = int(np.argmax(ind))
    try:
        found = {name: v[0][head] for name, v in parts(int(step)).items()}
    except Exception as exc:  # noqa: BLE001 - the note is extra
        show_error(exc)
        return
    if max(abs(v - found["even"]) for v in (ind[head], found["control"], found["own_copy"])) < EVEN:
        st.caption(t("learn_ind_l0_even", step=step, head=head, score=ind[head], even=found["even"],
                     control=found["control"]))
        return
    st.caption(t("learn_ind_l0", step=step, head=head, score=ind[head], off=default_length(snapshot(int(step))) - 1,
                 control=found["control"], own=found["own_copy"], own_control=found["own_copy_control"]))


st.title(t("nav_learn"))
explain("learn_intro")
folder = catalog.shipped_folder(KEY)
data = load_steps(folder) if folder is not None else None
if data is None:
    st.info(t("learn_missing"), icon="📦")
    st.stop()
steps = data["steps"]
found = phases(data)
st.markdown(t("learn_phases", drop=found["steepest_drop"], ind=found["induction_half"], prev=found["prev_half"],
              first=t("learn_first_ind" if found["induction_half"] < found["prev_half"] else
                      "learn_first_prev" if found["prev_half"] < found["induction_half"] else "learn_first_same"),
              ind_final=found["induction_final"], prev_final=found["prev_final"], icl0=found["icl_first"],
              icl=found["icl_final"]))
view_step, view_layer, view_head = default_view(data)  # the best induction head, once formed
step = st.select_slider(t("learn_step"), steps, value=ss.get("learn_step_v", view_step), key="learn_step_v")

c1, c2 = st.columns(2)
loss = np.asarray(data["loss"], dtype=float)
smooth = np.convolve(loss, np.ones(10) / 10, mode="valid")
fig = over_steps([dict(type="scatter", x=list(range(1, len(loss) + 1)), y=loss.tolist(), mode="lines",
                       name=t("learn_loss"), line={"color": "#9e9e9e", "width": 1}),  # grey beside the blue mean
                  dict(type="scatter", x=list(range(10, len(loss) + 1)), y=smooth.tolist(), mode="lines",
                       name=t("learn_loss_smooth"), line={"color": "#0068c9", "width": 2})],
                 step, t("learn_loss_title"), t("learn_loss_axis"))
with c1:
    chart(fig, "learn_loss")
icl = [data["measures"][str(s)]["icl"] for s in steps]
fig = over_steps([dict(type="scatter", x=steps, y=icl, mode="lines+markers", name="ICL")], step,
                 t("learn_icl_title"), t("learn_icl_axis"))
with c2:
    chart(fig, "learn_icl")
    st.caption(t("learn_icl_hint"))
c3, c4 = st.columns(2)
with c3:
    chart(score_lines(data, "previous_token", t("learn_prev_title"), step), "learn_prev")
with c4:
    chart(score_lines(data, "induction", t("learn_ind_title"), step, grey_first=True), "learn_ind")
    layer0_note(data["measures"][str(step)], step)

st.subheader(t("learn_text_title", step=step))
m = data["measures"][str(step)]
n_layers, n_heads = len(m["induction"]), len(m["induction"][0])
c5, c6, c7 = st.columns([4, 1, 1])
letters = dict(first=LETTERS[0], last=LETTERS[-1], n=len(LETTERS))  # the repeat task's alphabet
text = within(c5.text_input(t("learn_text", **letters), DEFAULT_TEXT, key="learn_text",
                            help=t("learn_text_help", **letters)), 200)
layer = c6.selectbox(t("att_layer"), range(n_layers), index=view_layer, key="learn_layer")
head = c7.selectbox(t("att_head"), range(n_heads), index=view_head, key="learn_head")
if not text.strip():  # this box, not the sidebar's text (the shared message for an empty text points there)
    st.warning(t("learn_text_empty", example=DEFAULT_TEXT, **letters), icon="✍️")
else:
    try:
        model = snapshot(int(step))
        prep, trace = trace_text(model, text)
        w = trace.attention("dec_self", layer).head("weights", head).numpy()
        labels = axis_labels(sequence_labels(model, trace.decoder_ids))
        title = t("learn_heat_title" if layer else "learn_heat_title_l0", step=step, layer=layer, head=head,
                  prev=m["previous_token"][layer][head], ind=m["induction"][layer][head])
        heat = token_heatmap(np.where(np.tril(np.ones_like(w, dtype=bool)), w, np.nan), labels, labels, zmin=0.0,
                             zmax=1.0, title=title)
        chart(heat, "learn_heat")
        st.caption(t("learn_heat_hint"))
    except Exception as exc:  # noqa: BLE001 - an unknown character: a message, never a traceback
        show_error(exc)
download(t("learn_download"), lambda: json.dumps(data).encode("utf-8"), "induction-steps.json", "application/json",
         icon=":material/download:", key="learn_download")
