"""spec.scaler KEDA: the operator's pure step renders a KEDA ScaledObject in place of the HPA
(external-push triggers on foresight's scaler, the CPU floor as KEDA's cpu trigger, min 0
allowed), with the same Observe mode, status and Events. No cluster."""

from __future__ import annotations

import copy

from kubeoperator.reconcile import reconcile_autoscaler
from kubeoperator.scaledobject import KedaTarget
from kubeoperator.spec import parse_autoscaler
from tests.operator.test_reconcile import NOW, PA, forecast

KEDA = KedaTarget(scaler_address="foresight-keda.foresight.svc:9443", auth_kind="ClusterTriggerAuthentication",
                  auth_name="foresight-keda")


def keda_pa(**spec) -> dict:
    obj = copy.deepcopy(PA)
    obj["spec"].update({"scaler": "KEDA", "minReplicas": 0, **spec})
    return obj


def test_scaler_defaults_to_hpa_and_reads_keda():
    assert parse_autoscaler(PA).scaler == "HPA"
    assert parse_autoscaler(keda_pa()).scaler == "KEDA"


def test_with_keda_the_operator_renders_a_scaled_object_and_no_hpa():
    act = reconcile_autoscaler(keda_pa(), {}, NOW, keda=KEDA)
    assert act.hpa is None  # the runner deletes an HPA this autoscaler created before
    so = act.scaled_object
    assert (so["apiVersion"], so["kind"]) == ("keda.sh/v1alpha1", "ScaledObject")
    assert so["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert so["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "foresight-operator"}
    spec = so["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "checkout"}
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (0, 50)  # scale to zero allowed
    assert spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] == PA["spec"]["behavior"]


def test_each_predicted_metric_is_an_external_push_trigger_on_the_scaler_with_the_hpa_paths_target():
    triggers = reconcile_autoscaler(keda_pa(), {}, NOW, keda=KEDA).scaled_object["spec"]["triggers"]
    assert triggers[0] == {"type": "cpu", "name": "reactive-cpu-floor", "metricType": "Utilization",
                           "metadata": {"value": "70"}}
    push = triggers[1:]
    assert [t["type"] for t in push] == ["external-push", "external-push"]
    assert [t["metadata"]["metric"] for t in push] == ["predicted_cpu_load_ratio", "predicted_rps_ratio"]
    for t in push:
        assert t["metricType"] == "Value"  # the HPA path's target type: the ratio is served per workload
        assert t["metadata"]["scalerAddress"] == "foresight-keda.foresight.svc:9443"
        assert t["metadata"]["workload"] == "checkout" and "namespace" not in t["metadata"]
        assert t["metadata"]["targetValue"] == "0.7"
        assert t["authenticationRef"] == {"name": "foresight-keda", "kind": "ClusterTriggerAuthentication"}


def test_the_trigger_metadata_is_what_the_scaler_accepts():
    from adapter.keda.request import parse_ref

    so = reconcile_autoscaler(keda_pa(), {}, NOW, keda=KEDA).scaled_object
    for t in so["spec"]["triggers"][1:]:
        req = parse_ref(so["metadata"]["name"], so["metadata"]["namespace"], t["metadata"])
        assert req.series_id == "shop/checkout" and req.target_value == 0.7
        assert req.cooldown_seconds == 0  # KEDA's cooldownPeriod does the waiting, once


def test_without_the_reactive_floor_only_the_push_triggers_remain():
    so = reconcile_autoscaler(keda_pa(reactiveFloor={"enabled": False}), {}, NOW, keda=KEDA).scaled_object
    assert {t["type"] for t in so["spec"]["triggers"]} == {"external-push"}


