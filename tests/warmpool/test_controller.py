"""The runner around reconcile_once, on the sim backend with a fake clock."""

import pytest
import yaml

from core.store import MemoryForecastStore, make_forecast
from tests.warmpool.conftest import make_policy
from warmpool.backends.sim import SimBackend
from warmpool.controller import Controller, NotClaimed, NoWarmContainer, PolicyWatcher, UnknownPool


def publish(store, clock, values):
    store.publish(make_forecast("demo/web", origin=clock(), step_seconds=60, mean=values, quantiles={"p90": values}, model="t", generated_at=clock()))


def setup(clock, **pool):
    policy = make_policy(**pool)
    store = MemoryForecastStore()
    sim = SimBackend(clock, seed=1)
    ctl = Controller(policy, store, {"sim": sim}, clock=clock)
    return ctl, store, sim


def sample(ctl, name, **labels):
    v = ctl.metrics.registry.get_sample_value(name, labels)
    return 0.0 if v is None else v


def settle(ctl, clock):
    ctl.step()
    clock.advance(2.0)  # sim containers are warm after their sampled start latency (< 1.1 s)
    ctl.step()


def test_the_controller_prewarms_the_forecast_target_and_claims_hand_them_out(clock):
    ctl, store, sim = setup(clock)
    publish(store, clock, [3.0])
    settle(ctl, clock)
    d = ctl.describe()["pools"][0]
    assert (d["warm"], d["target_warm"]) == (3, 3)
    r = ctl.claim("web")
    assert not r.cold_start and r.endpoint.startswith("sim://")
    assert ctl.describe()["pools"][0]["claimed"] == 1
    assert sample(ctl, "foresight_warmpool_claims_total", pool="web", result="warm") == 1


def test_idle_containers_expire_on_the_decaying_ttl_and_a_cold_start_resets_it(clock):
    ctl, store, sim = setup(clock)
    publish(store, clock, [2.0])
    settle(ctl, clock)
    publish(store, clock, [0.0])
    clock.advance(117.0)  # 119 s after creation
    ctl.step()
    assert ctl.describe()["pools"][0]["warm"] == 2  # deadline 120 s after they became warm
    clock.advance(2.0)
    ctl.step()
    d = ctl.describe()["pools"][0]
    assert d["warm"] == 0 and d["ttl_decay_k"] == 2
    assert d["next_idle_ttl_seconds"] == pytest.approx(120 * 0.85**2)
    assert sample(ctl, "foresight_warmpool_expired_unused_total", pool="web") == 2
    assert sample(ctl, "foresight_warmpool_wasted_container_seconds_total", pool="web") >= 2 * 119
    r = ctl.claim("web")
    assert r.cold_start
    assert ctl.describe()["pools"][0]["ttl_decay_k"] == 0
    assert sample(ctl, "foresight_warmpool_cold_starts_total", pool="web") == 1


def test_a_released_container_ages_on_the_ttl_of_the_moment(clock):
    ctl, store, sim = setup(clock, min_warm=1)
    settle(ctl, clock)
    r = ctl.claim("web")
    clock.advance(30)
    c = ctl.release("web", r.container_id)
    assert c.state == "warm" and c.deadline == pytest.approx(clock() + 120)
    with pytest.raises(NotClaimed):
        ctl.release("web", r.container_id)
    with pytest.raises(UnknownPool):
        ctl.claim("nope")


def test_with_nothing_warm_a_claim_can_refuse_instead_of_starting_cold(clock):
    ctl, store, sim = setup(clock)
    with pytest.raises(NoWarmContainer):
        ctl.claim("web", allow_cold=False)


def test_creation_failures_back_off_exponentially_mark_the_pool_degraded_and_leak_nothing(clock):
    ctl, store, sim = setup(clock)
    publish(store, clock, [2.0])
    sim.fail_creates(3, "image not found: busybox:nope")
    attempts = []
    for _ in range(20):
        before = sample(ctl, "foresight_warmpool_creation_failures_total", pool="web")
        ctl.step()
        if sample(ctl, "foresight_warmpool_creation_failures_total", pool="web") > before:
            attempts.append(clock())
        clock.advance(0.5)
    # retries after 1 s, then 2 s, then 4 s
    assert [round(b - a, 1) for a, b in zip(attempts, attempts[1:])] == [1.0, 2.0]
    d = ctl.describe()["pools"][0]
    assert d["degraded"] is False and d["warm"] + d["creating"] == 2
    assert len(sim.container_ids()) == 2


