"""Node-load forecasts (forecaster/nodes/): the join, CPU and memory training against a real
Prometheus, and the pure scoring/affinity rules shared by the extender and the warm pool."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
from hypothesis import given, settings as hsettings, strategies as st

from core.errors import UserError
from core.store import MemoryForecastStore, make_forecast
from forecaster.nodes import (
    MAX_SCORE,
    NEUTRAL_SCORE,
    NodeForecastSettings,
    NodeInventory,
    NodeScoreSettings,
    NodeTrainReport,
    assess_nodes,
    build_memory_forecasts,
    forecast_utilization,
    instance_host,
    labels_from_series_name,
    preferred_node_affinity,
    score_for_load,
    score_for_pod,
    split_hot,
    train_nodes_once,
    window_max,
)
from forecaster.sources.prometheus import PrometheusSource, series_name
from tests.scheduler.cluster import MEMORY_PER_CORE, NODES, build_families, memory_fraction

NOW = 1_800_000_000.0


def node_fc(name, p90, *, zone="z", age=10.0, observed=None, status="ok", cores=1.0, step=60.0):
    p90 = list(p90)
    obs = () if observed is None else ((NOW - age, observed),)
    return make_forecast(
        f"node/{name}",
        origin=NOW - age,
        step_seconds=step,
        mean=[min(v, 1.0) for v in p90],
        quantiles={"p90": p90},
        model="ar",
        generated_at=NOW - age,
        observed=obs,
        status=status,
        reason="model failed" if status != "ok" else "",
        meta={"kind": "Node", "node": name, "zone": zone, "cpu_cores": cores},
    )


# -- the instance -> node join ---------------------------------------------------------------


def test_instance_host_strips_ports_and_ipv6_brackets_but_keeps_plain_names():
    assert instance_host("10.0.0.7:9100") == "10.0.0.7"
    assert instance_host("[fd00::7]:9100") == "fd00::7"
    assert instance_host("node-a") == "node-a"
    assert instance_host("fd00::7") == "fd00::7"  # bare IPv6 has more than one colon


def test_join_resolves_relabeled_names_and_internal_ips_and_refuses_to_guess_the_rest():
    inv = NodeInventory.from_samples(
        [({"node": "node-a", "internal_ip": "10.0.0.1"}, 1.0), ({"node": "node-b", "internal_ip": "10.0.0.2"}, 1.0)],
        [({"node": "node-a", "label_topology_kubernetes_io_zone": "eu-1a"}, 1.0),
         ({"node": "node-b", "label_failure_domain_beta_kubernetes_io_zone": "eu-1b"}, 1.0)],
    )
    assert inv.resolve("10.0.0.1:9100") == ("node-a", "eu-1a")
    assert inv.resolve("node-b:9100") == ("node-b", "eu-1b")  # deprecated zone label as fallback
    assert inv.resolve("10.0.0.99:9100") is None
    # without kube-state-metrics the instance host is the node name and the zone is unknown
    assert NodeInventory().resolve("worker-7:9100") == ("worker-7", "")


def test_series_names_of_the_prometheus_source_parse_back_to_their_labels():
    labels = {"instance": "10.0.0.1:9100", "job": 'we"ird'}
    assert labels_from_series_name(series_name(labels)) == labels


# -- training against a real Prometheus -------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(prometheus_factory, trace_slice):
    end = math.floor(time.time() / 300) * 300 - 600
    families, truth = build_families(trace_slice, end, hours=8)
    srv = prometheus_factory(families)
    return srv, end, truth


def test_training_publishes_node_and_zone_forecasts_that_start_from_the_real_utilization(cluster):
    srv, end, truth = cluster
    store = MemoryForecastStore()
    settings = NodeForecastSettings(step_seconds=300, history_seconds=6 * 3600, horizon_seconds=900)
    report = train_nodes_once(PrometheusSource(srv.url), store, now=end, settings=settings)

    known = [n for n in NODES if n.in_inventory]
    assert report.nodes == sorted(n.name for n in known)
    assert report.unresolved == ["10.9.9.9:9100"]  # the ghost instance is reported, not invented
    with_memory = [n for n in known if n.memory_trace]
    assert store.list_series() == sorted([f"node/{n.name}" for n in known] + ["zone/zone-a", "zone/zone-b"]
                                         + [f"node-memory/{n.name}" for n in with_memory])
    assert report.memory_nodes == [n.name for n in with_memory] and report.memory_error == ""
    for node in known:
        fc = store.latest(f"node/{node.name}")
        # the default utilization is a rate over 5 minutes: it runs 150 s behind the node
        assert fc.meta == {"kind": "Node", "node": node.name, "zone": node.zone, "instance": node.instance,
                           "cpu_cores": float(node.cores), "demand_lag_seconds": 150.0}
        assert fc.origin == end and len(fc.mean) == 3
        # the last observed point is the rate() of the counters = the trace's last 5 minutes
        assert fc.observed[-1][1] == pytest.approx(truth[node.name][1][-1], abs=1e-6)
        for values in (fc.mean, *fc.quantiles.values()):
            assert all(0.0 <= v <= 1.0 for v in values)
        assert all(p90 >= p50 for p50, p90 in zip(fc.quantiles["p50"], fc.quantiles["p90"]))
    # a zone is the core-weighted mean of its nodes
    a, b = (n for n in known if n.zone == "zone-a")
    expected = (a.cores * truth[a.name][1][-1] + b.cores * truth[b.name][1][-1]) / (a.cores + b.cores)
    zone = store.latest("zone/zone-a")
    assert zone.observed[-1][1] == pytest.approx(expected, abs=1e-6)
    assert zone.meta["nodes"] == 2 and zone.meta["cpu_cores"] == float(a.cores + b.cores)
    assert zone.meta["demand_lag_seconds"] == 150.0
    for node in with_memory:  # memory in use is a gauge: read as it is
        assert "demand_lag_seconds" not in store.latest(f"node-memory/{node.name}").meta


def test_a_model_that_fails_falls_back_to_persistence_and_says_why():
    y = 0.5 + 0.1 * np.sin(np.arange(100) / 4)
    mean, qs, model, status, reason = forecast_utilization(y, NodeForecastSettings(model="no-such-model", horizon_seconds=300))
    assert (model, status) == ("persistence", "fallback")
    assert "no-such-model" in reason
    assert np.allclose(mean, y[-1]) and len(mean) == 5
    assert np.all(qs["p90"] >= qs["p50"]) and np.all((qs["p90"] >= 0) & (qs["p90"] <= 1))


def test_utilization_forecasts_stay_within_zero_and_one_even_for_a_series_at_the_ceiling():
    y = np.r_[np.linspace(0.6, 1.0, 80), np.full(40, 1.0)]
    y[5:9] = np.nan  # gaps are carried over, never published
    mean, qs, *_ = forecast_utilization(y, NodeForecastSettings(model="ar", horizon_seconds=600))
    for v in (mean, *qs.values()):
        assert np.isfinite(v).all() and v.min() >= 0.0 and v.max() <= 1.0


def test_bad_node_forecast_settings_list_every_problem():
    with pytest.raises(UserError) as e:
        NodeForecastSettings(step_seconds=0, quantiles=(1.5,), min_points=1)
    assert "step_seconds" in str(e.value) and "quantiles" in str(e.value) and "min_points" in str(e.value)


# -- scoring -----------------------------------------------------------------------------------


def test_load_is_the_quantile_max_over_the_horizon_not_the_whole_forecast():
    fc = node_fc("n", [0.3, 0.4, 0.5, 0.6, 0.7, 0.95], age=0.0, step=60.0)
    assert window_max(fc, NOW, 180.0, "p90") == pytest.approx(0.5)
    assert window_max(fc, NOW, 600.0, "p90") == pytest.approx(0.95)
    assert window_max(fc, NOW + 3600, 60.0, "p90") is None  # the forecast ended: no opinion


def test_a_rate_windowed_node_series_is_read_its_lag_later_on_its_own_clock():
    """A utilization measured as rate(...[5m]) shows a rise 150 s after the node has it: the
    window [now, now + 180 s] of the node is [now + 150, now + 330] on the series' clock."""
    fc = node_fc("n", [0.3, 0.4, 0.5, 0.6, 0.7, 0.95], age=0.0, step=60.0)
    lagged = make_forecast(fc.series_id, origin=fc.origin, step_seconds=60.0, mean=fc.mean, quantiles=fc.quantiles,
                           model="ar", generated_at=fc.generated_at, meta={**fc.meta, "demand_lag_seconds": 150.0})
    assert window_max(lagged, NOW, 180.0, "p90") == pytest.approx(0.7 + 0.5 * 0.25)  # t = 330 s: 0.7 -> 0.95
    assert window_max(lagged, NOW, 180.0, "p90") > window_max(fc, NOW, 180.0, "p90")
    assert window_max(lagged, NOW + 250, 60.0, "p90") is None  # 400 s on its clock: past the last point
    bad = make_forecast(fc.series_id, origin=fc.origin, step_seconds=60.0, mean=fc.mean, quantiles=fc.quantiles,
                        model="ar", generated_at=fc.generated_at, meta={**fc.meta, "demand_lag_seconds": "soon"})
    assert window_max(bad, NOW, 180.0, "p90") == window_max(fc, NOW, 180.0, "p90")  # an unreadable lag counts as 0


