"""Incremental history: each workload's last ``history_days`` of demand in a fixed-size ring on
the source's step grid, topped up with only the new samples at every refresh.

    cache = HistoryCache(source, step_seconds=300, history_days=14)
    ts, vals = cache.pull(series_id, query, now)           # refresh: the new range only
    ts, vals = cache.pull(series_id, query, now, full=True)  # retrain: the whole window

A pull is in full when the series has no ring yet (first pull, restart), when the last pull is
more than ``gap_seconds`` old (the trainer was down: samples may have been revised meanwhile), or
when the caller asks (a retrain re-syncs the whole window). Otherwise it asks the source for
[last - (overlap_points - 1) x step, end] only: the last ``overlap_points`` known points are
pulled again because Prometheus evaluates a grid point from the samples scraped before it, and
a late scrape can still change the newest points.

Memory per workload is fixed: ``capacity x 8`` bytes of float64 values (timestamps are implicit
on the grid), i.e. 32 KB for 14 days at 300 s, 161 KB at 60 s.
"""

from __future__ import annotations

import contextlib
import math
import threading
from dataclasses import dataclass
from typing import Iterator

import numpy as np

__all__ = ["Ring", "HistoryCache", "frame_arrays"]


def frame_arrays(frame) -> tuple[np.ndarray, np.ndarray]:
    """One series from a long frame (summed per timestamp if the query returned several)."""
    if frame is None or len(frame) == 0:
        return np.zeros(0), np.zeros(0)
    ts = frame["timestamp"].astype("int64").to_numpy() / 1e9
    if frame["series_id"].nunique() == 1 and np.all(np.diff(ts) > 0):  # the usual case, without a groupby
        return ts.astype("float64"), frame["value"].to_numpy(dtype="float64", copy=True)
    g = frame.groupby("timestamp", sort=True)["value"].sum(min_count=1)
    ts = g.index.astype("int64").to_numpy() / 1e9
    return ts.astype("float64"), g.to_numpy(dtype="float64")


