"""charts/foresight installed on the real node (tests/cluster/node.py) with the project's own
helm (tests/cluster/build_helm.sh), the way a user installs it on a cluster whose nodes hold the
images already (no registry here): the values that point the chart at the images
tests/cluster/build_images.sh built and the node imported, and the node's Prometheus.

The trainer runs on the app image here: the default models (``auto``) need neither torch nor
Prophet, and the trainer image (``build_images.sh --trainer``) is several GB.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from tests.cluster.controlplane import HERE, ROOT, wait_for

CHART = ROOT / "charts" / "foresight"
RELEASE = "foresight"
NAMESPACE = "foresight"
PROMETHEUS_URL = "http://prometheus.monitoring:9090"  # tests/cluster/manifests/prometheus.yaml's Service
# component label -> pods of the default chart (warm pool and scheduler are off by default)
DEFAULT_PODS = {"store": 1, "adapter": 2, "trainer": 1, "operator": 1}
WARMPOOL_VALUES = ("--set", "warmpool.enabled=true")  # the warm-pool controller besides them
WARMPOOL_PODS = {**DEFAULT_PODS, "warmpool": 1}


def helm_binary() -> Path:
    r = subprocess.run(["bash", str(HERE / "build_helm.sh")], stdout=subprocess.PIPE, text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError("tests/cluster/build_helm.sh failed (its log is above)")
    return Path(r.stdout.strip().splitlines()[-1])


def split_ref(ref: str) -> tuple[str, str]:
    repo, _, tag = ref.rpartition(":")
    return repo, tag


def node_values(images: dict, prometheus_url: str = PROMETHEUS_URL) -> list[str]:
    """``--set`` arguments: the images as imported on the node (never pulled), the Prometheus."""
    app_repo, app_tag = split_ref(images["app"]["ref"])
    trainer_repo, trainer_tag = split_ref(images.get("trainer", images["app"])["ref"])
    sets = {
        "image.repository": app_repo, "image.tag": app_tag, "image.pullPolicy": "Never",
        "trainer.image.repository": trainer_repo, "trainer.image.tag": trainer_tag,
        "redis.image": images["redis"]["ref"],
        "prometheus.url": prometheus_url,
        # the node has 2 cores: at the default 1-core trainer request, the release with its warm
        # pool, the node's add-ons and the adapter's rolling-update surge pod do not fit (the
        # surge pod stays Pending), as on any small node
        "trainer.resources.requests.cpu": "500m",
    }
    return [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]


def helm(helm_bin: Path, cp, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    r = subprocess.run([str(helm_bin), f"--kubeconfig={cp.admin_kubeconfig}", *args], capture_output=True, text=True,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"helm {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def is_ready(pod: dict) -> bool:
    return pod["status"].get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def release_pods(cp, namespace: str = NAMESPACE) -> list[dict]:
    return [p for p in cp.admin.json(f"/api/v1/namespaces/{namespace}/pods",
                                     labelSelector=f"app.kubernetes.io/instance={RELEASE}")["items"]
            if not p["metadata"].get("deletionTimestamp")]


def ready_by_component(cp, namespace: str = NAMESPACE) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in release_pods(cp, namespace):
        if is_ready(p):
            c = p["metadata"]["labels"].get("app.kubernetes.io/component", "?")
            out[c] = out.get(c, 0) + 1
    return out


def pods_detail(cp, namespace: str = NAMESPACE) -> str:
    rows = []
    for p in release_pods(cp, namespace):
        st = p["status"]
        waiting = [(c["name"], c.get("state"), c.get("restartCount")) for c in
                   st.get("initContainerStatuses", []) + st.get("containerStatuses", [])]
        rows.append(f"{p['metadata']['name']} {st.get('phase')} {waiting}")
    return "\n".join(rows)[:4000]


def wait_release_ready(node, want: dict[str, int] = DEFAULT_PODS, timeout: float = 300,
                       namespace: str = NAMESPACE) -> None:
    wait_for(f"every pod of the release Ready ({want})",
             lambda: (node.check_alive(), ready_by_component(node.cp, namespace) == want)[1],
             timeout=timeout, interval=1, detail=lambda: pods_detail(node.cp, namespace))


def rolled_out(cp, deployment: str, namespace: str = NAMESPACE) -> bool:
    d = cp.admin.json(f"/apis/apps/v1/namespaces/{namespace}/deployments/{deployment}")
    st, want = d.get("status") or {}, d["spec"]["replicas"]
    return (st.get("observedGeneration") == d["metadata"]["generation"] and st.get("updatedReplicas") == want
            and st.get("readyReplicas") == want and st.get("replicas") == want)


def config_applied(cp, namespace: str = NAMESPACE) -> bool:
    """The operator's trainer config is the one the adapter runs with: its digest on the adapter's
    pod template, rolled out (the adapter reads the file at start; the trainer re-reads it in place)."""
    r = cp.admin.get(f"/api/v1/namespaces/{namespace}/configmaps/foresight-trainer-config")
    if r.status_code != 200:
        return False
    digest = (r.json()["metadata"].get("annotations") or {}).get("foresight.dev/config-digest")
    for dep in ("foresight-adapter",):
        d = cp.admin.json(f"/apis/apps/v1/namespaces/{namespace}/deployments/{dep}")
        if (d["spec"]["template"]["metadata"].get("annotations") or {}).get("foresight.dev/config-digest") != digest:
            return False
        if not rolled_out(cp, dep, namespace):
            return False
    return True


def install(node, helm_bin: Path, *extra: str, namespace: str = NAMESPACE, timeout: float = 300,
            want: dict[str, int] = DEFAULT_PODS) -> float:
    """``helm install`` with the node's values; returns the seconds until every pod (``want``) is Ready."""
    t0 = time.monotonic()
    helm(helm_bin, node.cp, "install", RELEASE, str(CHART), "-n", namespace, "--create-namespace",
         *node_values(node.images), *extra)
    wait_release_ready(node, want, timeout=timeout, namespace=namespace)
    return time.monotonic() - t0