def test_hot_nodes_are_split_off_with_a_reason_unless_every_candidate_is_hot():
    loads, _ = assess_nodes(
        {"node/cool": node_fc("cool", [0.2] * 5), "node/hot": node_fc("hot", [0.7, 0.9, 0.95, 0.9, 0.9])}, NOW, NodeScoreSettings()
    )
    passed, failed = split_hot(["hot", "cool", "unknown"], loads, NodeScoreSettings())
    assert passed == ["cool", "unknown"]
    assert set(failed) == {"hot"} and "0.95" in failed["hot"] and "0.85" in failed["hot"]
    assert "judged on CPU only" in failed["hot"]  # no memory forecast: said, not hidden
    assert split_hot(["hot"], loads, NodeScoreSettings()) == (["hot"], {})


def test_stale_and_fallback_forecasts_are_neutral_or_observed_never_hot_from_old_data():
    s = NodeScoreSettings(max_forecast_age_seconds=300)
    fcs = {
        "node/old": node_fc("old", [0.99] * 30, age=3600.0, observed=0.99),
        "node/fb": node_fc("fb", [0.99] * 5, observed=0.1, status="fallback"),
    }
    loads, _ = assess_nodes(fcs, NOW, s)
    assert loads["old"].status == "stale" and loads["old"].score == NEUTRAL_SCORE and not loads["old"].hot
    assert loads["fb"].status == "fallback" and loads["fb"].load == pytest.approx(0.1) and not loads["fb"].hot


