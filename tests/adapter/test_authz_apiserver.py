"""Delegated authentication and authorization against a REAL kube-apiserver (tests/cluster):
the adapter authenticates as its service account, granted system:auth-delegator by
manifests/adapter/rbac.yaml as applied, and real RBAC decides who reads which namespace."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from adapter.app import create_app
from adapter.authz import SubjectAccessReviewAuthorizer, TokenReviewAuthenticator
from adapter.server import serve_in_thread
from core.kubeclient import KubeClient
from core.store import MemoryForecastStore
from tests.adapter.helpers import EXT, sample_forecast
from tests.stack import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3000)]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from tests.cluster.controlplane import ControlPlane, build_binaries

    cp = ControlPlane(bin_dir=build_binaries(), dir=tmp_path_factory.mktemp("k8s-authz")).start()
    try:
        cp.kubectl("apply", "--server-side", "-f", str(ROOT / "manifests/adapter/namespace.yaml"))
        cp.kubectl("apply", "--server-side", "-f", str(ROOT / "manifests/adapter/rbac.yaml"))
        for ns in ("shop", "bank"):
            cp.ensure_namespace(ns)
        # alice may read what foresight serves in shop only; mallory has no grant at all
        cp.kubectl("-n", "shop", "create", "serviceaccount", "alice")
        cp.kubectl("-n", "shop", "create", "serviceaccount", "mallory")
        cp.kubectl("-n", "shop", "create", "serviceaccount", "viewer")
        cp.kubectl("-n", "shop", "create", "rolebinding", "viewer-views", "--clusterrole=view",
                   "--serviceaccount=shop:viewer")
        r = cp.admin.post("/apis/rbac.authorization.k8s.io/v1/namespaces/shop/roles", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "foresight-reader", "namespace": "shop"},
            "rules": [{"apiGroups": ["external.metrics.k8s.io"], "resources": ["predicted_cpu_cores", "forecasts"],
                       "verbs": ["get", "list"]}]})
        assert r.status_code == 201, r.text
        cp.kubectl("-n", "shop", "create", "rolebinding", "alice-reads", "--role=foresight-reader",
                   "--serviceaccount=shop:alice")
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="module")
def adapter(cluster):
    store = MemoryForecastStore()
    store.publish(sample_forecast("shop", "checkout", now=time.time()))
    store.publish(sample_forecast("bank", "ledger", now=time.time()))
    kube = KubeClient.from_kubeconfig(str(cluster.service_account_kubeconfig("foresight", "foresight")))
    app = create_app(None, store, authenticator=TokenReviewAuthenticator(kube), authorizer=SubjectAccessReviewAuthorizer(kube))
    handle = serve_in_thread(app, "127.0.0.1", free_port())
    yield handle.url
    handle.stop()


def _get(url, path, token, **params):
    return httpx.get(url + path, params=params, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def test_a_real_service_account_token_reads_only_the_namespace_its_role_allows(cluster, adapter):
    alice = cluster.service_account_token("shop", "alice")
    ok = _get(adapter, f"{EXT}/namespaces/shop/predicted_cpu_cores", alice, labelSelector="workload=checkout")
    assert ok.status_code == 200 and ok.json()["items"][0]["metricLabels"]["workload"] == "checkout"
    denied = _get(adapter, f"{EXT}/namespaces/bank/predicted_cpu_cores", alice, labelSelector="workload=ledger")
    assert denied.status_code == 403
    assert 'User "system:serviceaccount:shop:alice" cannot get resource "predicted_cpu_cores"' in denied.json()["message"]
    assert _get(adapter, "/api/v1/forecasts", alice, namespace="shop").status_code == 200
    assert _get(adapter, "/api/v1/forecasts", alice).status_code == 403  # cluster-wide list


def test_a_token_without_a_grant_is_forbidden_and_a_forged_one_unauthorized(cluster, adapter):
    mallory = cluster.service_account_token("shop", "mallory")
    assert _get(adapter, f"{EXT}/namespaces/shop/predicted_cpu_cores", mallory,
                labelSelector="workload=checkout").status_code == 403
    assert _get(adapter, f"{EXT}/namespaces/shop/predicted_cpu_cores", "not-a-token",
                labelSelector="workload=checkout").status_code == 401
    # discovery is a non-resource path every authenticated caller may GET (system:discovery)
    assert _get(adapter, EXT, mallory).status_code == 200


def test_whoever_may_view_a_namespace_reads_its_forecasts_through_the_aggregated_role(cluster, adapter):
    viewer = cluster.service_account_token("shop", "viewer")

    def reads() -> bool:  # the clusterrole-aggregation controller folds the rules into view
        return _get(adapter, "/api/v1/forecasts/shop/checkout", viewer).status_code == 200

    deadline = time.monotonic() + 60
    while not reads() and time.monotonic() < deadline:
        time.sleep(1)
    assert reads()
    assert _get(adapter, "/api/v1/forecasts/bank/ledger", viewer).status_code == 403
