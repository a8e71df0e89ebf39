"""Background training jobs: run to a saved model, stop, limits, refusals."""
import threading
import time

import pytest
import torch

from service import catalog, jobs, training_run
from transformer_core.errors import DeviceError, TrainingError
from transformer_core.train.checkpoint import load_checkpoint
from transformer_core.train.loop import MAX_ITERS, History, TrainConfig
from transformer_core.train.tasks import TASKS

TINY = dict(d_model=16, n_heads=2, n_layers=1, batch_size=8, dropout=0.0, eval_interval=10, eval_iters=2,
            seed=0, device="cpu")
LONG = dict(TINY, max_iters=MAX_ITERS, eval_interval=0)  # runs until stopped


pytestmark = pytest.mark.usefixtures("fresh_jobs", "one_torch_thread")  # conftest.py


def tiny_task(task="copy", **changes) -> TrainConfig:
    return TrainConfig(task=task, **{**TINY, "max_iters": 40, **changes})


def test_tiny_task_job_runs_to_a_saved_loadable_checkpoint(user_dir):
    job = jobs.start("s1", tiny_task(), "My copy / ../x")
    assert job.wait(60) and job.status == "done", job.error
    hist = job.histories["model"]
    assert job.iteration == 40 and len(hist.step_loss) == 40
    assert hist.eval_steps == [0, 10, 20, 30, 39]
    assert hist.val_loss[-1] < hist.val_loss[0] and hist.train_loss[-1] < hist.train_loss[0]
    assert job.checkpoint.parent == user_dir and job.model_key == f"user:{job.checkpoint.name}"
    assert "My" not in job.checkpoint.name  # the folder name is random; the learner's name is in the card
    model, meta = load_checkpoint(job.checkpoint)
    assert meta["name"] == "My copy / ../x" and meta["task"] == "copy" and meta["steps"] == 40
    assert meta["example_src"] == TASKS["copy"].example.src and meta["trained_here"] and not meta["stopped"]
    assert 0.0 <= job.accuracy["model"] == meta["accuracy"] <= 1.0
    assert model.cfg.d_model == 16 and model.cfg.vocab_size == len(TASKS["copy"].vocab_map)
    entry = catalog.entry(job.model_key, viewer="s1")  # private: the owner (by default the session) sees it
    assert entry.kind == "user" and entry.label == "My copy / ../x" and training_run.user_models("s1") == [entry]
    assert entry.card["mine"] and entry.card["private"] and "owner" not in entry.card
    catalog.load(job.model_key, "cpu", viewer="s1")  # the sidebar can open it


def test_text_job_saves_an_example_inside_its_vocabulary(user_dir):
    text = "the cat sat on the mat and the dog sat on the log. " * 20
    job = jobs.start("s1", TrainConfig(text=text, context=8, **{**TINY, "max_iters": 20}), "cats")
    assert job.wait(60) and job.status == "done", job.error
    _, meta = load_checkpoint(job.checkpoint)
    assert meta["task"] == "text" and meta["example_src"] == "the cat sat on the mat and the"  # 8 tokens
    assert 0.0 <= meta["accuracy"] <= 1.0 and meta["train_config"]["text"] == f"<{len(text)} characters>"


def test_stop_ends_the_job_early_and_keeps_what_it_learned(user_dir):
    job = jobs.start("s1", TrainConfig(task="copy", **LONG), "stopped")
    while job.iteration < 3:
        time.sleep(0.05)
    jobs.stop("s1")
    assert job.wait(60) and job.status == "stopped"
    assert 3 <= job.iteration < MAX_ITERS
    assert load_checkpoint(job.checkpoint)[1]["stopped"] is True


def test_time_limit_stops_a_job(server_env):
    server_env(TRANSFORMER_EXPLORER_MAX_TRAIN_SECONDS=1)
    job = jobs.start("s1", TrainConfig(task="copy", **LONG), "slow")
    assert job.wait(60) and job.status == "stopped" and job.timed_out


@pytest.mark.skipif("OpenMP" not in torch.__config__.parallel_info(), reason="per-thread counts need OpenMP")
def test_a_job_thread_has_its_own_cpu_thread_count():
    torch.set_num_threads(2)  # the fixture puts the test's setting back
    seen = {}

    def run(name, body):
        th = threading.Thread(target=lambda: seen.setdefault(name, body()))
        th.start()
        th.join()

    run("job", lambda: (training_run.own_threads(1), torch.get_num_threads())[1])
    run("later", torch.get_num_threads)  # e.g. the next page run
    assert seen == {"job": 1, "later": 2} and torch.get_num_threads() == 2


