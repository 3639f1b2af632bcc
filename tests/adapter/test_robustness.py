"""Odd data and odd labels: a corrupt stored forecast, labels that rename a workload."""

from __future__ import annotations

import time

import redis
from fastapi.testclient import TestClient

from adapter.app import create_app
from adapter.settings import AdapterSettings, CacheSettings
from core.store import MemoryForecastStore, RedisForecastStore
from tests.adapter.helpers import EXT, SteppedClock, sample_forecast, wait_for


def test_a_corrupt_forecast_in_redis_only_loses_that_workload(redis_url):
    store = RedisForecastStore(redis_url)
    now = time.time()
    for name in ("good", "bad", "fine"):
        store.publish(sample_forecast("shop", name, now=now, labels={"tier": "web"}))
    r = redis.Redis.from_url(redis_url)
    r.set("foresight:fc:shop/bad", b"{not json")
    r.close()
    app = create_app(AdapterSettings(cache=CacheSettings(ttl_seconds=0.1)), store)
    with TestClient(app, raise_server_exceptions=False) as c:
        ok = c.get(f"{EXT}/namespaces/shop/predicted_cpu_cores", params={"labelSelector": "tier=web"})
        bad = c.get(f"{EXT}/namespaces/shop/predicted_cpu_cores", params={"labelSelector": "workload=bad"})
        time.sleep(0.3)
        again = c.get(f"{EXT}/namespaces/shop/predicted_cpu_cores", params={"labelSelector": "workload=good"})
        listing = c.get("/api/v1/forecasts")
    assert ok.status_code == 200, ok.text
    assert sorted(i["metricLabels"]["workload"] for i in ok.json()["items"]) == ["fine", "good"]
    assert bad.status_code == 404 and bad.json()["kind"] == "Status"
    assert again.status_code == 200  # the bad key did not make the store look down
    assert listing.status_code == 200


def test_a_configured_label_that_renames_a_workload_is_still_found():
    store = MemoryForecastStore()
    store.publish(sample_forecast("shop", "web-v2", now=time.time()))
    settings = AdapterSettings(workload_labels={"shop/web-v2": {"workload": "web", "deployment": "web-v2"}})
    with TestClient(create_app(settings, store)) as c:
        r = c.get(f"{EXT}/namespaces/shop/predicted_cpu_cores", params={"labelSelector": "workload=web"})
        gone = c.get(f"{EXT}/namespaces/shop/predicted_cpu_cores", params={"labelSelector": "workload=web-v2"})
    assert r.status_code == 200 and r.json()["items"][0]["metricLabels"]["deployment"] == "web-v2"
    assert gone.status_code == 404


def test_a_huge_selector_is_not_echoed_back_in_full():
    sel = ",".join(f"k{i}=v" for i in range(2000))
    with TestClient(create_app(None, MemoryForecastStore())) as c:
        r = c.get(f"{EXT}/namespaces/shop/predicted_cpu_cores", params={"labelSelector": sel})
    assert r.status_code == 404
    assert len(r.json()["message"]) < 500


class _SlowFirstRead(MemoryForecastStore):
    """A store whose first batch read waits for ``release`` (a large fleet's first listing)."""

    def __init__(self):
        super().__init__()
        import threading

        self.reading, self.release = threading.Event(), threading.Event()

    def latest_many(self, series_ids):
        if not self.reading.is_set():
            self.reading.set()
            self.release.wait(10)
        return super().latest_many(series_ids)


def test_a_request_during_the_first_index_read_waits_for_it_instead_of_finding_nothing():
    import threading

    from adapter.state import ForecastCache

    store = _SlowFirstRead()
    store.publish(sample_forecast("shop", "web", now=time.time(), labels={"tier": "web"}))
    cache = ForecastCache(store, CacheSettings(ttl_seconds=0.1))
    cache.start()
    try:
        assert store.reading.wait(10)  # the refresher is inside its first listing's reads
        seen = {}
        req = threading.Thread(target=lambda: (cache.ensure_index(), seen.update(cache.workloads("shop"))))
        req.start()
        req.join(0.3)
        assert req.is_alive()  # the request waits for that listing rather than skipping it
        store.release.set()
        req.join(10)
        assert seen.get("web", {}).get("tier") == "web"
    finally:
        store.release.set()
        cache.stop()


class _CountingReads(MemoryForecastStore):
    def __init__(self):
        super().__init__()
        self.single_reads = 0
        self.generation_checks = 0  # the refresher's revalidations (one per batch of aging entries)

    def generations(self, series_ids):
        self.generation_checks += 1
        return super().generations(series_ids)

    def latest(self, series_id):
        self.single_reads += 1
        return super().latest(series_id)


def test_entries_nobody_asks_for_are_revalidated_so_a_late_request_never_reads_the_store_inline():
    # With several adapter processes an HPA's next request to this one can come long after the
    # last: the entry must still be fresh (checked in the background), and a new version picked up
    from adapter.state import ForecastCache

    store = _CountingReads()
    store.publish(sample_forecast("shop", "web", now=time.time(), p90=(3.0, 3.0, 3.0)))
    clock = SteppedClock()  # the cache's ages move only when the test moves them
    cache = ForecastCache(store, CacheSettings(ttl_seconds=0.05, max_stale_seconds=0.6), clock=clock)
    cache.start()
    try:
        cache.ensure_index()
        first = cache.get("shop/web")
        # 1.5 s, 2.5x the stale window, without a request: half a window at a time, each time
        # waiting for the refresher's generation check of the entry now due (read half a window ago)
        for _ in range(5):
            checks = store.generation_checks
            clock.advance(0.3)
            wait_for(lambda: store.generation_checks > checks, "the refresher to revalidate the aging entry")
        assert cache.get("shop/web") is first and store.single_reads == 0
        store.publish(sample_forecast("shop", "web", now=time.time(), p90=(9.0, 9.0, 9.0)))
        checks = store.generation_checks
        clock.advance(0.3)  # due again: this check finds the generation moved and re-reads in the background
        wait_for(lambda: cache.get("shop/web").quantiles["p90"][0] == 9.0, "the refresher to pick up the new version")
        assert store.generation_checks > checks and store.single_reads == 0
    finally:
        cache.stop()


def test_the_serving_process_freezes_its_long_lived_objects_and_still_collects_cycles_hourly():
    import gc
    import threading
    import weakref

    from adapter.server import freeze_long_lived

    class Node:
        pass

    gc.disable()  # no automatic collection may free the cycle before the freezer freezes it
    stop = threading.Event()
    t = threading.Thread(target=freeze_long_lived, args=(stop, 0.05, 3.0), daemon=True)
    try:
        cycle = Node()
        cycle.self = cycle
        gone = weakref.ref(cycle)
        del cycle  # cyclic garbage
        t.start()
        deadline = time.time() + 5
        while gc.get_freeze_count() == 0 and time.time() < deadline:
            time.sleep(0.01)
        assert gc.get_freeze_count() > 0
        gc.collect()
        assert gone() is not None  # frozen: ordinary collections skip it
        deadline = time.time() + 15
        while gone() is not None and time.time() < deadline:
            time.sleep(0.05)
        assert gone() is None  # the periodic full collection freed it
    finally:
        stop.set()
        t.join(5)
        gc.unfreeze()
        gc.enable()
