"""A hostile tenant on a REAL control plane (tests/cluster): a developer of namespace ``a``, with the
access an application team gets (the built-in ``edit`` ClusterRole bound in ``a``, plus the
Role below for foresight's own resources), tries every surface foresight has against namespace
``b``. Each test is one surface: the request for ``b`` is refused, and the same request for ``a``
succeeds, so a refusal is never an outage. docs/operations/tenant-isolation.md lists the same
surfaces ("The surfaces, tested").

What runs for real: kube-apiserver with RBAC, the aggregator and the clusterrole-aggregation
controller; the adapter (HTTPS, front-proxy authentication from the aggregator, TokenReview and
SubjectAccessReview as its service account with manifests/adapter/rbac.yaml applied) registered
as the external metrics APIService; the warm-pool API (TLS, TokenReview, SubjectAccessReview per
pool namespace, manifests/warmpool/rbac.yaml); the operator's pass over the objects the tenant
created with its own credentials; the KEDA scaler over mutual TLS. The store is in memory.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
from pathlib import Path

import grpc
import httpx
import pytest
import yaml

from adapter.app import create_app as create_adapter
from adapter.authz import SubjectAccessReviewAuthorizer, TokenReviewAuthenticator
from adapter.keda import externalscaler_pb2 as pb, externalscaler_pb2_grpc as pb_grpc
from adapter.keda.server import start_keda_server
from adapter.server import serve_in_thread
from adapter.settings import AdapterSettings, AuthSettings
from adapter.tls import ensure_serving_cert, write_ca, write_signed
from core.kubeclient import KubeClient
from core.store import MemoryForecastStore
from kubeoperator.kube import KubeApi
from kubeoperator.runner import Operator, OperatorSettings
from tests.adapter.helpers import EXT, sample_forecast
from tests.cluster.controlplane import ROOT, ControlPlane, build_binaries, free_port, wait_for
from tests.keda.conftest import Certs as KedaCerts, channel
from tests.warmpool.conftest import FakeClock
from warmpool.api import create_app as create_warmpool_api
from warmpool.auth import Authenticator
from warmpool.authz import build_pool_authorizer
from warmpool.backends.kubernetes import token_reviewer
from warmpool.backends.sim import SimBackend
from warmpool.controller import Controller
from warmpool.policy import parse_policy
from warmpool.wiring import HttpServer, TLSFiles

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3000)]

CRDS = sorted((ROOT / "manifests" / "crds").glob("*.yaml"))
# What a platform team grants an application team for foresight's resources in its namespace, on
# top of `edit` (which has no rules for custom resources nobody aggregated into it): create and
# manage PredictiveAutoscalers and WarmPools, and claim from the namespace's pools.
DEVELOPER_RULES = [
    {"apiGroups": ["foresight.dev"], "resources": ["predictiveautoscalers", "warmpools"],
     "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
    {"apiGroups": ["foresight.dev"], "resources": ["warmpools"], "verbs": ["claim"]},
]
BASE = {"apiVersion": "foresight/v1alpha1", "kind": "WorkloadConfig", "source": {"url": "prometheus://prometheus:9090"},
        "store": {"url": "redis://redis:6379/0"}, "workloads": []}
RATIO = "predicted_cpu_load_ratio"


def _must(r: httpx.Response, *codes: int) -> httpx.Response:
    assert r.status_code in codes, f"{r.request.method} {r.request.url}: {r.status_code} {r.text[:500]}"
    return r


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cp = ControlPlane(bin_dir=build_binaries(), dir=tmp_path_factory.mktemp("k8s-tenancy")).start()
    try:
        cp.kubectl("apply", "--server-side", *[a for p in CRDS for a in ("-f", str(p))])
        for f in ("adapter/namespace.yaml", "adapter/rbac.yaml", "adapter/apiservice.yaml", "warmpool/rbac.yaml"):
            cp.kubectl("apply", "--server-side", "-f", str(ROOT / "manifests" / f))
        cp.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                   "crd/predictiveautoscalers.foresight.dev", "crd/warmpools.foresight.dev")
        for ns in ("a", "b"):
            cp.ensure_namespace(ns)
            cp.kubectl("-n", ns, "create", "serviceaccount", "dev")
            _must(cp.admin.post(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "foresight-developer", "namespace": ns}, "rules": DEVELOPER_RULES}), 201)
            cp.kubectl("-n", ns, "create", "rolebinding", "dev-edit", "--clusterrole=edit", f"--serviceaccount={ns}:dev")
            cp.kubectl("-n", ns, "create", "rolebinding", "dev-foresight", "--role=foresight-developer",
                       f"--serviceaccount={ns}:dev")
        cp.ensure_namespace("foresight")
        cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "foresight-workloads", "namespace": "foresight"},
             "data": {"workloads.yaml": yaml.safe_dump(BASE)}}))
        cp.tenant_a = cp.service_account_kubeconfig("a", "dev")  # kubectl as the tenant
        cp.tokens = {ns: cp.service_account_token(ns, "dev") for ns in ("a", "b")}
        # edit reaches foresight's forecasts through the aggregated foresight-forecast-viewer role
        wait_for("the edit role aggregates foresight-forecast-viewer", lambda: "forecasts" in json.dumps(
            cp.admin.json("/apis/rbac.authorization.k8s.io/v1/clusterroles/edit").get("rules", [])), timeout=120)
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="module")
def store():
    s = MemoryForecastStore()
    s.publish(sample_forecast("a", "web", now=time.time(), p90=(1.0, 1.2, 1.4), observed=0.9))
    s.publish(sample_forecast("b", "ledger", now=time.time(), p90=(7.0, 8.0, 9.0), observed=6.5))
    return s


# ------------------------------------------------------------------ the adapter, as the APIService


@pytest.fixture(scope="module")
def adapter(cluster, store, tmp_path_factory):
    """The adapter as the chart runs it: HTTPS with a certificate for foresight-adapter.foresight.svc,
    the aggregator's front-proxy CA and names from kube-system/extension-apiserver-authentication,
    TokenReview and SubjectAccessReview as its own service account; the APIService points at it."""
    from tests.e2e.conftest import apiservice_available, apiservice_detail, point_service_at_localhost, wire_apiservice

    cp, d = cluster, tmp_path_factory.mktemp("tenancy-adapter")
    ca_crt, _, ca, ca_key = write_ca(d, "serving-ca")
    crt, key = write_signed(d, "adapter", ca, ca_key, cn="foresight-adapter", client=False,
                            sans=["foresight-adapter.foresight.svc", "localhost", "127.0.0.1"])
    auth_cm = cp.admin.json("/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication")["data"]
    (d / "requestheader-ca.crt").write_text(auth_cm["requestheader-client-ca-file"])
    kube = KubeClient.from_kubeconfig(str(cp.service_account_kubeconfig("foresight", "foresight")))
    settings = AdapterSettings(auth=AuthSettings(requestheader_ca_file=str(d / "requestheader-ca.crt"),
                                                 allowed_names=tuple(json.loads(auth_cm["requestheader-allowed-names"]))))
    app = create_adapter(settings, store, authenticator=TokenReviewAuthenticator(kube),
                         authorizer=SubjectAccessReviewAuthorizer(kube))
    handle = serve_in_thread(app, "127.0.0.1", free_port(), str(crt), str(key), client_ca_file=str(d / "requestheader-ca.crt"))
    try:
        point_service_at_localhost(cp, "foresight", "foresight-adapter")
        wire_apiservice(cp, "v1beta1.external.metrics.k8s.io", int(handle.url.rsplit(":", 1)[1]),
                        base64.b64encode(Path(ca_crt).read_bytes()).decode())
        wait_for("APIService v1beta1.external.metrics.k8s.io Available",
                 lambda: apiservice_available(cp, "v1beta1.external.metrics.k8s.io"), timeout=120,
                 detail=lambda: apiservice_detail(cp, "v1beta1.external.metrics.k8s.io"))
        handle.client = httpx.Client(base_url=handle.url, verify=ssl.create_default_context(cafile=str(ca_crt)), timeout=30)
        handle.app = app
        yield handle
    finally:
        handle.stop()


def _as(cluster, ns: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {cluster.tokens[ns]}"}


def test_rest_refuses_another_namespaces_forecasts_and_serves_the_tenants_own(cluster, adapter):
    c = adapter.client
    own = _must(c.get("/api/v1/forecasts/a/web", headers=_as(cluster, "a")), 200)
    assert own.json()["namespace"] == "a"
    for path, params in (("/api/v1/forecasts/b/ledger", {}), ("/api/v1/forecasts/b/ledger", {"format": "png"}),
                         ("/api/v1/forecasts", {"namespace": "b"}), ("/api/v1/forecasts", {})):
        r = _must(c.get(path, params=params, headers=_as(cluster, "a")), 403)
        assert 'User "system:serviceaccount:a:dev" cannot' in r.json()["message"], r.text
    listed = _must(c.get("/api/v1/forecasts", params={"namespace": "a"}, headers=_as(cluster, "a")), 200).json()
    assert [i["workload"] for i in listed["items"]] == ["web"]


def test_the_external_metrics_api_through_the_apiserver_refuses_another_namespace(cluster, adapter):
    def raw(ns: str, workload: str):
        return cluster.kubectl("get", "--raw", f"{EXT}/namespaces/{ns}/{RATIO}?labelSelector=workload%3D{workload}",
                               kubeconfig=cluster.tenant_a, check=False)

    own = raw("a", "web")
    assert own.returncode == 0, own.stderr
    assert [i["metricLabels"]["workload"] for i in json.loads(own.stdout)["items"]] == ["web"]
    denied = raw("b", "ledger")
    assert denied.returncode != 0 and "forbidden" in denied.stderr.lower(), (denied.stdout, denied.stderr)
    assert "ledger" not in denied.stdout
    # the adapter's own check, for a caller that reaches its port directly with a token
    r = _must(adapter.client.get(f"{EXT}/namespaces/b/{RATIO}", params={"labelSelector": "workload=ledger"},
                                 headers=_as(cluster, "a")), 403)
    assert 'in the namespace "b"' in r.json()["message"] and "ledger" not in r.text


# ------------------------------------------------------------------ the operator: queries, pools, status


@pytest.fixture(scope="module")
def operator(cluster, store):
    op = Operator(KubeApi(str(cluster.admin_kubeconfig)), store,
                  OperatorSettings(warmpool_base_configmap=None, warmpool_configmap="foresight-warmpool-policy"))
    return op


def _apply_as_tenant(cluster, obj: dict, ns: str):
    return cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(obj), kubeconfig=cluster.tenant_a, check=False)


def _autoscaler(name: str, query: str) -> dict:
    return {"apiVersion": "foresight.dev/v1alpha1", "kind": "PredictiveAutoscaler", "metadata": {"name": name},
            "spec": {"scaleTargetRef": {"name": name}, "maxReplicas": 10,
                     "metrics": [{"name": "rps", "type": "Demand", "query": query, "capacityPerReplica": 40}]}}


def _ready(cluster, kind: str, ns: str, name: str) -> dict:
    obj = cluster.admin.json(f"/apis/foresight.dev/v1alpha1/namespaces/{ns}/{kind}/{name}")
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == "Ready"), {})


def _configmap(cluster, name: str, key: str) -> str:
    return cluster.admin.json(f"/api/v1/namespaces/foresight/configmaps/{name}")["data"][key]


def test_a_promql_query_naming_another_namespace_is_refused_and_the_tenants_own_runs_confined(cluster, operator):
    spy = _apply_as_tenant(cluster, _autoscaler("spy", 'sum(rate(http_requests_total{namespace="b"}[2m]))'), "a")
    own = _apply_as_tenant(cluster, _autoscaler("web", 'sum(rate(http_requests_total{job="web"}[2m]))'), "a")
    assert spy.returncode == 0 and own.returncode == 0, spy.stderr + own.stderr
    operator.step()
    refused = _ready(cluster, "predictiveautoscalers", "a", "spy")
    assert (refused.get("status"), refused.get("reason")) == ("False", "QueryNotConfined"), refused
    assert 'spec.metrics[0].query: selector http_requests_total{namespace="b"}' in refused["message"]
    trainer = yaml.safe_load(_configmap(cluster, "foresight-trainer-config", "workloads.yaml"))
    queries = [m["query"] for w in trainer["workloads"] for m in w.get("metrics", [])]
    assert queries == ['sum(rate(http_requests_total{job="web",namespace="a"}[2m]))'], queries
    assert _ready(cluster, "predictiveautoscalers", "a", "web").get("reason") != "QueryNotConfined"


def test_a_warm_pool_following_another_namespaces_forecast_is_refused_and_the_tenants_own_is_kept(cluster, operator):
    def pool(name: str, series: str) -> dict:
        return {"apiVersion": "foresight.dev/v1alpha1", "kind": "WarmPool", "metadata": {"name": name},
                "spec": {"workload": "web", "series": series, "backend": "sim", "maxWarm": 2}}

    assert _apply_as_tenant(cluster, pool("spy", "b/ledger"), "a").returncode == 0
    assert _apply_as_tenant(cluster, pool("web", "a/web"), "a").returncode == 0
    operator.step()
    refused = _ready(cluster, "warmpools", "a", "spy")
    assert refused.get("status") == "False" and "spec.series: 'b/ledger' is a forecast of namespace 'b'" in refused["message"]
    pools = yaml.safe_load(_configmap(cluster, "foresight-warmpool-policy", "policy.yaml"))["pools"]
    assert [(p["name"], p["series"]) for p in pools] == [("a.web", "a/web")]


def test_creating_reading_or_patching_another_namespaces_objects_and_status_is_forbidden(cluster, operator):
    """The status the operator writes (served values, the model, the query's problems) is read
    through the API server: a tenant reads and writes its own namespace's objects only."""
    admin_made = _autoscaler("ledger", "sum(rate(x[2m]))")
    _must(cluster.admin.post("/apis/foresight.dev/v1alpha1/namespaces/b/predictiveautoscalers",
                             {**admin_made, "metadata": {"name": "ledger", "namespace": "b"}}), 201, 409)
    operator.step()
    as_a = dict(kubeconfig=cluster.tenant_a, check=False)
    for args in (("get", "pas", "-n", "b"), ("get", "pas", "ledger", "-n", "b", "-o", "jsonpath={.status}"),
                 ("get", "warmpools", "-n", "b"), ("get", "events", "-n", "b"), ("get", "pas", "--all-namespaces"),
                 ("patch", "pas", "ledger", "-n", "b", "--subresource=status", "--type=merge",
                  "-p", '{"status":{"conditions":[]}}'),
                 ("patch", "pas", "ledger", "-n", "b", "--type=merge", "-p", '{"spec":{"maxReplicas":1}}')):
        r = cluster.kubectl(*args, **as_a)
        assert r.returncode != 0 and "forbidden" in r.stderr.lower(), (args, r.stdout, r.stderr)
    assert _apply_as_tenant(cluster, {**admin_made, "metadata": {"name": "x", "namespace": "b"}}, "b").returncode != 0
    assert _apply_as_tenant(cluster, _autoscaler("web", "sum(rate(x[2m]))"), "a").returncode == 0
    operator.step()
    own = cluster.kubectl("get", "pas", "web", "-n", "a", "-o", "jsonpath={.status.conditions[0].type}", **as_a)
    assert own.returncode == 0 and own.stdout, own.stderr


# ------------------------------------------------------------------ the warm-pool API


@pytest.fixture(scope="module")
def warm_pools(cluster, tmp_path_factory):
    """The controller with a pool of each namespace (different runtime classes, so the cold-start
    figures of one are told apart from the other's), behind the API as the chart serves it."""
    clock = FakeClock()
    pools = [{"name": "a.web", "workload": {"namespace": "a", "name": "web"}, "backend": "sim", "min_warm": 2,
              "runtime_class": "crun"},
             {"name": "b.ledger", "workload": {"namespace": "b", "name": "ledger"}, "backend": "sim", "min_warm": 2,
              "runtime_class": "runc"}]
    policy = parse_policy({"apiVersion": "foresight/v1alpha1", "kind": "WarmPoolPolicy", "pools": pools})
    ctl = Controller(policy, MemoryForecastStore(), {"sim": SimBackend(clock, seed=1)}, clock=clock)
    ctl.step()
    clock.advance(2)
    ctl.step()
    kubeconfig = str(cluster.service_account_kubeconfig("foresight", "foresight-warmpool"))
    auth = Authenticator(token_review=token_reviewer(kubeconfig=kubeconfig))
    crt, key = ensure_serving_cert(tmp_path_factory.mktemp("tenancy-warmpool-tls"))
    srv = HttpServer(create_warmpool_api(ctl, auth, build_pool_authorizer(kubeconfig)), "127.0.0.1", 0,
                     tls=TLSFiles(str(crt), str(key))).start()
    client = httpx.Client(base_url=f"https://127.0.0.1:{srv.port}", verify=ssl.create_default_context(cafile=str(crt)),
                          timeout=30)
    yield client
    client.close()
    srv.stop()


def test_claiming_from_another_namespaces_pool_is_forbidden_and_from_the_tenants_own_works(cluster, warm_pools):
    denied = _must(warm_pools.post("/api/v1/pools/b.ledger/claim", headers=_as(cluster, "a")), 403)
    assert 'may not claim warm pool "b.ledger"' in denied.json()["detail"]
    own = _must(warm_pools.post("/api/v1/pools/a.web/claim", headers=_as(cluster, "a")), 200).json()
    _must(warm_pools.post("/api/v1/pools/a.web/release", headers=_as(cluster, "a"),
                          json={"container_id": own["container_id"]}), 200)


def test_releasing_or_renewing_another_namespaces_claim_is_forbidden(cluster, warm_pools):
    theirs = _must(warm_pools.post("/api/v1/pools/b.ledger/claim", headers=_as(cluster, "b")), 200).json()
    body = {"container_id": theirs["container_id"]}
    for verb in ("release", "renew"):
        _must(warm_pools.post(f"/api/v1/pools/b.ledger/{verb}", headers=_as(cluster, "a"), json=body), 403)
        # naming the container under the tenant's own pool does not reach it either
        _must(warm_pools.post(f"/api/v1/pools/a.web/{verb}", headers=_as(cluster, "a"), json=body), 403, 409)
    _must(warm_pools.post("/api/v1/pools/b.ledger/release", headers=_as(cluster, "b"), json=body), 200)


def test_the_pool_list_metrics_and_cold_start_figures_show_only_the_tenants_pools(cluster, warm_pools):
    h = _as(cluster, "a")
    assert [p["pool"] for p in _must(warm_pools.get("/api/v1/pools", headers=h), 200).json()["pools"]] == ["a.web"]
    _must(warm_pools.get("/api/v1/pools/b.ledger", headers=h), 403)
    _must(warm_pools.get("/api/v1/pools/a.web", headers=h), 200)
    metrics = _must(warm_pools.get("/metrics", headers=h), 200).text
    assert 'pool="a.web"' in metrics and "b.ledger" not in metrics
    classes = {e["runtime_class"] for e in _must(warm_pools.get("/api/v1/coldstart", headers=h), 200).json()["runtime_classes"]}
    assert classes == {"crun"}, classes  # b's pool starts runc: its figures are not a's to see
    _must(warm_pools.get("/metrics"), 401)


# ------------------------------------------------------------------ the KEDA scaler


def test_a_scaled_object_of_the_tenants_namespace_never_reads_another_namespaces_forecast(adapter, tmp_path_factory):
    """KEDA passes the ScaledObject's own namespace in ScaledObjectRef (the tenant creates
    ScaledObjects where RBAC lets it); no trigger metadata can point the scaler elsewhere."""
    certs = KedaCerts(tmp_path_factory.mktemp("tenancy-keda"))
    core = adapter.app.state.core
    server = start_keda_server(core, "127.0.0.1", 0, certs.server_crt, certs.server_key, certs.client_ca)
    ch = channel(server.port, certs, (certs.keda_crt, certs.keda_key))
    keda = pb_grpc.ExternalScalerStub(ch)

    def metrics(**meta: str):
        ref = pb.ScaledObjectRef(name="so", namespace="a", scalerMetadata={"targetValue": "1", **meta})
        return keda.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref, metricName=f"predicted_cpu_cores-{meta['workload']}"),
                               timeout=10).metricValues

    try:
        (own,) = metrics(workload="web")
        assert 0 < own.metricValueFloat < 5  # a/web's, not b/ledger's 6.5 observed and up
        for meta, code in (({"workload": "ledger"}, grpc.StatusCode.UNAVAILABLE),  # a/ledger: none
                           ({"workload": "ledger", "namespace": "b"}, grpc.StatusCode.INVALID_ARGUMENT),
                           ({"workload": "b/ledger"}, grpc.StatusCode.INVALID_ARGUMENT)):
            with pytest.raises(grpc.RpcError) as exc:
                metrics(**meta)
            assert exc.value.code() == code, (meta, exc.value.details())
            if code == grpc.StatusCode.UNAVAILABLE:  # looked up in the ScaledObject's namespace
                assert "a/ledger" in exc.value.details(), exc.value.details()
    finally:
        ch.close()
        server.stop()
