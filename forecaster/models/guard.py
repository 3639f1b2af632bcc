"""A fitted model with its first steps held near the last observation.

What an autoscaler acts on is the first step or two of a forecast. There a model that loses to
persistence is worse than useless, and the validation tail can say so: ``lead_guard`` (called
by ``forecaster.selection.choose``) decides, per lead step h, how far the forecast may move from
the last value:

- ``weights[h-1]``: the forecast is ``last + w * (model - last)``, w from {0, 0.25, ..., 1}
  minimising the validation MAE at h; at h = 1, w = 0 (persistence) unless the model's gain
  over persistence is at least ``z`` standard errors on the validation tail;
- ``max_move``: the move from the last value is clipped to ``max_move`` (series units), a few
  typical one-step changes. A model that mean-reverts hard from a rare state (an on/off
  VM at 98% CPU forecast back at 5%) is usually wrong at 5 minutes and costs 90 points of
  error; the clip costs a few points when it was right.

Steps beyond ``len(weights)`` are the model's own. The inner model's median shift
(``bias``) is applied before the guard, so the guard sees what would have been served.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from forecaster.models.base import Model

BLEND_GRID = np.linspace(0.0, 1.0, 5)


@dataclass(frozen=True)
class GuardSpec:
    weights: tuple[float, ...]  # per lead step, 0 = persistence, 1 = the model
    max_move: float  # largest |forecast - last| at the lead steps, series units (inf = none)
    gain_h1: float  # validation MAE at h=1: (persistence - model) / persistence, unguarded model
    z_h1: float  # that gain in standard errors (the decision uses the blended forecast's)

    def describe(self, model_name: str) -> str:
        w = ", ".join(f"h{h + 1} {x:g}" for h, x in enumerate(self.weights))
        gain = f"gain over persistence at h=1 {self.gain_h1:+.1%}, {self.z_h1:.1f} standard errors"
        cap = f"moves from the last value at h<={len(self.weights)} capped at {self.max_move:.3g}"
        if self.weights and self.weights[0] == 0.0:
            return (f"first step served by persistence: {model_name} does not clearly beat persistence at h=1 "
                    f"on the validation tail ({gain}); weight on the model {w}; {cap}")
        if all(x == 1.0 for x in self.weights):
            return f"first steps from the model ({gain}); {cap}"
        return f"first steps blended with persistence ({gain}); weight on the model {w}; {cap}"


def lead_guard(
    actual: np.ndarray,
    means: np.ndarray,
    last: np.ndarray,
    scale: float,
    lead_steps: int = 2,
    z: float = 3.0,
    max_move_scales: float = 2.0,
) -> tuple[GuardSpec, np.ndarray]:
    """Choose the guard on the validation tail and return it with the guarded validation means.

    ``actual`` and ``means`` are (n_origins, H), ``last`` the value observed at each origin,
    ``scale`` the mean one-step change of the fit part (the MASE scale). Gaps in ``actual``
    (NaN) are left out of every average."""
    means = np.array(means, dtype="float64")
    n, H = means.shape
    L = min(int(lead_steps), H)
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
        move = f - l0
        errs = [float(np.mean(np.abs(a - (l0 + w * move)))) for w in BLEND_GRID]
        w = float(BLEND_GRID[int(np.argmin(errs))])
        if h == 0:
            e_pers = np.abs(a - l0)
            mp = float(np.mean(e_pers))
            gain_h1 = float(np.mean(e_pers - np.abs(a - f))) / mp if mp > 0 else 0.0
            z_h1 = _z(e_pers - np.abs(a - f))
            if not _z(e_pers - np.abs(a - (l0 + w * move))) >= z:
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
        move = w * (out[:, :L] - last)
        out[:, :L] = last + np.clip(move, -spec.max_move, spec.max_move)
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
