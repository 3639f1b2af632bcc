"""Transport security: TLS 1.2 as the floor, the scheduler extender on its own port behind a
client certificate, front-proxy groups reaching the SubjectAccessReview, and `foresight serve`
wiring the pieces from its options."""

from __future__ import annotations

import ssl
import time

import httpx
import pytest

from adapter.app import create_app, create_scheduler_app
from adapter.authz import SubjectAccessReviewAuthorizer
from adapter.server import serve_in_thread
from adapter.settings import AdapterSettings, AuthSettings
from adapter.tls import write_ca, write_signed
from core.kubeclient import KubeClient
from core.store import MemoryForecastStore
from tests.adapter.helpers import EXT, sample_forecast
from tests.adapter.kube_double import KubeDouble, Policy
from tests.stack import free_port

NODE_NAMES = {"Pod": {"metadata": {"name": "p", "namespace": "shop"}}, "NodeNames": ["n1", "n2"]}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca, _, ca_cert, ca_key = write_ca(d, "serving-ca")
    server = write_signed(d, "server", ca_cert, ca_key, cn="foresight-adapter", client=False, sans=["127.0.0.1"])
    sched_ca, _, sched_ca_cert, sched_ca_key = write_ca(d, "scheduler-ca")
    sched = write_signed(d, "scheduler", sched_ca_cert, sched_ca_key, cn="kube-scheduler", client=True)
    fp_ca, _, fp_ca_cert, fp_ca_key = write_ca(d, "front-proxy-ca")
    fp = write_signed(d, "front-proxy", fp_ca_cert, fp_ca_key, cn="front-proxy-client", client=True)
    other_ca, _, other_cert, other_key = write_ca(d, "other-ca")
    other = write_signed(d, "other", other_cert, other_key, cn="kube-scheduler", client=True)
    return {"ca": ca, "server": server, "sched_ca": sched_ca, "sched": sched, "fp_ca": fp_ca, "fp": fp, "other": other}


def _ctx(pki, cert=None, max_version=None):
    ctx = ssl.create_default_context(cafile=str(pki["ca"]))
    if cert:
        ctx.load_cert_chain(*(str(p) for p in cert))
    if max_version:
        ctx.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
        ctx.maximum_version = max_version
    return ctx


def test_tls_below_1_2_is_refused_and_1_2_is_served(pki):
    from adapter.server import uvicorn_config

    config = uvicorn_config(create_app(None, MemoryForecastStore()), "127.0.0.1", 1, *map(str, pki["server"]))
    config.load()  # the floor is ours, whatever the system's OpenSSL policy says
    assert config.ssl.minimum_version == ssl.TLSVersion.TLSv1_2
    handle = serve_in_thread(create_app(None, MemoryForecastStore()), "127.0.0.1", free_port(), *map(str, pki["server"]))
    try:
        ok = httpx.get(handle.url + "/healthz", verify=_ctx(pki, max_version=ssl.TLSVersion.TLSv1_2))
        assert ok.status_code == 200
        old = _ctx(pki, max_version=ssl.TLSVersion.TLSv1_1)
        old.set_ciphers("DEFAULT:@SECLEVEL=0")  # let this client offer TLS 1.1 at all
        with pytest.raises((httpx.ConnectError, ssl.SSLError)):
            httpx.get(handle.url + "/healthz", verify=old)
    finally:
        handle.stop()


def test_the_scheduler_extender_port_answers_only_the_schedulers_certificate(pki):
    store = MemoryForecastStore()
    app = create_scheduler_app(AdapterSettings(), store)
    handle = serve_in_thread(app, "127.0.0.1", free_port(), *map(str, pki["server"]),
                             client_ca_file=str(pki["sched_ca"]), require_client_cert=True)
    try:
        r = httpx.post(handle.url + "/scheduler/filter", json=NODE_NAMES, verify=_ctx(pki, pki["sched"]))
        assert r.status_code == 200 and r.json()["nodenames"] == ["n1", "n2"]
        for cert in (None, pki["other"]):  # no certificate, or one another CA signed
            with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
                httpx.post(handle.url + "/scheduler/filter", json=NODE_NAMES, verify=_ctx(pki, cert))
        assert httpx.get(handle.url + f"{EXT}", verify=_ctx(pki, pki["sched"])).status_code == 404  # no metrics here
    finally:
        handle.stop()


