"""manifests/ on a real kube-apiserver, and foresight serve behind the real aggregator.

- every manifest is applied with server-side apply and persisted as written;
- the APIService carries a real caBundle (no insecureSkipTLSVerify) and turns Available only
  because the aggregator verified foresight's serving certificate against it;
- foresight serve trusts the aggregator's front-proxy client certificate (requestheader CA from
  kube-system/extension-apiserver-authentication) and nobody else;
- discovery and metric values are read through kube-apiserver, under RBAC.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.parse

import httpx
import pytest
import yaml

from tests.cluster.controlplane import ApiClient, tls_context, wait_for
from tests.e2e.conftest import MANIFESTS

pytestmark = [pytest.mark.e2e]

EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1"


def _docs():
    for f in MANIFESTS:
        for d in yaml.safe_load_all(f.read_text()):
            if isinstance(d, dict) and d.get("kind"):
                yield f, d


def _path(cp, doc) -> str:
    """REST path of a manifest object, from the server's own discovery."""
    group, _, version = doc["apiVersion"].rpartition("/")
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    res = cp.admin.json(base)["resources"]
    (plural, namespaced), = {(r["name"], r["namespaced"]) for r in res if r["kind"] == doc["kind"] and "/" not in r["name"]}
    md = doc["metadata"]
    ns = f"/namespaces/{md['namespace']}" if namespaced else ""
    return f"{base}{ns}/{plural}/{md['name']}"


def test_every_manifest_is_applied_server_side_and_persisted_as_written(control_plane, applied_manifests):
    cp = control_plane
    seen = 0
    for f, doc in _docs():
        obj = cp.admin.json(_path(cp, doc))
        managers = {(m["manager"], m["operation"]) for m in obj["metadata"].get("managedFields", [])}
        assert ("kubectl", "Apply") in managers, f"{f.name}: {doc['kind']}/{doc['metadata']['name']} not applied server-side"
        for k, v in (doc["metadata"].get("labels") or {}).items():
            assert obj["metadata"]["labels"][k] == v
        if doc["kind"] == "ConfigMap":
            assert obj["data"] == doc["data"]
        seen += 1
    assert seen >= 30  # adapter, forecaster, scheduler, warm pool, HPA example


def test_the_apiservice_trusts_foresight_through_a_real_ca_bundle(control_plane, foresight_adapter, serving_pki):
    svc = control_plane.admin.json("/apis/apiregistration.k8s.io/v1/apiservices/v1beta1.external.metrics.k8s.io")
    assert not svc["spec"].get("insecureSkipTLSVerify")
    assert base64.b64decode(svc["spec"]["caBundle"]) == serving_pki.ca.read_bytes()
    cond = {c["type"]: c for c in svc["status"]["conditions"]}
    assert cond["Available"]["status"] == "True", cond
    # Only the CA injector's field manager owns caBundle: the manifest leaves it to the cluster.
    owners = [m["manager"] for m in svc["metadata"]["managedFields"] if "f:caBundle" in json.dumps(m.get("fieldsV1", {}))]
    assert owners == ["foresight-e2e-ca-injector"]


def test_the_aggregator_rejects_foresight_when_the_ca_bundle_is_wrong(control_plane, foresight_adapter, serving_pki, tmp_path):
    """The caBundle is really what the aggregator verifies: with a foreign CA every proxied
    request fails TLS verification. (The Available condition is not re-evaluated at once, so
    the proxied answer is what is checked.)"""
    from adapter.tls import write_ca
    from tests.e2e.conftest import apiservice_available, wire_apiservice

    cp = control_plane
    name = "v1beta1.external.metrics.k8s.io"
    other, *_ = write_ca(tmp_path, "some-other-ca")
    try:
        wire_apiservice(cp, name, foresight_adapter.port, base64.b64encode(other.read_bytes()).decode())
        r = wait_for("the aggregator to refuse foresight's certificate",
                     lambda: (lambda r: r if r.status_code == 503 else None)(cp.admin.get(EXTERNAL)), timeout=60)
        assert "certificate signed by unknown authority" in r.text, r.text
    finally:
        wire_apiservice(cp, name, foresight_adapter.port, serving_pki.ca_bundle)
        wait_for("APIService Available again", lambda: apiservice_available(cp, name), timeout=120)
        wait_for("discovery through the aggregator again", lambda: cp.admin.get(EXTERNAL).status_code == 200, timeout=60)