def test_zone_load_is_the_zone_forecast_when_fresh_else_the_core_weighted_node_mean():
    s = NodeScoreSettings(zone_weight=0.5)
    fcs = {"node/a": node_fc("a", [0.2] * 5, zone="z1", cores=3), "node/b": node_fc("b", [0.6] * 5, zone="z1", cores=1)}
    _, zones = assess_nodes(fcs, NOW, s)
    assert zones["z1"] == pytest.approx((3 * 0.2 + 1 * 0.6) / 4)
    zfc = make_forecast("zone/z1", origin=NOW, step_seconds=60, mean=[0.9] * 5, quantiles={"p90": [0.9] * 5}, model="ar", generated_at=NOW)
    loads, zones = assess_nodes({**fcs, "zone/z1": zfc}, NOW, s)
    assert zones["z1"] == pytest.approx(0.9)
    assert loads["a"].score == score_for_load(0.2, 0.9, 0.5)


@hsettings(max_examples=200, deadline=None)
@given(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1), st.floats(0, 1))
def test_scores_are_integers_in_the_extender_range_and_never_rise_with_load(a, b, zone, w):
    lo, hi = min(a, b), max(a, b)
    s_lo, s_hi = score_for_load(lo, zone, w), score_for_load(hi, zone, w)
    assert isinstance(s_lo, int) and 0 <= s_hi <= s_lo <= MAX_SCORE


# -- nodeAffinity preferences -----------------------------------------------------------------


def test_affinity_prefers_the_best_nodes_one_field_value_per_term_in_stable_order():
    scores = {"n1": 7, "n2": 9, "n3": 7, "n4": 3, "n5": 8}
    aff = preferred_node_affinity(scores, top_n=3, avoid=["n4"])
    terms = aff["preferredDuringSchedulingIgnoredDuringExecution"]
    picked = [t["preference"]["matchFields"][0]["values"] for t in terms[:3]]
    assert picked == [["n2"], ["n5"], ["n1"]]  # n1 before n3: ties keep input order
    assert [t["weight"] for t in terms[:3]] == [90, 80, 70]
    # the API allows exactly one value per In/NotIn matchFields requirement
    for t in terms:
        for req in t["preference"].get("matchFields", []):
            assert req["key"] == "metadata.name" and len(req["values"]) == 1
        assert 1 <= t["weight"] <= 100
    avoid = terms[3]["preference"]["matchFields"]
    assert avoid == [{"key": "metadata.name", "operator": "NotIn", "values": ["n4"]}]
    assert preferred_node_affinity({"n": NEUTRAL_SCORE})["preferredDuringSchedulingIgnoredDuringExecution"] == []


