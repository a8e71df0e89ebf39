"""Train page through the real app: defaults, a tiny training to a saved model that opens everywhere, refusals."""
import json
import time

import pytest
import torch

from harness.apptest import EN, harness_language, messages, no_pages_dir_mode, open_app, page_file
from service import jobs
from transformer_core.model.transformer import build_model
from transformer_core.train import experiment
from transformer_core.train.checkpoint import save_checkpoint
from transformer_core.train.loop import TrainConfig
from transformer_core.train.tasks import TASKS
from ui import own_words

PAGE = "train"
TINY = dict(batch_size=8, d_model=16, n_layers=1, n_heads=2, max_iters=20, eval_interval=5, eval_iters=2)


@pytest.fixture(autouse=True)
def _setup(user_dir, monkeypatch):
    """Through app.py; a fresh user folder and job table; one torch thread (the jobs' threads follow it)."""
    monkeypatch.setattr(jobs, "_JOBS", {})
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    with no_pages_dir_mode():
        yield user_dir
    for job in list(jobs._JOBS.values()):
        job.stop.set()
        job.wait(30)
    torch.set_num_threads(before)


def choose(at, target: str, **values):
    at.radio(key="tr_target").set_value(target).run()
    for field, v in values.items():
        at.number_input(key=f"tr_{target}_{field}").set_value(v)
    return at


def poll(at, done, seconds: float = 40):
    """Rerun the page (as the live fragment does every second) until done(at)."""
    deadline = time.monotonic() + seconds
    while not done(at):
        assert time.monotonic() < deadline, messages(at)
        time.sleep(0.3)
        at.run()
    return at


def values(at, prefix: str) -> dict[str, float]:
    return {n.key.removeprefix(prefix): n.value for n in at.number_input if n.key.startswith(prefix)}


def loss_series(at) -> dict[str, tuple[list, list]]:
    """name -> (x, y) of every line in the page's loss chart."""
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    return {d["name"]: (d["x"], d["y"]) for d in fig["data"]}


def test_page_renders_task_and_course_defaults():
    at = open_app(PAGE)
    assert not at.exception
    assert at.radio(key="tr_target").options == ["copy", "reverse", "sort", "repeat", "count", "dates",
                                                 "your text (the course's GPT)"]
    assert at.selectbox(key="tr_device").options[:2] == [EN["tr_device_auto"], "cpu"]
    assert ("cuda" in at.selectbox(key="tr_device").options) == torch.cuda.is_available()
    assert any("Nothing is training in this session yet" in c.value for c in at.caption)
    choose(at, "reverse")
    assert values(at, "tr_reverse_") == dict(batch_size=32, d_model=64, n_layers=2, n_heads=4, lr=0.003,
                                             max_iters=400, eval_interval=50, eval_iters=4)
    choose(at, "text")
    assert values(at, "tr_text_") == dict(batch_size=4, d_model=64, n_layers=8, n_heads=4, lr=0.001, max_iters=5000,
                                          eval_interval=50, eval_iters=20, context=16, val_fraction=0.2)
    assert at.text_area(key="tr_txt_body").value.startswith("A Transformer reads a sentence")


def test_tiny_training_finishes_saves_and_opens_on_every_page(_setup):
    at = choose(open_app(PAGE), "copy", **TINY)
    at.text_input(key="tr_copy_name").set_value("tiny copy")
    at.button(key="tr_start").click().run()
    assert not at.exception
    poll(at, lambda a: any(m.startswith("Finished: 20 steps") for m in messages(a)))
    curves = loss_series(at)
    # every eval_interval and the last step, then the final weights (the page keeps the best evaluated weights)
    assert list(curves) == ["train loss", "validation loss"] and curves["train loss"][0] == [0, 5, 10, 15, 19, 20]
    assert [j.configs["model"].keep_best for j in jobs._JOBS.values()] == [True]
    assert curves["validation loss"][1][-1] < curves["validation loss"][1][0]  # it learned something
    shown = {m.label: m.value for m in at.metric}
    assert shown["checkpoint"] == "tiny-copy" and shown["accuracy"].endswith("%")
    assert 0 <= float(shown["accuracy"].rstrip("%")) <= 100
    saved = [p for p in _setup.iterdir() if (p / "model.safetensors").is_file()]
    assert len(saved) == 1
    assert any(m.value.startswith("Its answer for `d a c b`") for m in at.markdown)
    assert at.dataframe[0].value["name"].tolist() == ["tiny copy"]  # "your models"
    # its accuracy as the metric above says it ("100.0%"), not as a share (1)
    assert at.dataframe[0].value["accuracy"].tolist() == [pytest.approx(float(shown["accuracy"].rstrip("%")), abs=0.05)]
    key = f"user:{saved[0].name}"
    text = at.session_state["text"]  # the default model's English example
    at.button(key="tr_open_job").click().run()
    assert at.session_state["model"] == key and at.session_state["text"] == text  # the learner's text stays
    assert at.sidebar.selectbox(key="model").value == key
    at.switch_page(page_file("attention")).run()  # the new model on another page: it reads only its letters
    assert not at.exception and at.session_state["model"] == key
    assert any("only knows the 21 tokens it was trained on" in w.value for w in at.warning), at.warning
    at.button(key="use_example").click().run()  # one click to its example, and the page goes on
    assert not at.exception and at.session_state["text"] == "d a c b" and not at.warning


