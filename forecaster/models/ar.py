"""Autoregression on recent points plus the seasonal lag (default lags 1..12 and 288 = one day).

Estimated by conditional OLS, the estimator of statsmodels ``AutoReg`` (the tests check that the
two agree); forecasting is a plain numpy recursion with the fitted coefficients, vectorised over
origins, so a refresh or a rolling backtest never refits. ``transform="log"`` fits on
log(y + c) (c = 10% of the mean level), which tames bursty CPU series; forecasts are transformed
back (a median forecast).
"""

from __future__ import annotations

import numpy as np

from forecaster.models.base import Model, ModelError


def ols_autoreg(z: np.ndarray, lag_list: list[int]) -> np.ndarray:
    """Conditional OLS of z[t] on 1 and z[t - lag] for each lag: the estimator of statsmodels
    ``AutoReg(z, lags=lag_list, trend="c").fit()`` (same design, same answer; checked in the
    tests), built directly from the few lag columns instead of a full lag matrix, which is
    ~100x faster with a seasonal lag of 288."""
    L = max(lag_list)
    n = len(z)
    X = np.empty((n - L, len(lag_list) + 1))
    X[:, 0] = 1.0
    for j, lag in enumerate(lag_list):
        X[:, j + 1] = z[L - lag : n - lag]
    target = z[L:]
    xtx = X.T @ X
    xty = X.T @ target
    try:  # normal equations: 100x faster than lstsq's SVD at this size, same answer
        params = np.linalg.solve(xtx + np.eye(len(xtx)) * 1e-12 * np.trace(xtx), xty)
    except np.linalg.LinAlgError:
        params = np.linalg.lstsq(X, target, rcond=None)[0]
    if not np.all(np.isfinite(params)):
        params = np.linalg.lstsq(X, target, rcond=None)[0]
    return params


class AR(Model):
    name = "ar"
    min_points = 40

    def __init__(self, **params):
        super().__init__(**params)
        self.lags = int(params.get("lags", 12))
        self.seasonal = bool(params.get("seasonal", True))
        self.transform = str(params.get("transform", "none"))
        if self.lags < 1:
            raise ModelError(f"ar.lags must be >= 1 (got {self.lags})")
        if self.transform not in ("none", "log"):
            raise ModelError(f"ar.transform must be 'none' or 'log' (got {self.transform!r})")
        self.lag_list_: list[int] = []
        self.coef_: np.ndarray = np.zeros(0)
        self.const_ = 0.0
        self.shift_ = 0.0
        self.use_log_ = False

    @property
    def history_points(self) -> int:  # type: ignore[override]
        return max(self.lag_list_ or [self.lags, self.season])

    def _fwd(self, y):
        return np.log(y + self.shift_) if self.use_log_ else y

    def _back(self, z):
        return np.exp(np.minimum(z, 50.0)) - self.shift_ if self.use_log_ else z

    def _fit(self, y: np.ndarray) -> None:
        n = len(y)
        lags = min(self.lags, max(1, n // 4))
        lag_list = list(range(1, lags + 1))
        if self.seasonal and self.season > lags and n >= 2 * self.season + 50:
            lag_list.append(self.season)
        self.use_log_ = self.transform == "log" and bool(np.min(y) >= 0)
        level = float(np.mean(np.abs(y)))
        self.shift_ = max(0.1 * level, 1e-6)
        z = self._fwd(y)
        if np.ptp(z) == 0:  # constant: nothing to estimate
            self.lag_list_, self.coef_, self.const_ = [1], np.array([1.0]), 0.0
            return
        params = ols_autoreg(z, lag_list)
        if not np.all(np.isfinite(params)):
            raise ModelError("ar: non-finite coefficients")
        self.const_ = float(params[0])
        self.coef_ = params[1:]
        self.lag_list_ = lag_list

    def _recurse(self, hist: np.ndarray, h: int) -> np.ndarray:
        """hist: (n_origins, L) in the model scale, last column = latest point."""
        L = hist.shape[1]
        buf = np.concatenate([hist, np.zeros((hist.shape[0], h))], axis=1)
        lags = np.asarray(self.lag_list_)
        for k in range(h):
            pos = L + k
            buf[:, pos] = self.const_ + buf[:, pos - lags] @ self.coef_
        return buf[:, L:]

    def _mean_from(self, y: np.ndarray, h: int) -> np.ndarray:
        return self._rolling_means(y, np.array([len(y) - 1]), h)[0]

    def _rolling_means(self, y, origins, h):
        L = max(self.lag_list_)
        idx = origins[:, None] - L + 1 + np.arange(L)[None, :]
        hist = y[np.clip(idx, 0, None)]
        if (idx < 0).any():  # not enough history for the longest lag: pad with the first point
            hist = np.where(idx < 0, y[0], hist)
        z = self._recurse(self._fwd(hist), h)
        return self._back(z)