def test_foresight_serve_answers_only_the_front_proxy_identity(control_plane, foresight_adapter, serving_pki):
    cp = control_plane
    url = f"{foresight_adapter.url}{EXTERNAL}/namespaces/shop/predicted_cpu_load_ratio"
    headers = {"X-Remote-User": "system:serviceaccount:kube-system:horizontal-pod-autoscaler"}
    # No client certificate: the header alone is not trusted.
    r = httpx.get(url, headers=headers, verify=tls_context(serving_pki.ca), timeout=10)
    assert r.status_code in (401, 403), r.text
    # A client certificate from the cluster CA (not the front-proxy CA): refused, at the TLS
    # handshake (a presented certificate must verify against the requestheader CA) or with 401/403.
    try:
        r = httpx.get(url, headers=headers, timeout=10,
                      verify=tls_context(serving_pki.ca, (cp.files["admin"], cp.files["admin_key"])))
        assert r.status_code in (401, 403), r.text
    except httpx.TransportError:
        pass
    # The aggregator's own front-proxy client certificate: the user is trusted, and then
    # authorized by kube-apiserver (SubjectAccessReview, --delegated-auth) with its groups.
    fp = tls_context(serving_pki.ca, (cp.files["front_proxy_client"], cp.files["front_proxy_client_key"]))
    with httpx.Client(verify=fp, timeout=10) as c:
        r = c.get(f"{foresight_adapter.url}{EXTERNAL}", headers=[
            *headers.items(), ("X-Remote-Group", "system:serviceaccounts"),
            ("X-Remote-Group", "system:serviceaccounts:kube-system"), ("X-Remote-Group", "system:authenticated")])
        assert r.status_code == 200, r.text
        # The same user without the groups that system:discovery grants: RBAC says no.
        r = c.get(f"{foresight_adapter.url}{EXTERNAL}", headers=headers)
        assert r.status_code == 403, r.text


def test_discovery_and_values_are_read_through_kube_apiserver_under_rbac(control_plane, foresight_adapter):
    from core.store import RedisForecastStore, make_forecast
    from forecaster.served import MetricSettings, served_load_ratio

    cp = control_plane
    disc = cp.admin.json(EXTERNAL)
    assert disc["groupVersion"] == "external.metrics.k8s.io/v1beta1"
    assert {"predicted_cpu_load_ratio", "predicted_cpu_cores"} <= {r["name"] for r in disc["resources"]}
    groups = {g["name"]: g for g in cp.admin.json("/apis")["groups"]}
    assert groups["external.metrics.k8s.io"]["preferredVersion"]["version"] == "v1beta1"

    now = time.time()
    store = RedisForecastStore(foresight_adapter.redis_url)
    fc = make_forecast("shop/discovery-demo", origin=now - 30, step_seconds=60, mean=[1.2, 1.5, 1.8],
                       quantiles={"p50": [1.2, 1.5, 1.8], "p90": [1.4, 1.7, 2.1]}, model="e2e", generated_at=now,
                       observed=((now - 30, 1.1),),
                       meta={"namespace": "shop", "workload": "discovery-demo", "ready_pods": 3, "cpu_request_cores": 0.5})
    store.publish(fc)
    store.close()
    q = urllib.parse.urlencode({"labelSelector": "deployment=discovery-demo"})
    path = f"{EXTERNAL}/namespaces/shop/predicted_cpu_load_ratio?{q}"

    # As the HPA controller asks: its own service account, authorized by RBAC in the API server.
    token = cp.service_account_token("kube-system", "horizontal-pod-autoscaler")
    hpa = ApiClient(cp.server, cp.files["ca"], token=token)
    body = wait_for("the published value through the aggregator", lambda: (lambda r: r.status_code == 200 and r.json())(hpa.get(path)),
                    timeout=30)
    assert body["kind"] == "ExternalMetricValueList"
    (item,) = body["items"]
    assert item["metricName"] == "predicted_cpu_load_ratio" and item["metricLabels"]["deployment"] == "discovery-demo"
    want = served_load_ratio(fc, time.time(), 3, 0.5, MetricSettings()).value
    got = _quantity(item["value"])
    assert abs(got - want) < 0.01, (item, want)

    # A service account without a grant is stopped by kube-apiserver before foresight sees it.
    cp.admin.post("/api/v1/namespaces/shop/serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount",
                                                              "metadata": {"name": "nobody"}})
    nobody = ApiClient(cp.server, cp.files["ca"], token=cp.service_account_token("shop", "nobody"))
    assert nobody.get(path).status_code == 403
    # An unknown series is the adapter's NotFound Status, passed through unchanged.
    r = hpa.get(f"{EXTERNAL}/namespaces/shop/predicted_cpu_load_ratio?labelSelector=deployment%3Dghost")
    assert r.status_code == 404 and r.json()["kind"] == "Status"


def _quantity(s: str) -> float:
    for suffix, f in (("n", 1e-9), ("u", 1e-6), ("m", 1e-3), ("k", 1e3)):
        if s.endswith(suffix):
            return float(s[:-1]) * f
    return float(s)
