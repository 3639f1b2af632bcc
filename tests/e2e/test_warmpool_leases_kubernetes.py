"""Claim leases on a real kube-apiserver: the expiry is the pod annotation
``foresight.dev/lease-expires-at`` (set with the claim's label patch, moved by a renewal, removed
by a release), and a restarted controller honours it: the claim ends at its lease, not a lease
after the restart."""

from __future__ import annotations

import pytest

from tests.cluster.controlplane import wait_for
from tests.e2e.test_warmpool_kubernetes import Clock, controller, pods, running, warmpool_kubeconfig  # noqa: F401
from warmpool.backends.kubernetes import LEASE_ANN, STATE_LABEL

pytestmark = [pytest.mark.e2e]


def test_a_claims_lease_is_a_pod_annotation_that_a_restarted_controller_honours(control_plane, warmpool_kubeconfig):  # noqa: F811 - the imported fixture
    clock = Clock()
    ctl, _, _ = controller(warmpool_kubeconfig, clock, "lease1", lease_seconds=30)
    ctl.step()
    running(control_plane, "lease1", 2)
    ctl.step()
    a = ctl.claim("lease1")
    b = ctl.claim("lease1")
    ann = lambda cid: pods(control_plane, "lease1")[cid]["metadata"].get("annotations") or {}  # noqa: E731
    assert float(ann(a.container_id)[LEASE_ANN]) == a.lease_expires_at
    ctl.release("lease1", b.container_id)
    assert LEASE_ANN not in ann(b.container_id)
    clock.advance(10)
    renewed = ctl.renew("lease1", a.container_id)["lease_expires_at"]
    assert float(ann(a.container_id)[LEASE_ANN]) == renewed == clock() + 30

    ctl2, _, _ = controller(warmpool_kubeconfig, clock, "lease1", lease_seconds=30)  # a restart
    ctl2.step()
    clock.advance(25)  # 35 s after the claim, 25 s after the renewal: still leased
    ctl2.step()
    assert pods(control_plane, "lease1")[a.container_id]["metadata"]["labels"][STATE_LABEL] == "claimed"
    clock.advance(6)
    ctl2.step()
    wait_for("the expired claim deleted", lambda: a.container_id not in pods(control_plane, "lease1"), timeout=60)
