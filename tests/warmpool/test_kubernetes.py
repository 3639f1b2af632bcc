"""The kubernetes backend against a boundary fake of the API server over real HTTP, driven by
the real `kubernetes` client; plus an e2e test on a real cluster when KUBECONFIG is set."""

import os
import threading
import uuid

import pytest

from forecaster.store import MemoryForecastStore, make_forecast
from tests.warmpool.conftest import make_policy
from tests.warmpool.k8s_fake import FakeKubernetes
from warmpool.backends.base import ClaimConflict
from warmpool.backends.kubernetes import POOL_LABEL, STATE_LABEL, KubernetesBackend
from warmpool.controller import Controller


@pytest.fixture
def fake():
    f = FakeKubernetes().start()
    yield f
    f.stop()


def controller(fake_or_backend, clock, demand=2.0, **pool):
    policy = make_policy(backend="kubernetes", runtime_class="kata", template={"image": "busybox:1.36", "command": ["sleep", "3600"], "resources": {"cpu": "100m", "memory": "32Mi"}}, **pool)
    store = MemoryForecastStore()
    store.publish(make_forecast("demo/web", origin=clock(), step_seconds=60, mean=[demand] * 3, quantiles={"p90": [demand] * 3}, model="t", generated_at=clock()))
    backend = fake_or_backend if isinstance(fake_or_backend, KubernetesBackend) else KubernetesBackend(host=fake_or_backend.url)
    return Controller(policy, store, {"kubernetes": backend}, clock=clock), store, backend


def test_warm_pods_carry_the_runtime_class_pool_labels_and_template(fake, clock):
    ctl, store, backend = controller(fake, clock)
    ctl.step()
    assert len(fake.pods) == 2
    pod = next(iter(fake.pods.values()))
    assert pod["spec"]["runtimeClassName"] == "kata"
    assert pod["metadata"]["labels"][POOL_LABEL] == "web" and pod["metadata"]["labels"][STATE_LABEL] == "warm"
    assert "app" not in pod["metadata"]["labels"]
    c = pod["spec"]["containers"][0]
    assert c["image"] == "busybox:1.36" and c["resources"]["requests"] == {"cpu": "100m", "memory": "32Mi"}


def test_a_claim_moves_the_pod_into_the_workload_and_release_moves_it_back(fake, clock):
    ctl, store, backend = controller(fake, clock)
    ctl.step()
    r = ctl.claim("web")
    labels = fake.pods[("demo", r.container_id)]["metadata"]["labels"]
    assert labels[STATE_LABEL] == "claimed" and labels["app"] == "web"
    assert r.endpoint.startswith("10.0.0.")
    ctl.release("web", r.container_id)
    labels = fake.pods[("demo", r.container_id)]["metadata"]["labels"]
    assert labels[STATE_LABEL] == "warm" and "app" not in labels


def test_two_controllers_racing_for_the_same_pod_cannot_both_win(fake, clock):
    ctl_a, store, backend = controller(fake, clock, demand=1.0)
    ctl_a.step()
    ctl_b, _, _ = controller(fake, clock, demand=1.0)
    ctl_b._observe(clock())  # both now hold the same pod at the same resourceVersion
    pool = ctl_a.policy.pools[0]
    [pod] = backend.list(pool)
    results = []
    barrier = threading.Barrier(8)

    def claim(i):
        b = KubernetesBackend(host=fake.url)
        barrier.wait()
        try:
            results.append(b.claim(pool, pod, clock()).id)
        except ClaimConflict:
            results.append(None)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(pod.id) == 1 and results.count(None) == 7
    assert fake.conflicts == 7
    # a controller whose view is stale loses with a 409 and falls back to a cold start
    r = ctl_b.claim("web")
    assert r.cold_start and r.container_id != pod.id


def test_idle_pods_are_deleted_on_expiry_and_a_restarted_controller_adopts_the_rest(fake, clock):
    ctl, store, backend = controller(fake, clock, demand=3.0)
    ctl.step()
    names = sorted(n for _, n in fake.pods)
    ctl2, store2, _ = controller(fake, clock, demand=3.0)
    assert ctl2.step().creates == ()
    assert sorted(c["id"] for c in ctl2.describe()["pools"][0]["containers"]) == names
    store2.publish(make_forecast("demo/web", origin=clock(), step_seconds=60, mean=[1.0] * 3, model="t", generated_at=clock()))
    clock.advance(121)
    ctl2.step()
    assert len(fake.pods) == 1
    assert ctl2.describe()["pools"][0]["ttl_decay_k"] == 2


