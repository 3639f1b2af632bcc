"""Session fixtures of the e2e suite: a real control plane on loopback (tests/cluster), the
manifests applied to it, ``foresight serve`` registered as the external metrics APIService,
and the metrics-server stand-in registered for ``metrics.k8s.io``.

The first run builds the Kubernetes binaries (tests/cluster/build.sh prints its progress);
later runs reuse them from the cache.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from tests.cluster.controlplane import (
    ROOT,
    ControlPlane,
    KubeletStandIn,
    allow_cold_build,
    build_binaries,
    free_port,
    tls_context,
    wait_for,
)
from tests.cluster.metrics_standin import MetricsServerStandIn

NODES = [("node-a", "zone-1"), ("node-b", "zone-1"), ("node-c", "zone-2")]


def pytest_collection_modifyitems(config, items):
    allow_cold_build(items, Path(__file__).parent)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory, request):
    t0 = time.monotonic()
    capman = request.config.pluginmanager.getplugin("capturemanager")
    # A cold build takes many minutes: let its progress through pytest's capture.
    with capman.global_and_fixture_disabled() if capman else _null():
        bin_dir = build_binaries()
    cp = ControlPlane(bin_dir=bin_dir, dir=tmp_path_factory.mktemp("k8s")).start()
    for name, zone in NODES:
        cp.add_node(name, labels={"topology.kubernetes.io/zone": zone})
    cp.standin = KubeletStandIn(cp.admin).start()
    sys.stderr.write(f"\n[e2e] control plane up in {time.monotonic() - t0:.0f} s ({cp.server}, logs in {cp.dir})\n")
    yield cp
    cp.standin.stop()
    cp.stop()


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


@dataclass
class ServingPKI:
    ca: Path
    adapter_cert: Path
    adapter_key: Path
    metrics_cert: Path
    metrics_key: Path

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca.read_bytes()).decode()


@pytest.fixture(scope="session")
def serving_pki(tmp_path_factory) -> ServingPKI:
    """The CA that signs aggregated API servers' serving certificates (cert-manager's role), and
    those certificates. The aggregator dials ``localhost`` but verifies the name
    ``<service>.<namespace>.svc``, so that is the name the certificate carries."""
    from adapter.tls import write_ca, write_signed

    d = tmp_path_factory.mktemp("serving-pki")
    ca_crt, _, ca, key = write_ca(d, "serving-ca")
    a_crt, a_key = write_signed(d, "adapter", ca, key, cn="foresight-adapter", client=False,
                                sans=["foresight-adapter.foresight.svc", "foresight-adapter.foresight.svc.cluster.local",
                                      "localhost", "127.0.0.1"])
    m_crt, m_key = write_signed(d, "metrics", ca, key, cn="metrics-server", client=False,
                                sans=["metrics-server.kube-system.svc", "localhost"])
    return ServingPKI(ca_crt, a_crt, a_key, m_crt, m_key)


def point_service_at_localhost(cp: ControlPlane, namespace: str, name: str) -> None:
    """Endpoints and EndpointSlices refuse loopback addresses, and there is no kube-proxy: the
    aggregator (routing off) reaches a Service by its DNS name, so an ExternalName ``localhost``
    Service sends it to this machine."""
    path = f"/api/v1/namespaces/{namespace}/services/{name}"
    r = cp.admin.get(path)
    if r.status_code == 404:
        r = cp.admin.post(f"/api/v1/namespaces/{namespace}/services", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
            "spec": {"type": "ExternalName", "externalName": "localhost"}})
    else:
        r = cp.admin.patch(path, {"spec": {"type": "ExternalName", "externalName": "localhost"}})
    assert r.status_code in (200, 201), r.text


def wire_apiservice(cp: ControlPlane, name: str, port: int, ca_bundle: str, manager: str = "foresight-e2e-ca-injector",
                    service: tuple[str, str] | None = None, group: str | None = None, version: str | None = None) -> None:
    """What cert-manager's CA injector does for an APIService, plus the loopback port: set
    spec.caBundle (and service.port) with server-side apply under a field manager of its own."""
    spec: dict = {"caBundle": ca_bundle, "service": {"port": port}}
    if service:
        spec["service"].update({"namespace": service[0], "name": service[1]})
        spec.update({"group": group, "version": version, "groupPriorityMinimum": 100, "versionPriority": 100})
    body = {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": name}, "spec": spec}
    r = cp.admin.apply(f"/apis/apiregistration.k8s.io/v1/apiservices/{name}", body, manager)
    assert r.status_code in (200, 201), r.text


def apiservice_available(cp: ControlPlane, name: str) -> bool:
    svc = cp.admin.json(f"/apis/apiregistration.k8s.io/v1/apiservices/{name}")
    return any(c["type"] == "Available" and c["status"] == "True" for c in svc.get("status", {}).get("conditions", []))


def apiservice_detail(cp: ControlPlane, name: str) -> str:
    try:
        return str(cp.admin.json(f"/apis/apiregistration.k8s.io/v1/apiservices/{name}").get("status"))
    except Exception as exc:  # noqa: BLE001 - diagnostics only
        return repr(exc)


@pytest.fixture(scope="session")
def metrics_server(control_plane, serving_pki):
    cp = control_plane
    srv = MetricsServerStandIn(cp.admin, serving_pki.metrics_cert, serving_pki.metrics_key,
                               cp.files["front_proxy_ca"]).start()
    point_service_at_localhost(cp, "kube-system", "metrics-server")
    wire_apiservice(cp, "v1beta1.metrics.k8s.io", srv.port, serving_pki.ca_bundle, service=("kube-system", "metrics-server"),
                    group="metrics.k8s.io", version="v1beta1")
    wait_for("APIService v1beta1.metrics.k8s.io Available", lambda: apiservice_available(cp, "v1beta1.metrics.k8s.io"),
             timeout=120, detail=lambda: apiservice_detail(cp, "v1beta1.metrics.k8s.io"))
    yield srv
    srv.stop()


# Not API objects: a kube-scheduler component config (applied as its ConfigMap) and a
# `kubectl patch --patch-file` for the trainer.
NOT_OBJECTS = {"kube-scheduler-configuration.yaml", "trainer-patch.yaml"}
MANIFESTS = sorted(p for p in (ROOT / "manifests").rglob("*.yaml") if p.name not in NOT_OBJECTS)

# CRDs some manifests need (a user installs them with the operator they belong to). Taken from
# each operator's own Go module at a pinned version, through the Go module proxy like the rest
# of the build: kind -> (module@version, path of the CRD inside the module).
OPERATOR_CRDS = {
    "PrometheusRule": ("github.com/prometheus-operator/prometheus-operator@v0.85.0",
                       "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml"),
    "ServiceMonitor": ("github.com/prometheus-operator/prometheus-operator@v0.85.0",
                       "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"),
    "RayCluster": ("github.com/ray-project/kuberay/ray-operator@v1.5.1", "config/crd/bases/ray.io_rayclusters.yaml"),
}


def operator_crds(kinds) -> list[Path]:
    import json as _json

    out = []
    for kind in sorted(k for k in kinds if k in OPERATOR_CRDS):
        module, path = OPERATOR_CRDS[kind]
        r = subprocess.run(["go", "mod", "download", "-json", module], capture_output=True, text=True, timeout=600,
                           env={**os.environ, "GOFLAGS": "-mod=mod"}, cwd=tempfile.gettempdir())
        info = _json.loads(r.stdout or "{}")
        if r.returncode != 0 or "Dir" not in info:
            raise RuntimeError(f"go mod download {module} failed: {info.get('Error') or r.stderr.strip()}")
        out.append(Path(info["Dir"]) / path)
    return out


@pytest.fixture(scope="session")
def applied_manifests(control_plane):
    """Every manifest under manifests/ applied with ``kubectl apply --server-side`` as it is.
    kube-scheduler-configuration.yaml is a component config file, not an API object (its
    content is applied as the ConfigMap in configmap.yaml)."""
    cp = control_plane
    cp.ensure_namespace("shop")  # the examples' namespace; a user's workload namespace exists already
    # Namespaces first, as kubectl would need them for the namespaced objects in the same run.
    cp.kubectl("apply", "--server-side", "-f", str(ROOT / "manifests/adapter/namespace.yaml"))
    kinds = {d.get("kind") for p in MANIFESTS for d in yaml.safe_load_all(p.read_text()) if isinstance(d, dict)}
    crds = operator_crds(kinds)
    if crds:
        cp.kubectl("apply", "--server-side", *[a for p in crds for a in ("-f", str(p))])
        # the files are named GROUP_PLURAL.yaml, the CRDs PLURAL.GROUP
        names = [f"crd/{p.stem.partition('_')[2]}.{p.stem.partition('_')[0]}" for p in crds]
        # a CRD has no conditions for a moment after it is created: kubectl wait errors then
        wait_for("CRDs Established", lambda: cp.kubectl("wait", "--for=condition=Established", "--timeout=30s", *names,
                                                         check=False).returncode == 0, timeout=90)
    out = cp.kubectl("apply", "--server-side", *[a for p in MANIFESTS for a in ("-f", str(p))]).stdout
    return out


@dataclass
class Adapter:
    port: int
    scheduler_port: int
    proc: subprocess.Popen
    log: Path
    redis_url: str

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"


@pytest.fixture(scope="session")
def foresight_adapter(control_plane, applied_manifests, serving_pki, redis_server, tmp_path_factory):
    """``foresight serve`` as manifests/adapter/deployment.yaml runs it (HTTPS, front-proxy CA
    and allowed names from kube-system/extension-apiserver-authentication), on loopback, and
    the APIService from manifests/adapter/apiservice.yaml pointed at it with a real caBundle."""
    cp = control_plane
    d = tmp_path_factory.mktemp("adapter")
    # Read the aggregator's identity the way the Deployment's init container does.
    ca = cp.kubectl("-n", "kube-system", "get", "configmap", "extension-apiserver-authentication",
                    "-o", "jsonpath={.data.requestheader-client-ca-file}").stdout
    names = cp.kubectl("-n", "kube-system", "get", "configmap", "extension-apiserver-authentication",
                       "-o", "jsonpath={.data.requestheader-allowed-names}").stdout
    (d / "requestheader-ca.crt").write_text(ca)
    (d / "allowed-names.json").write_text(names)
    # cert-manager's part: the serving certificate as the Secret deployment.yaml mounts, with the
    # CA beside it (ca.crt), and the same CA as the ConfigMap the scheduler's extender trusts.
    tls = {"tls.crt": serving_pki.adapter_cert.read_bytes(), "tls.key": serving_pki.adapter_key.read_bytes(),
           "ca.crt": serving_pki.ca.read_bytes()}
    r = cp.admin.apply("/api/v1/namespaces/foresight/secrets/foresight-adapter-tls", {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "foresight-adapter-tls", "namespace": "foresight"},
        "data": {k: base64.b64encode(v).decode() for k, v in tls.items()}}, "foresight-e2e-cert-manager")
    assert r.status_code in (200, 201), r.text
    r = cp.admin.apply("/api/v1/namespaces/foresight/configmaps/foresight-adapter-ca", {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "foresight-adapter-ca", "namespace": "foresight"},
        "data": {"ca.crt": serving_pki.ca.read_text()}}, "foresight-e2e-cert-manager")
    assert r.status_code in (200, 201), r.text
    injected = cp.admin.json("/api/v1/namespaces/foresight/secrets/foresight-adapter-tls")["data"]["ca.crt"]
    port, scheduler_port = free_port(), free_port()
    log = d / "serve.log"
    # The Deployment's arguments, with loopback ports and the service account's token in a
    # kubeconfig (in a pod it is mounted): the delegated TokenReview/SubjectAccessReview then
    # run under manifests/adapter/rbac.yaml's system:auth-delegator binding.
    sa_kubeconfig = cp.service_account_kubeconfig("foresight", "foresight")
    with open(log, "w") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "foresight", "serve", f"--store={redis_server.url}", "--host=127.0.0.1", f"--port={port}",
             f"--cert={serving_pki.adapter_cert}", f"--key={serving_pki.adapter_key}",
             f"--requestheader-ca={d / 'requestheader-ca.crt'}", f"--allowed-names=@{d / 'allowed-names.json'}",
             "--delegated-auth", f"--kubeconfig={sa_kubeconfig}", f"--scheduler-port={scheduler_port}",
             "--cache-ttl=0.5", "--access-log"],
            stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
    a = Adapter(port, scheduler_port, proc, log, redis_server.url)
    try:
        wait_for("foresight serve /healthz", lambda: proc.poll() is None and httpx.get(
            f"{a.url}/healthz", verify=tls_context(serving_pki.ca), timeout=2).status_code == 200, timeout=90,
            detail=lambda: log.read_text()[-2000:])
        point_service_at_localhost(cp, "foresight", "foresight-adapter")
        wire_apiservice(cp, "v1beta1.external.metrics.k8s.io", port, injected)
        wait_for("APIService v1beta1.external.metrics.k8s.io Available",
                 lambda: apiservice_available(cp, "v1beta1.external.metrics.k8s.io"), timeout=120,
                 detail=lambda: apiservice_detail(cp, "v1beta1.external.metrics.k8s.io") + log.read_text()[-2000:])
        yield a
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
