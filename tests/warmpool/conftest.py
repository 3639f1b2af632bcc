"""Fixtures for the warm-pool tests: a policy factory, a fake clock, crun availability."""

from __future__ import annotations

import pytest

from warmpool.policy import parse_policy


class FakeClock:
    def __init__(self, t: float = 1_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock():
    return FakeClock()


def make_policy(**pool):
    base = {
        "name": "web",
        "workload": {"namespace": "demo", "name": "web"},
        "backend": "sim",
        "runtime_class": "crun",
        "min_warm": 0,
        "max_warm": 10,
        "capacity_per_container": 1.0,
        "lead_seconds": 90,
        "idle_ttl": {"initial_seconds": 120, "decay": 0.15},
    }
    base.update(pool)
    return parse_policy({"apiVersion": "foresight/v1alpha1", "kind": "WarmPoolPolicy", "pools": [base]})


@pytest.fixture
def policy_factory():
    return make_policy


@pytest.fixture(scope="session")
def crun_ok():
    from warmpool.backends.crun import probe

    ok, why, _ = probe("crun")
    if not ok:
        pytest.skip(f"real crun containers cannot run here: {why}")
    return why


@pytest.fixture(scope="session")
def runc_ok():
    from warmpool.backends.crun import probe

    ok, why, _ = probe("runc")
    if not ok:
        pytest.skip(f"real runc containers cannot run here: {why}")
    return why
