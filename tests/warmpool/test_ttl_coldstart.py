import random

import pytest

from warmpool.coldstart import ColdStartModel
from warmpool.ttl import DecayState, IdleTTL


def test_idle_ttl_decays_15_percent_per_unused_expiry_round():
    ttl = IdleTTL(120, 0.15, 0)
    s = DecayState()
    handed = []
    for _ in range(4):
        handed.append(round(ttl.ttl(s.k), 3))
        s = s.on_expired_unused()
    assert handed == [120.0, 102.0, 86.7, 73.695]


def test_a_cold_start_resets_the_decay_and_a_warm_claim_keeps_it():
    ttl = IdleTTL(120, 0.15, 0)
    s = DecayState().on_expired_unused(3)
    assert s.on_warm_claim().k == 3
    assert ttl.ttl(s.on_cold_start().k) == 120.0


def test_the_ttl_never_goes_below_its_floor_and_deadlines_are_fixed_when_idle_starts():
    ttl = IdleTTL(120, 0.15, 60)
    assert ttl.ttl(50) == 60.0
    s = DecayState(2)
    assert s.deadline(ttl, 1000.0) == pytest.approx(1000.0 + 120 * 0.85**2)


def test_cold_start_model_serves_the_seed_until_enough_starts_are_seen():
    m = ColdStartModel(min_observations=20)
    crun, kata = m.estimate("crun"), m.estimate("kata")
    assert crun.source == "seed" and crun.total_ms == pytest.approx((82, 136, 214))
    assert kata.total_ms == pytest.approx((487, 623, 891))
    for i in range(19):
        m.observe("crun", runtime_ms=3, image_ms=1, sandbox_ms=10 + i)
    assert m.estimate("crun").source == "seed"
    m.observe("crun", runtime_ms=3, image_ms=1, sandbox_ms=29)
    est = m.estimate("crun")
    assert est.source == "observed" and est.observations == 20
    assert est.total_ms[0] == pytest.approx(3 + 1 + 19.5)
    assert est.total_ms[0] <= est.total_ms[1] <= est.total_ms[2]
    assert est.components_ms["sandbox"][2] <= 29


def test_partial_observations_feed_components_but_not_the_total():
    m = ColdStartModel(min_observations=1)
    m.observe("runc", image_ms=5, sandbox_ms=40)
    assert m.estimate("runc").source == "seed"
    assert m.estimate("runc").components_ms["sandbox"] == (40.0, 40.0, 40.0)
    with pytest.raises(ValueError):
        m.observe("runc", runtime_ms=-1, image_ms=1, sandbox_ms=1)


def test_sampled_start_latencies_follow_the_model_quantiles():
    m = ColdStartModel()
    rng = random.Random(7)
    xs = sorted(m.sample_ms("kata", rng) for _ in range(4000))
    assert xs[2000] == pytest.approx(487, rel=0.05)
    assert xs[3600] == pytest.approx(623, rel=0.05)
