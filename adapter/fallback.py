"""Observed demand read directly from its source, for when the forecast store is out of reach.

With Redis down the adapter cannot see any forecast, but the demand a reactive HPA would act
on is still in Prometheus. ``ObservedDirect`` serves it (``source: observed-direct``) for as
long as needed, so an HPA keeps a reactive floor instead of a 503.

The request path never waits long on the source: readings are cached per workload for
``ttl_seconds`` (re-read in the background when older), and a request with no usable reading
waits at most ``wait_seconds`` for one. A reading older than ``max_age_seconds`` is never
served: with the source down too, the metric is a 503 (discovery keeps working).

At fleet scale (every HPA asking at once when Redis goes) the reads are batched: requests only
add their workload to a bounded set of wanted ones (``max_wanted``), and one reader thread reads
the whole set at a time (``DemandReader.observe_many``). ``PrometheusDemandReader`` answers a
batch with a few PromQL queries grouped by pod (one for the demand of every workload on the
default query, one per capacity reading), attributing each pod to its workload by the names
Kubernetes gives pods (``forecaster.workloads.owner_name``); workloads with their own queries are
read one query each by ``workers`` threads. Memory and Prometheus load are bounded by the
number of workloads, not by the request rate.

``DemandReader`` is the seam: ``PrometheusDemandReader`` runs the workloads' demand queries
(``foresight serve --config``); ``foresight up`` plugs in a reader over its replayed traces.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor, TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol

from forecaster.timing import TIMING

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


def observe_each(reader: DemandReader, series_ids: Iterable[str]) -> dict[str, Observation | None]:
    """A batch read by one ``observe`` per workload (for readers without ``observe_many``).
    DemandUnavailable propagates: the source is down for the whole batch."""
    out: dict[str, Observation | None] = {}
    for sid in series_ids:
        try:
            out[sid] = reader.observe(sid)
        except DemandUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - a bad query loses this workload, not the batch
            log.warning("observed demand of %s could not be read: %s", sid, exc)
            out[sid] = None
    return out


def _finite(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and f >= 0 else None


class PrometheusDemandReader:
    """The configured workloads' demand (and capacity) as instant queries.

    ``source`` is a forecaster PrometheusSource (the only module speaking PromQL); build it with
    a short timeout and no retries: the adapter bounds its own waits and retries next round.
    ``observe_many`` batches the workloads on the default queries (see the module doc).
    """

    def __init__(self, source: Any, workloads: Iterable[Any], clock: Callable[[], float] = time.time,
                 workers: int = 4, namespaces_per_query: int = 200) -> None:
        from forecaster.workloads import DEFAULT_DEMAND_QUERY, DEMAND_RATE_WINDOW, POD_SUFFIX, default_query

        self.source = source
        self.workloads = {w.series_id: w for w in workloads}
        self.clock = clock
        self.namespaces_per_query = namespaces_per_query
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="foresight-observed")
        # workloads on the default demand query, by (namespace, kind, name): readable in a batch
        self.batchable = {sid for sid, w in self.workloads.items() if getattr(w, "kind", None) in POD_SUFFIX
                          and w.demand_query == default_query(DEFAULT_DEMAND_QUERY, w.namespace, w.name, w.kind)}
        self._by_ns: dict[str, list] = defaultdict(list)
        for sid in sorted(self.batchable):
            self._by_ns[self.workloads[sid].namespace].append(self.workloads[sid])
        self.queries = 0  # PromQL queries sent (the benchmark's query rate)
        # per pod, over the default demand query's rate window
        self._cores_query = ('sum by (namespace, pod) (rate(container_cpu_usage_seconds_total{{{ns},'
                             'container!=""}}[' + DEMAND_RATE_WINDOW + ']))')

    def knows(self, series_id: str) -> bool:
        return series_id in self.workloads

    def _rows(self, query: str) -> list[tuple[dict[str, str], float]]:
        from forecaster.sources.base import SourceUnavailable

        self.queries += 1
        try:
            return self.source.instant(query)
        except SourceUnavailable as exc:
            raise DemandUnavailable(str(exc)) from exc

    def _sum(self, query: str) -> float | None:
        vals = [v for _, v in self._rows(query) if _finite(v) is not None]
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

    def observe_many(self, series_ids: Iterable[str]) -> dict[str, Observation | None]:
        """The asked workloads' observations, and those of the batchable workloads sharing
        their namespaces (read by the same queries)."""
        ids = [s for s in series_ids if s in self.workloads]
        batch = [s for s in ids if s in self.batchable]
        own = [s for s in ids if s not in self.batchable]
        futs = [self._pool.submit(observe_each, self, chunk) for chunk in _chunks(own, len(own) // 4 + 1)]
        out = self._batched(batch) if batch else {}
        for f in futs:
            out.update(f.result())  # DemandUnavailable propagates
        return out

    def _batched(self, ids: list[str]) -> dict[str, Observation | None]:
        """Per-pod rows of a few grouped queries, summed per workload exactly as each
        workload's own default query sums them. The queries read whole namespaces, so every
        batchable workload of those namespaces is answered, not only the ones asked for: one
        batch refreshes the fleet, and the HPAs asking later in the interval find it cached."""
        ws = [w for ns in sorted({self.workloads[s].namespace for s in ids}) for w in self._by_ns[ns]]
        cores = self._per_workload(ws, self._cores_query)
        need_pods = [w for w in ws if w.capacity.ready_pods is None and not w.capacity.ready_pods_query]
        pods = self._per_workload(need_pods, 'sum by (namespace, pod) (kube_pod_status_ready{{{ns},condition="true"}})') \
            if need_pods else {}
        need_req = [w for w in ws if w.capacity.cpu_request_cores is None and not w.capacity.cpu_request_query]
        req = self._per_workload(need_req, 'sum by (namespace, pod) (kube_pod_container_resource_requests{{{ns},resource="cpu"}})',
                                 mean=True) \
            if need_req else {}
        special = [w for w in ws if (w.capacity.ready_pods is None and w.capacity.ready_pods_query)
                   or (w.capacity.cpu_request_cores is None and w.capacity.cpu_request_query)]
        for w in special:  # a capacity query of its own: read alone
            if w.capacity.ready_pods is None and w.capacity.ready_pods_query:
                got = self._sum(w.capacity.ready_pods_query)
                pods[w.series_id] = got if got is not None else math.nan
            if w.capacity.cpu_request_cores is None and w.capacity.cpu_request_query:
                got = self._sum(w.capacity.cpu_request_query)
                req[w.series_id] = got if got is not None else math.nan
        now, out = self.clock(), {}
        for w in ws:
            c = cores.get(w.series_id)
            if c is None:
                out[w.series_id] = None
                continue
            p = w.capacity.ready_pods if w.capacity.ready_pods is not None else pods.get(w.series_id)
            r = w.capacity.cpu_request_cores if w.capacity.cpu_request_cores is not None else req.get(w.series_id)
            out[w.series_id] = Observation(
                cores=c, at=now, ready_pods=None if p is None or math.isnan(p) else int(p),
                cpu_request_cores=None if r is None or math.isnan(r) else float(r))
        return out

    def _per_workload(self, ws: list, template: str, mean: bool = False) -> dict[str, float]:
        """One query per group of namespaces; each row's pod is attributed to its workload."""
        from forecaster.workloads import owner_name

        index: dict[tuple[str, str, str], str] = {(w.namespace, w.kind, w.name): w.series_id for w in ws}
        kinds = sorted({w.kind for w in ws})
        acc: dict[str, list[float]] = defaultdict(list)
        for group in _chunks(sorted({w.namespace for w in ws}), self.namespaces_per_query):
            sel = f'namespace="{group[0]}"' if len(group) == 1 else 'namespace=~"' + "|".join(group) + '"'
            for labels, v in self._rows(template.format(ns=sel)):
                ns, pod, f = labels.get("namespace", ""), labels.get("pod", ""), _finite(v)
                if f is None:
                    continue
                for kind in kinds:
                    sid = index.get((ns, kind, owner_name(kind, pod) or ""))
                    if sid is not None:
                        acc[sid].append(f)
        return {sid: (sum(vs) / len(vs) if mean else float(sum(vs))) for sid, vs in acc.items()}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _chunks(xs: list, n: int) -> list[list]:
    n = max(1, n)
    return [xs[i:i + n] for i in range(0, len(xs), n)]


