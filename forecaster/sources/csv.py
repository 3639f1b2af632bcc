"""CSV source for the canonical long format ``series_id,timestamp,value`` (optionally .gz).

Used by the embedded default (bundled traces) and the benchmarks. Timestamps are ISO-8601
(UTC assumed when no offset is given) or Unix seconds; empty values are gaps (NaN).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from forecaster.frames import COLUMNS, normalize
from forecaster.sources.base import SourceError


def read_long_csv(path: str | Path) -> pd.DataFrame:
    path = Path(path)
    if not path.exists():
        raise SourceError(f"{path}: no such file; give a CSV in the long format series_id,timestamp,value")
    try:
        df = pd.read_csv(path, dtype={"series_id": str})
    except Exception as exc:  # pandas raises many types
        raise SourceError(f"{path}: cannot parse as CSV: {exc}") from exc
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise SourceError(
            f"{path}: missing column(s) {missing}; the header must be series_id,timestamp,value"
        )
    ts = df["timestamp"]
    if pd.api.types.is_numeric_dtype(ts):
        df["timestamp"] = pd.to_datetime(ts, unit="s", utc=True)
    else:
        try:
            df["timestamp"] = pd.to_datetime(ts, utc=True, format="ISO8601")
        except (ValueError, TypeError) as exc:
            raise SourceError(f"{path}: column timestamp must be ISO-8601 or Unix seconds ({exc})") from exc
    return normalize(df)


def write_long_csv(frame: pd.DataFrame, path: str | Path) -> None:
    out = normalize(frame).copy()
    out["timestamp"] = out["timestamp"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    out.to_csv(path, index=False, float_format="%.10g", na_rep="")


class CsvSource:
    """``HistorySource`` over a long CSV. ``query`` selects series: ``*`` (all), an exact
    series_id, or several ids separated by ``|``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._frame: pd.DataFrame | None = None

    def load(self) -> pd.DataFrame:
        if self._frame is None:
            self._frame = read_long_csv(self.path)
        return self._frame

    def series_ids(self) -> list[str]:
        return sorted(self.load()["series_id"].unique())

    def fetch(self, query: str, start: float, end: float, step_seconds: float, series_id: str | None = None) -> pd.DataFrame:
        df = self.load()
        if query not in ("*", ""):
            wanted = set(query.split("|"))
            unknown = wanted - set(df["series_id"].unique())
            if unknown:
                raise SourceError(f"{self.path}: unknown series {sorted(unknown)}; known: {self.series_ids()[:10]}...")
            df = df[df["series_id"].isin(wanted)]
        t = df["timestamp"].astype("int64").to_numpy() / 1e9
        df = df[(t >= start) & (t <= end)]
        if series_id is not None and df["series_id"].nunique() == 1:
            df = df.assign(series_id=series_id)
        return df.reset_index(drop=True)
