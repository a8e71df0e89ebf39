"""Background training jobs for the Train page: one per session, a server-wide limit, no Streamlit here.

Each job trains its own model with the core's training loop on a daemon thread and, when it ends, saves a named
model folder (weights, config, card) into the user folder so every page can open it. Limits come from settings.

Lifecycle:
* before it starts, a job's peak memory is estimated (weights, gradients, AdamW's two moments, activations for
  batch x context: transformer_core.model.memory.train_bytes) and reserved in the server's memory budget for the
  whole run (refused at once when it does not fit);
* the page calls touch(session) every few seconds while its tab is open; a janitor (a daemon thread, also run on
  each touch and start) stops a job whose session has not been seen for ABANDON_S seconds, without saving it, so
  its slot is free again within a minute;
* a running job keeps a small record in CHECKPOINTS/.jobs/ (refreshed every HEARTBEAT_S seconds); after a restart,
  sweep() finds the records of processes that are gone, removes their partial files (.tmp-* folders), and keeps
  them as "interrupted" for their owner to see (interrupted(owner)). Saves themselves are atomic
  (transformer_core.train.checkpoint: a temporary folder, then a rename).
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import torch

from transformer_core.errors import CheckpointError, ExplorerError, TrainingError
from transformer_core.model.config import TransformerConfig
from transformer_core.model.device import pick_device
from transformer_core.model.memory import forward_bytes, param_bytes, param_count, train_bytes
from transformer_core.sources.folders import REF
from transformer_core.train.cards import task_card, user_text_card
from transformer_core.train.checkpoint import save_checkpoint
from transformer_core.train.experiment import experiment_runs
from transformer_core.train.loop import History, TrainConfig, TrainResult, make_data, model_config, train
from transformer_core.train.tasks import TASKS

from . import budget, catalog
from .settings import settings

log = logging.getLogger(__name__)
ACTIVE = ("starting", "running", "saving")
KEEP_FINISHED_S = 3600  # other sessions' finished jobs are forgotten after this
NAME_CHARS = catalog.NAME_CHARS
ACCURACY_WINDOWS = 256  # validation windows a text model's accuracy is measured on
TASK_ACCURACY_N = 128  # fresh examples a task model's accuracy is measured on (one batch)
ABANDON_S = 45.0  # a job whose session sent no touch() for this long is stopped (an open tab touches every 10 s)
JANITOR_EVERY_S = 5.0
HEARTBEAT_S = 10.0  # a running job's record is refreshed this often ...
STALE_S = 120.0  # ... and taken for dead (its process gone) when older than this
SWEEP_EVERY_S = 60.0
TMP_STALE_S = 3600.0  # a .tmp-* folder no record claims is removed when older than this (saves take seconds)
KEEP_INTERRUPTED_S = 7 * 86_400
RECORDS = ".jobs"  # under the checkpoints folder (not a model folder: the list skips names starting with ".")
MAX_RECORD_BYTES = 64 * 1024
HOST, PID, INSTANCE = socket.gethostname(), os.getpid(), uuid.uuid4().hex  # this server process


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
    measure = TASK_ACCURACY_N if tc.task is not None else tc.batch_size
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
                job.folder = new_folder(job.name)
            job.thread = threading.Thread(target=_run, args=(job,), name=f"train-{job.id}", daemon=True)
            now = time.monotonic()
            for sid in [s for s, j in _JOBS.items() if not j.active and now - (j.finished or now) > KEEP_FINISHED_S]:
                del _JOBS[sid]
                _SEEN.pop(sid, None)
            _JOBS[job.session], _SEEN[job.session] = job, now
            _write_record(job)
            job.thread.start()
        except BaseException:
            pool.release(job.reservation[1])
            _JOBS.pop(job.session, None)
            _drop_record(job)
            raise
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
        if job.abandoned:
            pass  # nobody is there to read it: free the slot now
        elif job.experiment:
            with torch.inference_mode():
                job.accuracy = {k: TASKS[r.config.task].accuracy(r.model, n=TASK_ACCURACY_N)
                                for k, r in results.items()}
        elif results and results["model"].iterations:
            card = model_card(job.name, results["model"])
            job.accuracy = {"model": card["accuracy"]}
            card |= {"name": catalog.name_for(job.name, job.owner)}
            owner = catalog.owner_id(job.owner)
            if owner:
                card["owner"] = owner
            check_disk(param_bytes(results["model"].model.cfg))
            job.checkpoint = save_checkpoint(results["model"].model, job.folder, card)
            catalog.refresh()
        job.status = "stopped" if job.stop.is_set() else "done"
    except Exception as exc:  # noqa: BLE001 - shown to the learner by the page
        job.error, job.status = exc, "error"
    finally:
        job.finished = time.monotonic()
        if job.reservation is not None:
            pool, res = job.reservation
            pool.release(res)
        _drop_record(job)


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


# ---- sessions seen, the janitor --------------------------------------------------------------------------------

def touch(session: str) -> None:
    """The session's tab is open: call every few seconds while it is (the Train page's live fragment, or any page).
    A job whose session is not touched for ABANDON_S seconds is stopped by the janitor and not saved."""
    with _LOCK:
        _SEEN[session] = time.monotonic()
    _ensure_janitor()


def janitor(now: float | None = None) -> list[str]:
    """One round: stop jobs whose session is gone, refresh this process's job records, sweep the folder now and
    then. Returns the ids of the jobs it stopped. Runs every JANITOR_EVERY_S seconds on a daemon thread."""
    now = time.monotonic() if now is None else now
    stopped = []
    with _LOCK:
        for sid, job in _JOBS.items():
            if job.active and not job.stop.is_set() and now - _SEEN.get(sid, job.started) > ABANDON_S:
                job.abandoned = True
                job.stop.set()
                stopped.append(job.id)
        running = [j for j in _JOBS.values() if j.active]
    for job in running:
        if time.time() - job.beat >= HEARTBEAT_S:
            _write_record(job)
    global _last_sweep
    if time.monotonic() - _last_sweep >= SWEEP_EVERY_S:
        _last_sweep = time.monotonic()
        sweep()
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
        sweep()
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


# ---- job records: what survives a restart ------------------------------------------------------------------------

def _records_dir() -> Path:
    return Path(settings().checkpoints_dir) / RECORDS


def _atomic_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _write_record(job: Job) -> None:
    """Write (or refresh) the record of a running job; a failure is logged, never stops the job."""
    job.beat = time.time()
    record = {"id": job.id, "status": "running", "name": catalog.clean_name(job.name), "owner": catalog.owner_id(
        job.owner), "folder": job.folder.name if job.folder else None, "host": HOST, "pid": PID,
              "instance": INSTANCE, "started": time.time() - job.seconds, "beat": job.beat}
    try:
        _records_dir().mkdir(parents=True, exist_ok=True)
        _atomic_json(_records_dir() / f"{job.id}.json", record)
    except OSError as exc:
        log.warning("could not write the record of job %s: %s", job.id, type(exc).__name__)


def _drop_record(job: Job) -> None:
    try:
        (_records_dir() / f"{job.id}.json").unlink(missing_ok=True)
    except OSError:
        pass


MAX_PID = 2**22  # Linux's largest pid (pid_max's ceiling); a bigger one in a record is damage, not a process


def _pid_alive(pid: object) -> bool:
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid <= MAX_PID:
        return False
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except (ProcessLookupError, OverflowError, ValueError):
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def _number(value: object) -> float | None:
    """A record's time as a finite float, or None for anything else (a string, a list, NaN, a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if value == value and abs(value) < 1e12 else None


