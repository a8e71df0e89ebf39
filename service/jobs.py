"""Background training jobs for the Train page: one per session, a server-wide limit, no Streamlit here.

Each job trains its own model with the core's training loop on a daemon thread and, when it ends, saves a named
model folder (weights, config, card) into the user folder so every page can open it. Limits come from settings.

Lifecycle:
* before it starts, a job's peak memory is estimated (weights, gradients, AdamW's two moments, activations for
  batch x context: transformer_core.model.memory.train_bytes) and reserved in the server's memory budget for the
  whole run (refused at once when it does not fit);
* the page calls touch(session) every few seconds while its tab is open; a janitor (a daemon thread, also run on
  each touch and start) stops a job whose session has not been seen for the abandon_seconds setting (45 s),
  without saving it, so its slot is free again within a minute;
* a running job keeps a small record in CHECKPOINTS/.jobs/ (service.job_records, refreshed every HEARTBEAT_S
  seconds); after a restart, its sweep() marks the records of processes that are gone "interrupted".
* the thread itself (train, measure, save) is service.training_run; saves are atomic
  (transformer_core.train.checkpoint: a temporary folder, then a rename).
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import torch

from transformer_core.errors import ExplorerError, TrainingError
from transformer_core.model.config import TransformerConfig
from transformer_core.model.device import pick_device
from transformer_core.model.memory import forward_bytes, param_bytes, param_count, train_bytes
from transformer_core.train.experiment import experiment_runs
from transformer_core.train.loop import History, TrainConfig, make_data, model_config

from . import budget, catalog, job_records, training_run
from .settings import settings

log = logging.getLogger(__name__)
ACTIVE = ("starting", "running", "saving")
KEEP_FINISHED_S = 3600  # other sessions' finished jobs are forgotten after this
NAME_CHARS = catalog.NAME_CHARS
ABANDON_S: float | None = None  # seconds without a touch() before a job is stopped (None: the setting; tests set it)
JANITOR_EVERY_S = 5.0
HEARTBEAT_S = 10.0  # a running job's record is refreshed this often (job_records.STALE_S: taken for dead)
SWEEP_EVERY_S = 60.0


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
    owner: str | None = field(default=None, repr=False)  # the viewer token (in memory only; cards hold its hash)
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    stop: threading.Event = field(default_factory=threading.Event)
    status: str = "starting"  # running, saving, then done / stopped / error
    histories: dict[str, History] = field(default_factory=dict)  # live: the thread appends, readers copy
    iteration: int = 0  # steps done over all runs
    error: BaseException | None = None
    accuracy: dict[str, float] = field(default_factory=dict)  # run label -> accuracy on fresh examples
    checkpoint: Path | None = None  # the saved model's folder
    timed_out: bool = False
    abandoned: bool = False  # stopped by the janitor: its session was gone (nothing is saved)
    memory_bytes: int = 0  # the reservation it holds in the server's memory budget while it runs
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    thread: threading.Thread | None = field(default=None, repr=False)
    folder: Path | None = field(default=None, repr=False)  # where the model will be saved
    reservation: tuple | None = field(default=None, repr=False)  # (budget, its reservation)
    beat: float = 0.0  # when its record was last refreshed (time.time())
    record_closed: bool = False  # its record was dropped (it ended): never written again

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
_SEEN: dict[str, float] = {}  # session id -> when touch() last heard from it (time.monotonic)
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


def check(tc: TrainConfig) -> int:
    """TrainingError (a message for the learner) for settings, data, device or size that cannot work here;
    returns the bytes the run will reserve in the memory budget (budget.MemoryBudgetError when too many)."""
    tc.validate()
    pick_device(tc.device)
    data = make_data(tc)
    cfg = model_config(tc, data)
    n, most = param_count(cfg), settings().max_train_params
    if n > most:
        raise TrainingError("train_too_big", n=f"{n:,}", limit=f"{most:,}")
    need = training_bytes(tc, cfg)
    if need > budget.task_limit():
        raise TrainingError("train_memory", mb=budget.to_mb(need), limit=budget.to_mb(budget.task_limit()))
    return need


def training_bytes(tc: TrainConfig, cfg: TransformerConfig) -> int:
    """Peak bytes of a run: training (weights, gradients, AdamW, activations for batch x length) or, when larger,
    the measurement at its end (one forward over a batch of validation windows or task examples)."""
    T = cfg.max_len  # a task's longest sequence, or the text's context
    measure = training_run.TASK_ACCURACY_N if tc.task is not None else tc.batch_size
    return max(train_bytes(cfg, tc.batch_size, T, T), param_bytes(cfg) + forward_bytes(cfg, T, T, batch=measure))


def start(session: str, tc: TrainConfig, name: str, owner: str | None = None) -> Job:
    """Check the settings and the memory, then train on a daemon thread; the model is saved under `name` when it
    ends, private to `owner` (the browser's viewer token; default: the session id itself)."""
    need = check(tc)
    return _launch(Job(session, name, {"model": tc}, owner=owner or session, memory_bytes=need))


def start_experiment(session: str, task: str = "reverse", **changes) -> Job:
    """The course's "does positional information help?": the same run with and without positional encoding."""
    runs = experiment_runs(task, **changes)
    need = max(check(tc) for tc in runs.values())
    return _launch(Job(session, f"{task}-positions", runs, experiment=True, memory_bytes=need))


def _launch(job: Job) -> Job:
    _ensure_janitor()
    with _LOCK:
        old = _JOBS.get(job.session)
        if old is not None and old.active:
            raise SessionBusy()
        active = sum(j.active for j in _JOBS.values())
        if active >= settings().max_trainings:
            raise TooManyJobs(n=active, limit=settings().max_trainings)
        pool = budget.current()
        job.reservation = (pool, pool.acquire(job.memory_bytes, "training", wait_s=0))  # no wait: say it now
        try:
            if not job.experiment:
                job.folder = training_run.new_folder(job.name)
            job.thread = threading.Thread(target=training_run.run, args=(job,), name=f"train-{job.id}", daemon=True)
            now = time.monotonic()
            for sid in [s for s, j in _JOBS.items() if not j.active and now - (j.finished or now) > KEEP_FINISHED_S]:
                del _JOBS[sid]
                _SEEN.pop(sid, None)
            _JOBS[job.session], _SEEN[job.session] = job, now
            job_records.write_record(job)
            job.thread.start()
        except BaseException:
            pool.release(job.reservation[1])
            _JOBS.pop(job.session, None)
            job_records.drop_record(job)
            raise
    return job








# ---- sessions seen, the janitor --------------------------------------------------------------------------------

def touch(session: str) -> None:
    """The session's tab is open: call every few seconds while it is (the Train page's live fragment, or any page).
    A job whose session is not touched for abandon_seconds (a setting) is stopped by the janitor and not saved."""
    with _LOCK:
        _SEEN[session] = time.monotonic()
    _ensure_janitor()


def janitor(now: float | None = None) -> list[str]:
    """One round: stop jobs whose session is gone, refresh this process's job records, sweep the folder now and
    then. Returns the ids of the jobs it stopped. Runs every JANITOR_EVERY_S seconds on a daemon thread."""
    now = time.monotonic() if now is None else now
    gone_after = settings().abandon_seconds if ABANDON_S is None else ABANDON_S
    stopped = []
    with _LOCK:
        for sid, job in _JOBS.items():
            if job.active and not job.stop.is_set() and now - _SEEN.get(sid, job.started) > gone_after:
                job.abandoned = True
                job.stop.set()
                stopped.append(job.id)
        running = [j for j in _JOBS.values() if j.active]
    for job in running:
        if time.time() - job.beat >= HEARTBEAT_S:
            job_records.write_record(job)
    global _last_sweep
    if time.monotonic() - _last_sweep >= SWEEP_EVERY_S:
        _last_sweep = time.monotonic()
        job_records.sweep()
    return stopped


_janitor_thread: threading.Thread | None = None
_last_sweep = float("-inf")
_swept: set[str] = set()  # checkpoints folders swept since this process started


def startup() -> None:
    """The restart clean-up and the janitor: call once when the server starts (e.g. from app.py through a
    st.cache_resource function). Idempotent, and start(), touch() and interrupted() call it too."""
    _ensure_janitor()


def _ensure_janitor() -> None:
    """Start the janitor thread once per process, and sweep the checkpoints folder once (the restart clean-up)."""
    global _janitor_thread
    root = str(Path(settings().checkpoints_dir).resolve())
    if root not in _swept:
        _swept.add(root)
        job_records.sweep()
    with _LOCK:
        if _janitor_thread is not None and _janitor_thread.is_alive():
            return
        _janitor_thread = threading.Thread(target=_janitor_loop, name="train-janitor", daemon=True)
        _janitor_thread.start()


def _janitor_loop() -> None:
    while True:
        time.sleep(JANITOR_EVERY_S)
        try:
            janitor()
        except Exception:  # the janitor must outlive any one bad round
            log.exception("training janitor round failed")


def interrupted(owner: str | None) -> list[dict]:
    """The viewer's trainings that a server restart interrupted (job_records.interrupted), after the restart's
    sweep has run once in this process."""
    _ensure_janitor()
    return job_records.interrupted(owner)
