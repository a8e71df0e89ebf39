"""Start the app in a real Streamlit server (`streamlit run app.py` in its own process group), watch it, stop it.

Shared by tests (tests/browser/) and benches (bench/browser_bench.py, bench/soak.py); needs no browser. The server
reads the shipped tiktoken files from a writable copy of ../shared/tiktoken-cache when the environment names none.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_CACHE = ROOT.parent / "shared" / "tiktoken-cache"


def free_port() -> int:
    """A TCP port that is free on localhost right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiktoken_cache() -> str | None:
    """A writable copy of ../shared/tiktoken-cache (tiktoken deletes a file whose hash does not match)."""
    if not SHARED_CACHE.is_dir():
        return None
    tmp = Path(tempfile.mkdtemp(prefix="tiktoken-cache-"))
    for f in SHARED_CACHE.iterdir():
        shutil.copy(f, tmp / f.name)
    return str(tmp)


def server_alive(url: str) -> bool:
    """Whether the server answers /_stcore/health (start_app, the tests and the benches wait on it)."""
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group, SIGKILL it if it lingers."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def start_app(port: int | None = None, env: dict | None = None, timeout: float = 90.0, root: Path = ROOT):
    """Yield (process, url) of `streamlit run app.py` on localhost once /_stcore/health answers (`root`: the folder
    whose app.py runs; the project's unless a bench compares another app).

    The server runs in its own process group, killed in finally; its output goes to `process.log_path`
    (read it with log_tail while the server runs; it is removed afterwards).
    """
    port = port or free_port()
    url = f"http://localhost:{port}"
    full_env = {**os.environ, **(env or {})}
    cache = None
    if "TIKTOKEN_CACHE_DIR" not in full_env and (cache := tiktoken_cache()):
        full_env["TIKTOKEN_CACHE_DIR"] = cache
    log = tempfile.NamedTemporaryFile(prefix="streamlit-", suffix=".log", delete=False)  # noqa: SIM115
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
           "--server.port", str(port), "--server.address", "localhost", "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none"]  # an edited source must not turn the status widget into "Rerun?"
    proc = subprocess.Popen(cmd, cwd=root, env=full_env, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    proc.log_path = log.name
    try:
        deadline = time.monotonic() + timeout
        while not server_alive(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"streamlit did not come up on {url} (exit {proc.poll()}):\n{log_tail(proc)}")
            time.sleep(0.25)
        yield proc, url
    finally:
        _stop(proc)
        log.close()
        Path(log.name).unlink(missing_ok=True)
        if cache:
            shutil.rmtree(cache, ignore_errors=True)


def log_tail(proc: subprocess.Popen, n_chars: int = 4000) -> str:
    """The end of the server's output (for failure messages)."""
    try:
        return Path(proc.log_path).read_text(encoding="utf-8", errors="replace")[-n_chars:]
    except (AttributeError, OSError):
        return ""


def process_memory_mb(pid: int) -> dict[str, float]:
    """{"rss": VmRSS, "hwm": VmHWM (the peak RSS so far)} of a process, in MB, from /proc/<pid>/status."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        for key, name in (("VmRSS:", "rss"), ("VmHWM:", "hwm")):
            if line.startswith(key):
                out[name] = int(line.split()[1]) / 1024
    return out


def folder_bytes(root) -> int:
    """Bytes of the files under a folder (links not followed; 0 when it does not exist)."""
    from service.training_run import disk_used

    return disk_used(Path(root))


def saved(folder) -> list[str]:
    """What saves left in a checkpoints folder: model folders and temporary ones (job records aside)."""
    folder = Path(folder)
    return sorted(p.name for p in folder.iterdir() if p.name != ".jobs") if folder.is_dir() else []


def job_records(folder) -> list[dict]:
    """The job records in a checkpoints folder's .jobs (a training that started leaves one), read as JSON."""
    import json

    jobs = Path(folder) / ".jobs"
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(jobs.glob("*.json"))] if jobs.is_dir() else []


class App:
    """A running server started by fresh_app: its process, URL and checkpoints folder."""

    def __init__(self, proc: subprocess.Popen, url: str, folder: Path) -> None:
        self.proc, self.url, self.folder = proc, url, Path(folder)

    def memory(self) -> dict[str, float]:
        """The server's {"rss", "hwm"} in MB."""
        return process_memory_mb(self.proc.pid)

    def disk(self) -> int:
        """Bytes in the checkpoints folder."""
        return folder_bytes(self.folder)

    def alive(self) -> bool:
        return self.proc.poll() is None and server_alive(self.url)

    def log(self, n_chars: int = 20_000) -> str:
        return log_tail(self.proc, n_chars)

    def kill(self) -> None:
        """kill -9 the server (its process group) and reap it, as a crash or an OOM kill would end it."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)  # reaped: no zombie that still answers kill(pid, 0)


@contextmanager
def fresh_app(folder, port: int | None = None, **env):
    """start_app with its own checkpoints folder and extra settings (TRANSFORMER_EXPLORER_*=value); yields an App."""
    settings = {"TRANSFORMER_EXPLORER_CHECKPOINTS": str(folder), **{k: str(v) for k, v in env.items()}}
    with start_app(port=port, env=settings) as (proc, url):
        yield App(proc, url, folder)
