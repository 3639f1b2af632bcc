"""The long frame: ``series_id, timestamp, value`` at every boundary between packages.

``timestamp`` is a tz-aware UTC pandas datetime column, ``value`` is float (NaN marks a gap),
``series_id`` is str. Models never see frames: they get numpy arrays from ``series_arrays``.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pandas as pd

COLUMNS = ["series_id", "timestamp", "value"]


class FrameError(ValueError):
    """A frame does not have the canonical long shape."""


def empty_frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "series_id": pd.Series([], dtype="object"),
            "timestamp": pd.Series([], dtype="datetime64[ns, UTC]"),
            "value": pd.Series([], dtype="float64"),
        }
    )


def normalize(frame: pd.DataFrame) -> pd.DataFrame:
    """Check columns, coerce types (UTC timestamps, float values, Inf -> NaN), sort."""
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise FrameError(
            f"frame is missing column(s) {missing}; the long format is series_id,timestamp,value"
        )
    out = frame[COLUMNS].copy()
    out["series_id"] = out["series_id"].astype(str)
    out["timestamp"] = pd.to_datetime(out["timestamp"], utc=True)
    out["value"] = pd.to_numeric(out["value"], errors="coerce").astype("float64")
    out.loc[~np.isfinite(out["value"].to_numpy()), "value"] = np.nan
    out = out.sort_values(["series_id", "timestamp"], kind="stable")
    out = out.drop_duplicates(["series_id", "timestamp"], keep="last")
    return out.reset_index(drop=True)


def regularize(frame: pd.DataFrame, step_seconds: float) -> pd.DataFrame:
    """Put every series on one regular grid of ``step_seconds`` (gaps become NaN rows)."""
    frame = normalize(frame)
    parts = []
    step = pd.Timedelta(seconds=step_seconds)
    for sid, g in frame.groupby("series_id", sort=True):
        if g.empty:
            continue
        start = g["timestamp"].iloc[0]
        end = g["timestamp"].iloc[-1]
        grid = pd.date_range(start, end, freq=step, tz="UTC")
        s = g.set_index("timestamp")["value"].reindex(grid)
        parts.append(pd.DataFrame({"series_id": sid, "timestamp": grid, "value": s.to_numpy()}))
    if not parts:
        return empty_frame()
    return pd.concat(parts, ignore_index=True)


def series_arrays(frame: pd.DataFrame) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    """Yield ``(series_id, unix_seconds float64 array, values float64 array)`` per series."""
    for sid, g in frame.groupby("series_id", sort=True):
        ts = g["timestamp"].astype("int64").to_numpy() / 1e9
        yield str(sid), ts.astype("float64"), g["value"].to_numpy(dtype="float64")


def infer_step_seconds(ts: np.ndarray) -> float:
    """The most common spacing of a timestamp array (seconds)."""
    if len(ts) < 2:
        raise FrameError("need at least two timestamps to infer the step")
    d = np.diff(ts)
    d = d[d > 0]
    vals, counts = np.unique(np.round(d, 3), return_counts=True)
    return float(vals[np.argmax(counts)])
