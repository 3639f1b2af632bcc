"""Declared metrics besides CPU through the real adapter app: predicted_<name> and
predicted_<name>_ratio served from the metric's own series, listed by discovery, and read
directly from the demand source while the store has nothing."""

from __future__ import annotations

import time
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from adapter.app import create_app
from adapter.fallback import Observation
from adapter.quantity import parse_quantity
from adapter.settings import AdapterSettings
from core.store import MemoryForecastStore, make_forecast
from tests.adapter.helpers import EXT, sample_forecast

NOW = 1_800_000_000.0


def rps_forecast(ns="shop", name="checkout", p90=(100.0, 120.0, 140.0), observed=80.0, ready_pods=4, capacity=40.0,
                 now=NOW, metric="rps"):
    return make_forecast(
        f"{ns}/{name}/{metric}", origin=now, step_seconds=60.0, mean=[v * 0.8 for v in p90],
        quantiles={"p50": [v * 0.8 for v in p90], "p90": list(p90)}, model="ets", generated_at=now,
        backtest_error=0.2, observed=((now - 60, observed * 0.9), (now, observed)),
        meta={"namespace": ns, "workload": name, "kind": "Deployment", "labels": {"tier": "web"},
              "ready_pods": ready_pods, "metric": metric, "capacity_per_replica": capacity})


def client_for(*forecasts, settings=None, demand=None):
    store = MemoryForecastStore()
    for fc in forecasts:
        store.publish(fc)
    return TestClient(create_app(settings or AdapterSettings(), store, clock=lambda: NOW, demand=demand))


def url(metric, selector, ns="shop"):
    return f"{EXT}/namespaces/{ns}/{metric}?labelSelector={quote(selector)}"


def test_the_ratio_and_the_demand_of_a_declared_metric_are_served_from_its_own_series():
    with client_for(sample_forecast(now=NOW), rps_forecast()) as c:
        ratio = c.get(url("predicted_rps_ratio", "workload=checkout"))
        demand = c.get(url("predicted_rps", "deployment=checkout")).json()["items"][0]
        cpu = c.get(url("predicted_cpu_load_ratio", "workload=checkout")).json()["items"][0]
    assert ratio.status_code == 200
    (item,) = ratio.json()["items"]
    assert item["metricName"] == "predicted_rps_ratio"
    assert item["metricLabels"] == {"deployment": "checkout", "tier": "web", "workload": "checkout"}
    # window [NOW, NOW+75]: p90 100 at +60, 105 at +75 -> 105 rps / (4 ready x 40 rps) = 0.65625
    assert parse_quantity(item["value"]) == pytest.approx(105 / 160, abs=1e-3)
    assert parse_quantity(demand["value"]) == pytest.approx(105.0, abs=1e-3)
    # the CPU series is untouched: 3.25 cores / (4 x 0.5)
    assert parse_quantity(cpu["value"]) == pytest.approx(1.625, abs=1e-3)


def test_discovery_lists_the_cpu_metrics_then_the_declared_ones_from_config_and_store():
    settings = AdapterSettings(workload_metrics={"shop/cart": {"queue_depth": 10.0}})
    with client_for(sample_forecast(now=NOW), rps_forecast(), settings=settings) as c:
        names = [r["name"] for r in c.get(EXT).json()["resources"]]
        hint = c.get(f"{EXT}/predicted_rps_ratio")
    assert names == ["predicted_cpu_load_ratio", "predicted_cpu_cores", "predicted_queue_depth",
                     "predicted_queue_depth_ratio", "predicted_rps", "predicted_rps_ratio"]
    assert hint.status_code == 404 and "is namespaced" in hint.json()["message"]


def test_only_workloads_that_declare_the_metric_answer_and_an_unknown_metric_is_404():
    cart = sample_forecast("shop", "cart", now=NOW, labels={"tier": "web"})
    with client_for(sample_forecast(now=NOW), cart, rps_forecast()) as c:
        items = c.get(url("predicted_rps_ratio", "tier=web")).json()["items"]
        cpu_items = c.get(url("predicted_cpu_cores", "tier=web")).json()["items"]
        none = c.get(url("predicted_rps", "workload=cart"))
        unknown = c.get(url("predicted_qps", "workload=checkout"))
        listing = c.get("/api/v1/forecasts?namespace=shop").json()
    assert [i["metricLabels"]["workload"] for i in items] == ["checkout"]
    assert sorted(i["metricLabels"]["workload"] for i in cpu_items) == ["cart", "checkout"]
    assert none.status_code == 404
    assert unknown.status_code == 404
    assert "served metrics: predicted_cpu_load_ratio, predicted_cpu_cores, predicted_rps, predicted_rps_ratio" in \
        unknown.json()["message"]
    # the metric series is not a workload of its own
    assert sorted(i["workload"] for i in listing["items"]) == ["cart", "checkout"]