def test_pending_pods_count_as_creating_and_failed_pods_are_replaced(clock):
    fake = FakeKubernetes(initial_phase="Pending").start()
    try:
        ctl, store, backend = controller(fake, clock)
        ctl.step()
        assert ctl.step().creates == ()  # two are on their way
        assert ctl.describe()["pools"][0]["creating"] == 2
        (ns, name), _ = sorted(fake.pods.items())[0]
        fake.set_phase(ns, name, "Failed")
        ctl.step()
        assert (ns, name) not in fake.pods and len(fake.pods) == 2
    finally:
        fake.stop()


def test_an_api_server_error_on_create_backs_off_and_marks_the_pool_degraded(fake, clock):
    ctl, store, backend = controller(fake, clock)
    fake.fail_creates = 1
    ctl.step()
    assert ctl.describe()["pools"][0]["degraded"] and fake.pods == {}
    clock.advance(1.0)
    ctl.step()
    assert len(fake.pods) == 2 and not ctl.describe()["pools"][0]["degraded"]


@pytest.mark.e2e
@pytest.mark.skipif(not os.environ.get("KUBECONFIG"), reason="needs a real cluster: set KUBECONFIG")
def test_e2e_warm_pods_on_a_real_cluster(clock):
    ns = os.environ.get("FORESIGHT_E2E_NAMESPACE", "default")
    backend = KubernetesBackend(kubeconfig=os.environ["KUBECONFIG"])
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    policy = make_policy(name=name, backend="kubernetes", workload={"namespace": ns, "name": name}, runtime_class="crun")
    pool = policy.pools[0]
    pool = type(pool)(**{**pool.__dict__, "runtime_class": os.environ.get("FORESIGHT_E2E_RUNTIME_CLASS", "")})
    try:
        c, _ = backend.create(pool, f"fs-{name}-0", clock(), clock() + 60)
        listed = backend.list(pool)
        assert [x.id for x in listed] == [c.id]
        got = backend.claim(pool, listed[0], clock())
        assert got.state == "claimed"
        with pytest.raises(ClaimConflict):
            backend.claim(pool, listed[0], clock())  # stale resourceVersion
    finally:
        for x in backend.list(pool):
            backend.delete(pool, x.id)


def test_warm_pods_prefer_nodes_predicted_cool_using_the_extender_scores(fake, clock):
    """Issue 7: the same node-load forecasts that drive the scheduler extender become the warm
    pods' nodeAffinity preferences (hot node avoided, cool node preferred)."""
    from forecaster.nodes import placement_affinity

    now = clock()
    node_store = MemoryForecastStore()
    for node, zone, load in [("node-hot", "zone-a", 0.97), ("node-cool", "zone-b", 0.10), ("node-mid", "zone-b", 0.5)]:
        node_store.publish(make_forecast(f"node/{node}", origin=now, step_seconds=60, mean=[load] * 5,
                                         quantiles={"p50": [load] * 5, "p90": [load] * 5}, model="t",
                                         observed=((now, load),), generated_at=now,
                                         meta={"kind": "Node", "node": node, "zone": zone}))
    backend = KubernetesBackend(host=fake.url, affinity_provider=lambda: placement_affinity(node_store, now=now))
    ctl, store, _ = controller(backend, clock)
    ctl.step()
    pod = next(iter(fake.pods.values()))
    aff = pod["spec"]["affinity"]["nodeAffinity"]
    prefs = aff["preferredDuringSchedulingIgnoredDuringExecution"]
    weights = {}
    for p in prefs:
        for f in p["preference"].get("matchFields", []):
            if f["operator"] == "In":
                weights[f["values"][0]] = p["weight"]
    assert weights.get("node-cool", 0) > weights.get("node-mid", 0)
    assert "node-hot" not in weights
    flat = str(prefs)
    assert "node-hot" in flat and "NotIn" in flat  # actively avoided


def test_a_failing_placement_provider_never_blocks_warm_pod_creation(fake, clock):
    def broken():
        raise RuntimeError("store down")

    backend = KubernetesBackend(host=fake.url, affinity_provider=broken)
    ctl, store, _ = controller(backend, clock)
    ctl.step()
    assert len(fake.pods) == 2
    assert "affinity" not in next(iter(fake.pods.values()))["spec"]
