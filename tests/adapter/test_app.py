"""The adapter app in-process: wire shapes, selectors, errors, fallbacks, REST, health, cache."""

from __future__ import annotations

import json
import math
import time
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from adapter.app import create_app
from adapter.quantity import format_quantity, parse_quantity
from adapter.settings import AdapterSettings, CacheSettings
from core.store import MemoryForecastStore, RedisForecastStore
from forecaster.served import MetricSettings
from tests.adapter.helpers import EXT, SteppedClock, sample_forecast, wait_for

NOW = 1_800_000_000.0


def client_for(*forecasts, settings=None, clock=lambda: NOW, store=None):
    store = store or MemoryForecastStore()
    for fc in forecasts:
        store.publish(fc)
    app = create_app(settings or AdapterSettings(), store, clock=clock)
    return TestClient(app, raise_server_exceptions=False)


def value_url(metric, selector=None, ns="shop"):
    url = f"{EXT}/namespaces/{ns}/{metric}"
    return url if selector is None else f"{url}?labelSelector={quote(selector)}"


def test_discovery_lists_both_metrics_in_the_exact_kubernetes_shape():
    with client_for() as c:
        r = c.get(EXT)
        assert r.status_code == 200
        assert r.headers["content-type"] == "application/json"
        assert r.content == (
            b'{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"external.metrics.k8s.io/v1beta1",'
            b'"resources":[{"name":"predicted_cpu_load_ratio","singularName":"","namespaced":true,'
            b'"kind":"ExternalMetricValueList","verbs":["get"]},{"name":"predicted_cpu_cores","singularName":"",'
            b'"namespaced":true,"kind":"ExternalMetricValueList","verbs":["get"]}]}'
        )
        groups = c.get("/apis").json()
        assert groups["kind"] == "APIGroupList"
        assert groups["groups"][0]["preferredVersion"] == {
            "groupVersion": "external.metrics.k8s.io/v1beta1", "version": "v1beta1"}


def test_a_value_has_the_byte_exact_external_metric_value_list_shape():
    fc = sample_forecast(now=NOW, p90=(3.0, 4.0, 5.0), observed=2.0, ready_pods=4, request=0.5)
    with client_for(fc) as c:
        r = c.get(value_url("predicted_cpu_load_ratio", "deployment=checkout"))
    assert r.status_code == 200
    # window [NOW, NOW+75]: p90 3.0 at +60, 3.25 at +75 -> 3.25 cores / (4 x 0.5) = 1.625
    expected = (
        '{"kind":"ExternalMetricValueList","apiVersion":"external.metrics.k8s.io/v1beta1","metadata":{},'
        '"items":[{"metricName":"predicted_cpu_load_ratio","metricLabels":{"deployment":"checkout",'
        '"tier":"web","workload":"checkout"},"timestamp":"2027-01-15T08:00:00Z","window":300,"value":"1625m"}]}'
    )
    assert r.text == expected


def test_predicted_cpu_cores_serves_demand_and_is_never_below_observed():
    fc = sample_forecast(now=NOW, p90=(1.0, 1.0, 1.0), observed=2.5)
    with client_for(fc) as c:
        item = c.get(value_url("predicted_cpu_cores", "workload=checkout")).json()["items"][0]
    assert parse_quantity(item["value"]) == pytest.approx(2.5)


def test_the_selector_picks_workloads_by_configured_and_meta_labels():
    a = sample_forecast("shop", "checkout", now=NOW, labels={"tier": "web"})
    b = sample_forecast("shop", "cart", now=NOW, labels={"tier": "web"})
    c_ = sample_forecast("shop", "db", now=NOW, labels={"tier": "data"}, kind="StatefulSet")
    settings = AdapterSettings(workload_labels={"shop/checkout": {"team": "pay"}})
    with client_for(a, b, c_, settings=settings) as c:
        def names(sel):
            return sorted(i["metricLabels"]["workload"] for i in c.get(value_url("predicted_cpu_cores", sel)).json()["items"])

        assert names("tier=web") == ["cart", "checkout"]
        assert names("tier in (web,data),workload!=cart") == ["checkout", "db"]
        assert names("team=pay") == ["checkout"]
        assert names("statefulset=db") == ["db"]
        assert names("!deployment") == ["db"]
        assert names("") == ["cart", "checkout", "db"]


