"""Holt-Winters (additive, damped trend, additive daily season) with heuristic initialisation.

Parameters come from statsmodels ``ExponentialSmoothing`` (imported only here), fitted on the
last ``fit_days`` of history (heuristic init is ~3x faster than "estimated"). Filtering and
forecasting are a small recursion run here, so a refresh only advances the state over the new
points and a rolling backtest never refits. Needs two seasons for the seasonal part; with less
it drops the season (Holt's damped trend)."""

from __future__ import annotations

import warnings

import numpy as np

from forecaster.models.base import Model, ModelError


class ETS(Model):
    name = "ets"
    min_points = 20
    history_points = 1

    def __init__(self, **params):
        super().__init__(**params)
        self.fit_days = float(params.get("fit_days", 5.0))
        self.damped = bool(params.get("damped", True))
        if self.fit_days <= 0:
            raise ModelError(f"ets.fit_days must be > 0 (got {self.fit_days})")
        self.state_: tuple[float, float, np.ndarray] | None = None  # level, trend, last m seasonals
        self.n_seen_ = 0
        self.m_ = 0

    def _fit(self, y: np.ndarray) -> None:
        from statsmodels.tsa.holtwinters import ExponentialSmoothing  # heavy import only here

        m = self.season
        z = y[-int(self.fit_days * m) :] if m > 1 else y
        seasonal = m > 1 and len(z) >= 2 * m + 10
        if not seasonal and len(y) >= 2 * m + 10:  # fit_days shorter than two seasons
            z, seasonal = y[-(2 * m + 10) :], True
        if np.ptp(z) == 0:
            self.alpha_, self.beta_, self.gamma_, self.phi_ = 0.5, 0.0, 0.0, 1.0
            self.m_ = 0
            self.state_ = (float(z[-1]), 0.0, np.zeros(1))
            self.n_seen_ = len(y)
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = ExponentialSmoothing(
                z,
                trend="add",
                damped_trend=self.damped,
                seasonal="add" if seasonal else None,
                seasonal_periods=m if seasonal else None,
                initialization_method="heuristic",
            ).fit(use_brute=False)  # the brute-force start search costs 2-4x for the same fit
        p = res.params
        self.alpha_ = float(p["smoothing_level"])
        self.beta_ = float(np.nan_to_num(p.get("smoothing_trend", 0.0)))
        self.gamma_ = float(np.nan_to_num(p.get("smoothing_seasonal", 0.0))) if seasonal else 0.0
        self.phi_ = float(np.nan_to_num(p.get("damping_trend", 1.0), nan=1.0)) if self.damped else 1.0
        self.m_ = m if seasonal else 0
        init_s = np.asarray(p["initial_seasons"], dtype="float64") if seasonal else np.zeros(1)
        state = (float(p["initial_level"]), float(np.nan_to_num(p.get("initial_trend", 0.0))), init_s.copy())
        self.state_ = self._advance(state, z)
        for v in self.state_[:2]:
            if not np.isfinite(v):
                raise ModelError("ets: non-finite state after filtering")
        self.n_seen_ = len(y)

    def _advance(self, state, new: np.ndarray, record: bool = False):
        """Run the smoothing recursion over ``new``; optionally record the state after each."""
        a, b, g, phi = self.alpha_, self.beta_, self.gamma_, self.phi_
        level, trend, season = state
        season = season.copy()
        m = len(season) if self.m_ else 0
        hist = []
        for v in new:
            s_old = season[0] if m else 0.0
            prev = level + phi * trend
            level = a * (v - s_old) + (1 - a) * prev
            trend = b * (level - (prev - phi * trend)) + (1 - b) * phi * trend
            if m:
                s_new = g * (v - prev) + (1 - g) * s_old
                season = np.roll(season, -1)
                season[-1] = s_new
            if record:
                hist.append((level, trend, season.copy() if m else season))
        return hist if record else (level, trend, season)

    def _forecast(self, state, h: int) -> np.ndarray:
        level, trend, season = state
        phi = self.phi_
        k = np.arange(1, h + 1)
        damp = np.cumsum(phi ** k) if phi != 1.0 else k.astype(float)
        s = season[(k - 1) % len(season)] if self.m_ else 0.0
        return level + damp * trend + s

    def update(self, y, timestamps=None):
        if not self.fitted_:
            return self.fit(y, timestamps)
        from forecaster.models.base import clean_history

        yc = clean_history(y)
        ts = None if timestamps is None else np.asarray(timestamps, dtype="float64")
        if ts is not None and self.last_ts_ is not None and len(ts) == len(yc):
            new = yc[ts > self.last_ts_]
        else:  # no timestamps: y extends what was seen
            new = yc[self.n_seen_ :] if len(yc) > self.n_seen_ else yc[:0]
        if self.state_ is not None and len(new):
            self.state_ = self._advance(self.state_, new)
        self.n_seen_ = len(yc)
        self._remember(yc, ts)
        return self

    def _mean_from(self, y, h):
        return self._forecast(self.state_, h)

    def _rolling_means(self, y, origins, h):
        # states after each point following the fit part (y[:n_seen_] is what fit saw)
        start = self.n_seen_
        top = int(origins.max())
        if top < start - 1:
            raise ModelError("ets: rolling origins before the end of the fitted data")
        states = self._advance(self.state_, y[start : top + 1], record=True)
        out = np.empty((len(origins), h))
        for i, o in enumerate(origins):
            st = self.state_ if o == start - 1 else states[o - start]
            out[i] = self._forecast(st, h)
        return out
