"""Background training jobs: run to a saved checkpoint, stop, limits, refusals; checkpoint upload; GPT-2 register."""
import json
import threading
import time

import pytest
import torch
from safetensors.torch import save_file

from transformer_core import jobs, registry
from transformer_core.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from transformer_core.gpt2 import Gpt2LoadError
from transformer_core.model import build_model
from transformer_core.tasks import TASKS
from transformer_core.training import MAX_ITERS, History, TrainConfig, TrainingError

TINY = dict(d_model=16, n_heads=2, n_layers=1, batch_size=8, dropout=0.0, eval_interval=10, eval_iters=2,
            seed=0, device="cpu")
LONG = dict(TINY, max_iters=MAX_ITERS, eval_interval=0)  # runs until stopped


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py


@pytest.fixture(autouse=True)
def user_dir(tmp_path, monkeypatch):
    """A fresh user checkpoint folder and job table; every job started here is stopped and joined."""
    folder = tmp_path / "user"
    monkeypatch.setattr(registry, "USER_DIR", folder)
    monkeypatch.setattr(jobs, "_JOBS", {})
    monkeypatch.delenv(jobs.MAX_ENV, raising=False)
    yield folder
    for job in list(jobs._JOBS.values()):
        job.stop.set()
        job.wait(30)


def tiny_task(task="copy", **changes) -> TrainConfig:
    return TrainConfig(task=task, **{**TINY, "max_iters": 40, **changes})


def test_tiny_task_job_runs_to_a_saved_loadable_checkpoint(user_dir):
    job = jobs.start("s1", tiny_task(), "My copy / ../x")
    assert job.wait(60) and job.status == "done", job.error
    hist = job.histories["model"]
    assert job.iteration == 40 and len(hist.step_loss) == 40
    assert hist.eval_steps == [0, 10, 20, 30, 39]
    assert hist.val_loss[-1] < hist.val_loss[0] and hist.train_loss[-1] < hist.train_loss[0]
    assert job.checkpoint == user_dir / "My-copy-x" and job.model_key == f"ckpt:{user_dir / 'My-copy-x'}"
    model, meta = load_checkpoint(job.checkpoint)
    assert meta["name"] == "My copy / ../x" and meta["task"] == "copy" and meta["iterations"] == 40
    assert meta["example_src"] == TASKS["copy"].example.src and meta["trained_here"] and not meta["stopped"]
    assert 0.0 <= job.accuracy["model"] == meta["accuracy"] <= 1.0
    assert model.cfg.d_model == 16 and model.cfg.vocab_size == len(TASKS["copy"].vocab_map)
    entry = next(e for e in registry.list_models() if e.key == job.model_key)
    assert entry.kind == "user" and entry.label == "My copy / ../x" and jobs.user_models() == [entry]
    registry.load_model(job.model_key, "cpu")  # the sidebar can open it


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


def test_time_limit_stops_a_job(monkeypatch):
    monkeypatch.setenv(jobs.SECONDS_ENV, "1")
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

    run("job", lambda: (jobs.own_threads(1), torch.get_num_threads())[1])
    run("later", torch.get_num_threads)  # e.g. the next page run
    assert seen == {"job": 1, "later": 2} and torch.get_num_threads() == 2


def test_server_limit_refuses_a_third_job(monkeypatch):
    monkeypatch.setenv(jobs.MAX_ENV, "2")
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
    with pytest.raises(jobs.SessionBusy, match="already training"):
        jobs.start("s1", tiny_task(), "second")
    assert jobs.get("s1") is first
    first.stop.set()
    assert first.wait(60)
    second = jobs.start("s1", tiny_task(), "second")  # a finished job is replaced
    assert jobs.get("s1") is second and second.wait(60) and second.status == "done"


