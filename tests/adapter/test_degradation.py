"""The degradation ladder, by fault injection on the real parts (real Redis, real Prometheus):

- store down (kill -9, or SIGSTOP: a stalled Redis) -> observed demand read directly from
  Prometheus with the workload's own query, ``source: observed-direct``, counted in /metrics;
- store and Prometheus both down -> 503 for that metric only; discovery and /readyz stay 200;
- the store back -> forecasts again.
"""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest

from adapter.app import create_app
from adapter.fallback import PrometheusDemandReader
from adapter.server import serve_in_thread
from adapter.settings import AdapterSettings, CacheSettings, ObservedDirectSettings
from core.store import RedisForecastStore
from forecaster.config import parse_config
from forecaster.sources.prometheus import PrometheusSource
from tests import stack
from tests.adapter.helpers import EXT, sample_forecast

DEMAND = 1.75  # cores, the demand Prometheus holds for shop/checkout
PODS = 5


@pytest.fixture
def redis_alone(tmp_path):
    """A Redis of this test only: it gets killed."""
    if not stack.have("redis-server"):
        pytest.skip("redis-server is not installed; run `make deps`")
    (tmp_path / "redis").mkdir()
    srv = stack.start_redis(tmp_path / "redis")
    yield srv
    if srv.proc is not None and srv.proc.poll() is None:
        os.kill(srv.proc.pid, signal.SIGCONT)
    srv.stop()


@pytest.fixture
def prometheus(prometheus_factory):
    """Real Prometheus with the demand and the ready pods of shop/checkout over the last hour."""
    now = int(time.time())
    samples = [(t, DEMAND) for t in range(now - 3600, now - 60, 60)]
    pods = [(t, float(PODS)) for t in range(now - 3600, now - 60, 60)]
    return prometheus_factory({
        "foresight_test_demand": [({"namespace": "shop", "workload": "checkout"}, samples)],
        "foresight_test_ready": [({"namespace": "shop", "workload": "checkout"}, pods)],
    })


def _config(prom_url: str):
    return parse_config({
        "source": {"url": prom_url},
        "workloads": [{
            "namespace": "shop",
            "name": "checkout",
            "labels": {"tier": "web"},
            # the workload's own queries; last_over_time because the history is backfilled
            "demand_query": 'sum(last_over_time(foresight_test_demand{workload="checkout"}[2h]))',
            "capacity": {
                "cpu_request_cores": 0.5,
                "ready_pods_query": 'sum(last_over_time(foresight_test_ready{workload="checkout"}[2h]))',
            },
        }],
    })


def _serve(store, prom_url: str, *, max_age: float = 120.0):
    cfg = _config(prom_url)
    source = PrometheusSource(prom_url, timeout_seconds=30.0, retries=0)
    settings = AdapterSettings(
        cache=CacheSettings(ttl_seconds=0.2, max_stale_seconds=0.5),
        workload_labels={w.series_id: w.all_labels() for w in cfg.workloads},
        workload_capacity={"shop/checkout": {"cpu_request_cores": 0.5}},
    )
    app = create_app(settings, store, demand=PrometheusDemandReader(source, cfg.workloads),
                     observed_direct=ObservedDirectSettings(ttl_seconds=0.2, wait_seconds=1.0, max_age_seconds=max_age))
    return serve_in_thread(app, port=stack.free_port())


def _get(url: str, path: str, **params) -> httpx.Response:
    return httpx.get(url + path, params=params, timeout=20.0)


def _metric(url: str, name: str = "predicted_cpu_cores") -> httpx.Response:
    return _get(url, f"{EXT}/namespaces/shop/{name}", labelSelector="workload=checkout")


def _eventually(check, what: str, attempts: int = 100):
    for _ in range(attempts):
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"never happened: {what}")