def test_a_stale_forecast_serves_the_observed_ratio_and_counts_it():
    fc = sample_forecast(now=NOW, p90=(50.0, 50.0, 50.0), observed=1.0, age=600, ready_pods=2, request=1.0)
    with client_for(fc) as c:
        item = c.get(value_url("predicted_cpu_load_ratio", "workload=checkout")).json()["items"][0]
        assert parse_quantity(item["value"]) == pytest.approx(0.5)
        metrics = c.get("/metrics").text
    assert 'foresight_adapter_fallbacks_total{cause="stale",metric="predicted_cpu_load_ratio"} 1.0' in metrics


def test_a_fallback_series_serves_observed_with_its_reason_in_rest():
    fc = sample_forecast(now=NOW, p90=(50.0, 50.0, 50.0), observed=1.5, status="fallback", reason="model diverged")
    with client_for(fc) as c:
        item = c.get(value_url("predicted_cpu_cores", "workload=checkout")).json()["items"][0]
        assert parse_quantity(item["value"]) == pytest.approx(1.5)
        row = c.get("/api/v1/forecasts").json()["items"][0]
    assert row["status"] == "fallback"
    assert row["served"]["predicted_cpu_cores"]["source"] == "observed"
    assert "model diverged" in row["served"]["predicted_cpu_cores"]["reason"]


def test_a_configured_workload_without_any_data_is_503_not_an_empty_list():
    settings = AdapterSettings(workload_labels={"shop/new": {"workload": "new"}})
    with client_for(settings=settings) as c:
        r = c.get(value_url("predicted_cpu_cores", "workload=new"))
    assert r.status_code == 503
    assert r.json()["reason"] == "ServiceUnavailable"
    assert r.json()["kind"] == "Status"


@pytest.mark.parametrize(
    "path, code",
    [
        (value_url("predicted_cpu_cores", "workload=nope"), 404),
        (value_url("unknown_metric", "workload=checkout"), 404),
        (f"{EXT}/predicted_cpu_load_ratio", 404),  # cluster-scoped
        (f"{EXT}/namespaces/shop/predicted_cpu_load_ratio/extra", 404),
        (f"{EXT}/namespaces/shop/predicted%2Fcpu_load_ratio", 404),  # a name with a slash
        (f"{EXT}/namespaces/Not_A_Namespace/predicted_cpu_cores", 404),
        (value_url("predicted_cpu_cores", "workload in (a"), 400),
        (value_url("predicted_cpu_cores", "=x"), 400),
        (value_url("predicted_cpu_cores", "a=b;c"), 400),
        (value_url("predicted_cpu_cores", "x=" + "y" * 10_000), 400),
        (value_url("predicted_cpu_cores", ",".join(f"k{i}=v" for i in range(2000))), 404),  # 10 kB, valid
        ("/api/v1/forecasts/shop/nope", 404),
        ("/api/v1/forecasts/shop/checkout?format=gif", 400),
        ("/api/v1/forecasts?limit=0", 400),
        ("/no/such/path", 404),
    ],
)
def test_bad_requests_get_the_right_status_object_never_a_500(path, code):
    with client_for(sample_forecast(now=NOW)) as c:
        r = c.get(path)
    assert r.status_code == code, r.text
    body = r.json()
    assert body["kind"] == "Status" and body["apiVersion"] == "v1" and body["status"] == "Failure"
    assert body["code"] == code
    assert body["reason"] == {400: "BadRequest", 404: "NotFound"}[code]


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
@pytest.mark.parametrize(
    "path", ["/apis", EXT, value_url("predicted_cpu_cores", "workload=checkout"), "/api/v1/forecasts", "/healthz"])
def test_wrong_methods_are_405_status_objects(method, path):
    with client_for(sample_forecast(now=NOW)) as c:
        r = c.request(method, path)
    assert r.status_code == 405
    assert r.json()["reason"] == "MethodNotAllowed"


