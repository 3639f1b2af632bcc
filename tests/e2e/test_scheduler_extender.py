"""The real kube-scheduler, configured by manifests/scheduler, calls foresight's extender and
binds pods away from the node forecast hot.

The scheduler runs manifests/scheduler/kube-scheduler-configuration.yaml with only what a
loopback cluster must change: the kubeconfig (the foresight-scheduler service account's token,
so manifests/scheduler/rbac.yaml is what authorizes it), the extender's host and port
(``localhost``: there is no cluster DNS; the certificate is still verified for
foresight-adapter.foresight.svc) and the CA file's path. A recording HTTPS proxy in front of
`foresight serve --scheduler-port` counts the scheduler's calls.
Leader election stays on, in the foresight namespace, as the manifest says.
"""

from __future__ import annotations

import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import yaml

from core.store import RedisForecastStore, make_forecast
from tests.cluster.controlplane import ROOT, free_port, tls_context, wait_for
from tests.e2e.conftest import NODES

pytestmark = [pytest.mark.e2e]


def publish_loads(redis_url: str, loads: dict[str, float]) -> None:
    now = time.time()
    store = RedisForecastStore(redis_url)
    try:
        zones = dict(NODES)
        for node, load in loads.items():
            store.publish(make_forecast(
                f"node/{node}", origin=now, step_seconds=60, mean=[load] * 10,
                quantiles={"p50": [load] * 10, "p90": [load] * 10}, model="e2e", generated_at=now,
                observed=((now, load),), meta={"kind": "Node", "node": node, "zone": zones[node], "cpu_cores": 16}))
    finally:
        store.close()


def extender_sees(adapter, ca, hot: str) -> None:
    """Wait until the extender (which re-reads the store every 10 s and re-scores every 2 s)
    filters exactly ``hot``; asked on its own port, as the scheduler asks."""
    body = {"Pod": {"metadata": {"name": "probe", "namespace": "shop"}}, "NodeNames": [n for n, _ in NODES]}

    def ok():
        with httpx.Client(verify=tls_context(ca), timeout=10) as c:
            f = c.post(f"https://localhost:{adapter.scheduler_port}/scheduler/filter", json=body).json()
            p = c.post(f"https://localhost:{adapter.scheduler_port}/scheduler/prioritize", json=body).json()
        scores = {h["host"]: h["score"] for h in p}
        return set(f["failedNodes"]) == {hot} and min(scores, key=scores.get) == hot

    wait_for(f"the extender to see {hot} hot", ok, timeout=60)


