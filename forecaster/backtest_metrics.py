"""Per-series, per-horizon metrics of a walk-forward backtest (``forecaster.evaluation``) and
their median summary across series: MAE, MASE, pinball loss and coverage of each quantile.
Kept apart from the walk itself so the metrics can be read and tested on their own."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from core.store import quantile_key


def pinball(y: np.ndarray, q_pred: np.ndarray, q: float) -> np.ndarray:
    d = y - q_pred
    return np.maximum(q * d, (q - 1) * d)


def metrics_rows(series_id: str, origins: Sequence[Any], quantiles: Sequence[float] = (0.5, 0.9)) -> list[dict[str, Any]]:
    """Per model and horizon: MAE, MASE, pinball and coverage for each quantile (NaN-aware)."""
    if not origins:
        return []
    H = len(origins[0].actual)
    models = list(origins[0].forecasts)
    rows = []
    for m in models:
        A = np.vstack([np.pad(o.actual, (0, H - len(o.actual)), constant_values=np.nan) for o in origins])
        M = np.vstack([o.forecasts[m][0] for o in origins])
        S = np.array([o.scale for o in origins])[:, None]
        err = np.abs(A - M)
        ok = np.isfinite(A)
        for h in range(H):
            sel = ok[:, h]
            if not sel.any():
                continue
            row = {
                "series_id": series_id,
                "model": m,
                "h": h + 1,
                "mae": float(np.mean(err[sel, h])),
                "mase": float(np.mean(err[sel, h] / S[sel, 0])),
            }
            for q in quantiles:
                k = quantile_key(q)
                Q = np.vstack([o.forecasts[m][1][k] for o in origins])
                row[f"pinball_{k}"] = float(np.mean(pinball(A[sel, h], Q[sel, h], q)))
                row[f"coverage_{k}"] = float(np.mean(A[sel, h] <= Q[sel, h]))
            rows.append(row)
    return rows


def summarize(rows_frame, horizons: Sequence[int] = (1, 6, 12)):
    """Median across series per model: MASE at chosen horizons, mean MASE over 1..H, skill
    vs persistence (1 - MAE/MAE_persistence) overall and per horizon, p90 coverage."""
    import pandas as pd

    df = rows_frame
    per_series = df.groupby(["model", "series_id"]).agg(mean_mase=("mase", "mean"), mean_mae=("mae", "mean"))
    out = {}
    pers = None
    if "persistence" in df["model"].unique():
        pers = df[df.model == "persistence"].set_index(["series_id", "h"])["mae"]
        pers_mean = per_series.loc["persistence", "mean_mae"]
    for m, g in df.groupby("model"):
        ps = per_series.loc[m]
        d: dict[str, Any] = {
            "series": int(len(ps)),
            "mean_mase_median": float(ps["mean_mase"].median()),
            "mean_mase_mean": float(ps["mean_mase"].mean()),
        }
        for h in horizons:
            gh = g[g.h == h]
            d[f"mase_h{h}_median"] = float(gh["mase"].median()) if len(gh) else math.nan
        if "coverage_p90" in g:
            d["coverage_p90_median"] = float(g.groupby("series_id")["coverage_p90"].mean().median())
            d["pinball_p90_median"] = float(g.groupby("series_id")["pinball_p90"].mean().median())
        if pers is not None:
            skill = 1 - ps["mean_mae"] / pers_mean.reindex(ps.index)
            skill = skill.replace([np.inf, -np.inf], np.nan)
            d["skill_median"] = float(skill.median())
            d["wins_vs_persistence"] = float((skill > 0).mean())
            gi = g.set_index(["series_id", "h"])["mae"]
            for h in horizons:
                sk = 1 - gi.xs(h, level="h") / pers.xs(h, level="h").reindex(gi.xs(h, level="h").index)
                d[f"skill_h{h}_median"] = float(sk.replace([np.inf, -np.inf], np.nan).median())
        out[m] = d
    return pd.DataFrame(out).T