def test_rest_detail_carries_points_quantiles_observed_and_the_served_values():
    fc = sample_forecast(now=NOW, p90=(3.0, 4.0, 5.0))
    with client_for(fc) as c:
        d = c.get("/api/v1/forecasts/shop/checkout").json()
        png = c.get("/api/v1/forecasts/shop/checkout?format=png")
    assert [p["p90"] for p in d["points"]] == [3.0, 4.0, 5.0]
    assert len(d["observed"]) == 6
    assert d["model"] == "ets" and d["backtest_error"] == 0.12
    assert d["served"]["predicted_cpu_load_ratio"]["source"] == "forecast"
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"
    assert png.content[:8] == b"\x89PNG\r\n\x1a\n" and len(png.content) > 5000


def test_rest_list_pages_and_filters_by_namespace():
    fcs = [sample_forecast("ns1", f"w{i}", now=NOW) for i in range(7)] + [sample_forecast("ns2", "x", now=NOW)]
    with client_for(*fcs) as c:
        page = c.get("/api/v1/forecasts?namespace=ns1&limit=3&offset=3").json()
    assert page["count"] == 7
    assert [i["workload"] for i in page["items"]] == ["w3", "w4", "w5"]


def test_every_served_quantity_is_what_the_pure_rule_computes():
    from forecaster.served import served_load_ratio

    settings = AdapterSettings(metric=MetricSettings(lead_seconds=150, quantile="p50"))
    fc = sample_forecast(now=NOW, p90=(3.0, 7.0, 2.0), observed=1.0, ready_pods=3, request=0.25)
    with client_for(fc, settings=settings) as c:
        item = c.get(value_url("predicted_cpu_load_ratio", "workload=checkout")).json()["items"][0]
    want = served_load_ratio(fc, NOW, 3, 0.25, settings.metric).value
    assert item["value"] == format_quantity(want)
    assert math.ceil(parse_quantity(item["value"]) * 1000) == math.ceil(want * 1000 - 1e-9)


def test_health_endpoints_and_prometheus_metrics():
    with client_for(sample_forecast(now=NOW)) as c:
        assert c.get("/healthz").text == "ok"
        ready = c.get("/readyz")
        assert ready.status_code == 200 and ready.json()["fresh_forecasts"] == 1
        c.get(value_url("predicted_cpu_cores", "workload=checkout"))
        m = c.get("/metrics").text
    assert "foresight_adapter_request_duration_seconds_bucket" in m
    assert ('foresight_adapter_served_value{metric="predicted_cpu_cores",namespace="shop",source="forecast",'
            'workload="checkout"}') in m
    assert 'foresight_adapter_forecast_age_seconds{stat="max"}' in m
    assert "foresight_adapter_stale_forecasts 0.0" in m


def test_readyz_stays_ready_when_every_forecast_is_stale_and_reports_it():
    # An unready replica leaves the Service; with all of them out the aggregator fails
    # discovery and every external-metric HPA stops. Staleness is alerted on instead.
    with client_for(sample_forecast(now=NOW, age=3600)) as c:
        r = c.get("/readyz")
    assert r.status_code == 200
    assert r.json()["cached_forecasts"] == 1 and r.json()["fresh_forecasts"] == 0


def test_redis_down_without_a_demand_source_serves_the_cache_while_fresh_then_503(redis_server, redis_url):
    store = RedisForecastStore(redis_url, socket_timeout=0.5)
    store.publish(sample_forecast(now=time.time()))
    settings = AdapterSettings(cache=CacheSettings(ttl_seconds=0.1, max_stale_seconds=3.0))
    app = create_app(settings, store)
    clock = app.state.core.cache.clock = SteppedClock()  # cache ages move only when the test says so
    url = value_url("predicted_cpu_cores", "workload=checkout")
    with TestClient(app, raise_server_exceptions=False) as c:
        assert c.get(url).status_code == 200
        redis_server.stop()
        try:
            clock.advance(1.2)  # past the TTL, inside max_stale
            during = c.get(url)
            assert during.status_code == 200
            ready = c.get("/readyz")
            assert ready.status_code == 200
            # the background refresher tries the store for the entry read past its TTL and notices the outage
            wait_for(lambda: not app.state.core.cache.store_reachable, "the refresher to notice the outage")
            clock.advance(2.5)  # now past max_stale
            after = c.get(url)
            ready = c.get("/readyz")
            assert ready.status_code == 200 and ready.json()["store_reachable"] is False  # discovery works
            assert c.get(EXT).status_code == 200
            assert after.status_code == 503
            assert after.json()["reason"] == "ServiceUnavailable"
            assert "unreachable" in after.json()["message"] and "--config" in after.json()["message"]
            assert c.get("/api/v1/forecasts/shop/checkout").status_code in (200, 503)
        finally:
            redis_server.start()
        store.publish(sample_forecast(now=time.time()))  # the restarted Redis is empty (no persistence)

        def served_again():
            clock.advance(0.2)  # past the back-off after a failed read (min(1 s, the TTL))
            return c.get(url).status_code == 200

        wait_for(served_again, "a 200 once Redis is back")
        assert "foresight_adapter_store_errors_total" in c.get("/metrics").text


