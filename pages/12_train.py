"""Page 6: train a model here (a task or your text) and watch its losses; open it on every page; bring weights."""
from dataclasses import replace

import pandas as pd
import streamlit as st

from service import catalog, job_records, jobs, training_run, uploads
from service.settings import settings as server_settings
from transformer_core.train.corpus import TEXT
from transformer_core.train.defaults import EXPERIMENT, EXPERIMENT_TASKS, PAGE_LEFT_OUT, quick
from transformer_core.train.tasks import TASKS, SeqToSeqTask
from ui import cache
from ui.cards import show_card
from ui.errors import show_error
from ui.figures import lines
from ui.i18n import lang, t
from ui.nav import link
from ui.own_words import file_box
from ui.session import through_app
from ui.state import on_model_change, session_id, viewer
from ui.widgets import chart, explain, table, within

through_app()

REFRESH_S = 1.0  # how often the live part redraws while a job runs
# the name-mover demo is left out: it learns its circuit in 5,000 steps (about 20 min here), not in a quick run
TARGETS = (*(name for name in TASKS if name not in PAGE_LEFT_OUT), "text")
ss = st.session_state
sid = session_id()


def open_model(key: str) -> None:
    """Select a model in the sidebar (a button callback: it runs before the sidebar is drawn)."""
    ss.model = key
    on_model_change()


def open_button(key: str, widget_key: str) -> None:
    c1, c2, c3 = st.columns(3)
    c1.button(t("tr_open"), key=widget_key, on_click=open_model, args=(key,), type="primary")
    with c2:
        link("attention", t("tr_see_attention"), "🔍")
    with c3:
        link("logits", t("tr_see_logits"), "🎲")


def target_label(name: str) -> str:
    return t("tr_text") if name == "text" else name


def target_caption(name: str) -> str:
    if name == "text":
        return t("tr_text_help")
    return TASKS[name].description_zh if lang() == "zh" else TASKS[name].description


def training_text() -> str | None:
    """The pasted text, or an uploaded .txt file (None after a shown error)."""
    # no type filter and no size limit of its own, here and for model files: the browser would refuse another file,
    # or one over 1 MB, in English and beside the last file it took ("application/zip files are not allowed", "File
    # must be 1.0MB or smaller") while training went on from the box; the server's checks say it in the learner's
    # language (the server's own upload limit stays, .streamlit/config.toml)
    up = file_box(t("tr_txt_upload"), "tr_txt_file", checked_mb=uploads.MAX_TEXT_UPLOAD_BYTES >> 20,
                  help=t("tr_txt_upload_help"))
    body = within(st.text_area(t("tr_txt_body"), TEXT, key="tr_txt_body", height=160), uploads.MAX_TEXT_UPLOAD_BYTES)
    if up is None:
        return body
    try:
        text = uploads.read_text_upload(up.getvalue())
    except Exception as exc:  # noqa: BLE001 - a refused file becomes a message
        show_error(exc)
        return None
    st.info(t("tr_txt_using_file", n=len(text)), icon="📄")
    return text


def settings(target: str, device: str):
    """The hyper-parameter widgets of one target (each target keeps its own values); returns a TrainConfig."""
    d = quick(target)
    k = f"tr_{target}_"

    def num(col, field: str, fmt: str | None = None):
        value = getattr(d, field)
        return col.number_input(t(f"tr_{field}"), value=value, step=type(value)(1) if fmt is None else 1e-4,
                                format=fmt, key=k + field, help=t(f"tr_{field}_help"))

    c = st.columns(4)
    changes = {f: num(c[i % 4], f) for i, f in enumerate(("batch_size", "d_model", "n_layers", "n_heads"))}
    c = st.columns(4)
    changes["lr"] = num(c[0], "lr", "%.5f")
    changes["max_iters"] = num(c[1], "max_iters")
    changes["eval_interval"] = num(c[2], "eval_interval")
    changes["eval_iters"] = num(c[3], "eval_iters")
    if target == "text":
        c = st.columns(4)
        changes["context"] = num(c[0], "context")
        changes["val_fraction"] = c[1].number_input(t("tr_val_fraction"), value=d.val_fraction, step=0.05,
                                                    key=k + "val_fraction", help=t("tr_val_fraction_help"))
    # the weights of the lowest validation loss are saved (a run stopped by hand too), where there are evaluations
    return replace(d, **changes, keep_best=changes["eval_interval"] > 0, device=None if device == "auto" else device)


