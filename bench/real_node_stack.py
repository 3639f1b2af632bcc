"""foresight's components beside the real node, the way tests/e2e runs them: host processes
against the node's control plane (its API server on loopback), not the Helm chart.

- the real node (tests/cluster/node.py) with metrics-server (metrics.k8s.io for the reactive
  HPAs) and Prometheus (history backfilled, tests/cluster/backfill.py); the controller manager's
  HPA sync at Kubernetes' default 15 s, not the tests' 2 s;
- Redis, ``foresight serve`` (HTTPS, front-proxy CA, delegated auth with the foresight service
  account, the ready-pods watch) registered as v1beta1.external.metrics.k8s.io through an
  ExternalName ``localhost`` Service (the aggregator dials it on this machine);
- ``foresight operator`` (PredictiveAutoscaler -> HPA and the trainer's effective ConfigMap;
  admin kubeconfig, as tests/operator) and ``foresight train`` on that ConfigMap's file.
Every process is spawned by the control plane and stopped with it.
"""

from __future__ import annotations

import base64
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

from tests.cluster.controlplane import ROOT, free_port, tls_context, wait_for

# charts/foresight/values.yaml trainer.config: what a chart install runs (the shipped defaults)
SHIPPED_TRAINER_CONFIG = {"source": {"step_seconds": 60, "history_days": 14}, "store": {"ttl_seconds": 3600},
                          "training": {"retrain_interval_seconds": 86400, "refresh_interval_seconds": 60,
                                       "horizon_steps": 12, "quantiles": [0.5, 0.9], "models": ["auto"]}}
HPA_SYNC_SECONDS = 15  # kube-controller-manager's default --horizontal-pod-autoscaler-sync-period


def start_node(d: Path):
    """A control plane (HPA sync 15 s) and the real node, with metrics-server."""
    from tests.cluster import nodenet
    from tests.cluster.addons import deploy_metrics_server
    from tests.cluster.controlplane import ControlPlane, build_binaries
    from tests.cluster.node import Node, build_images

    bin_dir = build_binaries()
    images = build_images()
    (d / "cp").mkdir(parents=True, exist_ok=True)
    cp = ControlPlane(bin_dir=bin_dir, dir=d / "cp", service_cidr=nodenet.SERVICE_CIDR, node_lifecycle=True,
                      hpa_sync_seconds=HPA_SYNC_SECONDS).start()
    try:
        node = Node(cp, d / "node", images).start()
    except BaseException:
        cp.stop()
        raise
    try:
        deploy_metrics_server(node)
    except BaseException:
        node.stop()
        cp.stop()
        raise
    return cp, node


def _check_ok(r, what: str) -> None:
    if r.status_code not in (200, 201):
        raise RuntimeError(f"{what}: {r.status_code} {r.text[:500]}")


