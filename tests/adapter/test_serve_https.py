"""A real `foresight serve` process over HTTPS with a Redis store, read by the official
`kubernetes` client with aggregated-API client-certificate authentication."""

from __future__ import annotations

import json
import math
import ssl
import time

import httpx
import pytest
from kubernetes import client as k8s

from adapter.quantity import parse_quantity
from adapter.tls import write_ca, write_signed
from core.store import RedisForecastStore
from tests.adapter.helpers import EXT, ServeProcess, sample_forecast
from tests.stack import free_port

TOKEN = "s3cret-token-for-tools"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    serving_ca, _, serving_ca_cert, serving_ca_key = write_ca(d, "serving-ca")
    server_crt, server_key = write_signed(d, "server", serving_ca_cert, serving_ca_key, cn="foresight.foresight.svc",
                                          client=False, sans=["localhost", "127.0.0.1"])
    fp_ca, _, fp_ca_cert, fp_ca_key = write_ca(d, "front-proxy-ca")
    fp_crt, fp_key = write_signed(d, "front-proxy-client", fp_ca_cert, fp_ca_key, cn="front-proxy-client", client=True)
    bad_cn_crt, bad_cn_key = write_signed(d, "other-name", fp_ca_cert, fp_ca_key, cn="someone-else", client=True)
    _, _, rogue_ca_cert, rogue_ca_key = write_ca(d, "rogue-ca")
    rogue_crt, rogue_key = write_signed(d, "rogue", rogue_ca_cert, rogue_ca_key, cn="front-proxy-client", client=True)
    (d / "token").write_text(TOKEN + "\n")
    return {
        "dir": d, "serving_ca": serving_ca, "server": (server_crt, server_key), "front_proxy_ca": fp_ca,
        "front_proxy": (fp_crt, fp_key), "bad_cn": (bad_cn_crt, bad_cn_key), "rogue": (rogue_crt, rogue_key),
        "token": d / "token",
    }


# The pod state of the HPA simulation: 2 ready pods of 0.5 core each, demand about to rise to 7 cores.
READY, REQUEST = 2, 0.5


@pytest.fixture(scope="module")
def server(redis_server, pki, tmp_path_factory):
    import redis

    r = redis.Redis.from_url(redis_server.url)
    r.flushall()
    r.close()
    store = RedisForecastStore(redis_server.url)
    now = time.time()
    store.publish(sample_forecast("shop", "checkout", now=now, p90=(7.0, 7.0, 7.0), observed=1.0,
                                  ready_pods=READY, request=REQUEST))
    store.publish(sample_forecast("shop", "cart", now=now, p90=(0.2, 0.2, 0.2), observed=0.3, ready_pods=1, request=1.0))
    port = free_port()
    crt, key = pki["server"]
    proc = ServeProcess(
        ["--store", redis_server.url, "--cert", str(crt), "--key", str(key),
         "--requestheader-ca", str(pki["front_proxy_ca"]), "--allowed-names", "front-proxy-client",
         "--token-file", str(pki["token"])],
        port, tmp_path_factory.mktemp("serve") / "serve.log",
    )
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()
        store.close()


def kube_client(port: int, pki, cert=("front_proxy",)) -> k8s.ApiClient:
    cfg = k8s.Configuration(host=f"https://127.0.0.1:{port}")
    cfg.ssl_ca_cert = str(pki["serving_ca"])
    if cert:
        cfg.cert_file, cfg.key_file = (str(p) for p in pki[cert[0]])
    return k8s.ApiClient(cfg)


def kube_get(api: k8s.ApiClient, path: str, query=None, headers=None):
    """What the HPA controller's REST client does: GET with JSON accepted, aggregator headers."""
    hdrs = {"Accept": "application/json, */*", "X-Remote-User": "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
            "X-Remote-Group": "system:serviceaccounts"}
    hdrs.update(headers or {})
    method, url, hp, body, post = api.param_serialize("GET", path, query_params=query or [], header_params=hdrs, auth_settings=[])
    resp = api.call_api(method, url, header_params=hp, body=body, post_params=post, _request_timeout=10)
    resp.read()
    return resp