def test_with_its_own_port_the_extender_is_not_on_the_metrics_port_and_never_anonymous_there():
    store = MemoryForecastStore()
    separate = create_app(AdapterSettings(auth=AuthSettings(token="t")), store, scheduler_routes=False)
    assert not any(getattr(r, "path", "").startswith("/scheduler") for r in separate.routes)
    shared = create_app(AdapterSettings(auth=AuthSettings(token="t")), store)
    handle = serve_in_thread(shared, "127.0.0.1", free_port())
    try:
        assert httpx.post(handle.url + "/scheduler/filter", json=NODE_NAMES).status_code == 401
        ok = httpx.post(handle.url + "/scheduler/filter", json=NODE_NAMES, headers={"Authorization": "Bearer t"})
        assert ok.status_code == 200
    finally:
        handle.stop()


def test_front_proxy_user_and_groups_are_what_the_access_review_sees(pki):
    double = KubeDouble(Policy(namespaces={"shop-team": {"shop"}})).start()
    store = MemoryForecastStore()
    store.publish(sample_forecast("shop", "checkout", now=time.time()))
    store.publish(sample_forecast("bank", "ledger", now=time.time()))
    settings = AdapterSettings(auth=AuthSettings(requestheader_ca_file=str(pki["fp_ca"]),
                                                 allowed_names=("front-proxy-client",)))
    app = create_app(settings, store, authorizer=SubjectAccessReviewAuthorizer(KubeClient.for_server(double.url, token="sa")))
    handle = serve_in_thread(app, "127.0.0.1", free_port(), *map(str, pki["server"]), client_ca_file=str(pki["fp_ca"]))
    headers = [("X-Remote-User", "bob"), ("X-Remote-Group", "system:authenticated"), ("X-Remote-Group", "shop-team"),
               ("X-Remote-Extra-Scopes", "view"), ("X-Remote-Extra-Scopes", "openid")]
    try:
        with httpx.Client(base_url=handle.url, verify=_ctx(pki, pki["fp"]), headers=headers) as c:
            shop = c.get(f"{EXT}/namespaces/shop/predicted_cpu_cores", params={"labelSelector": "workload=checkout"})
            bank = c.get(f"{EXT}/namespaces/bank/predicted_cpu_cores", params={"labelSelector": "workload=ledger"})
        assert shop.status_code == 200 and bank.status_code == 403
        spec = double.access_reviews[0]["spec"]
        assert spec["user"] == "bob" and spec["groups"] == ["system:authenticated", "shop-team"]
        assert spec["extra"] == {"scopes": ["view", "openid"]}
    finally:
        handle.stop()
        double.stop()


def test_serve_builds_the_demand_reader_and_the_reviewers_from_its_options(tmp_path):
    from adapter.factory import build_auth, build_demand
    from adapter.fallback import PrometheusDemandReader

    cfg = tmp_path / "w.yaml"
    cfg.write_text("source: {url: 'prometheus://127.0.0.1:9'}\nworkloads:\n  - {namespace: shop, name: checkout}\n")
    demand, od = build_demand({"config": str(cfg), "observed_direct_ttl_seconds": 7})
    assert isinstance(demand, PrometheusDemandReader) and demand.knows("shop/checkout") and od.ttl_seconds == 7
    assert demand.source.retries == 0  # the adapter bounds its own waits
    assert build_demand({"config": str(cfg), "observed_direct": False}) == (None, None)
    assert build_demand({}) == (None, None)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\nusers: [{name: u, user: {token: abc}}]\n"
    )
    authn, authz = build_auth({"delegated_auth": True, "kubeconfig": str(kubeconfig), "review_cache_seconds": 3})
    assert authn.kube.server == "https://127.0.0.1:6443" and authn.kube.authorization() == "Bearer abc"
    assert authz.cache_seconds == 3
    assert build_auth({}) == (None, None)
