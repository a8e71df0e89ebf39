"""One memory budget per server process for work in flight: traces being computed, trainings, uploads being
checked. Every such task estimates its peak before it starts (transformer_core.model.memory) and holds a
reservation for as long as it runs, so twenty learners pressing a button at once cannot take more memory than the
instructor gave the server.

What the budget covers, and what it does not: models loaded once and shared by all sessions (the model cache,
TRANSFORMER_EXPLORER_MODEL_CACHE_MB) and finished traces (the trace cache, TRANSFORMER_EXPLORER_TRACE_CACHE_MB) are
resident memory outside it, each bounded by bytes. Size it
as RAM − (Python, Streamlit, torch: about 0.5 GB) − the model cache (course-base alone is 0.8 GB) − the trace cache
− headroom for the OS. The default, 3072 MB, is that arithmetic for a 2-core, 8 GB server:
8 − 0.5 − 1.5 − 2 − 1 ≈ 3 GB. With several replicas on one machine, give each its share.

Two rules keep it fair:
* one task may take at most TASK_SHARE of the budget (so at least two learners can work at once); a bigger task is
  refused at once with `memory_too_big`, naming the limit and the setting;
* a task that fits but finds the budget in use by others waits up to WAIT_S seconds for them to finish (a burst of
  clicks is smoothed, a page never hangs for long), then is refused with `memory_busy`. Trainings do not wait: the
  Start button says at once whether there is room.
"""
from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache

from transformer_core.errors import ExplorerError
from transformer_core.model.config import TransformerConfig
from transformer_core.model.memory import KEEP_ALL, forward_bytes, max_tokens_that_fit, trace_bytes

from .settings import settings

MB = 2**20
TASK_SHARE = 0.5  # the most one task may reserve, as a share of the whole budget
WAIT_S = 5.0  # how long a task that would fit waits for others to release memory


class MemoryBudgetError(ExplorerError, RuntimeError):
    """Work refused because it would not fit in the server's memory budget (the code says which way)."""

    code = "memory_busy"


@dataclass
class Reservation:
    """Memory held by one task while it runs."""

    nbytes: int
    what: str  # "trace", "training", "upload", ...: shown in the server's own listing only
    id: int = 0
    started: float = field(default_factory=time.monotonic)


class Budget:
    """A thread-safe account of reserved bytes against a fixed total."""

    def __init__(self, total_bytes: int, task_share: float = TASK_SHARE) -> None:
        self.total = int(total_bytes)
        self.task_limit = int(total_bytes * task_share)
        self._cond = threading.Condition()
        self._held: dict[int, Reservation] = {}
        self._ids = itertools.count(1)

    def in_use(self) -> int:
        with self._cond:
            return sum(r.nbytes for r in self._held.values())

    def held(self) -> list[Reservation]:
        """The reservations now held (a copy), oldest first."""
        with self._cond:
            return list(self._held.values())

    def too_big(self, nbytes: int) -> MemoryBudgetError:
        """The refusal of a task needing nbytes, more than one task may take (naming the limit and the setting)."""
        return MemoryBudgetError("memory_too_big", mb=to_mb(nbytes), limit=to_mb(self.task_limit),
                                 setting=SETTING_NAME)

    def acquire(self, nbytes: int, what: str, wait_s: float = WAIT_S) -> Reservation:
        """Reserve nbytes (waiting up to wait_s for others to release); MemoryBudgetError when it cannot fit.
        Pair with release(), or use reserve() as a context manager."""
        nbytes = max(0, int(nbytes))
        if nbytes > self.task_limit:
            raise self.too_big(nbytes)
        deadline = time.monotonic() + max(0.0, wait_s)
        with self._cond:
            while sum(r.nbytes for r in self._held.values()) + nbytes > self.total:
                left = deadline - time.monotonic()
                if left <= 0:
                    used = sum(r.nbytes for r in self._held.values())
                    raise MemoryBudgetError("memory_busy", used=to_mb(used), limit=to_mb(self.total), mb=to_mb(nbytes))
                self._cond.wait(left)
            res = Reservation(nbytes, what, next(self._ids))
            self._held[res.id] = res
            return res

    def release(self, res: Reservation | None) -> None:
        """Give a reservation back (twice is harmless)."""
        if res is None:
            return
        with self._cond:
            if self._held.pop(res.id, None) is not None:
                self._cond.notify_all()

    @contextmanager
    def reserve(self, nbytes: int, what: str, wait_s: float = WAIT_S) -> Iterator[Reservation]:
        res = self.acquire(nbytes, what, wait_s)
        try:
            yield res
        finally:
            self.release(res)


SETTING_NAME = "TRANSFORMER_EXPLORER_MEMORY_BUDGET_MB"
_lock = threading.Lock()
_current: Budget | None = None


def to_mb(nbytes: int) -> str:
    """Bytes as whole MB (rounded up) for a message: "1,536"."""
    return f"{-(-int(nbytes) // MB):,}"


def current() -> Budget:
    """The server's budget (one per process, sized by the setting)."""
    global _current
    total = settings().memory_budget_mb * MB
    with _lock:
        if _current is None or _current.total != total:  # settings change only in tests
            _current = Budget(total)
        return _current


def reserve(nbytes: int, what: str, wait_s: float = WAIT_S):
    """Context manager holding `nbytes` of the server's budget while its block runs.

    Raises MemoryBudgetError: code `memory_too_big` at once when nbytes is more than one task may take,
    `memory_busy` when it fits but the budget stayed full for wait_s seconds. Show either with its message."""
    return current().reserve(nbytes, what, wait_s)


def task_limit() -> int:
    """The most bytes one task may reserve."""
    return current().task_limit


@lru_cache(maxsize=256)
def _fit(cfg: TransformerConfig, limit: int, keep) -> int:
    return max_tokens_that_fit(cfg, limit, keep=keep)


def trace_tokens(cfg: TransformerConfig, n_tokens: int, keep=KEEP_ALL) -> int:
    """How many of n_tokens a trace of this model may cover (source and target each) within one task's share of
    the budget: n_tokens when they all fit, fewer when the text must be cut (the page says so: error code
    `trace_cut`), 0 when not even one token fits. `keep` is what the trace keeps: KEEP_ALL, a layer index (the
    pages' layer_filter(layer)), or KEEP_NONE for an untraced forward."""
    return min(int(n_tokens), _fit(cfg, task_limit(), keep))


def cut_to_fit(cfg: TransformerConfig, prep, keep=KEEP_ALL):
    """A prepared input (text.inputs.Prepared) cut to what one traced forward of this model may cover within one
    task's share (trace_tokens); memory_too_big, naming the limit, when not even one token fits."""
    fits = trace_tokens(cfg, prep.longest, keep=keep)
    if fits < 1:
        raise current().too_big(trace_bytes(cfg, 1, 1, keep=keep))
    return prep.cut(fits)


def trace_reservation(cfg: TransformerConfig, n_src: int, n_tgt: int | None = None, keep=KEEP_ALL, batch: int = 1):
    """Context manager reserving what one traced forward of n_src (and n_tgt) tokens needs, probabilities
    included; put it around run_with_trace (`batch` > 1: or an untraced forward of that many copies, whichever is
    more). Raises MemoryBudgetError like reserve()."""
    need = trace_bytes(cfg, n_src, n_tgt, keep=keep)
    if batch > 1:  # every tensor of a forward grows with the batch: `batch` times one copy's (a test holds it), and
        # no footprint measured anew for that batch (3 s, once per process, on the Intervene page's first visit)
        need = max(need, batch * forward_bytes(cfg, n_src, n_tgt))
    return reserve(need, "trace")
