"""Forecast staleness is judged on the reader's clock: a trainer whose clock is minutes off
neither switches predictive scaling off (behind) nor keeps a dead trainer's forecasts fresh
(ahead). core/receipt.py re-stamps each version when the adapter first reads it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from adapter.settings import CacheSettings
from adapter.state import ForecastCache
from core.receipt import ReceiptTimes
from core.store import MemoryForecastStore
from forecaster.served import MetricSettings, NoData, served_cores
from tests.adapter.helpers import sample_forecast

T = 1_800_000_000.0
SID = "shop/checkout"
LIMIT = MetricSettings().max_forecast_age_seconds  # 300 s


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def published(reader_now: float, writer_skew: float):
    """A forecast the trainer publishes at ``reader_now``, stamped on a clock ``writer_skew`` s off."""
    fc = sample_forecast(now=reader_now, p90=(3.0,) * 20)
    return replace(fc, generated_at=reader_now + writer_skew)


def reader(store):
    clock = Clock(T)
    # ttl 0 and no refresher thread: every get() reads the store, as a refresher round would
    return ForecastCache(store, CacheSettings(ttl_seconds=0.0), receipts=ReceiptTimes(clock)), clock


def test_a_trainer_whose_clock_is_400_s_behind_still_has_its_new_forecasts_served():
    store = MemoryForecastStore()
    cache, clock = reader(store)
    store.publish(published(T, writer_skew=-400))
    cache.get(SID)  # first read: only the writer's stamp says how old it is
    clock.t = T + 60
    store.publish(published(T + 60, writer_skew=-400))  # the next refresh, just published
    fc = cache.get(SID)
    served = served_cores(fc, clock(), MetricSettings())
    assert served.source == "forecast", served.reason
    assert clock() - fc.generated_at <= 60  # at most the gap since the reader's previous read


def test_a_dead_trainer_whose_clock_was_400_s_ahead_goes_stale_after_the_limit_on_the_readers_clock():
    store = MemoryForecastStore()
    cache, clock = reader(store)
    store.publish(published(T - 30, writer_skew=+400))  # the trainer's last forecast; then it dies
    clock.t = T - 29
    cache.get(SID)
    clock.t = T - 29 + LIMIT + 1  # by the writer's stamp only ~-100 s old
    served = served_cores(cache.get(SID), clock(), MetricSettings())
    assert served.source == "observed" and "stale" in served.reason, served


def test_an_unchanged_version_keeps_its_receipt_time_and_ages_on_the_readers_clock():
    store = MemoryForecastStore()
    cache, clock = reader(store)
    store.publish(published(T, writer_skew=0))
    first = cache.get(SID).generated_at
    clock.t = T + 200
    assert cache.get(SID).generated_at == first == T
    clock.t = T + LIMIT + 1
    assert "stale" in served_cores(cache.get(SID), clock(), MetricSettings()).reason


def test_a_forecast_first_read_an_hour_after_it_was_published_is_stale_at_once():
    store = MemoryForecastStore()
    store.publish(published(T - 3600, writer_skew=0))
    cache, clock = reader(store)
    with pytest.raises(NoData, match="stale"):  # and its observed tail is too old to serve
        served_cores(cache.get(SID), clock(), MetricSettings())


def test_receipt_times_bound_a_new_versions_age_by_the_gap_since_the_previous_read():
    clock = Clock(T)
    r = ReceiptTimes(clock)
    v1 = replace(published(T, 0), generation=1)
    assert r.stamp(v1).generated_at == T
    clock.t = T + 10
    r.checked(SID, 1)  # a generation check found v1 still current
    clock.t = T + 15
    stale_stamp = replace(published(T + 15, writer_skew=-3600), generation=2)
    assert r.stamp(stale_stamp).generated_at == T + 10  # published after the check at T+10
    future_stamp = replace(published(T + 15, writer_skew=+3600), generation=3)
    clock.t = T + 16
    assert r.stamp(future_stamp).generated_at == T + 16  # never younger than "just now"
    r.forget(SID)
    clock.t = T + 20
    assert r.stamp(replace(published(T, 0), generation=4)).generated_at == T  # first read again: the stated age