def _read_record(path: Path) -> dict:
    """A job record read defensively: a dict whose status is running or interrupted, every field typed (strings
    cut to size, times finite floats or None); ValueError for anything else (too large, not JSON, wrong shape)."""
    if path.stat().st_size > MAX_RECORD_BYTES:
        raise ValueError("too large")
    rec = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(rec, dict) or rec.get("status") not in ("running", "interrupted"):
        raise ValueError("not a job record")
    text = {k: rec.get(k) if isinstance(rec.get(k), str) else None
            for k in ("id", "name", "owner", "folder", "host", "instance")}
    times = {k: _number(rec.get(k)) for k in ("started", "beat", "interrupted")}
    pid = rec.get("pid") if isinstance(rec.get("pid"), int) and not isinstance(rec.get("pid"), bool) else None
    return {**text, **times, "pid": pid, "status": rec["status"],
            "name": catalog.clean_name(text["name"] or "")[:NAME_CHARS]}


def _alive(rec: dict, now: float) -> bool:
    """Is the process that wrote a running record still there? Its heartbeat, and on this host its pid, say."""
    beat = rec.get("beat")
    if beat is None or now - beat > STALE_S:
        return False
    if rec.get("host") != HOST:
        return True  # another machine or container, beating recently
    if rec.get("pid") == PID:
        return rec.get("instance") == INSTANCE  # same pid, other instance: this process restarted (pid 1)
    return _pid_alive(rec.get("pid"))


_reported: set[str] = set()


