"""Training and publishing: the heavy ``fit`` (select + calibrate, on a retrain schedule) and
the cheap ``refresh`` (re-forecast from the latest data with the fitted model, publish).

    trainer = Trainer(store, models=("auto",), horizon=12, quantiles=(0.5, 0.9))
    trainer.fit("shop/checkout", ts, values)                 # minutes apart: heavy
    fc = trainer.refresh("shop/checkout", ts, values, meta=) # every refresh: cheap, publishes
    trainer.status("shop/checkout")                          # model, status, reason, errors

With ``checkpoints`` (``forecaster.checkpoint``) every fitted state is written when it is fitted
(and again when its drift flags flip); ``restore`` loads them at start, so a restarted trainer's
first refresh serves the fitted models instead of the persistence placeholder, and fits resume
on their own schedule rather than all at once.

``step_workload`` is one workload's step (retrain when due, refresh, publish); ``foresight train``
(``train_once``, and ``run_schedule`` where refreshes never wait for fits) is in
``forecaster.schedule``.

Fallback rules (the series' status says which applied): persistence when the history is
shorter than 2 days, when every candidate fails, when a model's forecast is not finite, when
the live error of the chosen model drifts above ``drift_ratio`` x its backtest error (a regime
change: a retrain is scheduled at the next step), or while the model's live one-step error
is above ``live_skill.ratio`` x persistence's on the same points (``forecaster.drift``; the
model is still scored, and served again once it recovers; a refit keeps that fallback until
the new model's own live error recovers). While the model is served, its first
``selection.lead_steps`` steps move from the last value only as far as the live points support
(``LiveSkill.move_weight``), the quantiles shifted with the mean.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from core.store import Forecast, ForecastStore, make_forecast
from forecaster.checkpoint import GLOBAL_ID, CheckpointDir, restore, shared_objects
from forecaster.drift import DriftSettings, LiveSkill
from forecaster.models import Model, ModelError, get_model
from forecaster.models.base import clean_history, season_length
from forecaster.predicted import capacity_per_pod
from forecaster.selection import DEFAULT_CANDIDATES, SelectionSettings, select_and_fit
from forecaster.serving import ServingPolicy, ServingSettings, policy_from_model
from forecaster.servingscore import OBSERVED_POINTS

log = logging.getLogger(__name__)

__all__ = ["Trainer", "SeriesState", "expand_models", "step_workload", "fit_item"]

GLOBAL_MODELS = ("lstm",)


def expand_models(models: Sequence[str]) -> tuple[tuple[str, ...], bool]:
    """("auto",) -> (default candidates, True); ("ar",) -> (("ar",), False); ("auto", "lstm")
    -> defaults + lstm. Unknown names raise ModelError listing the known ones."""
    out: list[str] = []
    auto = False
    for m in models:
        if m == "auto":
            auto = True
            out.extend(c for c in DEFAULT_CANDIDATES if c not in out)
        elif m not in out:
            get_model(m) if m not in GLOBAL_MODELS else None  # validates the name early
            out.append(m)
    if not out:
        raise ModelError("models must name at least one model or 'auto'")
    return tuple(out), auto or len(out) > 1


@dataclass
class SeriesState:
    series_id: str
    model: Model
    model_name: str
    fitted_at: float
    backtest_error: float | None  # weighted validation MASE of the chosen model
    backtest_mae_by_h: np.ndarray
    status: str = "ok"
    reason: str = ""
    scores: dict[str, float] = field(default_factory=dict)
    live_ratios: deque = field(default_factory=lambda: deque(maxlen=96))
    last_forecast: tuple[float, float, np.ndarray, float] | None = None  # origin, step, model mean, value at origin
    skill: LiveSkill = field(default_factory=LiveSkill)  # live error vs persistence's at h=1
    needs_retrain: bool = False
    drifted: bool = False
    refreshed_at: float | None = None
    policy: ServingPolicy = field(default_factory=ServingPolicy)
    fitted: bool = True  # False for the persistence placeholder a refresh installs before any fit

    def live_error_ratio(self) -> float | None:
        return float(np.mean(self.live_ratios)) if self.live_ratios else None


class Trainer:
    """Keeps one fitted model per series; publishes forecasts to ``store``."""

    def __init__(
        self,
        store: ForecastStore | None,
        *,
        models: Sequence[str] = ("auto",),
        horizon: int = 12,
        quantiles: Sequence[float] = (0.5, 0.9),
        step_seconds: float = 300.0,
        clock: Callable[[], float] = time.time,
        selection: SelectionSettings | None = None,
        retrain_interval_seconds: float = 86400.0,
        drift_ratio: float = 2.0,
        drift_min_points: int = 12,
        observed_points: int = OBSERVED_POINTS,
        prototypes: Mapping[str, Model] | None = None,
        serving: ServingSettings | None = None,
        live_skill: DriftSettings | None = None,
        serving_by_series: Mapping[str, ServingSettings] | None = None,
        checkpoints: CheckpointDir | None = None,
        global_params: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        if horizon < 1:
            raise ModelError(f"horizon must be >= 1 (got {horizon})")
        if observed_points < OBSERVED_POINTS:  # the served peak gap and hold read that many
            raise ModelError(f"observed_points must be >= {OBSERVED_POINTS} (got {observed_points})")
        self.store = store
        self.candidates, self.auto = expand_models(models)
        self.horizon = int(horizon)
        self.quantiles = tuple(sorted(float(q) for q in quantiles))
        self.step_seconds = float(step_seconds)
        self.clock = clock
        self.selection = replace(selection or SelectionSettings(), candidates=self.candidates)
        self.retrain_interval_seconds = float(retrain_interval_seconds)
        self.drift_ratio = float(drift_ratio)
        self.drift_min_points = int(drift_min_points)
        self.observed_points = int(observed_points)
        self.prototypes: dict[str, Model] = dict(prototypes or {})
        # per global model, how it trains (e.g. {"lstm": {"engine": "ray"}}: Ray Train)
        self.global_params: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (global_params or {}).items()}
        self.serving = serving or ServingSettings()
        # a workload's own serving settings (its ``serving:`` or its autoscaler's spec.serving)
        self.serving_by_series: dict[str, ServingSettings] = dict(serving_by_series or {})
        self.live_skill = live_skill or DriftSettings()
        self._states: dict[str, SeriesState] = {}
        self.global_fitted_at: float | None = None
        self.checkpoints = checkpoints
        self._saved_flags: dict[str, tuple[bool, bool, bool]] = {}  # drift flags as last checkpointed

    # --- heavy -----------------------------------------------------------------------------
    def fit_fleet(self, data: Mapping[str, tuple[np.ndarray, np.ndarray]], now: float | None = None,
                  capacities: Mapping[str, float | None] | None = None) -> dict[str, SeriesState]:
        """Train the global models (LSTM) once across ``data`` (series_id -> (ts, values)),
        then fit every series. Without a global candidate this is just a loop over ``fit``."""
        self.fit_global(data, now=now)
        caps = capacities or {}
        return {sid: self.fit(sid, ts, vals, now=now, capacity_per_pod=caps.get(sid)) for sid, (ts, vals) in data.items()}

    def fit_global(self, data: Mapping[str, tuple[np.ndarray, np.ndarray]], now: float | None = None) -> None:
        """Train only the global models across ``data``; the per-series fits that follow use them."""
        for g in GLOBAL_MODELS:
            if g in self.candidates:
                try:
                    proto = get_model(g, **self.global_params.get(g, {}))
                    proto.fit_fleet([(v, t) for t, v in data.values()])  # type: ignore[attr-defined]
                    self.prototypes[g] = proto
                except Exception as exc:  # noqa: BLE001 - the others still train
                    log.warning("global model %s failed to train: %s", g, exc)
                    self.prototypes.pop(g, None)
        self.global_fitted_at = self.clock() if now is None else now
        if self.checkpoints is not None and self.prototypes:
            self.checkpoints.save(GLOBAL_ID, {"prototypes": dict(self.prototypes), "fitted_at": self.global_fitted_at})

    def serving_for(self, series_id: str) -> ServingSettings:
        """The settings the serving policy of ``series_id`` is chosen with."""
        return self.serving_by_series.get(series_id, self.serving)

    def has_global(self) -> bool:
        return any(g in self.candidates for g in GLOBAL_MODELS)

    def _candidate_list(self) -> list[str | Model]:
        out: list[str | Model] = []
        for c in self.candidates:
            if c in self.prototypes:
                out.append(self.prototypes[c])
            elif c in GLOBAL_MODELS:
                continue  # not trained on a fleet yet: skipped rather than trained per series
            else:
                out.append(c)
        return out or ["persistence"]

    def fit(self, series_id: str, timestamps: np.ndarray, values: np.ndarray, now: float | None = None,
            capacity_per_pod: float | None = None) -> SeriesState:
        """Select, calibrate and fit the model of one series (falls back to persistence), and
        choose its serving policy (``forecaster.serving``) from the same recent history;
        ``capacity_per_pod`` (e.g. the CPU request in cores) lets the policy count pods."""
        now = self.clock() if now is None else now
        ts = np.asarray(timestamps, dtype="float64")
        vals = np.asarray(values, dtype="float64")
        try:
            sel = select_and_fit(
                vals, ts, candidates=self._candidate_list(), horizon=self.horizon,
                quantiles=self.quantiles, settings=self.selection,
            )
        except ModelError as exc:  # no finite data at all
            sel = None
            reason = f"cannot fit: {exc}"
        if sel is None:
            st = SeriesState(series_id, get_model("persistence"), "persistence", now, None, np.full(self.horizon, np.nan), status="fallback", reason=reason)
        else:
            st = SeriesState(
                series_id,
                sel.model,
                sel.name,
                now,
                None if math.isnan(sel.score) else sel.score,
                sel.mae_by_h,
                status="fallback" if sel.fallback else "ok",
                reason=sel.reason,
                scores=sel.scores,
            )
        st.skill = LiveSkill(self.live_skill, st.model_name)
        tail = (sel.tail_origins, sel.tail_means) if sel is not None else None
        st.policy = policy_from_model(st.model, vals, capacity_per_pod, self.serving_for(series_id), season_length(ts), chosen_at=now, tail=tail)
        self._install(st)
        log.debug("fit %s -> %s (%s); policy %s", series_id, st.model_name, st.reason, st.policy.reason)
        return st

    def detached(self) -> "Trainer":
        """This trainer's settings and global models without its store or fitted states: what an
        engine (``forecaster.engine``) ships to its workers to run ``fit`` there."""
        twin = copy.copy(self)
        twin.store, twin._states, twin.prototypes = None, {}, dict(self.prototypes)
        twin.checkpoints, twin._saved_flags = None, {}  # workers never write checkpoints (nor see the key)
        return twin

    def adopt(self, state: SeriesState) -> None:
        """Install a state fitted elsewhere (``fit_item`` on an engine's worker, or the backtest's
        replay of the trainer: ``forecaster.backtest_live``)."""
        self._install(state)

    def _install(self, st: SeriesState) -> None:
        """Install a new fit. A refit does not clear a live fallback: when the live check of the
        state it replaces had fallen back to persistence, the new model starts in fallback and
        is served once its own live error recovers; the live move weight carries over too
        (``LiveSkill.handover``)."""
        old = self._states.get(st.series_id)
        if old is not None and st.status == "ok" and st.model_name != "persistence":
            st.skill = old.skill.handover(st.model_name, self.live_skill)
        self._checkpoint(st)  # before it is installed: no refresh is updating it while it pickles
        self._states[st.series_id] = st

    # --- checkpoints (forecaster.checkpoint) ------------------------------------------------
    def _checkpoint(self, st: SeriesState) -> None:
        if self.checkpoints is None or not st.fitted:
            return
        if self.checkpoints.save(st.series_id, st, {id(o): n for n, o in shared_objects(self.prototypes).items()}):
            self._saved_flags[st.series_id] = _drift_flags(st)

    def restore(self, series_ids: Sequence[str], prune: bool = True) -> dict[str, int]:
        """Install the checkpointed states of ``series_ids`` (``forecaster.checkpoint.restore``)."""
        return restore(self, series_ids, prune=prune)

    def forget(self, series_id: str) -> None:
        """Drop a series' fitted state (its workload changed or left): it starts over as a new one."""
        self._states.pop(series_id, None)
        self._saved_flags.pop(series_id, None)

    def install_checkpoint(self, series_id: str, st: Any) -> bool:
        """Install a state loaded from a checkpoint; False when it is not a fitted state of it."""
        if not (isinstance(st, SeriesState) and st.series_id == series_id and st.fitted and st.model.fitted_):
            return False
        st.last_forecast = None  # live error is scored from the next forecast, not across the outage
        self._states[series_id] = st
        self._saved_flags[series_id] = _drift_flags(st)
        return True

    def due(self, series_id: str, now: float | None = None) -> bool:
        """True when the series has no model, its model drifted, or its retrain interval passed."""
        now = self.clock() if now is None else now
        st = self._states.get(series_id)
        return st is None or st.needs_retrain or now - st.fitted_at >= self.retrain_interval_seconds

    # --- cheap -----------------------------------------------------------------------------
    def refresh(
        self,
        series_id: str,
        timestamps: np.ndarray,
        values: np.ndarray,
        now: float | None = None,
        meta: Mapping[str, Any] | None = None,
        publish: bool = True,
    ) -> Forecast:
        """Forecast from the latest data with the fitted model (no refit) and publish it."""
        now = self.clock() if now is None else now
        ts = np.asarray(timestamps, dtype="float64")
        vals = np.asarray(values, dtype="float64")
        finite = np.isfinite(vals)
        if not finite.any():
            raise ModelError(f"{series_id}: no finite values in the latest data; nothing to forecast")
        st = self._states.get(series_id)
        if st is None or not st.model.fitted_:
            st = SeriesState(series_id, get_model("persistence"), "persistence", now, None, np.full(self.horizon, np.nan),
                             status="fallback", reason="not trained yet; using persistence until the first fit",
                             needs_retrain=True, fitted=False)
            self._states[series_id] = st
        step = self._step(ts)
        first = int(np.argmax(finite))
        ts_c = ts[first:]
        y = clean_history(vals)
        self._track_live_error(st, ts[finite], vals[finite])
        if self.checkpoints is not None and st.fitted and _drift_flags(st) != self._saved_flags.get(series_id):
            self._checkpoint(st)  # a restart must not forget that this model drifted

        pred, model_mean, (name, status, reason) = self._served_prediction(st, y, ts_c)
        origin = float(ts[-1])
        obs_idx = np.flatnonzero(finite)[-self.observed_points:]
        observed = tuple((float(ts[i]), float(vals[i])) for i in obs_idx)
        fc = make_forecast(
            series_id,
            origin=origin,
            step_seconds=step,
            mean=pred.mean,
            quantiles=pred.quantiles,
            model=name,
            generated_at=now,
            backtest_error=st.backtest_error,
            status=status,
            reason=reason,
            observed=observed,
            meta=dict(meta or {}),
            policy=st.policy.to_dict(),
        )
        st.last_forecast = None if model_mean is None else (origin, step, model_mean, float(y[-1]))
        st.refreshed_at = now
        if publish and self.store is not None:
            self.store.publish(fc)
        return fc

    def _served_prediction(self, st: SeriesState, y: np.ndarray, ts: np.ndarray):
        """The fitted model's forecast, or persistence's when the model fails, drifted, or
        loses to persistence live; the model still forecasts so that it keeps being scored.
        Returns (prediction, the model's own mean or None, (model, status, reason))."""
        label = (st.model_name, st.status, st.reason)
        try:
            st.model.update(y, ts)
            pred = st.model.predict(self.horizon, self.quantiles)
            if not (np.all(np.isfinite(pred.mean)) and all(np.all(np.isfinite(v)) for v in pred.quantiles.values())):
                raise ModelError("non-finite forecast")
            model_mean = np.asarray(pred.mean, dtype="float64")
            why = None
        except Exception as exc:  # noqa: BLE001 - never publish garbage: fall back
            model_mean, why = None, f"{st.model_name} failed to forecast ({exc}); using persistence"
        if why is None and st.drifted:
            why = (f"live error of {st.model_name} is {st.live_error_ratio():.2f}x its backtest error "
                   f"(limit {self.drift_ratio:g}x); using persistence until the retrain")
        if why is None and st.skill.drifted:
            why = st.skill.decision().reason
        if why is not None:
            pred = get_model("persistence").fit(y, ts).predict(self.horizon, self.quantiles)
            label = ("persistence", "fallback", why)
        else:
            pred = _live_weighted(pred, float(y[-1]), st.skill.move_weight(), self.selection.lead_steps)
        return pred, model_mean, label

    def _step(self, ts: np.ndarray) -> float:
        if len(ts) >= 2:
            d = np.diff(ts[-65:])  # the recent grid: a refresh must stay cheap for 10k series
            d = d[d > 0]
            if len(d):
                return float(np.median(d))
        return self.step_seconds

    def _track_live_error(self, st: SeriesState, ts: np.ndarray, vals: np.ndarray) -> None:
        """Compare the previous forecast with what was observed since; flag drift."""
        if st.last_forecast is None or st.status != "ok":
            return
        origin, step, mean, at_origin = st.last_forecast
        k = np.rint((ts - origin) / step).astype(int)
        hit = (k >= 1) & (k <= len(mean)) & (np.abs(ts - (origin + k * step)) < step / 2)
        if not hit.any():
            return
        for v in vals[hit & (k == 1)]:  # the serving horizon: the model vs the last value
            was = st.skill.drifted
            if st.skill.observe(v, mean[0], at_origin) and not was:
                log.info("%s: %s", st.series_id, st.skill.decision().reason)
        mae = st.backtest_mae_by_h
        for kk, v in zip(k[hit], vals[hit]):
            ref = mae[kk - 1] if kk - 1 < len(mae) else np.nan
            if np.isfinite(ref) and ref > 0:
                st.live_ratios.append(abs(v - mean[kk - 1]) / ref)
        ratio = st.live_error_ratio()
        if ratio is not None and len(st.live_ratios) >= self.drift_min_points and ratio > self.drift_ratio:
            if not st.drifted:
                log.info("%s: live error %.2fx backtest; falling back and scheduling a retrain", st.series_id, ratio)
            st.drifted = True
            st.needs_retrain = True

    # --- introspection ---------------------------------------------------------------------
    def status(self, series_id: str) -> dict[str, Any]:
        st = self._states.get(series_id)
        if st is None:
            return {"series_id": series_id, "status": "unknown", "reason": "never fitted or refreshed"}
        status, reason = st.status, st.reason
        if st.drifted:
            status = "fallback"
            reason = f"live error {st.live_error_ratio():.2f}x backtest; retrain scheduled"
        elif st.skill.drifted:
            status, reason = "fallback", st.skill.decision().reason
        return {
            "series_id": series_id,
            "model": st.model_name,
            "status": status,
            "reason": reason,
            "fitted_at": st.fitted_at,
            "refreshed_at": st.refreshed_at,
            "backtest_error": st.backtest_error,
            "live_error_ratio": st.live_error_ratio(),
            "live_error_vs_persistence": st.skill.ratio(),
            "needs_retrain": st.needs_retrain,
            "scores": dict(st.scores),
            "policy": st.policy.to_dict(),
        }

    def series(self) -> list[str]:
        return sorted(self._states)

    def state(self, series_id: str) -> SeriesState | None:
        return self._states.get(series_id)


