"""The benchmark-only rows of ``auto`` in bench/forecast_accuracy.py: other selections scored at
every origin on the same candidate fits as the shipped ``auto`` (the product's backtest takes
them as ``BacktestSettings.extra_rows``, ``forecaster.evaluation.ExtraRows``), and the first
lead-step guard, which only these rows still use."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Sequence

import numpy as np

from forecaster.models import Model, Prediction
from forecaster.models.guard import BLEND_GRID, GuardSpec, _z, apply_guard
from forecaster.selection import CandidateResult, SelectionSettings, build_model, choose, conformal_offsets

# (actual, means, last, scale, lead_steps) -> (spec, guarded means): a lead-step guard rule
GuardRule = Callable[[np.ndarray, np.ndarray, np.ndarray, float, int], tuple[GuardSpec, np.ndarray]]


def fixed_z_lead_guard(actual, means, last, scale, lead_steps: int = 2, z: float = 3.0,
                       max_move_scales: float = 2.0) -> tuple[GuardSpec, np.ndarray]:
    """The first rule (e4b3f37): blend chosen unclipped, persistence at h=1 unless the model
    wins by ``z`` standard errors, one cap for every lead step. Not what ``auto`` serves: the
    benchmark shows the two side by side on the same fits."""
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


@dataclass(frozen=True)
class Row:
    """One row: ``auto``'s choice with ``selection`` (a row whose candidates differ from auto's
    chooses among those); ``rule`` in place of the shipped lead guard; ``seasonal_support``
    False: the shipped guard without its seasonal support."""

    name: str
    selection: SelectionSettings
    rule: GuardRule | None = None
    seasonal_support: bool = True


@dataclass(frozen=True)
class AutoRows:
    """``ExtraRows`` of the product's backtest: every row from the candidates it already fitted."""

    rows: tuple[Row, ...]

    @property
    def candidates(self) -> tuple[str, ...]:
        out: list[str] = []
        for row in self.rows:
            out.extend(c for c in row.selection.candidates if c not in out)
        return tuple(out)

    def predict(self, fits: Mapping[str, CandidateResult], actual, scale, y: np.ndarray, ts: np.ndarray | None,
                fallback: Model, horizon: int, quantiles: Sequence[float]) -> dict[str, tuple[Prediction, float]]:
        out = {}
        for row in self.rows:
            t0 = time.perf_counter()
            names = row.selection.candidates
            sub = [fits[c] for c in names if c in fits and fits[c].model is not None]
            p = _predict(row, sub, actual, scale, y, ts, horizon, quantiles) if sub else fallback.predict(horizon, quantiles)
            # a row costs its candidates' fits plus its choice on top
            out[row.name] = (p, time.perf_counter() - t0 + sum(fits[c].seconds for c in names if c in fits))
        return out


def _predict(row: Row, sub: list[CandidateResult], actual, scale, y, ts, horizon, quantiles) -> Prediction:
    """The row's forecast, served as ``auto`` serves its choice (forecaster.evaluation)."""
    if not row.seasonal_support:
        sub = [replace(r, support=None) for r in sub]
    if row.rule is None:
        _, best = choose(sub, actual, scale, row.selection)
    else:
        best = choose_with_rule(sub, actual, scale, row.selection, row.rule)
    m = build_model(best, sub)
    m.set_bias(best.shift)
    m.calibrate(conformal_offsets(actual - best.means, quantiles))  # means include the shift
    m.update(y, ts)
    return m.predict(horizon, quantiles)


def choose_with_rule(results: Sequence[CandidateResult], actual, scale, sel: SelectionSettings, rule: GuardRule,
                     last: np.ndarray | None = None) -> CandidateResult:
    """``choose``'s best with ``rule`` on its lead steps in place of the shipped guard (where
    ``choose`` would guard it; ``last`` as ``choose`` takes it). Its score stays the unguarded
    one: only its guard and forecasts are used."""
    _, best = choose(results, actual, scale, replace(sel, lead_guard=False), last=last)
    if last is None:
        last = next((r.last for r in results if r.last is not None), None)
    if last is None:  # persistence's validation forecast is the last value
        last = next((r.means[:, 0] for r in results if r.name == "persistence" and r.means is not None), None)
    if not (sel.lead_steps > 0 and len(results) > 1 and last is not None and best.name != "persistence"):
        return best
    last = np.asarray(last, dtype="float64")
    spec, guarded = rule(actual, best.means, last, scale, sel.lead_steps)
    return replace(best, means=guarded, shift=None, last=last, guard=spec, inner_shift=best.shift)
