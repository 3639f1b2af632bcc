"""Delegated authentication and authorization over real HTTPS, against a test double of the
API server's TokenReview and SubjectAccessReview endpoints (tests/adapter/kube_double.py)."""

from __future__ import annotations

import ssl
import time

import httpx
import pytest

from adapter.app import create_app
from adapter.authz import SubjectAccessReviewAuthorizer, TokenReviewAuthenticator, request_attributes
from adapter.server import serve_in_thread
from adapter.tls import ensure_serving_cert
from core.kubeclient import KubeClient
from core.store import MemoryForecastStore
from tests.adapter.helpers import EXT, sample_forecast
from tests.adapter.kube_double import HPA, KubeDouble, Policy
from tests.stack import free_port

POLICY = Policy(
    tokens={
        "hpa-token": (HPA, ["system:serviceaccounts", "system:authenticated"]),
        "alice-token": ("alice", ["shop-team", "system:authenticated"]),
        "kube-sa-token": ("system:serviceaccount:foresight:foresight", ["system:authenticated"]),
    },
    namespaces={HPA: {"*"}, "shop-team": {"shop"}},
)


@pytest.fixture
def kube():
    double = KubeDouble(POLICY).start()
    yield double
    double.stop()


@pytest.fixture
def adapter(kube, tmp_path):
    store = MemoryForecastStore()
    now = time.time()
    store.publish(sample_forecast("shop", "checkout", now=now))
    store.publish(sample_forecast("bank", "ledger", now=now))
    api = KubeClient.for_server(kube.url, token="adapter-sa-token")
    app = create_app(None, store, authenticator=TokenReviewAuthenticator(api, cache_seconds=60),
                     authorizer=SubjectAccessReviewAuthorizer(api, cache_seconds=60))
    crt, key = ensure_serving_cert(tmp_path / "certs")
    handle = serve_in_thread(app, "127.0.0.1", free_port(), str(crt), str(key))
    ctx = ssl.create_default_context(cafile=str(crt))
    client = httpx.Client(base_url=handle.url, verify=ctx, timeout=10)
    yield client
    client.close()
    handle.stop()


def _get(client, path, token=None, **params):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return client.get(path, params=params, headers=headers)


def _metric(client, ns, name, token):
    return _get(client, f"{EXT}/namespaces/{ns}/predicted_cpu_cores", token, labelSelector=f"workload={name}")


def test_the_hpa_controller_reads_every_namespace(adapter):
    assert _metric(adapter, "shop", "checkout", "hpa-token").status_code == 200
    assert _metric(adapter, "bank", "ledger", "hpa-token").status_code == 200


def test_a_person_reads_only_the_namespaces_rbac_allows(adapter):
    assert _metric(adapter, "shop", "checkout", "alice-token").status_code == 200
    r = _metric(adapter, "bank", "ledger", "alice-token")
    assert r.status_code == 403
    body = r.json()
    assert body["kind"] == "Status" and body["reason"] == "Forbidden"
    assert 'User "alice" cannot get resource "predicted_cpu_cores"' in body["message"]
    assert 'namespace "bank"' in body["message"]


def test_the_rest_view_is_authorized_per_namespace_too(adapter):
    assert _get(adapter, "/api/v1/forecasts", "alice-token").status_code == 403  # cluster-wide list
    shop = _get(adapter, "/api/v1/forecasts", "alice-token", namespace="shop")
    assert shop.status_code == 200 and [i["workload"] for i in shop.json()["items"]] == ["checkout"]
    assert _get(adapter, "/api/v1/forecasts/shop/checkout", "alice-token").status_code == 200
    assert _get(adapter, "/api/v1/forecasts/bank/ledger", "alice-token").status_code == 403
    assert _get(adapter, "/api/v1/forecasts", "hpa-token").status_code == 200


