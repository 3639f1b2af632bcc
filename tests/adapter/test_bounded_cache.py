"""The adapter's state is bounded by what the trainer publishes, not by what callers ask for."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from adapter.app import create_app
from adapter.negcache import MissingNames
from adapter.selectors import MAX_IN_VALUES, SelectorError, parse_selector
from adapter.settings import AdapterSettings, CacheSettings
from adapter.state import ForecastCache
from core.store import MemoryForecastStore
from tests.adapter.helpers import EXT, sample_forecast


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class _CountingStore(MemoryForecastStore):
    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def latest(self, series_id):
        self.reads.append(series_id)
        return super().latest(series_id)

    def latest_many(self, ids):
        self.reads.extend(ids)
        return super().latest_many(ids)


def _cache(store, clock, **kw) -> ForecastCache:
    settings = CacheSettings(ttl_seconds=2.0, max_stale_seconds=30.0, **kw)
    cache = ForecastCache(store, settings, clock=clock)
    cache.ensure_index()
    return cache


def test_the_negative_cache_keeps_at_most_its_maximum_dropping_the_least_recently_read():
    names = MissingNames(max_entries=3, ttl_seconds=10)
    for i, n in enumerate("abcd"):
        names.add(n, float(i))
    assert len(names) == 3 and "a" not in names and names.evicted == 1
    assert names.fresh("d", 5.0) and not names.fresh("b", 12.5)  # b read at 1.0: 11.5 s old
    assert "b" not in names  # a stale name is dropped when looked at


def test_the_negative_cache_refuses_a_size_that_cannot_hold_anything():
    with pytest.raises(ValueError, match="max_entries: 0"):
        MissingNames(max_entries=0)


def test_asking_for_many_unknown_names_leaves_the_cache_holding_only_what_was_published():
    store, clock = _CountingStore(), _Clock()
    for name in ("a", "b"):
        store.publish(sample_forecast("shop", name, now=time.time()))
    cache = _cache(store, clock, negative_max_entries=50)
    for i in range(1000):
        assert cache.get(f"shop/nope-{i}") is None
    assert sorted(cache._entries) == ["shop/a", "shop/b"]
    assert len(cache._missing) == 50
    assert cache.health()["negative_cache_entries"] == 50
    assert cache.all_series() == ["shop/a", "shop/b"]


def test_an_unknown_name_is_read_once_per_ttl_and_never_revalidated_in_the_background():
    store, clock = _CountingStore(), _Clock()
    cache = _cache(store, clock)
    store.reads.clear()
    for _ in range(5):
        assert cache.get("shop/ghost") is None
    assert store.reads == ["shop/ghost"]
    # the refresher's rounds long after: the aging entries and the pending set skip it
    clock.t += 100
    cache._revalidate_aging()
    cache._refresh_pending()
    assert store.reads == ["shop/ghost"]
    # asked again after its ttl: one more read, on the asker's request
    assert cache.get("shop/ghost") is None
    assert store.reads == ["shop/ghost", "shop/ghost"]


def test_a_name_published_after_it_was_found_missing_is_served_once_its_negative_entry_expires():
    store, clock = _CountingStore(), _Clock()
    cache = _cache(store, clock)
    assert cache.get("shop/late") is None
    store.publish(sample_forecast("shop", "late", now=time.time()))
    assert cache.get("shop/late") is None  # within the negative ttl: not asked again
    clock.t += 2.5
    fc = cache.get("shop/late")
    assert fc is not None and fc.series_id == "shop/late"
    assert "shop/late" not in cache._missing and "shop/late" in cache._entries


def test_an_index_refresh_finds_a_newly_published_name_and_clears_its_negative_entry():
    store, clock = _CountingStore(), _Clock()
    cache = _cache(store, clock)
    assert cache.get("shop/new") is None
    store.publish(sample_forecast("shop", "new", now=time.time()))
    cache.refresh_index(force=True)
    assert "shop/new" not in cache._missing
    assert cache.get("shop/new") is not None


def test_a_published_series_whose_forecast_vanished_keeps_its_entry_until_the_listing_prunes_it():
    store, clock = _CountingStore(), _Clock()
    store.publish(sample_forecast("shop", "gone", now=time.time()))
    cache = _cache(store, clock)
    assert cache.get("shop/gone") is not None
    store._data.pop("shop/gone")  # expired in the store, still in the last listing
    clock.t += 3
    cache._read_through("shop/gone", cache._entries.get("shop/gone"), clock.t)
    assert "shop/gone" in cache._entries and "shop/gone" not in cache._missing


def test_a_selector_listing_more_names_than_the_limit_is_refused_naming_the_key_and_the_fix():
    values = ",".join(f"w{i}" for i in range(MAX_IN_VALUES + 1))
    with pytest.raises(SelectorError, match=rf"workload in \(\.\.\.\) lists {MAX_IN_VALUES + 1} values; at most "
                       rf"{MAX_IN_VALUES} per request: split"):
        parse_selector(f"workload in ({values})")
    ok = ",".join(f"w{i}" for i in range(MAX_IN_VALUES))
    assert len(parse_selector(f"workload in ({ok})").requirements[0].values) == MAX_IN_VALUES


def test_the_external_metrics_api_answers_400_for_an_oversized_workload_list_and_grows_nothing():
    store = MemoryForecastStore()
    store.publish(sample_forecast("shop", "w0", now=time.time()))
    app = create_app(AdapterSettings(cache=CacheSettings(negative_max_entries=20)), store)
    big = ",".join(f"w{i}" for i in range(MAX_IN_VALUES + 1))
    fits = ",".join(f"w{i}" for i in range(MAX_IN_VALUES))
    with TestClient(app) as c:
        refused = c.get(f"{EXT}/namespaces/shop/predicted_cpu_cores", params={"labelSelector": f"workload in ({big})"})
        served = c.get(f"{EXT}/namespaces/shop/predicted_cpu_cores", params={"labelSelector": f"workload in ({fits})"})
        for i in range(200):
            assert c.get(f"/api/v1/forecasts/shop/unknown-{i}").status_code == 404
        health = c.app.state.core.cache.health()
    assert refused.status_code == 400, refused.text
    assert "workload in (...)" in refused.json()["message"] and f"at most {MAX_IN_VALUES}" in refused.json()["message"]
    assert served.status_code == 200 and [i["metricLabels"]["workload"] for i in served.json()["items"]] == ["w0"]
    assert health["negative_cache_entries"] == 20


def test_a_forecast_path_longer_than_any_kubernetes_name_is_refused_naming_the_field():
    app = create_app(AdapterSettings(), MemoryForecastStore())
    with TestClient(app) as c:
        r = c.get("/api/v1/forecasts/shop/" + "x" * 300)
    assert r.status_code == 400 and "workload" in r.json()["message"] and "253" in r.json()["message"]


def test_selectors_naming_unknown_workloads_are_not_memoized_but_matching_ones_are():
    store = MemoryForecastStore()
    store.publish(sample_forecast("shop", "real", now=time.time()))
    app = create_app(AdapterSettings(), store)
    with TestClient(app) as c:
        for i in range(50):
            r = c.get(f"{EXT}/namespaces/shop/predicted_cpu_cores", params={"labelSelector": f"workload=ghost-{i}"})
            assert r.status_code == 404
        assert c.get(f"{EXT}/namespaces/shop/predicted_cpu_cores", params={"labelSelector": "workload=real"}).status_code == 200
        core = c.app.state.core
    assert list(core._selectors) == ["workload=real"]
    assert len(core._queries) == 1
