"""The kubernetes backend against a boundary fake of the API server over real HTTP, driven by
the real `kubernetes` client, for what a real API server cannot be made to do on demand: fail a
create, leave pods Pending, fail a pod. Everything a real kube-apiserver can answer (pods with the
RuntimeClass and labels, claim/release label patches, claims racing on resourceVersion, expiry
and adoption, RBAC, node affinity honoured by the real scheduler) runs against one in
tests/e2e/test_warmpool_kubernetes.py."""

import pytest

from forecaster.store import MemoryForecastStore, make_forecast
from tests.warmpool.conftest import make_policy
from tests.warmpool.k8s_fake import FakeKubernetes
from warmpool.backends.kubernetes import KubernetesBackend
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