def test_bad_hyper_parameters_show_the_training_message():
    at = choose(open_app(PAGE), "copy", d_model=66, n_heads=4)
    at.button(key="tr_start").click().run()
    assert not at.exception
    assert any("d_model (66) must be divisible by the number of heads (4)" in e.value for e in at.error)
    choose(at, "copy", d_model=64, lr=-1.0).button(key="tr_start").click().run()
    # the setting named as its box is labelled ("lr" is the notebook's name, TrainConfig.lr)
    assert any("The setting “Learning rate” must be between" in e.value for e in at.error), at.error
    assert not any("lr must" in e.value for e in at.error)
    assert jobs.running_count() == 0


def test_short_text_and_bad_upload_show_messages():
    at = choose(open_app(PAGE), "text")
    at.text_area(key="tr_txt_body").set_value("far too short")
    at.button(key="tr_start").click().run()
    assert any("text is too short" in e.value for e in at.error)
    at.file_uploader(key="tr_txt_file").set_value(("latin1.txt", b"caf\xe9 " * 50, "text/plain")).run()
    assert any("not UTF-8 text" in e.value for e in at.error) and not at.exception


def test_a_text_or_a_name_longer_than_its_box_holds_is_cut_and_said():
    """A box's own character limit dropped a longer paste whole in the browser and trained on the old text."""
    from service.uploads import MAX_TEXT_UPLOAD_BYTES as cap

    at = choose(open_app(PAGE), "text")
    at.text_area(key="tr_txt_body").set_value("ab " * (cap // 3 + 5)).run()
    at.text_input(key="tr_text_name").set_value("n" * 50).run()
    assert not at.exception
    said = [i.value for i in at.info]
    assert EN["box_cut"].format(n=f"{3 * (cap // 3 + 5):,}", cap=f"{cap:,}") in said, said
    assert EN["box_cut"].format(n="50", cap=f"{jobs.NAME_CHARS:,}") in said, said


def test_second_start_and_server_limit_show_messages(server_env):
    at = choose(open_app(PAGE), "copy", **{**TINY, "max_iters": 100_000, "eval_interval": 0})
    at.button(key="tr_start").click().run()
    assert at.button(key="tr_stop")  # running: the stop button shows
    at.button(key="tr_start").click().run()
    assert any("already training a model" in w.value for w in [*at.warning, *at.error])
    server_env(TRANSFORMER_EXPLORER_MAX_TRAININGS=1)
    other = choose(open_app(PAGE), "copy", **TINY)
    other.button(key="tr_start").click().run()
    assert any("already running 1 trainings (its limit is 1)" in w.value for w in [*other.warning, *other.error])
    at.button(key="tr_stop").click().run()
    poll(at, lambda a: any(m.startswith("Stopped after") for m in messages(a)))


def test_malicious_upload_is_refused_without_running_it_and_a_good_one_is_added(tmp_path, _setup):
    side = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(side), "w"))

    torch.save({"config": {}, "state_dict": {"w": Evil()}}, tmp_path / "evil.pt")
    model = build_model(TASKS["copy"].model_config(d_model=16, n_heads=2, n_layers=1), "cpu")
    good = save_checkpoint(model, tmp_path / "good") / "model.safetensors"
    at = open_app(PAGE)
    at.file_uploader(key="tr_ckpt_up").set_value(("evil.pt", (tmp_path / "evil.pt").read_bytes(),
                                                 "application/octet-stream"))
    at.button(key="tr_ckpt_import").click().run()
    assert not at.exception
    assert any("Nothing in it was run" in e.value for e in at.error)
    assert not side.exists() and not _setup.exists()
    at.file_uploader(key="tr_ckpt_up").set_value(("good.safetensors", good.read_bytes(), "application/octet-stream"))
    at.text_input(key="tr_ckpt_name").set_value("from a friend")
    at.button(key="tr_ckpt_import").click().run()
    assert any("was added as `from a friend`" in s.value for s in at.success)
    at.run()  # the list above the upload shows it from the next run on
    assert at.dataframe[0].value["name"].tolist() == ["from a friend"]
    assert "from a friend · trained here" in at.sidebar.selectbox(key="model").options


