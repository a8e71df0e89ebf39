"""Background training jobs for the Train page: one per session, a server-wide limit, no Streamlit here.

Each job trains its own model with the core's training loop on a daemon thread and, when it ends, saves a named
model folder (weights, config, card) into the user folder so every page can open it. Limits come from settings.
"""
from __future__ import annotations

import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import torch

from transformer_core.errors import ExplorerError, TrainingError
from transformer_core.model.config import TransformerConfig
from transformer_core.model.device import pick_device
from transformer_core.model.transformer import Transformer
from transformer_core.text.tokenizer import load_encoding
from transformer_core.train.cards import next_token_accuracy, run_fields, task_card
from transformer_core.train.checkpoint import save_checkpoint
from transformer_core.train.experiment import experiment_runs
from transformer_core.train.loop import History, TrainConfig, TrainResult, make_data, model_config, train
from transformer_core.train.tasks import TASKS

from . import catalog
from .settings import settings

ACTIVE = ("starting", "running", "saving")
KEEP_FINISHED_S = 3600  # other sessions' finished jobs are forgotten after this
NAME_CHARS = 40
ACCURACY_WINDOWS = 256  # validation windows a text model's accuracy is measured on


class JobError(ExplorerError, RuntimeError):
    """A job that cannot start now (the code says why)."""


class TooManyJobs(JobError):
    code = "jobs_full"


class SessionBusy(JobError):
    code = "job_busy"


def device_choices() -> list[str]:
    """auto and cpu, and cuda only where it is available."""
    return ["auto", "cpu"] + (["cuda"] if torch.cuda.is_available() else [])


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
    checkpoint: Path | None = None  # the saved model's folder
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
        """The catalog key of the saved model."""
        return f"user:{self.checkpoint.name}" if self.checkpoint else None

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
    pick_device(tc.device)
    n, most = param_count(model_config(tc, make_data(tc))), settings().max_train_params
    if n > most:
        raise TrainingError("train_too_big", n=f"{n:,}", limit=f"{most:,}")


def start(session: str, tc: TrainConfig, name: str) -> Job:
    """Check the settings, then train on a daemon thread; the model is saved under `name` when it ends."""
    check(tc)
    return _launch(Job(session, name, {"model": tc}))


def start_experiment(session: str, task: str = "reverse", **changes) -> Job:
    """The course's "does positional information help?": the same run with and without positional encoding."""
    runs = experiment_runs(task, **changes)
    check(runs["none"])
    return _launch(Job(session, f"{task}-positions", runs, experiment=True))


def _launch(job: Job) -> Job:
    with _LOCK:
        old = _JOBS.get(job.session)
        if old is not None and old.active:
            raise SessionBusy()
        active = sum(j.active for j in _JOBS.values())
        if active >= settings().max_trainings:
            raise TooManyJobs(n=active, limit=settings().max_trainings)
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
        own_threads(settings().train_threads)
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
            card = model_card(job.name, results["model"])
            job.accuracy = {"model": card["accuracy"]}
            job.checkpoint = save_checkpoint(results["model"].model, new_folder(job.name), card)
            catalog.refresh()
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
        if time.monotonic() - job.started > settings().max_train_seconds:
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


def model_card(name: str, result: TrainResult) -> dict:
    """The saved model's card: the shipped models' fields (task, examples, accuracy), the name and the run."""
    tc = result.config
    if tc.task is not None:
        card = task_card(tc.task, result, n=128)
    else:
        data = make_data(tc)
        val = data.splits["val"][: ACCURACY_WINDOWS * tc.context + 1]  # bounded: logits are (N, T, vocab)
        card = {"task": "text", "arch": "decoder_only", "example_tgt": "",
                "example_src": text_example(tc.text, data.vocab_map, tc.encoding),
                "accuracy": round(next_token_accuracy(result.model, val, tc.context), 4),
                "accuracy_metric": "next-token accuracy on the validation split (never trained on)",
                "description": {"en": f"Trained here on {len(tc.text):,} characters of your text.",
                                "zh": f"在这里用你的 {len(tc.text):,} 个字符的文本训练。"}} | run_fields(result)
    return {**card, "name": name[:NAME_CHARS], "trained_here": True}


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
    """A display name from a learner's name: letters, digits (any script), '-' and '_' only; never empty."""
    stem = re.sub(r"[^\w-]+", "-", name, flags=re.UNICODE).strip("-_.")[:NAME_CHARS].strip("-_")
    return stem or "model"


def new_folder(name: str) -> Path:
    """A fresh, unguessable folder for a saved model (its name lives in the card, never in a path)."""
    root = Path(settings().checkpoints_dir)
    root.mkdir(parents=True, exist_ok=True)
    return root / f"m-{uuid.uuid4().hex[:16]}"


def user_models() -> list:
    """The models trained or uploaded here, as the sidebar lists them."""
    return [e for e in catalog.entries() if e.kind == "user"]
