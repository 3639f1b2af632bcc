"""An in-process snapshot of node scores, rebuilt from the store outside the request path.

A prioritize call over 5,000 nodes must answer in milliseconds, so requests never touch the
store: they read the last ``PlacementSnapshot`` (scores and the pre-serialized JSON fragment
``{"host":...,"score":...}`` of every known node). The snapshot is rebuilt at most every
``refresh_seconds`` (stale-while-revalidate): the first request after it expires starts one
background rebuild and is answered from the previous snapshot. A snapshot also expires when
its earliest node forecast turns stale, so staleness is noticed within one rebuild.

When the store is unreachable the previous snapshot is kept; as its forecasts age past
``max_forecast_age_seconds`` the next successful rebuild marks them stale (neutral scores).
Until then a failed rebuild is logged and retried after ``refresh_seconds``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from forecaster.nodes import NODE_PREFIX, ZONE_PREFIX, NodeLoad, assess_nodes, score_for_load
from forecaster.store import ForecastStore

from adapter.scheduler.settings import SchedulerSettings

log = logging.getLogger(__name__)


def host_fragment(host: str, score: int) -> bytes:
    """One HostPriority as JSON (json tags of k8s.io/kube-scheduler/extender/v1)."""
    return b'{"host":' + json.dumps(host).encode() + b',"score":' + str(int(score)).encode() + b"}"


@dataclass(frozen=True)
class PlacementSnapshot:
    built_at: float
    expires_at: float
    loads: dict[str, NodeLoad] = field(default_factory=dict)
    zones: dict[str, float] = field(default_factory=dict)
    fragments: dict[str, bytes] = field(default_factory=dict)
    workloads: tuple[str, ...] = ()  # other series in the store (for the placement API)
    error: str = ""  # why the last rebuild failed, if it did

    def zone_scores(self) -> dict[str, int]:
        return {z: score_for_load(v, None, 0.0) for z, v in self.zones.items()}


def build_snapshot(store: ForecastStore, settings: SchedulerSettings, now: float) -> PlacementSnapshot:
    """Read every ``node/*`` and ``zone/*`` forecast and score them at ``now``."""
    series = store.list_series()
    wanted = [s for s in series if s.startswith((NODE_PREFIX, ZONE_PREFIX))]
    forecasts = store.latest_many(wanted)
    s = settings.scoring()
    loads, zones = assess_nodes(forecasts, now, s)
    fragments = {name: host_fragment(name, nl.score) for name, nl in loads.items()}
    stale_at = [
        fc.generated_at + s.max_forecast_age_seconds
        for fc in forecasts.values()
        if fc.generated_at + s.max_forecast_age_seconds > now
    ]
    expires = now + settings.refresh_seconds
    if stale_at:
        expires = min(expires, min(stale_at))
    workloads = tuple(x for x in series if not x.startswith((NODE_PREFIX, ZONE_PREFIX)))
    return PlacementSnapshot(built_at=now, expires_at=expires, loads=loads, zones=zones, fragments=fragments, workloads=workloads)


class SnapshotCache:
    """Holds the current snapshot; ``get()`` never blocks once one exists."""

    def __init__(self, store: ForecastStore, settings: SchedulerSettings, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self._snap: PlacementSnapshot | None = None
        self._lock = threading.Lock()  # single-flight rebuilds
        self._thread: threading.Thread | None = None
        self.rebuilds = 0
        self.failures = 0

    def refresh(self) -> PlacementSnapshot:
        """Rebuild now (synchronously). On a store failure keep the previous snapshot."""
        with self._lock:
            now = self.clock()
            try:
                snap = build_snapshot(self.store, self.settings, now)
                self.rebuilds += 1
            except Exception as exc:  # noqa: BLE001 - placement must keep answering
                self.failures += 1
                msg = f"{exc.__class__.__name__}: {exc}"
                log.warning("scheduler snapshot rebuild failed (%s); keeping the previous one", msg)
                prev = self._snap
                if prev is None:
                    snap = PlacementSnapshot(built_at=now, expires_at=now + self.settings.refresh_seconds, error=msg)
                else:
                    snap = PlacementSnapshot(
                        built_at=prev.built_at,
                        expires_at=now + self.settings.refresh_seconds,
                        loads=prev.loads,
                        zones=prev.zones,
                        fragments=prev.fragments,
                        workloads=prev.workloads,
                        error=msg,
                    )
            self._snap = snap
            return snap

    def _background(self) -> None:
        try:
            self.refresh()
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
