"""The production forecasting pipeline on a simulated clock: what ``foresight train`` would
have published during a replay, and what the adapter would have served from it.

There is no second walk-forward loop here. For every 5-minute sample s of the trace, at the
simulated instant s + delay (the metric pipeline's lag), :class:`ProductionFeed` hands the
last ``history_days`` of samples up to s to ``forecaster.training.step_workload``, the very
function ``train_once`` runs per workload: the production ``Trainer`` retrains when due
(selection, calibration and the serving-policy choice), refreshes (``Model.update``, live
drift tracking and the drift fallback) and publishes into a ``MemoryForecastStore``. The HPA
side reads ``store.latest`` and turns it into the served value with ``forecaster.served``.

The history window is the one ``train_once`` pulls at ``now = s + delay``: the grid points in
[end - history_days, end] with end = floor(now / step) * step = s.

Global models (the LSTM of ``models: [auto, lstm]``) train across a fleet: :func:`fleet_globals`
trains them once on what every replayed series' first fit sees, and each feed's trainer starts
with them (``prototypes``). Production retrains them with the fits (daily by default); the
replay holds them fixed, as the backtest does. A feed given none trains them on its own series
at its first fit (a fleet of one).
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from core.store import Forecast, MemoryForecastStore
from forecaster.config import SourceConfig, TrainingConfig
from forecaster.models import Model
from forecaster.serving import ServingSettings
from forecaster.training import Trainer, step_workload

__all__ = ["PipelineConfig", "ProductionFeed", "fleet_globals"]


@dataclass(frozen=True)
class PipelineConfig:
    """The production settings the replay runs with (defaults = a default deployment)."""

    training: TrainingConfig = field(default_factory=TrainingConfig)
    serving: ServingSettings = field(default_factory=ServingSettings)
    history_days: float = SourceConfig.history_days


class ProductionFeed:
    """Publishes forecasts of one series as the production trainer would, on demand.

    ``advance(t)`` runs every pending trainer step published at or before ``t``;
    ``latest()`` is what a reader of the store sees then.
    """

    def __init__(self, series_id: str, sample_ts: np.ndarray, sample_values: np.ndarray, *, delay_seconds: float,
                 start: float, end: float, capacity_per_pod: float, pipeline: PipelineConfig,
                 step_seconds: float = 300.0, prototypes: Mapping[str, Model] | None = None) -> None:
        self.series_id = series_id
        self.ts = np.asarray(sample_ts, dtype="float64")
        self.values = np.asarray(sample_values, dtype="float64")
        self.delay = float(delay_seconds)
        self.step = float(step_seconds)
        self.window = pipeline.history_days * 86400.0
        self.store = MemoryForecastStore()
        t = pipeline.training
        self.trainer = Trainer(
            self.store, models=t.models, horizon=t.horizon_steps, quantiles=t.quantiles, step_seconds=self.step,
            retrain_interval_seconds=t.retrain_interval_seconds, serving=pipeline.serving, prototypes=prototypes,
        )
        self._train_global = self.trainer.has_global() and not prototypes  # then a fleet of one, at the first fit
        self.meta = {"namespace": "replay", "workload": series_id, "cpu_request_cores": float(capacity_per_pod)}
        # one trainer step per sample whose publication falls in [start - step, end)
        first = int(np.searchsorted(self.ts, start - self.delay - self.step, side="left"))
        last = int(np.searchsorted(self.ts, end - self.delay, side="right"))
        self.origins = np.arange(max(first, 1), last)
        self._next = 0
        self.records: list[tuple[float, float, float]] = []  # origin, 1-step mean, value at origin
        self.fits = 0
        self.models_chosen: list[str] = []
        self.policies: list[dict] = []
        self.published: list[Forecast] = []  # every forecast published so far, in order
        self._pub_times: list[float] = []
        self.fit_cpu_seconds = 0.0  # process CPU of the steps that retrained (fit + that refresh)
        self.refresh_cpu_seconds = 0.0  # and of the other steps (refresh only)

    def advance(self, t: float) -> bool:
        """Run the trainer steps due by ``t``; True when something new was published."""
        moved = False
        while self._next < len(self.origins) and self.ts[self.origins[self._next]] + self.delay <= t:
            self._step(int(self.origins[self._next]))
            self._next += 1
            moved = True
        return moved

    def _history(self, i: int) -> tuple[float, np.ndarray, np.ndarray]:
        """(now, timestamps, values): what ``train_once`` pulls at the step of sample ``i``."""
        now = float(self.ts[i] + self.delay)
        end = float(np.floor(now / self.step) * self.step)
        lo = int(np.searchsorted(self.ts, end - self.window, side="left"))
        hi = int(np.searchsorted(self.ts, end, side="right"))
        return now, self.ts[lo:hi], self.values[lo:hi]

    def first_history(self) -> tuple[np.ndarray, np.ndarray]:
        """The history the first fit sees (what a fleet's global models train on)."""
        return self._history(int(self.origins[0]))[1:] if len(self.origins) else (self.ts[:0], self.values[:0])

    def _step(self, i: int) -> None:
        now, ts, vals = self._history(i)
        if not np.isfinite(vals).any():
            return  # train_once reports "no data" for this workload and publishes nothing
        due = self.trainer.due(self.series_id, now)
        cpu = time.process_time()
        if due and self._train_global:
            self.trainer.fit_global({self.series_id: (ts, vals)}, now=now)
            self._train_global = False
        fc = step_workload(self.trainer, self.series_id, ts, vals, now, self.meta)
        cpu = time.process_time() - cpu
        if due:
            self.fit_cpu_seconds += cpu
        else:
            self.refresh_cpu_seconds += cpu
        self.published.append(self.store.latest(self.series_id))
        self._pub_times.append(now)
        if due:
            self.fits += 1
            st = self.trainer.status(self.series_id)
            self.models_chosen.append(str(st.get("model")))
            self.policies.append(st.get("policy") or {})
        if fc.mean:
            self.records.append((fc.origin, float(fc.mean[0]), float(fc.observed[-1][1]) if fc.observed else np.nan))

    def latest(self) -> Forecast | None:
        return self.store.latest(self.series_id)

    def at(self, t: float) -> Forecast | None:
        """What ``store.latest`` returned at instant ``t`` (advancing the trainer if needed):
        a second mode of the same replay reads the same publications without re-running it."""
        self.advance(t)
        k = bisect.bisect_right(self._pub_times, t) - 1
        return self.published[k] if k >= 0 else None

    def error(self, sample_ts: np.ndarray, sample_values: np.ndarray, from_time: float) -> dict[str, float]:
        """MAE of the published 1-step mean vs the next sample, and of persistence, over the
        forecasts published from ``from_time`` on."""
        if not self.records:
            return {"mae_h1": float("nan"), "mae_persistence_h1": float("nan"), "skill_h1": float("nan")}
        rec = np.asarray(self.records)
        ok = rec[:, 0] + self.delay >= from_time
        idx = np.searchsorted(sample_ts, rec[:, 0] + self.step)
        inside = idx < len(sample_ts)
        actual = np.full(len(rec), np.nan)
        actual[inside] = sample_values[idx[inside]]
        m = ok & np.isfinite(actual) & np.isfinite(rec[:, 2])
        if not m.any():
            return {"mae_h1": float("nan"), "mae_persistence_h1": float("nan"), "skill_h1": float("nan")}
        mae = float(np.mean(np.abs(rec[m, 1] - actual[m])))
        mae_p = float(np.mean(np.abs(rec[m, 2] - actual[m])))
        return {"mae_h1": mae, "mae_persistence_h1": mae_p, "skill_h1": 1 - mae / mae_p if mae_p > 0 else float("nan")}

    def summary(self) -> dict[str, object]:
        """Which models and policies the trainer chose over the replay (for the report)."""
        from collections import Counter

        heads = [p.get("headroom") for p in self.policies if p]  # with headroom states: the largest
        return {
            "fits": self.fits,
            "fit_cpu_seconds": self.fit_cpu_seconds,
            "refresh_cpu_seconds": self.refresh_cpu_seconds,
            "models": dict(Counter(self.models_chosen)),
            "median_headroom": float(np.median(heads)) if heads else float("nan"),
            "persistence_days": sum(1 for p in self.policies if p and p.get("source") == "persistence"),
        }



def fleet_globals(pipeline: PipelineConfig, histories: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, Model]:
    """The global models ``pipeline``'s trainer has among its candidates, trained once across
    ``histories`` (series_id -> (timestamps, values), e.g. each feed's ``first_history``) as
    ``Trainer.fit_global`` trains them; {} when it has none."""
    t = pipeline.training
    trainer = Trainer(None, models=t.models, horizon=t.horizon_steps, quantiles=t.quantiles)
    if not trainer.has_global():
        return {}
    trainer.fit_global(dict(histories))
    return dict(trainer.prototypes)
