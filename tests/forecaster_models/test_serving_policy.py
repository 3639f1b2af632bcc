"""The serving policy: chosen by the trainer from the workload's own history, published with
every forecast, validated with paths, and applied by the adapter's one rule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from forecaster.served import MetricSettings, served_cores, served_load_ratio
from forecaster.config import parse_config
from core.errors import ConfigError
from forecaster.serving import DEFAULT_VIOLATION_WORTH_MINUTES, POLICY_VERSION, ServingPolicy, ServingSettings, choose_policy
from forecaster.servingscore import (as_slices, clairvoyant_cost, exposure, held_floor, lead_bases, peak_gaps, sync_exposure,
                                     violation_minutes)
from core.store import Forecast, MemoryForecastStore, make_forecast
from forecaster.training import Trainer

T0 = 1_700_000_000.0


def _bursty(n=6 * 288, seed=4, p=0.12):
    rng = np.random.default_rng(seed)
    ts = T0 + np.arange(n) * 300.0
    v = 10 + rng.normal(0, 0.3, n) + 8 * (rng.random(n) < p)  # unforeseeable bursts
    return ts, v


def test_a_calm_series_gets_no_headroom_and_a_bursty_one_pays_for_headroom():
    n = 600
    last = np.full(n, 10.0)
    calm = choose_policy(np.full(n, 10.0), last, {"p50": last.copy()}, 1.0, ServingSettings())
    assert calm.headroom == 1.0
    rng = np.random.default_rng(0)
    bursts = 10 + 6 * (rng.random(n) < 0.1)
    pol = choose_policy(bursts, last, {"p50": last.copy()}, 1.0, ServingSettings(slo_minutes_per_day=2))
    assert pol.headroom >= 1.2  # ceil(12 / 0.7) = 18 pods carry the 16-core bursts at 90%
    assert "SLO-violation minutes" in pol.reason and "SLO of 2 violation minutes a day" in pol.reason and pol.costs
    priced = choose_policy(bursts, last, {"p50": last.copy()}, 1.0, ServingSettings())
    assert priced.headroom >= 1.2 and f"worth {DEFAULT_VIOLATION_WORTH_MINUTES:g} minutes of the whole workload" in priced.reason
    cheap = choose_policy(bursts, last, {"p50": last.copy()}, 1.0, ServingSettings(violation_worth_minutes=0))
    assert cheap.headroom == 1.0  # violations worth nothing and no SLO: the fewest pods win


def test_a_30_pod_and_a_3000_pod_workload_of_the_same_shape_get_the_same_policy():
    n = 600
    rng = np.random.default_rng(1)
    shape = 1 + 0.6 * (rng.random(n) < 0.1)  # bursts of +60% in one interval of ten
    policies = {}
    for size in (2.0, 20.0, 200.0, 2000.0):  # cores: ~3, ~30, ~300 and ~3000 pods of one core at 70%
        last = np.full(n, size)
        policies[size] = choose_policy(size * shape, last, {"p50": last.copy()}, 1.0, ServingSettings())
    # an exchange rate in pod-minutes (the rule before) bought headroom for the small and none
    # for the large; a price in minutes of the whole workload buys the same for all of them
    assert policies[20.0].headroom == policies[200.0].headroom == policies[2000.0].headroom > 1.0
    # a 3-pod workload's whole pods round its capacity up: it meets the SLO with less or the same
    assert 1.0 < policies[2.0].headroom <= policies[20.0].headroom


def test_an_slo_the_history_cannot_meet_serves_the_fewest_violations_unless_a_cost_ceiling_caps_it():
    n = 600
    last = np.full(n, 10.0)
    rng = np.random.default_rng(2)
    wild = 10 * np.exp(rng.normal(0, 0.5, n))  # no headroom on the grid carries all of these
    strict = choose_policy(wild, last, {"p50": last.copy()}, 1.0, ServingSettings(slo_minutes_per_day=0.01, cost_ceiling=0))
    assert "no candidate met the SLO" in strict.reason and strict.headroom == max(ServingSettings().headrooms)
    capped = choose_policy(wild, last, {"p50": last.copy()}, 1.0, ServingSettings(slo_minutes_per_day=0.01, cost_ceiling=1.3))
    assert "cost ceiling of 1.3x" in capped.reason and 1.0 < capped.headroom <= 1.3


def test_a_violation_lasts_the_minutes_demand_is_above_the_limit_on_its_linear_path():
    raw = np.array([10.0, 20.0, 20.0, 10.0])
    path = exposure(raw, np.array([0, 1]))
    # origin 0: half-way 10 -> 20 (15), then 20, then half-way to the next sample (20)
    assert path.tolist() == [[15.0, 20.0, 20.0], [20.0, 20.0, 15.0]]
    # a limit of 17.5 is crossed half-way up the first half interval (2.5 min): 1.25 + 2.5 min above it
    def minutes(p, limit):  # two half-interval slices of 2.5 min
        return violation_minutes(as_slices(p), np.asarray(limit)[:, None], 2.5).sum(axis=1).tolist()

    assert minutes(path[:1], [17.5]) == [3.75]
    assert minutes(path, [25.0, 25.0]) == [0.0, 0.0]
    assert minutes(path, [5.0, 5.0]) == [5.0, 5.0]
    # the last origin has no sample after the next one: its path ends flat at the next sample
    assert exposure(raw, np.array([2])).tolist() == [[15.0, 10.0, 10.0]]


def test_a_brief_spike_is_worth_less_headroom_than_a_long_one():
    n = 600
    last = np.full(n, 10.0)
    spikes = np.zeros(n, dtype=bool)
    spikes[::10] = True
    brief = np.stack([np.full(n, 10.0), np.where(spikes, 16.0, 10.0), np.full(n, 10.0)], axis=1)  # a needle at the sample
    long = np.stack([np.where(spikes, 16.0, 10.0)] * 3, axis=1)  # the whole interval at 16
    # 60 long spikes violate for 300 minutes, 60 needles for 125: an SLO of 96 minutes a day
    # allows 200 minutes in these 3,000, so the needles need no headroom and the long spikes do
    settings = ServingSettings(violation_worth_minutes=0, slo_minutes_per_day=96, sources=("persistence",))
    assert choose_policy(long, last, {}, 1.0, settings).headroom > choose_policy(brief, last, {}, 1.0, settings).headroom


def test_a_model_that_sees_the_rises_coming_beats_persistence_in_the_choice():
    n = 600
    actual = 10 + 8 * (np.arange(n) % 12 == 0)  # a rise every hour, on the hour
    last = np.roll(actual, 1)
    oracle_q = actual.astype(float)  # a model that forecasts the rise
    pol = choose_policy(actual, last, {"p90": oracle_q}, 1.0, ServingSettings(quantiles=("p90",)))
    assert pol.source == "model" and pol.quantile == "p90" and pol.headroom == 1.0
    # the fallback headroom is persistence's own best: it must cover the unforeseen rise
    assert pol.fallback_headroom > 1.0


def test_the_model_is_served_only_when_it_saves_the_margin_of_what_a_forecast_can_save():
    n = 600
    actual = 10 + 8 * (np.arange(n) % 12 == 0)
    last = np.roll(actual, 1).astype(float)
    seen = actual.astype(float).copy()
    seen[np.arange(n) % 24 == 0] = 10.0  # the model sees every other rise coming
    free = choose_policy(actual, last, {"p50": seen}, 1.0, ServingSettings(quantiles=("p50",), model_margin=0.0, violation_worth_minutes=0, slo_minutes_per_day=60))
    assert free.source == "model"
    # the margin is a share of persistence's cost above a clairvoyant HPA's at the same target
    path = np.repeat(actual[:, None].astype(float), 3, axis=1)
    ideal = clairvoyant_cost(path, 0.7 * 1.0, 5.0)
    share = (free.costs["persistence"] - free.costs["p50"]) / (free.costs["persistence"] - ideal)
    assert 0.05 < share < 0.95, (free.costs, ideal)
    strict = choose_policy(actual, last, {"p50": seen}, 1.0, ServingSettings(quantiles=("p50",), model_margin=share + 0.02, violation_worth_minutes=0, slo_minutes_per_day=60))
    assert strict.source == "persistence" and strict.headroom == strict.fallback_headroom
    assert "must cost below" in strict.reason
    loose = choose_policy(actual, last, {"p50": seen}, 1.0, ServingSettings(quantiles=("p50",), model_margin=share - 0.02, violation_worth_minutes=0, slo_minutes_per_day=60))
    assert loose.source == "model"
    assert any(p.startswith("serving.model_margin") for p in ServingSettings(model_margin=1.0).problems())


def test_a_forecast_of_a_rare_daily_peak_is_served_although_it_saves_little_of_the_total():
    # flat 0.6 cores with a 20-minute ramp to 3 cores once a day, at 1-minute samples: the forecast
    # sees every ramp coming, which is worth ~1% of the week's cost but most of what any forecast
    # could save (a margin on the total cost served persistence here)
    t = np.arange(0, 3 * 86400, 60)
    into = (t - 80000) % 86400
    y = np.where(into < 1200, np.minimum(0.6 + 0.6 * into / 60, 3.0), 0.6)
    o = np.arange(1440, len(y) - 1)
    perfect = {"p50": y[o + 1], "p90": y[o + 1]}
    for margin in (0.0, 0.1, 0.25):  # the default, and margins a cautious user may set
        pol = choose_policy(exposure(y, o), y[o], perfect, 0.5, ServingSettings(model_margin=margin, slo_minutes_per_day=1),
                            step_minutes=1.0, gaps=peak_gaps(y, o))
        assert pol.source == "model", (margin, pol.reason)
    # the ramp's ~2 violation minutes a day are within a laxer SLO: the cheapest then is not to forecast
    lax = choose_policy(exposure(y, o), y[o], perfect, 0.5, ServingSettings(violation_worth_minutes=0, slo_minutes_per_day=5),
                        step_minutes=1.0,
                        gaps=peak_gaps(y, o))
    assert lax.source == "persistence" and "within the SLO of 5" in lax.reason
    total_saving = 1 - pol.costs["p50"] / pol.costs["persistence"]
    assert total_saving < 0.1, pol.costs  # a 10% margin on the total cost was not met


def test_too_little_history_or_no_capacity_gives_the_documented_default():
    pol = choose_policy(np.ones(5), np.ones(5), {"p90": np.ones(5)}, 1.0, ServingSettings())
    assert pol.headroom == 1.0 and pol.source == "model" and "default" in pol.reason
    pol = choose_policy(np.ones(50), np.ones(50), {"p90": np.ones(50)}, 0.0, ServingSettings())
    assert "no capacity" in pol.reason


def test_the_trainer_chooses_and_publishes_a_versioned_policy_and_shows_why():
    ts, v = _bursty()
    store = MemoryForecastStore()
    tr = Trainer(store, models=("ar",), serving=ServingSettings())
    tr.fit("a/b", ts, v, now=ts[-1], capacity_per_pod=1.0)
    fc = tr.refresh("a/b", ts, v, now=ts[-1] + 90)
    assert fc.policy["version"] == POLICY_VERSION and fc.policy["headroom"] >= 1.1
    assert tr.status("a/b")["policy"] == fc.policy
    back = Forecast.from_json(fc.to_json())  # what Redis readers get
    assert back.policy == fc.policy
    assert ServingPolicy.from_dict(back.policy).reason == fc.policy["reason"]


def test_the_serving_config_is_validated_whole_with_paths():
    with pytest.raises(ConfigError) as e:
        parse_config({
            "training": {"quantiles": [0.5, 0.9]},
            "serving": {"violation_cost_pods": 300, "slo_minutes_per_day": -1, "quantiles": ["p75"], "headrooms": [0.9, 1.2], "sources": ["psychic"], "oops": 1},
            "workloads": [{"namespace": "a", "name": "b"}],
        })
    msg = str(e.value)
    assert "replaced by violation_worth_minutes" in msg  # the fix for the old exchange rate
    for path in ("serving.violation_cost_pods", "serving.slo_minutes_per_day", "serving.quantiles[0]", "serving.headrooms[0]", "serving.sources[0]", "serving.oops"):
        assert path in msg
    assert "training.quantiles" in msg  # the fix for an unpublished quantile
    assert "allow_below_observed" in msg  # the fix for a discount below observed
    ok = parse_config({"serving": {"headrooms": [0.95, 1.0], "allow_below_observed": True},
                       "workloads": [{"namespace": "a", "name": "b"}]})
    assert ok.serving.headrooms == (0.95, 1.0)


def _fc(policy: dict | None, status="ok", q90=12.0, obs=10.0, generated=T0):
    # origin 400 s ago: the lead window lies past the first knot, on the flat published path
    return make_forecast("a/b", origin=T0 - 400, step_seconds=300, mean=[q90 - 2] * 12,
                         quantiles={"p50": [q90 - 2] * 12, "p90": [q90] * 12}, model="ar", generated_at=generated,
                         status=status, observed=((T0 - 400, obs),), policy=policy or {})


def _pol(**kw) -> dict:
    return ServingPolicy(**kw).to_dict()


def test_a_published_policy_that_would_serve_below_observed_is_refused_unless_chosen_so():
    S = MetricSettings()
    low = _pol(quantile="p50", headroom=0.8)  # x0.8 of max(10, 10): 8 < observed 10
    sv = served_cores(_fc(low), T0, S)
    assert sv.source == "observed" and sv.value == pytest.approx(10.0) and "refused" in sv.reason
    assert "allow_below_observed" in sv.reason  # the setting that would allow it
    states = _pol(quantile="p50", headroom=1.2, gap_edges=(0.1,), headrooms=(1.2, 0.9), fallback_headrooms=(1.0, 1.0))
    assert "refused" in served_cores(_fc(states), T0, S).reason  # a state's headroom counts too
    allowed = ServingPolicy(quantile="p50", headroom=0.8, below_observed=True).to_dict()
    assert served_cores(_fc(allowed), T0, S, observed=9.0).value == pytest.approx(8.0)  # 0.8 x p50 10
    # the chooser marks what it chose with allow_below_observed, so it reads back
    n = 200
    flat = np.full(n, 10.0)
    pol = choose_policy(flat, flat, {"p50": flat}, 1.0, ServingSettings(quantiles=("p50",), headrooms=(0.9, 1.0),
                                                                          allow_below_observed=True, violation_worth_minutes=0))
    assert min(pol.headrooms or (pol.headroom,)) == 0.9 and ServingPolicy.from_dict(pol.to_dict()).below_observed


def test_the_adapter_applies_the_published_policy():
    S = MetricSettings()
    assert served_cores(_fc(None), T0, S).value == pytest.approx(12.0)  # no policy: p90 as before
    assert served_cores(_fc(_pol(quantile="p50", headroom=1.5)), T0, S).value == pytest.approx(15.0)
    sv = served_cores(_fc(_pol(source="persistence", headroom=1.2)), T0, S, observed=9.0)
    assert sv.value == pytest.approx(10.8) and sv.headroom == 1.2  # 1.2 x the demand read now (9), not the last sample 10
    assert served_cores(_fc(_pol(source="persistence", headroom=1.2)), T0, S).value == pytest.approx(12.0)  # no reading
    fb = served_cores(_fc(_pol(headroom=1.5, fallback_headroom=1.3), status="fallback"), T0, S, observed=10.0)
    assert fb.source == "observed" and fb.value == pytest.approx(13.0)
    stale = served_cores(_fc(_pol(headroom=1.5), generated=T0 - 3600), T0, S, observed=10.0)
    assert stale.value == pytest.approx(10.0) and "stale" in stale.reason  # degrade to plain reactive
    bad = served_cores(_fc({"version": 99, "headroom": 3}), T0, S)
    assert bad.value == pytest.approx(12.0) and "ignored" in bad.reason
    r = served_load_ratio(_fc(_pol(quantile="p50", headroom=1.5)), T0, 3, 0.5, S)
    assert r.value == pytest.approx(15.0 / 1.5) and r.headroom == 1.5


def test_a_forecasts_policy_is_read_once_however_often_it_is_served_and_stays_out_of_its_fields(monkeypatch):
    import dataclasses

    reads = []
    real = ServingPolicy.from_dict.__func__
    monkeypatch.setattr(ServingPolicy, "from_dict", classmethod(lambda cls, d: reads.append(d) or real(cls, d)))
    fc = _fc(_pol(quantile="p50", headroom=1.5, gap_edges=(0.2,), headrooms=(1.5, 2.0), fallback_headrooms=(1.1, 1.3)))
    twin = dataclasses.replace(fc)
    values = [served_cores(fc, T0 + 10 * i, MetricSettings()).value for i in range(5)]
    assert len(reads) == 1 and values == [pytest.approx(15.0)] * 5
    assert fc == twin and fc.to_json() == twin.to_json() and dataclasses.asdict(fc) == dataclasses.asdict(twin)
    assert served_cores(twin, T0, MetricSettings()).value == pytest.approx(15.0) and len(reads) == 2  # its own read
    assert served_cores(_fc({"version": 99}), T0, MetricSettings()).value == pytest.approx(12.0)  # refused ones too


def test_held_floor_is_the_max_of_the_last_k_samples_ignoring_gaps():
    v = np.array([1.0, 5.0, np.nan, 2.0, 3.0])
    o = np.arange(5)
    assert held_floor(v, o, 1)[[0, 1, 3, 4]].tolist() == [1.0, 5.0, 2.0, 3.0]
    assert held_floor(v, o, 2).tolist() == [1.0, 5.0, 5.0, 2.0, 3.0]
    assert held_floor(v, o, 3).tolist() == [1.0, 5.0, 5.0, 5.0, 3.0]


def test_a_workload_whose_bursts_return_after_a_dip_is_served_with_a_hold():
    n = 600
    actual_all = np.tile([10.0, 10.0, 2.0], n // 3 + 2)  # bursts resume after a one-sample dip
    origins = np.arange(2, n + 2)
    last, nxt = actual_all[origins], actual_all[origins + 1]
    p50 = np.full(n, 7.0)  # a model that cannot tell the dip from the burst
    floors = {k: held_floor(actual_all, origins, k) for k in (2, 3)}
    pol = choose_policy(nxt, last, {"p50": p50}, 1.0, ServingSettings(quantiles=("p50",), holds=(1, 2, 3)), floors=floors)
    assert pol.hold >= 2 and "hold" in pol.reason, pol.reason
    # without the candidate holds the same choice has to buy the bursts with headroom or violations
    one = choose_policy(nxt, last, {"p50": p50}, 1.0, ServingSettings(quantiles=("p50",), holds=(1,)), floors=floors)
    assert one.hold == 1 and min(one.costs.values()) > min(pol.costs.values())
    # a steady series needs no hold: the shortest hold wins the tie
    flat = np.full(n, 10.0)
    steady = choose_policy(flat, flat, {"p50": flat}, 1.0, ServingSettings(quantiles=("p50",)),
                           floors={2: flat, 3: flat})
    assert steady.hold == 1


def test_the_adapter_floors_at_the_max_of_the_last_k_published_samples():
    S = MetricSettings()
    obs = tuple((T0 - 400 - 300 * i, v) for i, v in reversed(list(enumerate([3.0, 9.0, 20.0]))))
    fc = make_forecast("a/b", origin=T0 - 400, step_seconds=300, mean=[4.0] * 12, quantiles={"p90": [5.0] * 12},
                       model="ar", generated_at=T0, observed=obs, policy=_pol(hold=2, headroom=1.5))
    sv = served_cores(fc, T0, S, observed=3.5)
    assert sv.value == pytest.approx(1.5 * 9.0) and "hold 2" in sv.reason  # max(3.5, 3, 9) x 1.5
    fc3 = make_forecast("a/b", origin=T0 - 400, step_seconds=300, mean=[4.0] * 12, quantiles={"p90": [5.0] * 12},
                        model="ar", generated_at=T0, observed=obs, policy=_pol(source="persistence", hold=3))
    assert served_cores(fc3, T0, S, observed=3.5).value == pytest.approx(20.0)
    fb = make_forecast("a/b", origin=T0 - 400, step_seconds=300, mean=[4.0] * 12, quantiles={"p90": [5.0] * 12},
                       model="ar", generated_at=T0, observed=obs, status="fallback",
                       policy=_pol(fallback_hold=2, fallback_headroom=1.2))
    assert served_cores(fb, T0, S, observed=3.5).value == pytest.approx(1.2 * 9.0)
    # a stale forecast's tail is no floor: its last sample, plain, as a reactive HPA (the adapter's
    # degradation ladder: observed, then observed-direct once the sample is too old)
    old = make_forecast("a/b", origin=T0 - 400, step_seconds=300, mean=[4.0] * 12, quantiles={"p90": [5.0] * 12},
                        model="ar", generated_at=T0 - 3600, observed=obs, policy=_pol(hold=3))
    assert served_cores(old, T0, S, observed=3.5).value == pytest.approx(3.0)


def test_policies_of_version_1_read_as_hold_1_and_bad_holds_are_refused():
    v1 = {"version": 1, "source": "model", "quantile": "p90", "headroom": 1.2, "fallback_headroom": 1.1}
    pol = ServingPolicy.from_dict(v1)
    assert pol.hold == 1 and pol.fallback_hold == 1 and pol.headroom == 1.2
    for bad in (0, 13, 1.5, True):
        with pytest.raises(ValueError):
            ServingPolicy.from_dict({**_pol(), "hold": bad})
    probs = ServingSettings(holds=(0, 2, 13)).problems()
    assert any(p.startswith("serving.holds[0]") for p in probs) and any(p.startswith("serving.holds[2]") for p in probs)
    with pytest.raises(ConfigError) as e:
        parse_config({"serving": {"holds": [1, "two"]}, "workloads": [{"namespace": "a", "name": "b"}]})
    assert "serving.holds" in str(e.value)
    assert parse_config({"serving": {"holds": [1, 4]}, "workloads": [{"namespace": "a", "name": "b"}]}).serving.holds == (1, 4)


@pytest.mark.parametrize("seed", range(20))
def test_a_served_value_is_never_below_the_observed_demand(seed):
    rng = np.random.default_rng(seed)
    for _ in range(50):
        pol = _pol(source=str(rng.choice(["model", "persistence"])), quantile=str(rng.choice(["p50", "p90"])),
                   headroom=float(rng.choice([1.0, 1.1, 2.0])), fallback_headroom=float(rng.choice([1.0, 1.3])),
                   hold=int(rng.integers(1, 4)), fallback_hold=int(rng.integers(1, 4)))
        obs = float(rng.uniform(0, 50))
        fc = _fc(pol, status=str(rng.choice(["ok", "fallback"])), q90=float(rng.uniform(0, 50)), obs=float(rng.uniform(0, 50)))
        sv = served_cores(fc, T0 + float(rng.uniform(0, 200)), MetricSettings(), observed=obs)
        assert sv.value >= obs - 1e-12 and math.isfinite(sv.value)


def test_rest_and_the_dashboard_show_the_policy_and_why():
    import dataclasses
    import time

    from fastapi.testclient import TestClient

    from adapter.app import create_app
    from adapter.settings import AdapterSettings
    from tests.adapter.helpers import sample_forecast

    now = time.time()
    pol = _pol(quantile="p50", headroom=1.27, fallback_headroom=1.4, reason="over the last 575 intervals, p50 x1.27 cost 9000")
    fc = dataclasses.replace(sample_forecast(now=now), policy=pol)
    store = MemoryForecastStore()
    store.publish(fc)
    with TestClient(create_app(AdapterSettings(), store, clock=lambda: now)) as c:
        d = c.get("/api/v1/forecasts/shop/checkout").json()
        assert d["serving_policy"]["headroom"] == 1.27 and "575 intervals" in d["serving_policy"]["reason"]
        assert d["served"]["predicted_cpu_cores"]["headroom"] == 1.27
        page = c.get("/").text
        assert "Serves the p50 forecast plus 27%. Without a fresh forecast: the last observed value plus 40%." in page
        assert "575 intervals" in page


def test_the_peak_gap_is_how_far_demand_now_sits_below_the_last_hours_peak():
    from forecaster.servingscore import peak_gap, peak_gaps

    assert peak_gap([10.0, 20.0, 5.0]) == pytest.approx(0.75)
    assert peak_gap([5.0, 10.0, 20.0]) == 0.0  # at the peak
    assert peak_gap([]) == 0.0 and peak_gap([0.0, 0.0]) == 0.0 and peak_gap([np.nan]) == 0.0
    assert peak_gap([40.0] + [10.0] * 12) == 0.0  # only the last 12 samples (an hour at 5 min) count
    assert peak_gap([20.0, np.nan, 10.0]) == pytest.approx(0.5)  # gaps in the history are skipped
    v = np.array([10.0, 20.0, 5.0, 30.0])
    assert peak_gaps(v, np.arange(4)).tolist() == pytest.approx([0.0, 0.0, 0.75, 0.0])


def test_gap_states_split_the_week_into_ranges_none_of_them_empty():
    from forecaster.servingscore import gap_edges, gap_state

    g = np.r_[np.zeros(70), np.linspace(0.01, 0.9, 30)]  # mostly at the peak: ties collapse edges
    edges = gap_edges(g, 3)
    st = gap_state(g, edges)
    assert len(edges) == 1 and edges[0] == 0.0  # 0 and above 0, not an empty third state
    assert set(st.tolist()) == {0, 1} and (st[:70] == 0).all()
    u = np.linspace(0, 1, 100)
    e5 = gap_edges(u, 5)
    assert len(e5) == 4 and np.bincount(gap_state(u, e5)).tolist() == [20, 20, 20, 20, 20]
    assert gap_edges(u, 1) == () and gap_edges(np.full(10, 0.3), 3) == ()


def _after_bursts(n=2000, seed=1):
    """Bursts come only after a dip below the recent peak (the state the policy sees)."""
    rng = np.random.default_rng(seed)
    gaps = rng.choice([0.0, 0.1, 0.6], size=n, p=[0.5, 0.3, 0.2])
    last = np.full(n, 10.0)
    nxt = np.where((gaps > 0.5) & (rng.random(n) < 0.5), 16.0, 10.0)
    return nxt, last, gaps


def test_a_workload_whose_bursts_follow_dips_gets_headroom_only_after_them():
    nxt, last, gaps = _after_bursts()
    one = choose_policy(nxt, last, {"p50": last.copy()}, 1.0, ServingSettings(peak_gap_states=1), gaps=gaps)
    three = choose_policy(nxt, last, {"p50": last.copy()}, 1.0, ServingSettings(peak_gap_states=3), gaps=gaps)
    assert one.gap_edges == () and one.headroom > 1.0
    assert three.gap_edges == (0.0, 0.1) and three.headrooms[:2] == (1.0, 1.0) and three.headrooms[2] > 1.0
    assert three.headroom == max(three.headrooms)
    assert min(three.costs.values()) < min(one.costs.values())  # the same violations for fewer pods
    assert three.headroom_at(0.0) == 1.0 and three.headroom_at(0.7) == three.headrooms[2]
    d = ServingPolicy.from_dict(three.to_dict())
    assert d == three and "x1/1/" in three.reason


def test_the_adapter_applies_the_headroom_of_the_state_the_observed_samples_are_in():
    S = MetricSettings()
    pol = _pol(quantile="p50", headroom=1.5, gap_edges=(0.2,), headrooms=(1.0, 1.5), fallback_headrooms=(1.1, 1.3))

    def fc(obs, status="ok"):
        return make_forecast("a/b", origin=T0 - 400, step_seconds=300, mean=[8.0] * 12,
                             quantiles={"p50": [8.0] * 12, "p90": [9.0] * 12}, model="ar", generated_at=T0,
                             status=status, observed=tuple((T0 - 400 - 300 * i, v) for i, v in enumerate(obs[::-1]))[::-1],
                             policy=pol)
    at_peak = served_cores(fc([6.0, 7.0, 8.0]), T0, S)  # gap 0: state 0
    assert at_peak.value == pytest.approx(8.0) and at_peak.headroom == 1.0
    past = served_cores(fc([16.0, 7.0, 8.0]), T0, S)  # gap 0.5: state 1
    assert past.value == pytest.approx(12.0) and past.headroom == 1.5 and "50% below its recent peak" in past.reason
    fb = served_cores(fc([16.0, 7.0, 8.0], status="fallback"), T0, S, observed=8.0)
    assert fb.source == "observed" and fb.value == pytest.approx(8.0 * 1.3)


def test_published_headroom_states_are_checked_and_version_2_reads_without_states():
    v2 = {"version": 2, "source": "model", "quantile": "p90", "headroom": 1.2, "fallback_headroom": 1.1, "hold": 1}
    pol = ServingPolicy.from_dict(v2)
    assert pol.gap_edges == () and pol.headroom_at(0.9) == 1.2 and pol.headroom_at(0.9, fallback=True) == 1.1
    good = _pol(gap_edges=(0.1, 0.4), headrooms=(1.0, 1.2, 1.5), fallback_headrooms=(1.0, 1.1, 1.4))
    assert ServingPolicy.from_dict(good).headroom_at(0.4) == 1.2  # an edge belongs to the state below it
    for bad in ({"headrooms": [1.0, 1.2]}, {"gap_edges": [0.4, 0.1]}, {"gap_edges": [0.1, 1.5]},
                {"fallback_headrooms": [1.0, -1.0, 1.0]}, {"gap_edges": "0.1"}):
        with pytest.raises(ValueError):
            ServingPolicy.from_dict({**good, **bad})
    probs = ServingSettings(peak_gap_states=0).problems() + ServingSettings(peak_gap_states=9).problems()
    assert len(probs) == 2 and all(p.startswith("serving.peak_gap_states") for p in probs)
    with pytest.raises(ConfigError) as e:
        parse_config({"serving": {"peak_gap_states": 2.5}, "workloads": [{"namespace": "a", "name": "b"}]})
    assert "serving.peak_gap_states" in str(e.value)
    assert parse_config({"serving": {"peak_gap_states": 4},
                         "workloads": [{"namespace": "a", "name": "b"}]}).serving.peak_gap_states == 4


def test_rest_and_the_dashboard_show_a_policys_headroom_states():
    import dataclasses
    import time

    from fastapi.testclient import TestClient

    from adapter.app import create_app
    from adapter.settings import AdapterSettings
    from tests.adapter.helpers import sample_forecast

    now = time.time()
    pol = _pol(headroom=1.5, gap_edges=(0.0, 0.3), headrooms=(1.0, 1.2, 1.5), fallback_headrooms=(1.0, 1.1, 1.4))
    store = MemoryForecastStore()
    store.publish(dataclasses.replace(sample_forecast(now=now), policy=pol))
    with TestClient(create_app(AdapterSettings(), store, clock=lambda: now)) as c:
        d = c.get("/api/v1/forecasts/shop/checkout").json()
        assert d["serving_policy"]["headrooms"] == [1.0, 1.2, 1.5] and d["serving_policy"]["gap_edges"] == [0.0, 0.3]
        page = c.get("/").text
        assert ("Serves the p90 forecast plus 20% to 50% depending on how far demand sits below its recent peak "
                "(as is at the peak). Without a fresh forecast: the last observed value with up to 40% headroom.") in page


def test_a_fresh_forecast_from_samples_that_stopped_is_not_served_without_its_floor():
    from forecaster.served import NoData

    S = MetricSettings()
    fc = make_forecast("a/b", origin=T0 - 400, step_seconds=300, mean=[4.0] * 12, quantiles={"p90": [4.0] * 12},
                       model="ar", generated_at=T0, observed=((T0 - S.max_observed_age_seconds - 60, 10.0),))
    with pytest.raises(NoData, match="stopped delivering"):  # the HPA keeps its CPU metric; nothing below 10 is served
        served_cores(fc, T0, S)
    # nor with a direct reading at hand: the adapter serves that reading itself (observed-direct)
    with pytest.raises(NoData, match="stopped delivering"):
        served_cores(fc, T0, S, observed=10.0)
