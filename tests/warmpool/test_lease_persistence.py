"""Claim leases survive a controller restart on every backend: the expiry is persisted with the
container (a pod annotation; the crun metadata file), read back by the restarted controller,
and honoured to the second: not freed early, not kept past it. (The sim backend's case is in
test_leases.py.)"""

import json
import subprocess

import pytest

from core.store import MemoryForecastStore
from tests.warmpool.conftest import make_policy
from tests.warmpool.k8s_fake import FakeKubernetes
from warmpool.backends.crun import CrunBackend
from warmpool.backends.kubernetes import LEASE_ANN, KubernetesBackend
from warmpool.controller import Controller

K8S = dict(backend="kubernetes", runtime_class="kata", min_warm=2, lease_seconds=30,
           template={"image": "busybox:1.36", "command": ["sleep", "3600"]})


@pytest.fixture
def fake():
    f = FakeKubernetes().start()
    yield f
    f.stop()


def pod(fake, name):
    return next((p for (ns, n), p in fake.pods.items() if n == name), None)


def test_a_pods_lease_is_an_annotation_that_a_restarted_controller_honours(fake, clock):
    ctl = Controller(make_policy(**K8S), MemoryForecastStore(), {"kubernetes": KubernetesBackend(host=fake.url)}, clock=clock)
    ctl.step()
    a = ctl.claim("web")  # warm
    b = ctl.claim("web")  # the second warm one
    c = ctl.claim("web")  # none left: cold
    assert c.cold_start
    for r in (a, b, c):
        assert float(pod(fake, r.container_id)["metadata"]["annotations"][LEASE_ANN]) == r.lease_expires_at == clock() + 30
    clock.advance(20)
    got = ctl.renew("web", b.container_id)
    assert float(pod(fake, b.container_id)["metadata"]["annotations"][LEASE_ANN]) == got["lease_expires_at"] == clock() + 30
    ctl.release("web", c.container_id)
    assert LEASE_ANN not in pod(fake, c.container_id)["metadata"]["annotations"]  # a warm pod holds no lease

    ctl2 = Controller(make_policy(**K8S), MemoryForecastStore(), {"kubernetes": KubernetesBackend(host=fake.url)}, clock=clock)
    ctl2.step()
    clock.advance(5)
    ctl2.step()  # a: 25 s since its claim, not yet
    assert pod(fake, a.container_id)["metadata"]["labels"]["foresight.dev/state"] == "claimed"
    clock.advance(6)  # a: 31 s since its claim (11 s since the restart): its lease is over
    ctl2.step()
    assert pod(fake, a.container_id) is None and pod(fake, b.container_id) is not None
    assert ctl2.renew("web", b.container_id)["lease_expires_at"] == clock() + 30
    clock.advance(31)
    ctl2.step()
    assert pod(fake, b.container_id) is None


def test_a_claimed_pod_without_a_lease_annotation_gets_one_written_when_adopted(fake, clock):
    ctl = Controller(make_policy(**K8S), MemoryForecastStore(), {"kubernetes": KubernetesBackend(host=fake.url)}, clock=clock)
    ctl.step()
    a = ctl.claim("web")
    del pod(fake, a.container_id)["metadata"]["annotations"][LEASE_ANN]  # claimed by an older controller
    ctl2 = Controller(make_policy(**K8S), MemoryForecastStore(), {"kubernetes": KubernetesBackend(host=fake.url)}, clock=clock)
    clock.advance(100)
    ctl2.step()
    ctl2.step()
    assert float(pod(fake, a.container_id)["metadata"]["annotations"][LEASE_ANN]) == clock() + 30


def test_a_renewal_of_a_pod_released_meanwhile_is_refused(fake, clock):
    from warmpool.backends.base import BackendError

    backend = KubernetesBackend(host=fake.url)
    ctl = Controller(make_policy(**K8S), MemoryForecastStore(), {"kubernetes": backend}, clock=clock)
    ctl.step()
    a = ctl.claim("web")
    stale = ctl._pools["web"].containers[a.container_id]
    ctl.release("web", a.container_id)
    with pytest.raises(BackendError, match="is warm, not claimed"):
        backend.renew(ctl._pools["web"].spec, stale, clock() + 30)


def test_a_crun_containers_lease_is_in_its_metadata_file_and_survives_a_restart(tmp_path, clock, crun_ok):
    backend = CrunBackend(tmp_path / "crun", "crun")
    policy = make_policy(backend="crun", min_warm=1, lease_seconds=30, idle_model={"enabled": False})
    try:
        ctl = Controller(policy, MemoryForecastStore(), {"crun": backend}, clock=clock)
        ctl.step()
        a = ctl.claim("web")
        meta = json.loads((backend.meta / f"{a.container_id}.json").read_text())
        assert meta["state"] == "claimed" and meta["lease_expires_at"] == clock() + 30
        clock.advance(20)
        ctl.renew("web", a.container_id)
        ctl2 = Controller(policy, MemoryForecastStore(), {"crun": CrunBackend(tmp_path / "crun", "crun")}, clock=clock)
        ctl2.step()
        clock.advance(25)  # 45 s after the claim, 25 s after the renewal
        ctl2.step()
        assert a.container_id in backend.container_ids()
        clock.advance(6)
        ctl2.step()
        assert a.container_id not in backend.container_ids()
    finally:
        for cid in backend.container_ids():
            subprocess.run([backend.binary, "--root", str(backend.root), "delete", "-f", cid],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