def test_status_names_the_scaled_object_and_kedas_hpa():
    pa = parse_autoscaler(keda_pa())
    fcs = {pa.series_id(m): forecast(series=pa.series_id(m)) for m in pa.metrics}
    act = reconcile_autoscaler(keda_pa(), fcs, NOW, keda=KEDA)
    st = act.status
    assert (st["scaler"], st["scaledObjectName"], st["hpaName"]) == ("KEDA", "checkout", "keda-hpa-checkout")
    ready = next(c for c in st["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "Serving")
    assert "ScaledObject checkout (KEDA)" in ready["message"]
    assert st["metrics"][0]["servedSource"] == "forecast"  # the same served value as with an HPA


def test_observe_mode_with_keda_renders_nothing_that_acts():
    obj = keda_pa(mode="Observe")
    obj["status"] = {"scaler": "KEDA", "scaledObjectName": "checkout", "mode": "Act"}
    act = reconcile_autoscaler(obj, {"shop/checkout": forecast()}, NOW, keda=KEDA)
    assert act.hpa is None and act.scaled_object is None
    assert act.delete_scaled_object  # the ScaledObject of the Act sync goes
    assert act.status["scaledObjectName"] is None and act.status["hpaName"] is None
    assert "wouldHaveReplicas" in act.status["observe"]


def test_switching_back_to_hpa_deletes_the_scaled_object_and_says_so():
    obj = copy.deepcopy(PA)
    obj["status"] = {"scaler": "KEDA", "scaledObjectName": "checkout", "mode": "Act"}
    act = reconcile_autoscaler(obj, {}, NOW, keda=KEDA)
    assert act.hpa is not None and act.scaled_object is None and act.delete_scaled_object
    assert any(e.reason == "ScalerChanged" and "an HPA replaces the ScaledObject" in e.message for e in act.events)


def test_an_hpa_autoscaler_never_deletes_a_scaled_object():
    act = reconcile_autoscaler(PA, {}, NOW, keda=KEDA)
    assert not act.delete_scaled_object and act.status["scaledObjectName"] is None and act.status["scaler"] == "HPA"


class RecordingApi:
    """The runner's side of kubeoperator.kube.KubeApi, recording the writes (no cluster)."""

    def __init__(self, objs):
        self.objs, self.calls = objs, []

    def list(self, kind, api_version=None):
        return copy.deepcopy(self.objs) if kind == "PredictiveAutoscaler" else []

    def get_configmap(self, namespace, name):
        return None

    def apply(self, body):
        self.calls.append(("apply", body["kind"], body["metadata"]["name"]))
        return body

    def delete_owned_hpa(self, namespace, name, uid):
        self.calls.append(("delete", "HorizontalPodAutoscaler", name))

    def delete_owned(self, api_version, kind, namespace, name, uid):
        self.calls.append(("delete", kind, name))

    def patch_status(self, kind, namespace, name, status):
        self.calls.append(("status", kind, name))

    def emit_event(self, obj, ev, now):
        pass


def test_the_runner_applies_the_scaled_object_and_removes_its_own_hpa():
    from core.store import MemoryForecastStore
    from kubeoperator.runner import Operator, OperatorSettings

    api = RecordingApi([keda_pa()])
    rep = Operator(api, MemoryForecastStore(), OperatorSettings(warmpool_configmap=None, keda=KEDA),
                   clock=lambda: NOW).step()
    assert not rep.errors
    assert ("apply", "ScaledObject", "checkout") in api.calls
    assert ("delete", "HorizontalPodAutoscaler", "checkout") in api.calls
    assert not any(c[:2] == ("apply", "HorizontalPodAutoscaler") for c in api.calls)
    back = copy.deepcopy(PA)
    back["status"] = {"scaler": "KEDA", "scaledObjectName": "checkout", "mode": "Act"}
    api = RecordingApi([back])
    Operator(api, MemoryForecastStore(), OperatorSettings(warmpool_configmap=None, keda=KEDA), clock=lambda: NOW).step()
    assert ("apply", "HorizontalPodAutoscaler", "checkout") in api.calls
    assert ("delete", "ScaledObject", "checkout") in api.calls


def test_the_mode_change_event_names_the_scaled_object_with_keda():
    obj = keda_pa(mode="Observe")
    obj["status"] = {"scaler": "KEDA", "scaledObjectName": "checkout", "mode": "Act"}
    act = reconcile_autoscaler(obj, {}, NOW, keda=KEDA)
    assert any(e.reason == "ModeChanged" and "the ScaledObject is deleted" in e.message for e in act.events)
