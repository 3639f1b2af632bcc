"""The ``local`` engine: in this process, or a pool of ``jobs`` spawned processes."""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any, Callable, Sequence

from forecaster.engine import MapStats, Progress, auto_batch_size, batches, run_batch

_CONTEXT: Any = None


def _init(context: Any) -> None:
    global _CONTEXT
    _CONTEXT = context
    try:
        import torch

        torch.set_num_threads(1)  # one process per core
    except ImportError:  # pragma: no cover
        pass


def _pool_batch(task: tuple[Callable[[Any, Any], Any], list[Any]]) -> tuple[list[Any], float]:
    fn, batch = task
    return run_batch(fn, _CONTEXT, batch)


class LocalEngine:
    name = "local"

    def __init__(self, jobs: int = 1) -> None:
        self.workers = int(jobs)
        self.last_stats = MapStats()

    def map(self, fn: Callable[[Any, Any], Any], items: Sequence[Any], *, context: Any = None,
            batch_size: int | None = None, progress: Progress | None = None) -> list[Any]:
        items = list(items)
        t0 = time.perf_counter()
        out: list[Any] = []
        spent = 0.0
        if self.workers > 1 and len(items) > 1:
            size = batch_size or auto_batch_size(len(items), self.workers)
            parts = batches(items, size)
            # spawn, not fork: a forked child of a process that ran torch can deadlock; the
            # context (trained global models included) travels to each process once
            with mp.get_context("spawn").Pool(min(self.workers, len(parts)), initializer=_init,
                                               initargs=(context,)) as pool:
                for res, secs in pool.imap(_pool_batch, [(fn, b) for b in parts], chunksize=1):
                    out.extend(res)
                    spent += secs
                    if progress:
                        progress(len(res))
            n_batches = len(parts)
        else:
            size, n_batches = 1, len(items)
            for item in items:
                res, secs = run_batch(fn, context, [item])
                out.extend(res)
                spent += secs
                if progress:
                    progress(1)
        self.last_stats = MapStats(len(items), n_batches, size, self.workers, time.perf_counter() - t0, spent)
        return out

    def close(self) -> None:
        pass
