"""Observe mode against a real kube-apiserver and a real Redis store: Act -> Observe deletes the
HPA the operator created and writes what it would have done (status, printer columns, Events);
a user's own HPA of an observed workload stays; Observe -> Act brings the HPA back without the
trainer's config (so its restart digest) changing."""

from __future__ import annotations

import threading
import time

import pytest
import yaml

from core.store import Forecast, open_store
from kubeoperator.kube import KubeApi
from kubeoperator.runner import DIGEST_ANNOTATION, Operator, OperatorSettings
from tests.cluster.controlplane import wait_for
from tests.operator.test_operator_cluster import BASE, deployment

pytestmark = [pytest.mark.e2e]

HPAS = "/apis/autoscaling/v2/namespaces/shop/horizontalpodautoscalers"
PAS = "/apis/foresight.dev/v1alpha1/namespaces/shop/predictiveautoscalers"


def pa(name: str, mode: str) -> dict:
    return {"apiVersion": "foresight.dev/v1alpha1", "kind": "PredictiveAutoscaler",
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"mode": mode, "scaleTargetRef": {"name": name}, "minReplicas": 2, "maxReplicas": 20,
                     "metrics": [{"name": "cpu", "type": "Resource", "cpuRequestCores": 0.5}]}}


def publish(store, name: str, level: float) -> None:
    now = time.time()
    store.publish(Forecast(series_id=f"shop/{name}", generated_at=now, origin=now, step_seconds=60.0,
                           mean=(level,) * 12, quantiles={"p50": (level,) * 12, "p90": (level,) * 12}, model="ets",
                           observed=((now, level),), meta={"ready_pods": 3, "cpu_request_cores": 0.5}))


@pytest.fixture(scope="module")
def running(crds, redis_server):
    cp = crds
    cp.kubectl("delete", "predictiveautoscalers", "--all", "--all-namespaces", "--wait=true")
    cp.ensure_namespace("foresight")
    obs, legacy = deployment("shop", "obs"), deployment("shop", "legacy")
    obs["spec"]["replicas"] = legacy["spec"]["replicas"] = 3
    user_hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": "legacy", "namespace": "shop"},
                "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "legacy"},
                         "minReplicas": 3, "maxReplicas": 5, "metrics": [{"type": "Resource", "resource": {
                             "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}}]}}
    cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all([
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "foresight-workloads", "namespace": "foresight"},
         "data": {"workloads.yaml": yaml.safe_dump(BASE)}},
        deployment("foresight", "foresight-trainer"), obs, legacy, user_hpa]))
    store = open_store(redis_server.url)
    publish(store, "obs", 3.0)
    publish(store, "legacy", 1.0)
    op = Operator(KubeApi(str(cp.admin_kubeconfig)), store, OperatorSettings(resync_seconds=1.0, warmpool_configmap=None))
    stop = threading.Event()
    t = threading.Thread(target=op.run, args=(stop,), daemon=True)
    t.start()
    yield cp, store
    stop.set()
    op.wake()
    t.join(10)
    cp.kubectl("delete", "predictiveautoscalers", "--all", "-n", "shop", "--wait=true")
    cp.kubectl("delete", "hpa", "legacy", "-n", "shop", "--ignore-not-found")


def _digest(cp) -> str:
    """The digest of the trainer's effective file (what a restart, or the trainer's reload, follows)."""
    cm = cp.admin.json("/api/v1/namespaces/foresight/configmaps/foresight-trainer-config")
    return (cm["metadata"].get("annotations") or {}).get(DIGEST_ANNOTATION, "")