@pytest.mark.parametrize(("changes", "message"), [
    (dict(lr=0.0), "learning rate must be in"),
    (dict(batch_size=0), "batch size must be between 1 and 512"),
    (dict(d_model=66, n_heads=4), r"d_model \(66\) must be divisible by the number of heads \(4\)"),
    (dict(max_iters=0), "iterations must be between 1 and"),
    (dict(d_model=1024, n_layers=24, n_heads=8), "parameters; the limit here is 50,000,000"),
])
def test_bad_hyper_parameters_raise_training_error_and_start_nothing(changes, message):
    with pytest.raises(TrainingError, match=message):
        jobs.start("s1", tiny_task(**changes), "bad")
    assert jobs.get("s1") is None and jobs.running_count() == 0


def test_unusable_text_and_device_are_refused_before_starting():
    with pytest.raises(TrainingError, match="the text is too short"):
        jobs.start("s1", TrainConfig(text="hello world", **TINY), "short")
    if not torch.cuda.is_available():
        with pytest.raises(TrainingError, match="CUDA is not available"):
            jobs.start("s1", tiny_task(device="cuda"), "gpu")
    assert jobs.get("s1") is None


def test_positional_experiment_job_trains_both_runs():
    job = jobs.start_experiment("s1", "reverse", **{**TINY, "max_iters": 10, "eval_interval": 5, "eval_iters": 1})
    assert job.wait(120) and job.status == "done", job.error
    assert list(job.histories) == ["sinusoidal", "none"] and job.iteration == job.total_iters == 20
    assert all(jobs.eval_curves(h)[0] == [0, 5, 9] for h in job.histories.values())
    assert set(job.accuracy) == {"sinusoidal", "none"} and job.checkpoint is None


def test_curves_are_consistent_copies():
    hist = History(step_loss=[float(i) for i in range(10)], eval_steps=[0, 5], train_loss=[2.0, 1.0],
                        val_loss=[3.0])
    assert jobs.eval_curves(hist) == ([0], [2.0], [3.0])  # a half-written evaluation is left out
    assert jobs.step_curve(hist, points=3) == ([4, 8, 10], [1.5, 5.5, 8.5])


def test_safe_names_and_unique_paths(tmp_path):
    assert jobs.safe_name("../../etc/passwd") == "etc-passwd"
    assert jobs.safe_name("  ") == "model" and jobs.safe_name("...") == "model"
    assert jobs.safe_name("我的 模型!") == "我的-模型"
    assert len(jobs.safe_name("x" * 200)) == jobs.NAME_CHARS
    (tmp_path / "m.pt").write_bytes(b"")
    (tmp_path / "m-2.json").write_text("{}")
    assert jobs.unique_path(tmp_path, "m") == tmp_path / "m-3"


def test_text_upload_limits():
    assert jobs.read_text_upload("héllo 你好".encode()) == "héllo 你好"
    assert jobs.read_text_upload(b"\xef\xbb\xbfbom") == "bom"
    with pytest.raises(TrainingError, match="not UTF-8 text"):
        jobs.read_text_upload(b"caf\xe9")
    with pytest.raises(TrainingError, match="the limit is 1 MB"):
        jobs.read_text_upload(b"a" * (jobs.MAX_TEXT_UPLOAD_BYTES + 1))


def saved_pair(tmp_path, **changes) -> tuple[bytes, bytes]:
    """(.pt bytes, .json bytes) of a small random copy-task model."""
    model = build_model(TASKS["copy"].model_config(**{"d_model": 16, "n_heads": 2, "n_layers": 1, **changes}), "cpu")
    pt, js = save_checkpoint(model, tmp_path / "src" / "m", {"example_src": "d a", "default": True, "x": [1]})
    return pt.read_bytes(), js.read_bytes()


class Evil:
    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))  # unpickling this would create the file


def test_uploaded_pickle_with_code_is_refused_without_running_it(tmp_path, user_dir):
    side = tmp_path / "side-effect"
    evil = tmp_path / "evil.pt"
    torch.save({"weight": Evil(side)}, evil)
    _, config = saved_pair(tmp_path)
    with pytest.raises(CheckpointError, match="refused without running it"):
        jobs.import_checkpoint(evil.read_bytes(), config, "evil")
    assert not side.exists() and not user_dir.exists()


