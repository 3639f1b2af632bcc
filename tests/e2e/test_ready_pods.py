"""The served ratio's denominator is the ready pods the HPA counts at that sync, read from a watch.

A forecast of 2.1 cores (0.5 core requests) is published once, by a trainer that saw 2 ready pods
(``meta.ready_pods: 2``), and never refreshed. The real HPA controller scales the Deployment from
2 to ceil(2.1 / (0.7 x 0.5)) = 6 pods. Divided by the published 2 pods, the ratio would stay 2.1
and the HPA would ask for ceil(2.1 x 6 / 0.7) = 18 at its next sync: positive feedback up to
maxReplicas. Divided by the 6 ready pods the adapter's watch counts, it is 0.7 and the HPA stays.

The trainer published no CPU request (as without kube-state-metrics): the watch reads it from the
pods' specs.
"""

from __future__ import annotations

import time

import pytest

from core.store import RedisForecastStore, make_forecast
from tests.cluster.controlplane import wait_for

pytestmark = [pytest.mark.e2e]

NS, NAME = "shop", "steady"
DEMAND, REQUEST = 2.1, 0.5


def _objects():
    labels = {"app": NAME}
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": NAME, "labels": labels},
           "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels},
                                 "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                                                          "resources": {"requests": {"cpu": "500m"}}}]}}}}
    # a sibling whose pods the name prefix would also match: they must not be counted
    sib_labels = {"app": f"{NAME}-gateway"}
    sibling = {**dep, "metadata": {"name": f"{NAME}-gateway", "labels": sib_labels},
               "spec": {**dep["spec"], "replicas": 3, "selector": {"matchLabels": sib_labels},
                        "template": {**dep["spec"]["template"], "metadata": {"labels": sib_labels}}}}
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": NAME, "namespace": NS},
           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME},
                    "minReplicas": 2, "maxReplicas": 30,
                    "metrics": [{"type": "External", "external": {
                        "metric": {"name": "predicted_cpu_load_ratio", "selector": {"matchLabels": {"workload": NAME}}},
                        "target": {"type": "Value", "value": "700m"}}}]}}
    return dep, sibling, hpa


def test_the_hpa_does_not_overshoot_after_a_scale_up_with_the_forecast_unchanged(control_plane, foresight_adapter):
    cp = control_plane
    cp.ensure_namespace(NS)
    now = time.time()
    store = RedisForecastStore(foresight_adapter.redis_url)
    try:
        store.publish(make_forecast(
            f"{NS}/{NAME}", origin=now - 60, step_seconds=60, mean=[DEMAND] * 12,
            quantiles={"p50": [DEMAND] * 12, "p90": [DEMAND] * 12}, model="seasonal_naive", generated_at=now,
            observed=tuple((now - 60 * (12 - i), DEMAND) for i in range(12)),
            meta={"namespace": NS, "workload": NAME, "kind": "Deployment", "labels": {"workload": NAME},
                  "ready_pods": 2}))  # no cpu_request_cores: the pods' own 500m, from the watch
    finally:
        store.close()
    dep, sibling, hpa = _objects()
    for body in (dep, sibling):
        r = cp.admin.post(f"/apis/apps/v1/namespaces/{NS}/deployments", body)
        assert r.status_code == 201, r.text
    r = cp.admin.post(f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers", hpa)
    assert r.status_code == 201, r.text

    def hpa_status():
        return cp.admin.json(f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers/{NAME}").get("status") or {}

    wait_for("the HPA to scale shop/steady to 6 on the forecast", lambda: hpa_status().get("desiredReplicas") == 6,
             timeout=120, detail=lambda: f"{hpa_status()} " + foresight_adapter.log.read_text()[-1500:])

    def ready_pods() -> int:
        pods = cp.admin.json(f"/api/v1/namespaces/{NS}/pods", labelSelector=f"app={NAME}")["items"]
        return sum(1 for p in pods if any(c["type"] == "Ready" and c["status"] == "True"
                                          for c in (p.get("status") or {}).get("conditions") or []))

    wait_for("6 ready pods", lambda: ready_pods() == 6, timeout=60)

    # Several syncs with 6 ready pods and the same forecast: the served ratio is demand / (6 x 0.5).
    seen = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        st = hpa_status()
        seen.append(st.get("desiredReplicas"))
        time.sleep(1)
    assert max(seen) == 6, seen  # divided by the published 2 pods it would ask for 18
    value = cp.admin.json(f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{NS}/predicted_cpu_load_ratio",
                          labelSelector=f"workload={NAME}")["items"][0]["value"]
    scale = {"n": 1e-9, "u": 1e-6, "m": 1e-3}
    ratio = float(value[:-1]) * scale[value[-1]] if value[-1] in scale else float(value)
    assert abs(ratio - DEMAND / (6 * REQUEST)) < 0.01, value
