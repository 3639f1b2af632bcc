"""The warm pool's Kubernetes backend against a real kube-apiserver.

It authenticates as the foresight-warmpool service account, so manifests/warmpool/rbac.yaml is
what authorizes it; pods use the RuntimeClass from manifests/warmpool/runtimeclasses.yaml (the
RuntimeClass admission plugin rejects unknown ones); the real scheduler binds them and the
kubelet stand-in reports them Running. Claims race on the pod's resourceVersion, and the real
API server's optimistic concurrency decides who wins.
"""

from __future__ import annotations

import threading
import time

import pytest

from core.store import MemoryForecastStore, make_forecast
from tests.cluster.controlplane import wait_for
from tests.warmpool.conftest import make_policy
from warmpool.backends.base import BackendError, ClaimConflict
from warmpool.backends.kubernetes import POOL_LABEL, STATE_LABEL, KubernetesBackend
from warmpool.controller import Controller

pytestmark = [pytest.mark.e2e]

NS = "demo"


class Clock:
    def __init__(self):
        self.t = time.time()

    def __call__(self):
        return self.t

    def advance(self, s):
        self.t += s


@pytest.fixture(scope="module")
def warmpool_kubeconfig(control_plane, applied_manifests):
    control_plane.ensure_namespace(NS)
    return str(control_plane.service_account_kubeconfig("foresight", "foresight-warmpool"))


def controller(kubeconfig, clock, name, demand=2.0, backend=None, **pool):
    policy = make_policy(name=name, workload={"namespace": NS, "name": name}, backend="kubernetes", runtime_class="crun",
                         template={"image": "registry.k8s.io/pause:3.10", "command": ["/pause"],
                                   "resources": {"cpu": "100m", "memory": "32Mi"}}, **pool)
    store = MemoryForecastStore()
    store.publish(make_forecast(f"{NS}/{name}", origin=clock(), step_seconds=60, mean=[demand] * 3,
                                quantiles={"p90": [demand] * 3}, model="t", generated_at=clock()))
    backend = backend or KubernetesBackend(kubeconfig=kubeconfig)
    return Controller(policy, store, {"kubernetes": backend}, clock=clock), store, backend


def pods(cp, pool):
    return {p["metadata"]["name"]: p for p in
            cp.admin.json(f"/api/v1/namespaces/{NS}/pods", labelSelector=f"{POOL_LABEL}={pool}")["items"]
            if not p["metadata"].get("deletionTimestamp")}


def running(cp, pool, n):
    return wait_for(f"{n} running warm pods of {pool}",
                    lambda: (lambda ps: ps if len(ps) == n and all(p["status"].get("phase") == "Running" for p in ps.values()) else None)(pods(cp, pool)),
                    timeout=120)


def test_warm_pods_are_real_pods_with_runtime_class_labels_and_template(control_plane, warmpool_kubeconfig):
    clock = Clock()
    ctl, store, backend = controller(warmpool_kubeconfig, clock, "web1")
    ctl.step()
    ps = running(control_plane, "web1", 2)
    pod = next(iter(ps.values()))
    assert pod["spec"]["runtimeClassName"] == "crun"
    assert pod["metadata"]["labels"][STATE_LABEL] == "warm" and "app" not in pod["metadata"]["labels"]
    c = pod["spec"]["containers"][0]
    assert c["image"] == "registry.k8s.io/pause:3.10" and c["resources"]["requests"] == {"cpu": "100m", "memory": "32Mi"}
    assert pod["spec"]["nodeName"]  # bound by the real scheduler
    ctl.step()
    assert ctl.describe()["pools"][0]["creating"] == 0  # Running pods are warm, not creating


def test_claim_and_release_patch_labels_on_the_real_server(control_plane, warmpool_kubeconfig):
    clock = Clock()
    ctl, store, backend = controller(warmpool_kubeconfig, clock, "web2")
    ctl.step()
    running(control_plane, "web2", 2)
    ctl.step()
    r = ctl.claim("web2")
    assert not r.cold_start
    labels = pods(control_plane, "web2")[r.container_id]["metadata"]["labels"]
    assert labels[STATE_LABEL] == "claimed" and labels["app"] == "web2"
    ctl.release("web2", r.container_id)
    labels = pods(control_plane, "web2")[r.container_id]["metadata"]["labels"]
    assert labels[STATE_LABEL] == "warm" and "app" not in labels