def train_tab(device: str) -> None:
    target = st.radio(t("tr_what"), TARGETS, key="tr_target", format_func=target_label,
                      captions=[target_caption(n) for n in TARGETS])
    text = training_text() if target == "text" else ""
    st.markdown(f"**{t('tr_hparams')}** · {t('tr_hparams_' + ('text' if target == 'text' else 'task'))}")
    tc = settings(target, device)
    name = within(st.text_input(t("tr_name"), f"my-{target}", key=f"tr_{target}_name", help=t("tr_name_help")),
                  jobs.NAME_CHARS)
    st.caption(t("tr_private_note"))
    if st.button(t("tr_start"), key="tr_start", type="primary") and text is not None:
        try:
            with st.spinner(t("tr_checking")):
                jobs.start(sid, replace(tc, text=text), name.strip() or f"my-{target}", owner=viewer())
        except Exception as exc:  # noqa: BLE001 - every refusal becomes a message
            show_error(exc)


def experiment_tab(device: str) -> None:
    explain("tr_pos_intro")
    c1, c2 = st.columns(2)
    task = c1.selectbox(t("tr_pos_task"), EXPERIMENT_TASKS, key="tr_pos_task")
    iters = c2.number_input(t("tr_max_iters"), value=EXPERIMENT.max_iters, step=1, key="tr_pos_iters",
                            help=t("tr_pos_iters_help"))
    if st.button(t("tr_pos_start"), key="tr_pos_start", type="primary"):
        try:
            jobs.start_experiment(sid, task, max_iters=int(iters), device=None if device == "auto" else device)
        except Exception as exc:  # noqa: BLE001
            show_error(exc)


def loss_chart(job: jobs.Job) -> None:
    if job.experiment:
        series, x = {}, []
        for run, hist in job.histories.items():
            steps, _, val = training_run.eval_curves(hist)
            series[t(f"tr_pos_{run}")] = val
            x = max(x, steps, key=len)
        chart(lines(x, series, x_title=t("tr_step"), y_title=t("tr_val_loss")), "tr_pos_loss")
        return
    hist = job.histories.get("model")
    if hist is None:
        return
    steps, train_loss, val_loss = training_run.eval_curves(hist)
    if steps:
        fig = lines(steps, {t("tr_train_loss"): train_loss, t("tr_val_loss"): val_loss}, x_title=t("tr_step"),
                    y_title=t("tr_loss"))
    else:
        x, y = training_run.step_curve(hist)
        fig = lines(x, {t("tr_step_loss"): y}, x_title=t("tr_step"), y_title=t("tr_loss"))
    chart(fig, "tr_loss")


def results(job: jobs.Job) -> None:
    """What a finished job produced: status, accuracy, the saved checkpoint and the button that opens it."""
    if job.status == "error":
        show_error(job.error)
        return
    note = t("tr_timed_out") if job.timed_out else ""
    done = t("tr_done" if job.status == "done" else "tr_stopped", it=job.iteration, s=job.seconds)
    (st.success if job.status == "done" else st.info)(f"{done} {note}".strip())
    if job.experiment:
        cols = st.columns(len(job.accuracy) or 1)
        for col, (run, acc) in zip(cols, job.accuracy.items()):
            col.metric(f"{t('tr_accuracy')} · {t(f'tr_pos_{run}')}", f"{acc:.1%}")
        st.markdown(t("tr_pos_result"))
        return
    tc = job.configs["model"]
    if "model" in job.accuracy:
        c1, c2 = st.columns(2)
        c1.metric(t("tr_accuracy"), f"{job.accuracy['model']:.1%}")
        c2.metric(t("tr_checkpoint"), training_run.safe_name(job.name) if job.checkpoint else "—")
        st.caption(t("tr_acc_text" if tc.task is None else f"tr_acc_{TASKS[tc.task].arch}"))
    if job.checkpoint is None:
        return
    saved = catalog.entry(job.model_key, viewer())
    if saved is not None and tc.task is None:  # a text model: its loss against the n-gram baselines
        show_card(saved.card, "job")
    task = TASKS.get(tc.task or "")
    if isinstance(task, SeqToSeqTask):
        try:
            model, _ = cache.get_model(job.model_key, cache.get_device()[0])
            st.markdown(t("tr_answer", src=task.example.src, out=task.solve(model, task.example.src).strip()))
        except Exception as exc:  # noqa: BLE001
            show_error(exc)
    open_button(job.model_key, "tr_open_job")


