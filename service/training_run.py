"""One training job's thread, and what the Train page reads from a job: train each run, measure it, save the model
into a fresh folder of the checkpoints folder (within its disk limit); loss curves; safe names (no Streamlit here)."""
from __future__ import annotations

import os
import re
import threading
import time
import uuid
from pathlib import Path

import torch

from transformer_core.errors import CheckpointError
from transformer_core.model.memory import param_bytes
from transformer_core.train.cards import task_card, user_text_card
from transformer_core.train.checkpoint import save_checkpoint
from transformer_core.train.loop import History, TrainResult, train
from transformer_core.train.tasks import TASKS

from . import catalog
from .job_records import drop_record
from .settings import settings

NAME_CHARS = catalog.NAME_CHARS
ACCURACY_WINDOWS = 256  # validation windows a text model's accuracy is measured on
TASK_ACCURACY_N = 128  # fresh examples a task model's accuracy is measured on (one batch)


def run(job) -> None:
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
        drop_record(job)


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


def _progress(job, label: str, offset: int):
    def callback(p) -> None:
        job.histories[label] = p.history
        job.iteration = offset + p.iteration
        if time.monotonic() - job.started > settings().max_train_seconds:
            job.timed_out = True
            job.stop.set()
    return callback


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
