"""A reader's forecast ages on the reader's own clock.

``Forecast.generated_at`` is stamped by the writer (the trainer) on its clock. A reader on
another machine that compares it with its own clock mixes two clocks: a writer 10 minutes
behind makes every forecast look stale (predictive scaling silently off), one 10 minutes ahead
keeps a dead trainer's forecasts "fresh" 10 minutes too long.

``ReceiptTimes`` re-stamps each forecast *version* (its generation) the first time the reader
reads it, on the reader's clock. What the reader knows of a new version is that it appeared
after the last read that still found the old one, so its age at receipt is the writer's stated
age clamped to [0, seconds since that read]: however far apart the clocks are, a version's age
is off by at most the reader's own polling gap, and from then on it grows on the reader's clock
alone. Only a series never read before (a reader that just started) has no earlier read to
bound it: its age at receipt is the writer's stated age, never below 0.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable

from core.store import Forecast


class ReceiptTimes:
    """Per series: the version last read, when the reader received it and last checked it."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        # series id -> (generation, writer's generated_at, received_at, checked_at), reader's clock
        self._seen: dict[str, tuple[int, float, float, float]] = {}

    def stamp(self, fc: Forecast) -> Forecast:
        """``fc`` with ``generated_at`` = when this reader received this version (its clock)."""
        now = self.clock()
        prev = self._seen.get(fc.series_id)
        stated = fc.generated_at
        if prev is not None and (prev[0], prev[1]) == (fc.generation, stated):
            received = prev[2]  # the same version: its age keeps growing on this clock
        else:
            bound = now - prev[3] if prev is not None else float("inf")
            received = now - min(max(0.0, now - stated), max(0.0, bound))
        self._seen[fc.series_id] = (fc.generation, stated, received, now)
        return fc if received == stated else replace(fc, generated_at=received)

    def checked(self, series_id: str, generation: int) -> None:
        """The store still holds ``generation`` (read without re-reading the forecast)."""
        prev = self._seen.get(series_id)
        if prev is not None and prev[0] == generation:
            self._seen[series_id] = (*prev[:3], self.clock())

    def forget(self, series_id: str) -> None:
        self._seen.pop(series_id, None)

    def stamp_all(self, forecasts: dict[str, Forecast]) -> dict[str, Forecast]:
        """Every forecast of a full read re-stamped; series the read no longer has are forgotten."""
        for sid in [s for s in self._seen if s not in forecasts]:
            del self._seen[sid]
        return {sid: self.stamp(fc) for sid, fc in forecasts.items()}
