"""Ready before the rise: for every rise of the load, when another HPA's added pods were Ready
relative to the moment demand outgrew the capacity the workload had before it.

A *rise* is a sync where the reference HPA (the reactive one) adds pods: it grew from ``a`` to
more replicas. The moment the load outgrew ``a`` pods is the start of the episode in which
demand D(t) exceeds what ``a`` ready pods carry within the SLO (``a x request x limit``, limit
= the SLO's utilization, 0.9: from there on the workload violates it), the last upward crossing
at or before the raise. The other HPA was *in time* when, at that
moment, it already had more than ``a`` pods Ready; its *lead* is how long it had had them
(positive: before; negative: how long after the moment it got them). A lead is capped at
``horizon_seconds`` either way: a workload that never dropped to ``a`` pods has been ready "for
ever", which a median need not see.

Pure: arrays in, figures out; the replay and the node benchmark call it on what they measured.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["RiseReadiness", "rise_readiness", "summarize_leads"]

HORIZON_SECONDS = 1800.0


@dataclass(frozen=True)
class RiseReadiness:
    """One rise: the sync time of the reference's raise, the pods it had before, the moment
    demand outgrew them, and the other HPA's lead (seconds; capped at +/- the horizon)."""

    raise_t: float
    pods_before: int
    outgrown_t: float
    lead_seconds: float

    @property
    def in_time(self) -> bool:
        return self.lead_seconds >= 0


def _outgrown_at(t: np.ndarray, over: np.ndarray, i: int, horizon: float) -> int | None:
    """The index where the over-capacity episode that contains (or last ended before) sync i
    began; None when demand was not over the capacity within ``horizon`` before the raise (the
    reference raised on a metric that had already fallen back)."""
    j = i
    while j >= 0 and not over[j]:
        if t[i] - t[j] > horizon:
            return None
        j -= 1
    if j < 0:
        return None
    while j > 0 and over[j - 1] and t[i] - t[j - 1] <= horizon:
        j -= 1
    return j


def rise_readiness(t: np.ndarray, demand: np.ndarray, reference_replicas: np.ndarray, other_ready: np.ndarray,
                   request: float, limit: float, horizon_seconds: float = HORIZON_SECONDS) -> list[RiseReadiness]:
    """Every rise of ``reference_replicas`` (its desired replicas after each sync) and the lead
    of ``other_ready`` (the other HPA's Ready pods at each sync) at it."""
    t = np.asarray(t, dtype="float64")
    demand = np.asarray(demand, dtype="float64")
    ref = np.asarray(reference_replicas)
    ready = np.asarray(other_ready)
    out: list[RiseReadiness] = []
    for i in np.flatnonzero(ref[1:] > ref[:-1]) + 1:
        a = int(ref[i - 1])
        over = demand > a * request * limit
        j = _outgrown_at(t, over, int(i), horizon_seconds)
        if j is None:
            continue
        has = ready > a
        if has[j]:
            k = j
            while k > 0 and has[k - 1] and t[j] - t[k - 1] <= horizon_seconds:
                k -= 1
            lead = min(t[j] - t[k], horizon_seconds)
        else:
            later = np.flatnonzero(has[j:])
            lead = -min(t[j + later[0]] - t[j], horizon_seconds) if len(later) else -horizon_seconds
        out.append(RiseReadiness(float(t[i]), a, float(t[j]), float(lead)))
    return out


def summarize_leads(rises: list[RiseReadiness]) -> dict:
    """rises, the share in time and the median lead (seconds); NaN figures when there was none."""
    leads = np.asarray([r.lead_seconds for r in rises], dtype="float64")
    return {"rises": int(len(leads)),
            "ready_in_time_share": float((leads >= 0).mean()) if len(leads) else float("nan"),
            "median_lead_seconds": float(np.median(leads)) if len(leads) else float("nan")}
