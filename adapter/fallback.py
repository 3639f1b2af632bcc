"""Observed demand read directly from its source, for when the forecast store is out of reach.

With Redis down the adapter cannot see any forecast, but the demand a reactive HPA would act
on is still in Prometheus. ``ObservedDirect`` serves it (``source: observed-direct``) for as
long as needed, so an HPA keeps a reactive floor instead of a 503.

The request path never waits long on the source: readings are cached per workload for
``ttl_seconds`` (re-read in the background when older), and a request with no usable reading
waits at most ``wait_seconds`` for one. A reading older than ``max_age_seconds`` is never
served: with the source down too, the metric is a 503 (discovery keeps working).

``DemandReader`` is the seam: ``PrometheusDemandReader`` runs each workload's own demand query
(``foresight serve --config``); ``foresight up`` plugs in a reader over its replayed traces.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol

log = logging.getLogger("foresight.adapter.fallback")


class DemandUnavailable(RuntimeError):
    """The demand source cannot answer right now (refused, 5xx, timeout)."""


@dataclass(frozen=True)
class Observation:
    """What a reactive HPA would see for one workload, read at ``at`` (Unix seconds)."""

    cores: float
    at: float
    ready_pods: int | None = None
    cpu_request_cores: float | None = None


class DemandReader(Protocol):
    def observe(self, series_id: str) -> Observation | None:
        """The current observed demand of one workload; None when the source has no data for it.
        Raises DemandUnavailable when the source cannot be reached."""

    def knows(self, series_id: str) -> bool:
        """True when this reader has a query for the workload."""


def _finite(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and f >= 0 else None


class PrometheusDemandReader:
    """Each configured workload's own demand query (and capacity queries), as instant queries.

    ``source`` is a forecaster PrometheusSource (the only module speaking PromQL); build it with
    a short timeout and no retries: the adapter bounds its own waits and retries next round.
    """

    def __init__(self, source: Any, workloads: Iterable[Any], clock: Callable[[], float] = time.time) -> None:
        self.source = source
        self.workloads = {w.series_id: w for w in workloads}
        self.clock = clock

    def knows(self, series_id: str) -> bool:
        return series_id in self.workloads

    def _sum(self, query: str) -> float | None:
        from forecaster.sources.base import SourceUnavailable

        try:
            rows = self.source.instant(query)
        except SourceUnavailable as exc:
            raise DemandUnavailable(str(exc)) from exc
        vals = [v for _, v in rows if _finite(v) is not None]
        return float(sum(vals)) if vals else None

    def observe(self, series_id: str) -> Observation | None:
        w = self.workloads.get(series_id)
        if w is None:
            return None
        cores = self._sum(w.demand_query)
        if cores is None:
            return None
        pods = w.capacity.ready_pods
        if pods is None and w.ready_pods_query():
            got = self._sum(w.ready_pods_query())
            pods = int(got) if got is not None else None
        request = w.capacity.cpu_request_cores
        if request is None and w.cpu_request_query():
            request = self._sum(w.cpu_request_query())
        return Observation(cores=cores, at=self.clock(), ready_pods=pods, cpu_request_cores=request)


class ObservedDirect:
    """A short-TTL, bounded-wait cache of observations from a ``DemandReader``."""

    def __init__(
        self,
        reader: DemandReader,
        *,
        ttl_seconds: float = 15.0,
        wait_seconds: float = 1.0,
        max_age_seconds: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        self.reader = reader
        self.ttl_seconds = ttl_seconds
        self.wait_seconds = wait_seconds
        self.max_age_seconds = max_age_seconds
        self.clock = clock
        self._cache: dict[str, tuple[Observation | None, float]] = {}
        self._inflight: dict[str, Future] = {}
        self._lock = threading.Lock()
        # A few threads: one stalled query must not hold up every other workload's refresh.
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="foresight-observed")
        self._on_error = on_error
        self.last_error: str | None = None
        self.last_ok: float | None = None

    def knows(self, series_id: str) -> bool:
        return self.reader.knows(series_id)

    @property
    def source_up(self) -> bool | None:
        """None until a read was tried; then whether the last one reached the source."""
        if self.last_ok is None and self.last_error is None:
            return None
        return self.last_error is None

    def _read(self, series_id: str) -> Observation | None:
        try:
            obs = self.reader.observe(series_id)
        except DemandUnavailable as exc:
            # Returned, not raised: an awaited future's exception would be logged as never retrieved.
            if self.last_error is None:
                log.warning("observed demand cannot be read directly: %s", exc)
            self.last_error = str(exc)
            if self._on_error:
                self._on_error(exc)
            return None
        except Exception as exc:  # noqa: BLE001 - a bad query loses this workload, not the process
            log.warning("observed demand of %s could not be read: %s", series_id, exc)
            obs = None
        if self.last_error is not None:
            log.warning("observed demand is readable again")
        self.last_error = None
        self.last_ok = self.clock()
        with self._lock:
            self._cache[series_id] = (obs, self.clock())
        return obs

    def _refresh(self, series_id: str) -> Future:
        with self._lock:
            fut = self._inflight.get(series_id)
            if fut is not None:
                return fut
            fut = self._pool.submit(self._read, series_id)
            self._inflight[series_id] = fut
        # Outside the lock: a read that already finished (a refused connection is instant)
        # runs the callback right here, and the callback takes the lock.
        fut.add_done_callback(lambda _f, s=series_id: self._done(s))
        return fut

    def _done(self, series_id: str) -> None:
        with self._lock:
            self._inflight.pop(series_id, None)

    def get(self, series_id: str, pending: list[Future] | None = None) -> Observation | None:
        """A usable observation, or None (unknown workload, no data, or source down too).

        With nothing usable cached, a read is started; a caller on an event loop passes
        ``pending`` to get its future back (and awaits it itself) instead of blocking here
        for up to ``wait_seconds``."""
        if not self.reader.knows(series_id):
            return None
        now = self.clock()
        with self._lock:
            hit = self._cache.get(series_id)
        if hit is not None and now - hit[1] <= self.ttl_seconds:
            return hit[0]
        fut = self._refresh(series_id)
        if hit is not None and now - hit[1] <= self.max_age_seconds:
            return hit[0]  # stale-while-revalidate
        if pending is not None:
            pending.append(fut)
            return None
        try:
            return fut.result(timeout=self.wait_seconds)
        except FutureTimeout:
            return None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