def _pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "placement"}},
            "spec": {"schedulerName": "foresight-scheduler",
                     "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}


class RecordingProxy:
    """HTTPS in front of the extender port that records the paths kube-scheduler POSTs, then
    forwards each request unchanged. It presents a certificate from the same CA for the same
    name, so the scheduler's TLS settings are the manifest's; only the port differs. Like the
    adapter's --scheduler-client-ca, it completes the handshake only with a client certificate
    signed by ``client_ca`` (the one the manifest's certFile/keyFile present)."""

    def __init__(self, upstream: str, ca: Path, cert: Path, key: Path, client_ca: Path):
        self.upstream, self.ca = upstream, ca
        self.paths: list[str] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):  # http.server API
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                proxy.paths.append(self.path)
                with httpx.Client(verify=tls_context(proxy.ca), timeout=10) as c:
                    r = c.post(proxy.upstream + self.path, content=body, headers={"Content-Type": "application/json"})
                self.send_response(r.status_code)
                self.send_header("Content-Type", r.headers.get("content-type", "application/json"))
                self.send_header("Content-Length", str(len(r.content)))
                self.end_headers()
                self.wfile.write(r.content)

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(cert), str(key))
        ctx.load_verify_locations(cafile=str(client_ca))
        ctx.verify_mode = ssl.CERT_REQUIRED
        self.port = free_port()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def foresight_scheduler(control_plane, foresight_adapter, serving_pki, tmp_path_factory):
    cp = control_plane
    d = tmp_path_factory.mktemp("foresight-scheduler")
    conf = yaml.safe_load((ROOT / "manifests/scheduler/kube-scheduler-configuration.yaml").read_text())
    conf["clientConnection"] = {"kubeconfig": str(cp.service_account_kubeconfig("foresight", "foresight-scheduler"))}
    (ext,) = conf["extenders"]
    # The adapter Service's "scheduler" port (8444), where `foresight serve --scheduler-port` answers.
    assert ext["urlPrefix"] == "https://foresight-adapter.foresight.svc:8444/scheduler"
    # cert-manager's part: the scheduler's client certificate (Secret foresight-scheduler-client-tls)
    from adapter.tls import write_ca, write_signed

    client_ca, _, cca, cca_key = write_ca(d / "client-pki", "scheduler-client-ca")
    client_crt, client_key = write_signed(d / "client-pki", "scheduler-client", cca, cca_key, cn="foresight-scheduler", client=True)
    for key, path in (("certFile", client_crt), ("keyFile", client_key)):
        assert ext["tlsConfig"][key].startswith("/etc/foresight-scheduler-client/")  # the manifest's mount
        ext["tlsConfig"][key] = str(path)
    proxy = RecordingProxy(f"https://localhost:{foresight_adapter.scheduler_port}", serving_pki.ca,
                           serving_pki.adapter_cert, serving_pki.adapter_key, client_ca)
    with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):  # no client certificate
        httpx.post(f"https://localhost:{proxy.port}/scheduler/filter", json={}, verify=tls_context(serving_pki.ca), timeout=10)
    ext["urlPrefix"] = f"https://localhost:{proxy.port}/scheduler"
    ca = cp.kubectl("-n", "foresight", "get", "configmap", "foresight-adapter-ca", "-o", "jsonpath={.data.ca\\.crt}").stdout
    (d / "ca.crt").write_text(ca)
    ext["tlsConfig"]["caFile"] = str(d / "ca.crt")
    ext["tlsConfig"]["serverName"] = "foresight-adapter.foresight.svc"
    (d / "config.yaml").write_text(yaml.safe_dump(conf))
    # The manifest's example pod has been waiting for this scheduler since the manifests were
    # applied: the forecasts must be in place before it starts.
    publish_loads(foresight_adapter.redis_url, {"node-a": 0.97, "node-b": 0.30, "node-c": 0.20})
    extender_sees(foresight_adapter, serving_pki.ca, "node-a")
    kc = conf["clientConnection"]["kubeconfig"]
    proc = cp.spawn("foresight-scheduler", [
        str(cp.bin_dir / "kube-scheduler"), f"--config={d / 'config.yaml'}", "--bind-address=127.0.0.1",
        f"--secure-port={free_port()}", f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}", "--v=2"])
    wait_for("foresight-scheduler to hold its Lease",
             lambda: proc.alive() and (cp.admin.get("/apis/coordination.k8s.io/v1/namespaces/foresight/leases/foresight-scheduler")
                                       .json().get("spec", {}).get("holderIdentity")),
             timeout=120, detail=lambda: proc.tail())
    proc.recorded = proxy.paths
    yield proc
    proc.stop()
    proxy.stop()


def _placements(cp, names):
    out = {}
    for n in names:
        p = cp.admin.json(f"/api/v1/namespaces/shop/pods/{n}")
        out[n] = p["spec"].get("nodeName")
    return out


def _place(cp, prefix: str, n: int) -> dict[str, str]:
    names = [f"{prefix}-{i}" for i in range(n)]
    for name in names:
        r = cp.admin.post("/api/v1/namespaces/shop/pods", _pod(name))
        assert r.status_code == 201, r.text
    return wait_for(f"{prefix} pods bound", lambda: (lambda m: m if all(m.values()) else None)(_placements(cp, names)),
                    timeout=120)


def test_the_real_scheduler_binds_pods_away_from_the_node_forecast_hot(control_plane, foresight_adapter, foresight_scheduler,
                                                                        serving_pki):
    cp = control_plane
    calls_before = len(foresight_scheduler.recorded)
    first = _place(cp, "round1", 6)  # node-a forecast hot (published by the fixture)
    assert "node-a" not in first.values(), first
    # The manifest's example pod (applied with the manifests) is placed by the same scheduler.
    demo = wait_for("placement-demo bound", lambda: cp.admin.json("/api/v1/namespaces/shop/pods/placement-demo")["spec"].get("nodeName"),
                    timeout=120)
    assert demo and demo != "node-a"

    # The forecast, not the nodes, decides: make node-b the hot one and node-a cool.
    publish_loads(foresight_adapter.redis_url, {"node-a": 0.10, "node-b": 0.96, "node-c": 0.50})
    extender_sees(foresight_adapter, serving_pki.ca, "node-b")
    second = _place(cp, "round2", 6)
    assert "node-b" not in second.values(), second
    assert "node-a" in second.values(), second  # the coolest node now wins the extender's score

    calls = foresight_scheduler.recorded[calls_before:]
    # one filter and one prioritize per pod (13 pods: 12 here and the manifest's example pod)
    assert calls.count("/scheduler/filter") >= 12 and calls.count("/scheduler/prioritize") >= 12, calls
    events = cp.admin.json("/api/v1/namespaces/shop/events", fieldSelector="reason=Scheduled")["items"]
    by = {e["involvedObject"]["name"]: e.get("reportingComponent") or e.get("source", {}).get("component") for e in events}
    assert by.get("round1-0") == "foresight-scheduler", by