def test_rest_shows_the_declared_metrics_in_their_own_unit():
    with client_for(sample_forecast(now=NOW), rps_forecast()) as c:
        d = c.get("/api/v1/forecasts/shop/checkout").json()
    rps = d["served"]["predicted_rps_ratio"]
    assert rps["source"] == "forecast" and rps["predicted"] == pytest.approx(105.0)
    assert "105 rps" in rps["reason"] and "x 40 rps" in rps["reason"] and "cores" not in rps["reason"]
    assert d["served"]["predicted_rps"]["value"] == pytest.approx(105.0)
    assert d["served"]["predicted_cpu_cores"]["predicted_cores"] == pytest.approx(3.25)


def test_a_stale_metric_forecast_serves_its_observed_demand():
    stale = rps_forecast()
    stale = type(stale)(**{**stale.__dict__, "generated_at": NOW - 3600})
    with client_for(sample_forecast(now=NOW), stale) as c:
        item = c.get(url("predicted_rps_ratio", "workload=checkout")).json()["items"][0]
        m = c.get("/metrics").text
    assert parse_quantity(item["value"]) == pytest.approx(80 / 160, abs=1e-3)  # observed 80 rps
    assert 'foresight_adapter_served_value{metric="predicted_rps_ratio",namespace="shop",source="observed"' in m


class _Rps:
    """A DemandReader standing in for Prometheus: the metric series' own query."""

    def knows(self, sid):
        return sid == "shop/checkout/rps"

    def observe(self, sid):
        return Observation(cores=60.0, at=time.time(), ready_pods=3)


def test_without_a_forecast_a_configured_metric_is_read_directly_from_its_source():
    settings = AdapterSettings(workload_metrics={"shop/checkout": {"rps": 40.0}},
                               workload_labels={"shop/checkout": {"workload": "checkout"}})
    with client_for(settings=settings, demand=_Rps()) as c:
        r = c.get(url("predicted_rps_ratio", "workload=checkout"))
        (d,) = c.get("/api/v1/forecasts?namespace=shop").json()["items"]
    assert r.status_code == 200
    assert parse_quantity(r.json()["items"][0]["value"]) == pytest.approx(60 / 120, abs=1e-3)
    assert d["served"]["predicted_rps"]["source"] == "observed-direct"
    assert d["served"]["predicted_rps"]["value"] == pytest.approx(60.0)


def test_serve_with_a_config_knows_the_declared_metrics_and_their_queries(tmp_path):
    from adapter.factory import build_demand, build_settings

    cfg = tmp_path / "workloads.yaml"
    cfg.write_text(
        "source: {url: 'prometheus://127.0.0.1:1'}\n"
        "workloads:\n"
        "  - namespace: shop\n"
        "    name: checkout\n"
        "    metrics: [{name: rps, query: 'sum(rate(http_requests_total[2m]))', capacity_per_replica: 40}]\n"
    )
    settings, _ = build_settings({"config": str(cfg)})
    reader, _ = build_demand({"config": str(cfg)})
    assert settings.workload_metrics == {"shop/checkout": {"rps": 40.0}}
    assert reader.knows("shop/checkout/rps") and reader.knows("shop/checkout")
    assert reader.workloads["shop/checkout/rps"].demand_query == "sum(rate(http_requests_total[2m]))"


