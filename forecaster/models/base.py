"""The model seam: one narrow protocol every forecasting model follows.

A model is a configured prototype (``get_model("ar", transform="log")``); ``new()`` clones the
configuration without fitted state, so one prototype serves many series. Fitted state ends in
``_``. Models see numpy arrays only (values on a regular grid, NaN = gap), never frames.

    m = get_model("ar").fit(y, timestamps)      # heavy: estimate parameters
    m.update(y_latest, timestamps_latest)        # cheap: new data, same parameters
    p = m.predict(12, quantiles=(0.5, 0.9))      # Prediction(mean, {"p50": ..., "p90": ...})

Quantiles: every model gets a default spread from the empirical h-step changes of its own
history; ``calibrate(offsets)`` replaces it with split-conformal offsets measured on backtest
residuals per horizon (see ``forecaster.selection``). A prediction never contains NaN/Inf:
if a model produces one, the affected points fall back to the last observed value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from core.errors import UserError
from core.store import quantile_key

__all__ = [
    "Model",
    "ModelError",
    "Prediction",
    "clean_history",
    "season_length",
    "DEFAULT_SEASON",
]

DEFAULT_SEASON = 288  # one day of 5-minute points
DAY_SECONDS = 86400.0


class ModelError(UserError):
    """A model cannot fit or forecast this input (the caller falls back to persistence)."""


@dataclass(frozen=True)
class Prediction:
    """``mean[i]`` is the forecast ``i + 1`` steps after the last observation; ``quantiles`` is
    keyed by ``quantile_key(q)`` (``"p50"``, ``"p90"``) with arrays of the same length."""

    mean: np.ndarray
    quantiles: Mapping[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.mean)
        for k, v in self.quantiles.items():
            if len(v) != n:
                raise ValueError(f"quantile {k} has {len(v)} points, mean has {n}")


def clean_history(y: Iterable[float]) -> np.ndarray:
    """Float64 copy with Inf -> NaN, leading gaps dropped, interior gaps linearly interpolated
    and trailing gaps carried forward. Raises ModelError when nothing finite is left."""
    a = np.asarray(y, dtype="float64").ravel().copy()
    a[~np.isfinite(a)] = np.nan
    ok = np.isfinite(a)
    if not ok.any():
        raise ModelError("the series has no finite values to fit")
    first = int(np.argmax(ok))
    a = a[first:]
    ok = ok[first:]
    if not ok.all():
        idx = np.arange(len(a))
        a = np.interp(idx, idx[ok], a[ok])  # also carries the last value forward
    return a


def season_length(timestamps: np.ndarray | None, default: int = DEFAULT_SEASON) -> int:
    """Points per day from the grid spacing (300 s -> 288); ``default`` without timestamps."""
    if timestamps is None or len(timestamps) < 2:
        return default
    d = np.diff(np.asarray(timestamps, dtype="float64"))
    d = d[d > 0]
    if not len(d):
        return default
    step = float(np.median(d))
    return max(1, int(round(DAY_SECONDS / step)))


def _pinball_offsets(y: np.ndarray, h: int, quantiles: Sequence[float], max_points: int = 4032) -> dict[str, np.ndarray]:
    """Default spread: quantiles of the h-step change y[t+k]-y[t], centred on its median."""
    y = y[-max_points:]
    out = {quantile_key(q): np.zeros(h) for q in quantiles}
    if len(y) < 3:
        return out
    for k in range(1, h + 1):
        if len(y) <= k + 1:
            d = np.diff(y)
        else:
            d = y[k:] - y[:-k]
        med = np.median(d)
        for q in quantiles:
            out[quantile_key(q)][k - 1] = 0.0 if q == 0.5 else float(np.quantile(d, q) - med)
    return out


class Model:
    """Base class. Subclasses set ``name`` and ``min_points`` and implement ``_fit`` and
    ``_mean_from`` (forecast the mean from the end of a cleaned history with the fitted
    parameters fixed). ``_rolling_means`` may be overridden with a vectorised version."""

    name = "base"
    #: below this many cleaned points the model forecasts like persistence (and says so)
    min_points = 1
    #: how many trailing points ``_mean_from`` needs (None = all)
    history_points: int | None = None

    def __init__(self, **params: Any) -> None:
        self.params = dict(params)
        self.season = int(params.get("season") or 0)  # 0 = from timestamps, else 288
        self.fitted_ = False
        self.degraded_: str = ""
        self.offsets_: dict[str, np.ndarray] | None = None
        self.calibrated_ = False
        self.bias_: np.ndarray | None = None  # per-horizon shift of the point forecast
        self.nonneg_ = True
        self.hist_: np.ndarray = np.zeros(0)
        self.last_ts_: float | None = None

    # --- protocol ---------------------------------------------------------------------
    def new(self) -> "Model":
        """A fresh unfitted clone with the same configuration."""
        clone = type(self)(**self.params)
        clone.name = self.name
        return clone

    def fit(self, y: Iterable[float], timestamps: np.ndarray | None = None) -> "Model":
        y = clean_history(y)
        if not self.season:
            self.season = season_length(timestamps)
        self.nonneg_ = bool(np.min(y) >= 0)
        self.degraded_ = ""
        self.offsets_ = None
        self.calibrated_ = False
        self.bias_ = None
        if len(y) < self.min_points:
            self.degraded_ = (
                f"{self.name}: {len(y)} points < {self.min_points} needed; forecasting the last value"
            )
        else:
            try:
                self._fit(y)
            except ModelError:
                raise
            except Exception as exc:  # numerical trouble inside a library
                raise ModelError(f"{self.name} failed to fit: {exc.__class__.__name__}: {exc}") from exc
        self.fitted_ = True
        self._remember(y, timestamps)
        return self

    def update(self, y: Iterable[float], timestamps: np.ndarray | None = None) -> "Model":
        """Take the latest history (same series, possibly shifted/extended) without refitting."""
        if not self.fitted_:
            return self.fit(y, timestamps)
        y = clean_history(y)
        self._remember(y, timestamps)
        return self

    def predict(self, h: int, quantiles: Sequence[float] = (0.5, 0.9)) -> Prediction:
        if not self.fitted_:
            raise ModelError(f"{self.name}: predict() called before fit()")
        if h < 1:
            raise ModelError(f"horizon must be >= 1 (got {h})")
        mean = self._safe_mean(self.hist_, h)
        if self.bias_ is not None and len(self.bias_):
            b = np.asarray(self.bias_, dtype="float64")[:h]
            b = np.concatenate([b, np.full(h - len(b), b[-1])]) if len(b) < h else b
            mean = self._sanitize_block((mean + np.where(np.isfinite(b), b, 0.0))[None, :], mean[-1:])[0]
        return Prediction(mean=mean, quantiles=self._quantiles(mean, h, quantiles))

    def set_bias(self, bias: Sequence[float] | None) -> "Model":
        """Shift the point forecast by ``bias[h-1]`` at each horizon (e.g. the median
        validation residual: turns a mean-like forecast into a median one, which is what
        absolute error rewards)."""
        self.bias_ = None if bias is None else np.asarray(bias, dtype="float64")
        return self

    def calibrate(self, offsets: Mapping[str, Sequence[float]]) -> "Model":
        """Use these per-horizon quantile offsets (added to the mean) from now on."""
        self.offsets_ = {k: np.asarray(v, dtype="float64") for k, v in offsets.items()}
        self.calibrated_ = True
        return self

    def rolling_means(self, y: np.ndarray, origins: np.ndarray, h: int) -> np.ndarray:
        """Mean forecasts (len(origins), h) made at each origin index ``o`` from ``y[:o+1]``
        with the fitted parameters (no refit): a cheap pseudo-out-of-sample backtest."""
        y = np.asarray(y, dtype="float64")
        if self.degraded_:
            return np.repeat(y[np.asarray(origins)][:, None], h, axis=1)
        out = self._rolling_means(y, np.asarray(origins, dtype=int), h)
        return self._sanitize_block(out, y[np.asarray(origins)])

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}({args})"

    # --- for subclasses -----------------------------------------------------------------
    def _fit(self, y: np.ndarray) -> None:  # pragma: no cover - trivial default
        pass

    def _mean_from(self, y: np.ndarray, h: int) -> np.ndarray:
        raise NotImplementedError

    def _rolling_means(self, y: np.ndarray, origins: np.ndarray, h: int) -> np.ndarray:
        return np.vstack([self._mean_from(y[: o + 1], h) for o in origins])

    # --- helpers ------------------------------------------------------------------------
    def _remember(self, y: np.ndarray, timestamps: np.ndarray | None) -> None:
        keep = self.history_points
        self.hist_ = y if keep is None else y[-max(keep, 1):]
        if timestamps is not None and len(timestamps):
            self.last_ts_ = float(np.asarray(timestamps, dtype="float64")[-1])
        if self.offsets_ is None or not self.calibrated_:
            self._default_offsets_src = y[-4032:]

    def _safe_mean(self, y: np.ndarray, h: int) -> np.ndarray:
        last = float(y[-1])
        if self.degraded_:
            mean = np.full(h, last)
        else:
            try:
                mean = np.asarray(self._mean_from(y, h), dtype="float64").ravel()[:h]
            except Exception:  # noqa: BLE001 - a model that breaks at forecast time forecasts the last value
                mean = np.full(h, last)
            if len(mean) < h:
                mean = np.concatenate([mean, np.full(h - len(mean), mean[-1] if len(mean) else last)])
        return self._sanitize_block(mean[None, :], np.array([last]))[0]

    def _sanitize_block(self, block: np.ndarray, last: np.ndarray) -> np.ndarray:
        block = np.array(block, dtype="float64")
        bad = ~np.isfinite(block)
        if bad.any():
            block[bad] = np.broadcast_to(last[:, None], block.shape)[bad]
        # a wildly exploding forecast (unstable recursion) is as bad as NaN
        lim = 1e9
        np.clip(block, -lim, lim, out=block)
        if self.nonneg_:
            np.maximum(block, 0.0, out=block)
        return block

    def _quantiles(self, mean: np.ndarray, h: int, quantiles: Sequence[float]) -> dict[str, np.ndarray]:
        qs = sorted(float(q) for q in quantiles)
        for q in qs:
            if not 0 < q < 1:
                raise ModelError(f"quantile levels must be in (0, 1), got {q}")
        keys = [quantile_key(q) for q in qs]
        if self.offsets_ is not None and all(k in self.offsets_ for k in keys):
            offs = self.offsets_
        else:
            offs = _pinball_offsets(getattr(self, "_default_offsets_src", self.hist_), h, qs)
            if not self.calibrated_:
                self.offsets_ = offs
        rows = []
        for k in keys:
            o = np.asarray(offs[k], dtype="float64")
            if len(o) < h:
                o = np.concatenate([o, np.full(h - len(o), o[-1] if len(o) else 0.0)])
            o = np.where(np.isfinite(o[:h]), o[:h], 0.0)
            rows.append(mean + o)
        mat = np.sort(np.vstack(rows), axis=0) if rows else np.zeros((0, h))
        if self.nonneg_:
            np.maximum(mat, 0.0, out=mat)
        return {k: mat[i] for i, k in enumerate(keys)}