def _sample(text: str, name: str, **labels) -> float:
    for line in text.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_with_redis_killed_the_metric_serves_observed_demand_from_prometheus_and_readyz_stays_200(redis_alone, prometheus):
    store = RedisForecastStore(redis_alone.url, socket_timeout=0.5)
    store.publish(sample_forecast("shop", "checkout", p90=(9.0, 9.0, 9.0), observed=8.0, ready_pods=PODS))
    srv = _serve(store, prometheus.url)
    try:
        before = _metric(srv.url)
        assert before.status_code == 200 and before.json()["items"][0]["value"] == "9"  # the forecast
        redis_alone.proc.kill()  # kill -9
        redis_alone.proc.wait()

        def degraded():
            r = _metric(srv.url)
            return r if r.status_code == 200 and r.json()["items"][0]["value"] == "1750m" else None

        r = _eventually(degraded, "the metric served observed demand from Prometheus")
        assert r.json()["items"][0]["metricLabels"]["deployment"] == "checkout"
        ratio = _metric(srv.url, "predicted_cpu_load_ratio")
        assert ratio.status_code == 200
        assert ratio.json()["items"][0]["value"] == "700m"  # 1.75 cores / (5 ready pods x 0.5)
        ready = _get(srv.url, "/readyz")
        assert ready.status_code == 200 and ready.json()["store_reachable"] is False
        assert _get(srv.url, EXT).status_code == 200
        rest = _get(srv.url, "/api/v1/forecasts").json()["items"][0]
        assert rest["served"]["predicted_cpu_cores"]["source"] == "observed-direct"
        assert rest["served"]["predicted_cpu_cores"]["value"] == DEMAND
        assert "unreachable" in rest["served"]["predicted_cpu_cores"]["reason"]
        metrics = _get(srv.url, "/metrics").text
        assert _sample(metrics, "foresight_adapter_values_total", source="observed-direct") >= 1
        assert _sample(metrics, "foresight_adapter_fallbacks_total", cause="observed-direct") >= 1
        assert "foresight_adapter_store_up 0.0" in metrics

        redis_alone.start()  # same port, empty: the trainer republishes
        RedisForecastStore(redis_alone.url).publish(sample_forecast("shop", "checkout", p90=(9.0, 9.0, 9.0)))
        _eventually(lambda: _metric(srv.url).json().get("items", [{}])[0].get("value") == "9",
                    "forecasts were served again once the store was back")
    finally:
        srv.stop()


def test_with_redis_stalled_requests_still_get_observed_demand(redis_alone, prometheus):
    store = RedisForecastStore(redis_alone.url, socket_timeout=0.5)
    store.publish(sample_forecast("shop", "checkout", p90=(9.0, 9.0, 9.0)))
    srv = _serve(store, prometheus.url)
    try:
        assert _metric(srv.url).status_code == 200
        os.kill(redis_alone.proc.pid, signal.SIGSTOP)  # accepts connections, never answers
        r = _eventually(lambda: (lambda x: x if x.json().get("items", [{}])[0].get("value") == "1750m" else None)(_metric(srv.url)),
                        "observed demand was served while Redis was stalled")
        assert r.status_code == 200
        assert _get(srv.url, "/readyz").status_code == 200
    finally:
        os.kill(redis_alone.proc.pid, signal.SIGCONT)
        srv.stop()


def test_with_redis_and_prometheus_both_down_only_the_metric_is_503(redis_alone, prometheus_factory):
    prom = prometheus_factory({"foresight_test_other": [({"a": "b"}, [(int(time.time()) - 600, 1.0)])]})
    store = RedisForecastStore(redis_alone.url, socket_timeout=0.5)
    store.publish(sample_forecast("shop", "checkout", p90=(9.0, 9.0, 9.0)))
    srv = _serve(store, prom.url, max_age=0.5)
    try:
        redis_alone.proc.kill()
        redis_alone.proc.wait()
        prom.proc.kill()
        prom.proc.wait()
        r = _eventually(lambda: (lambda x: x if x.status_code == 503 else None)(_metric(srv.url)),
                        "the metric answered 503 with both down")
        body = r.json()
        assert body["kind"] == "Status" and body["reason"] == "ServiceUnavailable"
        assert "store is unreachable" in body["message"] and "could not be read directly" in body["message"]
        assert _get(srv.url, EXT).status_code == 200  # discovery: the aggregator keeps the APIService
        assert _get(srv.url, "/apis").status_code == 200
        ready = _get(srv.url, "/readyz")
        assert ready.status_code == 200 and ready.json()["demand_source_reachable"] is False
        metrics = _get(srv.url, "/metrics").text
        assert _sample(metrics, "foresight_adapter_no_data_total") >= 1
        assert _sample(metrics, "foresight_adapter_observed_direct_errors_total") >= 1
        assert "foresight_adapter_demand_source_up 0.0" in metrics
        assert _sample(metrics, "foresight_adapter_responses_total", route="apis", code="5xx") >= 1
    finally:
        srv.stop()