def test_foresight_serve_with_a_config_serves_a_declared_metric_over_https(redis_url, tmp_path):
    """The real process: --config names the metric, Redis holds its series and one more metric
    the trainer published for another workload (discovery lists it without a restart)."""
    import httpx

    from core.store import RedisForecastStore
    from tests.adapter.helpers import ServeProcess
    from tests.stack import free_port

    cfg = tmp_path / "workloads.yaml"
    cfg.write_text(
        f"source: {{url: 'prometheus://127.0.0.1:1'}}\nstore: {{url: '{redis_url}'}}\n"
        "workloads:\n  - namespace: shop\n    name: checkout\n"
        "    metrics: [{name: rps, query: 'sum(rate(http_requests_total[2m]))', capacity_per_replica: 40}]\n"
    )
    now = time.time()
    store = RedisForecastStore(redis_url)
    store.publish(sample_forecast(now=now))
    store.publish(rps_forecast(now=now, p90=(100.0, 100.0, 100.0)))
    store.publish(sample_forecast("shop", "worker", now=now))
    store.publish(rps_forecast(name="worker", metric="queue_depth", now=now, p90=(30.0, 30.0, 30.0), observed=20.0,
                               capacity=5.0, ready_pods=2))
    port = free_port()
    proc = ServeProcess(["--config", str(cfg), "--cert-dir", str(tmp_path / "certs")], port, tmp_path / "serve.log")
    try:
        proc.wait_ready()
        base = f"https://127.0.0.1:{port}{EXT}"
        with httpx.Client(verify=False) as c:
            names = [r["name"] for r in c.get(base).json()["resources"]]
            rps = c.get(f"{base}/namespaces/shop/predicted_rps_ratio", params={"labelSelector": "workload=checkout"})
            queue = c.get(f"{base}/namespaces/shop/predicted_queue_depth", params={"labelSelector": "workload=worker"})
    finally:
        proc.stop()
        store.close()
    assert names == ["predicted_cpu_load_ratio", "predicted_cpu_cores", "predicted_queue_depth",
                     "predicted_queue_depth_ratio", "predicted_rps", "predicted_rps_ratio"]
    assert rps.status_code == 200, rps.text
    assert float(parse_quantity(rps.json()["items"][0]["value"])) == pytest.approx(100 / 160, abs=1e-3)
    assert float(parse_quantity(queue.json()["items"][0]["value"])) == pytest.approx(30.0, abs=1e-3)


def test_a_workload_that_starts_declaring_a_known_metric_is_served_before_the_next_index_build():
    from adapter.settings import CacheSettings

    store = MemoryForecastStore()
    store.publish(sample_forecast(now=NOW))
    store.publish(rps_forecast())
    settings = AdapterSettings(cache=CacheSettings(index_refresh_seconds=3600))
    with TestClient(create_app(settings, store, clock=lambda: NOW)) as c:
        assert c.get(url("predicted_rps", "workload=checkout")).status_code == 200  # the index is built
        assert c.app.state.core.cache.metrics_of("shop/cart") == set()
        store.publish(sample_forecast("shop", "cart", now=NOW))
        store.publish(rps_forecast(name="cart", p90=(7.0, 7.0, 7.0), observed=5.0))
        r = c.get(url("predicted_rps", "workload=cart"))
        assert c.app.state.core.cache.metrics_of("shop/cart") == {"rps"}  # learnt from that read
    assert r.status_code == 200, r.text
    assert float(parse_quantity(r.json()["items"][0]["value"])) == pytest.approx(7.0, abs=1e-3)


class _Watched:
    """The adapter's pod-watch seam (adapter/readypods.py ``ReadyPods``) with fixed counts."""

    def __init__(self, counts, requests=None):
        self.counts = counts
        self.requests = requests or {}

    def count(self, series_id, meta=None):
        return self.counts.get(series_id)

    def cpu_request(self, series_id):
        return self.requests.get(series_id)

    def warming(self):
        return False


def test_a_declared_ratio_divides_by_the_pods_the_hpa_counts_now_as_the_cpu_ratio_does():
    # the trainer published 4 ready pods; the watch has seen the scale-up to 8 since
    with client_for(sample_forecast(now=NOW), rps_forecast()) as c:
        c.app.state.core.ready_pods = _Watched({"shop/checkout": 8})
        ratio = c.get(url("predicted_rps_ratio", "workload=checkout")).json()["items"][0]
        cpu = c.get(url("predicted_cpu_load_ratio", "workload=checkout")).json()["items"][0]
    assert parse_quantity(ratio["value"]) == pytest.approx(105 / (8 * 40), abs=1e-3)
    assert parse_quantity(cpu["value"]) == pytest.approx(3.25 / (8 * 0.5), abs=1e-3)
