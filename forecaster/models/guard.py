"""A fitted model with its first steps held near the last observation.

What an autoscaler acts on is the first step or two of a forecast. There a model that loses to
persistence is worse than useless, and the validation tail can say so: ``lead_guard`` (called
by ``forecaster.selection.choose``) decides, per lead step h, how far the forecast may move from
the last value:

- ``max_move`` (and ``move_growth``): the move from the last value at step h is clipped to
  ``max_move * h ** move_growth`` (series units), a few typical one-step changes growing like a
  random walk's spread. A model that mean-reverts hard from a rare state (an on/off VM at 98%
  CPU forecast back at 5%) is usually wrong at 5 minutes and costs 90 points of error, and the
  validation tail may not hold that state: the clip is the part of the guard that does not
  trust the tail. It costs a few points when the model was right.
- ``weights[h-1]``: the forecast is ``last + w * (model - last)`` (then clipped). w is the
  blend from {0, 0.25, ..., 1} with the lowest validation MAE at h, scaled by the evidence
  that it beats persistence there: ``min(1, z / evidence_z)`` where z is its paired gain over
  persistence in standard errors (0 when it does not gain). A model that wins clearly keeps its
  move; one that wins by noise on a short or flat tail is pulled to persistence in proportion,
  instead of one fixed significance bar for every series (which served persistence at h=1 on
  most series and doubled the median error there).
- ``season`` (seasonal support): the tail rarely holds enough of a daily peak's rise to give
  evidence, so on its own the guard serves persistence just before the peak a model has right
  (a 20-minute ramp a day: z under 3). With support, where the model moves the way the series
  itself moved over the same steps one season earlier, it may move as far as that earlier
  move (never further than the model): the history, not the tail, is the evidence. It is
  kept only when it lowers the guarded validation error over the lead steps without raising
  it at h=1, so a series whose days do not repeat keeps the plain guard.

Steps beyond ``len(weights)`` are the model's own. The inner model's median shift
(``bias``) is applied before the guard, so the guard sees what would have been served.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from forecaster.models.base import Model

BLEND_GRID = np.linspace(0.0, 1.0, 5)
# the shipped guard (SelectionSettings.lead_*), chosen on the tune half of the public CPU series
# by bench/forecast_accuracy.py --part tune --guard-grid: of the grid points whose median MASE
# at h=1 and h=2 stays within 10% of the unguarded model's, the lowest mean MASE among those
# with no series above 1.1x persistence's h=1 error
EVIDENCE_Z = 6.0
MAX_MOVE_SCALES = 3.0
MOVE_GROWTH = 0.5


@dataclass(frozen=True)
class GuardSpec:
    weights: tuple[float, ...]  # per lead step, 0 = persistence, 1 = the model
    max_move: float  # largest |forecast - last| at h=1, series units (inf = none)
    gain_h1: float  # validation MAE at h=1: (persistence - model) / persistence, unguarded model
    z_h1: float  # the served h=1 forecast's gain over persistence in standard errors
    move_growth: float = 0.0  # the cap at step h is max_move * h ** move_growth
    season: int = 0  # seasonal support's period in steps (0 = none)

    def caps(self, steps: int) -> np.ndarray:
        return self.max_move * np.arange(1, steps + 1, dtype="float64") ** self.move_growth

    def describe(self, model_name: str) -> str:
        w = ", ".join(f"h{h + 1} {x:.2g}" for h, x in enumerate(self.weights))
        gain = f"gain over persistence at h=1 {self.gain_h1:+.1%}, {self.z_h1:.1f} standard errors"
        grow = f" x h^{self.move_growth:g}" if self.move_growth else ""
        cap = f"moves from the last value at h<={len(self.weights)} capped at {self.max_move:.3g}{grow}"
        if self.season:
            cap += f", or as far as the series moved at the same steps {self.season} steps earlier"
        if self.weights and self.weights[0] == 0.0:
            return (f"first step served by persistence: {model_name} does not clearly beat persistence at h=1 "
                    f"on the validation tail ({gain}); weight on the model {w}; {cap}")
        if all(x == 1.0 for x in self.weights):
            return f"first steps from the model ({gain}); {cap}"
        return f"first steps blended with persistence by the evidence ({gain}); weight on the model {w}; {cap}"


def lead_guard(
    actual: np.ndarray,
    means: np.ndarray,
    last: np.ndarray,
    scale: float,
    lead_steps: int = 2,
    evidence_z: float = EVIDENCE_Z,
    max_move_scales: float = MAX_MOVE_SCALES,
    move_growth: float = MOVE_GROWTH,
    support: np.ndarray | None = None,
    season: int = 0,
) -> tuple[GuardSpec, np.ndarray]:
    """Choose the guard on the validation tail and return it with the guarded validation means.

    ``actual`` and ``means`` are (n_origins, H), ``last`` the value observed at each origin,
    ``scale`` the mean one-step change of the fit part (the MASE scale). Gaps in ``actual``
    (NaN) are left out of every average. ``evidence_z`` <= 0 keeps the best blend whatever
    the evidence. ``support`` (``seasonal_moves`` at the origins, period ``season``) offers
    the seasonal support, kept when it lowers the tail's error (module doc)."""
    means = np.array(means, dtype="float64")
    L = min(int(lead_steps), means.shape[1])
    last = np.asarray(last, dtype="float64")
    max_move = float(max_move_scales * scale) if max_move_scales > 0 else float("inf")
    caps = max_move * np.arange(1, L + 1, dtype="float64") ** move_growth
    weights: list[float] = []
    gain_h1 = z_h1 = 0.0
    for h in range(L):
        a, f = actual[:, h], means[:, h]
        ok = np.isfinite(a)
        if not ok.any():
            weights.append(0.0)
            continue
        a, l0 = a[ok], last[ok]
        move = f[ok] - l0
        e_pers = np.abs(a - l0)
        served = [l0 + np.clip(w * move, -caps[h], caps[h]) for w in BLEND_GRID]
        errs = [float(np.mean(np.abs(a - s))) for s in served]
        best = int(np.argmin(errs))
        z = _z(e_pers - np.abs(a - served[best]))
        w = float(BLEND_GRID[best]) * (min(1.0, max(0.0, z) / evidence_z) if evidence_z > 0 else 1.0)
        if h == 0:
            mp = float(np.mean(e_pers))
            gain_h1 = float(np.mean(e_pers - np.abs(a - f[ok]))) / mp if mp > 0 else 0.0
            z_h1 = z
        weights.append(float(w))
    spec = GuardSpec(tuple(weights), max_move, gain_h1, float(z_h1), float(move_growth))
    plain = apply_guard(means, last, spec)
    if support is None or season <= 0 or L == 0:
        return spec, plain
    seasonal = replace(spec, season=int(season))
    backed = apply_guard(means, last, seasonal, support)
    e_plain, e_backed = _lead_errors(actual, plain, L), _lead_errors(actual, backed, L)
    if e_backed.sum() < e_plain.sum() and e_backed[0] <= e_plain[0]:
        return seasonal, backed
    return spec, plain


