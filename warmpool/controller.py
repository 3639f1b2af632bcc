"""The thin runner around ``reconcile_once``: observe -> decide (pure) -> apply, with the
clock injected; plus claim/release, metrics (``warmpool.metrics``), policy reload
(``warmpool.watcher``) and what the cold-start model learns of its starts (``warmpool.starts``).

State lives in the backend (``Backend.list``), so a restarted controller adopts what exists.
The controller's memory only adds what is in flight (containers being claimed right now), the
pool counters (TTL decay ``k``, creation failures and backoff) and what the policy learned.

Each round the controller first hands the policy every demand bin that closed since the last
round (``WarmPolicy.record``, from its ``DemandMeter``s), then asks it for targets through
``reconcile_once``. The policy is ``warmpool.planner.ForesightPolicy`` unless another
``WarmPolicy`` is injected (the trace benchmark's baselines).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Mapping

from core.errors import UserError
from core.store import Forecast, ForecastStore, StoreError
from warmpool.backends.base import Backend, BackendError, CreateError
from warmpool.claims import ClaimFailed, ClaimResult, Claims, ColdLimited, NotClaimed, NoWarmContainer, UnknownPool
from warmpool.coldstart import ColdStartModel
from warmpool.demand import DemandMeter
from warmpool.metrics import Metrics
from warmpool.planner import ForesightPolicy
from warmpool.policy import Policy, PoolSpec
from warmpool.reconcile import Actions, Container, PoolObserved, PoolStatus, WarmPolicy, reconcile_once
from warmpool.starts import Starts
from warmpool.ttl import DecayState
from warmpool.watcher import PolicyWatcher

__all__ = ["Controller", "ControllerSettings", "ClaimResult", "PolicyWatcher", "UnknownPool", "NoWarmContainer", "ClaimFailed", "NotClaimed", "ColdLimited"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ControllerSettings:
    reconcile_interval_seconds: float = 5.0
    backoff_initial_seconds: float = 1.0
    backoff_max_seconds: float = 60.0
    orphan_gc_interval_seconds: float = 60.0  # how often backends are searched for pods of removed pools
    orphan_claimed_grace_seconds: float = 300.0  # a claimed orphan is deleted this long after it is first seen


@dataclass
class _PoolState:
    spec: PoolSpec
    containers: dict[str, Container] = field(default_factory=dict)
    decay: DecayState = field(default_factory=DecayState)
    failures: int = 0
    retry_at: float = 0.0
    last_error: str = ""
    claiming: set[str] = field(default_factory=set)
    touched: set[str] = field(default_factory=set)
    status: PoolStatus | None = None
    meter: DemandMeter | None = None
    # claimable containers, latest deadline first; rebuilt when containers became warm, so a
    # burst of claims on a large pool costs O(n log n) once, not O(n) per claim
    cands: list[Container] | None = None
    has_creating: bool = False
    cold_window: deque = field(default_factory=deque)  # times of recent cold starts (max_cold_per_minute)
    leases: dict[str, float] = field(default_factory=dict)  # claimed container -> lease expiry
    # containers this controller started whose start the backend has not reported yet (a pod's
    # is known once it is Ready); each start is recorded once, and adopted ones never
    starting: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.meter is None:
            self.meter = DemandMeter(self.spec.idle_model.bin_seconds)


class Controller(Claims, Starts):
    def __init__(
        self,
        policy: Policy,
        store: ForecastStore | None,
        backends: Mapping[str, Backend] | Callable[[PoolSpec], Backend],
        clock: Callable[[], float] = time.time,
        settings: ControllerSettings | None = None,
        coldstart: ColdStartModel | None = None,
        registry=None,
        warm_policy: WarmPolicy | None = None,
    ):
        self.policy = policy
        self.warm_policy: WarmPolicy = warm_policy if warm_policy is not None else ForesightPolicy(policy)
        self.store = store
        self._backends = backends
        self.clock = clock
        self.settings = settings or ControllerSettings()
        self.coldstart = coldstart or ColdStartModel(policy.runtime_classes)
        self.metrics = Metrics(registry)
        self._lock = threading.RLock()
        self._step_lock = threading.Lock()
        self._pools: dict[str, _PoolState] = {p.name: _PoolState(p) for p in policy.pools}
        self.store_error = ""
        self.policy_error = ""
        self.last_actions: Actions | None = None
        self._gc_at = -float("inf")
        self._orphan_seen: dict[str, float] = {}

    # --- wiring ----------------------------------------------------------------------------

    def backend(self, spec: PoolSpec) -> Backend:
        if callable(self._backends):
            return self._backends(spec)
        try:
            return self._backends[spec.backend]
        except KeyError:
            raise UserError(f"pool {spec.name}: backend {spec.backend!r} is not available here; available: {', '.join(sorted(self._backends))}") from None

    def set_policy(self, policy: Policy) -> None:
        """Swap the policy; warm containers of pools that remain are kept as they are."""
        with self._lock:
            for spec in policy.pools:
                st = self._pools.get(spec.name)
                if st is None:
                    self._pools[spec.name] = _PoolState(spec)
                else:
                    if spec.idle_model.bin_seconds != st.spec.idle_model.bin_seconds:
                        st.meter = DemandMeter(spec.idle_model.bin_seconds)
                    st.spec = spec
            self.policy = policy
            self.warm_policy.configure(policy)
            self.coldstart.set_profiles(policy.runtime_classes)

    # --- observe / decide / apply ----------------------------------------------------------

    def _observe(self, now: float) -> dict[str, PoolObserved]:
        with self._lock:
            states = list(self._pools.values())
            for st in states:
                st.touched = set()
        p90: dict[tuple[str, str], float] = {}  # one estimate per start kind, runtime class and round
        return {st.spec.name: self._observe_pool(st, now, p90) for st in states}

    def _observe_pool(self, st: _PoolState, now: float, p90: dict[tuple[str, str], float]) -> PoolObserved:
        try:
            listed = self.backend(st.spec).list(st.spec)
        except (BackendError, UserError) as exc:
            log.warning("pool %s: cannot list containers: %s", st.spec.name, exc)
            listed = list(st.containers.values())
        key = (self.start_kind(st.spec), st.spec.runtime_class)
        self._learn_starts(st, listed, key[0])
        if key not in p90:  # after learning: a start seen Ready now counts now
            p90[key] = self.coldstart.p90_seconds(*key)
        with self._lock:
            merged: dict[str, Container] = {}
            for c in listed:
                if c.id in st.touched and c.id in st.containers:
                    c = st.containers[c.id]
                if c.deadline is None and c.state == "warm":
                    c = c.replace(deadline=st.decay.deadline(st.spec.idle_ttl, c.idle_since or now))
                merged[c.id] = c
            for cid in st.touched:  # created by a claim while we listed
                if cid in st.containers and cid not in merged:
                    merged[cid] = st.containers[cid]
            st.containers = merged
            st.starting &= merged.keys()  # gone before it was Ready: nothing to learn
            st.cands = None
            st.has_creating = any(c.state == "creating" for c in merged.values())
            view = tuple(c.replace(state="claimed") if c.id in st.claiming else c for c in merged.values())
            return PoolObserved(
                name=st.spec.name,
                containers=view,
                decay_k=st.decay.k,
                failures=st.failures,
                retry_at=st.retry_at,
                cold_start_p90_seconds=p90[key],
                last_error=st.last_error,
                round_seconds=self.settings.reconcile_interval_seconds,
                open_demand=st.meter.open_peak(now),
            )

    def _promote_ready(self, st: _PoolState) -> None:
        """Containers that finished starting since the last round become claimable now (a
        claim right after a pre-warm must not start a second container cold)."""
        try:
            listed = self.backend(st.spec).list(st.spec)
        except (BackendError, UserError):
            return
        self._learn_starts(st, listed, self.start_kind(st.spec))
        with self._lock:
            for c in listed:
                cur = st.containers.get(c.id)
                if cur is not None and cur.state == "creating" and c.state == "warm":
                    st.containers[c.id] = c
            st.cands = None
            st.has_creating = any(c.state == "creating" for c in st.containers.values())

    def _forecasts(self) -> dict[str, Forecast]:
        if self.store is None:
            return {}
        series = sorted({s for p in self.policy.pools for s in p.forecast_series})
        try:
            f = self.store.latest_many(series)
            self.store_error = ""
            return f
        except StoreError as exc:
            self.store_error = str(exc)
            log.warning("forecast store unavailable: %s (pools hold min_warm)", exc)
            return {}

    def _learn(self, now: float) -> None:
        """Hand the policy every demand bin closed since the last round."""
        with self._lock:
            closed = [(st.spec, st.meter.drain(now)) for st in self._pools.values() if self.policy.pool(st.spec.name) is not None]
        for spec, usages in closed:
            for u in usages:
                self.warm_policy.record(spec, u)
        self.warm_policy.end_round()

    def step(self) -> Actions:
        """One reconcile round."""
        with self._step_lock:
            now = self.clock()
            self._learn(now)
            self._reclaim_expired(now)
            observed = self._observe(now)
            forecasts = self._forecasts()
            actions = reconcile_once(observed, self.warm_policy, forecasts, now)
            self._apply(actions, now)
            self._collect_orphans(now)
            self.last_actions = actions
            self._export(actions)
            return actions

    def _collect_orphans(self, now: float) -> None:
        """Delete containers of pools that are neither in the policy nor tracked (e.g. a pool
        removed while the controller was down). Claimed ones get ``orphan_claimed_grace_seconds``
        from when they were first seen, as a claim's lease would."""
        if now - self._gc_at < self.settings.orphan_gc_interval_seconds or callable(self._backends):
            return
        self._gc_at = now
        with self._lock:
            known = set(self._pools) | {p.name for p in self.policy.pools}
        seen: set[str] = set()
        backends = {id(b): b for b in self._backends.values() if hasattr(b, "list_orphans")}
        for b in backends.values():
            try:
                orphans = b.list_orphans(known)
            except BackendError as exc:
                log.warning("orphan collection: cannot list: %s", exc)
                continue
            for ns, c in orphans:
                seen.add(c.id)
                if c.state == "claimed":
                    first = self._orphan_seen.setdefault(c.id, now)
                    # its persisted lease (if any) survives a restart; the grace runs from when first seen
                    until = c.lease_expires_at if c.lease_expires_at is not None else first + self.settings.orphan_claimed_grace_seconds
                    if now < until:
                        continue
                try:
                    b.delete_orphan(ns, c.id)
                except BackendError as exc:
                    log.warning("orphan collection: deleting %s failed: %s", c.id, exc)
                    continue
                log.info("deleted %s of removed pool %s", c.id, c.pool)
                self.metrics.of("orphans", c.pool).inc()
        self._orphan_seen = {k: v for k, v in self._orphan_seen.items() if k in seen}

    def _delete_claimed(self, st: _PoolState, cid: str) -> None:
        with self._lock:
            if cid in st.claiming:
                return
            st.claiming.add(cid)
        try:
            self.backend(st.spec).delete(st.spec, cid)
        finally:
            with self._lock:
                st.claiming.discard(cid)
        with self._lock:
            st.containers.pop(cid, None)
            st.leases.pop(cid, None)
            st.cands = None

    def _new_id(self, pool: str) -> str:
        return f"fs-{pool}-{uuid.uuid4().hex[:10]}"

    def _apply(self, actions: Actions, now: float) -> None:
        for d in actions.deletes:
            self._delete(d, now)
        for cr in actions.creates:
            self._create(cr.pool, cr.count, now)
        with self._lock:
            for st in self._pools.values():
                ready = sum(1 for c in st.containers.values() if c.state in ("warm", "creating") and c.id not in st.claiming)
                st.meter.ready_at_round(ready)

    def _delete(self, d, now: float) -> None:
        with self._lock:
            st = self._pools.get(d.pool)
            if st is None:
                return
            c = st.containers.get(d.container_id)
            if c is None or d.container_id in st.claiming:
                return
            # the decision saw an older state: a claim may have completed since
            if c.state == "claimed" or (d.reason == "dead" and c.state != "dead"):
                return
            st.claiming.add(d.container_id)  # busy: no claim may pick it while it goes
        try:
            self.backend(st.spec).delete(st.spec, d.container_id)
        except BackendError as exc:
            log.warning("pool %s: delete %s failed: %s (retried next round)", d.pool, d.container_id, exc)
            with self._lock:
                st.claiming.discard(d.container_id)
            return
        with self._lock:
            st.claiming.discard(d.container_id)
            st.containers.pop(d.container_id, None)
            if d.reason == "expired_unused":
                st.decay = st.decay.on_expired_unused()
                self.metrics.of("expired", d.pool).inc()
            if d.reason == "dead":
                self.metrics.of("dead", d.pool).inc()
            elif not c.claimed_since_idle and c.idle_since is not None and c.state == "warm":
                self.metrics.of("wasted", d.pool).inc(max(0.0, now - c.idle_since))

    def _create(self, pool: str, count: int, now: float) -> None:
        with self._lock:
            st = self._pools.get(pool)
        if st is None:
            return
        for _ in range(count):
            cid = self._new_id(pool)
            with self._lock:
                deadline = st.decay.deadline(st.spec.idle_ttl, now)
            try:  # a backend that cannot run here fails this pool's creations, not the round
                c, timings = self.backend(st.spec).create(st.spec, cid, now, deadline)
            except (CreateError, UserError) as exc:
                with self._lock:
                    st.failures += 1
                    st.last_error = str(exc)[:300]
                    delay = min(self.settings.backoff_max_seconds, self.settings.backoff_initial_seconds * 2 ** (st.failures - 1))
                    st.retry_at = now + delay
                self.metrics.of("failures", pool).inc()
                log.warning("pool %s: creating a container failed (%d in a row, retry in %.1fs): %s", pool, st.failures, delay, exc)
                return
            self._observe_start(st, c, timings)
            with self._lock:
                st.failures = 0
                st.last_error = ""
                st.retry_at = 0.0
                st.containers[c.id] = c
                st.touched.add(c.id)
                st.cands = None
                st.has_creating = st.has_creating or c.state == "creating"

    def _export(self, actions: Actions) -> None:
        with self._lock:
            for name, s in actions.status.items():
                st = self._pools.get(name)
                if st is None:
                    continue
                st.status = s
                warm = sum(1 for c in st.containers.values() if c.state == "warm" and c.id not in st.claiming)
                claimed = sum(1 for c in st.containers.values() if c.state == "claimed")
                self.metrics.pool_gauges(name, warm, claimed, s.target_warm, 1 if st.failures else 0)
            # forget pools that left the policy once they are empty
            names = {p.name for p in self.policy.pools}
            for name in [n for n, st in self._pools.items() if n not in names and not st.containers]:
                del self._pools[name]
        price = getattr(self.warm_policy, "price", None)
        if price is not None:
            self.metrics.price.set(price.price)
        self._export_model()

    # --- views -----------------------------------------------------------------------------

    def describe(self) -> dict:
        with self._lock:
            pools = []
            for spec in self.policy.pools:
                st = self._pools[spec.name]
                s = st.status
                pools.append(
                    {
                        "pool": spec.name,
                        "backend": spec.backend,
                        "runtime_class": spec.runtime_class,
                        "series": spec.series,
                        "warm": sum(1 for c in st.containers.values() if c.state == "warm" and c.id not in st.claiming),
                        "claimed": sum(1 for c in st.containers.values() if c.state == "claimed"),
                        "creating": sum(1 for c in st.containers.values() if c.state == "creating"),
                        "target_warm": s.target_warm if s else None,
                        "needed": s.needed if s else None,
                        "peak_demand": s.peak_demand if s else None,
                        "degraded": bool(st.failures),
                        "reason": s.reason if s else "",
                        "ttl_decay_k": st.decay.k,
                        "next_idle_ttl_seconds": spec.idle_ttl.ttl(st.decay.k),
                        "containers": [
                            {"id": c.id, "state": "claiming" if c.id in st.claiming else c.state, "endpoint": c.endpoint, "deadline": c.deadline}
                            for c in sorted(st.containers.values(), key=lambda c: c.id)
                        ],
                    }
                )
            return {"pools": pools, "policy": self.warm_policy.name, "store_error": self.store_error, "policy_error": self.policy_error}

    # --- runner ----------------------------------------------------------------------------

    def run(self, stop: threading.Event, watcher: "PolicyWatcher | None" = None) -> None:
        """Reconcile every ``reconcile_interval_seconds`` until ``stop`` is set."""
        while not stop.is_set():
            if watcher is not None:
                watcher.check(self)
            try:
                self.step()
            except Exception:  # a bad round must not kill the loop; it is logged and retried
                log.exception("reconcile round failed")
            stop.wait(self.settings.reconcile_interval_seconds)