def test_affinity_dict_round_trips_through_the_kubernetes_client_model():
    from kubernetes.client import ApiClient

    aff = preferred_node_affinity({"a": 8, "b": 6}, zone_scores={"eu-1a": 9, "eu-1b": 2}, avoid=["c"])

    client = ApiClient()
    # the dict -> model step of ApiClient.deserialize (its public signature differs by version)
    model = client._ApiClient__deserialize(json.loads(json.dumps(aff)), "V1NodeAffinity")
    assert client.sanitize_for_serialization(model) == aff
    zone_terms = [t for t in aff["preferredDuringSchedulingIgnoredDuringExecution"] if "matchExpressions" in t["preference"]]
    assert zone_terms == [{"weight": 90, "preference": {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["eu-1a"]}]}}]


def test_the_warm_pool_gets_the_same_preferences_from_the_store_as_the_placement_api():
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from adapter.scheduler import register_scheduler_routes
    from forecaster.nodes import placement_affinity

    store = MemoryForecastStore()
    now = time.time()
    for name, load, zone in [("n1", 0.2, "za"), ("n2", 0.5, "za"), ("n3", 0.9, "zb"), ("n4", 0.0, "zb")]:
        fc = node_fc(name, [load] * 10, zone=zone)
        store.publish(make_forecast(fc.series_id, origin=now, step_seconds=60, mean=fc.mean, quantiles=fc.quantiles,
                                    model="ar", generated_at=now, meta=fc.meta))
    aff = placement_affinity(store, now=now)
    terms = aff["preferredDuringSchedulingIgnoredDuringExecution"]
    assert terms[0]["preference"]["matchFields"][0]["values"] == ["n4"]  # coolest node first
    assert {"key": "metadata.name", "operator": "NotIn", "values": ["n3"]} in [r for t in terms for r in t["preference"].get("matchFields", [])]
    app = FastAPI()
    register_scheduler_routes(app, store)
    assert TestClient(app).get("/api/v1/placement").json()["preferred_node_affinity"] == aff


def test_the_node_schedule_publishes_each_tick_and_survives_a_failing_cycle():
    import pandas as pd

    from forecaster.nodes import run_nodes_schedule
    from forecaster.sources.base import SourceUnavailable

    class Source:
        calls = 0

        def fetch(self, query, start, end, step):
            if query != NodeForecastSettings().query:  # memory: this fake node exports none
                return pd.DataFrame({"series_id": [], "timestamp": pd.to_datetime([], utc=True), "value": []})
            Source.calls += 1
            if Source.calls == 2:
                raise SourceUnavailable("prometheus restarting")
            ts = pd.to_datetime(end - 60 * np.arange(60)[::-1], unit="s", utc=True)
            return pd.DataFrame({"series_id": '{instance="w1:9100"}', "timestamp": ts, "value": 0.3})

        def instant(self, query, t):
            return []

    clock = [NOW + 7.0]
    slept = []

    def sleep(d):
        slept.append(d)
        clock[0] += d

    store = MemoryForecastStore()
    cycles = run_nodes_schedule(Source(), store, NodeForecastSettings(model="persistence"), interval_seconds=60,
                                clock=lambda: clock[0], sleep=sleep, max_cycles=3)
    assert cycles == 3 and Source.calls == 3
    assert slept[0] == pytest.approx(53.0)  # aligned to the next minute
    fc = store.latest("node/w1")
    assert fc.generation == 2 and fc.meta["zone"] == ""  # cycles 1 and 3 published, 2 failed


# -- memory ------------------------------------------------------------------------------------


def mem_fc(name, frac, *, allocatable=16 * 2**30, age=10.0, zone="z", status="ok"):
    values = [frac] * 10 if isinstance(frac, float) else list(frac)
    return make_forecast(
        f"node-memory/{name}", origin=NOW - age, step_seconds=60, mean=values, quantiles={"p90": values},
        model="ar", generated_at=NOW - age, observed=((NOW - age, values[0]),), status=status,
        meta={"kind": "NodeMemory", "node": name, "zone": zone, "memory_bytes": allocatable},
    )