def _lead_errors(actual: np.ndarray, means: np.ndarray, L: int) -> np.ndarray:
    err = np.abs(actual[:, :L] - means[:, :L])
    ok = np.isfinite(err)
    return np.where(ok, err, 0.0).sum(axis=0) / np.maximum(ok.sum(axis=0), 1)


def seasonal_moves(y: np.ndarray, origins: np.ndarray, steps: int, season: int) -> np.ndarray:
    """(len(origins), steps): how far ``y`` moved from ``o - season`` to ``o - season + h``
    for h = 1..steps, known at origin ``o`` when steps < season (NaN where it reaches before
    the start of ``y``)."""
    y = np.asarray(y, dtype="float64")
    base = np.asarray(origins, dtype=int) - int(season)
    out = np.full((len(base), steps), np.nan)
    if season <= steps:
        return out
    ok = base >= 0
    idx = base[ok][:, None] + np.arange(1, steps + 1)[None, :]
    out[ok] = y[idx] - y[base[ok]][:, None]
    return out


def _z(gain: np.ndarray) -> float:
    """Mean paired gain in standard errors (inf for a gain without spread, 0 for none)."""
    m = float(np.mean(gain))
    sd = float(np.std(gain))
    if sd > 0:
        return m / (sd / np.sqrt(len(gain)))
    return float("inf") if m > 0 else 0.0


