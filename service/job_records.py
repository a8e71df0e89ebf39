"""Job records: what survives a restart (no Streamlit here).

A running job keeps a small record in CHECKPOINTS/.jobs/ (refreshed by the janitor every HEARTBEAT_S seconds, see
service.jobs); after a restart, sweep() finds the records of processes that are gone, removes their partial files
(.tmp-* folders), and keeps them as "interrupted" for their owner to see (interrupted(owner)). Records are read
defensively: a damaged one is removed, never trusted.
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
from pathlib import Path

from transformer_core.sources.folders import REF

from . import catalog
from .settings import settings

log = logging.getLogger(__name__)
NAME_CHARS = catalog.NAME_CHARS
STALE_S = 120.0  # a running record not refreshed for this long is taken for dead (its process gone)
TMP_STALE_S = 3600.0  # a .tmp-* folder no record claims is removed when older than this (saves take seconds)
KEEP_INTERRUPTED_S = 7 * 86_400
RECORDS = ".jobs"  # under the checkpoints folder (not a model folder: the list skips names starting with ".")
MAX_RECORD_BYTES = 64 * 1024
HOST, PID, INSTANCE = socket.gethostname(), os.getpid(), uuid.uuid4().hex  # this server process
_WRITE = threading.Lock()  # a refresh (the janitor's thread) never lands after the job's own drop_record


def _records_dir() -> Path:
    return Path(settings().checkpoints_dir) / RECORDS


def _atomic_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_record(job) -> None:
    """Write (or refresh) the record of a running job; a failure is logged, never stops the job. Once the job
    has dropped its record (it ended), nothing writes it again: the janitor may still hold the job in its list."""
    with _WRITE:
        if not job.record_closed:
            _write(job)


def _write(job) -> None:
    job.beat = time.time()
    record = {"id": job.id, "status": "running", "name": catalog.clean_name(job.name), "owner": catalog.owner_id(
        job.owner), "folder": job.folder.name if job.folder else None, "host": HOST, "pid": PID,
              "instance": INSTANCE, "started": time.time() - job.seconds, "beat": job.beat}
    try:
        _records_dir().mkdir(parents=True, exist_ok=True)
        _atomic_json(_records_dir() / f"{job.id}.json", record)
    except OSError as exc:
        log.warning("could not write the record of job %s: %s", job.id, type(exc).__name__)


def drop_record(job) -> None:
    """The job ended: remove its record, for good (write_record no longer writes it)."""
    with _WRITE:
        job.record_closed = True
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