def live() -> None:
    """Progress, live loss curves and the stop button, redrawn every second while the job runs (a fragment)."""
    jobs.touch(sid)  # this tab is open
    job = jobs.get(sid)
    if job is None or not job.active:
        st.rerun()  # the whole page: results, and the new model in the sidebar
    header(job)
    st.progress(job.fraction, text=t("tr_progress", it=job.iteration, total=job.total_iters, s=job.seconds))
    st.button(t("tr_stop"), key="tr_stop", on_click=jobs.stop, args=(sid,))
    loss_chart(job)


def header(job: jobs.Job) -> None:
    name = t("tr_pos_title") if job.experiment else training_run.safe_name(job.name)  # no markdown from user text
    st.markdown(f"**{name}** · {t('tr_status_' + job.status)}")


def percent(share):
    """A share as a percentage for a table (a model trained on text has no accuracy: left empty)."""
    return share * 100 if isinstance(share, (int, float)) else None


def your_models() -> None:
    entries = training_run.user_models(viewer())
    if not entries:
        st.caption(t("tr_no_models"))
        return
    table(pd.DataFrame({
        t("tr_col_name"): [e.label for e in entries],
        t("tr_col_task"): [e.card.get("task", "—") for e in entries],
        t("tr_accuracy"): [percent(e.card.get("accuracy")) for e in entries],
        t("tr_col_iters"): [e.card.get("steps") for e in entries],
    }), "your_models", formats={t("tr_accuracy"): "%.1f%%"})  # as the metric above: "100.0%", not 1
    labels = {e.key: e.label for e in entries}
    chosen = st.selectbox(t("tr_pick_model"), list(labels), format_func=labels.get, key="tr_pick_model")
    open_button(chosen, "tr_open_pick")
    st.caption(t("tr_private_note"))
    if server_settings().admin_token:  # the instructor can show a learner's model to the whole room
        with st.expander(t("tr_publish_title"), key="tr_publish_open"):
            token = st.text_input(t("tr_admin_token"), type="password", key="tr_admin_token")
            if st.button(t("tr_publish"), key="tr_publish"):
                try:
                    catalog.publish(chosen, token)
                    st.success(t("tr_published", name=labels[chosen]))
                except Exception as exc:  # noqa: BLE001 - a wrong token or a gone model becomes a message
                    show_error(exc)


def upload_model() -> None:
    st.markdown(t("tr_ckpt_intro"))
    up = file_box(t("tr_ckpt_files"), "tr_ckpt_up", max_mb=uploads.MAX_MODEL_UPLOAD_BYTES >> 20)
    name = within(st.text_input(t("tr_name"), "uploaded", key="tr_ckpt_name"), jobs.NAME_CHARS)
    if not st.button(t("tr_ckpt_import"), key="tr_ckpt_import"):
        return
    if up is None:
        st.warning(t("tr_ckpt_pair"), icon="🧩")
        return
    try:
        key = uploads.import_model(up.getvalue(), up.name, name.strip() or "uploaded", owner=viewer())
    except Exception as exc:  # noqa: BLE001 - refused files become messages
        show_error(exc)
        return
    added = catalog.entry(key, viewer())
    st.success(t("tr_ckpt_ok", name=added.label if added else ""))
    open_button(key, "tr_open_upload")


st.title(t("nav_train"))
explain("tr_intro")
device = st.selectbox(t("tr_device"), jobs.device_choices(), key="tr_device", help=t("tr_device_help"),
                      format_func=lambda d: t("tr_device_auto") if d == "auto" else d)
tab_train, tab_pos = st.tabs([t("tr_tab_train"), t("tr_pos_title")])
with tab_train:
    train_tab(device)
with tab_pos:
    experiment_tab(device)

st.subheader(t("tr_live"))
for lost in jobs.interrupted(viewer()):  # a server restart stopped these: say so once, then forget them
    st.warning(t("err.job_interrupted", name=lost["name"]), icon="🔌")
    job_records.dismiss(viewer(), lost["id"])
job = jobs.get(sid)
if job is None:
    st.caption(t("tr_idle", n=jobs.running_count(), limit=server_settings().max_trainings))
elif job.active:
    st.fragment(run_every=REFRESH_S)(live)()
else:  # drawn by the full page, so its buttons (open this model) rerun the sidebar too
    header(job)
    loss_chart(job)
    results(job)

st.subheader(t("tr_your_models"))
your_models()
with st.expander(t("tr_ckpt_title"), key="tr_ckpt_open"):
    upload_model()
