"""Jobs with a lifecycle: a closed tab's training is stopped and its slot freed; a restart leaves trainings
"interrupted" for their owner and no partial files; records and leftovers in the checkpoints folder are swept;
saves are atomic and bounded by the disk limit."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from service import catalog, job_records, jobs
from service.settings import settings
from transformer_core.errors import ExplorerError
from transformer_core.train.cards import chunked_accuracy, next_token_accuracy
from transformer_core.train.loop import MAX_ITERS, TrainConfig

ROOT = Path(__file__).resolve().parents[2]
OWNER, OTHER = "owner-token-0123456789abcdef", "other-token-0123456789abcdef"
TINY = dict(task="copy", d_model=16, n_heads=2, n_layers=1, batch_size=8, dropout=0.0, seed=0, device="cpu")
pytestmark = pytest.mark.usefixtures("fresh_jobs", "one_torch_thread")  # conftest.py


def long_run(**changes) -> TrainConfig:
    return TrainConfig(**{**TINY, "max_iters": MAX_ITERS, "eval_interval": 0, **changes})


def wait_for(condition, timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_a_training_whose_tab_closed_is_stopped_unsaved_and_its_slot_freed(monkeypatch, server_env):
    server_env(TRANSFORMER_EXPLORER_MAX_TRAININGS=1)
    job = jobs.start("gone", long_run(), "abandoned", owner=OWNER)
    assert wait_for(lambda: job.iteration > 2)
    assert jobs.janitor() == []  # seen at its start: not abandoned yet
    stopped_at = time.monotonic()
    gone = settings().abandon_seconds
    assert gone == 45  # the default: stopped within a minute of the tab closing
    assert jobs.janitor(now=time.monotonic() + gone + 1) == [job.id]  # abandon_seconds + 1 s without a touch()
    assert job.wait(60) and time.monotonic() - stopped_at < 60  # the slot is free within a minute
    assert job.status == "stopped" and job.abandoned and job.checkpoint is None
    assert jobs.running_count() == 0 and catalog.entries(OWNER) == catalog.entries(None)  # nothing saved
    jobs.start("next", TrainConfig(**{**TINY, "max_iters": 5, "eval_interval": 0}), "next").wait(60)


def test_the_janitor_thread_stops_an_unseen_training_by_itself(monkeypatch):
    monkeypatch.setattr(jobs, "ABANDON_S", 0.5)
    monkeypatch.setattr(jobs, "JANITOR_EVERY_S", 0.05)
    job = jobs.start("gone", long_run(), "abandoned")
    assert job.wait(jobs.JANITOR_EVERY_S + 15) and job.abandoned and job.status == "stopped"


def test_a_touched_training_keeps_running(monkeypatch):
    monkeypatch.setattr(jobs, "ABANDON_S", 0.5)
    job = jobs.start("here", long_run(), "kept")
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        jobs.touch("here")  # the page's heartbeat
        assert jobs.janitor() == []
        time.sleep(0.1)
    assert job.active and not job.abandoned


def records(root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((root / job_records.RECORDS).glob("*.json"))]


def test_a_running_training_keeps_a_record_that_holds_no_token(user_dir, monkeypatch):
    job = jobs.start("s1", long_run(), "recorded", owner=OWNER)
    (rec,) = records(user_dir)
    assert rec["id"] == job.id and rec["status"] == "running" and rec["folder"] == job.folder.name
    assert rec["owner"] == catalog.owner_id(OWNER) and OWNER not in json.dumps(rec)
    assert (rec["host"], rec["pid"], rec["instance"]) == (job_records.HOST, os.getpid(), job_records.INSTANCE)
    monkeypatch.setattr(jobs, "HEARTBEAT_S", 0.0)
    time.sleep(0.05)
    jobs.janitor()
    assert records(user_dir)[0]["beat"] > rec["beat"]  # the heartbeat
    assert job_records.sweep() == []  # its own live job is left alone
    job.stop.set()
    assert job.wait(60) and records(user_dir) == []  # gone when the job ends
    job_records.write_record(job)  # a janitor round that listed the job just before it ended refreshes late
    assert records(user_dir) == []  # and writes nothing: an ended job's record never comes back


RESTART_SCRIPT = r"""
import sys, time
from service import jobs
from transformer_core.train.loop import MAX_ITERS, TrainConfig
tc = TrainConfig(task="copy", d_model=16, n_heads=2, n_layers=1, batch_size=8, dropout=0.0, seed=0, device="cpu",
                 max_iters=MAX_ITERS, eval_interval=0)
