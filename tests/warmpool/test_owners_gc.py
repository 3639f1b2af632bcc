"""ownerReferences on warm pods, and garbage collection of pods whose pool left the policy
(kubernetes backend against the boundary fake over real HTTP; the sim backend for claims)."""

import pytest

from core.store import MemoryForecastStore
from tests.warmpool.conftest import make_policy
from tests.warmpool.k8s_fake import FakeKubernetes
from warmpool.backends.kubernetes import KubernetesBackend, Owner
from warmpool.backends.sim import SimBackend
from warmpool.controller import Controller, ControllerSettings

K8S_POOL = dict(backend="kubernetes", runtime_class="kata", min_warm=2,
                template={"image": "busybox:1.36", "command": ["sleep", "3600"]})


@pytest.fixture
def fake():
    f = FakeKubernetes().start()
    f.objects[("apps/v1", "demo", "deployments", "foresight-warmpool")] = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "foresight-warmpool", "namespace": "demo", "uid": "dep-uid-1"}}
    yield f
    f.stop()


def test_warm_and_cold_pods_are_owned_by_the_controllers_deployment(fake, clock):
    owner = Owner("apps/v1", "Deployment", "foresight-warmpool", "demo")
    backend = KubernetesBackend(host=fake.url, owner=owner)
    ctl = Controller(make_policy(**K8S_POOL), MemoryForecastStore(), {"kubernetes": backend}, clock=clock)
    ctl.step()
    ctl.claim("web")
    ctl.claim("web")
    ctl.claim("web")  # the third starts cold
    assert len(fake.pods) == 3
    for pod in fake.pods.values():
        assert pod["metadata"]["ownerReferences"] == [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "foresight-warmpool",
                                                       "uid": "dep-uid-1", "controller": True, "blockOwnerDeletion": False}]
    gets = [p for m, p in fake.requests if m == "GET" and "deployments" in p]
    assert len(gets) == 1  # the uid is read once


def test_pods_in_another_namespace_name_their_owner_in_an_annotation_instead(fake, clock):
    backend = KubernetesBackend(host=fake.url, owner=Owner("apps/v1", "Deployment", "foresight-warmpool", "foresight", uid="u"))
    ctl = Controller(make_policy(**K8S_POOL), MemoryForecastStore(), {"kubernetes": backend}, clock=clock)
    ctl.step()
    for pod in fake.pods.values():
        assert "ownerReferences" not in pod["metadata"]  # cross-namespace owners are invalid in Kubernetes
        assert pod["metadata"]["annotations"]["foresight.dev/owner"] == "Deployment/foresight-warmpool in foresight"


def test_an_unreadable_owner_fails_the_create_and_the_pool_backs_off(fake, clock):
    backend = KubernetesBackend(host=fake.url, owner=Owner("apps/v1", "Deployment", "missing", "demo"))
    ctl = Controller(make_policy(**K8S_POOL), MemoryForecastStore(), {"kubernetes": backend}, clock=clock)
    ctl.step()
    ctl.step()  # the next round reports the failure (backing off)
    d = ctl.describe()["pools"][0]
    assert fake.pods == {} and d["degraded"] and "owner Deployment/missing in demo cannot be read" in d["reason"]


def test_pods_of_a_pool_removed_while_the_controller_was_down_are_collected(fake, clock):
    other = KubernetesBackend(host=fake.url)  # another controller (no owner) with a pool "batch"
    Controller(make_policy(**{**K8S_POOL, "name": "batch", "min_warm": 1}), MemoryForecastStore(), {"kubernetes": other}, clock=clock).step()
    elsewhere = KubernetesBackend(host=fake.url, owner=Owner("apps/v1", "Deployment", "foresight-warmpool", "foresight", uid="u2"))
    Controller(make_policy(**{**K8S_POOL, "name": "jobs", "min_warm": 1, "workload": {"namespace": "jobs", "name": "jobs"}}),
               MemoryForecastStore(), {"kubernetes": elsewhere}, clock=clock).step()
    owner = Owner("apps/v1", "Deployment", "foresight-warmpool", "demo")
    backend = KubernetesBackend(host=fake.url, owner=owner)
    ctl = Controller(make_policy(**K8S_POOL), MemoryForecastStore(), {"kubernetes": backend}, clock=clock)
    ctl.step()
    ctl.claim("web")
    assert len(fake.pods) == 4
    # restart with a policy that no longer has "web"
    settings = ControllerSettings(orphan_gc_interval_seconds=60, orphan_claimed_grace_seconds=300)
    ctl2 = Controller(make_policy(**{**K8S_POOL, "name": "api", "min_warm": 1}), MemoryForecastStore(), {"kubernetes": KubernetesBackend(host=fake.url, owner=owner)},
                      clock=clock, settings=settings)
    ctl2.step()
    pools = {p["metadata"]["labels"]["foresight.dev/pool"] + "/" + p["metadata"]["labels"]["foresight.dev/state"] for p in fake.pods.values()}
    # the warm orphan went; the claimed one has its grace; other controllers' pods are not ours
    assert pools == {"api/warm", "web/claimed", "batch/warm", "jobs/warm"}
    clock.advance(200)
    ctl2.step()
    assert len(fake.pods) == 4  # not yet 300 s, and the next search waits 60 s anyway
    fresh = KubernetesBackend(host=fake.url, owner=owner)  # resolves its owner's uid to recognise its pods
    assert [(ns, c.pool, c.state) for ns, c in fresh.list_orphans({"api"})] == [("demo", "web", "claimed")]
    clock.advance(101)
    ctl2.step()
    assert {p["metadata"]["labels"]["foresight.dev/pool"] for p in fake.pods.values()} == {"api", "batch", "jobs"}
    # the controller owning "jobs" (annotated: its pods live outside its namespace) collects it once "jobs" is removed
    Controller(make_policy(**{**K8S_POOL, "name": "api", "min_warm": 1}), MemoryForecastStore(), {"kubernetes": elsewhere}, clock=clock).step()
    assert {p["metadata"]["labels"]["foresight.dev/pool"] for p in fake.pods.values()} == {"api", "batch"}
    assert ctl2.metrics.registry.get_sample_value("foresight_warmpool_orphans_deleted_total", {"pool": "web"}) == 2.0


def test_a_pool_removed_by_a_reload_loses_its_warm_containers_and_its_claims_at_their_lease(clock):
    sim = SimBackend(clock, seed=1)
    ctl = Controller(make_policy(min_warm=2, lease_seconds=30, on_lease_expiry="release"), MemoryForecastStore(), {"sim": sim}, clock=clock)
    ctl.step()
    clock.advance(2)
    ctl.step()
    held = ctl.claim("web")
    ctl.set_policy(make_policy(name="api", min_warm=0))
    ctl.step()
    assert sim.container_ids() == [held.container_id]
    clock.advance(31)
    ctl.step()  # a removed pool's expired claim is deleted, never released back
    assert sim.container_ids() == []