def apply_guard(means: np.ndarray, last: np.ndarray, spec: GuardSpec, support: np.ndarray | None = None) -> np.ndarray:
    """``means`` (n, H) forecast from origins whose last observed values are ``last`` (n,);
    ``support`` (n, >= lead steps): ``seasonal_moves`` at those origins, used when
    ``spec.season`` is set."""
    out = np.array(means, dtype="float64")
    last = np.asarray(last, dtype="float64")[:, None]
    L = min(len(spec.weights), out.shape[1])
    if L:
        w = np.asarray(spec.weights[:L])[None, :]
        cap = spec.caps(L)[None, :]
        move = out[:, :L] - last
        guarded = np.clip(w * move, -cap, cap)
        if spec.season and support is not None:
            s = np.nan_to_num(np.asarray(support, dtype="float64")[:, :L], nan=0.0)
            reach = np.minimum(np.abs(move), np.abs(s))
            backed = (np.sign(move) == np.sign(s)) & (reach > np.abs(guarded))
            guarded = np.where(backed, np.sign(move) * reach, guarded)
        out[:, :L] = last + guarded
    return out


class LeadGuarded(Model):
    """``inner`` (fitted; its median shift given separately as ``inner_bias``) with the lead
    steps guarded by ``spec``. Built by selection from already-fitted parts (no refit)."""

    name = "lead_guarded"

    def __init__(self, inner: Model, spec: GuardSpec, inner_bias: Sequence[float] | None = None, **params):
        super().__init__(**params)
        self.inner = inner
        self.spec = spec
        self.inner_bias = None if inner_bias is None else np.asarray(inner_bias, dtype="float64")
        self.name = inner.name
        self.season = inner.season
        self.fitted_ = inner.fitted_
        self.nonneg_ = inner.nonneg_
        self.hist_ = inner.hist_
        self._default_offsets_src = getattr(inner, "_default_offsets_src", inner.hist_)
        # the last value, and with seasonal support the season before it (the inner model keeps
        # its own history)
        self.history_points = spec.season + len(spec.weights) + 1 if spec.season else 1

    def new(self) -> "LeadGuarded":
        clone = LeadGuarded(self.inner.new(), self.spec, self.inner_bias, **self.params)
        clone.fitted_ = False
        return clone

    def fit(self, y, timestamps=None):
        self.inner.fit(y, timestamps)
        super().fit(y, timestamps)
        self.nonneg_ = self.inner.nonneg_
        return self

    def update(self, y, timestamps=None):
        self.inner.update(y, timestamps)
        return super().update(y, timestamps)

    def _shifted(self, block: np.ndarray) -> np.ndarray:
        b = self.inner_bias
        if b is None or not len(b):
            return block
        h = block.shape[1]
        b = b[:h] if len(b) >= h else np.concatenate([b, np.full(h - len(b), b[-1])])
        return block + np.where(np.isfinite(b), b, 0.0)[None, :]

    def _support(self, y, origins) -> np.ndarray | None:
        if not self.spec.season:
            return None
        return seasonal_moves(y, origins, len(self.spec.weights), self.spec.season)

    def _mean_from(self, y, h):
        inner = self.inner._safe_mean(self.inner.hist_, h)[None, :]
        o = np.array([len(y) - 1])
        return apply_guard(self._shifted(inner), y[o], self.spec, self._support(y, o))[0]

    def _rolling_means(self, y, origins, h):
        inner = self.inner.rolling_means(y, origins, h)
        return apply_guard(self._shifted(inner), y[origins], self.spec, self._support(y, origins))
