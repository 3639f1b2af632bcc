"""Populations (replay/population.py): a daily rhythm is told from bursts on real and made series."""

import numpy as np

from forecaster.frames import series_arrays
from forecaster.sources.csv import read_long_csv
from replay.population import DAILY_RHYTHM_MIN, daily_strength, population
from tests.replay.test_cli import DATA


def test_a_daily_cycle_under_noise_is_a_daily_rhythm_and_noise_alone_is_not():
    rng = np.random.default_rng(0)
    n = 288 * 10
    phase = 2 * np.pi * np.arange(n) / 288
    daily = 10 + 4 * np.sin(phase) + rng.normal(0, 2, n)
    bursty = 10 + rng.normal(0, 2, n) + 8 * (rng.random(n) < 0.05)
    assert daily_strength(daily) > 0.8 and population(daily) == "daily"
    assert daily_strength(bursty) < DAILY_RHYTHM_MIN and population(bursty) == "bursty"
    # a trend is not a rhythm: the one-day moving average takes it
    assert population(np.linspace(0, 100, n) + rng.normal(0, 2, n)) == "bursty"


def test_gaps_and_short_series_do_not_break_the_measure():
    rng = np.random.default_rng(1)
    n = 288 * 5
    y = 10 + 4 * np.sin(2 * np.pi * np.arange(n) / 288) + rng.normal(0, 1, n)
    y[100:400] = np.nan  # a gap longer than an hour
    assert population(y) == "daily"
    assert np.isnan(daily_strength(y[: 288 * 2]))
    assert population(y[: 288 * 2]) == "bursty"  # too short to tell: not claimed as a rhythm


def test_the_bundled_slice_is_classified():
    got = {sid: population(v) for sid, _, v in series_arrays(read_long_csv(DATA))}
    assert got and set(got.values()) <= {"daily", "bursty"}
