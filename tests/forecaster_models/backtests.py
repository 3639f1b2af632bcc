"""One series' walk-forward backtest through the public runner (``run_backtest``), for tests
that look at the forecasts at every origin."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np
import pandas as pd

from forecaster.evaluation import BacktestSettings, OriginForecasts, run_backtest


def backtest(series_id: str, timestamps: np.ndarray, values: np.ndarray, models: Sequence[str],
             settings: BacktestSettings = BacktestSettings(), auto: bool = True,
             candidates: Sequence[str] | None = None) -> list[OriginForecasts]:
    """The forecasts at every origin of one series; ``candidates``: auto's (default: the settings')."""
    if candidates is not None:
        settings = replace(settings, selection=replace(settings.selection, candidates=tuple(candidates)))
    frame = pd.DataFrame({"series_id": series_id, "timestamp": pd.to_datetime(np.asarray(timestamps), unit="s", utc=True),
                          "value": np.asarray(values, dtype="float64")})
    run = run_backtest(frame, [*models, "auto"] if auto else list(models), settings, progress=False)
    return run.forecasts[series_id]