def _live_weighted(pred, last: float, weight: float, lead_steps: int):
    """``pred`` with its first ``lead_steps`` means at ``last + weight * (mean - last)`` and each
    quantile shifted by the same amount as its step's mean."""
    if weight >= 1.0 or lead_steps <= 0 or not np.isfinite(last):
        return pred
    mean = np.array(pred.mean, dtype="float64")
    k = min(lead_steps, len(mean))
    shift = np.zeros_like(mean)
    shift[:k] = (weight - 1.0) * (mean[:k] - last)
    return replace(pred, mean=mean + shift, quantiles={q: np.asarray(v, dtype="float64") + shift for q, v in pred.quantiles.items()})


def _drift_flags(st: SeriesState) -> tuple[bool, bool, bool]:
    return (st.needs_retrain, st.drifted, st.skill.drifted)


# --- one workload's step -------------------------------------------------------------------


def step_workload(trainer: Trainer, series_id: str, ts: np.ndarray, vals: np.ndarray, now: float,
                  meta: Mapping[str, Any], fit: bool | None = None) -> Forecast:
    """One workload's step of ``foresight train``: retrain when due (choosing the serving
    policy with it), then refresh and publish. ``foresight replay`` calls exactly this."""
    if fit if fit is not None else trainer.due(series_id, now):
        trainer.fit(series_id, ts, vals, now=now, capacity_per_pod=capacity_per_pod(meta))
    return trainer.refresh(series_id, ts, vals, now=now, meta=meta)


def fit_item(trainer: Trainer, item: tuple[str, np.ndarray, np.ndarray, float, float | None]) -> SeriesState | Exception:
    """One fit as an engine's work item: (series_id, ts, values, now, cpu_request_cores) on a
    ``Trainer.detached()`` copy; the state (or the error) goes back to be ``adopt``-ed."""
    sid, ts, vals, now, cap = item
    try:
        return trainer.fit(sid, ts, vals, now=now, capacity_per_pod=cap)
    except Exception as exc:  # noqa: BLE001 - one workload's failure is its own
        return ModelError(f"{sid}: fit failed: {exc}")
