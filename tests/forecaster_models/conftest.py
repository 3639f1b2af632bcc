"""Small real slices for the model tests (tests/data/cpu_slice.csv.gz, see ATTRIBUTION.md)."""

from __future__ import annotations

import numpy as np
import pytest

from forecaster.frames import regularize, series_arrays

# tiny settings so the contract runs fast for every registered model
FAST_PARAMS = {
    "lstm": {"epochs": 1, "hidden": 8, "window": 24, "max_windows_per_series": 40, "threads": 1},
    "prophet": {"fit_days": 3},
    "ets": {"fit_days": 3},
}


@pytest.fixture(scope="session")
def slice_arrays(trace_slice):
    """series_id -> (timestamps, values) on the regular 5-minute grid (gaps are NaN)."""
    frame = regularize(trace_slice, 300)
    return {sid: (ts, v) for sid, ts, v in series_arrays(frame)}


@pytest.fixture(scope="session")
def daily_series(slice_arrays):
    """4 days of a VM with a strong daily cycle (azurev1-618849)."""
    ts, v = slice_arrays["azurev1-618849"]
    return ts[-4 * 288 :], v[-4 * 288 :]


@pytest.fixture
def rng():
    return np.random.default_rng(7)