def sweep(now: float | None = None) -> list[str]:
    """After a restart (and now and then): turn the records of running jobs whose process is gone into
    "interrupted" ones and remove their partial files; drop unreadable records (reported once) and old
    interrupted ones; remove .tmp-* folders nobody finished long ago. Returns the ids it marked interrupted."""
    now = time.time() if now is None else now
    root = Path(settings().checkpoints_dir)
    marked = []
    folder = _records_dir()
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            rec = _read_record(path)
        except (OSError, ValueError, RecursionError) as exc:
            if str(path) not in _reported:
                _reported.add(str(path))
                log.warning("removing unreadable job record %s: %s", path.name, type(exc).__name__)
            try:
                path.unlink(missing_ok=True)
            except OSError:  # a folder named *.json, a read-only disk: skip it, the round goes on
                pass
            continue
        try:
            if rec["status"] == "running" and not _alive(rec, now):
                _remove_partial(root, rec["folder"])
                rec |= {"status": "interrupted", "interrupted": now}
                _atomic_json(path, rec)
                marked.append(str(rec["id"]))
            elif rec["status"] == "interrupted" and now - (rec["interrupted"] or 0.0) > KEEP_INTERRUPTED_S:
                path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("could not update job record %s: %s", path.name, type(exc).__name__)
    for tmp in root.glob(".tmp-*") if root.is_dir() else []:
        try:
            if tmp.is_dir() and now - tmp.stat().st_mtime > TMP_STALE_S:
                shutil.rmtree(tmp, ignore_errors=True)
        except OSError:
            pass
    return marked


def _remove_partial(root: Path, folder: object) -> None:
    """The partial files of a job that saved into `folder`: its temporary folders (the rename never happened)."""
    if not isinstance(folder, str) or not REF.fullmatch(folder):
        return
    for tmp in root.glob(f".tmp-{folder}-*"):
        shutil.rmtree(tmp, ignore_errors=True)


def interrupted(owner: str | None) -> list[dict]:
    """The viewer's trainings that a server restart interrupted: [{"id", "name", "started"}] (started: a Unix
    time). The Train page shows each with the message `job_interrupted` and a button calling dismiss()."""
    me = catalog.owner_id(owner)
    if me is None:
        return []
    _ensure_janitor()
    out = []
    folder = _records_dir()
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            rec = _read_record(path)
        except (OSError, ValueError, RecursionError):
            continue
        if rec["status"] == "interrupted" and rec["owner"] == me and rec["id"] and re.fullmatch(r"[0-9a-f]{12}",
                                                                                              rec["id"]):
            out.append({"id": rec["id"], "name": rec["name"], "started": rec["started"]})
    return out


def dismiss(owner: str | None, job_id: str) -> None:
    """Forget one of the viewer's interrupted trainings."""
    me = catalog.owner_id(owner)
    if me is None or not re.fullmatch(r"[0-9a-f]{12}", str(job_id)):
        return
    path = _records_dir() / f"{job_id}.json"
    try:
        rec = _read_record(path)
        if rec["owner"] == me and rec["status"] == "interrupted":
            path.unlink(missing_ok=True)
    except (OSError, ValueError, RecursionError):
        return


# ---- disk ---------------------------------------------------------------------------------------------------------

def disk_used(root: Path | None = None) -> int:
    """Bytes of the files under the checkpoints folder (symbolic links not followed)."""
    root = Path(settings().checkpoints_dir) if root is None else root
    total = 0
    for base, _, files in os.walk(root):
        for f in files:
            try:
                total += os.lstat(os.path.join(base, f)).st_size
            except OSError:
                pass
    return total


def check_disk(extra: int) -> None:
    """CheckpointError `disk_full` when saving `extra` more bytes would pass TRANSFORMER_EXPLORER_CHECKPOINTS_MAX_MB."""
    limit = settings().checkpoints_max_mb * 2**20
    if disk_used() + extra > limit:
        raise CheckpointError("disk_full", mb=settings().checkpoints_max_mb)


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
        card = task_card(tc.task, result, n=TASK_ACCURACY_N)
    else:
        card = user_text_card(result, ACCURACY_WINDOWS)
    return {**card, "name": name[:NAME_CHARS], "trained_here": True}


def safe_name(name: str) -> str:
    """A display name from a learner's name: letters, digits (any script), '-' and '_' only; never empty."""
    stem = re.sub(r"[^\w-]+", "-", name, flags=re.UNICODE).strip("-_.")[:NAME_CHARS].strip("-_")
    return stem or "model"


def new_folder(name: str) -> Path:
    """A fresh, unguessable folder for a saved model (its name lives in the card, never in a path)."""
    root = Path(settings().checkpoints_dir)
    root.mkdir(parents=True, exist_ok=True)
    return root / f"m-{uuid.uuid4().hex[:16]}"


def user_models(viewer: str | None = None) -> list:
    """The viewer's own models (trained or uploaded here), as the sidebar lists them."""
    return [e for e in catalog.entries(viewer) if e.kind == "user" and e.card.get("mine")]
