"""The operator's pure steps: PredictiveAutoscaler -> HPA, status and Events; the trainer's and
the warm-pool controller's effective config. No cluster: objects are the dicts the API server
returns, forecasts are real Forecast objects, the clock is a number."""

from __future__ import annotations

import copy

import yaml

from forecaster.served import MetricSettings, served_load_ratio
from forecaster.config import parse_config
from core.store import Forecast
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
    assert [x["external"]["metric"]["selector"]["matchLabels"]["workload"] for x in m[1:]] == ["checkout", "checkout"]
    # one External metric per predicted metric: the CPU load ratio, then the demand's own ratio
    assert [x["external"]["metric"]["name"] for x in m[1:]] == ["predicted_cpu_load_ratio", "predicted_rps_ratio"]
    assert {x["external"]["target"]["value"] for x in m[1:]} == {"700m"}
    assert hpa["spec"]["behavior"] == PA["spec"]["behavior"]
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 50)


def test_the_hpa_equals_the_shipped_example_for_the_same_workload():
    """Without spec.behavior the autoscaler gets the example's behaviour, the one the replay measures."""
    with open("manifests/hpa-example.yaml") as f:
        example = yaml.safe_load(f)
    pa = copy.deepcopy(PA)
    pa["spec"]["metrics"] = [{"name": "cpu", "type": "Resource"}]
    del pa["spec"]["behavior"]
    hpa = reconcile_autoscaler(pa, {}, NOW).hpa
    ext = hpa["spec"]["metrics"][1]["external"]
    ext["metric"]["selector"]["matchLabels"] = {"deployment": "checkout"}  # the example selects by deployment
    assert hpa["spec"] == example["spec"]


def test_a_served_forecast_makes_the_autoscaler_ready_with_the_adapters_value_and_source():
    fc = forecast()
    act = reconcile_autoscaler(PA, {"shop/checkout": fc, "shop/checkout/rps": forecast("shop/checkout/rps")}, NOW)
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
    fresh = {"shop/checkout": forecast(), "shop/checkout/rps": forecast("shop/checkout/rps")}
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
    fcs = {"shop/checkout": forecast(), "shop/checkout/rps": forecast("shop/checkout/rps")}
    obj = {**PA, "status": reconcile_autoscaler(PA, fcs, NOW).status}
    fcs["shop/checkout"] = forecast(model="prophet", err=0.5)
    events = reconcile_autoscaler(obj, fcs, NOW + 60).events
    assert [(e.reason, e.message) for e in events] == [("ModelChanged", "cpu: model ets -> prophet (backtest error 0.5)")]


