"""The pure reconcile step: ``reconcile_once(observed, policy, forecasts, now) -> actions``.

No I/O, no clock, no randomness: the same inputs give the same actions, so the controller,
the tests and the replay run exactly this code.

Per pool:
- peak = the largest forecast value (the pool's quantile, else the mean) for the points whose
  interval overlaps [now, now + lead_seconds + T_cold p90], and the last observed demand;
- needed = ceil(peak / capacity_per_container) containers in total;
- target warm = clamp(needed - claimed, min_warm, max_warm)  (no forecast: min_warm);
- warm + creating < target -> Create(target - warm - creating), unless creation is backing
  off after failures (the pool is then reported degraded);
- warm containers past their idle deadline expire (Delete "expired_unused") while more than
  max(target, min_warm) warm containers remain: a container the forecast still wants is not
  surplus, it waits for the forecast to drop;
- dead containers are deleted ("dead") and replaced through the target;
- warm + creating above max_warm: the surplus warm ones go ("excess");
- pools no longer in the policy lose their warm containers ("pool_removed"); claimed ones
  stay with their claimers until released.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from forecaster.store import Forecast
from warmpool.policy import Policy, PoolSpec

STATES = ("creating", "warm", "claimed", "dead")


@dataclass(frozen=True)
class Container:
    id: str
    pool: str
    state: str
    created_at: float
    idle_since: float | None = None
    deadline: float | None = None
    endpoint: str = ""
    claimed_since_idle: bool = False
    version: str = ""  # backend's optimistic-concurrency token (Kubernetes resourceVersion)
    started: bool = False  # its process was started once (a released container keeps running)

    def replace(self, **kw) -> "Container":
        from dataclasses import replace

        return replace(self, **kw)


@dataclass(frozen=True)
class PoolObserved:
    name: str
    containers: tuple[Container, ...] = ()
    decay_k: int = 0
    failures: int = 0  # consecutive creation failures
    retry_at: float = 0.0  # no creation before this time (backoff)
    cold_start_p90_seconds: float = 0.136
    last_error: str = ""


@dataclass(frozen=True)
class Create:
    pool: str
    count: int
    reason: str = ""


@dataclass(frozen=True)
class Delete:
    pool: str
    container_id: str
    reason: str  # expired_unused | dead | excess | pool_removed


@dataclass(frozen=True)
class PoolStatus:
    pool: str
    target_warm: int
    needed: int | None
    peak_demand: float | None
    warm: int
    claimed: int
    creating: int
    degraded: bool
    reason: str = ""


@dataclass(frozen=True)
class Actions:
    creates: tuple[Create, ...] = ()
    deletes: tuple[Delete, ...] = ()
    status: Mapping[str, PoolStatus] = field(default_factory=dict)

    def __iter__(self):
        yield from self.deletes
        yield from self.creates

    def __len__(self) -> int:
        return len(self.creates) + len(self.deletes)


def peak_demand(spec: PoolSpec, forecast: Forecast, now: float, horizon_end: float) -> float:
    """Largest forecast value whose interval (ts - step, ts] overlaps [now, horizon_end],
    together with the last observed demand."""
    values = forecast.quantiles.get(spec.quantile) if spec.quantile != "mean" else None
    if values is None:
        values = forecast.mean
    step = forecast.step_seconds
    peak = 0.0
    for i, v in enumerate(values):
        ts = forecast.origin + (i + 1) * step
        if ts - step <= horizon_end and ts >= now:
            peak = max(peak, v)
    if forecast.observed:
        peak = max(peak, forecast.observed[-1][1])
    return max(0.0, peak)


def _pool_actions(spec: PoolSpec, obs: PoolObserved, forecast: Forecast | None, now: float):
    creates: list[Create] = []
    deletes: list[Delete] = []
    warm = [c for c in obs.containers if c.state == "warm"]
    claimed = [c for c in obs.containers if c.state == "claimed"]
    creating = [c for c in obs.containers if c.state == "creating"]
    for c in obs.containers:
        if c.state == "dead":
            deletes.append(Delete(spec.name, c.id, "dead"))
    reason = ""
    if forecast is None:
        needed = None
        peak = None
        target = spec.min_warm
        reason = f"no forecast for series {spec.series!r}: holding min_warm"
    else:
        horizon_end = now + spec.lead_seconds + obs.cold_start_p90_seconds
        peak = peak_demand(spec, forecast, now, horizon_end)
        needed = int(math.ceil(peak / spec.capacity_per_container - 1e-9))
        target = max(spec.min_warm, min(spec.max_warm, needed - len(claimed)))
    keep = max(target, spec.min_warm)
    # expire idle containers past their deadline, soonest first, down to `keep`
    remaining = len(warm)
    for c in sorted(warm, key=lambda c: (c.deadline if c.deadline is not None else math.inf, c.id)):
        if remaining <= keep:
            break
        if c.deadline is not None and c.deadline <= now:
            deletes.append(Delete(spec.name, c.id, "expired_unused"))
            remaining -= 1
    # above max_warm: drop the surplus (latest deadline first: they are the youngest)
    survivors = [c for c in warm if not any(d.container_id == c.id for d in deletes)]
    surplus = len(survivors) + len(creating) - spec.max_warm
    if surplus > 0:
        for c in sorted(survivors, key=lambda c: (-(c.deadline or 0.0), c.id))[:surplus]:
            deletes.append(Delete(spec.name, c.id, "excess"))
            remaining -= 1
    have = remaining + len(creating)
    degraded = obs.failures > 0
    if have < target:
        if now >= obs.retry_at:
            creates.append(Create(spec.name, target - have, "below target"))
        else:
            reason = (reason + "; " if reason else "") + (
                f"creation failing ({obs.failures} in a row: {obs.last_error}); retry in {obs.retry_at - now:.1f}s"
            )
    if degraded and not reason:
        reason = f"creation failing ({obs.failures} in a row: {obs.last_error})"
    status = PoolStatus(
        pool=spec.name,
        target_warm=target,
        needed=needed,
        peak_demand=peak,
        warm=len(warm),
        claimed=len(claimed),
        creating=len(creating),
        degraded=degraded,
        reason=reason,
    )
    return creates, deletes, status


def reconcile_once(
    observed: Mapping[str, PoolObserved],
    policy: Policy,
    forecasts: Mapping[str, Forecast],
    now: float,
) -> Actions:
    creates: list[Create] = []
    deletes: list[Delete] = []
    status: dict[str, PoolStatus] = {}
    for spec in policy.pools:
        obs = observed.get(spec.name) or PoolObserved(spec.name)
        c, d, s = _pool_actions(spec, obs, forecasts.get(spec.series), now)
        creates += c
        deletes += d
        status[spec.name] = s
    names = {p.name for p in policy.pools}
    for name in sorted(observed):
        if name in names:
            continue
        for c in observed[name].containers:
            if c.state in ("warm", "creating", "dead"):
                deletes.append(Delete(name, c.id, "pool_removed"))
    return Actions(tuple(creates), tuple(deletes), status)