def test_memory_forecasts_from_a_real_prometheus_are_fractions_of_allocatable_even_across_a_scrape_gap(cluster, trace_slice):
    srv, end, truth = cluster
    store = MemoryForecastStore()
    settings = NodeForecastSettings(step_seconds=300, history_seconds=6 * 3600, horizon_seconds=900)
    report = train_nodes_once(PrometheusSource(srv.url), store, now=end, settings=settings)
    src = PrometheusSource(srv.url)
    raw = src.fetch(settings.memory_query, end - settings.history_seconds, end, 300)
    gap_node = next(n for n in NODES if n.memory_gap)
    gap_values = raw[raw["series_id"].str.contains(gap_node.instance, regex=False)]["value"]
    assert gap_values.isna().sum() >= 5  # the range query really has holes for that node
    for node in (n for n in NODES if n.in_inventory and n.memory_trace):
        fc = store.latest(f"node-memory/{node.name}")
        assert fc.meta["memory_bytes"] == float(node.cores * MEMORY_PER_CORE) and fc.meta["capacity"] == "allocatable"
        expected = memory_fraction(trace_slice, node, 8 * 12)[-1]
        assert fc.observed[-1][1] == pytest.approx(expected, abs=1e-6)  # used / allocatable, not / MemTotal
        for values in (fc.mean, *fc.quantiles.values(), [v for _, v in fc.observed]):
            assert all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in values)
    assert "node-memory/node-d" not in store.list_series()  # node-d exports no memory: none invented
    assert "node-memory/ghost" not in store.list_series()
    assert report.memory_nodes == ["node-a", "node-b", "node-c"]


def test_memory_history_with_gaps_nan_and_bad_capacity_never_becomes_a_served_nan():
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from adapter.scheduler import register_scheduler_routes
    from forecaster.nodes import NodeInventory

    ts = NOW - 60.0 * np.arange(120)[::-1]
    gib = float(2**30)
    ramp = np.linspace(4, 12, 120) * gib
    leading = ramp.copy()
    leading[:30] = np.nan
    holes = ramp.copy()
    holes[10:40] = np.nan
    holes[-3:-1] = np.inf  # a broken exporter sample
    history = {
        "leading-nan": (ts, leading), "holes": (ts, holes), "all-nan": (ts, np.full(120, np.nan)),
        "zero-capacity": (ts, ramp), "nan-capacity": (ts, ramp), "no-capacity": (ts, ramp),
    }
    capacities = {n: (16 * gib, "allocatable") for n in ("leading-nan", "holes", "all-nan")}
    from forecaster.nodes import memory_capacities

    capacities.update(memory_capacities({"zero-capacity": 0.0, "nan-capacity": float("nan")}, {}, NodeInventory()))
    report = NodeTrainReport()
    fcs = build_memory_forecasts(history, NodeInventory(), capacities, NOW, NodeForecastSettings(model="ar", horizon_seconds=600), report)
    assert sorted(fc.meta["node"] for fc in fcs) == ["holes", "leading-nan"]
    assert set(report.skipped) == {"node-memory/all-nan", "node-memory/zero-capacity", "node-memory/nan-capacity", "node-memory/no-capacity"}
    assert "no observations" in report.skipped["node-memory/all-nan"]
    assert "no memory capacity" in report.skipped["node-memory/zero-capacity"]
    for fc in fcs:
        for values in (fc.mean, *fc.quantiles.values(), [v for _, v in fc.observed]):
            assert all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in values), (fc.series_id, values)
    # served: the placement API (JSON refuses NaN) and the scores stay finite integers
    store = MemoryForecastStore()
    for fc in fcs:
        store.publish(make_forecast(fc.series_id, origin=time.time() - 5, step_seconds=60, mean=fc.mean, quantiles=fc.quantiles,
                                    model=fc.model, generated_at=time.time() - 5, observed=((time.time() - 5, fc.observed[-1][1]),),
                                    meta=fc.meta))
    app = FastAPI()
    register_scheduler_routes(app, store)
    client = TestClient(app)
    doc = client.get("/api/v1/placement", params={"memory_request": "1Gi"}).json()
    assert {n["node"] for n in doc["nodes"]} == {"holes", "leading-nan"}
    for row in doc["nodes"]:
        assert math.isfinite(row["memory_load"]) and isinstance(row["pod_score"], int) and row["basis"] == "memory"
    hp = client.post("/scheduler/prioritize", json={"Pod": None, "NodeNames": ["holes", "leading-nan", "all-nan"]}).json()
    assert all(isinstance(h["score"], int) and 0 <= h["score"] <= 10 for h in hp)


