"""The published serving policy: the record a forecast carries (``Forecast.policy``), how it
reads back, and which headroom it gives in a state. Chosen in ``forecaster.serving``, applied
in ``forecaster/served.py``."""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any, Mapping

from forecaster.servingscore import OBSERVED_POINTS

__all__ = ["MAX_HOLD", "POLICY_VERSION", "READABLE_VERSIONS", "SOURCES", "BelowObserved", "ServingPolicy"]

POLICY_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)  # version 1 had no hold: it reads as hold 1; 2 had no headroom states
MAX_HOLD = OBSERVED_POINTS  # a hold reads the published observed samples
SOURCES = ("model", "persistence")


class BelowObserved(ValueError):
    """A published policy whose headroom would serve less than the observed demand, without the
    ``allow_below_observed`` it was chosen with: the reader serves the observed value."""


def _num(v: Any) -> bool:
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:  # an integer past float's range
        return False


def _whole(v: Any, lo: int, hi: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


@dataclass(frozen=True)
class ServingPolicy:
    """What the adapter applies to one workload's forecast (see ``forecaster.serving``).

    ``fallback_headroom``/``fallback_hold`` are the best m and k for the persistence source:
    they apply whenever the model is not served (the series is on its fallback), so a drifted
    model degrades to a reactive HPA with this workload's own headroom, never below observed
    demand.
    """

    source: str = "model"
    quantile: str = "p90"
    headroom: float = 1.0
    fallback_headroom: float = 1.0
    version: int = POLICY_VERSION
    chosen_at: float | None = None
    reason: str = "default policy: no choice made yet"
    costs: Mapping[str, float] = field(default_factory=dict)  # candidate label -> cost, for people
    hold: int = 1
    fallback_hold: int = 1
    gap_edges: tuple[float, ...] = ()
    headrooms: tuple[float, ...] = ()
    fallback_headrooms: tuple[float, ...] = ()
    below_observed: bool = False  # chosen with serving.allow_below_observed: headrooms < 1 allowed

    def headroom_at(self, gap: float, fallback: bool = False) -> float:
        """The multiplier for demand ``gap`` below its recent peak (``servingscore.peak_gap``):
        the headroom of the gap's state, or the one headroom when the policy has no states."""
        ms = self.fallback_headrooms if fallback else self.headrooms
        if not self.gap_edges:
            return self.fallback_headroom if fallback else self.headroom
        # gap_state of one gap (np.searchsorted, side left, NaN past the last edge) without numpy:
        # asked on every request the adapter serves
        return float(ms[len(self.gap_edges) if math.isnan(gap) else bisect_left(self.gap_edges, gap)])

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version, "source": self.source, "quantile": self.quantile,
            "headroom": self.headroom, "hold": self.hold, "fallback_headroom": self.fallback_headroom,
            "fallback_hold": self.fallback_hold, "chosen_at": self.chosen_at, "reason": self.reason,
            "costs": dict(self.costs), "gap_edges": list(self.gap_edges), "headrooms": list(self.headrooms),
            "fallback_headrooms": list(self.fallback_headrooms),
            **({"allow_below_observed": True} if self.below_observed else {}),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "ServingPolicy | None":
        """The policy a forecast carries; None when absent. A policy of an unknown version or
        with invalid values raises ValueError (the reader serves the observed value then)."""
        if not d:
            return None
        if d.get("version") not in READABLE_VERSIONS:
            raise ValueError(f"serving policy version {d.get('version')!r} is not one of {READABLE_VERSIONS}")
        src, q = d.get("source"), d.get("quantile")
        m, fm = d.get("headroom"), d.get("fallback_headroom", 1.0)
        k, fk = d.get("hold", 1), d.get("fallback_hold", 1)
        if src not in SOURCES or not isinstance(q, str) or not _num(m) or not _num(fm) or m <= 0 or fm <= 0 \
                or not _whole(k, 1, MAX_HOLD) or not _whole(fk, 1, MAX_HOLD):
            raise ValueError(f"invalid serving policy {dict(d)!r}")
        costs = d.get("costs") or {}
        states = _states(d)
        below = d.get("allow_below_observed") is True
        low = min([float(m), float(fm), *states[1], *states[2]])
        if low < 1 and not below:
            raise BelowObserved(f"headroom x{low:g} is below 1: it would serve less than the observed demand, and the "
                                "policy was not chosen with serving.allow_below_observed")
        return cls(src, q, float(m), float(fm), POLICY_VERSION, d.get("chosen_at"), str(d.get("reason", "")),
                   {str(k_): float(v) for k_, v in costs.items()} if isinstance(costs, Mapping) else {}, int(k), int(fk),
                   *states, below)


def _states(d: Mapping[str, Any]) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
    """(gap_edges, headrooms, fallback_headrooms) of a published policy; ValueError when they
    do not describe one headroom per state."""
    edges, ms, fms = d.get("gap_edges") or [], d.get("headrooms") or [], d.get("fallback_headrooms") or []
    if not edges and not ms and not fms:
        return (), (), ()
    ok = all(isinstance(x, list) for x in (edges, ms, fms)) and len(ms) == len(fms) == len(edges) + 1 \
        and all(_num(e) and 0 <= e <= 1 for e in edges) and list(edges) == sorted(set(edges)) \
        and all(_num(m) and m > 0 for m in ms + fms)
    if not ok:
        raise ValueError(f"invalid headroom states: gap_edges {edges!r}, headrooms {ms!r}, fallback_headrooms {fms!r}")
    return tuple(map(float, edges)), tuple(map(float, ms)), tuple(map(float, fms))
