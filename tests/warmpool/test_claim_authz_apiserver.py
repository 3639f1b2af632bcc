"""Who may claim from which pool, decided by a REAL kube-apiserver (tests/cluster): the warm-pool
API over TLS authenticates callers' ServiceAccount tokens with a TokenReview and asks a
SubjectAccessReview per pool namespace, running as its own service account with the RBAC of
manifests/warmpool/rbac.yaml as applied."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import pytest

from adapter.tls import ensure_serving_cert
from core.store import MemoryForecastStore
from tests.warmpool.conftest import FakeClock
from warmpool.api import create_app
from warmpool.auth import Authenticator
from warmpool.authz import build_pool_authorizer
from warmpool.backends.kubernetes import token_reviewer
from warmpool.backends.sim import SimBackend
from warmpool.controller import Controller
from warmpool.policy import parse_policy
from warmpool.wiring import HttpServer, TLSFiles

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3000)]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from tests.cluster.controlplane import ControlPlane, build_binaries

    cp = ControlPlane(bin_dir=build_binaries(), dir=tmp_path_factory.mktemp("k8s-warmpool-authz")).start()
    try:
        cp.kubectl("apply", "--server-side", "-f", str(ROOT / "manifests/adapter/namespace.yaml"))
        cp.kubectl("apply", "--server-side", "-f", str(ROOT / "manifests/warmpool/rbac.yaml"))
        for ns in ("shop", "bank"):
            cp.ensure_namespace(ns)
        # alice and bob may claim from pools in shop; mallory has no grant
        for sa in ("alice", "bob", "mallory"):
            cp.kubectl("-n", "shop", "create", "serviceaccount", sa)
        r = cp.admin.post("/apis/rbac.authorization.k8s.io/v1/namespaces/shop/roles", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "warmpool-claimer", "namespace": "shop"},
            "rules": [{"apiGroups": ["foresight.dev"], "resources": ["warmpools"], "verbs": ["claim", "get"]}]})
        assert r.status_code == 201, r.text
        for sa in ("alice", "bob"):
            cp.kubectl("-n", "shop", "create", "rolebinding", f"{sa}-claims", "--role=warmpool-claimer",
                       f"--serviceaccount=shop:{sa}")
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="module")
def api(cluster, tmp_path_factory):
    clock = FakeClock()
    pools = [{"name": name, "workload": {"namespace": ns, "name": "web"}, "backend": "sim", "min_warm": 2}
             for name, ns in (("shop-web", "shop"), ("bank-web", "bank"))]
    policy = parse_policy({"apiVersion": "foresight/v1alpha1", "kind": "WarmPoolPolicy", "pools": pools})
    ctl = Controller(policy, MemoryForecastStore(), {"sim": SimBackend(clock, seed=1)}, clock=clock)
    ctl.step()
    clock.advance(2)
    ctl.step()
    kubeconfig = str(cluster.service_account_kubeconfig("foresight", "foresight-warmpool"))
    auth = Authenticator(token_review=token_reviewer(kubeconfig=kubeconfig))
    crt, key = ensure_serving_cert(tmp_path_factory.mktemp("warmpool-tls"))
    srv = HttpServer(create_app(ctl, auth, build_pool_authorizer(kubeconfig)), "127.0.0.1", 0,
                     tls=TLSFiles(str(crt), str(key))).start()
    client = httpx.Client(base_url=f"https://127.0.0.1:{srv.port}", verify=ssl.create_default_context(cafile=str(crt)), timeout=30)
    yield client, ctl, srv.port
    client.close()
    srv.stop()


def _post(client, path, token, **kw):
    return client.post(path, headers={"Authorization": f"Bearer {token}"}, **kw)


def test_a_caller_claims_only_from_pools_in_namespaces_its_rbac_allows(cluster, api):
    client, _, _ = api
    alice = cluster.service_account_token("shop", "alice")
    ok = _post(client, "/api/v1/pools/shop-web/claim", alice)
    assert ok.status_code == 200 and ok.json()["cold_start"] is False, ok.text
    denied = _post(client, "/api/v1/pools/bank-web/claim", alice)
    assert denied.status_code == 403, denied.text
    assert 'user "system:serviceaccount:shop:alice" may not claim warm pool "bank-web"' in denied.json()["detail"]
    assert 'namespace "bank"' in denied.json()["detail"]
    mallory = cluster.service_account_token("shop", "mallory")
    assert _post(client, "/api/v1/pools/shop-web/claim", mallory).status_code == 403
    assert _post(client, "/api/v1/pools/shop-web/claim", "not-a-token").status_code == 401
    # reads are authorized too: alice sees only the pool she may get
    listed = client.get("/api/v1/pools", headers={"Authorization": f"Bearer {alice}"}).json()["pools"]
    assert [p["pool"] for p in listed] == ["shop-web"]
    assert client.get("/api/v1/pools/bank-web", headers={"Authorization": f"Bearer {alice}"}).status_code == 403


def test_only_the_claimer_renews_or_releases_even_with_a_grant_in_the_namespace(cluster, api):
    client, _, _ = api
    alice, bob = cluster.service_account_token("shop", "alice"), cluster.service_account_token("shop", "bob")
    cid = {"container_id": _post(client, "/api/v1/pools/shop-web/claim", alice).json()["container_id"]}
    for verb in ("renew", "release"):
        r = _post(client, f"/api/v1/pools/shop-web/{verb}", bob, json=cid)
        assert r.status_code == 403 and "claimed by another caller" in r.json()["detail"], r.text
    assert _post(client, "/api/v1/pools/shop-web/renew", alice, json=cid).status_code == 200
    assert _post(client, "/api/v1/pools/shop-web/release", alice, json=cid).status_code == 200


def test_the_api_answers_only_over_tls(api):
    _, _, port = api
    with pytest.raises(httpx.HTTPError):  # a plain-HTTP request to the TLS port gets no HTTP answer
        r = httpx.post(f"http://127.0.0.1:{port}/api/v1/pools/shop-web/claim", timeout=10)
        r.raise_for_status()
