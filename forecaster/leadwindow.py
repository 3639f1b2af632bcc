"""The forecast curve and its maximum over the lead window: the served prediction, one function
for the adapter (one forecast, one instant) and the trainer's policy chooser (every origin of
the scored week, every HPA sync of each interval, at once).

The curve is piecewise linear through (origin, first) and (origin + (i + 1) x step, knots[i]):
it starts from the last observed value and reaches the forecast's points; flat before it
(no observed value: from the first point) and after the last point. The served prediction at
time t is its maximum over [t, t + lead]: scaling is decided a lead before the demand
arrives, and the max keeps the window's peak from being averaged away.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["curve_at", "window_max", "window_max_one"]


def curve_at(first: np.ndarray, knots: np.ndarray, x: np.ndarray, step: float) -> np.ndarray:
    """The curve of each row at ``x`` seconds after its origin: ``first`` (n,), NaN where
    nothing was observed; ``knots`` (n, h); ``x`` (J,) -> (n, J)."""
    knots = np.asarray(knots, dtype="float64")
    first = np.asarray(first, dtype="float64")
    first = np.where(np.isfinite(first), first, knots[:, 0])
    ext = np.concatenate([first[:, None], knots], axis=1)  # ext[:, 0] sits at the origin, ext[:, i + 1] at knot i
    h = knots.shape[1]
    p = np.clip(np.asarray(x, dtype="float64") / float(step), 0.0, float(h))
    i0 = np.minimum(np.floor(p).astype(int), h)
    i1 = np.minimum(i0 + 1, h)
    frac = p - i0
    return ext[:, i0] * (1.0 - frac) + ext[:, i1] * frac


def window_max(first: np.ndarray, knots: np.ndarray, start: np.ndarray, lead: float, step: float) -> np.ndarray:
    """Max of the curve over [start, start + lead] (``start``: (J,) seconds after the origin)
    -> (n, J). The curve is linear between knots, so its maximum is at an end of the window or
    on a knot inside it."""
    knots = np.asarray(knots, dtype="float64")
    start = np.asarray(start, dtype="float64")
    end = start + float(lead)
    best = np.maximum(curve_at(first, knots, start, step), curve_at(first, knots, end, step))
    t_knot = (np.arange(knots.shape[1]) + 1.0) * float(step)
    inside = (t_knot[None, :] > start[:, None]) & (t_knot[None, :] < end[:, None])  # (J, h)
    if inside.any():
        at = np.where(inside[None, :, :], knots[:, None, :], -np.inf)  # (n, J, h)
        best = np.maximum(best, at.max(axis=2))
    return best


def window_max_one(first: float | None, knots: Sequence[float], start: float, lead: float, step: float) -> float:
    """:func:`window_max` of one forecast at one instant, in plain floats: the adapter's hot
    path, where numpy's per-call overhead on a dozen points cost more than the request's HTTP
    handling. The same operations in the same order, so the same float (tested against
    :func:`window_max`). ``first``: None or NaN when nothing was observed; ``knots`` non-empty."""
    h = len(knots)
    if first is None or not math.isfinite(first):
        first = knots[0]
    end = start + float(lead)

    def at(x: float) -> float:
        p = min(max(x / float(step), 0.0), float(h))
        i0 = min(math.floor(p), h)
        i1 = min(i0 + 1, h)
        frac = p - i0
        v0 = first if i0 == 0 else knots[i0 - 1]  # ext[0] is ``first``, ext[i + 1] is knot i
        v1 = first if i1 == 0 else knots[i1 - 1]
        return v0 * (1.0 - frac) + v1 * frac

    best = max(at(start), at(end))
    for k in range(h):
        t = (k + 1.0) * float(step)
        if start < t < end and knots[k] > best:
            best = knots[k]
    return float(best)
