"""The operator against a real kube-apiserver (with the controller manager's garbage collector)
and a real Redis forecast store: HPA owned by its autoscaler, status and printer columns,
Events, the trainer's effective config, and garbage collection of the HPA."""

from __future__ import annotations

import threading
import time

import pytest
import yaml

from core.store import Forecast, open_store
from forecaster.served import MetricSettings, served_load_ratio
from kubeoperator.kube import KubeApi
from kubeoperator.runner import DIGEST_ANNOTATION, Operator, OperatorSettings
from tests.cluster.controlplane import wait_for

pytestmark = [pytest.mark.e2e]

BASE = {"apiVersion": "foresight/v1alpha1", "kind": "WorkloadConfig",
        "source": {"url": "prometheus://prometheus:9090"}, "store": {"url": "redis://redis:6379/0"},
        "training": {"refresh_interval_seconds": 60}, "workloads": []}
PA = {"apiVersion": "foresight.dev/v1alpha1", "kind": "PredictiveAutoscaler",
      "metadata": {"name": "web", "namespace": "shop"},
      "spec": {"scaleTargetRef": {"name": "web"}, "minReplicas": 2, "maxReplicas": 20,
               "metrics": [{"name": "cpu", "type": "Resource", "cpuRequestCores": 0.5}]}}


def publish(store, model: str, level: float) -> Forecast:
    now = time.time()
    fc = Forecast(series_id="shop/web", generated_at=now, origin=now, step_seconds=60.0, mean=(level,) * 12,
                  quantiles={"p50": (level,) * 12, "p90": (level * 1.2,) * 12}, model=model, backtest_error=0.66,
                  observed=((now, level),), meta={"ready_pods": 4, "cpu_request_cores": 0.5})
    store.publish(fc)
    return fc


def deployment(ns, name, labels=None):
    labels = labels or {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "c", "image": "busybox",
                                                           "resources": {"requests": {"cpu": "500m"}}}]}}}}


@pytest.fixture(scope="module")
def running(crds, redis_server):
    cp = crds
    # objects other tests of this control plane left behind would be reconciled too
    cp.kubectl("delete", "predictiveautoscalers", "--all", "--all-namespaces", "--wait=true")
    cp.ensure_namespace("foresight")
    cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all([
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "foresight-workloads", "namespace": "foresight"},
         "data": {"workloads.yaml": yaml.safe_dump(BASE)}},
        deployment("foresight", "foresight-trainer"), deployment("shop", "web")]))
    store = open_store(redis_server.url)
    op = Operator(KubeApi(str(cp.admin_kubeconfig)), store,
                  OperatorSettings(resync_seconds=1.0, warmpool_configmap=None))
    stop = threading.Event()
    t = threading.Thread(target=op.run, args=(stop,), daemon=True)
    t.start()
    yield cp, store
    stop.set()
    op.wake()
    t.join(10)


def _pa(cp):
    return cp.admin.json("/apis/foresight.dev/v1alpha1/namespaces/shop/predictiveautoscalers/web")


def _cond(obj, type_):
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == type_), {})