def test_an_invalid_or_missing_token_is_401_and_probes_need_none(adapter):
    assert _metric(adapter, "shop", "checkout", "forged").status_code == 401
    assert _metric(adapter, "shop", "checkout", None).status_code == 401
    assert _get(adapter, "/readyz").status_code == 200
    assert _get(adapter, "/healthz").status_code == 200


def test_discovery_is_authorized_as_a_non_resource_path(adapter, kube):
    assert _get(adapter, EXT, "alice-token").status_code == 200
    spec = kube.access_reviews[-1]["spec"]
    assert spec["nonResourceAttributes"] == {"path": EXT, "verb": "get"}
    assert spec["user"] == "alice" and "shop-team" in spec["groups"]


def test_reviews_are_cached_so_the_api_server_is_not_called_per_request(adapter, kube):
    for _ in range(5):
        assert _metric(adapter, "shop", "checkout", "alice-token").status_code == 200
    assert len(kube.token_reviews) == 1
    assert len(kube.access_reviews) == 1
    sar = kube.access_reviews[0]["spec"]
    assert sar["resourceAttributes"] == {"verb": "get", "group": "external.metrics.k8s.io", "version": "v1beta1",
                                         "resource": "predicted_cpu_cores", "namespace": "shop"}
    assert kube.bearer_seen[0] == "Bearer adapter-sa-token"  # the adapter's own credentials
    assert "alice-token" not in str(kube.access_reviews)  # tokens never travel in a SAR


def test_an_api_server_that_does_not_answer_is_a_503_not_a_500(kube, tmp_path):
    store = MemoryForecastStore()
    store.publish(sample_forecast("shop", "checkout", now=time.time()))
    api = KubeClient.for_server(f"http://127.0.0.1:{free_port()}", token="x", timeout_seconds=2)  # nothing listens
    app = create_app(None, store, authenticator=TokenReviewAuthenticator(api), authorizer=SubjectAccessReviewAuthorizer(api))
    handle = serve_in_thread(app, "127.0.0.1", free_port())
    try:
        r = httpx.get(f"{handle.url}{EXT}/namespaces/shop/predicted_cpu_cores",
                      headers={"Authorization": "Bearer alice-token"}, timeout=10)
        assert r.status_code == 503
        assert "authorization could not be checked" in r.json()["message"]
        assert httpx.get(f"{handle.url}/readyz").status_code == 200
    finally:
        handle.stop()


def test_an_authenticator_that_fails_unexpectedly_answers_a_500_status_and_the_server_goes_on():
    # the hot path runs in front of FastAPI: its own errors must still become a metav1.Status
    class Broken:
        async def authenticate_token(self, token):
            raise RuntimeError("bug")

    store = MemoryForecastStore()
    store.publish(sample_forecast("shop", "checkout", now=time.time()))
    handle = serve_in_thread(create_app(None, store, authenticator=Broken()), "127.0.0.1", free_port())
    try:
        r = httpx.get(f"{handle.url}{EXT}/namespaces/shop/predicted_cpu_cores", headers={"Authorization": "Bearer x"},
                      timeout=10)
        assert r.status_code == 500 and r.json()["kind"] == "Status" and "internal error" in r.json()["message"]
        assert "bug" not in r.text  # internals are not leaked
        assert httpx.get(f"{handle.url}/healthz", timeout=10).status_code == 200
    finally:
        handle.stop()


def test_request_attributes_map_each_path_onto_rbac_terms():
    a = request_attributes("GET", f"{EXT}/namespaces/shop/predicted_cpu_load_ratio", {})
    assert (a.verb, a.resource, a.namespace, a.path) == ("get", "predicted_cpu_load_ratio", "shop", "")
    b = request_attributes("GET", "/api/v1/forecasts", {"namespace": "shop"})
    assert (b.verb, b.resource, b.namespace) == ("list", "forecasts", "shop")
    c = request_attributes("GET", "/metrics", {})
    assert (c.verb, c.path) == ("get", "/metrics")
    d = request_attributes("GET", "/", {})
    assert (d.verb, d.resource, d.namespace) == ("list", "forecasts", "")
