"""An in-process snapshot of node scores, rebuilt outside the request path.

A prioritize call over 5,000 nodes must answer in milliseconds, so requests never touch the
store: they read the last ``PlacementSnapshot`` (loads, the hot nodes' filter messages and
the pre-serialized ``{"host":...,"score":...}`` fragment of every known node, scored for a pod
without a memory request). A pod's memory request changes a node's answer only where it
exceeds the node's precomputed memory room (filter) or slack (score): one comparison per
node, and nothing at all when the request is below every node's room / slack.

Two cadences (stale-while-revalidate: the first request after expiry starts ONE background
rebuild and is answered from the previous snapshot):
- every ``refresh_seconds`` the cached forecasts are re-scored at the current time (the
  horizon window moves with the clock; ~20 us per node);
- every ``reload_seconds``, or as soon as a forecast read earlier turns stale, the store is
  re-read (list + fetch + decode: the expensive part, ~80 us per node on Redis).

When the store is unreachable the previously read forecasts are kept and re-scored, so they
turn stale (neutral scores) on schedule rather than being trusted forever.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, NamedTuple

from adapter.scheduler.settings import SchedulerSettings
from core.receipt import ReceiptTimes
from core.store import Forecast, ForecastStore
from forecaster.nodes import MAX_SCORE, NodeLoad, assess_nodes, is_node_series, memory_room_bytes, score_for_load
from forecaster.nodes.scoring import cpu_message, memory_message_parts

log = logging.getLogger(__name__)


SCORE_TAIL = {score: str(score).encode() + b"}" for score in range(MAX_SCORE + 1)}


def host_fragment(host: str, score: int) -> bytes:
    """One HostPriority as JSON (json tags of k8s.io/kube-scheduler/extender/v1)."""
    return b'{"host":' + json.dumps(host).encode() + b',"score":' + str(int(score)).encode() + b"}"


class MemoryView(NamedTuple):
    """What a per-pod answer needs of one node with a fresh memory forecast, precomputed."""

    room: float  # largest memory request that still fits under memory_threshold (bytes; < 0: none)
    slack: float  # largest request for which the node's precomputed score still holds
    load: float  # predicted memory use, fraction of allocatable
    allocatable: float  # bytes
    cpu_score: int
    fragment_head: bytes  # b'{"host":"<node>","score":'
    message_head: str  # the memory filter message before / after the request's size
    message_tail: str


@dataclass(frozen=True)
class PlacementSnapshot:
    built_at: float
    expires_at: float
    loaded_at: float = 0.0  # when the forecasts were read from the store
    reload_at: float = 0.0  # when they must be read again
    forecasts: Mapping[str, Forecast] = field(default_factory=dict)
    loads: dict[str, NodeLoad] = field(default_factory=dict)
    zones: dict[str, float] = field(default_factory=dict)
    fragments: dict[str, bytes] = field(default_factory=dict)
    hot: dict[str, str] = field(default_factory=dict)  # node -> failedNodes message
    name_json: dict[str, bytes] = field(default_factory=dict)  # node -> json.dumps(node)
    hot_json: dict[str, bytes] = field(default_factory=dict)  # node -> b'"node":"message"'
    # node -> MemoryView, for nodes with a fresh memory forecast (the others are CPU only)
    memory: dict[str, "MemoryView"] = field(default_factory=dict)
    min_mem_room: float = float("inf")  # a request at most this big fails no node on memory
    min_mem_slack: float = float("inf")  # ... and changes no node's precomputed score
    workloads: tuple[str, ...] = ()  # other series in the store (for the placement API)
    error: str = ""  # why the last store read failed, if it did

    def zone_scores(self) -> dict[str, int]:
        return {z: score_for_load(v, None, 0.0) for z, v in self.zones.items()}


def _yield_gil() -> None:
    """Let a request thread take the GIL now instead of after the 5 ms switch interval."""
    time.sleep(0)


CHUNK = 200  # nodes handled between two GIL hand-overs (~2-4 ms of work)


def read_store(store: ForecastStore, pause: Callable[[], None] | None = None) -> tuple[dict[str, Forecast], tuple[str, ...]]:
    series = store.list_series()
    wanted = [s for s in series if is_node_series(s)]
    workloads = tuple(x for x in series if not is_node_series(x))
    forecasts: dict[str, Forecast] = {}
    for i in range(0, len(wanted), CHUNK):  # decoding 5,000 forecasts is ~0.3 s of CPU
        if pause is not None and i:
            pause()
        forecasts.update(store.latest_many(wanted[i : i + CHUNK]))
    return forecasts, workloads


def memory_slack_bytes(nl: NodeLoad) -> float:
    """The largest memory request for which ``score_for_pod(nl, request)`` still equals
    ``nl.score`` (the score computed without a request): the memory score
    ``floor(10 x (1 - load - r / allocatable) + 0.5)`` stays >= score while
    r <= allocatable x (1 - load - (score - 0.5) / 10). One byte below that edge, so float
    rounding can only send a request to the exact (slow) path, never skip it."""
    if nl.memory_load is None or not nl.memory_bytes or nl.score <= 0:
        return float("inf")
    return nl.memory_bytes * (1.0 - nl.memory_load - (nl.score - 0.5) / MAX_SCORE) - 1.0


def score_snapshot(
    forecasts: Mapping[str, Forecast],
    workloads: tuple[str, ...],
    settings: SchedulerSettings,
    now: float,
    loaded_at: float,
    error: str = "",
    pause: Callable[[], None] | None = None,
) -> PlacementSnapshot:
    """Pure: forecasts read at ``loaded_at`` -> a snapshot scored at ``now``."""
    s = settings.scoring()
    loads, zones = assess_nodes(forecasts, now, s, pause=pause, pause_every=CHUNK)
    fragments: dict[str, bytes] = {}
    name_json: dict[str, bytes] = {}
    hot: dict[str, str] = {}
    hot_json: dict[str, bytes] = {}
    memory: dict[str, MemoryView] = {}
    for i, (name, nl) in enumerate(loads.items()):
        if pause is not None and i and i % (2 * CHUNK) == 0:
            pause()
        quoted = json.dumps(name).encode()
        name_json[name] = quoted
        head = b'{"host":' + quoted + b',"score":'
        fragments[name] = head + SCORE_TAIL[int(nl.score)]
        if nl.cpu_hot:
            msg = cpu_message(nl, s.threshold, s.horizon_seconds)
            hot[name] = msg
            hot_json[name] = quoted + b":" + json.dumps(msg).encode()
        room = memory_room_bytes(nl, s.memory_threshold)
        if room is not None and nl.memory_load is not None and nl.memory_bytes:
            memory[name] = MemoryView(room, memory_slack_bytes(nl), nl.memory_load, nl.memory_bytes, nl.cpu_score, head,
                                      *memory_message_parts(nl, s.memory_threshold, s.horizon_seconds))
    stale_at = [t for t in (fc.generated_at + s.max_forecast_age_seconds for fc in forecasts.values()) if t > now]
    first_stale = min(stale_at) if stale_at else float("inf")
    return PlacementSnapshot(
        built_at=now,
        expires_at=min(now + settings.refresh_seconds, first_stale),
        loaded_at=loaded_at,
        reload_at=min(loaded_at + settings.reload_seconds, first_stale),
        forecasts=forecasts,
        loads=loads,
        zones=zones,
        fragments=fragments,
        hot=hot,
        name_json=name_json,
        hot_json=hot_json,
        memory=memory,
        min_mem_room=min((v.room for v in memory.values()), default=float("inf")),
        min_mem_slack=min((v.slack for v in memory.values()), default=float("inf")),
        workloads=workloads,
        error=error,
    )


class SnapshotCache:
    """Holds the current snapshot; ``get()`` never blocks once one exists."""

    def __init__(self, store: ForecastStore, settings: SchedulerSettings, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self.receipts = ReceiptTimes(clock)  # node forecast ages on this clock (core/receipt.py)
        self._snap: PlacementSnapshot | None = None
        self._lock = threading.Lock()  # single-flight rebuilds
        self._thread: threading.Thread | None = None
        self.reloads = 0  # successful store reads
        self.rescores = 0  # rebuilds from cached forecasts
        self.failures = 0  # failed store reads

    def refresh(self, reload: bool | None = True, pause: Callable[[], None] | None = None) -> PlacementSnapshot:
        """Rebuild now. ``reload``: True = re-read the store, None = only when due.
        ``pause`` is called between chunks of work (background rebuilds yield the GIL)."""
        with self._lock:
            now = self.clock()
            prev = self._snap
            if reload is None:
                reload = prev is None or now >= prev.reload_at
            if not reload and prev is not None:
                snap = score_snapshot(prev.forecasts, prev.workloads, self.settings, now, prev.loaded_at, prev.error, pause=pause)
                self.rescores += 1
            else:
                try:
                    forecasts, workloads = read_store(self.store, pause)
                    forecasts = self.receipts.stamp_all(forecasts)
                    snap = score_snapshot(forecasts, workloads, self.settings, now, loaded_at=now, pause=pause)
                    self.reloads += 1
                except Exception as exc:  # noqa: BLE001 - placement must keep answering
                    self.failures += 1
                    msg = f"{exc.__class__.__name__}: {exc}"
                    log.warning("scheduler snapshot: reading the store failed (%s); keeping the forecasts read before", msg)
                    kept: Mapping[str, Forecast] = prev.forecasts if prev is not None else {}
                    # retry the store after refresh_seconds, not after a full reload period
                    retry_at = now - self.settings.reload_seconds + self.settings.refresh_seconds
                    snap = score_snapshot(kept, prev.workloads if prev is not None else (), self.settings, now,
                                          loaded_at=retry_at, error=msg)
            self._snap = snap
            return snap

    def _background(self) -> None:
        try:
            self.refresh(reload=None, pause=_yield_gil)
        except Exception:  # a thread must not die loudly; the next get() retries
            log.exception("scheduler snapshot rebuild failed")
        finally:
            self._thread = None

    def get(self) -> PlacementSnapshot:
        snap = self._snap
        if snap is None:
            return self.refresh()
        if self.clock() >= snap.expires_at and self._thread is None and not self._lock.locked():
            t = threading.Thread(target=self._background, name="foresight-scheduler-snapshot", daemon=True)
            self._thread = t
            t.start()
        return snap