def test_the_score_is_the_minimum_of_the_cpu_and_memory_free_fractions():
    s = NodeScoreSettings(zone_weight=0.0)
    fcs = {
        "node/roomy": node_fc("roomy", [0.4] * 5), "node-memory/roomy": mem_fc("roomy", 0.2),
        "node/tight": node_fc("tight", [0.4] * 5), "node-memory/tight": mem_fc("tight", 0.8),
        # idle CPU does not make up for memory about to run out (a weighted mean would say 0.475)
        "node/lopsided": node_fc("lopsided", [0.1] * 5), "node-memory/lopsided": mem_fc("lopsided", 0.95 - 1e-9),
    }
    loads, _ = assess_nodes(fcs, NOW, s)
    assert loads["roomy"].score == 6 and loads["roomy"].basis == "cpu+memory"  # min(0.6, 0.8)
    assert loads["tight"].score == 2  # min(0.6, 0.2)
    assert loads["lopsided"].score == 1 and loads["lopsided"].memory_full  # min(0.9, 0.05) -> 0.5 -> 1; above 0.9
    assert loads["lopsided"].hot and not loads["lopsided"].cpu_hot
    # a pod's memory request lowers only the memory side
    assert score_for_pod(loads["roomy"], 8 * 2**30) == 3  # memory 1 - 0.2 - 8/16 = 0.3; CPU 0.6
    assert score_for_pod(loads["roomy"], 2 * 2**30) == 6  # memory 0.675 > CPU 0.6: CPU binds
    assert score_for_pod(loads["roomy"], 0) == loads["roomy"].score


def test_a_missing_or_stale_memory_forecast_degrades_to_cpu_only_and_says_so():
    s = NodeScoreSettings(zone_weight=0.0, max_forecast_age_seconds=300)
    fcs = {"node/a": node_fc("a", [0.3] * 5), "node/b": node_fc("b", [0.3] * 5), "node-memory/b": mem_fc("b", 0.99, age=3600.0),
           "node-memory/c": mem_fc("c", 0.5)}
    loads, _ = assess_nodes(fcs, NOW, s)
    assert loads["a"].score == loads["a"].cpu_score == 7 and loads["a"].basis == "cpu"
    assert "memory: no forecast for node-memory/a: scored on CPU only" in loads["a"].reason
    assert loads["b"].score == 7 and loads["b"].basis == "cpu" and loads["b"].memory_status == "stale"
    assert "stale" in loads["b"].reason and "scored on CPU only" in loads["b"].reason and not loads["b"].hot
    # memory known, CPU not: CPU counts as neutral, memory may only lower the score
    assert loads["c"].basis == "memory" and loads["c"].score == NEUTRAL_SCORE
    assert score_for_pod(loads["c"], 6 * 2**30) == 1  # 1 - 0.5 - 0.375 = 0.125 -> 1


@hsettings(max_examples=200, deadline=None)
@given(st.floats(0, 1), st.floats(0, 1), st.floats(0, 64 * 2**30), st.floats(0, 64 * 2**30))
def test_pod_scores_never_rise_with_the_memory_request_and_never_exceed_the_cpu_score(cpu, mem, r1, r2):
    fcs = {"node/n": node_fc("n", [cpu] * 5), "node-memory/n": mem_fc("n", mem)}
    nl = assess_nodes(fcs, NOW, NodeScoreSettings(zone_weight=0.0))[0]["n"]
    lo, hi = min(r1, r2), max(r1, r2)
    assert 0 <= score_for_pod(nl, hi) <= score_for_pod(nl, lo) <= nl.cpu_score <= MAX_SCORE
    assert score_for_pod(nl, 0.0) == nl.score


def test_bad_memory_settings_name_the_field():
    with pytest.raises(UserError) as e:
        NodeScoreSettings(memory_threshold=0)
    assert "memory_threshold" in str(e.value)
    with pytest.raises(UserError) as e:
        NodeForecastSettings(memory_query=None)
    assert "memory_query" in str(e.value)
