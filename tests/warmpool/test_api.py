"""The HTTP API over a real uvicorn server: exactly one claimer gets each warm container."""

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from core.store import MemoryForecastStore, make_forecast
from tests.warmpool.conftest import make_policy
from warmpool.api import create_app
from warmpool.backends.sim import SimBackend
from warmpool.controller import Controller
from warmpool.wiring import HttpServer


@pytest.fixture
def served(clock):
    policy = make_policy(max_warm=20)
    store = MemoryForecastStore()
    store.publish(make_forecast("demo/web", origin=clock(), step_seconds=60, mean=[8.0], quantiles={"p90": [8.0]}, model="t", generated_at=clock()))
    sim = SimBackend(clock, seed=3)
    ctl = Controller(policy, store, {"sim": sim}, clock=clock)
    ctl.step()
    clock.advance(2.0)
    ctl.step()
    srv = HttpServer(create_app(ctl), "127.0.0.1", 0).start()
    yield ctl, f"http://127.0.0.1:{srv.port}"
    srv.stop()


def test_many_concurrent_claims_each_get_a_distinct_container_or_a_clear_refusal(served):
    ctl, url = served
    assert ctl.describe()["pools"][0]["warm"] == 8
    barrier = threading.Barrier(32)

    def claim(_):
        with httpx.Client(timeout=10) as c:
            barrier.wait()
            return c.post(f"{url}/api/v1/pools/web/claim", params={"allow_cold": "false"})

    with ThreadPoolExecutor(32) as ex:
        responses = list(ex.map(claim, range(32)))
    won = [r.json()["container_id"] for r in responses if r.status_code == 200]
    refused = [r for r in responses if r.status_code == 409]
    assert len(won) == 8 and len(set(won)) == 8
    assert len(refused) == 24 and "no warm container" in refused[0].json()["detail"]
    assert ctl.describe()["pools"][0]["claimed"] == 8


def test_a_claim_reports_a_cold_start_when_the_pool_is_empty_and_release_returns_it(served):
    ctl, url = served
    with httpx.Client(timeout=10) as c:
        for _ in range(8):
            assert c.post(f"{url}/api/v1/pools/web/claim").json()["cold_start"] is False
        r = c.post(f"{url}/api/v1/pools/web/claim").json()
        assert r["cold_start"] is True and r["container_id"] and r["endpoint"]
        rel = c.post(f"{url}/api/v1/pools/web/release", json={"container_id": r["container_id"]})
        assert rel.status_code == 200 and rel.json()["state"] == "warm"
        again = c.post(f"{url}/api/v1/pools/web/release", json={"container_id": r["container_id"]})
        assert again.status_code == 409
        assert c.post(f"{url}/api/v1/pools/web/release", json={}).status_code == 422
        assert c.post(f"{url}/api/v1/pools/nope/claim").status_code == 404
        pools = c.get(f"{url}/api/v1/pools").json()["pools"]
        assert pools[0]["pool"] == "web" and pools[0]["warm"] == 1
        cs = c.get(f"{url}/api/v1/coldstart").json()["runtime_classes"]
        assert (cs[0]["start"], cs[0]["runtime_class"], cs[0]["total_ms"]["p90"]) == ("container", "crun", 136.0)  # the pool's
        by = {(x["start"], x["runtime_class"]): x for x in cs}
        assert by[("pod", "crun")]["total_ms"]["p90"] == 3693.0 and by[("pod", "crun")]["source"].startswith("seed (measured")
        assert by[("container", "kata")]["source"] == by[("pod", "kata")]["source"] == "seed (not measured: no Kata runtime here)"
        m = c.get(f"{url}/metrics").text
        for name in ["foresight_warmpool_warm", "foresight_warmpool_claimed", "foresight_warmpool_expired_unused_total",
                     "foresight_warmpool_cold_starts_total", "foresight_warmpool_wasted_container_seconds_total",
                     "foresight_warmpool_claim_latency_seconds_bucket"]:
            assert name in m, name


def test_cold_starts_beyond_max_cold_per_minute_get_429_with_retry_after(clock):
    """allow_cold stays, but a pool with no warm container starts at most max_cold_per_minute
    containers in any 60 s; the rest are refused with the reason and when to retry."""
    policy = make_policy(max_cold_per_minute=3)
    sim = SimBackend(clock, seed=3)
    ctl = Controller(policy, MemoryForecastStore(), {"sim": sim}, clock=clock)
    ctl.step()
    srv = HttpServer(create_app(ctl), "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{srv.port}"
    try:
        with httpx.Client(timeout=10) as c:
            codes = []
            for i in range(3):
                codes.append(c.post(f"{url}/api/v1/pools/web/claim").status_code)
                clock.advance(10.0)
            assert codes == [200, 200, 200] and sim.created_total == 3
            r = c.post(f"{url}/api/v1/pools/web/claim")
            assert r.status_code == 429 and sim.created_total == 3
            assert r.headers["retry-after"] == "30"  # the first cold start (t=0) leaves the window at t=60; now t=30
            assert "max_cold_per_minute: 3" in r.json()["detail"] and "retry in 30s" in r.json()["detail"]
            clock.advance(30.0)
            assert c.post(f"{url}/api/v1/pools/web/claim").status_code == 200 and sim.created_total == 4
            assert c.post(f"{url}/api/v1/pools/web/claim").status_code == 429
            assert 'foresight_warmpool_cold_limited_total{pool="web"} 2.0' in c.get(f"{url}/metrics").text
    finally:
        srv.stop()


def test_max_cold_per_minute_zero_means_warm_claims_only(clock):
    ctl = Controller(make_policy(max_cold_per_minute=0), MemoryForecastStore(), {"sim": SimBackend(clock)}, clock=clock)
    from warmpool.controller import ColdLimited

    with pytest.raises(ColdLimited, match="max_cold_per_minute: 0") as e:
        ctl.claim("web")
    assert e.value.retry_after_seconds == 60
