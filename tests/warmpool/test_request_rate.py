"""A pool that follows a predicted request rate (``demand: requests|both`` + ``request_rate``):
validation, and the controller on the sim backend growing the pool before a predicted QPS
peak and shrinking it after."""

import pytest

from core.errors import ConfigError
from core.store import MemoryForecastStore, make_forecast
from tests.warmpool.conftest import make_policy
from warmpool.backends.sim import SimBackend
from warmpool.controller import Controller
from warmpool.planner import ForesightPolicy
from warmpool.policy import RequestRate
from warmpool.reconcile import PoolObserved, reconcile_once

RPS = {"series": "demo/web-rps", "concurrency_per_container": 20}


def rps_forecast(origin, values, series="demo/web-rps"):
    return make_forecast(series, origin=origin, step_seconds=60, mean=values, quantiles={"p90": values}, model="t", generated_at=origin)


def test_a_request_rate_pool_is_parsed_with_the_series_it_reads():
    spec = make_policy(demand="requests", request_rate=RPS).pools[0]
    assert spec.request_rate == RequestRate("demo/web-rps", 20.0)
    assert spec.forecast_series == ("demo/web-rps",)
    both = make_policy(demand="both", request_rate=RPS).pools[0]
    assert both.forecast_series == ("demo/web", "demo/web-rps")
    assert make_policy().pools[0].forecast_series == ("demo/web",) and make_policy().pools[0].demand == "cpu"


def test_a_broken_request_rate_is_rejected_whole_with_every_problem_and_its_path():
    with pytest.raises(ConfigError) as e:
        make_policy(demand="requests")
    assert "pools[web].request_rate: is required with demand: requests" in str(e.value)
    with pytest.raises(ConfigError) as e:
        make_policy(demand="qps", request_rate={"series": "", "concurrency_per_container": 0, "window": 3})
    msg = str(e.value)
    for want in (
        "pools[web].demand: 'qps' must be one of cpu, requests, both",
        "pools[web].request_rate.series: must be a non-empty forecast series id",
        "pools[web].request_rate.concurrency_per_container: 0 must be in (0, inf]",
        "pools[web].request_rate.window: unknown key",
    ):
        assert want in msg, msg
    with pytest.raises(ConfigError, match=r"pools\[web\].demand: must be requests or both when request_rate is set"):
        make_policy(request_rate=RPS)  # the default demand (cpu) would silently ignore it
    with pytest.raises(ConfigError, match=r"pools\[web\].request_rate.concurrency_per_container: is required"):
        make_policy(demand="both", request_rate={"series": "demo/web-rps"})


def test_the_target_is_predicted_requests_over_concurrency_and_with_both_the_larger_need():
    now = 1_000_000.0
    cpu = make_forecast("demo/web", origin=now, step_seconds=60, mean=[3.0], quantiles={"p90": [3.0]}, model="t", generated_at=now)
    rate = rps_forecast(now, [130.0])  # 130 requests/s at 20 per container: 7 containers
    idle_off = {"enabled": False}
    only = make_policy(demand="requests", request_rate=RPS, idle_model=idle_off)
    acts = reconcile_once({}, ForesightPolicy(only), {"demo/web": cpu, "demo/web-rps": rate}, now)
    assert acts.status["web"].target_warm == 7 and "request rate peak 130/s / 20 per container = 7" in acts.status["web"].reason
    both = make_policy(demand="both", request_rate=RPS, idle_model=idle_off)
    assert reconcile_once({}, ForesightPolicy(both), {"demo/web": cpu, "demo/web-rps": rate}, now).status["web"].target_warm == 7
    low = rps_forecast(now, [30.0])  # 2 containers for requests, 3 for cpu: cpu wins
    st = reconcile_once({}, ForesightPolicy(both), {"demo/web": cpu, "demo/web-rps": low}, now).status["web"]
    assert st.target_warm == 3 and "cpu peak 3" in st.reason
    # without the rate forecast the pool says which series is missing and sizes from cpu alone
    st = reconcile_once({}, ForesightPolicy(both), {"demo/web": cpu}, now).status["web"]
    assert st.target_warm == 3 and "no forecast for series 'demo/web-rps'" in st.reason
    # demand: requests never reads the cpu forecast
    fp = ForesightPolicy(only)
    assert fp.target(only.pools[0], PoolObserved("web"), None, now, request_rate=None).total is None


def test_the_pool_grows_before_a_predicted_qps_peak_and_shrinks_after_it(clock):
    policy = make_policy(demand="requests", request_rate=RPS, lead_seconds=90, max_warm=20, idle_model={"enabled": False})
    store = MemoryForecastStore()
    ctl = Controller(policy, store, {"sim": SimBackend(clock, seed=1)}, clock=clock)
    t0 = clock()
    # 20 requests/s, rising to 200/s at minute 11 (value i is the rate at t0 + 60 (i+1), linear
    # between), 200/s to minute 15, back to 20/s at minute 16; refreshed every step like a trainer's
    values = [20.0] * 10 + [200.0] * 5 + [20.0] * 25

    def publish():
        store.publish(make_forecast("demo/web-rps", origin=t0, step_seconds=60, mean=values, quantiles={"p90": values},
                                    model="t", generated_at=clock()))
        store.publish(rps_forecast(clock(), [1000.0], series="demo/web"))  # a cpu forecast the pool must not read

    warm = {}
    for k in range(0, 2 * 40 * 60 // 60):  # every 30 s for 40 minutes
        clock.t = t0 + 30.0 * k
        publish()
        ctl.step()
        clock.advance(2.0)  # sim containers finish starting (< 1.1 s)
        ctl.step()
        d = ctl.describe()["pools"][0]
        warm[30 * k] = (d["warm"], d["target_warm"])
    rise, peak = 10 * 60, 11 * 60
    assert warm[0] == (1, 1)  # 20/s at 20 per container
    # ahead of the peak: 200/s / 20 = 10 containers warm once the peak is within lead (90 s) + T_cold,
    # before the HPA asks for them (its 75-s lead before the peak)
    assert warm[peak - 90] == (10, 10) and peak - 90 < peak - 75
    assert max(w for t, (w, _) in warm.items() if t + 90 < rise) == 1
    # after the peak (back to 20/s at minute 16): the target drops, the surplus goes on its idle TTL (120 s, decaying)
    after = 15 * 60
    assert warm[after + 60][1] == 1
    assert warm[after + 600] == (1, 1)
    assert [w for t, (w, _) in sorted(warm.items()) if t >= after + 600] == [1] * len([t for t in warm if t >= after + 600])