def test_an_unreachable_store_is_not_ready():
    st = reconcile_autoscaler(PA, {"shop/checkout": forecast()}, NOW, store_error="forecast store: refused").status
    ready = next(c for c in st["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "StoreUnavailable")


def test_the_trainer_config_is_the_users_base_plus_the_target_with_its_demand_metrics_and_the_trainer_accepts_it():
    r = render_trainer_config(BASE, [parse_autoscaler(PA)])
    cfg = parse_config(yaml.safe_load(r.text))
    assert [w.series_id for w in cfg.workloads] == ["shop/cart", "shop/checkout"]
    assert [s.series_id for s in cfg.series()] == ["shop/cart", "shop/checkout", "shop/checkout/rps"]
    checkout = cfg.workload("shop/checkout")
    assert checkout.capacity.cpu_request_cores == 0.5
    (rps,) = checkout.metrics
    # the tenant's query, confined to the object's namespace (kubeoperator.promql)
    assert (rps.name, rps.query, rps.capacity_per_replica) == (
        "rps", 'sum(rate(http_requests_total{namespace="shop"}[2m]))', 40.0)
    assert checkout.serving is None  # no spec.serving: the trainer's own section applies
    assert r.problems == {} and r.warnings == {}


def test_the_status_serves_the_demand_metric_from_its_own_series_as_the_adapter_does():
    from forecaster.served import served_demand_ratio

    rps = forecast("shop/checkout/rps", level=100.0)
    rps = Forecast(**{**rps.__dict__, "meta": {"ready_pods": 3, "metric": "rps", "capacity_per_replica": 40.0}})
    st = reconcile_autoscaler(PA, {"shop/checkout": forecast(), "shop/checkout/rps": rps}, NOW).status
    (_, m) = st["metrics"]
    assert (m["series"], m["externalMetric"]) == ("shop/checkout/rps", "predicted_rps_ratio")
    want = served_demand_ratio("rps", rps, NOW, 3, 40.0, MetricSettings()).value
    assert m["servedValue"] == f"{want:.3f}" and abs(want - 110 / 120) < 1e-9  # p90 110 rps over 3 ready x 40
    assert "rps" in m["servedReason"] and "cores" not in m["servedReason"]


def test_a_workload_the_user_lists_by_hand_wins_over_the_generated_one_and_the_autoscaler_is_told():
    base = {**BASE, "workloads": [{"namespace": "shop", "name": "checkout", "capacity": {"cpu_request_cores": 2}}]}
    r = render_trainer_config(base, [parse_autoscaler(PA)])
    cfg = parse_config(yaml.safe_load(r.text))
    assert cfg.workload("shop/checkout").capacity.cpu_request_cores == 2.0
    assert len(cfg.workloads) == 1
    (msg,) = r.warnings[("shop", "checkout")]
    st = reconcile_autoscaler(PA, {}, NOW, warnings=[msg]).status
    assert "lists shop/checkout by hand" in msg
    assert {c["type"]: c["reason"] for c in st["conditions"]}["Degraded"] in ("SpecNotApplied", "NoForecastYet")


def test_an_autoscaler_the_trainer_would_refuse_is_left_out_with_its_own_field_paths_and_an_event():
    bad = copy.deepcopy(PA)
    bad["metadata"]["name"] = "bad"
    bad["spec"]["scaleTargetRef"]["name"] = "other"
    bad["spec"]["serving"] = {"quantiles": ["p75"], "sloMinutesPerDay": 4}  # p75: not published by training.quantiles
    r = render_trainer_config(BASE, [parse_autoscaler(PA), parse_autoscaler(bad)])
    assert sorted(r.problems[("shop", "bad")]) == [
        "spec.serving.quantiles[0]: 'p75' is not published; add it to training.quantiles (published: p50, p90)",
    ]
    cfg = parse_config(yaml.safe_load(r.text))
    assert [w.series_id for w in cfg.workloads] == ["shop/cart", "shop/checkout"]
    act = reconcile_autoscaler(bad, {}, NOW, problems=r.problems[("shop", "bad")])
    ready = next(c for c in act.status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidWorkload")
    assert "spec.serving.quantiles[0]" in ready["message"]
    assert [(e.type, e.reason) for e in act.events] == [("Warning", "InvalidSpec")]
    assert "spec.serving.quantiles[0]" in act.events[0].message
    # the same generation again: the condition still says it, no second Event
    again = reconcile_autoscaler({**bad, "status": act.status}, {}, NOW + 15, problems=r.problems[("shop", "bad")])
    assert again.events == []
    # an edit that is still invalid: told again
    edited = {**bad, "metadata": {**bad["metadata"], "generation": 4}, "status": again.status}
    assert [e.reason for e in reconcile_autoscaler(edited, {}, NOW + 30, problems=["spec.serving.x: y"]).events] == [
        "InvalidSpec"]


def test_two_autoscalers_of_one_target_the_second_is_refused_with_the_path():
    other = copy.deepcopy(PA)
    other["metadata"]["name"] = "zz-second"
    r = render_trainer_config(BASE, [parse_autoscaler(PA), parse_autoscaler(other)])
    (p,) = r.problems[("shop", "zz-second")]
    assert p.startswith("spec.scaleTargetRef.name: checkout is already the target of PredictiveAutoscaler shop/checkout")


def test_each_autoscalers_serving_settings_are_its_workloads_own_and_the_trainer_uses_them():
    from forecaster.schedule import trainer_from_config

    a = copy.deepcopy(PA)
    a["spec"]["serving"] = {"sloMinutesPerDay": 4, "headrooms": [1.0, 1.2]}
    b = copy.deepcopy(a)
    b["metadata"]["name"] = "other"
    b["spec"]["scaleTargetRef"]["name"] = "other"
    b["spec"]["serving"] = {"sloMinutesPerDay": 3}
    r = render_trainer_config(BASE, [parse_autoscaler(a), parse_autoscaler(b)])
    assert r.problems == {} and r.warnings == {}
    cfg = parse_config(yaml.safe_load(r.text))
    trainer = trainer_from_config(cfg, None)
    assert trainer.serving_for("shop/checkout").slo_minutes_per_day == 4
    assert trainer.serving_for("shop/checkout/rps").headrooms == (1.0, 1.2)
    assert trainer.serving_for("shop/other").slo_minutes_per_day == 3
    assert trainer.serving_for("shop/cart") == cfg.serving  # the base's own workload: the base's section


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
    assert (pool.name, pool.namespace, pool.workload, pool.series) == ("shop.checkout", "shop", "checkout", "shop/checkout")
    assert (pool.min_warm, pool.max_warm, pool.idle_ttl.floor_seconds, pool.backend) == (1, 5, 30.0, "kubernetes")


def test_with_no_warm_pool_the_policy_still_renders_so_the_controller_starts_and_drops_the_last_pool():
    from warmpool.policy import parse_policy

    base = {"memory_budget": {"fraction": 0.8, "reference_keepalive_seconds": 600}}
    r = render_warmpool_policy(base, [])
    pol = parse_policy(yaml.safe_load(r.text))  # the chart mounts this file: without it the pod cannot start
    assert pol.pools == () and pol.memory_budget.fraction == 0.8 and r.problems == {}


def test_a_warm_pool_can_follow_a_predicted_request_rate():
    from warmpool.policy import parse_policy

    spec = {**WP["spec"], "demand": "both", "requestRate": {"series": "shop/checkout/rps", "concurrencyPerContainer": 20},
            "idleModel": {"previousGapWeight": 0, "holdOnTTL": True}}
    r = render_warmpool_policy(None, [parse_warmpool({**WP, "spec": spec})])
    (pool,) = parse_policy(yaml.safe_load(r.text)).pools
    assert pool.demand == "both" and pool.request_rate.series == "shop/checkout/rps"
    assert pool.request_rate.concurrency_per_container == 20
    assert pool.idle_model.previous_gap_weight == 0 and pool.idle_model.hold_on_ttl is True


def test_warm_pool_status_carries_warm_claimed_hit_rate_and_the_ttl_decay_step():
    from prometheus_client import generate_latest

    from warmpool.metrics import Metrics

    m = Metrics()  # what the controller serves at /metrics
    m.claims.labels("shop.checkout", "warm").inc(9)
    m.claims.labels("shop.checkout", "cold").inc(1)
    m.claims.labels("other", "cold").inc(5)
    counts = claim_counts(generate_latest(m.registry).decode())
    view = {"pool": "shop.checkout", "warm": 2, "claimed": 1, "creating": 0, "target_warm": 3, "ttl_decay_k": 2,
            "next_idle_ttl_seconds": 86.7, "degraded": False, "reason": "peak 1.2 in 90 s"}
    st = warmpool_status(WP, view, counts["shop.checkout"], [], None, NOW)
    assert (st["warm"], st["claimed"], st["targetWarm"], st["ttlDecayStep"]) == (2, 1, 3, 2)
    assert (st["claims"], st["coldStarts"], st["hitRate"]) == (10, 1, 0.9)
    assert st["conditions"][0]["status"] == "True"
    st = warmpool_status(WP, None, None, [], "refused", NOW)
    assert (st["conditions"][0]["status"], st["conditions"][0]["reason"]) == ("False", "ControllerUnreachable")


def test_a_base_config_the_trainer_would_refuse_is_every_autoscalers_problem_with_the_bases_path():
    base = {**BASE, "training": {"quantiles": [1.5]}}
    other = copy.deepcopy(PA)
    other["metadata"]["name"] = other["spec"]["scaleTargetRef"]["name"] = "other"
    r = render_trainer_config(base, [parse_autoscaler(PA), parse_autoscaler(other)])
    assert r.problems == {k: ["training.quantiles[0]: 1.5 must be a number in (0, 1)"]
                          for k in (("shop", "checkout"), ("shop", "other"))}
    assert [w["name"] for w in yaml.safe_load(r.text)["workloads"]] == ["cart"]  # no autoscaler added to it


def test_a_warm_pool_named_like_a_pool_of_the_base_policy_is_refused_and_the_base_pool_kept():
    from warmpool.policy import parse_policy

    base = {"pools": [{"name": "shop.checkout", "workload": {"namespace": "shop", "name": "checkout"}}]}
    other = {**WP, "metadata": {**WP["metadata"], "name": "other"}, "spec": {**WP["spec"], "workload": "other"}}
    r = render_warmpool_policy(base, [parse_warmpool(WP), parse_warmpool(other)])
    assert r.problems == {("shop", "checkout"): [
        "metadata.name: the base policy already has a pool named 'shop.checkout'; rename this WarmPool"]}
    pools = parse_policy(yaml.safe_load(r.text)).pools
    assert [(p.name, p.backend) for p in pools] == [("shop.checkout", "crun"), ("shop.other", "kubernetes")]