def test_a_pool_reports_degraded_while_creation_keeps_failing(clock):
    ctl, store, sim = setup(clock)
    publish(store, clock, [1.0])
    sim.fail_creates(100)
    ctl.step()
    d = ctl.describe()["pools"][0]
    assert d["degraded"] and ctl.metrics.registry.get_sample_value("foresight_warmpool_degraded", {"pool": "web"}) == 1
    assert sim.container_ids() == []


def test_a_dead_warm_container_is_detected_and_replaced(clock):
    ctl, store, sim = setup(clock)
    publish(store, clock, [2.0])
    settle(ctl, clock)
    victim = sim.container_ids()[0]
    sim.kill(victim)
    ctl.step()
    ids = sim.container_ids()
    assert victim not in ids and len(ids) == 2
    assert sample(ctl, "foresight_warmpool_dead_replaced_total", pool="web") == 1


def test_a_policy_reload_keeps_the_warm_containers_and_a_broken_file_keeps_the_old_policy(clock, tmp_path):
    ctl, store, sim = setup(clock)
    publish(store, clock, [2.0])
    settle(ctl, clock)
    before = sim.container_ids()
    doc = {
        "apiVersion": "foresight/v1alpha1", "kind": "WarmPoolPolicy",
        "pools": [{"name": "web", "workload": {"namespace": "demo", "name": "web"}, "backend": "sim", "max_warm": 5, "lead_seconds": 30}],
    }
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    w = PolicyWatcher(tmp_path / "p.yaml")
    doc["pools"][0]["max_warm"] = 6
    path.write_text(yaml.safe_dump(doc))
    assert w.check(ctl)
    ctl.step()
    assert ctl.policy.pools[0].max_warm == 6 and sim.container_ids() == before
    doc["pools"][0]["max_warm"] = -1
    path.write_text(yaml.safe_dump(doc))
    assert not w.check(ctl)
    assert "max_warm" in ctl.policy_error and ctl.policy.pools[0].max_warm == 6


def test_the_cold_start_model_is_exported_as_metrics(clock):
    ctl, store, sim = setup(clock)
    ctl.step()
    assert sample(ctl, "foresight_warmpool_cold_start_model_seconds", start="container", runtime_class="crun", component="total", quantile="p90") == pytest.approx(0.136)


def test_claims_racing_with_expiry_never_get_a_container_that_is_being_deleted(clock):
    import threading

    ctl, store, sim = setup(clock, max_warm=40)
    publish(store, clock, [40.0])
    settle(ctl, clock)
    publish(store, clock, [0.0])
    clock.advance(500)  # every warm container is past its deadline
    got, errors = [], []
    start = threading.Barrier(9)

    def claimer():
        start.wait()
        for _ in range(5):
            try:
                got.append(ctl.claim("web", allow_cold=False).container_id)
            except NoWarmContainer:
                pass
            except Exception as exc:  # noqa: BLE001 - any other failure is the bug
                errors.append(exc)

    threads = [threading.Thread(target=claimer) for _ in range(8)]
    for t in threads:
        t.start()
    start.wait()
    ctl.step()
    for t in threads:
        t.join()
    alive = set(sim.container_ids())
    assert not errors and len(got) == len(set(got))
    assert set(got) <= alive  # nothing handed out was deleted under the claimer
    assert ctl.describe()["pools"][0]["warm"] == 0 and len(alive) == len(got)


def test_the_demand_meter_reports_each_closed_bin_once_with_its_peak_and_idle_containers():
    from warmpool.demand import DemandMeter
    from warmpool.reconcile import BinUsage

    m = DemandMeter(60.0)
    assert m.drain(600.0) == []
    m.ready_at_round(3)
    m.claimed(602.0, warm=True)
    m.claimed(603.0, warm=True)
    m.released(610.0)
    m.claimed(611.0, warm=False)  # peak 2 at once, 2 warm claims: 1 of the 3 ready stayed idle
    m.ready_at_round(9)  # only a bin's first round counts
    assert m.drain(659.0) == []
    assert m.drain(720.0) == [BinUsage(10, 2, 1), BinUsage(11, 2, 0)]  # bin 11: still 2 held, no round saw it
    assert m.drain(779.0) == []