class ObservedDirect:
    """A short-TTL, bounded-wait cache of observations from a ``DemandReader``, refreshed in
    batches by one reader thread from a bounded set of wanted workloads."""

    def __init__(
        self,
        reader: DemandReader,
        *,
        ttl_seconds: float = TIMING.observed_read_seconds,
        wait_seconds: float = 1.0,
        max_age_seconds: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
        on_error: Callable[[Exception], None] | None = None,
        max_wanted: int = 100_000,
        gather_seconds: float = 0.05,
        keep_warm: bool = False,
    ) -> None:
        self.reader = reader
        self.ttl_seconds = ttl_seconds
        self.wait_seconds = wait_seconds
        self.max_age_seconds = max_age_seconds
        self.clock = clock
        self.max_wanted = max_wanted
        # a batch starts this long after its first workload was asked for: the HPAs asking in
        # the same moment share it
        self.gather_seconds = gather_seconds
        self._cache: dict[str, tuple[Observation | None, float]] = {}
        self._wanted: dict[str, None] = {}  # insertion-ordered set, at most max_wanted
        self._next: Future = Future()  # done when the batch now being gathered is read
        self._lock = threading.Lock()
        self._work = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._on_error = on_error
        self.last_error: str | None = None
        self.last_ok: float | None = None
        self.dropped = 0  # asks refused because the wanted set was full
        self.batches = 0
        # keep_warm: the reader's batchable workloads are re-read every TTL even while the store
        # is up (a few queries per TTL for the whole fleet), so the first request after the
        # store goes down finds a reading instead of waiting for the first batch
        self._warm = list(getattr(reader, "batchable", ()) or ()) if keep_warm else []
        self._warmed_at = -math.inf

    def knows(self, series_id: str) -> bool:
        return self.reader.knows(series_id)

    @property
    def source_up(self) -> bool | None:
        """None until a read was tried; then whether the last one reached the source."""
        if self.last_ok is None and self.last_error is None:
            return None
        return self.last_error is None

    def _read(self, ids: list[str]) -> None:
        many = getattr(self.reader, "observe_many", None)
        try:
            got = many(ids) if many is not None else observe_each(self.reader, ids)
        except DemandUnavailable as exc:
            if self.last_error is None:
                log.warning("observed demand cannot be read directly: %s", exc)
            self.last_error = str(exc)
            if self._on_error:
                self._on_error(exc)
            return
        except Exception as exc:  # noqa: BLE001 - the next batch tries again
            log.warning("observed demand could not be read (%d workloads): %s", len(ids), exc)
            return
        if self.last_error is not None:
            log.warning("observed demand is readable again")
        self.last_error = None
        now = self.last_ok = self.clock()
        with self._lock:
            for sid in ids:
                self._cache[sid] = (got.get(sid), now)
            for sid, obs in got.items():  # read by the same queries: fresh too
                self._cache[sid] = (obs, now)

    def _loop(self) -> None:
        while not self._stop.is_set():
            if self._warm and self.clock() - self._warmed_at >= self.ttl_seconds:
                self._warmed_at = self.clock()
                with self._lock:
                    for sid in self._warm[: max(0, self.max_wanted - len(self._wanted))]:
                        self._wanted[sid] = None
                self._work.set()
            if not self._work.wait(0.5):
                continue
            self._stop.wait(self.gather_seconds)
            with self._lock:
                ids, done = list(self._wanted), self._next
                self._wanted, self._next = {}, Future()
                self._work.clear()
            if ids:
                self._read(ids)
                self.batches += 1
            done.set_result(None)

    def _ask(self, series_id: str) -> Future | None:
        """The future of the batch that will read ``series_id``; None when the set is full."""
        with self._lock:
            if series_id not in self._wanted:
                if len(self._wanted) >= self.max_wanted:
                    self.dropped += 1
                    return None
                self._wanted[series_id] = None
            fut = self._next
        self.start()
        self._work.set()
        return fut

    def start(self) -> "ObservedDirect":
        """Start the reader thread (at the first ask, or at the adapter's start to keep warm)."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="foresight-observed", daemon=True)
                self._thread.start()
        return self

    def fresh(self, series_id: str) -> Observation | None:
        """The latest reading if at most two TTLs old, without waiting: the served value's floor
        while the store is up (the demand a reactive HPA sees now). A reading older than one TTL
        is asked for again in the background, for the requests that follow."""
        if not self.reader.knows(series_id):
            return None
        hit = self._cache.get(series_id)
        age = self.clock() - hit[1] if hit is not None else math.inf
        if age > self.ttl_seconds:
            self._ask(series_id)
        return hit[0] if age <= 2 * self.ttl_seconds else None

    def get(self, series_id: str, pending: list[Future] | None = None) -> Observation | None:
        """A usable observation, or None (unknown workload, no data, or source down too).

        With nothing usable cached, the workload is asked for in the next batch; a caller on an
        event loop passes ``pending`` to get the batch's future back (and awaits it itself)
        instead of blocking here for up to ``wait_seconds``."""
        if not self.reader.knows(series_id):
            return None
        now = self.clock()
        hit = self._cache.get(series_id)
        if hit is not None and now - hit[1] <= self.ttl_seconds:
            return hit[0]
        fut = self._ask(series_id)
        if hit is not None and now - hit[1] <= self.max_age_seconds:
            return hit[0]  # stale-while-revalidate
        if fut is None:
            return None
        if pending is not None:
            pending.append(fut)
            return None
        try:
            fut.result(timeout=self.wait_seconds)
        except FutureTimeout:
            return None
        hit = self._cache.get(series_id)
        return hit[0] if hit is not None and self.clock() - hit[1] <= self.max_age_seconds else None

    def close(self) -> None:
        self._stop.set()
        self._work.set()
        if self._thread is not None:
            self._thread.join(5)
        close = getattr(self.reader, "close", None)
        if close is not None:
            close()
