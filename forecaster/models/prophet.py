"""Prophet (daily seasonality; weekly too when fit_days >= 14), offline and quiet. Fitted on the
last ``fit_days`` (default 7: half the cost of 14, and at 5-60 minutes the weekly term is noise).

Prophet forecasts a function of time, not of the latest values, so a rolling backtest is one
``predict`` over the validation span, and a refresh only moves the forecast timestamps. At
5-60 minutes it usually loses to persistence (kept as a reference and a candidate)."""

from __future__ import annotations

import logging
import warnings

import numpy as np

from forecaster.models.base import Model, ModelError

_QUIET = ("prophet", "prophet.plot", "cmdstanpy", "prophet.models")


def _quiet() -> None:
    for name in _QUIET:
        lg = logging.getLogger(name)
        lg.setLevel(logging.CRITICAL)
        lg.propagate = False
        lg.disabled = True  # cmdstanpy re-adds its INFO handler; disabling sticks


class ProphetModel(Model):
    name = "prophet"
    min_points = 50
    history_points = 1

    def __init__(self, **params):
        super().__init__(**params)
        self.fit_days = float(params.get("fit_days", 7.0))
        self.step_ = float(params.get("step_seconds", 0.0))
        if self.fit_days <= 0:
            raise ModelError(f"prophet.fit_days must be > 0 (got {self.fit_days})")
        self.model_ = None
        self.t0_ = 0.0  # time of index 0 of the data fit() saw
        self.n_seen_ = 0

    def fit(self, y, timestamps=None):
        ts = None if timestamps is None else np.asarray(timestamps, dtype="float64")
        if ts is not None and len(ts) >= 2:
            d = np.diff(ts)
            self.step_ = float(np.median(d[d > 0])) if (d > 0).any() else 300.0
        if not self.step_:
            self.step_ = 86400.0 / (self.season or 288)
        raw = np.asarray(y, dtype="float64")
        finite = np.isfinite(raw)
        first = int(np.argmax(finite)) if finite.any() else 0
        if ts is not None and len(ts) == len(raw):
            self.t0_ = float(ts[first])
        else:
            self.t0_ = 1.7e9  # arbitrary epoch: only the spacing matters without timestamps
        return super().fit(y, None if ts is None else ts[first:])

    def _fit(self, y: np.ndarray) -> None:
        _quiet()
        import pandas as pd
        from prophet import Prophet  # heavy import only here

        _quiet()
        n_fit = min(len(y), int(self.fit_days * 86400.0 / self.step_))
        off = len(y) - n_fit
        t = self.t0_ + (off + np.arange(n_fit)) * self.step_
        df = pd.DataFrame({"ds": pd.to_datetime(t, unit="s"), "y": y[off:]})
        span_days = n_fit * self.step_ / 86400.0
        m = Prophet(
            daily_seasonality=span_days >= 2,
            weekly_seasonality=span_days >= 14,
            yearly_seasonality=False,
            uncertainty_samples=0,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m.fit(df)
        self.model_ = m
        self.n_seen_ = len(y)

    def update(self, y, timestamps=None):
        if not self.fitted_:
            return self.fit(y, timestamps)
        super().update(y, timestamps)
        if timestamps is None:  # without timestamps, y is the fitted series extended
            raw = np.asarray(y, dtype="float64")
            fin = np.isfinite(raw)
            self.n_seen_ = len(raw) - int(np.argmax(fin)) if fin.any() else self.n_seen_
        return self

    def _predict_times(self, t: np.ndarray) -> np.ndarray:
        import pandas as pd

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = self.model_.predict(pd.DataFrame({"ds": pd.to_datetime(t, unit="s")}))
        return out["yhat"].to_numpy(dtype="float64")

    def _mean_from(self, y, h):
        last = self.last_ts_ if self.last_ts_ is not None else self.t0_ + (self.n_seen_ - 1) * self.step_
        return self._predict_times(last + self.step_ * np.arange(1, h + 1))

    def _rolling_means(self, y, origins, h):
        # index i of y is time t0 + i * step (y starts where the fitted data started)
        lo, hi = int(origins.min()) + 1, int(origins.max()) + h
        pred = self._predict_times(self.t0_ + np.arange(lo, hi + 1) * self.step_)
        idx = origins[:, None] + 1 + np.arange(h)[None, :] - lo
        return pred[idx]
