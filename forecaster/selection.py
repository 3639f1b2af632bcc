"""Per-series model selection, honestly evaluated, plus split-conformal quantile calibration.

Given the history available at one moment (nothing later), each candidate is fitted on the
history minus a validation tail (default the last 2 days), then forecasts from many
pseudo-origins inside that tail with its parameters fixed (``Model.rolling_means``). The
candidate (or the mean of a pair of candidates) with the lowest weighted MASE over the
horizons wins; its validation residuals per horizon give the conformal quantile offsets; it
is then brought up to date with the whole history (``update``, no refit).

Fallback to persistence, with a reason: history shorter than ``min_history_days``, every
candidate failing, or nothing beating persistence.

Tail safety at the serving horizon: the winner is chosen on the average over h = 1..H, but an
autoscaler acts on the first steps. The chosen entry's first ``lead_steps`` are guarded on the
same validation forecasts (``forecaster.models.guard``): blended towards the last value as far
as the validation tail says helps, that blend pulled further to persistence the weaker its
evidence of beating persistence (full weight from ``lead_evidence_z`` standard errors), and
never moved more than ``lead_max_move`` typical one-step changes (growing as
h ** ``lead_move_growth``) from the last value, unless the series moved that way at the same
steps a season earlier (seasonal support, kept when the tail agrees). The reason string says
what the guard did. With a single candidate (a model the user named rather than ``auto``)
nothing is guarded. Validation targets that were gaps in the data (filled by interpolation) are
not scored: a straight interpolated line flatters trend-following models.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from core.store import quantile_key
from forecaster.models import Model, ModelError, clean_history, get_model
from forecaster.models.base import season_length
from forecaster.models.combo import Combination
from forecaster.models.guard import EVIDENCE_Z, MAX_MOVE_SCALES, MOVE_GROWTH, GuardSpec, LeadGuarded, lead_guard, seasonal_moves

DEFAULT_CANDIDATES = (
    "persistence",
    "moving_average_3",
    "moving_average_6",
    "moving_average",
    "moving_average_36",
    "ar",
    "ar_log",
    "ar_log_6",
    "ar_log_24",
    "ar_log_noseason",
    "ets",
)


@dataclass(frozen=True)
class SelectionSettings:
    """How ``auto`` chooses. ``horizon_weights`` (one per step h = 1..H, None = equal) say
    which horizons matter for scaling; durations are in days of history. ``lead_*``: the guard
    on the first ``lead_steps`` (see the module doc); ``lead_max_move`` is in units of the mean
    one-step change of the history (<= 0: no cap). The lead defaults were chosen on the tune half
    of the public CPU series (bench/forecast_accuracy.py --part tune)."""

    candidates: tuple[str, ...] = DEFAULT_CANDIDATES
    horizon_weights: tuple[float, ...] | None = None
    validation_days: float = 2.0
    validation_stride: int = 3
    min_history_days: float = 2.0
    combine: bool = True
    bias_correct: bool = True
    lead_guard: bool = True
    lead_steps: int = 2
    lead_evidence_z: float = EVIDENCE_Z
    lead_max_move: float = MAX_MOVE_SCALES
    lead_move_growth: float = MOVE_GROWTH

    def weights(self, h: int) -> np.ndarray:
        if self.horizon_weights is None:
            return np.ones(h)
        w = np.asarray(self.horizon_weights, dtype="float64")[:h]
        if len(w) < h:
            w = np.concatenate([w, np.full(h - len(w), w[-1] if len(w) else 1.0)])
        if not np.all(w >= 0) or w.sum() <= 0:
            raise ModelError(f"horizon_weights {self.horizon_weights!r} must be >= 0 and not all 0")
        return w


@dataclass
class CandidateResult:
    name: str
    model: Model | None  # fitted on the fit part; None when it failed
    means: np.ndarray | None = None  # (n_origins, h) validation forecasts
    mase_by_h: np.ndarray | None = None
    score: float = math.inf
    error: str = ""
    seconds: float = 0.0  # fit + validation forecasts
    shift: np.ndarray | None = None  # per-horizon point-forecast shift chosen with it
    last: np.ndarray | None = None  # value observed at each validation origin (persistence's forecast)
    guard: GuardSpec | None = None  # lead-step guard chosen with it (then ``shift`` is inside)
    inner_shift: np.ndarray | None = None  # the shift applied before the guard
    support: np.ndarray | None = None  # the series' seasonal moves at the origins (``seasonal_moves``)
    season: int = 0  # their period in steps


@dataclass
class Selection:
    """The outcome for one series: a fitted, calibrated model ready to ``predict``."""

    model: Model
    name: str
    score: float  # weighted validation MASE of the chosen model (nan when unknown)
    mae_by_h: np.ndarray  # validation MAE per horizon, in the series' units
    scores: dict[str, float] = field(default_factory=dict)
    fallback: bool = False
    reason: str = ""
    # one-step mean forecasts (bias shift included) of the chosen model from EVERY origin of
    # the validation tail, parameters fixed before that tail: out-of-sample material for the
    # serving-policy choice (forecaster.serving); indexes are into the cleaned history
    tail_origins: np.ndarray | None = None
    tail_means: np.ndarray | None = None


def conformal_offsets(residuals: np.ndarray, quantiles: Sequence[float], smooth: int = 1) -> dict[str, np.ndarray]:
    """Split-conformal offsets per horizon: the finite-sample-corrected q-quantile of the
    residuals (actual - mean) pooled over horizons h-smooth..h+smooth (for stability)."""
    r = np.asarray(residuals, dtype="float64")
    n_o, h = r.shape
    padded = np.pad(r, ((0, 0), (smooth, smooth)), mode="edge")
    pool = np.vstack([padded[:, i : i + h] for i in range(2 * smooth + 1)])
    n = int(np.isfinite(pool[:, 0]).sum()) or 1
    out: dict[str, np.ndarray] = {}
    for q in quantiles:
        if q > 0.5:
            level = min(1.0, math.ceil((n + 1) * q) / n)
        else:
            level = max(0.0, math.floor((n + 1) * q) / n)
        with np.errstate(all="ignore"):
            if not n_o:
                offs = np.zeros(h)
            elif np.isfinite(pool).all():
                offs = np.quantile(pool, level, axis=0)
            else:
                offs = np.nanquantile(pool, level, axis=0)
        offs = np.where(np.isfinite(offs), offs, 0.0)
        out[quantile_key(q)] = np.maximum.accumulate(offs) if q > 0.5 else offs
    return out


def _prototype(c: str | Model, season: int) -> Model:
    if isinstance(c, Model):
        m = c.new()
        if not m.season:
            m.season = season
        return m
    return get_model(c, season=season)


def evaluate_candidates(
    y: np.ndarray,
    timestamps: np.ndarray | None,
    candidates: Sequence[str | Model],
    horizon: int,
    settings: SelectionSettings = SelectionSettings(),
    observed: np.ndarray | None = None,
) -> tuple[list[CandidateResult], np.ndarray, float, np.ndarray]:
    """Fit every candidate on ``y`` minus the validation tail and forecast from the tail's
    pseudo-origins. Returns (results, actuals (n_origins, h), naive scale, origins).
    ``observed`` (bool, aligned with ``y``) marks real points; targets that were filled gaps
    are NaN in ``actuals`` and not scored, unless that would leave too few to score."""
    season = season_length(timestamps)
    n = len(y)
    V = int(settings.validation_days * season)
    V = min(V, max(n // 3, horizon + 1))
    cut = n - V
    origins = np.arange(cut - 1, n - horizon, max(1, settings.validation_stride))
    if len(origins) == 0:
        raise ModelError(f"history of {n} points is too short to validate a {horizon}-step forecast")
    target_idx = origins[:, None] + 1 + np.arange(horizon)[None, :]
    actual = y[target_idx]
    if observed is not None:
        real = np.asarray(observed, dtype=bool)[target_idx]
        if not real.all() and real.mean(axis=0).min() >= 0.5:
            actual = np.where(real, actual, np.nan)
    last = y[origins]
    support = seasonal_moves(y, origins, settings.lead_steps, season)
    fit_part = y[:cut]
    d = np.abs(np.diff(fit_part))
    scale = float(np.mean(d)) if len(d) else 0.0
    if not scale > 0:
        scale = max(float(np.mean(np.abs(fit_part))) * 1e-3, 1e-9)
    w = settings.weights(horizon)
    ts_fit = None if timestamps is None else timestamps[:cut]
    results = []
    for c in candidates:
        name = c if isinstance(c, str) else c.name
        t0 = time.perf_counter()
        try:
            m = _prototype(c, season).fit(fit_part, ts_fit)
            means = m.rolling_means(y, origins, horizon)
            mase = _colmean(np.abs(actual - means)) / scale
            results.append(CandidateResult(name, m, means, mase, float(np.sum(w * mase) / w.sum()), last=last,
                                           support=support, season=season))
        except Exception as exc:  # noqa: BLE001 - a failing candidate is skipped, with its reason
            results.append(CandidateResult(name, None, error=f"{exc.__class__.__name__}: {exc}", last=last,
                                           support=support, season=season))
        results[-1].seconds = time.perf_counter() - t0
    return results, actual, scale, origins


def _colmean(x: np.ndarray) -> np.ndarray:
    """Mean per column, leaving out NaN (unscored gap targets) only when there are any."""
    if np.isfinite(x).all():
        return np.mean(x, axis=0)
    ok = np.isfinite(x)
    return np.where(ok, x, 0.0).sum(axis=0) / np.maximum(ok.sum(axis=0), 1)


def _colmedian(x: np.ndarray) -> np.ndarray:
    if np.isfinite(x).all():
        return np.median(x, axis=0)
    out = np.zeros(x.shape[1])
    for j in range(x.shape[1]):
        col = x[:, j][np.isfinite(x[:, j])]
        out[j] = float(np.median(col)) if len(col) else 0.0
    return out


def _last_values(results: Sequence[CandidateResult], last: np.ndarray | None) -> np.ndarray | None:
    if last is not None:
        return np.asarray(last, dtype="float64")
    for r in results:
        if r.last is not None:
            return r.last
    for r in results:  # results built elsewhere: persistence's forecast is the last value
        if r.name == "persistence" and r.means is not None:
            return r.means[:, 0]
    return None


def choose(
    results: Sequence[CandidateResult],
    actual: np.ndarray,
    scale: float,
    settings: SelectionSettings = SelectionSettings(),
    last: np.ndarray | None = None,
) -> tuple[list[CandidateResult], CandidateResult]:
    """Best of the candidates and (if ``combine``) of the equal-weight pairs of candidates,
    with its lead steps guarded (``lead_guard``; needs ``last``, the value at each validation
    origin, given here or carried by the results).

    With ``bias_correct`` every entry is scored after shifting its forecasts by its median
    validation residual per horizon (a median forecast is what absolute error rewards; on
    bursty CPU series AR and moving averages are pulled up by spikes). The shift is part of
    the choice and travels with the chosen model (``Model.set_bias``, or inside the guard).
    ``pool`` holds every entry's unguarded score; the returned best carries the guarded
    validation forecasts and score, which is what is served."""
    ok = [r for r in results if r.model is not None]
    if not ok:
        raise ModelError("every candidate failed: " + "; ".join(f"{r.name}: {r.error}" for r in results))
    w = settings.weights(actual.shape[1])
    wsum = w.sum()

    def scored(name, model, means):
        shift = None
        if settings.bias_correct:
            shift = _colmedian(actual - means)
            means = means + shift
        mase = _colmean(np.abs(actual - means)) / scale
        return CandidateResult(name, model, means, mase, float(np.sum(w * mase) / wsum), shift=shift)

    pool = [scored(r.name, r.model, r.means) for r in ok]
    if settings.combine:
        for a, b in itertools.combinations(ok, 2):
            pool.append(scored(f"{a.name}+{b.name}", None, 0.5 * (a.means + b.means)))
    best = min(pool, key=lambda r: r.score)
    lv = _last_values(results, last)
    # one candidate = a model the user named: served as configured (the live check still applies)
    guarded = settings.lead_guard and settings.lead_steps > 0 and len(results) > 1
    if guarded and lv is not None and best.name != "persistence":
        seasonal = next((r for r in results if r.support is not None), None)
        spec, gm = lead_guard(actual, best.means, lv, scale, settings.lead_steps, settings.lead_evidence_z,
                              settings.lead_max_move, settings.lead_move_growth,
                              support=seasonal and seasonal.support, season=seasonal.season if seasonal else 0)
        mase = _colmean(np.abs(actual - gm)) / scale
        best = CandidateResult(best.name, best.model, gm, mase, float(np.sum(w * mase) / wsum),
                               shift=None, last=lv, guard=spec, inner_shift=best.shift)
    return pool, best


def build_model(best: CandidateResult, results: Sequence[CandidateResult]) -> Model:
    """The chosen entry as a model, from the candidates' fits (no refit)."""
    if best.model is not None:
        model = best.model
    else:
        by_name = {r.name: r.model for r in results if r.model is not None}
        members = [by_name[n] for n in best.name.split("+")]
        model = Combination.of_fitted(members, name=best.name)
    if best.guard is not None:
        return LeadGuarded(model, best.guard, best.inner_shift)
    return model


