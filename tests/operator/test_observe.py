"""Observe mode, pure: no HPA, a shadow HPA (replay.hpa's algorithm on the adapter's served
values) in the status, under-capacity minutes against the actual replicas, Events on changes,
and a mode switch that changes nothing the trainer reads."""

from __future__ import annotations

import copy
import math

from core.store import Forecast
from forecaster.served import MetricSettings, served_load_ratio
from kubeoperator.observe import Capacity
from kubeoperator.reconcile import reconcile_autoscaler
from kubeoperator.render import render_trainer_config
from kubeoperator.spec import parse_autoscaler

NOW = 1_700_000_000.0
PA = {
    "apiVersion": "foresight.dev/v1alpha1", "kind": "PredictiveAutoscaler",
    "metadata": {"name": "web", "namespace": "shop", "uid": "u-1", "generation": 1},
    "spec": {"mode": "Observe", "scaleTargetRef": {"name": "web"}, "minReplicas": 2, "maxReplicas": 50,
             "metrics": [{"name": "cpu", "type": "Resource", "cpuRequestCores": 0.5}]},
}
BASE = {"apiVersion": "foresight/v1alpha1", "kind": "WorkloadConfig",
        "source": {"url": "prometheus://prometheus:9090"}, "store": {"url": "redis://redis:6379/0"}, "workloads": []}


def forecast(t: float, level: float, observed: float | None = None) -> Forecast:
    return Forecast(series_id="shop/web", generated_at=t, origin=t, step_seconds=60.0, mean=(level,) * 12,
                    quantiles={"p50": (level,) * 12, "p90": (level,) * 12}, model="ets",
                    observed=((t, level if observed is None else observed),),
                    meta={"ready_pods": 3, "cpu_request_cores": 0.5})


def sync(obj, fc, t, shadows, actual=3):
    act = reconcile_autoscaler(obj, {"shop/web": fc}, t, shadows=shadows, capacity=Capacity(actual, actual))
    return {**obj, "status": act.status}, act


def test_observe_writes_no_hpa_and_the_shadow_scales_as_the_hpa_would_with_its_rate_limits():
    shadows: dict = {}
    obj, act = sync(PA, forecast(NOW, 3.0), NOW, shadows)
    assert act.hpa is None
    st = act.status
    assert st["mode"] == "Observe" and st["hpaName"] is None
    ob = st["observe"]
    # from the 3 replicas it has, the shipped scale-up policy allows max(3 + 4 pods, 3 x 200 %) = 7
    assert ob["wouldHaveReplicas"] == 7 and ob["actualReplicas"] == 3
    obj, act = sync(obj, forecast(NOW + 15, 3.0), NOW + 15, shadows)
    # at 7 replicas the adapter serves demand / (7 x 0.5); the HPA asks ceil(ratio / 0.7 x 7)
    sv = served_load_ratio(forecast(NOW + 15, 3.0), NOW + 15, 7, 0.5, MetricSettings())
    assert act.status["observe"]["wouldHaveReplicas"] == math.ceil(round(sv.value, 3) / 0.7 * 7 - 1e-9) == 9
    assert [e.reason for e in act.events] == ["WouldScale"]
    assert "would ask for 9 replicas (was 7); the workload has 3" in act.events[0].message
    obj, act = sync(obj, forecast(NOW + 30, 3.0), NOW + 30, shadows)
    assert act.status["observe"]["wouldHaveReplicas"] == 9 and act.events == []  # no change, no Event


def test_under_capacity_minutes_are_counted_for_the_actual_and_the_would_have_replicas_apart():
    shadows: dict = {}
    obj = PA
    for i in range(5):  # demand 3 cores needs ceil(3 / (0.5 x 0.9)) = 7 pods; the workload keeps 3
        obj, act = sync(obj, forecast(NOW + 15 * i, 3.0), NOW + 15 * i, shadows)
    ob = act.status["observe"]
    assert ob["neededReplicas"] == 7
    assert ob["underCapacityMinutes"]["actual"] == 1.0  # 4 intervals of 15 s
    assert ob["underCapacityMinutes"]["wouldHave"] == 0.0  # 7 from the first sync
    assert [p[1:] for p in ob["recent"]] == [[7, 3], [9, 3], [9, 3], [9, 3], [9, 3]]
    # the operator away for 10 minutes: the gap is no minutes of either line
    obj, act = sync(obj, forecast(NOW + 660, 3.0), NOW + 660, shadows)
    assert act.status["observe"]["underCapacityMinutes"]["actual"] == 1.0


def test_the_shadow_keeps_its_replicas_through_the_scale_down_stabilization_window():
    shadows: dict = {}
    spec = copy.deepcopy(PA)
    spec["spec"]["behavior"] = {"scaleDown": {"stabilizationWindowSeconds": 120}}
    obj, _ = sync(spec, forecast(NOW, 3.0), NOW, shadows)
    obj, _ = sync(obj, forecast(NOW + 15, 3.0), NOW + 15, shadows)
    seen = []
    for i in range(2, 14):
        obj, act = sync(obj, forecast(NOW + 15 * i, 0.3), NOW + 15 * i, shadows)
        seen.append(act.status["observe"]["wouldHaveReplicas"])
    assert seen[:6] == [9] * 6  # within 120 s of the last 9 recommendation
    assert seen[-1] == 2  # then min replicas (0.3 cores fits one pod; min is 2)


def test_switching_modes_deletes_or_creates_the_hpa_and_leaves_the_trainer_config_alone():
    shadows: dict = {}
    act_obj = copy.deepcopy(PA)
    act_obj["spec"]["mode"] = "Act"
    obj, act = sync(act_obj, forecast(NOW, 3.0), NOW, shadows)
    assert act.hpa is not None and act.status["observe"] is None and act.status["hpaName"] == "web"
    obj = {**PA, "status": act.status}
    obj, act = sync(obj, forecast(NOW + 15, 3.0), NOW + 15, shadows)
    assert act.hpa is None and "ModeChanged" in [e.reason for e in act.events]
    back = {**act_obj, "status": act.status}
    _, act = sync(back, forecast(NOW + 30, 3.0), NOW + 30, shadows)
    assert act.hpa["spec"]["scaleTargetRef"]["name"] == "web" and act.status["observe"] is None
    assert ("shop", "web") not in shadows
    digests = {render_trainer_config(BASE, [parse_autoscaler(o)]).digest for o in (PA, act_obj)}
    assert len(digests) == 1  # same trainer file: no restart, no refit


def test_without_a_forecast_the_shadow_holds_its_replicas_and_says_why():
    shadows: dict = {}
    act = reconcile_autoscaler(PA, {}, NOW, shadows=shadows, capacity=Capacity(4, 4))
    ob = act.status["observe"]
    assert ob["wouldHaveReplicas"] == 4  # seeded at the workload's replicas, no valid metric: no change
    assert "no forecast" in ob["reason"] or "invalid metrics" in ob["reason"]
    assert "neededReplicas" not in ob
