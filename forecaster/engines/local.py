"""The ``local`` engine: in this process, or a pool of ``jobs`` spawned processes.

The pool starts at the first ``map`` and lives until ``close``: a process pays its start and
its imports (statsmodels, torch for the LSTM) once, not once per map.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
from typing import Any, Callable, Sequence

from forecaster.engines.base import BatchResult, MapStats, Progress, auto_batch_size, batches, run_batch, worker_batch

_ONE_THREAD = False
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _pool_batch(task: tuple[Callable[[Any, Any], Any], Any, list[Any]]) -> BatchResult:
    global _ONE_THREAD
    fn, context, batch = task
    if not _ONE_THREAD and "torch" in sys.modules:  # the context brought a torch model
        sys.modules["torch"].set_num_threads(1)  # one process per core
        _ONE_THREAD = True
    return worker_batch(fn, context, batch)


def _spawn_pool(processes: int):
    """Spawned, not forked: a forked child of a process that ran torch can deadlock. One BLAS
    thread per process, as on a Ray worker: with one process per core, more threads only
    contend (a 14-day auto fit took 0.33 s with 2 OpenBLAS threads, 0.10 s with 1, on 2 cores)."""
    saved = {k: os.environ.get(k) for k in _THREAD_VARS}
    os.environ.update({k: "1" for k in _THREAD_VARS})  # read by the children's numpy at import
    try:
        return mp.get_context("spawn").Pool(processes)
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


class LocalEngine:
    name = "local"

    def __init__(self, jobs: int = 1) -> None:
        self.workers = int(jobs)
        self.last_stats = MapStats()
        self._pool = None

    def map(self, fn: Callable[[Any, Any], Any], items: Sequence[Any], *, context: Any = None,
            batch_size: int | None = None, progress: Progress | None = None) -> list[Any]:
        items = list(items)
        t0 = time.perf_counter()
        out: list[Any] = []
        spent = cpu = 0.0
        faults = 0
        if self.workers > 1 and len(items) > 1:
            size = batch_size or auto_batch_size(len(items), self.workers)
            parts = batches(items, size)
            if self._pool is None:
                self._pool = _spawn_pool(self.workers)
            for res, secs, cpu_secs, flt in self._pool.imap(_pool_batch, [(fn, context, b) for b in parts], chunksize=1):
                out.extend(res)
                spent += secs
                cpu += cpu_secs
                faults += flt
                if progress:
                    progress(len(res))
            n_batches = len(parts)
        else:
            size, n_batches = 1, len(items)
            for item in items:
                res, secs, cpu_secs, flt = run_batch(fn, context, [item])
                out.extend(res)
                spent += secs
                cpu += cpu_secs
                faults += flt
                if progress:
                    progress(1)
        self.last_stats = MapStats(len(items), n_batches, size, self.workers, time.perf_counter() - t0, spent, cpu, faults)
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None
