import random

import pytest

from warmpool.backends.sim import SimBackend
from warmpool.coldstart import CONTAINER, NODE_MEASURED, POD, START_KINDS, ColdStartModel, RuntimeProfile, seeded_classes
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
    crun, kata = m.estimate("container", "crun"), m.estimate("container", "kata")
    assert crun.source.startswith("seed") and crun.total_ms == pytest.approx((82, 136, 214))
    assert kata.total_ms == pytest.approx((487, 623, 891))
    for i in range(19):
        m.observe("container", "crun", runtime_ms=3, image_ms=1, sandbox_ms=10 + i)
    assert m.estimate("container", "crun").source.startswith("seed")
    m.observe("container", "crun", runtime_ms=3, image_ms=1, sandbox_ms=29)
    est = m.estimate("container", "crun")
    assert est.source == "observed" and est.observations == 20
    assert est.total_ms[0] == pytest.approx(3 + 1 + 19.5)
    assert est.total_ms[0] <= est.total_ms[1] <= est.total_ms[2]
    assert est.components_ms["sandbox"][2] <= 29


def test_partial_observations_feed_components_but_not_the_total():
    m = ColdStartModel(min_observations=1)
    m.observe("container", "runc", image_ms=5, sandbox_ms=40)
    assert m.estimate("container", "runc").source.startswith("seed")
    assert m.estimate("container", "runc").components_ms["sandbox"] == (40.0, 40.0, 40.0)
    with pytest.raises(ValueError):
        m.observe("container", "runc", runtime_ms=-1, image_ms=1, sandbox_ms=1)


def test_sampled_start_latencies_follow_the_model_quantiles():
    m = ColdStartModel()
    rng = random.Random(7)
    xs = sorted(m.sample_ms("container", "kata", rng) for _ in range(4000))
    assert xs[2000] == pytest.approx(487, rel=0.05)
    assert xs[3600] == pytest.approx(623, rel=0.05)


def test_seeds_are_kept_per_kind_of_start_and_kata_is_labelled_a_seed_everywhere():
    m = ColdStartModel()
    assert m.estimate(CONTAINER, "crun").total_ms == pytest.approx((82, 136, 214))
    pod = m.estimate(POD, "crun")
    assert pod.total_ms == pytest.approx((3284, 3693, 4422)) and pod.source == NODE_MEASURED
    assert pod.components_ms == {}  # a pod's start is learned whole
    assert m.estimate(POD, "gvisor").total_ms[1] == pytest.approx(6499)
    assert "gvisor" in seeded_classes(POD) and "gvisor" not in seeded_classes(CONTAINER)
    # a Kata pod was never measured: crun's pod start plus Kata's extra container time over crun's
    assert m.estimate(POD, "kata").total_ms == pytest.approx((3284 + 405, 3693 + 487, 4422 + 677))
    for kind in START_KINDS:
        assert m.estimate(kind, "kata").source == "seed (not measured: no Kata runtime here)"
        assert m.estimate(kind, "kata").as_dict()["source"] == "seed (not measured: no Kata runtime here)"


def test_pod_starts_are_learned_as_totals_apart_from_container_starts():
    m = ColdStartModel(min_observations=3)
    for ms in (5000, 6000, 7000):
        m.observe_total(POD, "crun", ms)
    pod = m.estimate(POD, "crun")
    assert pod.source == "observed" and pod.observations == 3 and pod.total_ms[0] == pytest.approx(6000)
    assert m.estimate(CONTAINER, "crun").total_ms == pytest.approx((82, 136, 214))
    with pytest.raises(ValueError, match="observe_total"):
        m.observe(POD, "crun", sandbox_ms=10)
    with pytest.raises(ValueError, match="start kind"):
        m.estimate("vm", "crun")
    with pytest.raises(ValueError):
        m.observe_total(POD, "crun", float("nan"))


def test_a_policy_profile_seeds_container_starts_and_a_derived_pod_start():
    fast = RuntimeProfile(runtime_ms=(1.0, 2.0, 3.0), image_ms=(1.0, 2.0, 3.0), sandbox_ms=(8.0, 16.0, 24.0))
    m = ColdStartModel({"fast": fast, "kata": fast})
    assert m.estimate(CONTAINER, "fast").total_ms == pytest.approx((10, 20, 30))
    assert m.estimate(CONTAINER, "fast").source == "seed (the policy's runtime_classes)"
    assert m.estimate(POD, "fast").total_ms == pytest.approx((3284 + 10 - 82, 3693 + 20 - 136, 4422 + 30 - 214))
    assert m.estimate(POD, "kata").source == "seed (not measured: no Kata runtime here)"
    assert (POD, "fast") in m.keys() and (CONTAINER, "fast") in m.keys()


def test_the_sim_backend_draws_the_kind_of_start_it_is_told():
    m = ColdStartModel()
    rng = random.Random(3)
    pods = sorted(m.sample_ms(POD, "crun", rng) for _ in range(2000))
    assert pods[1000] == pytest.approx(3284, rel=0.05)
    with pytest.raises(ValueError, match="start_kind"):
        SimBackend(lambda: 0.0, m, start_kind="vm")
