"""The operator's pure steps: PredictiveAutoscaler -> HPA, status and Events; the trainer's and
the warm-pool controller's effective config. No cluster: objects are the dicts the API server
returns, forecasts are real Forecast objects, the clock is a number."""

from __future__ import annotations

import copy

import yaml

from adapter.metrics import MetricSettings, served_load_ratio
from forecaster.config import parse_config
from forecaster.store import Forecast
from kubeoperator.pools import claim_counts, warmpool_status
from kubeoperator.reconcile import reconcile_autoscaler
from kubeoperator.render import render_trainer_config, render_warmpool_policy
from kubeoperator.spec import parse_autoscaler, parse_warmpool

NOW = 1_700_000_000.0
PA = {
    "apiVersion": "foresight.dev/v1alpha1", "kind": "PredictiveAutoscaler",
    "metadata": {"name": "checkout", "namespace": "shop", "uid": "u-1", "generation": 3},
    "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "checkout"},
             "minReplicas": 2, "maxReplicas": 50,
             "metrics": [{"name": "cpu", "type": "Resource", "cpuRequestCores": 0.5},
                         {"name": "rps", "type": "Demand", "query": "sum(rate(http_requests_total[2m]))",
                          "capacityPerReplica": 40}],
             "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}}},
}
BASE = {"apiVersion": "foresight/v1alpha1", "kind": "WorkloadConfig",
        "source": {"url": "prometheus://prometheus:9090"}, "store": {"url": "redis://redis:6379/0"},
        "workloads": [{"namespace": "shop", "name": "cart"}]}


def forecast(series="shop/checkout", model="ets", generated=NOW - 20, status="ok", level=1.2, err=0.71):
    return Forecast(series_id=series, generated_at=generated, origin=generated, step_seconds=60.0,
                    mean=(level,) * 12, quantiles={"p50": (level,) * 12, "p90": (level * 1.1,) * 12},
                    model=model, backtest_error=err, status=status, reason="short history" if status != "ok" else "",
                    observed=((generated, 1.0),), meta={"ready_pods": 3, "cpu_request_cores": 0.5})


def test_the_hpa_has_the_cpu_floor_and_one_predicted_metric_per_series_and_is_owned_by_the_autoscaler():
    act = reconcile_autoscaler(PA, {}, NOW)
    hpa = act.hpa
    assert hpa["metadata"]["ownerReferences"] == [{"apiVersion": "foresight.dev/v1alpha1", "kind": "PredictiveAutoscaler",
                                                   "name": "checkout", "uid": "u-1", "controller": True,
                                                   "blockOwnerDeletion": True}]
    m = hpa["spec"]["metrics"]
    assert m[0] == {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}
    assert [x["external"]["metric"]["selector"]["matchLabels"]["workload"] for x in m[1:]] == ["checkout", "checkout-rps"]
    assert {x["external"]["target"]["value"] for x in m[1:]} == {"700m"}
    assert hpa["spec"]["behavior"] == PA["spec"]["behavior"]
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 50)


def test_the_hpa_equals_the_shipped_example_for_the_same_workload():
    with open("manifests/hpa-example.yaml") as f:
        example = yaml.safe_load(f)
    pa = copy.deepcopy(PA)
    pa["spec"]["metrics"] = [{"name": "cpu", "type": "Resource"}]
    pa["spec"]["behavior"] = example["spec"]["behavior"]
    hpa = reconcile_autoscaler(pa, {}, NOW).hpa
    ext = hpa["spec"]["metrics"][1]["external"]
    ext["metric"]["selector"]["matchLabels"] = {"deployment": "checkout"}  # the example selects by deployment
    assert hpa["spec"] == example["spec"]