def test_positional_experiment_from_the_page_plots_both_runs(monkeypatch):
    small = TrainConfig(**{**experiment.EXPERIMENT.__dict__, **TINY, "eval_iters": 1})
    monkeypatch.setattr(experiment, "EXPERIMENT", small)
    at = open_app(PAGE)
    at.number_input(key="tr_pos_iters").set_value(10)
    at.button(key="tr_pos_start").click().run()
    poll(at, lambda a: any(m.startswith("Finished: 20 steps") for m in messages(a)))
    assert {m.label for m in at.metric} == {"accuracy · with positions", "accuracy · without positions"}
    curves = loss_series(at)  # both runs' validation loss on one chart
    assert list(curves) == ["with positions", "without positions"]
    assert all(x == [0, 5, 9] and len(y) == 3 for x, y in curves.values())
    assert jobs.get(at.session_state["_sid"]).configs["none"] == TrainConfig(
        **{**small.__dict__, "task": "reverse", "max_iters": 10, "positional": "none"})


def test_page_speaks_chinese():
    with harness_language("zh"):
        at = open_app(PAGE, lang="zh")
    assert not at.exception
    assert at.title[0].value == "训练模型"
    assert at.button(key="tr_start").label == "开始训练"
    assert "倒序：'=' 后面的答案是把输入的字母倒过来。" in at.radio(key="tr_target").proto.captions
    assert any("这个会话还没有训练" in c.value for c in at.caption)
    # the model file box's own words, which Streamlit writes in English ("Upload", "20MB per file"), in Chinese
    # (tests/browser/test_browser_tools.py checks the same rules on the multiselect's "Select all" in Chromium)
    css = "".join(h.value for h in at.html)
    box = ".stMain .st-key-tr_ckpt_up "
    assert f'{box}{own_words.UPLOAD_WORDS}::after{{content:"上传";' in css
    assert f'{box}{own_words.UPLOAD_LIMIT}::after{{content:"每个文件最多 20 MB";' in css
    # every page's lists (the sidebar's model box is one), whether or not the page has a multiselect
    assert f'{own_words.NO_RESULTS}{{font-size:0}}{own_words.NO_RESULTS}::after{{content:"没有匹配的选项";' in css
    assert f'{own_words.SELECT_ALL}::after{{content:"全选";' in css
    assert "content:" not in "".join(h.value for h in open_app(PAGE, lang="en").html)  # English: Streamlit's own


def test_an_impossible_setting_is_named_as_its_box_in_chinese():
    """"设置 batch_size 必须在 1 到 512 之间（现在是 -4）": the Train page named a setting by its Python field, not by
    the label of the box the learner typed it in (批大小)."""
    with harness_language("zh"):
        at = choose(open_app(PAGE, lang="zh"), "copy", batch_size=-4)
        at.button(key="tr_start").click().run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert any(e.startswith("设置“批大小”必须在 1 到 512 之间") and "-4" in e for e in errors), errors
    assert not any("batch_size" in e for e in errors)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_text_file_too_large_or_empty_is_refused_by_the_page_and_nothing_trains(lang):
    """A 2.5 MB .txt was refused by the browser alone (a red icon, in English: "File must be 1.0MB or smaller"), and
    "Start training" then trained on the box's sample text; an empty file got "the training text is empty" beside
    "training on the uploaded file (0 characters)". The server reads every file and says what is wrong."""
    from ui.i18n import strings

    words = strings()
    for name, raw, code in (("huge.txt", b"a b c " * 450_000, "err.upload_text_too_large"),
                            ("empty.txt", b"  \n", "err.upload_text_empty")):
        with harness_language(lang):
            at = choose(open_app(PAGE, lang=lang), "text")
            # the browser takes any file up to the server's limit (20 MB): the page says what is wrong with it
            assert at.file_uploader(key="tr_txt_file").proto.max_upload_size_mb == 20
            # ... and its size line says the page's limit, as its label does (it said "20MB per file")
            line = own_words.css_string(words["upload_limit"][lang].format(mb=1))
            css = "".join(h.value for h in at.html)
            assert f".stMain .st-key-tr_txt_file {own_words.UPLOAD_LIMIT}::after{{content:{line};" in css
            at.file_uploader(key="tr_txt_file").set_value((name, raw, "text/plain")).run()
            assert not at.exception
            said = words[code][lang].format(mb=1)
            assert [e.value for e in at.error] == [said]
            assert not any(i.value.startswith(words["tr_txt_using_file"][lang][:8]) for i in at.info)
            at.button(key="tr_start").click().run()
        assert jobs.running_count() == 0 and not jobs._JOBS