def test_a_stalled_prometheus_does_not_hold_a_request_longer_than_the_bounded_wait(redis_alone, prometheus):
    store = RedisForecastStore(redis_alone.url, socket_timeout=0.5)
    srv = _serve(store, prometheus.url)
    try:
        redis_alone.proc.kill()
        redis_alone.proc.wait()
        os.kill(prometheus.proc.pid, signal.SIGSTOP)
        # The source timeout is 30 s; the request gives up waiting after 1 s: it must come
        # back (a 503: nothing read yet) well before this client's own 20 s timeout.
        r = _metric(srv.url)
        assert r.status_code == 503
        os.kill(prometheus.proc.pid, signal.SIGCONT)
        _eventually(lambda: _metric(srv.url).status_code == 200, "served once Prometheus answered again")
    finally:
        os.kill(prometheus.proc.pid, signal.SIGCONT)
        srv.stop()


class _Demand:
    """A DemandReader standing in for Prometheus where the point is the adapter's rule."""

    def __init__(self, cores):
        self.cores = cores
        self.reads = 0

    def knows(self, sid):
        return sid == "shop/checkout"

    def observe(self, sid):
        from adapter.fallback import Observation

        self.reads += 1
        return Observation(cores=self.cores, at=time.time(), ready_pods=4)


def test_with_the_trainer_dead_long_enough_the_stale_forecast_gives_way_to_observed_direct():
    from fastapi.testclient import TestClient

    from core.store import MemoryForecastStore

    store = MemoryForecastStore()
    # published an hour ago: the forecast is stale and its observed tail is too old to serve
    store.publish(sample_forecast("shop", "checkout", age=3600, p90=(9.0, 9.0, 9.0), observed=8.0))
    demand = _Demand(1.2)
    app = create_app(AdapterSettings(workload_capacity={"shop/checkout": {"cpu_request_cores": 0.5}}), store,
                     demand=demand)
    with TestClient(app) as c:
        for _ in range(5):
            r = c.get(f"{EXT}/namespaces/shop/predicted_cpu_cores", params={"labelSelector": "workload=checkout"})
            assert r.status_code == 200 and r.json()["items"][0]["value"] == "1200m"
        served = c.get("/api/v1/forecasts").json()["items"][0]["served"]["predicted_cpu_load_ratio"]
    assert served["source"] == "observed-direct" and served["value"] == pytest.approx(1.2 / (4 * 0.5))
    assert "stale" in served["reason"]
    assert demand.reads == 1  # one read serves every request within the TTL, not one per request


