"""Claim leases on a fake clock: a claim holds its container for lease_seconds unless renewed;
the reconcile step reclaims an expired one (deleted, or released back per the pool's rule)."""

import httpx
import pytest

from core.errors import ConfigError
from core.store import MemoryForecastStore
from tests.warmpool.conftest import make_policy
from warmpool.api import create_app
from warmpool.backends.sim import SimBackend
from warmpool.controller import Controller, NotClaimed
from warmpool.policy import parse_policy
from warmpool.wiring import HttpServer


def setup(clock, **pool):
    sim = SimBackend(clock, seed=1)
    ctl = Controller(make_policy(min_warm=2, **pool), MemoryForecastStore(), {"sim": sim}, clock=clock)
    ctl.step()
    clock.advance(2.0)
    ctl.step()
    return ctl, sim


def state(sim, cid):
    return {c: s.state for c, s in sim._containers.items()}.get(cid)


def test_an_unrenewed_claim_is_deleted_at_its_lease_and_a_renewed_one_is_kept(clock):
    ctl, sim = setup(clock, lease_seconds=30)
    a = ctl.claim("web")
    b = ctl.claim("web")
    assert a.lease_seconds == 30 and a.lease_expires_at == clock() + 30
    clock.advance(20)
    r = ctl.renew("web", b.container_id)
    assert r["lease_expires_at"] == clock() + 30
    ctl.step()
    assert state(sim, a.container_id) == "claimed"  # 20 s < 30 s: still leased
    clock.advance(15)  # a: 35 s since its claim; b: 15 s since its renewal
    ctl.step()
    assert state(sim, a.container_id) is None and state(sim, b.container_id) == "claimed"
    assert ctl.metrics.registry.get_sample_value("foresight_warmpool_lease_expired_total", {"pool": "web"}) == 1.0
    with pytest.raises(NotClaimed, match="no longer exists"):
        ctl.renew("web", a.container_id)
    with pytest.raises(NotClaimed):
        ctl.release("web", a.container_id)
    ctl.release("web", b.container_id)  # released: no lease left to expire
    clock.advance(100)
    ctl.step()
    assert ctl.metrics.registry.get_sample_value("foresight_warmpool_lease_expired_total", {"pool": "web"}) == 1.0


def test_on_lease_expiry_release_puts_the_container_back_warm(clock):
    ctl, sim = setup(clock, lease_seconds=10, on_lease_expiry="release")
    a = ctl.claim("web")
    clock.advance(11)
    ctl.step()
    assert state(sim, a.container_id) == "warm"
    with pytest.raises(NotClaimed, match="is warm, not claimed"):
        ctl.renew("web", a.container_id)


def test_a_restarted_controller_keeps_each_claims_lease_neither_shorter_nor_longer(clock):
    ctl, sim = setup(clock, lease_seconds=10)
    a = ctl.claim("web")
    b = ctl.claim("web")
    clock.advance(6)
    ctl.renew("web", b.container_id)  # b: until 16 s from now; a: 4 s left
    ctl2 = Controller(ctl.policy, MemoryForecastStore(), {"sim": sim}, clock=clock)  # a restart
    ctl2.step()  # adopts both, with the leases the backend kept
    ctl2.step()
    assert state(sim, a.container_id) == state(sim, b.container_id) == "claimed"
    clock.advance(5)  # a's lease (from its claim) is over, although the restart was 5 s ago
    ctl2.step()
    assert state(sim, a.container_id) is None and state(sim, b.container_id) == "claimed"
    assert ctl2.renew("web", b.container_id)["lease_expires_at"] == clock() + 10  # renewable after the restart
    clock.advance(9)
    ctl2.step()
    assert state(sim, b.container_id) == "claimed"
    clock.advance(2)
    ctl2.step()
    assert state(sim, b.container_id) is None


def test_a_claim_without_a_persisted_lease_gets_one_from_its_adoption_written_back(clock):
    ctl, sim = setup(clock, lease_seconds=10)
    a = ctl.claim("web")
    sim._put(sim._containers[a.container_id].replace(lease_expires_at=None))  # claimed by an older controller
    ctl2 = Controller(ctl.policy, MemoryForecastStore(), {"sim": sim}, clock=clock)
    clock.advance(60)
    ctl2.step()  # adopts a
    ctl2.step()  # leases it from now, and persists that
    assert sim._containers[a.container_id].lease_expires_at == clock() + 10
    ctl3 = Controller(ctl.policy, MemoryForecastStore(), {"sim": sim}, clock=clock)  # restarting again does not extend it
    clock.advance(5)
    ctl3.step()
    ctl3.step()
    assert state(sim, a.container_id) == "claimed"
    clock.advance(6)
    ctl3.step()
    assert state(sim, a.container_id) is None


def test_a_renewal_the_backend_cannot_persist_fails_and_keeps_the_old_lease(clock, monkeypatch):
    from warmpool.backends.base import BackendError
    from warmpool.controller import ClaimFailed

    ctl, sim = setup(clock, lease_seconds=10)
    a = ctl.claim("web")

    def broken(*args, **kw):
        raise BackendError("the API server is unreachable")

    monkeypatch.setattr(sim, "renew", broken)
    clock.advance(5)
    with pytest.raises(ClaimFailed, match="renewing the lease .* unreachable; retry"):
        ctl.renew("web", a.container_id)
    assert sim._containers[a.container_id].lease_expires_at == clock() + 5
    clock.advance(6)
    ctl.step()
    assert state(sim, a.container_id) is None  # the lease the backend holds is the one that counts


def test_renew_over_http(clock):
    ctl, sim = setup(clock, lease_seconds=30)
    srv = HttpServer(create_app(ctl), "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{srv.port}"
    try:
        with httpx.Client(timeout=10) as c:
            got = c.post(f"{url}/api/v1/pools/web/claim").json()
            assert got["lease_seconds"] == 30 and got["lease_expires_at"] == clock() + 30
            clock.advance(25)
            r = c.post(f"{url}/api/v1/pools/web/renew", json={"container_id": got["container_id"]})
            assert r.status_code == 200 and r.json()["lease_expires_at"] == clock() + 30
            assert c.post(f"{url}/api/v1/pools/web/renew", json={}).status_code == 422
            assert c.post(f"{url}/api/v1/pools/nope/renew", json={"container_id": "x"}).status_code == 404
            clock.advance(31)
            ctl.step()
            r = c.post(f"{url}/api/v1/pools/web/renew", json={"container_id": got["container_id"]})
            assert r.status_code == 409 and "claim again" in r.json()["detail"]
    finally:
        srv.stop()


def test_lease_settings_default_and_are_checked_with_their_paths():
    doc = lambda **kw: {"apiVersion": "foresight/v1alpha1", "kind": "WarmPoolPolicy",  # noqa: E731
                        "pools": [{"name": "web", "workload": {"namespace": "demo", "name": "web"}, **kw}]}
    p = parse_policy(doc()).pools[0]
    assert (p.lease_seconds, p.on_lease_expiry) == (300.0, "delete")
    with pytest.raises(ConfigError) as ei:
        parse_policy(doc(lease_seconds=0, on_lease_expiry="keep"))
    text = "\n".join(ei.value.problems)
    assert "pools[web].lease_seconds" in text and "pools[web].on_lease_expiry" in text and "delete, release" in text
