"""Background training jobs for the Train page: one per session, a server-wide limit, no Streamlit here.

Each job trains its own model with training.train on a daemon thread and, when it ends, saves a named
checkpoint into the user folder (registry.USER_DIR) so every page can open it. Settings from the environment:
TRANSFORMER_EXPLORER_MAX_TRAININGS (concurrent trainings on the server, default 2),
TRANSFORMER_EXPLORER_MAX_TRAIN_SECONDS (a job is stopped after this long, default 1800),
TRANSFORMER_EXPLORER_MAX_TRAIN_PARAMS (largest model a job may build, default 50 million),
TRANSFORMER_EXPLORER_TRAIN_THREADS (CPU threads of one job, default 1: on a small server two jobs and the pages
share the cores, and OpenMP threads that wait on a busy core make a step many times slower than one thread).
"""
from __future__ import annotations

import os
import re
import tempfile
import threading
import time
import uuid
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from . import registry
from .checkpoint import CheckpointError, load_state_into, read_config, read_state_dict, save_checkpoint
from .config import ConfigError, TransformerConfig
from .make_assets import next_token_accuracy, task_meta
from .model import Transformer, build_model
from .tasks import TASKS
from .tokenizer import load_encoding
from .training import (
    EXPERIMENT_DEFAULTS,
    History,
    TrainConfig,
    TrainingError,
    TrainResult,
    describe,
    make_data,
    model_config,
    train,
)

MAX_ENV, SECONDS_ENV, PARAMS_ENV, THREADS_ENV = (
    "TRANSFORMER_EXPLORER_MAX_TRAININGS", "TRANSFORMER_EXPLORER_MAX_TRAIN_SECONDS",
    "TRANSFORMER_EXPLORER_MAX_TRAIN_PARAMS", "TRANSFORMER_EXPLORER_TRAIN_THREADS")
DEFAULTS = {MAX_ENV: 2, SECONDS_ENV: 1800, PARAMS_ENV: 50_000_000, THREADS_ENV: 1}
ACTIVE = ("starting", "running", "saving")
KEEP_FINISHED_S = 3600  # other sessions' finished jobs are forgotten after this
MAX_CONFIG_BYTES = 1 << 20
NAME_CHARS = 40
ACCURACY_WINDOWS = 256  # validation windows a text model's accuracy is measured on
EXPERIMENT_RUNS = ("sinusoidal", "none")  # positional encoding on, off
EXPERIMENT_TASKS = ("reverse", "copy")  # order-sensitive: without positions the encoder cannot tell first from last
MAX_TEXT_UPLOAD_BYTES = 1 << 20
MAX_WEIGHTS_UPLOAD_BYTES = 50 << 20
# the tasks learn in a minute or two on a 2-core CPU with these (the shipped ones are wider and train longer)
TASK_DEFAULTS = TrainConfig(batch_size=32, d_model=64, n_layers=2, n_heads=4, dropout=0.0, lr=3e-3,
                            eval_interval=50, eval_iters=4, lr_schedule="cosine", seed=0)
TASK_ITERS = {"copy": 300, "reverse": 400, "sort": 800, "repeat": 600, "count": 600}


class JobError(RuntimeError):
    """A job that cannot start now (the subclass says why)."""


class TooManyJobs(JobError):
    """The server-wide limit of concurrent trainings is reached."""


class SessionBusy(JobError):
    """This session already has a training running."""


def defaults(target: str) -> TrainConfig:
    """Starting settings: a task's (small, quick) or, for "text", the course GPT's (TrainConfig's own)."""
    if target == "text":
        return TrainConfig()
    return replace(TASK_DEFAULTS, task=target, max_iters=TASK_ITERS.get(target, 500))


