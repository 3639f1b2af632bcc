"""The adapter's per-process view of the store: a short-TTL cache plus a workload index.

Requests never wait on Redis when a cached copy exists: an entry older than the TTL is
served as is and re-read by a background thread (stale-while-revalidate). The same thread
revalidates every entry half a ``max_stale_seconds`` after its last good read, asked for or
not: with several adapter processes, or many workloads, an HPA's next request to this
process can come more than ``max_stale_seconds`` later, and must not then read Redis on the
event loop. With Redis down, entries keep being served until ``max_stale_seconds`` after
their last good read; then lookups raise ``StoreUnavailable`` (the app answers 503).

The index (namespace -> workload -> labels) lets a label selector find workloads. It is
built from the configured workloads plus the ``meta`` of every forecast in the store, and
rebuilt every ``index_refresh_seconds`` in the background; the first build also fills the
cache, so the first HPA request after a start finds its forecast in memory.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Callable, Mapping

from adapter.negcache import MissingNames
from adapter.settings import CacheSettings
from core.receipt import ReceiptTimes
from core.store import Forecast, ForecastStore, StoreError, StoreUnavailable
from forecaster.predicted import metric_of_series
from forecaster.served import prepare

log = logging.getLogger("foresight.adapter.state")

NAME_KEYS = ("workload", "deployment", "statefulset")


def _generations(store: ForecastStore, series_ids: list[str]) -> dict[str, int] | None:
    """Generation counters of many series in one round trip (Redis: one MGET), or None when
    the store cannot tell."""
    fn = getattr(store, "generations", None)
    return fn(series_ids) if callable(fn) else None


def _series_ids(store: ForecastStore) -> list[str]:
    """Every live series (Redis: one ZRANGEBYSCORE over the publish-time index)."""
    return store.list_series()


def _series_count(store: ForecastStore) -> int | None:
    """Number of live series, cheaply, or None when the store cannot tell."""
    fn = getattr(store, "count_series", None)
    return int(fn()) if callable(fn) else None


def _prepare(fc: Forecast) -> None:
    """forecaster.served.prepare, off the request path (this runs in the refresher for every
    forecast it reads). A forecast it cannot prepare is still cached: serving it reports why."""
    try:
        prepare(fc)
    except Exception:  # noqa: BLE001 - one odd forecast must not cost the rest of its batch
        log.debug("could not prepare the forecast of %s", fc.series_id, exc_info=True)


def labels_of(series_id: str, fc: Forecast | None, configured: Mapping[str, str] | None = None) -> dict[str, str]:
    """Labels a selector matches for one workload: workload=<name>, deployment=<name> for a
    Deployment (statefulset=<name> for a StatefulSet), the forecast's meta labels, then the
    configured labels (which win)."""
    ns, _, name = series_id.partition("/")
    meta = fc.meta if fc is not None else {}
    name = str(meta.get("workload") or name)
    kind = str(meta.get("kind") or "Deployment")
    out = {"workload": name}
    if kind == "Deployment":
        out["deployment"] = name
    elif kind == "StatefulSet":
        out["statefulset"] = name
    ml = meta.get("labels")
    if isinstance(ml, Mapping):
        out.update({str(k): str(v) for k, v in ml.items()})
    if configured:
        out.update(configured)
    return out


class ForecastCache:
    def __init__(
        self,
        store: ForecastStore,
        settings: CacheSettings,
        configured_labels: Mapping[str, Mapping[str, str]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_store_error: Callable[[Exception], None] | None = None,
        receipts: ReceiptTimes | None = None,
    ) -> None:
        self.store = store
        # forecast ages on this process's clock, not the writer's (core/receipt.py)
        self.receipts = receipts or ReceiptTimes()
        self.settings = settings
        self.clock = clock
        self.configured = {k: dict(v) for k, v in (configured_labels or {}).items()}
        # Only what the trainer published (and configured workloads): a None entry is a
        # tracked series whose forecast is gone until the next listing prunes it. Names the
        # store never had go to the bounded negative cache, so callers cannot grow this.
        self._entries: dict[str, tuple[Forecast | None, float]] = {}
        self._missing = MissingNames(settings.negative_max_entries, settings.ttl_seconds)
        self._aging: deque[tuple[float, str]] = deque()  # (read at, series) in read order: _revalidate_aging
        self._labels: dict[str, dict[str, dict[str, str]]] = {}  # ns -> name -> labels
        # workload series id -> its declared metrics seen in the store (forecaster.predicted):
        # their series ``<ns>/<name>/<metric>`` are cached but never indexed as workloads
        self._metrics: dict[str, set[str]] = {}
        self._metric_names: frozenset[str] | None = None  # their union, rebuilt only when it changes
        self._index_at: float | None = None
        self._listed_at: float | None = None
        self._indexed_count: int | None = None
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._idx_lock = threading.RLock()  # the index is read by requests while the refresher edits it
        # One index refresh at a time: a request's first read waits for the refresher's first
        # listing instead of starting its own, which saw a listing begun and skipped the reads.
        self._refreshing = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._down_until = 0.0
        # True while every workload's workload/deployment/statefulset label is its name, so
        # `workload=x` can be answered by looking up "<ns>/x" instead of scanning the namespace.
        self.names_are_labels = True
        self._last_error: str | None = None
        self._last_ok: float | None = None
        self._on_store_error = on_store_error
        for sid, labels in self.configured.items():
            self._put_labels(sid, labels_of(sid, None, labels))

    # --- background refresher ---------------------------------------------------------
    def start(self) -> None:
        if self._thread and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="foresight-cache", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread:
            self._thread.join(timeout=5)
        self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self._index_at is None or self.clock() - self._index_at >= self.settings.index_refresh_seconds:
                    self.refresh_index()
                self._revalidate_aging()
                self._refresh_pending()
            except StoreError as exc:
                self._failed(exc)
            except Exception:  # noqa: BLE001 - the refresher must survive anything
                log.exception("cache refresh failed")
            self._wake.wait(timeout=min(self.settings.ttl_seconds, 1.0))
            self._wake.clear()

    def _revalidate_aging(self) -> None:
        """Queue for the next refresh every entry last read half a ``max_stale_seconds`` ago
        or more and not read since, asked for or not (a generation check: one MGET per 500)."""
        horizon = self.clock() - self.settings.max_stale_seconds / 2
        aging = self._aging
        while aging and aging[0][0] <= horizon:
            at, sid = aging.popleft()
            entry = self._entries.get(sid)
            if entry is not None and entry[1] == at:  # else read again since, or dropped
                self._pending.add(sid)

    def _stamp(self, sid: str, fc: Forecast | None, now: float) -> None:
        self._entries[sid] = (fc, now)
        self._aging.append((now, sid))

    def _refresh_pending(self) -> None:
        pending, self._pending = self._pending, set()  # an add racing the swap is re-queued by its next request
        keys = list(pending)
        for i in range(0, len(keys), 500):
            if i:
                time.sleep(0)  # let the event loop thread have the GIL between chunks
            chunk = keys[i : i + 500]
            try:
                gens = _generations(self.store, chunk)
            except StoreError:
                self._pending.update(keys[i:])  # retried next round, asked for or not
                raise
            now = self.clock()
            if gens is not None:
                # Only re-read (and re-parse) forecasts whose generation moved: with many
                # workloads, parsing unchanged JSON would dominate the process's CPU.
                changed = []
                for sid in chunk:
                    entry = self._entries.get(sid)
                    fc = entry[0] if entry else None
                    if fc is not None and gens.get(sid) == fc.generation:
                        self._stamp(sid, fc, now)
                        self.receipts.checked(sid, fc.generation)
                    else:
                        changed.append(sid)
                chunk = changed
            got = self._read_many(chunk) if chunk else {}
            now = self.clock()
            self._ok(now)
            for sid in chunk:
                self._store_entry(sid, got.get(sid), now)

    def _read_many(self, ids: list[str]) -> dict[str, Forecast]:
        """latest_many, but a forecast the store cannot decode (StoreError that is not an
        outage) only loses that one series, logged, instead of its whole batch."""
        try:
            return self.store.latest_many(ids)
        except StoreUnavailable:
            raise
        except StoreError:
            out: dict[str, Forecast] = {}
            for sid in ids:
                fc = self._read_one(sid)
                if fc is not None:
                    out[sid] = fc
            return out

    def _read_one(self, sid: str) -> Forecast | None:
        try:
            return self.store.latest(sid)
        except StoreUnavailable:
            raise
        except StoreError as exc:
            log.warning("ignoring the unreadable forecast of %s: %s", sid, exc)
            return None

    # --- bookkeeping --------------------------------------------------------------------
    def _ok(self, now: float) -> None:
        self._last_ok = now
        if self._last_error is not None:
            log.warning("store reachable again")
        self._last_error = None

    def _failed(self, exc: Exception) -> None:
        # Logged once per outage (the refresher retries every second); counted every time.
        (log.warning if self._last_error is None else log.debug)("store unavailable: %s", exc)
        self._last_error = str(exc)
        self._down_until = self.clock() + min(1.0, self.settings.ttl_seconds)
        if self._on_store_error:
            self._on_store_error(exc)

    def _put_labels(self, sid: str, labels: dict[str, str]) -> None:
        ns, _, name = sid.partition("/")
        if any(labels.get(k, name) != name for k in NAME_KEYS):
            self.names_are_labels = False  # a configured label renames it: scan, don't look up
        with self._idx_lock:
            names = self._labels.setdefault(ns, {})
            if names.get(name) != labels:  # keep the old dict when equal: its JSON stays cached
                names[name] = labels

    def _tracked(self, sid: str) -> bool:
        """Configured, or published by the trainer (in the index): worth an entry when absent."""
        if sid in self.configured or sid in self._entries:
            return True
        declared = metric_of_series(sid)
        if declared is not None:
            with self._idx_lock:
                return declared[1] in self._metrics.get(declared[0], ())
        return self.is_known(sid)

    def _store_entry(self, sid: str, fc: Forecast | None, now: float) -> Forecast | None:
        """Cache ``fc`` as read now; returns it as cached (its age on this process's clock)."""
        if fc is None and not self._tracked(sid):
            self._missing.add(sid, now)  # bounded; never revalidated in the background
            return None
        if fc is not None:
            self._missing.discard(sid)
            fc = self.receipts.stamp(fc)
            _prepare(fc)
        self._stamp(sid, fc, now)
        if fc is not None:
            declared = metric_of_series(sid)
            if declared is not None:
                with self._idx_lock:
                    self._metrics.setdefault(declared[0], set()).add(declared[1])
                    if self._metric_names is not None and declared[1] not in self._metric_names:
                        self._metric_names = None
                return fc
            self._put_labels(sid, labels_of(sid, fc, self.configured.get(sid)))
        return fc

    # --- reads --------------------------------------------------------------------------
    FULL_LISTING_SECONDS = 300.0

    def refresh_index(self, force: bool = False) -> None:
        """List the store's series and read the ones not cached yet (their meta has labels).

        With Redis, a full listing (100k members to decode: ~0.4 s of CPU that competes with
        requests for the GIL) runs only when the series count moved or every 5 minutes;
        between them, expired series linger in the index harmlessly (lookups find no
        forecast and skip them)."""
        with self._refreshing:
            self._refresh_index(force)

    def _refresh_index(self, force: bool) -> None:
        count = _series_count(self.store)
        if (
            not force
            and count is not None
            and count == self._indexed_count
            and self._listed_at is not None
            and self.clock() - self._listed_at < self.FULL_LISTING_SECONDS
        ):
            self._ok(self.clock())
            self._index_at = self.clock()
            return
        ids = _series_ids(self.store)
        self._ok(self.clock())
        unknown = [s for s in ids if s not in self._entries]
        for i in range(0, len(unknown), 1000):
            chunk = unknown[i : i + 1000]
            got = self._read_many(chunk)
            now = self.clock()
            for sid in chunk:
                self._store_entry(sid, got.get(sid), now)
        # only a listing whose reads all finished lets the next refresh skip listing
        self._indexed_count, self._listed_at = count, self.clock()
        alive = set(ids) | set(self.configured)
        with self._idx_lock:
            for ns in list(self._labels):
                for name in list(self._labels[ns]):
                    if f"{ns}/{name}" not in alive:
                        del self._labels[ns][name]
                        self._entries.pop(f"{ns}/{name}", None)
                        self.receipts.forget(f"{ns}/{name}")
                if not self._labels[ns]:
                    del self._labels[ns]
            for wsid in list(self._metrics):
                for m in [m for m in self._metrics[wsid] if f"{wsid}/{m}" not in alive]:
                    self._metrics[wsid].discard(m)
                    self._entries.pop(f"{wsid}/{m}", None)
                    self.receipts.forget(f"{wsid}/{m}")
                    self._metric_names = None
                if not self._metrics[wsid]:
                    del self._metrics[wsid]
        self._index_at = self.clock()

    def ensure_index(self) -> None:
        if self._index_at is None:
            with self._refreshing:  # the refresher's first listing may be under way: wait for it
                if self._index_at is not None:
                    return
                try:
                    self._refresh_index(False)
                except StoreError as exc:
                    self._failed(exc)
                    raise

    def get(self, series_id: str) -> Forecast | None:
        """The cached forecast (None: the store has none). Raises StoreUnavailable when the
        store is down and the cached copy is too old (or there is none)."""
        now = self.clock()
        entry = self._entries.get(series_id)
        if entry is not None:
            fc, at = entry
            age = now - at
            if age <= self.settings.ttl_seconds:
                return fc
            if self.running and age <= self.settings.max_stale_seconds:
                # No lock, no wake-up: the refresher picks the key up on its next round
                # (waking a thread per request costs more than the request itself).
                self._pending.add(series_id)
                return fc
        elif self._missing.fresh(series_id, now):
            return None  # the store had no such series a moment ago: don't ask it again yet
        return self._read_through(series_id, entry, now)

    def _read_through(self, series_id: str, entry, now: float) -> Forecast | None:
        if now < self._down_until:
            return self._stale_or_raise(entry, now, StoreUnavailable(self._last_error or "store unavailable"))
        try:
            fc = self._read_one(series_id)
        except StoreUnavailable as exc:
            self._failed(exc)
            return self._stale_or_raise(entry, now, exc)
        self._ok(now)
        return self._store_entry(series_id, fc, now)

    def _stale_or_raise(self, entry, now: float, exc: StoreUnavailable) -> Forecast | None:
        if entry is not None and now - entry[1] <= self.settings.max_stale_seconds:
            return entry[0]
        raise exc

    def workloads(self, namespace: str) -> dict[str, dict[str, str]]:
        """name -> labels of the workloads known in a namespace."""
        with self._idx_lock:
            return dict(self._labels.get(namespace, {}))

    def all_series(self) -> list[str]:
        with self._idx_lock:
            return sorted(f"{ns}/{name}" for ns, names in self._labels.items() for name in names)

    def metric_names(self) -> frozenset[str]:
        """Names of the declared metrics published in the store (the same object until they
        change: asked on every request for a declared metric)."""
        names = self._metric_names
        if names is None:
            with self._idx_lock:
                names = self._metric_names = frozenset(m for ms in self._metrics.values() for m in ms)
        return names

    def metrics_of(self, series_id: str) -> set[str]:
        """The declared metrics of one workload published in the store."""
        with self._idx_lock:
            return set(self._metrics.get(series_id, ()))

    def forecasts(self) -> list[Forecast]:
        """Every cached forecast (for readiness and listings)."""
        return [fc for fc, _ in list(self._entries.values()) if fc is not None]

    def labels(self, series_id: str, fc: Forecast | None) -> dict[str, str]:
        ns, _, name = series_id.partition("/")
        known = self._labels.get(ns, {}).get(name)
        if known is not None:  # kept current whenever a forecast is (re)stored
            return known
        return labels_of(series_id, fc, self.configured.get(series_id))

    def is_configured(self, series_id: str) -> bool:
        return series_id in self.configured

    def is_known(self, series_id: str) -> bool:
        """In the index: configured, or seen in the store before it went out of reach."""
        ns, _, name = series_id.partition("/")
        with self._idx_lock:
            return name in self._labels.get(ns, {})

    @property
    def last_error(self) -> str | None:
        return self._last_error

    @property
    def store_reachable(self) -> bool:
        """Whether the last read of the store succeeded (no round trip)."""
        return self._last_error is None

    def health(self) -> dict:
        """Store reachability as seen by this process (pings the store)."""
        ok = self.store.ping()
        now = self.clock()
        if ok:
            self._ok(now)
        return {
            "store_reachable": ok,
            "last_error": self._last_error,
            "seconds_since_last_good_read": None if self._last_ok is None else round(now - self._last_ok, 3),
            "cached_forecasts": sum(1 for fc, _ in self._entries.values() if fc is not None),
            "negative_cache_entries": len(self._missing),
        }
