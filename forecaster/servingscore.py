"""How a candidate serving policy is scored on a workload's own past (``forecaster.serving``):
the one-step means of the fitted model over the window, its quantile paths with cross-fitted
offsets, the observed floors of each hold, and at every HPA sync of every interval (the
deployment's timing, ``forecaster.timing``) the prediction the adapter would serve then (the
same lead-window function) and the demand that sync's pods carry, with the minutes of SLO
violation on it; and the peak gap whose range picks a state's headroom (the adapter computes it
with the same function, from the samples a forecast carries)."""

from __future__ import annotations

import math

import numpy as np

from forecaster.leadwindow import window_max
from forecaster.timing import TIMING, ServingTiming

__all__ = ["OBSERVED_POINTS", "as_slices", "clairvoyant_cost", "lead_bases", "sync_exposure", "sync_observed", "sync_offsets", "cross_fitted_offsets", "exposure", "gap_edges", "gap_state", "held_floor", "peak_gap", "peak_gaps",
           "violation_minutes", "window_means"]


def held_floor(values: np.ndarray, origins: np.ndarray, k: int) -> np.ndarray:
    """max(values[o - k + 1 .. o]) for every origin o, ignoring NaN (the observed floor of hold k)."""
    values = np.asarray(values, dtype="float64")
    origins = np.asarray(origins, dtype=int)
    out = values[origins].copy()
    for j in range(1, k):
        prev = values[np.maximum(origins - j, 0)]
        out = np.fmax(out, np.where(origins - j >= 0, prev, np.nan))
    return out


def cross_fitted_offsets(residuals: np.ndarray, q: float, min_points: int = 24) -> np.ndarray | None:
    """The q-quantile offset for every scored origin, calibrated on the *other* half of the
    window (2-fold, split in time), or None when a half has fewer than ``min_points``.

    The published offsets are conformal quantiles of this same validation tail's residuals:
    scoring the p90 path with them would grade the model on the points its margin was fitted
    to, and the choice would then favour the model over persistence on every bursty series.
    """
    r = np.asarray(residuals, dtype="float64")
    n = len(r)
    half = n // 2
    a, b = r[:half], r[half:]
    a_ok, b_ok = a[np.isfinite(a)], b[np.isfinite(b)]
    if len(a_ok) < min_points or len(b_ok) < min_points:
        return None

    def level(x: np.ndarray) -> float:  # the finite-sample corrected split-conformal quantile
        k = min(1.0, math.ceil((len(x) + 1) * q) / len(x))
        return float(np.quantile(x, k))

    out = np.empty(n)
    out[:half] = level(b_ok)
    out[half:] = level(a_ok)
    return out


def window_means(model, raw: np.ndarray, origins: np.ndarray,
                 tail: tuple[np.ndarray, np.ndarray] | None) -> tuple[np.ndarray, np.ndarray]:
    """The model's 1-step means at ``origins``: the selection's out-of-sample tail where it has
    them, before it the fitted parameters on the history up to each origin. Origins the model
    cannot score are dropped when the tail scores some; raises when none is scored."""
    from forecaster.models.base import clean_history

    mean = np.full(len(origins), np.nan)
    if tail is not None and tail[0] is not None and len(tail[0]):
        t_o, t_m = np.asarray(tail[0], dtype=int), np.asarray(tail[1], dtype="float64")
        at = np.searchsorted(origins, t_o)
        inside = (at < len(origins)) & (origins[np.minimum(at, len(origins) - 1)] == t_o)
        mean[at[inside]] = t_m[inside]
    before = np.isnan(mean)
    if before.any():
        try:
            m = np.asarray(model.rolling_means(clean_history(raw), origins[before], 1), dtype="float64")[:, 0]
            bias = getattr(model, "bias_", None)
            if bias is not None and len(bias) and np.isfinite(bias[0]):
                m = m + float(bias[0])
            mean[before] = m
        except Exception:
            if before.all():
                raise
            origins, mean = origins[~before], mean[~before]
    return origins, mean


