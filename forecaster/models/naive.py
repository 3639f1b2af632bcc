"""Baselines: persistence (last value), seasonal naive (same time one season earlier) and a
moving average of the last ``window`` points. Cheap, hard to beat at 5-60 minutes, and the
fallback for everything else."""

from __future__ import annotations

import numpy as np

from forecaster.models.base import Model


class Persistence(Model):
    name = "persistence"
    history_points = 1

    def _mean_from(self, y: np.ndarray, h: int) -> np.ndarray:
        return np.full(h, y[-1])

    def _rolling_means(self, y, origins, h):
        return np.repeat(y[origins][:, None], h, axis=1)


class SeasonalNaive(Model):
    """y[t + k] = y[t + k - season]; with less than one season of history, the last value."""

    name = "seasonal_naive"

    @property
    def history_points(self) -> int:  # type: ignore[override]
        return max(self.season, 1)

    def _mean_from(self, y: np.ndarray, h: int) -> np.ndarray:
        s = self.season
        n = len(y)
        if n < s:
            return np.full(h, y[-1])
        idx = n - s + (np.arange(h) % s)
        return y[idx]

    def _rolling_means(self, y, origins, h):
        s = self.season
        k = np.arange(h) % s
        idx = origins[:, None] + 1 - s + k[None, :]
        out = y[np.clip(idx, 0, None)]
        short = origins + 1 < s
        if short.any():
            out[short] = y[origins[short]][:, None]
        return out


class MovingAverage(Model):
    """Flat forecast at the mean of the last ``window`` points (default 12 = one hour)."""

    name = "moving_average"

    def __init__(self, **params):
        super().__init__(**params)
        self.window = int(params.get("window", 12))
        if self.window < 1:
            from forecaster.models.base import ModelError

            raise ModelError(f"moving_average.window must be >= 1 (got {self.window})")
        self.history_points = self.window

    def _mean_from(self, y: np.ndarray, h: int) -> np.ndarray:
        return np.full(h, float(np.mean(y[-self.window :])))

    def _rolling_means(self, y, origins, h):
        c = np.concatenate([[0.0], np.cumsum(y)])
        hi = origins + 1
        lo = np.maximum(hi - self.window, 0)
        m = (c[hi] - c[lo]) / (hi - lo)
        return np.repeat(m[:, None], h, axis=1)
