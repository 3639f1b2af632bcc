"""The kubernetes backend against a boundary fake of the API server over real HTTP, driven by
the real `kubernetes` client, for what a real API server cannot be made to do on demand: fail a
create, leave pods Pending, fail a pod. Everything a real kube-apiserver can answer (pods with the
RuntimeClass and labels, claim/release label patches, claims racing on resourceVersion, expiry
and adoption, RBAC, node affinity honoured by the real scheduler) runs against one in
tests/e2e/test_warmpool_kubernetes.py."""

import pytest

from core.store import MemoryForecastStore, make_forecast
from tests.warmpool.conftest import make_policy
from tests.warmpool.k8s_fake import FakeKubernetes
from tests.warmpool.test_controller import sample
from warmpool.backends.crun import CrunBackend
from warmpool.backends.kubernetes import KubernetesBackend
from warmpool.backends.sim import SimBackend
from warmpool.coldstart import CONTAINER, POD, ColdStartModel
from warmpool.controller import Controller
from warmpool.policy import BACKENDS


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


def rising(clock, store, low, high, rise_at):
    """A forecast at ``low`` cores that steps to ``high`` ``rise_at`` s from now (1-s steps)."""
    values = [low] * (rise_at - 1) + [high] * 30
    store.publish(make_forecast("demo/web", origin=clock(), step_seconds=1, mean=values, quantiles={"p90": values}, model="t", generated_at=clock()))


def test_a_pod_pool_leads_by_a_pod_start_and_a_container_pool_by_a_container_start(fake, clock):
    """The forecast window is [now, now + lead + T_cold p90]: a pod's seed (crun, 3.69 s,
    measured on the node) reaches a rise 93 s ahead; a container's (0.136 s) does not."""
    assert KubernetesBackend.start_kind == POD and CrunBackend.start_kind == CONTAINER and SimBackend(clock).start_kind == CONTAINER
    assert {name: kind for name, kind in BACKENDS.items()} == {"crun": CONTAINER, "runc": CONTAINER, "kubernetes": POD, "sim": CONTAINER}
    targets = {}
    for name, backend in [("kubernetes", KubernetesBackend(host=fake.url)), ("sim", SimBackend(clock))]:
        store = MemoryForecastStore()
        rising(clock, store, 1.0, 6.0, 93)
        policy = make_policy(backend=name, runtime_class="crun", idle_model={"enabled": False})
        ctl = Controller(policy, store, {name: backend}, clock=clock)
        targets[name] = ctl.step().status["web"].target_warm
        kind = POD if name == "kubernetes" else CONTAINER
        view = ctl.coldstart_view()[0]
        assert (view["start"], view["runtime_class"]) == (kind, "crun")  # the pool's own first
        assert sample(ctl, "foresight_warmpool_cold_start_model_seconds", start=kind, runtime_class="crun",
                      component="total", quantile="p90") == pytest.approx(3.693 if kind == POD else 0.136)
    assert targets == {"kubernetes": 6, "sim": 1}
    # a sim backend told to start pods models the kubernetes backend's
    store = MemoryForecastStore()
    rising(clock, store, 1.0, 6.0, 93)
    ctl = Controller(make_policy(runtime_class="crun", idle_model={"enabled": False}), store, {"sim": SimBackend(clock, start_kind=POD)}, clock=clock)
    assert ctl.step().status["web"].target_warm == 6


def test_each_pod_start_is_learned_once_from_its_ready_condition_and_adopted_pods_never(clock):
    """A pod's start (creationTimestamp -> Ready) is recorded once, when the controller that
    created it first lists it Ready; the learned p90 then widens the pool's forecast window.
    A restarted controller adopts the pods without recording them."""
    fake = FakeKubernetes(initial_phase="Pending").start()
    try:
        store = MemoryForecastStore()
        rising(clock, store, 1.0, 4.0, 105)
        policy = make_policy(backend="kubernetes", runtime_class="kata", idle_model={"enabled": False}, min_warm=1)
        backend = KubernetesBackend(host=fake.url)
        model = ColdStartModel(policy.runtime_classes, min_observations=1)
        ctl = Controller(policy, store, {"kubernetes": backend}, clock=clock, coldstart=model)
        assert ctl.step().status["web"].target_warm == 1  # Kata's pod seed (4.18 s): the rise at 105 s is out of reach
        assert model.estimate(POD, "kata").source == "seed (not measured: no Kata runtime here)"
        (first,) = [name for _, name in fake.pods]
        ctl.step()
        assert model.estimate(POD, "kata").observations == 0  # Pending: nothing to learn yet
        fake.set_ready("demo", first, 20)
        status = ctl.step().status["web"]
        est = model.estimate(POD, "kata")
        assert (est.source, est.observations, est.total_ms[1]) == ("observed", 1, pytest.approx(20_000))
        assert status.target_warm == 4  # 90 s + 20 s now reaches the rise
        for _ in range(2):
            ctl.step()
        assert model.estimate(POD, "kata").observations == 1  # listed Ready again: not again
        others = [name for _, name in fake.pods if name != first]
        assert len(others) == 3
        for name in others:
            fake.set_ready("demo", name, 2)
        ctl.claim("web")  # a claim re-lists the pool too
        ctl.step()
        ctl.step()
        est = model.estimate(POD, "kata")
        assert est.observations == 4 and est.total_ms[0] == pytest.approx(2000)  # 2, 2, 2 and 20 s
        assert model.estimate(CONTAINER, "kata").observations == 0  # the API call is no start

        fresh = ColdStartModel(policy.runtime_classes, min_observations=1)
        restarted = Controller(policy, store, {"kubernetes": backend}, clock=clock, coldstart=fresh)
        for _ in range(2):
            restarted.step()
        assert fresh.estimate(POD, "kata").observations == 0 and len(fake.pods) == 4  # adopted, not learned
    finally:
        fake.stop()


def test_a_cold_started_pod_is_released_after_the_kubelet_updated_its_status(fake, clock):
    """A cold claim's pod record carries its creation's resourceVersion; the kubelet moves it on
    (Running, Ready) before the claimer gives it back. The release must not hinge on it (on the
    real node every such release failed with a 409 and the API answered 500)."""
    ctl, store, backend = controller(fake, clock, demand=0.0)
    claim = ctl.claim("web")
    assert claim.cold_start
    fake.set_ready("demo", claim.container_id, 3)
    got = ctl.release("web", claim.container_id)
    assert got.state == "warm"
    (pod,) = [p for (_, name), p in fake.pods.items() if name == claim.container_id]
    assert pod["metadata"]["labels"]["foresight.dev/state"] == "warm"


def test_a_release_the_api_server_refuses_leaves_the_pod_claimed_and_says_retry(fake, clock, monkeypatch):
    from kubernetes.client.exceptions import ApiException

    from warmpool.claims import ClaimFailed

    ctl, store, backend = controller(fake, clock, demand=0.0)
    claim = ctl.claim("web")

    def refuse(*a, **k):
        raise ApiException(status=500, reason="etcdserver: request timed out")

    monkeypatch.setattr(backend.api, "patch_namespaced_pod", refuse)
    with pytest.raises(ClaimFailed, match="releasing .* failed.*retry"):
        ctl.release("web", claim.container_id)
    assert ctl.describe()["pools"][0]["claimed"] == 1