def test_the_rest_listing_waits_once_for_all_direct_reads_not_once_per_workload(redis_alone, monkeypatch):
    import threading

    from fastapi.testclient import TestClient

    import adapter.core
    from adapter.fallback import ObservedDirect

    release = threading.Event()

    class Stalled:
        def knows(self, sid):
            return True

        def observe(self, sid):
            release.wait(30)  # a Prometheus that accepts and does not answer
            return None

    blocking_gets, waits = [], []
    real_get, real_wait = ObservedDirect.get, adapter.core.futures_wait
    monkeypatch.setattr(ObservedDirect, "get", lambda self, sid, pending=None: (
        blocking_gets.append(sid) if pending is None else None) or real_get(self, sid, pending))
    monkeypatch.setattr(adapter.core, "futures_wait", lambda fs, timeout: waits.append(len(fs)) or real_wait(fs, timeout))
    names = [f"w{i}" for i in range(8)]
    settings = AdapterSettings(cache=CacheSettings(ttl_seconds=0.1, max_stale_seconds=0.1),
                               workload_labels={f"shop/{n}": {"workload": n} for n in names})
    redis_alone.proc.kill()
    redis_alone.proc.wait()
    app = create_app(settings, RedisForecastStore(redis_alone.url, socket_timeout=0.2), demand=Stalled(),
                     observed_direct=ObservedDirectSettings(wait_seconds=0.5))
    try:
        with TestClient(app) as c:
            r = c.get("/api/v1/forecasts")
        assert r.status_code == 200 and len(r.json()["items"]) == 8
        assert {i["served"]["predicted_cpu_cores"]["source"] for i in r.json()["items"]} == {"none"}
        assert blocking_gets == []  # no read is waited for on its own
        assert waits == [16]  # one bounded wait for the 8 workloads x 2 metrics
    finally:
        release.set()


def test_foresight_up_serves_its_replayed_trace_demand_when_its_store_is_down(redis_alone):
    """`foresight up --store redis://...`: the adapter's demand source is the replayed history."""
    import importlib.resources as res

    import numpy as np
    from fastapi.testclient import TestClient

    from adapter.quantity import parse_quantity
    from forecaster.sources.csv import read_long_csv
    from foresight.up import Clock, Forecasting, TraceDemand, demo_workloads, reactive_ready_pods

    frame = read_long_csv(str(res.files("foresight") / "data" / "traces.csv.gz"))
    workloads = demo_workloads(frame, pods_at_p99=10, cpu_request=0.5)
    w = workloads[0]
    clock = Clock(trace0=float(w.trace_ts[0]) + 14 * 86400, wall0=time.time())
    demand = TraceDemand(Forecasting(RedisForecastStore(redis_alone.url), workloads, clock, ("persistence",)))
    obs = demand.observe(w.series_id)
    _, visible = demand.forecasting.visible(w, time.time())
    assert obs.cores == pytest.approx(float(visible[~np.isnan(visible)][-1]))
    assert obs.ready_pods == reactive_ready_pods(obs.cores, 0.5) and obs.cpu_request_cores == 0.5
    redis_alone.proc.kill()
    redis_alone.proc.wait()
    settings = AdapterSettings(cache=CacheSettings(ttl_seconds=0.1, max_stale_seconds=0.1),
                               workload_labels={x.series_id: {"workload": x.name} for x in workloads},
                               workload_capacity={x.series_id: {"cpu_request_cores": 0.5} for x in workloads})
    app = create_app(settings, RedisForecastStore(redis_alone.url, socket_timeout=0.2), demand=demand)
    with TestClient(app) as c:
        r = c.get(f"{EXT}/namespaces/demo/predicted_cpu_load_ratio", params={"labelSelector": f"workload={w.name}"})
        assert c.get("/readyz").status_code == 200
    assert r.status_code == 200
    served = float(parse_quantity(r.json()["items"][0]["value"]))
    assert served == pytest.approx(obs.cores / (obs.ready_pods * 0.5), rel=1e-6)


def test_a_read_that_fails_at_once_does_not_deadlock_and_marks_the_source_down():
    """A refused connection fails at once: the batch's future is done before the asking
    request awaits it (an instant failure once froze both replicas in bench/chaos.py)."""
    import threading

    from adapter.fallback import DemandUnavailable, ObservedDirect

    class Refused:
        def knows(self, sid):
            return True

        def observe(self, sid):
            raise DemandUnavailable("connection refused")

    od = ObservedDirect(Refused(), gather_seconds=0.0)
    got = []
    t = threading.Thread(target=lambda: got.append(od.get("shop/checkout")), daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "get() deadlocked"
    assert got == [None] and od.source_up is False
    pending: list = []
    assert od.get("shop/checkout", pending) is None and len(pending) == 1
    pending[0].result(timeout=10)
    assert od.source_up is False and od.batches == 2
    od.close()
