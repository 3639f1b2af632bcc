"""Settings of the scheduler extender (one frozen, documented dataclass; built once)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

from forecaster.nodes import NodeScoreSettings
from forecaster.nodes.scoring import finite_number


@dataclass(frozen=True)
class SchedulerSettings(NodeScoreSettings):
    """How the kube-scheduler extender and the placement API turn node forecasts into answers:
    the node scoring's settings (``NodeScoreSettings``: threshold, memory_threshold,
    horizon_seconds, max_forecast_age_seconds, zone_weight, quantile; their defaults and checks
    live there) and the extender's own.

    refresh_seconds: node scores are recomputed (the horizon window moves with the clock) at
      most this often, in a background thread; requests read the last snapshot and never
      wait (except the very first one, when there is no snapshot yet).
    reload_seconds: the store is re-read at most this often (5,000 forecasts cost ~0.4 s of
      CPU to fetch and decode; the trainer publishes about once a minute), and also as soon
      as a forecast read earlier turns stale, to pick up its replacement.
    max_body_bytes: larger ExtenderArgs bodies are refused with 413 (5,000 full Node objects
      are ~25 MB; nodeCacheCapable bodies are ~100 KB).
    affinity_top_n: how many nodes the placement API puts in its nodeAffinity preferences.
    """

    _what: ClassVar[str] = "scheduler settings"
    _path: ClassVar[str] = "scheduler."

    refresh_seconds: float = 2.0
    reload_seconds: float = 10.0
    max_body_bytes: int = 64 * 1024 * 1024
    affinity_top_n: int = 10

    def problems(self) -> list[str]:
        out = super().problems()
        for name in ("refresh_seconds", "reload_seconds"):
            v = getattr(self, name)
            if not (finite_number(v) and v > 0):
                out.append(f"scheduler.{name}: {v!r} must be a finite number > 0")
        if not (isinstance(self.max_body_bytes, int) and self.max_body_bytes > 0):
            out.append(f"scheduler.max_body_bytes: {self.max_body_bytes!r} must be an integer > 0")
        if not (isinstance(self.affinity_top_n, int) and self.affinity_top_n >= 0):
            out.append(f"scheduler.affinity_top_n: {self.affinity_top_n!r} must be an integer >= 0")
        return out

    def scoring(self) -> NodeScoreSettings:
        """The node scoring's part alone (what forecaster.nodes' functions take)."""
        return NodeScoreSettings(**{f.name: getattr(self, f.name) for f in fields(NodeScoreSettings)})
