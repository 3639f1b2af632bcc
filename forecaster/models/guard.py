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

Steps beyond ``len(weights)`` are the model's own. The inner model's median shift
(``bias``) is applied before the guard, so the guard sees what would have been served.
"""

from __future__ import annotations

from dataclasses import dataclass
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

    def caps(self, steps: int) -> np.ndarray:
        return self.max_move * np.arange(1, steps + 1, dtype="float64") ** self.move_growth

    def describe(self, model_name: str) -> str:
        w = ", ".join(f"h{h + 1} {x:.2g}" for h, x in enumerate(self.weights))
        gain = f"gain over persistence at h=1 {self.gain_h1:+.1%}, {self.z_h1:.1f} standard errors"
        grow = f" x h^{self.move_growth:g}" if self.move_growth else ""
        cap = f"moves from the last value at h<={len(self.weights)} capped at {self.max_move:.3g}{grow}"
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
) -> tuple[GuardSpec, np.ndarray]:
    """Choose the guard on the validation tail and return it with the guarded validation means.

    ``actual`` and ``means`` are (n_origins, H), ``last`` the value observed at each origin,
    ``scale`` the mean one-step change of the fit part (the MASE scale). Gaps in ``actual``
    (NaN) are left out of every average. ``evidence_z`` <= 0 keeps the best blend whatever
    the evidence."""
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
    return spec, apply_guard(means, last, spec)


def fixed_z_lead_guard(actual, means, last, scale, lead_steps: int = 2, z: float = 3.0,
                       max_move_scales: float = 2.0) -> tuple[GuardSpec, np.ndarray]:
    """The first rule (e4b3f37): blend chosen unclipped, persistence at h=1 unless the model
    wins by ``z`` standard errors, one cap for every lead step. Not what ``auto`` serves: kept
    so the forecast-accuracy benchmark can show the two side by side on the same fits."""
    means = np.array(means, dtype="float64")
    L = min(int(lead_steps), means.shape[1])
    last = np.asarray(last, dtype="float64")
    weights: list[float] = []
    gain_h1 = z_h1 = 0.0
    for h in range(L):
        a, f = actual[:, h], means[:, h]
        ok = np.isfinite(a)
        if not ok.any():
            weights.append(0.0)
            continue
        a, f, l0 = a[ok], f[ok], last[ok]
        errs = [float(np.mean(np.abs(a - (l0 + w * (f - l0))))) for w in BLEND_GRID]
        w = float(BLEND_GRID[int(np.argmin(errs))])
        if h == 0:
            e_pers = np.abs(a - l0)
            mp = float(np.mean(e_pers))
            gain_h1 = float(np.mean(e_pers - np.abs(a - f))) / mp if mp > 0 else 0.0
            z_h1 = _z(e_pers - np.abs(a - f))
            if not _z(e_pers - np.abs(a - (l0 + w * (f - l0)))) >= z:
                w = 0.0
        weights.append(w)
    max_move = float(max_move_scales * scale) if max_move_scales > 0 else float("inf")
    spec = GuardSpec(tuple(weights), max_move, gain_h1, float(z_h1))
    return spec, apply_guard(means, last, spec)


def _z(gain: np.ndarray) -> float:
    """Mean paired gain in standard errors (inf for a gain without spread, 0 for none)."""
    m = float(np.mean(gain))
    sd = float(np.std(gain))
    if sd > 0:
        return m / (sd / np.sqrt(len(gain)))
    return float("inf") if m > 0 else 0.0


def apply_guard(means: np.ndarray, last: np.ndarray, spec: GuardSpec) -> np.ndarray:
    """``means`` (n, H) forecast from origins whose last observed values are ``last`` (n,)."""
    out = np.array(means, dtype="float64")
    last = np.asarray(last, dtype="float64")[:, None]
    L = min(len(spec.weights), out.shape[1])
    if L:
        w = np.asarray(spec.weights[:L])[None, :]
        cap = spec.caps(L)[None, :]
        out[:, :L] = last + np.clip(w * (out[:, :L] - last), -cap, cap)
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

    history_points = 1  # the last value; the inner model keeps its own history

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

    def _mean_from(self, y, h):
        inner = self.inner._safe_mean(self.inner.hist_, h)[None, :]
        return apply_guard(self._shifted(inner), np.array([y[-1]]), self.spec)[0]

    def _rolling_means(self, y, origins, h):
        inner = self.inner.rolling_means(y, origins, h)
        return apply_guard(self._shifted(inner), y[origins], self.spec)
