"""A scaling-oriented forecaster built on the forecaster's Model protocol (a plug-in, registered
with ``forecaster.models.registry.register_model``; nothing in forecaster/ is changed).

``recurrence``: many real CPU series repeat their jumps at the same minute of the hour or of
the day (cron jobs, batch windows); a linear AR dilutes that into a small lag coefficient.
This model forecasts, for each step k ahead of origin o, the upper envelope

    max( base mean (AR by default),
         y[o] + agg_j ( y[o + k - P*j] - y[o - P*j] )  for j = 1..J, each period P )

i.e. "the rise that followed the same moment one, two, ... periods ago", aggregated with the
median (or max) over the J previous periods. Only data up to the origin is used (P*j >= k).
It is an upper forecast for scaling (the mean is biased up on purpose); quantiles are the
base class's empirical spread around it.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from forecaster.models.base import Model, ModelError

__all__ = ["Recurrence", "register"]


class Recurrence(Model):
    name = "recurrence"
    min_points = 40

    def __init__(self, **params):
        super().__init__(**params)
        self.base = str(params.get("base", "ar"))
        self.periods: Sequence[int] = tuple(int(p) for p in params.get("periods", (12, 288)))
        self.lookback = int(params.get("lookback", 3))
        self.agg = str(params.get("agg", "median"))
        if self.agg not in ("median", "max", "mean"):
            raise ModelError(f"recurrence.agg {self.agg!r} must be median, max or mean")
        if self.lookback < 1 or not self.periods or min(self.periods) < 1:
            raise ModelError("recurrence.lookback and periods must be >= 1")
        self.base_: Model | None = None

    def new(self) -> "Recurrence":
        clone = type(self)(**self.params)
        clone.name = self.name
        return clone

    @property
    def history_points(self) -> int:  # type: ignore[override]
        need = max(self.periods) * self.lookback + 1
        if self.base_ is not None and self.base_.history_points:
            need = max(need, self.base_.history_points)
        return need

    def _fit(self, y: np.ndarray) -> None:
        from forecaster.models import get_model

        self.base_ = get_model(self.base, season=self.season).fit(y)

    def _envelope(self, y: np.ndarray, origins: np.ndarray, h: int) -> np.ndarray:
        ks = np.arange(1, h + 1)
        best = np.full((len(origins), h), -np.inf)
        for P in self.periods:
            rises = []
            for j in range(1, self.lookback + 1):
                a = origins[:, None] + ks[None, :] - P * j  # same moment j periods ago
                b = origins - P * j
                ok = (b >= 0)[:, None] & (a >= 0) & (a <= origins[:, None])
                r = np.where(ok, y[np.clip(a, 0, None)] - y[np.clip(b, 0, None)][:, None], np.nan)
                rises.append(r)
            R = np.stack(rises)
            with np.errstate(all="ignore"):
                if self.agg == "median":
                    agg = np.nanmedian(R, axis=0) if np.isnan(R).any() else np.median(R, axis=0)
                elif self.agg == "max":
                    agg = np.nanmax(R, axis=0) if np.isnan(R).any() else R.max(axis=0)
                else:
                    agg = np.nanmean(R, axis=0)
            agg = np.where(np.isfinite(agg), agg, -np.inf)
            best = np.maximum(best, y[origins][:, None] + agg)
        return best

    def _rolling_means(self, y, origins, h):
        assert self.base_ is not None
        base = self.base_.rolling_means(y, origins, h)
        return np.maximum(base, self._envelope(y, origins, h))

    def _mean_from(self, y: np.ndarray, h: int) -> np.ndarray:
        return self._rolling_means(y, np.array([len(y) - 1]), h)[0]


def register() -> None:
    """Make ``recurrence`` (and a few configurations) available to ``get_model``."""
    from forecaster.models.registry import available_models, register_model

    if "recurrence" not in available_models():
        register_model("recurrence", Recurrence)