def test_an_autoscaler_gets_an_owned_hpa_and_a_ready_status_with_the_served_value(running):
    cp, store = running
    fc = publish(store, "ets", 1.5)
    cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(PA))
    obj = wait_for("PredictiveAutoscaler shop/web Ready", lambda: _cond(o := _pa(cp), "Ready").get("status") == "True" and o,
                   timeout=60, detail=lambda: str(_pa(cp).get("status")))
    hpa = cp.admin.json("/apis/autoscaling/v2/namespaces/shop/horizontalpodautoscalers/web")
    assert hpa["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
    assert [m["type"] for m in hpa["spec"]["metrics"]] == ["Resource", "External"]
    expect = served_load_ratio(fc, time.time(), 4, 0.5, MetricSettings())
    st = obj["status"]
    assert st["model"] == "ets" and st["servedSource"] == "forecast"
    assert abs(float(st["servedValue"]) - expect.value) < 0.01  # the same rule as the adapter
    out = cp.kubectl("get", "predictiveautoscalers", "-n", "shop").stdout.splitlines()
    header, row = out[0].split(), out[1].split()
    cols = dict(zip(header, row))
    assert cols["READY"] == "True" and cols["MODEL"] == "ets" and cols["SOURCE"] == "forecast"
    assert cols["SERVED"] == st["servedValue"]


def test_the_trainer_config_gets_the_workload_and_the_trainer_is_not_restarted(running):
    cp, _ = running
    cm = wait_for("effective trainer config", lambda: cp.admin.json(
        "/api/v1/namespaces/foresight/configmaps/foresight-trainer-config"), timeout=30)
    from forecaster.config import parse_config

    cfg = parse_config(yaml.safe_load(cm["data"]["workloads.yaml"]))
    assert [w.series_id for w in cfg.workloads] == ["shop/web"]
    assert cm["metadata"]["annotations"][DIGEST_ANNOTATION]
    # the trainer re-reads its file in place (forecaster/configwatch.py): its pod is left alone
    dep = cp.admin.json("/apis/apps/v1/namespaces/foresight/deployments/foresight-trainer")
    assert DIGEST_ANNOTATION not in (dep["spec"]["template"]["metadata"].get("annotations") or {})


def test_a_model_change_and_a_fallback_are_events_and_conditions(running):
    cp, store = running
    publish(store, "prophet", 1.5)
    ev = wait_for("ModelChanged event", lambda: [e for e in cp.admin.json("/api/v1/namespaces/shop/events")["items"]
                                               if e["reason"] == "ModelChanged" and e["involvedObject"]["name"] == "web"],
                  timeout=30)
    assert ev[0]["message"].startswith("cpu: model ets -> prophet")
    assert ev[0]["involvedObject"]["kind"] == "PredictiveAutoscaler"
    # a series on its fallback: served observed, Degraded with the reason, a Warning event
    now = time.time()
    store.publish(Forecast(series_id="shop/web", generated_at=now, origin=now, step_seconds=60.0, mean=(1.0,) * 12,
                           quantiles={"p90": (1.0,) * 12}, model="persistence", status="fallback",
                           reason="model loses to the last value live", observed=((now, 1.0),),
                           meta={"ready_pods": 4, "cpu_request_cores": 0.5}))
    obj = wait_for("Degraded Fallback", lambda: _cond(o := _pa(cp), "Degraded").get("reason") == "Fallback" and o, timeout=30)
    assert obj["status"]["servedSource"] == "observed"
    assert "loses to the last value" in _cond(obj, "Degraded")["message"]
    assert _cond(obj, "Ready")["status"] == "True"
    wait_for("Fallback warning event", lambda: [e for e in cp.admin.json("/api/v1/namespaces/shop/events")["items"]
                                                if e["reason"] == "Fallback" and e["type"] == "Warning"], timeout=30)


def test_deleting_the_autoscaler_deletes_its_hpa_through_the_garbage_collector(running):
    cp, _ = running
    cp.kubectl("delete", "predictiveautoscaler", "web", "-n", "shop", "--wait=true")
    wait_for("HPA shop/web garbage-collected", lambda: cp.admin.get(
        "/apis/autoscaling/v2/namespaces/shop/horizontalpodautoscalers/web").status_code == 404, timeout=60)


API = {"apiVersion": "foresight.dev/v1alpha1", "kind": "PredictiveAutoscaler",
       "metadata": {"name": "api", "namespace": "shop"},
       "spec": {"scaleTargetRef": {"name": "api"}, "minReplicas": 1, "maxReplicas": 10,
                "metrics": [{"name": "cpu", "type": "Resource", "cpuRequestCores": 0.25},
                            {"name": "rps", "type": "Demand", "query": 'sum(rate(http_requests_total{app="api"}[2m]))',
                             "capacityPerReplica": 50}],
                "serving": {"sloMinutesPerDay": 7}}}


def test_a_demand_metric_gets_its_own_external_metric_series_and_serving_settings(running):
    cp, store = running
    now = time.time()
    rps = Forecast(series_id="shop/api/rps", generated_at=now, origin=now, step_seconds=60.0, mean=(100.0,) * 12,
                   quantiles={"p50": (100.0,) * 12, "p90": (120.0,) * 12}, model="ets", backtest_error=0.4,
                   observed=((now, 90.0),), meta={"ready_pods": 3, "metric": "rps", "capacity_per_replica": 50.0})
    store.publish(rps)
    cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(API))
    path = "/apis/foresight.dev/v1alpha1/namespaces/shop/predictiveautoscalers/api"
    obj = wait_for("api's rps status", lambda: [m for m in (cp.admin.json(path).get("status") or {}).get("metrics", [])
                                                if m["name"] == "rps" and m.get("servedSource") == "forecast"]
                   and cp.admin.json(path), timeout=60, detail=lambda: str(cp.admin.json(path).get("status")))
    # the HPA the API server stored: the CPU floor, the CPU load ratio and the demand's own ratio
    hpa = cp.admin.json("/apis/autoscaling/v2/namespaces/shop/horizontalpodautoscalers/api")
    assert [(m["type"], m.get("external", {}).get("metric", {}).get("name")) for m in hpa["spec"]["metrics"]] == [
        ("Resource", None), ("External", "predicted_cpu_load_ratio"), ("External", "predicted_rps_ratio")]
    assert hpa["spec"]["metrics"][2]["external"]["metric"]["selector"] == {"matchLabels": {"workload": "api"}}
    (m,) = [m for m in obj["status"]["metrics"] if m["name"] == "rps"]
    assert m["series"] == "shop/api/rps" and m["externalMetric"] == "predicted_rps_ratio"
    assert abs(float(m["servedValue"]) - 120.0 / (3 * 50.0)) < 0.01  # p90 120 rps / (3 ready x 50)
    # the trainer's workload: the target with its declared metric and its own serving settings
    from forecaster.config import parse_config

    def api_workload():
        cm = cp.admin.json("/api/v1/namespaces/foresight/configmaps/foresight-trainer-config")
        return parse_config(yaml.safe_load(cm["data"]["workloads.yaml"])).workload("shop/api")

    w = wait_for("shop/api in the trainer config", api_workload, timeout=30)
    assert [(x.name, x.capacity_per_replica) for x in w.metrics] == [("rps", 50.0)]
    assert w.serving.slo_minutes_per_day == 7


def test_serving_settings_the_trainer_refuses_are_reported_with_the_spec_path_in_status_and_event(running):
    cp, _ = running
    bad = {**API, "metadata": {"name": "api", "namespace": "shop"},
           "spec": {**API["spec"], "serving": {"quantiles": ["p75"]}}}  # not in the trainer's training.quantiles
    cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump(bad))
    path = "/apis/foresight.dev/v1alpha1/namespaces/shop/predictiveautoscalers/api"
    obj = wait_for("api InvalidWorkload", lambda: _cond(o := cp.admin.json(path), "Ready").get("reason") == "InvalidWorkload"
                   and o, timeout=30)
    assert _cond(obj, "Ready")["message"].startswith("spec.serving.quantiles[0]: 'p75' is not published")
    ev = wait_for("InvalidSpec event", lambda: [e for e in cp.admin.json("/api/v1/namespaces/shop/events")["items"]
                                              if e["reason"] == "InvalidSpec" and e["involvedObject"]["name"] == "api"],
                  timeout=30)
    assert "spec.serving.quantiles[0]" in ev[0]["message"] and ev[0]["type"] == "Warning"
    cp.kubectl("delete", "predictiveautoscaler", "api", "-n", "shop", "--wait=true")
