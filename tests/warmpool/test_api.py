"""The HTTP API over a real uvicorn server: exactly one claimer gets each warm container."""

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from forecaster.store import MemoryForecastStore, make_forecast
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
        assert any(x["runtime_class"] == "crun" for x in cs)
        m = c.get(f"{url}/metrics").text
        for name in ["foresight_warmpool_warm", "foresight_warmpool_claimed", "foresight_warmpool_expired_unused_total",
                     "foresight_warmpool_cold_starts_total", "foresight_warmpool_wasted_container_seconds_total",
                     "foresight_warmpool_claim_latency_seconds_bucket"]:
            assert name in m, name