def test_uploaded_config_must_match_the_weights(tmp_path, user_dir):
    weights, _ = saved_pair(tmp_path)
    _, wider = saved_pair(tmp_path, d_model=32)
    with pytest.raises(CheckpointError, match="the weights do not match the config"):
        jobs.import_checkpoint(weights, wider, "mismatch")
    huge = json.loads(wider)
    huge["config"] |= {"d_model": 4096, "n_layers": 48, "d_ffn": 65536}  # checked on the meta device: no 50 GB
    with pytest.raises(CheckpointError, match="do not match"):
        jobs.import_checkpoint(weights, json.dumps(huge).encode(), "huge")
    with pytest.raises(CheckpointError, match="cannot read the config"):
        jobs.import_checkpoint(weights, b"{not json", "broken")
    assert not user_dir.exists()


def test_a_good_upload_is_saved_clean_and_listed(tmp_path, user_dir):
    weights, config = saved_pair(tmp_path)
    base = jobs.import_checkpoint(weights, config, "shared model")
    assert base == user_dir / "shared-model"
    model, meta = load_checkpoint(base)
    assert meta == {"example_src": "d a", "name": "shared model", "uploaded": True}  # unknown fields dropped
    assert [e.label for e in jobs.user_models()] == ["shared model"]


def gpt2_file(path, d=768, vocab=300, ctx=16) -> None:
    """A one-layer file with GPT-2's names and a real GPT-2 width (so its head count is known)."""
    r = torch.randn
    s = {"wte.weight": r(vocab, d), "wpe.weight": r(ctx, d), "ln_f.weight": r(d), "ln_f.bias": r(d),
         "h.0.ln_1.weight": r(d), "h.0.ln_1.bias": r(d), "h.0.ln_2.weight": r(d), "h.0.ln_2.bias": r(d),
         "h.0.attn.c_attn.weight": r(d, 3 * d), "h.0.attn.c_attn.bias": r(3 * d),
         "h.0.attn.c_proj.weight": r(d, d), "h.0.attn.c_proj.bias": r(d),
         "h.0.mlp.c_fc.weight": r(d, 4 * d), "h.0.mlp.c_fc.bias": r(4 * d),
         "h.0.mlp.c_proj.weight": r(4 * d, d), "h.0.mlp.c_proj.bias": r(d)}
    save_file(s, str(path))


def test_register_gpt2_checks_then_lists_the_weights(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "_GPT2_PATHS", [])
    with pytest.raises(Gpt2LoadError, match="no file at"):
        jobs.register_gpt2(str(tmp_path / "missing.safetensors"))
    with pytest.raises(Gpt2LoadError, match="enter the path"):
        jobs.register_gpt2("  ")
    with pytest.raises(Gpt2LoadError, match="holds neither"):
        jobs.register_gpt2(str(tmp_path))
    assert not [e for e in registry.list_models() if e.kind == "gpt2" and str(tmp_path) in e.key]
    gpt2_file(tmp_path / "model.safetensors")
    key, meta = jobs.register_gpt2(str(tmp_path))  # a folder holding model.safetensors
    assert key == f"gpt2:{tmp_path / 'model.safetensors'}" and meta["n_heads"] == 12
    entry = next(e for e in registry.list_models() if e.key == key)
    assert entry.kind == "gpt2" and entry.label == "GPT-2 · model.safetensors"
    model, meta = registry.load_model(key, "cpu")
    assert model.cfg.d_model == 768 and meta["kind"] == "gpt2" and meta["n_layers"] == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_job_trains_on_cuda_and_saves_a_cpu_checkpoint():
    job = jobs.start("s1", tiny_task("reverse", device="cuda"), "gpu")
    assert job.wait(120) and job.status == "done", job.error
    model, meta = load_checkpoint(job.checkpoint)
    assert next(model.parameters()).device.type == "cpu" and 0.0 <= meta["accuracy"] <= 1.0