def test_several_replicas_read_the_same_redis_store(redis_url):
    store = RedisForecastStore(redis_url)
    store.publish(sample_forecast(now=time.time()))
    a = create_app(AdapterSettings(), RedisForecastStore(redis_url))
    b = create_app(AdapterSettings(), RedisForecastStore(redis_url))
    url = value_url("predicted_cpu_cores", "workload=checkout")
    with TestClient(a) as ca, TestClient(b) as cb:
        va, vb = ca.get(url).json()["items"][0]["value"], cb.get(url).json()["items"][0]["value"]
    assert float(parse_quantity(va)) == pytest.approx(float(parse_quantity(vb)), rel=0.02)


def test_the_dashboard_lists_workloads_with_charts_and_served_values():
    fcs = [sample_forecast(now=NOW), sample_forecast("shop", "cart", now=NOW, status="fallback", reason="too few points")]
    with client_for(*fcs) as c:
        html = c.get("/").text
    assert html.count('<svg class="chart"') == 2
    assert 'class="band"' in html and 'class="observed"' in html
    assert "too few points" in html
    assert "predicted_cpu_load_ratio" in html


def test_openapi_documents_the_external_metrics_and_rest_routes():
    with client_for() as c:
        paths = c.get("/openapi.json").json()["paths"]
    assert f"{EXT}/namespaces/{{namespace}}/{{metric}}" in paths
    assert "/api/v1/forecasts/{namespace}/{workload}" in paths
    assert json.dumps(paths)  # serialisable


def test_the_cache_rereads_only_forecasts_whose_generation_moved(redis_url):
    class CountingStore(RedisForecastStore):
        reads: list = []

        def latest_many(self, ids):
            ids = list(ids)
            self.reads.append(ids)
            return super().latest_many(ids)

    store = CountingStore(redis_url)
    store.publish(sample_forecast("shop", "checkout", now=time.time(), p90=(3.0, 3.0, 3.0), observed=1.0))
    store.publish(sample_forecast("shop", "cart", now=time.time(), p90=(1.0, 1.0, 1.0), observed=0.5))
    app = create_app(AdapterSettings(cache=CacheSettings(ttl_seconds=0.2, max_stale_seconds=30)), store)

    def cores(c, name):
        return float(parse_quantity(c.get(value_url("predicted_cpu_cores", f"workload={name}")).json()["items"][0]["value"]))

    with TestClient(app) as c:
        assert cores(c, "checkout") == pytest.approx(3.0)
        store.publish(sample_forecast("shop", "checkout", now=time.time(), p90=(6.0, 6.0, 6.0), observed=1.0))
        store.reads.clear()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and cores(c, "checkout") != pytest.approx(6.0):
            cores(c, "cart")
            time.sleep(0.3)
        assert cores(c, "checkout") == pytest.approx(6.0)
        assert cores(c, "cart") == pytest.approx(1.0)
    reread = {s for ids in store.reads for s in ids}
    assert "shop/checkout" in reread
    assert "shop/cart" not in reread  # asked for again and again, never re-parsed: its generation did not move