def exposure(raw: np.ndarray, origins: np.ndarray) -> np.ndarray:
    """The demand the pods decided from origin i carry, as a path of three points (n x 3),
    linear between them: half-way from the origin's sample to the next, the next sample, and
    half-way to the one after (the last point is the next sample when there is none after).
    A coarse stand-in for :func:`sync_exposure` where no deployment timing applies (a path the
    chooser reads as two half-interval slices)."""
    raw = np.asarray(raw, dtype="float64")
    a0 = raw[origins]
    a1 = raw[origins + 1]
    nxt = origins + 2
    a2 = np.where(nxt < len(raw), raw[np.minimum(nxt, len(raw) - 1)], np.nan)
    end = np.where(np.isfinite(a2), 0.5 * (a1 + a2), a1)
    start = np.where(np.isfinite(a0), 0.5 * (a0 + a1), a1)
    return np.stack([start, a1, end], axis=1)


def sync_offsets(step_seconds: float, timing: ServingTiming = TIMING) -> np.ndarray:
    """Seconds after a sample at which HPA syncs read the forecast published from it: from its
    publication, a metric delay after the sample, every sync until the next sample's forecast."""
    return float(timing.metric_delay_seconds) + np.arange(0.0, float(step_seconds), float(timing.hpa_sync_seconds))


def _demand_at(raw: np.ndarray, origins: np.ndarray, x: np.ndarray, step_seconds: float) -> np.ndarray:
    """Demand linear between samples, ``x`` (J,) seconds after each origin -> (n, J); NaN past the data."""
    pos = np.asarray(x, dtype="float64") / float(step_seconds)
    i0 = np.floor(pos).astype(int)
    frac = pos - i0
    j0 = origins[:, None] + i0[None, :]
    j1 = j0 + (frac > 0)[None, :]

    def at(j):
        return np.where(j < len(raw), raw[np.minimum(j, len(raw) - 1)], np.nan)

    return at(j0) * (1.0 - frac) + np.where(frac > 0, at(j1), 0.0) * frac


def sync_exposure(raw: np.ndarray, origins: np.ndarray, step_seconds: float, timing: ServingTiming = TIMING) -> np.ndarray:
    """(n, J, 2): for each origin and each HPA sync reading its forecast (:func:`sync_offsets`),
    the demand at the start and the end of the slice that sync's pods carry: they are ready a
    pod start-up after the sync and carry the load until the next sync's pods are ready.
    Demand is linear between samples (NaN where the data ends)."""
    raw = np.asarray(raw, dtype="float64")
    origins = np.asarray(origins, dtype=int)
    a = sync_offsets(step_seconds, timing) + float(timing.pod_startup_seconds)
    b = a + float(timing.hpa_sync_seconds)
    return np.stack([_demand_at(raw, origins, a, step_seconds), _demand_at(raw, origins, b, step_seconds)], axis=2)


def sync_observed(raw: np.ndarray, origins: np.ndarray, step_seconds: float, timing: ServingTiming = TIMING) -> np.ndarray:
    """(n, J): the observed demand the adapter reads directly at each sync of
    :func:`sync_offsets` (its floor): the demand a metric delay before the sync, as a reactive
    HPA's CPU metric reads it, and one re-read interval older (the reading may be that old),
    linear between samples; before the first sample, the first."""
    x = sync_offsets(step_seconds, timing) - float(timing.metric_delay_seconds) - float(timing.observed_read_seconds)
    raw = np.asarray(raw, dtype="float64")
    at = np.asarray(origins, dtype="float64")[:, None] + x[None, :] / float(step_seconds)
    return np.interp(at, np.arange(len(raw), dtype="float64"), raw)


def lead_bases(last: np.ndarray, first_points: np.ndarray, step_seconds: float, timing: ServingTiming = TIMING) -> np.ndarray:
    """(n, J): what the adapter's prediction is at each sync of :func:`sync_offsets` for a
    forecast whose first point is ``first_points`` and whose last observed value is ``last``:
    the max of the forecast curve over the lead window (``forecaster.leadwindow``, the function
    the adapter serves with), the curve flat after the first point (the chooser scores
    one-step forecasts)."""
    first_points = np.asarray(first_points, dtype="float64")
    return window_max(np.asarray(last, dtype="float64"), first_points[:, None], sync_offsets(step_seconds, timing),
                      float(timing.lead_seconds), float(step_seconds))


