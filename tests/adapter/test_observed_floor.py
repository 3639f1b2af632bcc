"""While everything is up, the served floor is the demand the adapter reads directly from the
workload's source (real Prometheus), what a reactive HPA's metric sees now, not the sample the
trainer last published; without a fresh reading it is the published sample."""

from __future__ import annotations

import threading

from adapter.fallback import Observation, ObservedDirect
from core.store import RedisForecastStore
from tests.adapter.helpers import sample_forecast
from tests.adapter.test_degradation import DEMAND, PODS, _eventually, _get, _metric, _serve, prometheus  # noqa: F401


def test_the_floor_is_the_adapters_own_reading_of_the_demand(redis_url, prometheus):  # noqa: F811
    store = RedisForecastStore(redis_url)
    # the trainer last saw 1.0 core and forecasts 1.2; Prometheus holds 1.75 now
    store.publish(sample_forecast("shop", "checkout", p90=(1.2, 1.2, 1.2), observed=1.0, ready_pods=PODS))
    srv = _serve(store, prometheus.url)
    try:
        def floored():
            r = _metric(srv.url)
            return r if r.status_code == 200 and r.json()["items"][0]["value"] == "1750m" else None

        _eventually(floored, "the served value floored at the demand read from Prometheus")
        rest = _get(srv.url, "/api/v1/forecasts").json()["items"][0]["served"]["predicted_cpu_cores"]
        assert rest["source"] == "forecast" and rest["observed_cores"] == DEMAND and "read directly now" in rest["reason"]
        # a forecast above the demand is served as before
        store.publish(sample_forecast("shop", "checkout", p90=(3.0, 3.0, 3.0), observed=1.0, ready_pods=PODS))
        _eventually(lambda: _metric(srv.url).json()["items"][0]["value"] == "3", "the forecast above the floor")
    finally:
        srv.stop()
        store.close()


class Held:
    """A demand source whose reads wait until the test releases them (a stalled Prometheus)."""

    def __init__(self):
        self.release = threading.Event()
        self.reads = 0

    def knows(self, sid):
        return True

    def observe(self, sid):
        self.release.wait(30)
        self.reads += 1
        return Observation(cores=2.0, at=0.0)


def test_a_request_never_waits_for_the_reading_and_an_old_one_is_no_floor():
    now = [100.0]
    reader = Held()
    od = ObservedDirect(reader, ttl_seconds=15.0, gather_seconds=0.0, clock=lambda: now[0])
    got = []
    t = threading.Thread(target=lambda: got.append(od.fresh("shop/checkout")), daemon=True)
    t.start()
    t.join(10)
    # answered while the read it asked for is still held: nothing yet, asked for, not waited for
    assert not t.is_alive() and got == [None] and reader.reads == 0
    reader.release.set()
    _eventually(lambda: od.fresh("shop/checkout") is not None, "the reading arrived in the background")
    assert od.fresh("shop/checkout").cores == 2.0
    now[0] += 20.0  # older than a TTL: still the floor, and read again for the next request
    reads = reader.reads
    assert od.fresh("shop/checkout").cores == 2.0
    _eventually(lambda: reader.reads > reads, "the reading was refreshed in the background")
    now[0] += 31.0  # older than two TTLs: no floor (the published sample is)
    assert od.fresh("shop/checkout") is None
    od.close()