def test_the_kubernetes_client_reads_discovery_over_authenticated_https(server, pki):
    with kube_client(server.port, pki) as api:
        resp = kube_get(api, EXT)
        assert resp.status == 200
        lst = api.deserialize(resp.data.decode(), "V1APIResourceList", "application/json")
        groups = api.deserialize(kube_get(api, "/apis").data.decode(), "V1APIGroupList", "application/json")
    assert lst.group_version == "external.metrics.k8s.io/v1beta1"
    assert {r.name for r in lst.resources} == {"predicted_cpu_load_ratio", "predicted_cpu_cores"}
    assert all(r.namespaced and r.verbs == ["get"] and r.kind == "ExternalMetricValueList" for r in lst.resources)
    assert groups.groups[0].preferred_version.version == "v1beta1"


def simulated_hpa_sync_value(current: int, ready: int, values: list[str], target: float, tolerance: float = 0.1) -> int:
    """One HPA sync for an External metric with target type Value (hpa-algorithm.md), the
    default behaviour (scale up: max of +4 pods / +100% per period; no stabilization up)."""
    usage = sum(float(parse_quantity(v)) for v in values)
    ratio = usage / target
    desired = current if (1 - tolerance) <= ratio <= (1 + tolerance) else math.ceil(ratio * ready)
    if desired > current:
        limit = max(current + 4, math.ceil(current * 2.0))
        desired = min(desired, limit)
    return desired


def simulated_hpa_sync_average(current: int, values: list[str], target: float, tolerance: float = 0.1) -> int:
    usage = sum(float(parse_quantity(v)) for v in values)
    ratio = usage / (target * current)
    return current if (1 - tolerance) <= ratio <= (1 + tolerance) else math.ceil(usage / target)


def test_a_simulated_hpa_sync_fed_by_the_live_endpoint_asks_for_the_right_replicas(server, pki):
    with kube_client(server.port, pki) as api:
        ratio = json.loads(kube_get(api, f"{EXT}/namespaces/shop/predicted_cpu_load_ratio",
                                    [("labelSelector", "deployment=checkout")]).data)
        cores = json.loads(kube_get(api, f"{EXT}/namespaces/shop/predicted_cpu_cores",
                                    [("labelSelector", "deployment=checkout")]).data)
    assert ratio["kind"] == "ExternalMetricValueList" and len(ratio["items"]) == 1
    # demand 7 cores (p90 over the lead window, above the observed 1 core), 2 ready pods x 0.5 core
    assert float(parse_quantity(ratio["items"][0]["value"])) == pytest.approx(7.0 / (READY * REQUEST), rel=1e-6)
    right = math.ceil(7.0 / (0.7 * REQUEST))  # 20 pods of 0.5 core at 70 %
    # The first sync from 2 replicas is rate-limited to +4 pods; the proposal itself is right:
    values = [i["value"] for i in ratio["items"]]
    usage = sum(float(parse_quantity(v)) for v in values)
    assert math.ceil(usage / 0.7 * READY) == right
    assert simulated_hpa_sync_value(current=2, ready=READY, values=values, target=0.7) == 6
    # AverageValue on the cores metric asks for the same count, independent of pods.
    assert simulated_hpa_sync_average(current=2, values=[i["value"] for i in cores["items"]], target=0.7 * REQUEST) == right


def test_a_low_forecast_never_serves_less_than_observed_so_the_hpa_does_not_under_scale(server, pki):
    with kube_client(server.port, pki) as api:
        data = json.loads(kube_get(api, f"{EXT}/namespaces/shop/predicted_cpu_load_ratio",
                                   [("labelSelector", "workload=cart")]).data)
    # forecast 0.2 cores but 0.3 observed, 1 ready pod x 1 core
    assert float(parse_quantity(data["items"][0]["value"])) == pytest.approx(0.3)