def test_claims_racing_on_resource_version_hand_a_pod_out_once(control_plane, warmpool_kubeconfig):
    clock = Clock()
    ctl_a, store, backend = controller(warmpool_kubeconfig, clock, "web3", demand=1.0)
    ctl_a.step()
    running(control_plane, "web3", 1)
    ctl_b, _, _ = controller(warmpool_kubeconfig, clock, "web3", demand=1.0)
    ctl_b._observe(clock())  # both now hold the same pod at the same resourceVersion
    pool = ctl_a.policy.pools[0]
    [pod] = backend.list(pool)
    results = []
    barrier = threading.Barrier(8)

    def claim():
        b = KubernetesBackend(kubeconfig=warmpool_kubeconfig)
        barrier.wait()
        try:
            results.append(b.claim(pool, pod, clock()).id)
        except ClaimConflict:
            results.append(None)

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(pod.id) == 1 and results.count(None) == 7
    # A controller whose view is stale loses with a 409 and falls back to a cold start.
    r = ctl_b.claim("web3")
    assert r.cold_start and r.container_id != pod.id


def test_idle_pods_expire_and_a_restarted_controller_adopts_the_rest(control_plane, warmpool_kubeconfig):
    clock = Clock()
    ctl, store, backend = controller(warmpool_kubeconfig, clock, "web4", demand=3.0)
    ctl.step()
    names = sorted(running(control_plane, "web4", 3))
    ctl2, store2, _ = controller(warmpool_kubeconfig, clock, "web4", demand=3.0)
    assert ctl2.step().creates == ()
    assert sorted(c["id"] for c in ctl2.describe()["pools"][0]["containers"]) == names
    # the pool serves its quantile (p90): a forecast without it would serve nothing, and every pod would expire
    store2.publish(make_forecast(f"{NS}/web4", origin=clock(), step_seconds=60, mean=[1.0] * 3,
                                 quantiles={"p90": [1.0] * 3}, model="t", generated_at=clock()))
    clock.advance(121)
    ctl2.step()
    wait_for("expired pods deleted", lambda: len(pods(control_plane, "web4")) == 1, timeout=60)


def test_rbac_from_the_manifest_bounds_what_the_warm_pool_may_do(control_plane, warmpool_kubeconfig):
    from tests.cluster.controlplane import ApiClient

    cp = control_plane
    sa = ApiClient(cp.server, cp.files["ca"], token=cp.service_account_token("foresight", "foresight-warmpool"))
    assert sa.get(f"/api/v1/namespaces/{NS}/pods").status_code == 200
    assert sa.get("/apis/node.k8s.io/v1/runtimeclasses").status_code == 200
    assert sa.get(f"/api/v1/namespaces/{NS}/secrets").status_code == 403
    assert sa.get("/api/v1/nodes").status_code == 403
    # Without the binding, creating a warm pod is refused by the API server, not by us.
    cp.admin.post("/api/v1/namespaces/foresight/serviceaccounts",
                  {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "unbound"}})
    clock = Clock()
    _, _, outsider = controller(str(cp.service_account_kubeconfig("foresight", "unbound")), clock, "web5")
    pool = make_policy(name="web5", workload={"namespace": NS, "name": "web5"}, backend="kubernetes",
                       runtime_class="crun").pools[0]
    with pytest.raises(BackendError):
        outsider.create(pool, "fs-web5-0", clock(), clock() + 60)


def test_warm_pods_land_on_the_node_predicted_cool_through_the_real_scheduler(control_plane, warmpool_kubeconfig):
    """The node-load forecasts become preferred nodeAffinity terms on warm pods, and the real
    kube-scheduler (default profile) honours them."""
    from forecaster.nodes import placement_affinity

    clock = Clock()
    now = clock()
    node_store = MemoryForecastStore()
    for node, zone, load in [("node-a", "zone-1", 0.97), ("node-b", "zone-1", 0.5), ("node-c", "zone-2", 0.05)]:
        node_store.publish(make_forecast(f"node/{node}", origin=now, step_seconds=60, mean=[load] * 5,
                                         quantiles={"p50": [load] * 5, "p90": [load] * 5}, model="t",
                                         observed=((now, load),), generated_at=now,
                                         meta={"kind": "Node", "node": node, "zone": zone}))
    backend = KubernetesBackend(kubeconfig=warmpool_kubeconfig,
                                affinity_provider=lambda: placement_affinity(node_store, now=now))
    ctl, store, _ = controller(warmpool_kubeconfig, clock, "web6", demand=3.0, backend=backend)
    ctl.step()
    placed = [p["spec"]["nodeName"] for p in running(control_plane, "web6", 3).values()]
    assert "node-a" not in placed, placed
    assert placed.count("node-c") >= 2, placed