def as_slices(path: np.ndarray) -> np.ndarray:
    """A demand path in the chooser's form (n, J, 2): each origin's J equal slices, linear
    within each. A flat value per origin (n,) is one flat slice; an :func:`exposure` path
    (n, 3) is its two half intervals."""
    p = np.asarray(path, dtype="float64")
    if p.ndim == 1:
        return np.repeat(p[:, None, None], 2, axis=2)
    if p.ndim == 2:
        return np.stack([p[:, :-1], p[:, 1:]], axis=2)
    return p


def violation_minutes(path: np.ndarray, limit: np.ndarray, minutes: float) -> np.ndarray:
    """Minutes of each slice with demand above ``limit``: ``path`` (..., 2) is linear over a
    slice of ``minutes`` from path[..., 0] to path[..., 1]; ``limit`` broadcasts against path[..., 0]."""
    u, v = path[..., 0], path[..., 1]
    lim = np.asarray(limit, dtype="float64")
    shape = np.broadcast_shapes(u.shape, lim.shape)
    hi = np.broadcast_to(np.maximum(u, v), shape)
    lim = np.broadcast_to(lim, shape)
    out = np.zeros(shape)
    above = hi > lim  # most slices of most candidates never reach the limit: compute the rest only
    if above.any():
        h, low = hi[above], np.broadcast_to(np.minimum(u, v), shape)[above]
        d = h - low
        out[above] = np.where(d > 0, np.minimum((h - lim[above]) / np.where(d > 0, d, 1.0), 1.0), 1.0)
    return minutes * out


def clairvoyant_cost(slices: np.ndarray, unit: float, minutes: float) -> float:
    """Pod-minutes of an HPA that knows each slice's peak demand (``slices``, (n, J, 2) of
    ``minutes`` each) and asks for it at its target (``unit``: demand one pod carries at the
    target): no violation, no spare pod. What no forecast can undercut at that target, so
    persistence's cost above it is what a forecast could save."""
    peak = np.nanmax(np.asarray(slices, dtype="float64"), axis=-1)
    return float(minutes * np.maximum(np.ceil(peak / unit - 1e-9), 1.0).sum())


# The trainer publishes at least this many observed samples with every forecast. The peak gap
# and the hold read them, so the adapter sees what the chooser saw.
OBSERVED_POINTS = 12
PEAK_SAMPLES = OBSERVED_POINTS


def peak_gap(samples) -> float:
    """How far demand now sits below its recent peak: 1 - latest / max over the last
    ``PEAK_SAMPLES`` finite samples, in [0, 1]; 0 at the peak or with nothing to compare.

    A workload just past a burst (a high gap) is where the next burst most often comes from:
    bursts cluster in time. The serving policy can give each range of the gap its own headroom.
    """
    # plain floats: the adapter reads this on every request, where numpy's per-call cost on a
    # dozen samples was most of the work (None reads as NaN, as numpy reads it)
    x = [f for f in (math.nan if v is None else float(v) for v in list(samples)[-PEAK_SAMPLES:]) if math.isfinite(f)]
    if not x:
        return 0.0
    top = max(x)
    return float(min(1.0, max(0.0, 1.0 - x[-1] / top))) if top > 0 else 0.0


def peak_gaps(values: np.ndarray, origins: np.ndarray) -> np.ndarray:
    """:func:`peak_gap` of the samples up to and including each origin."""
    values = np.asarray(values, dtype="float64")
    return np.array([peak_gap(values[max(0, o - PEAK_SAMPLES + 1):o + 1]) for o in np.asarray(origins, dtype=int)])


def gap_edges(gaps: np.ndarray, states: int) -> tuple[float, ...]:
    """Edges that split the observed gaps into ``states`` ranges of about equal counts. Edges
    are observed values and below the largest, so no range is empty; ties may leave fewer."""
    g = np.asarray(gaps, dtype="float64")
    g = g[np.isfinite(g)]
    if states <= 1 or not len(g):
        return ()
    qs = np.quantile(g, np.arange(1, states) / states, method="inverted_cdf")
    return tuple(float(e) for e in np.unique(qs) if e < g.max())


def gap_state(gaps, edges) -> np.ndarray:
    """The state of each gap: 0 for gap <= edges[0], i for edges[i-1] < gap <= edges[i], and
    len(edges) above the last edge."""
    return np.searchsorted(np.asarray(edges, dtype="float64"), np.asarray(gaps, dtype="float64"), side="left")
