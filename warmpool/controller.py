"""The thin runner around ``reconcile_once``: observe -> decide (pure) -> apply, with the
clock injected; plus claim/release, metrics and policy reload.

State lives in the backend (``Backend.list``), so a restarted controller adopts what exists.
The controller's memory only adds what is in flight (containers being claimed right now) and
the pool counters (TTL decay ``k``, creation failures and backoff).

Metrics (one ``CollectorRegistry`` per controller):
  foresight_warmpool_warm / _claimed / _target / _degraded            gauges per pool
  foresight_warmpool_expired_unused_total                              counter per pool
  foresight_warmpool_cold_starts_total                                 counter per pool
  foresight_warmpool_claims_total{result=warm|cold}                    counter per pool
  foresight_warmpool_wasted_container_seconds_total                    idle seconds of
      containers removed without being claimed since they last became idle
  foresight_warmpool_claim_latency_seconds{result}                     histogram
  foresight_warmpool_creation_failures_total, _dead_replaced_total     counters per pool
  foresight_warmpool_cold_start_model_seconds{runtime_class,component,quantile}
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from forecaster.errors import ConfigError, UserError
from forecaster.store import Forecast, ForecastStore, StoreError
from warmpool.backends.base import Backend, BackendError, ClaimConflict, CreateError
from warmpool.coldstart import ColdStartModel
from warmpool.policy import Policy, PoolSpec, load_policy
from warmpool.reconcile import Actions, Container, PoolObserved, PoolStatus, reconcile_once
from warmpool.ttl import DecayState

log = logging.getLogger(__name__)


class UnknownPool(UserError):
    pass


class NoWarmContainer(UserError):
    pass


class ClaimFailed(UserError):
    pass


class NotClaimed(UserError):
    pass


@dataclass(frozen=True)
class ControllerSettings:
    reconcile_interval_seconds: float = 5.0
    backoff_initial_seconds: float = 1.0
    backoff_max_seconds: float = 60.0


@dataclass(frozen=True)
class ClaimResult:
    pool: str
    container_id: str
    endpoint: str
    cold_start: bool
    latency_seconds: float

    def as_dict(self) -> dict:
        return {
            "pool": self.pool,
            "container_id": self.container_id,
            "endpoint": self.endpoint,
            "cold_start": self.cold_start,
            "latency_ms": round(self.latency_seconds * 1000.0, 3),
        }


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


class _Metrics:
    def __init__(self, registry=None):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = registry or CollectorRegistry()
        r = self.registry
        p = "foresight_warmpool_"
        self.warm = Gauge(p + "warm", "Warm (idle, ready) containers", ["pool"], registry=r)
        self.claimed = Gauge(p + "claimed", "Claimed containers", ["pool"], registry=r)
        self.target = Gauge(p + "target", "Warm target from the forecast", ["pool"], registry=r)
        self.degraded = Gauge(p + "degraded", "1 while creation keeps failing", ["pool"], registry=r)
        self.expired = Counter(p + "expired_unused", "Warm containers expired without a claim", ["pool"], registry=r)
        self.cold = Counter(p + "cold_starts", "Claims that found no warm container", ["pool"], registry=r)
        self.claims = Counter(p + "claims", "Claims", ["pool", "result"], registry=r)
        self.wasted = Counter(p + "wasted_container_seconds", "Idle seconds of containers removed unclaimed", ["pool"], registry=r)
        self.failures = Counter(p + "creation_failures", "Failed container creations", ["pool"], registry=r)
        self.dead = Counter(p + "dead_replaced", "Dead warm containers removed", ["pool"], registry=r)
        self.latency = Histogram(
            p + "claim_latency_seconds", "Claim latency", ["pool", "result"], registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        )
        self.model = Gauge(p + "cold_start_model_seconds", "Cold-start model quantiles", ["runtime_class", "component", "quantile"], registry=r)


class Controller:
    def __init__(
        self,
        policy: Policy,
        store: ForecastStore | None,
        backends: Mapping[str, Backend] | Callable[[PoolSpec], Backend],
        clock: Callable[[], float] = time.time,
        settings: ControllerSettings | None = None,
        coldstart: ColdStartModel | None = None,
        registry=None,
    ):
        self.policy = policy
        self.store = store
        self._backends = backends
        self.clock = clock
        self.settings = settings or ControllerSettings()
        self.coldstart = coldstart or ColdStartModel(policy.runtime_classes)
        self.metrics = _Metrics(registry)
        self._lock = threading.RLock()
        self._step_lock = threading.Lock()
        self._pools: dict[str, _PoolState] = {p.name: _PoolState(p) for p in policy.pools}
        self.store_error = ""
        self.policy_error = ""
        self.last_actions: Actions | None = None

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
                    st.spec = spec
            self.policy = policy
            self.coldstart.profiles.update(policy.runtime_classes)

    # --- observe / decide / apply ----------------------------------------------------------

    def _observe(self, now: float) -> dict[str, PoolObserved]:
        with self._lock:
            states = list(self._pools.values())
            for st in states:
                st.touched = set()
        out: dict[str, PoolObserved] = {}
        for st in states:
            try:
                listed = self.backend(st.spec).list(st.spec)
            except (BackendError, UserError) as exc:
                log.warning("pool %s: cannot list containers: %s", st.spec.name, exc)
                listed = list(st.containers.values())
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
                view = tuple(c.replace(state="claimed") if c.id in st.claiming else c for c in merged.values())
                out[st.spec.name] = PoolObserved(
                    name=st.spec.name,
                    containers=view,
                    decay_k=st.decay.k,
                    failures=st.failures,
                    retry_at=st.retry_at,
                    cold_start_p90_seconds=self.coldstart.p90_seconds(st.spec.runtime_class),
                    last_error=st.last_error,
                )
        return out

    def _forecasts(self) -> dict[str, Forecast]:
        if self.store is None:
            return {}
        series = sorted({p.series for p in self.policy.pools})
        try:
            f = self.store.latest_many(series)
            self.store_error = ""
            return f
        except StoreError as exc:
            self.store_error = str(exc)
            log.warning("forecast store unavailable: %s (pools hold min_warm)", exc)
            return {}

    def step(self) -> Actions:
        """One reconcile round."""
        with self._step_lock:
            now = self.clock()
            observed = self._observe(now)
            forecasts = self._forecasts()
            actions = reconcile_once(observed, self.policy, forecasts, now)
            self._apply(actions, now)
            self.last_actions = actions
            self._export(actions)
            return actions

    def _new_id(self, pool: str) -> str:
        return f"fs-{pool}-{uuid.uuid4().hex[:10]}"

    def _apply(self, actions: Actions, now: float) -> None:
        for d in actions.deletes:
            with self._lock:
                st = self._pools.get(d.pool)
                if st is None:
                    continue
                c = st.containers.get(d.container_id)
                if c is None or d.container_id in st.claiming:
                    continue
                # the decision saw an older state: a claim may have completed since
                if c.state == "claimed" or (d.reason == "dead" and c.state != "dead"):
                    continue
                st.claiming.add(d.container_id)  # busy: no claim may pick it while it goes
            try:
                self.backend(st.spec).delete(st.spec, d.container_id)
            except BackendError as exc:
                log.warning("pool %s: delete %s failed: %s (retried next round)", d.pool, d.container_id, exc)
                with self._lock:
                    st.claiming.discard(d.container_id)
                continue
            with self._lock:
                st.claiming.discard(d.container_id)
                st.containers.pop(d.container_id, None)
                if d.reason == "expired_unused":
                    st.decay = st.decay.on_expired_unused()
                    self.metrics.expired.labels(d.pool).inc()
                if d.reason == "dead":
                    self.metrics.dead.labels(d.pool).inc()
                elif not c.claimed_since_idle and c.idle_since is not None and c.state == "warm":
                    self.metrics.wasted.labels(d.pool).inc(max(0.0, now - c.idle_since))
        for cr in actions.creates:
            with self._lock:
                st = self._pools.get(cr.pool)
            if st is None:
                continue
            backend = self.backend(st.spec)
            for _ in range(cr.count):
                cid = self._new_id(cr.pool)
                with self._lock:
                    deadline = st.decay.deadline(st.spec.idle_ttl, now)
                try:
                    c, timings = backend.create(st.spec, cid, now, deadline)
                except CreateError as exc:
                    with self._lock:
                        st.failures += 1
                        st.last_error = str(exc)[:300]
                        delay = min(self.settings.backoff_max_seconds, self.settings.backoff_initial_seconds * 2 ** (st.failures - 1))
                        st.retry_at = now + delay
                    self.metrics.failures.labels(cr.pool).inc()
                    log.warning("pool %s: creating a container failed (%d in a row, retry in %.1fs): %s", cr.pool, st.failures, delay, exc)
                    break
                self._observe_start(st.spec.runtime_class, timings)
                with self._lock:
                    st.failures = 0
                    st.last_error = ""
                    st.retry_at = 0.0
                    st.containers[c.id] = c
                    st.touched.add(c.id)

    def _observe_start(self, runtime_class: str, timings: Mapping[str, float]) -> None:
        try:
            self.coldstart.observe(runtime_class, **{f"{k}_ms": float(v) for k, v in timings.items() if k in ("runtime", "image", "sandbox")})
        except ValueError:
            pass

    def _export(self, actions: Actions) -> None:
        with self._lock:
            for name, s in actions.status.items():
                st = self._pools.get(name)
                if st is None:
                    continue
                st.status = s
                warm = sum(1 for c in st.containers.values() if c.state == "warm" and c.id not in st.claiming)
                claimed = sum(1 for c in st.containers.values() if c.state == "claimed")
                self.metrics.warm.labels(name).set(warm)
                self.metrics.claimed.labels(name).set(claimed)
                self.metrics.target.labels(name).set(s.target_warm)
                self.metrics.degraded.labels(name).set(1 if st.failures else 0)
            # forget pools that left the policy once they are empty
            names = {p.name for p in self.policy.pools}
            for name in [n for n, st in self._pools.items() if n not in names and not st.containers]:
                del self._pools[name]
        for rc in {p.runtime_class for p in self.policy.pools}:
            est = self.coldstart.estimate(rc)
            for comp, vals in [("total", est.total_ms), *est.components_ms.items()]:
                for q, v in zip(("p50", "p90", "p99"), vals):
                    self.metrics.model.labels(rc, comp, q).set(v / 1000.0)

    # --- claim / release -------------------------------------------------------------------

    def _state(self, pool: str) -> _PoolState:
        with self._lock:
            st = self._pools.get(pool)
            if st is None or self.policy.pool(pool) is None:
                raise UnknownPool(f"unknown pool {pool!r}; known: {', '.join(p.name for p in self.policy.pools)}")
            return st

    def claim(self, pool: str, allow_cold: bool = True) -> ClaimResult:
        """Hand one warm container to exactly one caller (the one expiring soonest, as
        OpenWhisk does); with none warm, start one cold (or raise NoWarmContainer)."""
        t0 = time.perf_counter()
        st = self._state(pool)
        spec = st.spec
        backend = self.backend(spec)
        while True:
            with self._lock:
                cands = [c for c in st.containers.values() if c.state == "warm" and c.id not in st.claiming]
                if not cands:
                    break
                c = min(cands, key=lambda c: (c.deadline if c.deadline is not None else float("inf"), c.id))
                st.claiming.add(c.id)
            try:
                got = backend.claim(spec, c, self.clock())
            except ClaimConflict:
                with self._lock:
                    st.claiming.discard(c.id)
                    st.containers.pop(c.id, None)
                continue
            except BackendError as exc:
                log.warning("pool %s: warm container %s is broken (%s); trying another", pool, c.id, exc)
                with self._lock:
                    st.claiming.discard(c.id)
                    st.containers[c.id] = c.replace(state="dead")
                continue
            with self._lock:
                st.containers[c.id] = got
                st.claiming.discard(c.id)
                st.touched.add(c.id)
                st.decay = st.decay.on_warm_claim()
            dt = time.perf_counter() - t0
            self.metrics.claims.labels(pool, "warm").inc()
            self.metrics.latency.labels(pool, "warm").observe(dt)
            return ClaimResult(pool, got.id, got.endpoint, False, dt)
        with self._lock:
            st.decay = st.decay.on_cold_start()
        self.metrics.cold.labels(pool).inc()
        if not allow_cold:
            raise NoWarmContainer(f"pool {pool!r} has no warm container right now")
        cid = self._new_id(pool)
        try:
            got, timings = backend.cold_start(spec, cid, self.clock())
        except BackendError as exc:
            raise ClaimFailed(f"pool {pool!r}: cold start failed: {exc}") from exc
        self._observe_start(spec.runtime_class, timings)
        with self._lock:
            st.containers[got.id] = got
            st.touched.add(got.id)
        dt = time.perf_counter() - t0
        self.metrics.claims.labels(pool, "cold").inc()
        self.metrics.latency.labels(pool, "cold").observe(dt)
        return ClaimResult(pool, got.id, got.endpoint, True, dt)

    def release(self, pool: str, container_id: str) -> Container:
        """Give a claimed container back; it then ages on the idle TTL."""
        st = self._state(pool)
        now = self.clock()
        with self._lock:
            c = st.containers.get(container_id)
            if c is None:
                raise NotClaimed(f"pool {pool!r} has no container {container_id!r}")
            if c.state != "claimed":
                raise NotClaimed(f"container {container_id!r} is {c.state}, not claimed")
            deadline = st.decay.deadline(st.spec.idle_ttl, now)
            st.claiming.add(container_id)  # keep claims and the lister off it meanwhile
        try:
            got = self.backend(st.spec).release(st.spec, c, now, deadline)
        finally:
            with self._lock:
                st.claiming.discard(container_id)
        with self._lock:
            st.containers[container_id] = got
            st.touched.add(container_id)
        return got

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
            return {"pools": pools, "store_error": self.store_error, "policy_error": self.policy_error}

    def coldstart_view(self) -> list[dict]:
        rcs = sorted({p.runtime_class for p in self.policy.pools} | set(self.coldstart.runtime_classes()))
        return [self.coldstart.estimate(rc).as_dict() for rc in rcs]

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


class PolicyWatcher:
    """Reloads the policy file when its content changes; an invalid file keeps the old
    policy running and reports the problems in ``controller.policy_error``."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._digest = self._read_digest()

    def _read_digest(self) -> str:
        try:
            return hashlib.sha256(self.path.read_bytes()).hexdigest()
        except OSError:
            return ""

    def check(self, controller: Controller) -> bool:
        digest = self._read_digest()
        if digest == self._digest or not digest:
            return False
        self._digest = digest
        try:
            policy = load_policy(self.path)
        except ConfigError as exc:
            controller.policy_error = str(exc)
            log.error("policy reload rejected, keeping the previous policy: %s", exc)
            return False
        controller.policy_error = ""
        controller.set_policy(policy)
        log.info("policy reloaded from %s", self.path)
        return True