class Ring:
    """The window [end - (capacity - 1) x step, end] of one series; NaN = no sample. ``rows``
    spans the oldest and newest points the source answered for (a NaN row included): the
    window is handed out over that span only, as a full pull would have returned it (a
    Prometheus range answers for its whole grid; a CSV only where it has rows)."""

    __slots__ = ("values", "step", "end", "pulled_at", "rows")

    def __init__(self, capacity: int, step: float, values: np.ndarray | None = None) -> None:
        # ``values``: a saved window (``forecaster.handover``), possibly a row of a larger block
        self.values = np.full(int(capacity), np.nan) if values is None else values
        self.step = float(step)
        self.end: float | None = None
        self.pulled_at: float | None = None
        self.rows: tuple[float, float] | None = None

    def advance(self, end: float) -> None:
        """Move the window to end at ``end``; slots that enter it are NaN until written."""
        if self.end is not None and end <= self.end:
            return
        cap = len(self.values)
        k = cap if self.end is None else int(round((end - self.end) / self.step))
        if k >= cap:
            self.values[:] = np.nan
        elif k > 0:
            self.values[:-k] = self.values[k:]  # an in-place shift keeps the view contiguous
            self.values[-k:] = np.nan
        self.end = float(end)

    def write(self, ts: np.ndarray, vals: np.ndarray) -> None:
        """Put samples on their grid slots (those outside the window are dropped)."""
        if self.end is None or not len(ts):
            return
        first = self.end - (len(self.values) - 1) * self.step
        idx = np.rint((np.asarray(ts, dtype="float64") - first) / self.step).astype(np.int64)
        ok = (idx >= 0) & (idx < len(self.values))
        self.values[idx[ok]] = np.asarray(vals, dtype="float64")[ok]
        if ok.any():
            lo, hi = first + self.step * float(idx[ok].min()), first + self.step * float(idx[ok].max())
            self.rows = (lo, hi) if self.rows is None else (min(lo, self.rows[0]), max(hi, self.rows[1]))

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(timestamps, values) copies over the answered span, safe to hand to another thread."""
        n = len(self.values)
        if self.end is None or self.rows is None:
            return np.zeros(0), np.zeros(0)
        first = self.end - (n - 1) * self.step
        lo = max(0, int(round((self.rows[0] - first) / self.step)))
        hi = min(n, int(round((self.rows[1] - first) / self.step)) + 1)
        ts = first + self.step * np.arange(lo, hi, dtype="float64")
        return ts, self.values[lo:hi].copy()

    @property
    def nbytes(self) -> int:
        return int(self.values.nbytes)


@dataclass
class PullStats:
    full: int = 0
    incremental: int = 0
    points: int = 0  # grid points asked of the source


class HistoryCache:
    """Per-series rings over one history source; thread-safe (a fit thread re-syncs rings
    while the refresh loop tops them up)."""

    def __init__(self, source, *, step_seconds: float, history_days: float, overlap_points: int = 2,
                 gap_seconds: float = 3600.0) -> None:
        if overlap_points < 1:
            raise ValueError(f"overlap_points must be >= 1 (got {overlap_points})")
        self.source = source
        self.step = float(step_seconds)
        self.window = float(history_days) * 86400.0
        self.capacity = int(round(self.window / self.step)) + 1
        self.overlap_points = int(overlap_points)
        self.gap_seconds = float(gap_seconds)
        self.stats = PullStats()
        self._rings: dict[str, Ring] = {}
        self._lock = threading.Lock()

    def grid_end(self, now: float) -> float:
        """The newest grid point a pull at ``now`` asks for (stable across refreshes)."""
        return math.floor(now / self.step) * self.step

    def plan(self, series_id: str, now: float, full: bool = False) -> tuple[float, float, bool]:
        """(start, end, is_full) of the range the next pull asks the source for."""
        end = self.grid_end(now)
        ring = self._rings.get(series_id)
        if (full or ring is None or ring.end is None or ring.pulled_at is None
                or now - ring.pulled_at > self.gap_seconds or end - ring.end >= self.window):
            return end - self.window, end, True
        start = min(ring.end, end) - (self.overlap_points - 1) * self.step
        return start, end, False

    def pull(self, series_id: str, query: str, now: float, full: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Ask the source for the planned range, fold it into the ring and return the window.
        A source error propagates and leaves the ring as it was (the next pull covers the range)."""
        start, end, is_full = self.plan(series_id, now, full)
        ts, vals = frame_arrays(self.source.fetch(query, start, end, self.step, series_id=series_id))
        return self.fold(series_id, ts, vals, end, now, is_full, start)

    def fold(self, series_id: str, ts: np.ndarray, vals: np.ndarray, end: float, now: float,
             is_full: bool, start: float) -> tuple[np.ndarray, np.ndarray]:
        """Merge pulled samples over [start, end] into the ring and return the window."""
        with self._lock:
            ring = self._rings.get(series_id)
            if ring is None:
                ring = self._rings[series_id] = Ring(self.capacity, self.step)
            if is_full and (ring.end is None or end >= ring.end):
                ring.end, ring.rows = None, None  # a full pull replaces the window rather than patching it
            ring.advance(end)
            _blank(ring, start, end)  # a point the source no longer returns is a gap now
            ring.write(ts, vals)
            ring.pulled_at = now
            if is_full:
                self.stats.full += 1
            else:
                self.stats.incremental += 1
            self.stats.points += int(round((end - start) / self.step)) + 1
            return ring.arrays()

    def forget(self, keep: set[str]) -> None:
        """Drop the rings of workloads no longer configured."""
        with self._lock:
            for sid in [s for s in self._rings if s not in keep]:
                del self._rings[sid]

    @contextlib.contextmanager
    def locked(self) -> Iterator[dict[str, Ring]]:
        """The rings, with no pull folding into them meanwhile (``forecaster.handover`` saves them)."""
        with self._lock:
            yield self._rings

    def adopt(self, series_id: str, ring: Ring) -> None:
        """Install a ring saved by a previous trainer (``forecaster.handover``)."""
        if len(ring.values) != self.capacity or ring.step != self.step:
            raise ValueError(f"{series_id}: a ring of {len(ring.values)} points at {ring.step} s does not fit "
                             f"this cache ({self.capacity} points at {self.step} s)")
        with self._lock:
            self._rings[series_id] = ring

    def __len__(self) -> int:
        return len(self._rings)

    def nbytes(self) -> int:
        """Bytes held by the rings' values (the bound documented above)."""
        return sum(r.nbytes for r in self._rings.values())


def _blank(ring: Ring, start: float, end: float) -> None:
    first = ring.end - (len(ring.values) - 1) * ring.step
    lo = max(0, int(round((start - first) / ring.step)))
    hi = min(len(ring.values), int(round((end - first) / ring.step)) + 1)
    if lo < hi:
        ring.values[lo:hi] = np.nan