def test_anonymous_and_forged_header_requests_are_rejected(server, pki):
    with kube_client(server.port, pki, cert=()) as api:
        resp = kube_get(api, EXT)  # X-Remote-User without a client certificate: not trusted
        plain = kube_get(api, EXT, headers={"X-Remote-User": ""})
    assert resp.status == 401 and plain.status == 401
    assert json.loads(resp.data)["reason"] == "Unauthorized"


def test_a_front_proxy_certificate_with_a_name_not_allowed_is_rejected(server, pki):
    with kube_client(server.port, pki, cert=("bad_cn",)) as api:
        resp = kube_get(api, EXT)
    assert resp.status == 401


def test_a_client_certificate_from_another_ca_fails_the_tls_handshake(server, pki):
    ctx = ssl.create_default_context(cafile=str(pki["serving_ca"]))
    ctx.load_cert_chain(*(str(p) for p in pki["rogue"]))
    with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
        httpx.get(f"https://127.0.0.1:{server.port}{EXT}", verify=ctx, headers={"X-Remote-User": "admin"}, timeout=5)


def test_a_bearer_token_is_accepted_and_a_wrong_one_is_not(server, pki):
    ctx = ssl.create_default_context(cafile=str(pki["serving_ca"]))
    base = f"https://127.0.0.1:{server.port}"
    ok = httpx.get(base + "/api/v1/forecasts", verify=ctx, headers={"Authorization": f"Bearer {TOKEN}"})
    bad = httpx.get(base + "/api/v1/forecasts", verify=ctx, headers={"Authorization": "Bearer nope"})
    assert ok.status_code == 200 and ok.json()["count"] == 2
    assert bad.status_code == 401
    # probes have no credentials
    assert httpx.get(base + "/healthz", verify=ctx).status_code == 200


def test_without_a_cert_the_server_generates_a_self_signed_pair_and_runs_several_workers(redis_url, tmp_path):
    store = RedisForecastStore(redis_url)
    store.publish(sample_forecast(now=time.time()))
    port = free_port()
    cert_dir = tmp_path / "certs"
    proc = ServeProcess(["--store", redis_url, "--cert-dir", str(cert_dir), "--workers", "2"], port, tmp_path / "serve.log")
    try:
        proc.wait_ready()
        assert (cert_dir / "apiserver.crt").exists() and (cert_dir / "apiserver.key").exists()
        with httpx.Client(verify=False) as c:  # what `curl -k` does
            for _ in range(6):
                r = c.get(f"https://127.0.0.1:{port}{EXT}/namespaces/shop/predicted_cpu_cores",
                          params={"labelSelector": "workload=checkout"})
                assert r.status_code == 200 and r.json()["items"][0]["metricLabels"]["workload"] == "checkout"
    finally:
        proc.stop()
        store.close()


def test_serve_in_thread_serves_https_and_stops(tmp_path):
    from adapter.app import create_app
    from adapter.server import serve_in_thread
    from adapter.tls import ensure_serving_cert
    from core.store import MemoryForecastStore

    store = MemoryForecastStore()
    store.publish(sample_forecast(now=time.time()))
    crt, key = ensure_serving_cert(tmp_path)
    port = free_port()
    handle = serve_in_thread(create_app(None, store), "127.0.0.1", port, str(crt), str(key))
    try:
        r = httpx.get(f"{handle.url}{EXT}/namespaces/shop/predicted_cpu_load_ratio?labelSelector=workload%3Dcheckout", verify=str(crt))
        assert r.status_code == 200
    finally:
        handle.stop()
    assert not handle.running
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"https://127.0.0.1:{port}/healthz", verify=False, timeout=2)


def test_serve_rejects_bad_options_with_a_clear_message(tmp_path):
    from foresight.cli import main

    assert main(["serve", "--cert", str(tmp_path / "missing.crt")]) == 2


def test_only_probes_are_anonymous_on_the_port_that_serves_workload_data():
    """kube-scheduler sends no credentials, so its extender gets its own port
    (--scheduler-port); on this one, everything but the kubelet probes needs credentials."""
    from adapter.settings import AuthSettings

    a = AuthSettings(token="t")
    assert a.enabled
    assert set(a.anonymous_paths) == {"/healthz", "/readyz", "/livez"}
