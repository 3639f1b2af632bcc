"""The idle-time model: the hazard conditioned on the gap that ended last, and when the
shipped policy lets the idle TTL hold what the model no longer wants."""

import pytest

from tests.warmpool.conftest import make_policy
from warmpool.idlemodel import PoolIdleModel, gap_class
from warmpool.planner import ForesightPolicy
from warmpool.policy import IdleModel
from warmpool.reconcile import PoolObserved

MEM_GB = 0.25


def _pairs(model: PoolIdleModel, n: int, demand: int = 1) -> int:
    """Claims in pairs: 2 bins apart, then 30 bins of silence; returns the last busy bin."""
    b = 0
    for i in range(n):
        model.record(b, demand)
        b += 2 if i % 2 == 0 else 30
    return b - (2 if (n - 1) % 2 == 0 else 30)


@pytest.mark.parametrize("demand", [1, 3])  # one rank (the fast path) and several ranks
def test_the_hazard_follows_the_gap_that_ended_last(demand):
    split = PoolIdleModel(IdleModel())
    plain = PoolIdleModel(IdleModel(previous_gap_weight=0.0))
    last = _pairs(split, 41, demand)  # 41 claims: the last one ended a 30-bin silence
    _pairs(plain, 41, demand)
    assert gap_class(30) > gap_class(2) and split.prev_class[0] == gap_class(30)
    price = 0.5  # cold starts per idle GB-bin: keep a container when P(claim) > ~11%
    # after a silence the next claim comes 2 bins later: both models pre-warm for it
    assert split.keep(last + 2, price, MEM_GB) == demand
    assert plain.keep(last + 2, price, MEM_GB) == demand
    # after a short gap the next claim is 30 bins away: only the split model knows that
    split.record(last + 2, demand)
    plain.record(last + 2, demand)
    assert split.keep(last + 4, price, MEM_GB) == 0
    assert plain.keep(last + 4, price, MEM_GB) == demand  # half its 2-bin offsets saw a claim: it holds in vain
    # and bin 30 after it: the split model holds for the expected claim, with certainty in its class
    assert split.keep(last + 2 + 30, price, MEM_GB) == demand


def test_gap_classes_double():
    assert [gap_class(g) for g in (1, 2, 3, 4, 7, 8, 100, 128, 1440)] == [0, 1, 1, 2, 2, 3, 6, 7, 7]


def test_with_no_forecast_the_models_surplus_goes_at_once_unless_hold_on_ttl():
    for hold, want in ((False, False), (True, True)):
        policy = make_policy(idle_model={"hold_on_ttl": hold})
        fp = ForesightPolicy(policy)
        assert fp.target(policy.pools[0], PoolObserved("web"), None, 1_000_000.0).hold_until_deadline is want
    # with the idle model off, the decaying TTL decides as the seed did
    off = make_policy(idle_model={"enabled": False})
    assert ForesightPolicy(off).target(off.pools[0], PoolObserved("web"), None, 1_000_000.0).hold_until_deadline is True
