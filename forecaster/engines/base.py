"""What every engine shares: the protocol, the per-map statistics and the batch helpers.
Kept apart from ``forecaster.engine`` (the registry) so an engine module never imports the
registry that imports it."""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import resource
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from core.errors import UserError

__all__ = ["Engine", "EngineError", "MapStats", "Progress", "auto_batch_size", "batches", "prepare_worker", "run_batch", "worker_batch"]

Progress = Callable[[int], None]  # called with the number of items just finished


class EngineError(UserError):
    """An engine cannot be opened or reached (unknown name, Ray missing, cluster unreachable)."""


@dataclass
class MapStats:
    """What the last ``map`` cost: ``task_seconds`` is the wall time spent inside ``fn`` summed
    over items (on whichever worker ran them), ``task_cpu_seconds`` the CPU time of the worker
    processes over the same spans, ``seconds`` the caller's wall time. On a shared machine the
    two differ: a worker that waits for a core (another process, a lower priority) adds wall
    time to its fits but no CPU time."""

    items: int = 0
    batches: int = 0
    batch_size: int = 0
    workers: int = 1
    seconds: float = 0.0
    task_seconds: float = 0.0
    task_cpu_seconds: float = 0.0
    task_page_faults: int = 0  # minor page faults of the worker processes over the same spans

    def overhead(self) -> float:
        """Share of the workers' wall time not spent in ``fn`` (scheduling, transfer, imbalance)."""
        busy = self.seconds * max(1, min(self.workers, self.batches or 1))
        return max(0.0, 1.0 - self.task_seconds / busy) if busy > 0 else 0.0


@runtime_checkable
class Engine(Protocol):
    name: str
    workers: int
    last_stats: MapStats

    def map(self, fn: Callable[[Any, Any], Any], items: Sequence[Any], *, context: Any = None,
            batch_size: int | None = None, progress: Progress | None = None) -> list[Any]:
        """``[fn(context, item) for item in items]``, run on the engine's workers."""
        ...

    def close(self) -> None: ...


def auto_batch_size(n: int, workers: int, waves: int = 4) -> int:
    """Items per task: about ``waves`` tasks per worker. Few tasks keep the per-task cost (a
    few ms on Ray) far below the work in them; more than one wave per worker lets a fast
    worker take a slow one's share and makes a retried batch cheap."""
    return max(1, math.ceil(n / max(1, workers * waves)))


def batches(items: Sequence[Any], size: int) -> list[list[Any]]:
    size = max(1, int(size))
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


BatchResult = tuple[list[Any], float, float, int]


def run_batch(fn: Callable[[Any, Any], Any], context: Any, batch: Sequence[Any]) -> BatchResult:
    """What a worker runs for one batch: the results; the wall and CPU seconds spent in ``fn``
    (the CPU time of the whole worker process: Ray's own threads in it count too); and the
    minor page faults of the process meanwhile (see ``prepare_worker``)."""
    t0, c0, f0 = time.perf_counter(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    out = [fn(context, item) for item in batch]
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    return out, time.perf_counter() - t0, time.process_time() - c0, faults


# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
WORKER_MMAP_THRESHOLD = 32 << 20  # glibc's own ceiling for its dynamic threshold
WORKER_TRIM_THRESHOLD = 128 << 20
_prepared: bool | None = None


def prepare_worker() -> bool:
    """Once per worker process (a pool process, a Ray worker): keep freed heap for the next fit.

    A fit allocates and frees arrays of a few hundred kB to a few MB. In a young process glibc
    hands those back to the kernel as they are freed (mmap'd chunks, a trimmed heap top), and
    the next fit faults every page in again: about 4,400 minor page faults per 14-day ``auto``
    fit in a spawned or Ray worker, against none in a long-lived process whose heap has grown
    (bench/fleet_scale.py counts them). That was most of the gap between a worker's fits and
    in-process fits. A worker keeps up to ``WORKER_TRIM_THRESHOLD`` of free heap instead.
    True when the allocator was tuned (glibc only; elsewhere nothing changes)."""
    global _prepared
    if _prepared is None:
        _prepared = False
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            mallopt = getattr(libc, "mallopt", None)
            if mallopt is not None:
                _prepared = bool(mallopt(_M_MMAP_THRESHOLD, WORKER_MMAP_THRESHOLD)) and \
                    bool(mallopt(_M_TRIM_THRESHOLD, WORKER_TRIM_THRESHOLD))
        except OSError:  # no C library to load (not glibc): the defaults stay
            pass
    return _prepared


def worker_batch(fn: Callable[[Any, Any], Any], context: Any, batch: Sequence[Any]) -> BatchResult:
    """``run_batch`` in a worker process: the process is prepared (``prepare_worker``) first."""
    prepare_worker()
    return run_batch(fn, context, batch)