def test_the_controller_hands_its_policy_the_demand_its_claims_made(clock):
    ctl, store, sim = setup(clock)
    seen = []
    real = ctl.warm_policy.record
    ctl.warm_policy.record = lambda spec, usage: (seen.append(usage), real(spec, usage))
    clock.t = 60.0 * 1000
    ctl.step()
    got = [ctl.claim("web") for _ in range(3)]
    clock.advance(30)
    for r in got:
        ctl.release("web", r.container_id)
    clock.advance(30)
    ctl.step()
    assert [(u.index, u.demand) for u in seen] == [(1000, 3)]
    assert ctl.warm_policy._pools["web"].model.seen


def test_a_pool_claimed_every_five_minutes_learns_to_pre_warm_and_to_hold_nothing_in_between(clock):
    import dataclasses

    from warmpool.policy import MemoryBudget

    # a fixed 10-minute keep-alive would hold this pool all the time; allow 30% of that. A light
    # prior (1 idle period, not the default 10) lets one day of claims outweigh it.
    light = {"prior_power": 1.5, "prior_weight": 1.0}
    policy = dataclasses.replace(make_policy(template={"resources": {"memory": "64Mi"}}, idle_model=light), memory_budget=MemoryBudget(0.3, 600))
    ctl = Controller(policy, MemoryForecastStore(), {"sim": SimBackend(clock, seed=1)}, clock=clock)
    clock.t = 60.0 * 100_000
    cold, held = [], []
    for minute in range(24 * 60):
        ctl.step()
        d = ctl.describe()["pools"][0]
        held.append(d["warm"] + d["creating"])
        if minute % 5 == 0:
            clock.advance(2)
            r = ctl.claim("web")
            cold.append(r.cold_start)
            clock.advance(57)
            ctl.release("web", r.container_id)
            clock.advance(1)
        else:
            clock.advance(60)
    late = slice(len(cold) // 2, None)
    assert sum(cold[late]) == 0  # the second half of the day: every claim found a warm container
    # and once the price has followed the budget down, it holds a container only in the
    # minute of each claim (pre-warmed at that minute's round)
    assert held[-60:] == [1, 0, 0, 0, 0] * 12


def test_a_controller_started_with_no_pools_builds_the_backend_a_reloaded_policy_names(tmp_path):
    """The chart's controller starts before any WarmPool exists: its first policy names no backend."""
    from warmpool.policy import parse_policy
    from warmpool.wiring import build_backends

    empty = parse_policy({"apiVersion": "foresight/v1alpha1", "kind": "WarmPoolPolicy", "pools": []})
    backends = build_backends(empty, tmp_path)
    assert list(backends) == []
    ctl = Controller(empty, MemoryForecastStore(), backends)
    ctl.set_policy(make_policy(min_warm=2))  # the operator wrote a pool on the sim backend
    ctl.step()
    assert list(backends) == ["sim"] and ctl.describe()["pools"][0]["warm"] + ctl.describe()["pools"][0]["creating"] == 2


def test_a_backend_that_cannot_run_here_fails_its_pools_creations_and_claims_not_the_round(tmp_path):
    from core.errors import UserError
    from warmpool.claims import ClaimFailed
    from warmpool.policy import parse_policy
    from warmpool.wiring import Backends

    def make(name):
        if name == "kubernetes":
            raise UserError("backend kubernetes: no cluster credentials here")
        return SimBackend(lambda: 1_700_000_000.0)

    pools = [{"name": n, "workload": {"namespace": "demo", "name": n}, "backend": b, "min_warm": 1, "max_warm": 2,
              "idle_ttl": {"initial_seconds": 120, "decay": 0.15}} for n, b in (("sim-pool", "sim"), ("k8s-pool", "kubernetes"))]
    policy = parse_policy({"apiVersion": "foresight/v1alpha1", "kind": "WarmPoolPolicy", "pools": pools})
    ctl = Controller(policy, MemoryForecastStore(), Backends(make), clock=lambda: 1_700_000_000.0)
    ctl.step()  # the kubernetes pool's failure does not stop the sim pool's round
    view = {p["pool"]: p for p in ctl.describe()["pools"]}
    assert view["sim-pool"]["warm"] + view["sim-pool"]["creating"] == 1
    assert view["k8s-pool"]["degraded"] and view["k8s-pool"]["warm"] == 0
    with pytest.raises(ClaimFailed, match="no cluster credentials"):
        ctl.claim("k8s-pool")