def device_choices() -> list[str]:
    """auto and cpu, and cuda only where it is available."""
    return ["auto", "cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def read_text_upload(raw: bytes) -> str:
    """An uploaded .txt file as text; TrainingError when it is too large or not UTF-8."""
    if len(raw) > MAX_TEXT_UPLOAD_BYTES:
        raise TrainingError(f"the file has {len(raw):,} bytes; the limit is {MAX_TEXT_UPLOAD_BYTES // 2**20} MB")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TrainingError(f"the file is not UTF-8 text (byte {exc.start} cannot be decoded)") from exc


def limit(env: str) -> int:
    """A positive integer setting from the environment, else its default."""
    try:
        return max(1, int(os.environ.get(env, DEFAULTS[env])))
    except ValueError:
        return DEFAULTS[env]


@dataclass
class Job:
    """One background training (or the two runs of the positional experiment) and what it produced."""

    session: str
    name: str  # the learner's name for the checkpoint
    configs: dict[str, TrainConfig]  # run label -> config: {"model": tc}, or the experiment's two runs
    experiment: bool = False
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    stop: threading.Event = field(default_factory=threading.Event)
    status: str = "starting"  # running, saving, then done / stopped / error
    histories: dict[str, History] = field(default_factory=dict)  # live: the thread appends, readers copy
    iteration: int = 0  # steps done over all runs
    error: BaseException | None = None
    accuracy: dict[str, float] = field(default_factory=dict)  # run label -> accuracy on fresh examples
    checkpoint: Path | None = None  # PATH without suffix
    timed_out: bool = False
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def total_iters(self) -> int:
        return sum(tc.max_iters for tc in self.configs.values())

    @property
    def fraction(self) -> float:
        return min(self.iteration / self.total_iters, 1.0)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def seconds(self) -> float:
        return (self.finished or time.monotonic()) - self.started

    @property
    def model_key(self) -> str | None:
        """The registry key of the saved checkpoint."""
        return f"ckpt:{self.checkpoint}" if self.checkpoint else None

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job ends; True when it did."""
        if self.thread is not None:
            self.thread.join(timeout)
        return not self.active


_JOBS: dict[str, Job] = {}  # session id -> its latest job
_LOCK = threading.Lock()


def get(session: str) -> Job | None:
    """The session's latest job (running or finished), if any."""
    with _LOCK:
        return _JOBS.get(session)


def running_count() -> int:
    with _LOCK:
        return sum(j.active for j in _JOBS.values())


def stop(session: str) -> None:
    """Ask the session's job to stop after its current step."""
    job = get(session)
    if job is not None:
        job.stop.set()


def param_count(cfg: TransformerConfig) -> int:
    """Parameters a config would have, counted on the meta device (nothing is allocated)."""
    with torch.device("meta"):
        return sum(p.numel() for p in Transformer(cfg).parameters())


def check(tc: TrainConfig) -> None:
    """TrainingError (a message for the learner) for settings, data, device or size that cannot work here."""
    tc.validate()
    try:
        from .device import pick_device

        pick_device(tc.device)
    except ValueError as exc:
        raise TrainingError(str(exc)) from exc
    n, most = param_count(model_config(tc, make_data(tc))), limit(PARAMS_ENV)
    if n > most:
        raise TrainingError(f"this model would have {n:,} parameters; the limit here is {most:,} "
                            "(use a smaller d_model or fewer layers)")


def start(session: str, tc: TrainConfig, name: str) -> Job:
    """Check the settings, then train on a daemon thread; the checkpoint is saved under `name` when it ends."""
    check(tc)
    return _launch(Job(session, name, {"model": tc}))


def start_experiment(session: str, task: str = "reverse", **changes) -> Job:
    """The course's "does positional information help?": the same run with and without positional encoding."""
    base = TrainConfig(task=task, **{**EXPERIMENT_DEFAULTS, **changes})
    check(base)
    runs = {p: replace(base, positional=p) for p in EXPERIMENT_RUNS}
    return _launch(Job(session, f"{task}-positions", runs, experiment=True))


def _launch(job: Job) -> Job:
    with _LOCK:
        old = _JOBS.get(job.session)
        if old is not None and old.active:
            raise SessionBusy("this session is already training a model: stop it or wait until it ends")
        active = sum(j.active for j in _JOBS.values())
        if active >= limit(MAX_ENV):
            raise TooManyJobs(f"the server is already running {active} trainings (its limit is {limit(MAX_ENV)}); "
                              "try again when one has finished")
        now = time.monotonic()
        for sid in [s for s, j in _JOBS.items() if not j.active and now - (j.finished or now) > KEEP_FINISHED_S]:
            del _JOBS[sid]
        _JOBS[job.session] = job
        job.thread = threading.Thread(target=_run, args=(job,), name=f"train-{job.id}", daemon=True)
        job.thread.start()
    return job


def _run(job: Job) -> None:
    """The thread: train each run, then measure and save; every failure is kept as job.error."""
    try:
        own_threads(limit(THREADS_ENV))
        job.status = "running"
        results: dict[str, TrainResult] = {}
        offset = 0
        for label, tc in job.configs.items():
            if job.stop.is_set():
                break
            results[label] = train(tc, _progress(job, label, offset), job.stop)
            job.histories[label] = results[label].history
            offset += tc.max_iters
        job.status = "saving"
        if job.experiment:
            job.accuracy = {k: TASKS[r.config.task].accuracy(r.model, n=128) for k, r in results.items()}
        elif results and results["model"].iterations:
            meta = model_meta(job.name, results["model"])
            job.accuracy = {"model": meta["accuracy"]}
            base = unique_path(registry.USER_DIR, safe_name(job.name))
            save_checkpoint(results["model"].model, base, meta)
            job.checkpoint = base
        job.status = "stopped" if job.stop.is_set() else "done"
    except Exception as exc:  # noqa: BLE001 - shown to the learner by the page
        job.error, job.status = exc, "error"
    finally:
        job.finished = time.monotonic()


def own_threads(n: int) -> None:
    """Use n intra-op threads in the calling thread only (with OpenMP the count is per thread).

    torch.set_num_threads also makes n the count of threads started later (the pages' script runs); a helper
    thread sets that default back, which leaves this thread's own count at n.
    """
    before = torch.get_num_threads()
    if n == before:
        return
    torch.set_num_threads(n)
    helper = threading.Thread(target=torch.set_num_threads, args=(before,), daemon=True)
    helper.start()
    helper.join()


def _progress(job: Job, label: str, offset: int):
    def callback(p) -> None:
        job.histories[label] = p.history
        job.iteration = offset + p.iteration
        if time.monotonic() - job.started > limit(SECONDS_ENV):
            job.timed_out = True
            job.stop.set()
    return callback


def eval_curves(hist: History) -> tuple[list[int], list[float], list[float]]:
    """(steps, train loss, val loss) of the evaluations so far (a copy; the thread may be appending)."""
    n = min(len(hist.eval_steps), len(hist.train_loss), len(hist.val_loss))
    return hist.eval_steps[:n], hist.train_loss[:n], hist.val_loss[:n]


def step_curve(hist: History, points: int = 300) -> tuple[list[int], list[float]]:
    """The per-step training loss averaged into at most `points` buckets: (last step of bucket, mean)."""
    losses = list(hist.step_loss)
    size = max(1, -(-len(losses) // points))
    chunks = [losses[i : i + size] for i in range(0, len(losses), size)]
    return [min(i + size, len(losses)) for i in range(0, len(losses), size)], [sum(c) / len(c) for c in chunks]


def model_meta(name: str, result: TrainResult) -> dict:
    """The checkpoint meta: the shipped models' fields (task, examples, accuracy), the name and the run."""
    tc = result.config
    if tc.task is not None:
        meta = task_meta(tc.task, result)
    else:
        data = make_data(tc)
        val = data.splits["val"][: ACCURACY_WINDOWS * tc.context + 1]  # bounded: logits are (N, T, vocab)
        meta = {"task": "text", "arch": "decoder_only", "example_tgt": "",
                "example_src": text_example(tc.text, data.vocab_map, tc.encoding),
                "accuracy": round(next_token_accuracy(result.model.cpu(), val, tc.context), 4),
                "accuracy_metric": "next-token accuracy on the validation split (never trained on)",
                "description": {"en": f"Trained here on {len(tc.text):,} characters of your text.",
                                "zh": f"在这里用你的 {len(tc.text):,} 个字符的文本训练。"}}
    return {**meta, "name": name, "iterations": result.iterations, "stopped": result.stopped,
            "seconds": round(result.seconds, 1), "train_config": describe(tc), "trained_here": True}


def text_example(text: str, vocab_map, encoding: str = "cl100k_base", max_tokens: int = 8) -> str:
    """A short start of the training text whose tokens are all in the model's vocabulary (the sidebar example)."""
    known, best, enc = set(vocab_map), "", load_encoding(encoding)
    for m in re.finditer(r"\S+", text[:2000]):
        prefix = text[: m.end()].strip()
        ids = enc.encode(prefix, allowed_special=set(), disallowed_special=())
        if len(ids) > max_tokens or not set(ids) <= known:
            break
        best = prefix
    return best or text.strip()[:1]


def safe_name(name: str) -> str:
    """A file stem from a learner's name: letters, digits (any script), '-' and '_' only; never empty."""
    stem = re.sub(r"[^\w-]+", "-", name, flags=re.UNICODE).strip("-_.")[:NAME_CHARS].strip("-_")
    return stem or "model"


def unique_path(folder: Path, stem: str) -> Path:
    """FOLDER/stem, or stem-2, stem-3, ... when taken (a saved model is never overwritten)."""
    folder = Path(folder)
    path, k = folder / stem, 2
    while path.with_suffix(".pt").exists() or path.with_suffix(".json").exists():
        path, k = folder / f"{stem}-{k}", k + 1
    return path


def user_models() -> list[registry.ModelEntry]:
    """The checkpoints trained or uploaded here, as the sidebar lists them."""
    return [e for e in registry.list_models() if e.kind == "user"]


META_TEXT_FIELDS = ("task", "example_src", "example_tgt", "accuracy_metric")


def import_checkpoint(weights: bytes, config: bytes, name: str) -> Path:
    """Check an uploaded (.pt, .json) pair and save a clean copy in the user folder; CheckpointError if refused.

    The weights are read with weights_only=True (pickled code is refused, never run) before anything else,
    and compared with the config on the meta device, so a config that does not fit them allocates nothing.
    """
    if len(weights) > MAX_WEIGHTS_UPLOAD_BYTES:
        raise CheckpointError(f"the weights file is larger than {MAX_WEIGHTS_UPLOAD_BYTES // 2**20} MB")
    if len(config) > MAX_CONFIG_BYTES:
        raise CheckpointError(f"the config file is larger than {MAX_CONFIG_BYTES // 1024} KB")
    with tempfile.TemporaryDirectory(prefix="upload-") as tmp:
        base = Path(tmp) / "upload"
        base.with_suffix(".pt").write_bytes(weights)
        base.with_suffix(".json").write_bytes(config)
        state = read_state_dict(base.with_suffix(".pt"))
        cfg, meta = read_config(base)
    try:
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # copying into meta tensors is a no-op, and torch says so
            load_state_into(Transformer(cfg), state)  # shapes only: raises CheckpointError on a mismatch
        model = load_state_into(build_model(cfg, "cpu"), state)
    except (ConfigError, RuntimeError) as exc:
        raise CheckpointError(f"the config cannot build a model for these weights: {exc}") from exc
    clean = {k: str(meta[k])[:500] for k in META_TEXT_FIELDS if isinstance(meta.get(k), str)}
    if isinstance(meta.get("description"), dict):
        clean["description"] = {lang: str(meta["description"].get(lang, ""))[:500] for lang in ("en", "zh")}
    if isinstance(meta.get("accuracy"), (int, float)):
        clean["accuracy"] = float(meta["accuracy"])
    base = unique_path(registry.USER_DIR, safe_name(name))
    save_checkpoint(model, base, {**clean, "name": name[:NAME_CHARS] or base.name, "uploaded": True})
    return base


def register_gpt2(path: str) -> tuple[str, dict]:
    """Load GPT-2 weights from a local file (or a folder holding model.safetensors / pytorch_model.bin) to check
    them, then register them for every page; returns (model key, meta). Gpt2LoadError says what is wrong."""
    from .gpt2 import Gpt2LoadError, load_gpt2

    if not path.strip():
        raise Gpt2LoadError("enter the path of model.safetensors or pytorch_model.bin")
    chosen = Path(path.strip()).expanduser()
    if chosen.is_dir():
        found = [chosen / f for f in ("model.safetensors", "pytorch_model.bin") if (chosen / f).is_file()]
        if not found:
            raise Gpt2LoadError(f"{chosen} holds neither model.safetensors nor pytorch_model.bin")
        chosen = found[0]
    _, meta = load_gpt2(chosen)
    return registry.add_gpt2_path(chosen), meta
