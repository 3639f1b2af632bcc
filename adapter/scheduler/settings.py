"""Settings of the scheduler extender (one frozen, documented dataclass; built once)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from forecaster.errors import ConfigError
from forecaster.nodes import NodeScoreSettings


@dataclass(frozen=True)
class SchedulerSettings:
    """How the kube-scheduler extender and the placement API turn node forecasts into answers.

    threshold: predicted CPU utilization (0..1) above which a node is filtered out ("hot").
    memory_threshold: a node is filtered out for a pod when its predicted memory use plus the
      pod's memory request would exceed this fraction of the node's allocatable memory (0.9:
      keep 10% of allocatable as headroom for what the forecast misses; memory does not
      throttle, it OOM-kills). Nodes without a fresh memory forecast are judged on CPU only.
    horizon_seconds: look-ahead window; a node's load is the max of ``quantile`` over
      [now, now + horizon] (and never below its last observed utilization).
    max_forecast_age_seconds: older forecasts are stale: neutral score, never filtered.
    zone_weight: share of the zone's predicted CPU load in a node's score (0 = node load only).
    quantile: published quantile used as the load ("p90", or "mean").
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

    threshold: float = 0.85
    horizon_seconds: float = 300.0
    max_forecast_age_seconds: float = 300.0
    zone_weight: float = 0.3
    quantile: str = "p90"
    refresh_seconds: float = 2.0
    reload_seconds: float = 10.0
    max_body_bytes: int = 64 * 1024 * 1024
    affinity_top_n: int = 10
    memory_threshold: float = 0.9

    def __post_init__(self) -> None:
        problems = []

        def positive(name: str) -> None:
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0):
                problems.append(f"scheduler.{name}: {v!r} must be a finite number > 0")

        if not (isinstance(self.threshold, (int, float)) and 0 < self.threshold <= 1):
            problems.append(f"scheduler.threshold: {self.threshold!r} must be a utilization in (0, 1], e.g. 0.85")
        if not (isinstance(self.memory_threshold, (int, float)) and not isinstance(self.memory_threshold, bool)
                and 0 < self.memory_threshold <= 1):
            problems.append(f"scheduler.memory_threshold: {self.memory_threshold!r} must be a fraction of allocatable "
                            "memory in (0, 1], e.g. 0.9")
        for name in ("horizon_seconds", "max_forecast_age_seconds", "refresh_seconds", "reload_seconds"):
            positive(name)
        if not (isinstance(self.zone_weight, (int, float)) and 0 <= self.zone_weight <= 1):
            problems.append(f"scheduler.zone_weight: {self.zone_weight!r} must be in [0, 1]")
        if not isinstance(self.quantile, str) or not (self.quantile == "mean" or self.quantile.startswith("p")):
            problems.append(f"scheduler.quantile: {self.quantile!r} must be 'mean' or a key like 'p90'")
        if not (isinstance(self.max_body_bytes, int) and self.max_body_bytes > 0):
            problems.append(f"scheduler.max_body_bytes: {self.max_body_bytes!r} must be an integer > 0")
        if not (isinstance(self.affinity_top_n, int) and self.affinity_top_n >= 0):
            problems.append(f"scheduler.affinity_top_n: {self.affinity_top_n!r} must be an integer >= 0")
        if problems:
            raise ConfigError("scheduler settings", problems)

    def scoring(self) -> NodeScoreSettings:
        return NodeScoreSettings(
            threshold=self.threshold,
            horizon_seconds=self.horizon_seconds,
            max_forecast_age_seconds=self.max_forecast_age_seconds,
            zone_weight=self.zone_weight,
            quantile=self.quantile,
            memory_threshold=self.memory_threshold,
        )
