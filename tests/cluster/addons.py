"""The real metrics-server, CoreDNS and Prometheus as pods on the real node (tests/cluster/manifests/).

It scrapes the kubelet's /metrics/resource over HTTPS (the kubelet authorizes it by a
SubjectAccessReview on nodes/metrics), and kube-apiserver's aggregator reaches it through its
ClusterIP Service (kube-proxy's rules on the node), so ``metrics.k8s.io`` is served the way a
cluster serves it: no stand-in.
"""

from __future__ import annotations

from tests.cluster import nodenet
from tests.cluster.controlplane import HERE, wait_for

MANIFEST = HERE / "manifests" / "metrics-server.yaml"
APISERVICE = "v1beta1.metrics.k8s.io"


def apiservice_available(cp) -> bool:
    svc = cp.admin.json(f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}")
    return any(c["type"] == "Available" and c["status"] == "True" for c in svc.get("status", {}).get("conditions", []))


def deploy_metrics_server(node, timeout: float = 240) -> None:
    """Apply the manifest with the built image and wait for the APIService to be Available."""
    cp = node.cp
    image = node.images["metrics-server"]["ref"]
    cp.kubectl("apply", "--server-side", "-f", "-", input=MANIFEST.read_text().replace("IMAGE", image))

    def detail() -> str:
        pods = cp.admin.json("/api/v1/namespaces/kube-system/pods", labelSelector="k8s-app=metrics-server")["items"]
        svc = cp.admin.json(f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}").get("status")
        return f"apiservice {svc}; pods {[p['status'] for p in pods]}"[:3000]

    wait_for(f"APIService {APISERVICE} Available", lambda: (node.check_alive(), apiservice_available(cp))[1],
             timeout=timeout, interval=1, detail=detail)


def pod_usage(cp, namespace: str, name: str) -> dict | None:
    """The PodMetrics of one pod from metrics.k8s.io, or None while it has none yet."""
    r = cp.admin.get(f"/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods/{name}")
    return r.json() if r.status_code == 200 else None


DNS_MANIFEST = HERE / "manifests" / "coredns.yaml"


def deploy_coredns(node, timeout: float = 180) -> None:
    """kube-dns at the kubelet's clusterDNS address, Ready."""
    cp = node.cp
    cp.kubectl("apply", "--server-side", "-f", "-", input=DNS_MANIFEST.read_text().replace("IMAGE", node.images["coredns"]["ref"]))

    def ready() -> bool:
        node.check_alive()
        pods = cp.admin.json("/api/v1/namespaces/kube-system/pods", labelSelector="k8s-app=kube-dns")["items"]
        return any(c["type"] == "Ready" and c["status"] == "True" for p in pods for c in p["status"].get("conditions", []))

    wait_for("CoreDNS Ready", ready, timeout=timeout, interval=1, detail=lambda: str(
        [p["status"] for p in cp.admin.json("/api/v1/namespaces/kube-system/pods", labelSelector="k8s-app=kube-dns")["items"]])[:3000])


PROMETHEUS_MANIFEST = HERE / "manifests" / "prometheus.yaml"


def deploy_prometheus(node, timeout: float = 180) -> str:
    """Prometheus scraping the kubelet, Ready; returns its base URL on the pod address."""
    cp = node.cp
    cp.kubectl("apply", "--server-side", "-f", "-",
               input=PROMETHEUS_MANIFEST.read_text().replace("IMAGE", node.images["prometheus"]["ref"])
               .replace("KUBELET", f"{nodenet.NODE_IP}:{node.kubelet_port}"))

    def ready_ip() -> str | None:
        node.check_alive()
        for p in cp.admin.json("/api/v1/namespaces/monitoring/pods", labelSelector="app=prometheus")["items"]:
            if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", [])):
                return p["status"]["podIP"]
        return None

    ip = wait_for("Prometheus Ready", ready_ip, timeout=timeout, interval=1, detail=lambda: str(
        [p["status"] for p in cp.admin.json("/api/v1/namespaces/monitoring/pods")["items"]])[:3000])
    return f"http://{ip}:9090"
