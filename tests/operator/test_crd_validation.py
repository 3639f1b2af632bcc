"""The CRDs on a real kube-apiserver: valid objects are stored with their defaults, invalid
ones are refused by the schema with the field path in the API server's own error."""

from __future__ import annotations

import copy

import pytest

pytestmark = [pytest.mark.e2e]

PA = {
    "apiVersion": "foresight.dev/v1alpha1", "kind": "PredictiveAutoscaler",
    "metadata": {"name": "checkout", "namespace": "shop"},
    "spec": {
        "scaleTargetRef": {"name": "checkout"},
        "minReplicas": 2, "maxReplicas": 50,
        "metrics": [
            {"name": "cpu", "type": "Resource", "cpuRequestCores": 0.5},
            {"name": "rps", "type": "Demand", "query": 'sum(rate(http_requests_total{app="checkout"}[2m]))',
             "capacityPerReplica": 40},
        ],
        "serving": {"sloMinutesPerDay": 5, "headrooms": [1.0, 1.2], "targetValue": 0.7},
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300,
                                   "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}},
    },
}
PATH = "/apis/foresight.dev/v1alpha1/namespaces/shop/predictiveautoscalers"


def _create(cp, body, path=PATH):
    return cp.admin.post(path, body)


def _with(**changes):
    body = copy.deepcopy(PA)
    body["metadata"]["name"] = changes.pop("name", "bad")
    for dotted, value in changes.items():
        node = body
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        if value is _DELETE:
            del node[leaf]
        else:
            node[leaf] = value
    return body


_DELETE = object()


def test_a_valid_predictive_autoscaler_is_stored_with_its_defaults(crds):
    r = _create(crds, PA)
    assert r.status_code == 201, r.text
    spec = r.json()["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "checkout"}
    assert [m["name"] for m in spec["metrics"]] == ["cpu", "rps"]


@pytest.mark.parametrize("body, path_in_error", [
    (_with(spec__minReplicas=10, spec__maxReplicas=3), "spec.minReplicas"),
    (_with(spec__scaleTargetRef=_DELETE), "spec.scaleTargetRef"),
    (_with(spec__scaleTargetRef={"kind": "Deployment"}), "spec.scaleTargetRef.name"),
    (_with(spec__metrics=[]), "spec.metrics"),
    (_with(spec__metrics=[{"name": "rps", "type": "Demand", "query": "up"}]), "spec.metrics[0]"),
    (_with(spec__serving={"headrooms": [0.8, 1.0]}), "spec.serving.headrooms"),
    (_with(spec__serving={"sources": ["oracle"]}), "spec.serving.sources[0]"),
    (_with(spec__behavior={"scaleUp": {"selectPolicy": "Sometimes"}}), "spec.behavior.scaleUp.selectPolicy"),
    (_with(spec__metrics=[{"name": "cpu", "type": "Resource"},
                          {"name": "cpu_load", "type": "Demand", "query": "up", "capacityPerReplica": 1}]),
     "spec.metrics[1].name"),
    (_with(spec__metrics=[{"name": "rps_ratio", "type": "Demand", "query": "up", "capacityPerReplica": 1}]),
     "spec.metrics[0].name"),
    (_with(spec__metrics=[{"name": "a", "type": "Resource"}, {"name": "b", "type": "Resource"}]), "spec.metrics"),
], ids=["min-above-max", "no-target", "target-without-name", "no-metrics", "demand-without-capacity",
        "headroom-below-1", "unknown-source", "bad-select-policy", "demand-named-like-cpu", "demand-named-ratio",
        "two-resource-metrics"])
def test_an_invalid_predictive_autoscaler_is_refused_with_the_field_path(crds, body, path_in_error):
    r = _create(crds, body)
    assert r.status_code == 422, r.text
    status = r.json()
    fields = [c.get("field", "") for c in status["details"]["causes"]]
    assert any(f == path_in_error or f.startswith(path_in_error) for f in fields), (fields, status["message"])
    assert path_in_error in status["message"]


def test_a_demand_metric_may_be_named_with_underscores(crds):
    body = _with(name="queue", spec__metrics=[
        {"name": "queue_depth", "type": "Demand", "query": "sum(queue_depth)", "capacityPerReplica": 100}])
    r = _create(crds, body)
    assert r.status_code == 201, r.text
    crds.admin.delete(f"{PATH}/queue")


def test_an_unknown_field_is_refused_with_its_path_not_pruned_silently(crds):
    body = _with(spec__maxReplica=5)  # a typo of maxReplicas
    r = crds.admin.http.post(PATH, json=body, params={"fieldValidation": "Strict"})
    assert r.status_code == 400 or r.status_code == 422, r.text
    assert "spec.maxReplica" in r.text and "unknown field" in r.text
    # kubectl's default (server-side Strict validation) refuses it too, naming the path
    import json

    out = crds.kubectl("create", "-f", "-", input=json.dumps(_with(name="typo", spec__maxReplica=5)), check=False)
    assert out.returncode != 0
    assert 'unknown field "spec.maxReplica"' in out.stderr


def test_kubectl_get_shows_the_printer_columns(crds):
    r = crds.kubectl("get", "predictiveautoscalers", "-n", "shop", "-o", "wide")
    header = r.stdout.splitlines()[0].split()
    for col in ("TARGET", "MIN", "MAX", "READY", "MODEL", "SERVED", "SOURCE", "FORECAST-AGE", "REASON"):
        assert col in header, header


WP = {
    "apiVersion": "foresight.dev/v1alpha1", "kind": "WarmPool",
    "metadata": {"name": "checkout", "namespace": "shop"},
    "spec": {"workload": "checkout", "minWarm": 1, "maxWarm": 5, "capacityPerContainer": 0.5,
             "idleTTL": {"initialSeconds": 120, "decay": 0.15, "floorSeconds": 30},
             "template": {"image": "busybox", "command": ["sleep", "3600"], "resources": {"memory": "64Mi"}}},
}
WP_PATH = "/apis/foresight.dev/v1alpha1/namespaces/shop/warmpools"


def test_a_valid_warm_pool_is_stored_with_its_defaults(crds):
    r = crds.admin.post(WP_PATH, WP)
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["quantile"] == "p90" and r.json()["spec"]["backend"] == "kubernetes"


@pytest.mark.parametrize("spec, path_in_error", [
    ({"workload": "checkout", "minWarm": 6, "maxWarm": 5}, "spec.minWarm"),
    ({"minWarm": 1}, "spec.workload"),
    ({"workload": "checkout", "idleTTL": {"initialSeconds": 60, "floorSeconds": 90}}, "spec.idleTTL.floorSeconds"),
    ({"workload": "checkout", "idleTTL": {"decay": 1.0}}, "spec.idleTTL.decay"),
    ({"workload": "checkout", "backend": "docker"}, "spec.backend"),
    ({"workload": "checkout", "demand": "requests"}, "spec.requestRate"),
    ({"workload": "checkout", "demand": "both", "requestRate": {"series": "a/b"}}, "spec.requestRate.concurrencyPerContainer"),
], ids=["min-above-max", "no-workload", "floor-above-initial", "decay-1", "unknown-backend", "requests-without-rate",
        "rate-without-concurrency"])
def test_an_invalid_warm_pool_is_refused_with_the_field_path(crds, spec, path_in_error):
    body = {**WP, "metadata": {"name": "bad", "namespace": "shop"}, "spec": spec}
    r = crds.admin.post(WP_PATH, body)
    assert r.status_code == 422, r.text
    assert path_in_error in r.json()["message"]