def test_act_then_observe_deletes_the_operators_hpa_and_reports_what_it_would_have_done(running):
    cp, store = running
    cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(pa("obs", "Act")))
    wait_for("the operator's HPA shop/obs", lambda: cp.admin.get(f"{HPAS}/obs").status_code == 200, timeout=60)
    digest = wait_for("trainer digest", lambda: _digest(cp), timeout=30)
    cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(pa("obs", "Observe")))
    wait_for("HPA shop/obs deleted in Observe mode", lambda: cp.admin.get(f"{HPAS}/obs").status_code == 404, timeout=60)
    # demand 3 cores at 0.5 per pod and target 0.7: 9 pods, reached within the 15-s scale-up limits
    obj = wait_for("would-have 9 replicas", lambda: ((o := cp.admin.json(f"{PAS}/obs")).get("status") or {})
                   .get("observe", {}).get("wouldHaveReplicas") == 9 and o, timeout=90,
                   detail=lambda: str(cp.admin.json(f"{PAS}/obs").get("status", {}).get("observe")))
    st = obj["status"]
    assert st["mode"] == "Observe" and "hpaName" not in st
    ob = st["observe"]
    assert ob["actualReplicas"] == 3 and ob["neededReplicas"] == 7
    assert ob["underCapacityMinutes"]["actual"] > 0 and ob["underCapacityMinutes"]["wouldHave"] == 0
    dep = cp.admin.json("/apis/apps/v1/namespaces/shop/deployments/obs")
    assert dep["spec"]["replicas"] == 3  # nothing scaled it
    cols = dict(zip(*[ln.split() for ln in cp.kubectl("get", "pas", "obs", "-n", "shop").stdout.splitlines()]))
    assert cols["MODE"] == "Observe" and cols["WOULD-HAVE"] == "9" and cols["ACTUAL"] == "3"
    events = [e for e in cp.admin.json("/api/v1/namespaces/shop/events")["items"] if e["involvedObject"]["name"] == "obs"]
    reasons = {e["reason"] for e in events}
    assert {"ModeChanged", "WouldScale"} <= reasons
    assert any("would ask for 9 replicas" in e["message"] for e in events if e["reason"] == "WouldScale")
    assert _digest(cp) == digest  # the mode is not in the trainer's file: nothing to reload, no refit

    cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(pa("obs", "Act")))
    hpa = wait_for("HPA shop/obs back in Act mode", lambda: (r := cp.admin.get(f"{HPAS}/obs")).status_code == 200 and r.json(),
                   timeout=60)
    assert hpa["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
    wait_for("status.observe gone", lambda: "observe" not in (cp.admin.json(f"{PAS}/obs").get("status") or {}), timeout=30)
    assert _digest(cp) == digest


def test_observe_leaves_the_users_own_hpa_of_the_workload_alone(running):
    cp, _ = running
    cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(pa("legacy", "Observe")))
    wait_for("legacy observed", lambda: "wouldHaveReplicas" in ((cp.admin.json(f"{PAS}/legacy").get("status") or {})
                                                                 .get("observe") or {}), timeout=60)
    time.sleep(3)  # a few passes of the 1-s resync
    hpa = cp.admin.json(f"{HPAS}/legacy")
    assert not hpa["metadata"].get("ownerReferences")
    assert hpa["spec"]["minReplicas"] == 3 and hpa["spec"]["metrics"][0]["type"] == "Resource"


def test_the_adapter_rest_and_dashboard_show_the_would_have_line_beside_the_actual_replicas(running):
    from fastapi.testclient import TestClient

    from adapter.app import create_app
    from adapter.observemode import ObserveView
    from core.kubeclient import KubeClient

    cp, store = running
    publish(store, "obs", 3.0)
    cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(pa("obs", "Observe")))
    st = wait_for("two observed syncs", lambda: len(((s := cp.admin.json(f"{PAS}/obs").get("status") or {})
                                                      .get("observe") or {}).get("recent") or []) >= 2 and s, timeout=60)
    app = create_app(store=store, pod_watch=(KubeClient.from_kubeconfig(str(cp.admin_kubeconfig)), {}))
    with TestClient(app) as client:
        row = wait_for("observe in REST", lambda: next((r for r in client.get("/api/v1/forecasts").json()["items"]
                                                         if r["series_id"] == "shop/obs" and (r.get("observe") or {})
                                                         .get("line")), None), timeout=30)
        ob = row["observe"]
        assert ob["autoscaler"] == "obs" and ob["actual_replicas"] == 3
        assert ob["would_have_replicas"] >= st["observe"]["wouldHaveReplicas"] >= 7
        assert all(p["actual"] == 3 for p in ob["line"]) and ob["line"][-1]["would_have"] == ob["would_have_replicas"]
        assert ob["view_error"] is None
        page = client.get("/").text
        assert 'class="would-have"' in page and 'class="actual"' in page and "Observe mode: would have" in page
        legacy = next(r for r in client.get("/api/v1/forecasts").json()["items"] if r["series_id"] == "shop/legacy")
        assert legacy["observe"]["autoscaler"] == "legacy"
    # an adapter whose ServiceAccount may not list autoscalers says so instead of showing nothing
    cp.kubectl("create", "serviceaccount", "no-pas", "-n", "shop", check=False)
    view = ObserveView(KubeClient.from_kubeconfig(str(cp.service_account_kubeconfig("shop", "no-pas"))))
    view.refresh()
    assert "HTTP 403" in view.last_error and "predictiveautoscalers.foresight.dev" in view.last_error
    from adapter.observemode import observe_row

    assert observe_row(view, "shop/obs", lambda: None) is None
    view.stop()
    client = KubeClient.from_kubeconfig(str(cp.service_account_kubeconfig("shop", "no-pas")))
    app = create_app(store=store, pod_watch=(client, {}))
    with TestClient(app) as client:
        body = wait_for("the refusal in /readyz", lambda: (b := client.get("/readyz").json()).get("observe_view_error") and b,
                        timeout=30)
        assert "HTTP 403" in body["observe_view_error"]