@dataclass
class Foresight:
    cp: object
    dir: Path
    prometheus_url: str
    redis_url: str = ""
    adapter_log: Path | None = None
    trainer_log: Path | None = None
    operator_log: Path | None = None
    trainer_started_at: float | None = None

    def start(self) -> "Foresight":
        from tests.stack import RedisServer

        self.dir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        proc = self.cp.spawn("redis", ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                       "--appendonly", "no", "--dir", str(self.dir)])
        self.redis_url = RedisServer(port, self.dir).url
        wait_for("redis", lambda: proc.alive() and _port_open(port), timeout=30)
        self._manifests()
        self._operator()
        return self

    def _manifests(self) -> None:
        cp = self.cp
        cp.kubectl("apply", "--server-side", "-f", str(ROOT / "manifests/adapter/namespace.yaml"))
        cp.kubectl("apply", "--server-side", "-f", str(ROOT / "manifests/crds"), "-f", str(ROOT / "manifests/adapter/rbac.yaml"),
                   "-f", str(ROOT / "manifests/adapter/apiservice.yaml"))
        wait_for("CRDs Established", lambda: cp.kubectl("wait", "--for=condition=Established", "--timeout=30s",
                                                         "crd/predictiveautoscalers.foresight.dev", check=False).returncode == 0,
                 timeout=90)

    def start_adapter(self, config: Path) -> None:
        from adapter.tls import write_ca, write_signed
        from tests.e2e.conftest import apiservice_available, apiservice_detail, point_service_at_localhost, wire_apiservice

        cp, d = self.cp, self.dir / "adapter"
        d.mkdir(exist_ok=True)
        ca_crt, _, ca, key = write_ca(d, "serving-ca")
        crt, key_file = write_signed(d, "adapter", ca, key, cn="foresight-adapter", client=False,
                                     sans=["foresight-adapter.foresight.svc", "localhost", "127.0.0.1"])
        for k, f in (("requestheader-client-ca-file", "requestheader-ca.crt"), ("requestheader-allowed-names", "allowed-names.json")):
            (d / f).write_text(cp.kubectl("-n", "kube-system", "get", "configmap", "extension-apiserver-authentication",
                                          "-o", f"jsonpath={{.data.{k}}}").stdout)
        port = free_port()
        sa = cp.service_account_kubeconfig("foresight", "foresight")
        proc = cp.spawn("foresight-serve", [
            sys.executable, "-m", "foresight", "serve", f"--store={self.redis_url}", "--host=127.0.0.1", f"--port={port}",
            f"--cert={crt}", f"--key={key_file}", f"--requestheader-ca={d / 'requestheader-ca.crt'}",
            f"--allowed-names=@{d / 'allowed-names.json'}", "--delegated-auth", f"--kubeconfig={sa}",
            f"--config={config}"])
        self.adapter_log = proc.log
        wait_for("foresight serve /healthz", lambda: proc.alive() and httpx.get(
            f"https://127.0.0.1:{port}/healthz", verify=tls_context(ca_crt), timeout=2).status_code == 200, timeout=120,
            detail=lambda: proc.tail(30))
        point_service_at_localhost(cp, "foresight", "foresight-adapter")
        wire_apiservice(cp, "v1beta1.external.metrics.k8s.io", port, base64.b64encode(ca_crt.read_bytes()).decode())
        wait_for("APIService v1beta1.external.metrics.k8s.io Available",
                 lambda: apiservice_available(cp, "v1beta1.external.metrics.k8s.io"), timeout=120,
                 detail=lambda: apiservice_detail(cp, "v1beta1.external.metrics.k8s.io") + proc.tail(20))

    def _operator(self) -> None:
        cp = self.cp
        base = {"apiVersion": "foresight/v1alpha1", "kind": "WorkloadConfig", **SHIPPED_TRAINER_CONFIG,
                "workloads": []}
        base = {**base, "source": {**base["source"], "url": self.prometheus_url.replace("http://", "prometheus://")},
                "store": {**base["store"], "url": self.redis_url}}
        r = cp.admin.apply("/api/v1/namespaces/foresight/configmaps/foresight-workloads", {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "foresight-workloads", "namespace": "foresight"},
            "data": {"workloads.yaml": yaml.safe_dump(base)}}, "foresight-bench")
        _check_ok(r, "ConfigMap foresight-workloads")
        proc = cp.spawn("foresight-operator", [sys.executable, "-m", "foresight", "operator", f"--store={self.redis_url}",
                                               f"--kubeconfig={cp.admin_kubeconfig}", "--trainer-deployment=",
                                               "--warmpool-config-map="])
        self.operator_log = proc.log

    def trainer_config(self, *workloads: str) -> Path:
        """The operator's effective trainer config as a file, once it lists every one of
        ``workloads`` (the chart mounts that ConfigMap into the trainer and the adapter)."""
        cp = self.cp

        def config() -> str | None:
            r = cp.admin.get("/api/v1/namespaces/foresight/configmaps/foresight-trainer-config")
            text = r.json().get("data", {}).get("workloads.yaml", "") if r.status_code == 200 else ""
            names = [f"{w['namespace']}/{w['name']}" for w in (yaml.safe_load(text) or {}).get("workloads") or []]
            return text if set(workloads) <= set(names) else None

        text = wait_for(f"the operator's trainer config listing {', '.join(workloads)}", config, timeout=120, interval=1,
                        detail=lambda: self.operator_log.read_text()[-2000:])
        path = self.dir / "workloads.yaml"
        path.write_text(text)
        return path

    def start_trainer(self, config: Path) -> None:
        # the chart's trainer env: two threads for the fits
        proc = self.cp.spawn("foresight-train", [sys.executable, "-m", "foresight", "train", "--config", str(config)],
                             env={"OMP_NUM_THREADS": "2"})
        self.trainer_log = proc.log
        self.trainer_started_at = time.time()


def _port_open(port: int) -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False
