"""KEDA's operator and metrics API server (built by build_keda.sh) as local processes against a
:class:`~tests.cluster.controlplane.ControlPlane`, out of cluster, as KEDA's own ``make run``
starts its operator: a kubeconfig, ``WATCH_NAMESPACE=""`` (every namespace) and
``KEDA_CLUSTER_OBJECT_NAMESPACE`` (where ClusterTriggerAuthentications' Secrets live).

Every listener is on 127.0.0.1 except the metrics API server's own Prometheus endpoint, which
KEDA binds on all interfaces with no flag to change it (nothing connects to it). The two KEDA
processes talk over KEDA's mutual-TLS gRPC "metrics service" with certificates written here
(what KEDA's cert rotation would make in a cluster); the aggregator reaches the metrics API
server through an ExternalName ``localhost`` Service (tests/e2e/conftest.py).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.cluster.controlplane import HERE, ControlPlane, Proc, free_port, run_build_script

BUILD_SCRIPT = HERE / "build_keda.sh"
NAMESPACE = "keda"  # KEDA_CLUSTER_OBJECT_NAMESPACE and POD_NAMESPACE, as KEDA's manifests install it
METRICS_SERVICE = "keda-metrics-apiserver"  # the Service KEDA's APIService names
EXTERNAL_METRICS_APISERVICE = "v1beta1.external.metrics.k8s.io"


def build_keda(stream=None) -> Path:
    """Run build_keda.sh (seconds when cached): the directory with bin/ and config/crd/bases/."""
    return Path(run_build_script(BUILD_SCRIPT, stream))


def crd_files(keda_dir: Path) -> list[Path]:
    return sorted((keda_dir / "config" / "crd" / "bases").glob("*.yaml"))


@dataclass
class KedaPKI:
    """KEDA's internal certificates. ``operator_dir`` and ``adapter_dir`` are the ``--cert-dir``
    of each process (ca.crt, tls.crt, tls.key): the operator serves the metrics service with its
    pair and requires a client certificate signed by ca.crt; the metrics API server presents its
    pair as that client. ``serving_*``: the metrics API server's HTTPS pair for the aggregator,
    for the name the APIService's Service resolves to."""

    operator_dir: Path
    adapter_dir: Path
    serving_ca: Path
    serving_cert: Path
    serving_key: Path


def write_pki(d: Path) -> KedaPKI:
    from adapter.tls import write_ca, write_signed

    d.mkdir(parents=True, exist_ok=True)
    ca_crt, _, ca, key = write_ca(d, "keda-ca")
    op_dir, ad_dir = d / "operator", d / "adapter"
    for sub, cn, client in ((op_dir, "keda-operator", False), (ad_dir, "keda-metrics-apiserver", True)):
        sub.mkdir()
        crt, k = write_signed(sub, "pair", ca, key, cn=cn, client=client, sans=["127.0.0.1", "localhost"])
        crt.rename(sub / "tls.crt")
        k.rename(sub / "tls.key")
        shutil.copy(ca_crt, sub / "ca.crt")
    s_ca, _, sca, skey = write_ca(d, "keda-serving-ca")
    s_crt, s_key = write_signed(d, "metrics-apiserver", sca, skey, cn=METRICS_SERVICE, client=False,
                                sans=[f"{METRICS_SERVICE}.{NAMESPACE}.svc", "localhost", "127.0.0.1"])
    return KedaPKI(op_dir, ad_dir, s_ca, s_crt, s_key)


def _env(cp: ControlPlane) -> dict[str, str]:
    return {"KUBECONFIG": str(cp.admin_kubeconfig), "WATCH_NAMESPACE": "", "POD_NAMESPACE": NAMESPACE,
            "KEDA_CLUSTER_OBJECT_NAMESPACE": NAMESPACE}


@dataclass
class KedaOperator:
    proc: Proc
    metrics_service_port: int  # the gRPC metrics service the metrics API server reads
    prometheus_port: int  # KEDA's own metrics (plain HTTP)

    def scaler_errors(self, namespace: str, name: str) -> list[str]:
        """The errors KEDA logged calling an external scaler for one ScaledObject (its
        ``external_scaler``/``external_push_scaler`` loggers), e.g. a refused connection."""
        want = f'"namespace": "{namespace}", "name": "{name}"'
        return [line for line in self.proc.log.read_text(errors="replace").splitlines()
                if "\tERROR\texternal_" in line and want in line]

    def scaled_object_errors(self, namespace: str, name: str) -> float:
        """``keda_scaled_object_errors_total`` of one ScaledObject: the failed reads of its
        triggers KEDA counted (0 before the first)."""
        text = httpx.get(f"http://127.0.0.1:{self.prometheus_port}/metrics", timeout=5).text
        want = f'namespace="{namespace}",scaledObject="{name}"'
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("keda_scaled_object_errors_total{") and want in line)


def start_operator(cp: ControlPlane, keda_dir: Path, pki: KedaPKI, timeout: float = 120.0) -> KedaOperator:
    """keda-operator with the admin's kubeconfig (KEDA's ClusterRole would do; the test is not
    about KEDA's RBAC), up once its /readyz answers."""
    probe, grpc_port, prom = free_port(), free_port(), free_port()
    ca_dir = pki.operator_dir.parent / "custom-ca"  # --ca-dir: extra CAs for scalers; none here
    ca_dir.mkdir(exist_ok=True)
    proc = cp.spawn("keda-operator", [
        str(keda_dir / "bin" / "keda-operator"), f"--kubeconfig={cp.admin_kubeconfig}",
        f"--metrics-bind-address=127.0.0.1:{prom}", f"--health-probe-bind-address=127.0.0.1:{probe}",
        f"--metrics-service-bind-address=127.0.0.1:{grpc_port}", f"--cert-dir={pki.operator_dir}",
        f"--ca-dir={ca_dir}", "--enable-cert-rotation=false", "--leader-elect=false",
        "--zap-log-level=info", "--zap-encoder=console",
    ], env=_env(cp))
    proc.wait_http(f"http://127.0.0.1:{probe}/readyz", timeout)
    return KedaOperator(proc, grpc_port, prom)


@dataclass
class KedaMetricsServer:
    proc: Proc
    port: int


def start_metrics_server(cp: ControlPlane, keda_dir: Path, pki: KedaPKI, operator: KedaOperator) -> KedaMetricsServer:
    """keda-adapter (KEDA's external metrics API server) on loopback, reading the operator's
    metrics service; the caller registers the APIService (it is Available once this serves)."""
    port = free_port()
    kc = str(cp.admin_kubeconfig)
    proc = cp.spawn("keda-metrics-apiserver", [
        str(keda_dir / "bin" / "keda-adapter"), f"--kubeconfig={kc}", f"--lister-kubeconfig={kc}",
        f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
        "--bind-address=127.0.0.1", f"--secure-port={port}",
        f"--tls-cert-file={pki.serving_cert}", f"--tls-private-key-file={pki.serving_key}",
        f"--cert-dir={pki.adapter_dir}", f"--metrics-service-address=127.0.0.1:{operator.metrics_service_port}",
        f"--port={free_port()}", "--zap-log-level=info", "--zap-encoder=console",
    ], env=_env(cp))
    return KedaMetricsServer(proc, port)


__all__ = ["BUILD_SCRIPT", "EXTERNAL_METRICS_APISERVICE", "KedaMetricsServer", "KedaOperator", "KedaPKI", "METRICS_SERVICE",
           "NAMESPACE", "build_keda", "crd_files", "start_metrics_server", "start_operator", "write_pki"]