def test_a_served_forecast_makes_the_autoscaler_ready_with_the_adapters_value_and_source():
    fc = forecast()
    act = reconcile_autoscaler(PA, {"shop/checkout": fc, "shop/checkout-rps": forecast("shop/checkout-rps")}, NOW)
    st = act.status
    expect = served_load_ratio(fc, NOW, 3, 0.5, MetricSettings())
    assert st["servedValue"] == f"{expect.value:.3f}" and st["servedSource"] == "forecast"
    assert st["model"] == "ets" and st["backtestError"] == 0.71 and st["forecastAgeSeconds"] == 20
    cond = {c["type"]: c for c in st["conditions"]}
    assert (cond["Ready"]["status"], cond["Ready"]["reason"]) == ("True", "Serving")
    assert (cond["Degraded"]["status"], cond["Degraded"]["reason"]) == ("False", "ForecastServed")
    assert act.events == []  # nothing changed: there was no previous status


def test_no_forecast_yet_is_not_ready_and_says_so():
    st = reconcile_autoscaler(PA, {}, NOW).status
    ready = next(c for c in st["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NoForecastYet")
    assert st["servedSource"] == "none" and "servedValue" not in st


def test_a_stale_forecast_is_ready_but_degraded_and_the_fallback_is_an_event():
    fresh = {"shop/checkout": forecast(), "shop/checkout-rps": forecast("shop/checkout-rps")}
    before = reconcile_autoscaler(PA, fresh, NOW)
    obj = {**PA, "status": before.status}
    stale = {k: forecast(k, generated=NOW - 1000) for k in fresh}
    stale = {k: Forecast(**{**v.__dict__, "observed": ((NOW - 30, 1.0),)}) for k, v in stale.items()}
    act = reconcile_autoscaler(obj, stale, NOW)
    cond = {c["type"]: c for c in act.status["conditions"]}
    assert cond["Ready"]["status"] == "True"
    assert (cond["Degraded"]["status"], cond["Degraded"]["reason"]) == ("True", "Fallback")
    assert "stale" in cond["Degraded"]["message"]
    assert act.status["servedSource"] == "observed"
    assert [(e.type, e.reason) for e in act.events] == [("Warning", "Fallback"), ("Warning", "Fallback")]
    # the Ready condition did not change, so its transition time is kept
    assert cond["Ready"]["lastTransitionTime"] == next(
        c for c in before.status["conditions"] if c["type"] == "Ready")["lastTransitionTime"]


def test_a_model_change_is_an_event_naming_both_models():
    fcs = {"shop/checkout": forecast(), "shop/checkout-rps": forecast("shop/checkout-rps")}
    obj = {**PA, "status": reconcile_autoscaler(PA, fcs, NOW).status}
    fcs["shop/checkout"] = forecast(model="prophet", err=0.5)
    events = reconcile_autoscaler(obj, fcs, NOW + 60).events
    assert [(e.reason, e.message) for e in events] == [("ModelChanged", "cpu: model ets -> prophet (backtest error 0.5)")]


def test_an_unreachable_store_is_not_ready():
    st = reconcile_autoscaler(PA, {"shop/checkout": forecast()}, NOW, store_error="forecast store: refused").status
    ready = next(c for c in st["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "StoreUnavailable")


def test_the_trainer_config_is_the_users_base_plus_one_workload_per_metric_and_the_trainer_accepts_it():
    r = render_trainer_config(BASE, [parse_autoscaler(PA)])
    cfg = parse_config(yaml.safe_load(r.text))
    names = [w.series_id for w in cfg.workloads]
    assert names == ["shop/cart", "shop/checkout", "shop/checkout-rps"]
    rps = cfg.workload("shop/checkout-rps")
    assert rps.demand_query == "sum(rate(http_requests_total[2m]))"
    assert rps.capacity.cpu_request_cores == 40.0
    assert 'pod=~"checkout-.*"' in rps.ready_pods_query()  # the target's pods, not checkout-rps-*
    assert cfg.workload("shop/checkout").capacity.cpu_request_cores == 0.5
    assert r.problems == {} and r.warnings == {}


def test_a_workload_the_user_lists_by_hand_wins_over_the_generated_one():
    base = {**BASE, "workloads": [{"namespace": "shop", "name": "checkout", "capacity": {"cpu_request_cores": 2}}]}
    cfg = parse_config(yaml.safe_load(render_trainer_config(base, [parse_autoscaler(PA)]).text))
    assert cfg.workload("shop/checkout").capacity.cpu_request_cores == 2.0
    assert len(cfg.workloads) == 2


def test_an_autoscaler_the_trainer_would_refuse_is_left_out_with_the_trainers_problems():
    bad = copy.deepcopy(PA)
    bad["metadata"]["name"] = "bad"
    bad["spec"]["serving"] = {"quantiles": ["p75"]}  # not published by training.quantiles
    r = render_trainer_config(BASE, [parse_autoscaler(PA), parse_autoscaler(bad)])
    assert any("serving.quantiles[0]" in p for p in r.problems[("shop", "bad")])
    cfg = parse_config(yaml.safe_load(r.text))
    assert [w.series_id for w in cfg.workloads] == ["shop/cart", "shop/checkout", "shop/checkout-rps"]


def test_serving_settings_become_the_trainers_serving_section_and_a_conflicting_autoscaler_is_warned():
    a = copy.deepcopy(PA)
    a["spec"]["serving"] = {"violationCostPods": 40, "headrooms": [1.0, 1.2]}
    b = copy.deepcopy(a)
    b["metadata"]["name"] = "other"
    b["spec"]["scaleTargetRef"]["name"] = "other"
    b["spec"]["serving"] = {"violationCostPods": 90}
    r = render_trainer_config(BASE, [parse_autoscaler(a), parse_autoscaler(b)])
    cfg = parse_config(yaml.safe_load(r.text))
    assert cfg.serving.violation_cost_pods == 40 and cfg.serving.headrooms == (1.0, 1.2)
    assert list(r.warnings) == [("shop", "other")]
    st = reconcile_autoscaler(b, {}, NOW, warnings=r.warnings[("shop", "other")]).status
    assert {c["type"]: c["reason"] for c in st["conditions"]}["Degraded"] == "ServingSettingsNotApplied"


WP = {"apiVersion": "foresight.dev/v1alpha1", "kind": "WarmPool",
      "metadata": {"name": "checkout", "namespace": "shop", "generation": 1},
      "spec": {"workload": "checkout", "minWarm": 1, "maxWarm": 5, "backend": "kubernetes",
               "idleTTL": {"initialSeconds": 120, "decay": 0.15, "floorSeconds": 30},
               "template": {"image": "busybox", "command": ["sleep", "3600"], "resources": {"memory": "64Mi"}}}}


def test_a_warm_pool_becomes_a_pool_of_the_controllers_policy():
    from warmpool.policy import parse_policy

    r = render_warmpool_policy(None, [parse_warmpool(WP)])
    pol = parse_policy(yaml.safe_load(r.text))
    (pool,) = pol.pools
    assert (pool.name, pool.namespace, pool.workload, pool.series) == ("shop-checkout", "shop", "checkout", "shop/checkout")
    assert (pool.min_warm, pool.max_warm, pool.idle_ttl.floor_seconds, pool.backend) == (1, 5, 30.0, "kubernetes")


def test_warm_pool_status_carries_warm_claimed_hit_rate_and_the_ttl_decay_step():
    from prometheus_client import generate_latest

    from warmpool.metrics import Metrics

    m = Metrics()  # what the controller serves at /metrics
    m.claims.labels("shop-checkout", "warm").inc(9)
    m.claims.labels("shop-checkout", "cold").inc(1)
    m.claims.labels("other", "cold").inc(5)
    counts = claim_counts(generate_latest(m.registry).decode())
    view = {"pool": "shop-checkout", "warm": 2, "claimed": 1, "creating": 0, "target_warm": 3, "ttl_decay_k": 2,
            "next_idle_ttl_seconds": 86.7, "degraded": False, "reason": "peak 1.2 in 90 s"}
    st = warmpool_status(WP, view, counts["shop-checkout"], [], None, NOW)
    assert (st["warm"], st["claimed"], st["targetWarm"], st["ttlDecayStep"]) == (2, 1, 3, 2)
    assert (st["claims"], st["coldStarts"], st["hitRate"]) == (10, 1, 0.9)
    assert st["conditions"][0]["status"] == "True"
    st = warmpool_status(WP, None, None, [], "refused", NOW)
    assert (st["conditions"][0]["status"], st["conditions"][0]["reason"]) == ("False", "ControllerUnreachable")
