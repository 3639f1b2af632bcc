"""Observe mode's autoscaler list (adapter/observemode.py) through the one client, against the kube
double: the list read, a missing CRD, and a refusal that says which grant is missing."""

from __future__ import annotations

from adapter.observemode import ObserveView
from core.kubeclient import KubeClient
from tests.adapter.kube_double import KubeDouble, Policy

PAS = "/apis/foresight.dev/v1alpha1/predictiveautoscalers"


def test_the_view_lists_autoscalers_says_a_missing_crd_is_none_and_names_the_missing_grant():
    double = KubeDouble(Policy()).start()
    try:
        view = ObserveView(KubeClient.for_server(double.url, token="sa"))
        view.refresh()  # no CRD: nothing observed, and no error
        assert view.synced and view.last_error is None and view.of("shop/api") is None
        double.pods.workloads[PAS] = {"items": [{
            "metadata": {"name": "api-pa", "namespace": "shop"},
            "spec": {"mode": "Observe", "scaleTargetRef": {"name": "api"}, "minReplicas": 2, "maxReplicas": 9},
            "status": {"observe": {"wouldHaveReplicas": 5}}}]}
        view.refresh()
        assert view.of("shop/api")["autoscaler"] == "api-pa" and view.of("shop/api")["observe"] == {"wouldHaveReplicas": 5}
        double.pods.forbidden.add(PAS)
        view.refresh()
        assert view.last_error.startswith("listing PredictiveAutoscalers: HTTP 403")
        assert "predictiveautoscalers.foresight.dev" in view.last_error
        assert view.of("shop/api")["autoscaler"] == "api-pa"  # the last view stays
    finally:
        double.stop()
