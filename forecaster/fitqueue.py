"""The trainer's fit queue: due fits by priority, one per workload, run by a worker beside the
refresh loop (:class:`ThreadFits`) or in a per-step budget after the refreshes
(:class:`InlineFits`). ``forecaster.schedule`` decides what is due; engines may subclass the
worker (``forecaster.engines.fits``)."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from typing import Callable

from forecaster.training import Trainer

log = logging.getLogger(__name__)

__all__ = ["InlineFits", "ThreadFits", "fit_priority"]


def fit_priority(trainer: Trainer, series_id: str) -> tuple[int, float]:
    """Queue order, smallest first: never fitted, then drifted, then the oldest fit."""
    st = trainer.state(series_id)
    if st is None or not st.fitted:
        return (0, 0.0)
    return (1 if st.needs_retrain else 2, st.fitted_at)


class _Queue:
    """Fit jobs by priority, one per key; what is queued or running is not queued twice."""

    def __init__(self) -> None:
        self._heap: list[tuple[tuple, int, str, Callable[[], None]]] = []
        self._keys: set[str] = set()
        self._count = itertools.count()
        self.cond = threading.Condition()
        self.done = 0

    def put(self, key: str, priority: tuple, job: Callable[[], None]) -> bool:
        with self.cond:
            if key in self._keys:
                return False
            self._keys.add(key)
            heapq.heappush(self._heap, (priority, next(self._count), key, job))
            self.cond.notify()
            return True

    def pop(self) -> tuple[str, Callable[[], None]] | None:
        with self.cond:
            if not self._heap:
                return None
            _, _, key, job = heapq.heappop(self._heap)
            return key, job

    def finish(self, key: str) -> None:
        with self.cond:
            self._keys.discard(key)
            self.done += 1
            self.cond.notify_all()

    def pending(self) -> int:
        with self.cond:
            return len(self._keys)

    def run_one(self) -> bool:
        item = self.pop()
        if item is None:
            return False
        key, job = item
        try:
            job()
        except Exception:  # one failed fit never stops the worker
            log.exception("fit job %s failed", key)
        finally:
            self.finish(key)
        return True


class InlineFits(_Queue):
    """Fits run in the refresh loop's thread after each step's refreshes, most due first, until
    ``budget_seconds`` of the clock are spent (one fit may overrun it; none starts after)."""

    def __init__(self, budget_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.budget_seconds = float(budget_seconds)
        self.clock = clock

    def after_step(self) -> None:
        deadline = self.clock() + self.budget_seconds
        while self.clock() < deadline and self.run_one():
            pass

    def hold(self) -> None:
        pass

    def release(self) -> None:
        pass

    def stop(self, timeout: float | None = None) -> None:
        pass


class ThreadFits(_Queue):
    """Fits run in their own thread, beside the refresh loop, most due first.

    Refreshes come first: while a refresh step holds the worker (``hold``/``release``) no new
    fit starts, for at most ``max_hold_seconds`` of a step (then fits run beside it anyway, so a
    refresh step longer than that cannot starve them). The fit already running goes on: a
    refresh never waits for it. In one process the two share one interpreter lock; without the
    hold a retrain would stretch every refresh step."""

    def __init__(self, start: bool = True, max_hold_seconds: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.max_hold_seconds = float(max_hold_seconds)
        self.clock = clock
        self._held_since: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="foresight-fits", daemon=True)
        if start:
            self._thread.start()

    def hold(self) -> None:
        with self.cond:
            self._held_since = self.clock()

    def release(self) -> None:
        with self.cond:
            self._held_since = None
            self.cond.notify_all()

    def _held(self) -> bool:
        return self._held_since is not None and self.clock() - self._held_since < self.max_hold_seconds

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self.cond:
                while self._held() and not self._stop.is_set():
                    self.cond.wait(timeout=0.5)
            if not self.run_one():
                with self.cond:
                    self.cond.wait(timeout=1.0)

    def after_step(self) -> None:
        pass

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until nothing is queued or running (tests and shutdown)."""
        with self.cond:
            return self.cond.wait_for(lambda: not self._keys, timeout=timeout)

    def stop(self, timeout: float | None = 5.0) -> None:
        self._stop.set()
        with self.cond:
            self.cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)
