"""The pure reconcile step: ``reconcile_once(observed, policy, forecasts, now) -> actions``.

No I/O, no clock, no randomness: the same inputs (and the same policy state) give the same
actions, so the controller, the tests and ``foresight warmpool simulate`` run exactly this code.

``policy`` is a ``WarmPolicy``: it says how many containers each pool wants (``target``) and
learns from what the controller reports (``record`` per closed demand bin, ``end_round``).
The shipped one is ``warmpool.planner.ForesightPolicy``; baselines for the trace benchmark are
in ``warmpool.keepalive``. Per pool, given the policy's ``PoolTarget``:
- target warm = clamp(total - claimed, min_warm, max_warm)  (no total: min_warm);
- warm + creating < target -> Create(target - warm - creating), unless creation is backing
  off after failures (the pool is then reported degraded);
- idle containers beyond max(target, min_warm) expire ("expired_unused"): with
  ``hold_until_deadline`` (the shipped policy) only once past their idle-TTL deadline, soonest
  first; without it (baselines) at once, least recently idle first;
- dead containers are deleted ("dead") and replaced through the target;
- warm + creating above max_warm: the surplus warm ones go ("excess");
- pools no longer in the policy lose their warm containers ("pool_removed"); claimed ones
  stay with their claimers until released.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Protocol, runtime_checkable

from core.store import Forecast
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
    lease_expires_at: float | None = None  # a claim's lease, persisted with it (warmpool.claims)
    start_ms: float | None = None  # its start's duration when the backend learns it after the fact (a pod: create -> Ready)

    def replace(self, **kw) -> "Container":
        """A copy with ``kw`` changed (no re-validation: the fields are plain values, and
        claims on large pools call this for every container)."""
        new = object.__new__(Container)
        new.__dict__.update(self.__dict__)
        new.__dict__.update(kw)
        return new


@dataclass(frozen=True)
class PoolObserved:
    name: str
    containers: tuple[Container, ...] = ()
    decay_k: int = 0
    failures: int = 0  # consecutive creation failures
    retry_at: float = 0.0  # no creation before this time (backoff)
    cold_start_p90_seconds: float = 0.136
    last_error: str = ""
    round_seconds: float = 0.0  # until the controller's next round: what this round starts must cover
    open_demand: int = 0  # most containers claimed at once so far in the current demand bin


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


@dataclass(frozen=True)
class BinUsage:
    """One closed demand bin of a pool, as the controller saw it."""

    index: int  # floor(bin start / idle_model.bin_seconds)
    demand: int  # most containers claimed at once during the bin
    idle: int  # containers ready at the bin's first round that no claim used during it


@dataclass(frozen=True)
class PoolTarget:
    total: int | None  # containers wanted in all, claimed ones included; None: min_warm only
    needed: int | None = None  # what the forecast alone asks for
    peak_demand: float | None = None
    hold_until_deadline: bool = True  # idle surplus waits for its idle-TTL deadline
    reason: str = ""


@runtime_checkable
class WarmPolicy(Protocol):
    """Decides how many containers each pool holds. The controller's reconcile step (and with
    it ``foresight warmpool simulate`` and bench/warmpool_trace.py) calls nothing else."""

    name: str
    config: Policy  # the pools it decides for

    def configure(self, config: Policy) -> None:
        """The pools changed (policy reload); what was learned about remaining pools stays."""

    def record(self, spec: PoolSpec, usage: BinUsage) -> None:
        """Learn one closed demand bin of a pool (only the past reaches a policy)."""

    def end_round(self) -> None:
        """Every pool has recorded its closed bins of this round (shared state moves here)."""

    def target(self, spec: PoolSpec, obs: "PoolObserved", forecast: Forecast | None, now: float,
               request_rate: Forecast | None = None) -> PoolTarget:
        """What the pool should hold now. Reads state, changes nothing. ``forecast`` is the
        pool's ``series`` (None with ``demand: requests``), ``request_rate`` its predicted
        request rate (only with ``demand: requests`` or ``both``)."""


def peak_demand(spec: PoolSpec, forecast: Forecast, now: float, horizon_end: float) -> float:
    """The demand the HPA will be served over [now, horizon_end]: the served-value rule
    (``forecaster.served.served_cores``: the published serving policy's prediction, observed
    floor and headroom; the observed value when the forecast is stale or its policy refused)
    with the pool's window as its lead, so a pool is warm for the pods the HPA asks for.
    ``spec.quantile`` applies where the forecast carries no policy. 0 when nothing can be served."""
    from forecaster.served import MetricSettings, NoData, served_cores

    try:
        settings = MetricSettings(lead_seconds=max(0.0, float(horizon_end) - float(now)), quantile=spec.quantile)
        return max(0.0, served_cores(forecast, now, settings).value)
    except NoData:
        return 0.0


def forecast_need(spec: PoolSpec, obs: "PoolObserved", forecast: Forecast | None, now: float) -> tuple[int | None, float | None]:
    """(containers needed in all, peak demand) from the forecast over [now, now + lead +
    T_cold p90]; (None, None) without a forecast."""
    if forecast is None:
        return None, None
    peak = peak_demand(spec, forecast, now, now + spec.lead_seconds + obs.cold_start_p90_seconds)
    return int(math.ceil(peak / spec.capacity_per_container - 1e-9)), peak


def _expiries(spec: PoolSpec, warm: list[Container], keep: int, hold: bool, now: float) -> list[Delete]:
    out: list[Delete] = []
    if len(warm) <= keep:
        return out
    if not hold:
        order = sorted(warm, key=lambda c: (c.idle_since if c.idle_since is not None else -math.inf, c.id))
        return [Delete(spec.name, c.id, "expired_unused") for c in order[: len(warm) - keep]]
    remaining = len(warm)
    for c in sorted(warm, key=lambda c: (c.deadline if c.deadline is not None else math.inf, c.id)):
        if remaining <= keep:
            break
        if c.deadline is not None and c.deadline <= now:
            out.append(Delete(spec.name, c.id, "expired_unused"))
            remaining -= 1
    return out


def _pool_actions(spec: PoolSpec, obs: PoolObserved, want: PoolTarget, now: float):
    creates: list[Create] = []
    deletes: list[Delete] = []
    warm = [c for c in obs.containers if c.state == "warm"]
    claimed = [c for c in obs.containers if c.state == "claimed"]
    creating = [c for c in obs.containers if c.state == "creating"]
    for c in obs.containers:
        if c.state == "dead":
            deletes.append(Delete(spec.name, c.id, "dead"))
    reason = want.reason
    if want.total is None:
        target = spec.min_warm
    else:
        target = max(spec.min_warm, min(spec.max_warm, want.total - len(claimed)))
    expired = _expiries(spec, warm, max(target, spec.min_warm), want.hold_until_deadline, now)
    deletes += expired
    gone = {d.container_id for d in expired}
    remaining = len(warm) - len(gone)
    # above max_warm: drop the surplus (latest deadline first: they are the youngest)
    survivors = [c for c in warm if c.id not in gone]
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
    if degraded and "creation failing" not in reason:
        reason = (reason + "; " if reason else "") + f"creation failing ({obs.failures} in a row: {obs.last_error})"
    status = PoolStatus(
        pool=spec.name,
        target_warm=target,
        needed=want.needed,
        peak_demand=want.peak_demand,
        warm=len(warm),
        claimed=len(claimed),
        creating=len(creating),
        degraded=degraded,
        reason=reason,
    )
    return creates, deletes, status


def reconcile_once(
    observed: Mapping[str, PoolObserved],
    policy: WarmPolicy,
    forecasts: Mapping[str, Forecast],
    now: float,
) -> Actions:
    creates: list[Create] = []
    deletes: list[Delete] = []
    status: dict[str, PoolStatus] = {}
    for spec in policy.config.pools:
        obs = observed.get(spec.name) or PoolObserved(spec.name)
        rate = forecasts.get(spec.request_rate.series) if spec.request_rate is not None and spec.demand != "cpu" else None
        cpu = forecasts.get(spec.series) if spec.demand != "requests" else None
        want = policy.target(spec, obs, cpu, now, request_rate=rate)
        c, d, s = _pool_actions(spec, obs, want, now)
        creates += c
        deletes += d
        status[spec.name] = s
    names = {p.name for p in policy.config.pools}
    for name in sorted(observed):
        if name in names:
            continue
        for c in observed[name].containers:
            if c.state in ("warm", "creating", "dead"):
                deletes.append(Delete(name, c.id, "pool_removed"))
    return Actions(tuple(creates), tuple(deletes), status)