def test_server_limit_refuses_a_third_job(server_env):
    server_env(TRANSFORMER_EXPLORER_MAX_TRAININGS=2)
    a = jobs.start("a", TrainConfig(task="copy", **LONG), "a")
    jobs.start("b", TrainConfig(task="copy", **LONG), "b")
    with pytest.raises(jobs.TooManyJobs, match=r"already running 2 trainings \(its limit is 2\)"):
        jobs.start("c", tiny_task(), "c")
    assert jobs.get("c") is None and jobs.running_count() == 2
    a.stop.set()
    assert a.wait(60)
    assert jobs.start("c", tiny_task(), "c").wait(60)  # a slot is free again


def test_one_job_per_session(user_dir):
    first = jobs.start("s1", TrainConfig(task="copy", **LONG), "first")
    with pytest.raises(jobs.SessionBusy, match="already training") as info:
        jobs.start("s1", tiny_task(), "second")
    assert info.value.code == "job_busy" and jobs.get("s1") is first
    first.stop.set()
    assert first.wait(60)
    second = jobs.start("s1", tiny_task(), "second")  # a finished job is replaced
    assert jobs.get("s1") is second and second.wait(60) and second.status == "done"


@pytest.mark.parametrize(("changes", "message"), [
    (dict(lr=0.0), "lr” must be between"),
    (dict(batch_size=0), "batch_size” must be between 1 and 512"),
    (dict(d_model=66, n_heads=4), r"d_model \(66\) must be divisible by the number of heads \(4\)"),
    (dict(max_iters=0), "max_iters” must be between 1 and"),
    (dict(d_model=1024, n_layers=24, n_heads=8), "parameters; the limit on this server is 50,000,000"),
])
def test_bad_hyper_parameters_raise_training_error_and_start_nothing(changes, message):
    with pytest.raises(TrainingError, match=message):
        jobs.start("s1", tiny_task(**changes), "bad")
    assert jobs.get("s1") is None and jobs.running_count() == 0


def test_unusable_text_and_device_are_refused_before_starting():
    with pytest.raises(TrainingError, match="text is too short"):
        jobs.start("s1", TrainConfig(text="hello world", **TINY), "short")
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="no CUDA"):
            jobs.start("s1", tiny_task(device="cuda"), "gpu")
    assert jobs.get("s1") is None


def test_positional_experiment_job_trains_both_runs():
    job = jobs.start_experiment("s1", "reverse", **{**TINY, "max_iters": 10, "eval_interval": 5, "eval_iters": 1})
    assert job.wait(120) and job.status == "done", job.error
    assert list(job.histories) == ["sinusoidal", "none"] and job.iteration == job.total_iters == 20
    assert all(training_run.eval_curves(h)[0] == [0, 5, 9] for h in job.histories.values())
    assert set(job.accuracy) == {"sinusoidal", "none"} and job.checkpoint is None


def test_curves_are_consistent_copies():
    hist = History(step_loss=[float(i) for i in range(10)], eval_steps=[0, 5], train_loss=[2.0, 1.0],
                        val_loss=[3.0])
    assert training_run.eval_curves(hist) == ([0], [2.0], [3.0])  # a half-written evaluation is left out
    assert training_run.step_curve(hist, points=3) == ([4, 8, 10], [1.5, 5.5, 8.5])


def test_safe_names():
    assert training_run.safe_name("../../etc/passwd") == "etc-passwd"
    assert training_run.safe_name("  ") == "model" and training_run.safe_name("...") == "model"
    assert training_run.safe_name("我的 模型!") == "我的-模型"
    assert len(training_run.safe_name("x" * 200)) == jobs.NAME_CHARS


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_job_trains_on_cuda_and_saves_a_cpu_checkpoint():
    job = jobs.start("s1", tiny_task("reverse", device="cuda"), "gpu")
    assert job.wait(120) and job.status == "done", job.error
    model, meta = load_checkpoint(job.checkpoint)
    assert next(model.parameters()).device.type == "cpu" and 0.0 <= meta["accuracy"] <= 1.0