def test_a_multi_item_body_is_exactly_what_go_would_marshal():
    fcs = [sample_forecast("shop", n, now=NOW, labels={"tier": "web", "a.b/c": "x_y"}) for n in ("a1", "b2", "c3")]
    with client_for(*fcs) as c:
        r = c.get(value_url("predicted_cpu_load_ratio", "tier=web"))
    body = r.json()
    assert len(body["items"]) == 3
    assert r.content == json.dumps(body, separators=(",", ":")).encode()
    assert list(body["items"][0]["metricLabels"]) == sorted(body["items"][0]["metricLabels"])


def test_a_client_asking_for_protobuf_first_gets_json():
    with client_for(sample_forecast(now=NOW)) as c:
        r = c.get(value_url("predicted_cpu_cores", "workload=checkout"),
                  headers={"Accept": "application/vnd.kubernetes.protobuf, */*"})
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.json()["kind"] == "ExternalMetricValueList"


def _expire(redis_url, store, series_id):
    """What Redis and the publisher's trim do to a series past its TTL, done now: its forecast key
    is gone and its index member is older than any reader's cutoff (core/store.py's layout)."""
    import redis

    r = redis.Redis.from_url(redis_url)
    try:
        r.delete(f"{store.prefix}fc:{series_id}")
        r.zadd(f"{store.prefix}series", {series_id: 0})
    finally:
        r.close()


def test_label_selectors_over_a_redis_store_and_expired_series_drop_out(redis_url):
    store = RedisForecastStore(redis_url)
    store.publish(sample_forecast("shop", "b", now=time.time(), labels={"tier": "web"}))
    store.publish(sample_forecast("shop", "a", now=time.time(), labels={"tier": "web"}))
    settings = AdapterSettings(cache=CacheSettings(ttl_seconds=0.2, index_refresh_seconds=0.2))
    with TestClient(create_app(settings, store)) as c:
        def names():
            items = c.get(value_url("predicted_cpu_cores", "tier=web")).json().get("items", [])
            return sorted(i["metricLabels"]["workload"] for i in items)

        assert names() == ["a", "b"]
        _expire(redis_url, store, "shop/b")
        wait_for(lambda: names() == ["a"], "the expired series to drop out of the selector's answer")
        assert [i["workload"] for i in c.get("/api/v1/forecasts").json()["items"]] == ["a"]


def _heads_for(html: str) -> int:
    import re

    m = re.search(r"the HPA heads for <b>(\d+)</b> now", html)
    assert m, html[:3000]
    return int(m.group(1))


def test_the_dashboard_shows_the_replicas_the_hpa_heads_for_on_the_served_value():
    """The desired replicas are the HPA's External-metric rule on the load ratio the API serves:
    ceil(ratio x ready / target) outside the 10% tolerance, at the autoscaler's target and bounds."""
    from adapter.observemode import ObserveView

    fc = sample_forecast(now=NOW, p90=(3.0, 4.0, 6.0, 8.0, 8.0, 8.0), observed=2.0, ready_pods=4, request=0.5)
    with client_for(fc) as c:
        body = c.get(value_url("predicted_cpu_load_ratio", "deployment=checkout")).json()
        ratio = float(parse_quantity(body["items"][0]["value"]))
        html = c.get("/").text
        assert _heads_for(html) == math.ceil(ratio * 4 / 0.7 - 1e-9)
        assert 'class="desired"' in html and "up to" in html  # the forecast ahead rises: the line does too
        view = ObserveView(kube=None)
        view._view = {"shop/checkout": {"autoscaler": "checkout", "mode": "Act", "observe": None,
                                        "hpa": {"target_value": 0.5, "min_replicas": 1, "max_replicas": 5}}}
        c.app.state.core.observe_view = view
        html = c.get("/").text
    assert _heads_for(html) == min(5, math.ceil(ratio * 4 / 0.5 - 1e-9))
    assert _heads_for(html) == 5  # 1.625 x 4 / 0.5 = 13, held at maxReplicas


def test_the_dashboard_shows_no_desired_replicas_while_the_ready_pods_are_unknown():
    fc = sample_forecast(now=NOW, ready_pods=None)
    with client_for(fc) as c:
        html = c.get("/").text
    assert "the HPA heads for" not in html and 'class="desired"' not in html