job = jobs.start("s", tc, "my long run", owner=sys.argv[1])
print(job.id, job.folder.name, flush=True)
while True:
    jobs.touch("s")
    time.sleep(0.5)
"""


def test_after_a_restart_the_training_shows_as_interrupted_and_its_partial_files_are_gone(user_dir):
    env = {**os.environ, "TRANSFORMER_EXPLORER_CHECKPOINTS": str(user_dir), "PYTHONPATH": str(ROOT),
           "OMP_NUM_THREADS": "1"}
    server = subprocess.Popen([sys.executable, "-c", RESTART_SCRIPT, OWNER], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        job_id, folder = server.stdout.readline().split()
        assert [r["id"] for r in records(user_dir)] == [job_id]
        partial = user_dir / f".tmp-{folder}-1a2b3c4d"  # what a crash in the middle of the save leaves
        partial.mkdir()
        (partial / "model.safetensors").write_bytes(b"\0" * 1000)
        assert job_records.sweep() == []  # the other process is alive: its record and files are left alone
        assert partial.exists()
    finally:
        server.kill()  # the server dies (SIGKILL: no clean-up of its own)
        server.wait(30)
    assert job_records.sweep() == [job_id]  # the restarted server's first sweep
    assert not partial.exists() and not (user_dir / folder).exists()
    shown = jobs.interrupted(OWNER)
    assert [(r["id"], r["name"]) for r in shown] == [(job_id, "my long run")]
    assert jobs.interrupted(OTHER) == [] and jobs.interrupted(None) == []
    text = ExplorerError("job_interrupted", name=shown[0]["name"]).text("en")
    assert "my long run" in text and "interrupted" in text
    job_records.dismiss(OTHER, job_id)
    assert len(jobs.interrupted(OWNER)) == 1  # someone else cannot dismiss it
    job_records.dismiss(OWNER, job_id)
    assert jobs.interrupted(OWNER) == [] and records(user_dir) == []


def write_record(root: Path, rid: str, **fields) -> Path:
    name = rid
    rec = {"id": name, "status": "running", "name": name, "owner": catalog.owner_id(OWNER), "folder": f"m-{name}",
           "host": job_records.HOST, "pid": os.getpid(), "instance": job_records.INSTANCE, "started": time.time(),
           "beat": time.time()} | fields
    (root / job_records.RECORDS).mkdir(parents=True, exist_ok=True)
    path = root / job_records.RECORDS / f"{name}.json"
    path.write_text(json.dumps(rec))
    return path


def test_the_sweep_tells_dead_processes_from_live_ones(user_dir, caplog):
    now = time.time()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    write_record(user_dir, "a0000000000a", host="another-replica")  # another container, beating: alive
    write_record(user_dir, "b0000000000b", host="another-replica", beat=now - job_records.STALE_S - 1)  # silent: dead
    write_record(user_dir, "c0000000000c", instance="an-earlier-run")  # this pid, another process (pid 1 reused)
    write_record(user_dir, "d0000000000d", pid=int(dead.stdout))  # this host, its process has exited
    write_record(user_dir, "e0000000000e", status="interrupted", interrupted=now - job_records.KEEP_INTERRUPTED_S - 1)
    (user_dir / job_records.RECORDS / "broken.json").write_text("{not json")
    (user_dir / job_records.RECORDS / "huge.json").write_bytes(b" " * (job_records.MAX_RECORD_BYTES + 1))
    with caplog.at_level("WARNING"):
        marked = job_records.sweep()
    assert sorted(marked) == ["b0000000000b", "c0000000000c", "d0000000000d"]
    assert {r["id"]: r["status"] for r in records(user_dir)} == {
        "a0000000000a": "running", "b0000000000b": "interrupted", "c0000000000c": "interrupted",
        "d0000000000d": "interrupted"}
    assert sum("unreadable job record" in r.getMessage() for r in caplog.records) == 2


def test_the_sweep_removes_old_leftover_temporary_folders_only(user_dir):
    old, fresh = user_dir / ".tmp-m-0123456789abcdef-11111111", user_dir / ".tmp-m-fedcba9876543210-22222222"
    for d in (old, fresh):
        d.mkdir(parents=True)
        (d / "model.safetensors").write_bytes(b"x")
    os.utime(old, (time.time() - job_records.TMP_STALE_S - 10,) * 2)
    job_records.sweep()
    assert not old.exists() and fresh.exists()  # another replica may be saving into the fresh one right now


def test_a_save_that_fails_half_way_leaves_no_model_and_no_partial_files(user_dir, monkeypatch):
    import transformer_core.train.checkpoint as checkpoint

    def broken_disk(state, path, metadata=None):
        Path(path).write_bytes(b"half a file")
        raise OSError("disk failed")

    monkeypatch.setattr(checkpoint, "save_file", broken_disk)
    job = jobs.start("s1", TrainConfig(**{**TINY, "max_iters": 5, "eval_interval": 0}), "broken", owner=OWNER)
    assert job.wait(60) and job.status == "error" and isinstance(job.error, OSError)
    assert [p.name for p in user_dir.iterdir() if p.name != job_records.RECORDS] == []  # atomic: all or nothing
    assert catalog.entries(OWNER) == catalog.entries(None)


def test_a_full_checkpoints_folder_refuses_the_save(user_dir, server_env):
    server_env(TRANSFORMER_EXPLORER_CHECKPOINTS_MAX_MB=16, TRANSFORMER_EXPLORER_CHECKPOINTS=user_dir)
    user_dir.mkdir(parents=True, exist_ok=True)
    (user_dir / "filler.bin").write_bytes(b"\0" * (16 * 2**20))
    job = jobs.start("s1", TrainConfig(**{**TINY, "max_iters": 5, "eval_interval": 0}), "no room", owner=OWNER)
    assert job.wait(60) and job.status == "error" and job.error.code == "disk_full"
    assert "16 MB" in str(job.error) and not list(user_dir.glob("m-*"))


def test_chunked_accuracy_equals_the_one_batch_measurement():
    torch.manual_seed(0)
    from transformer_core.model.config import TransformerConfig
    from transformer_core.model.transformer import build_model

    model = build_model(TransformerConfig(arch="decoder_only", d_model=16, n_heads=2, n_layers=1, d_ffn=32,
                                          vocab_size=7, max_len=8, dropout=0.0), "cpu")
    data = torch.randint(0, 7, (8 * 37 + 5,))
    whole = next_token_accuracy(model, data, 8)
    for windows in (1, 3, 4, 100):
        assert chunked_accuracy(model, data, 8, windows) == pytest.approx(whole, abs=1e-6)


def test_a_folder_of_corrupt_records_never_stops_the_sweep_and_orphans_are_still_removed(user_dir):
    now = time.time()
    write_record(user_dir, "f0000000000f", status="interrupted", interrupted="yesterday", name={"x": 1})
    write_record(user_dir, "a1000000000a", pid=10**30)  # os.kill would raise OverflowError
    write_record(user_dir, "a2000000000a", pid=True, beat=[now], started="soon")
    write_record(user_dir, "a3000000000a", status="interrupted", interrupted=now, name=["a", "b"], started={"t": 1})
    write_record(user_dir, "a4000000000a", host=7, instance=None, owner=3, folder={"f": 1})
    (user_dir / job_records.RECORDS / "folder.json").mkdir()  # not a file at all
    (user_dir / job_records.RECORDS / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    orphan = user_dir / ".tmp-m-0123456789abcdef-33333333"
    orphan.mkdir()
    os.utime(orphan, (now - job_records.TMP_STALE_S - 10,) * 2)
    job_records.sweep()  # raises nothing
    jobs.janitor(now=time.monotonic())
    assert not orphan.exists()
    shown = jobs.interrupted(OWNER)
    assert all(isinstance(r["name"], str) and "{" not in r["name"] and "[" not in r["name"] for r in shown)
    assert all(r["started"] is None or isinstance(r["started"], float) for r in shown)
    assert "a3000000000a" in {r["id"] for r in shown}  # its bad fields are dropped, the record itself is kept
    assert not job_records._pid_alive(10**30) and not job_records._pid_alive(True) and not job_records._pid_alive("1")