def select_and_fit(
    y: Sequence[float],
    timestamps: np.ndarray | None = None,
    *,
    candidates: Sequence[str | Model] = DEFAULT_CANDIDATES,
    horizon: int = 12,
    quantiles: Sequence[float] = (0.5, 0.9),
    settings: SelectionSettings = SelectionSettings(),
) -> Selection:
    """Choose, calibrate and bring up to date the model for one series (see module doc)."""
    raw = np.asarray(y, dtype="float64")
    ts = None if timestamps is None else np.asarray(timestamps, dtype="float64")
    finite = np.isfinite(raw)
    if not finite.any():
        raise ModelError("the series has no finite values")
    first = int(np.argmax(finite))
    yc = clean_history(raw)
    ts = None if ts is None else ts[first:]
    season = season_length(ts)
    need = int(settings.min_history_days * season)
    n_real = int(finite.sum())

    def fallback(reason: str) -> Selection:
        m = get_model("persistence", season=season).fit(yc, ts)
        return Selection(m, "persistence", float("nan"), np.full(horizon, np.nan), fallback=True, reason=reason)

    if n_real < need:
        return fallback(f"history too short: {n_real} points < {need} ({settings.min_history_days:g} days); using persistence")
    if float(np.ptp(yc)) == 0.0:
        return fallback("constant series: persistence is exact")
    try:
        observed = np.isfinite(raw[first:])
        results, actual, scale, origins = evaluate_candidates(yc, ts, candidates, horizon, settings, observed=observed)
        pool, best = choose(results, actual, scale, settings, last=yc[origins])
    except ModelError as exc:
        return fallback(f"{exc}; using persistence")
    model = build_model(best, results)
    model.set_bias(best.shift)
    model.calibrate(conformal_offsets(actual - best.means, quantiles))  # best.means include the shift
    tail_origins, tail_means = _tail_one_step(model, yc, best.shift, settings, season, horizon)
    model.update(yc, ts)
    failed = [f"{r.name} ({r.error})" for r in results if r.model is None]
    reason = f"selected {best.name} (validation MASE {best.score:.3f})"
    if best.guard is not None:
        reason += "; " + best.guard.describe(best.name)
    if failed:
        reason += "; failed: " + ", ".join(failed)
    return Selection(
        model=model,
        name=best.name,
        score=best.score,
        mae_by_h=best.mase_by_h * scale,
        scores={r.name: r.score for r in pool},
        reason=reason,
        tail_origins=tail_origins,
        tail_means=tail_means,
    )


def _tail_one_step(model: Model, y: np.ndarray, shift, settings: SelectionSettings, season: int, horizon: int):
    """1-step means from every origin of the validation tail (as ``evaluate_candidates`` cut
    it), before ``update`` moves a stateful model past them; (None, None) if it cannot."""
    n = len(y)
    V = min(int(settings.validation_days * season), max(n // 3, horizon + 1))
    origins = np.arange(n - V - 1, n - 1)
    try:
        means = np.asarray(model.rolling_means(y, origins, 1), dtype="float64")[:, 0]
    except Exception:  # noqa: BLE001 - the policy then scores what it can
        return None, None
    if shift is not None and len(shift) and np.isfinite(shift[0]):
        means = means + float(shift[0])
    return origins, means
