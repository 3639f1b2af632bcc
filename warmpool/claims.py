"""Claim and release: one warm container to exactly one caller, a cold start otherwise.
Part of ``warmpool.controller.Controller`` (the same locks and pool state)."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

from forecaster.errors import UserError
from warmpool.backends.base import BackendError, ClaimConflict
from warmpool.reconcile import Container

log = logging.getLogger(__name__)


class UnknownPool(UserError):
    pass


class NoWarmContainer(UserError):
    pass


class ClaimFailed(UserError):
    pass


class NotClaimed(UserError):
    pass


class ColdLimited(UserError):
    """The pool started ``max_cold_per_minute`` cold containers in the last 60 s (HTTP 429)."""

    def __init__(self, message: str, retry_after_seconds: int):
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


COLD_WINDOW_SECONDS = 60.0


@dataclass(frozen=True)
class ClaimResult:
    pool: str
    container_id: str
    endpoint: str
    cold_start: bool
    latency_seconds: float
    lease_seconds: float = 0.0
    lease_expires_at: float = 0.0

    def as_dict(self) -> dict:
        return {
            "pool": self.pool,
            "container_id": self.container_id,
            "endpoint": self.endpoint,
            "cold_start": self.cold_start,
            "latency_ms": round(self.latency_seconds * 1000.0, 3),
            "lease_seconds": self.lease_seconds,
            "lease_expires_at": self.lease_expires_at,
        }


class Claims:
    """Mixed into the controller; uses its ``_lock``, ``_pools``, ``policy``, ``clock``,
    ``metrics``, ``backend()``, ``_new_id()``, ``_observe_start()`` and ``_promote_ready()``."""

    def _state(self, pool: str):
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
        got = self._claim_warm(st)
        if got is None and st.has_creating:
            self._promote_ready(st)
            got = self._claim_warm(st)
        cold = got is None
        with self._lock:
            st.decay = st.decay.on_cold_start() if cold else st.decay.on_warm_claim()
        if cold:
            self.metrics.of("cold", pool).inc()
            if not allow_cold:
                raise NoWarmContainer(f"pool {pool!r} has no warm container right now")
            self._reserve_cold(st)
            got = self._claim_cold(st)
        now = self.clock()
        with self._lock:
            st.meter.claimed(now, warm=not cold)
            lease = st.spec.lease_seconds
            st.leases[got.id] = now + lease
        dt = time.perf_counter() - t0
        result = "cold" if cold else "warm"
        self.metrics.of("claims", pool, result).inc()
        self.metrics.of("latency", pool, result).observe(dt)
        return ClaimResult(pool, got.id, got.endpoint, cold, dt, lease, now + lease)

    def renew(self, pool: str, container_id: str) -> dict:
        """Extend a claim's lease by the pool's ``lease_seconds`` from now."""
        st = self._state(pool)
        now = self.clock()
        with self._lock:
            c = st.containers.get(container_id)
            if c is None or c.state != "claimed" or container_id not in st.leases:
                what = "no longer exists (its lease expired or it was released)" if c is None else f"is {c.state}, not claimed"
                raise NotClaimed(f"pool {pool!r}: container {container_id!r} {what}; claim again")
            st.leases[container_id] = now + st.spec.lease_seconds
            return {"pool": pool, "container_id": container_id, "lease_seconds": st.spec.lease_seconds,
                    "lease_expires_at": st.leases[container_id]}

    def _claim_warm(self, st) -> Container | None:
        spec = st.spec
        backend = self.backend(spec)
        while True:
            with self._lock:
                c = self._next_warm(st)
                if c is None:
                    return None
                st.claiming.add(c.id)
            try:
                got = backend.claim(spec, c, self.clock())
            except ClaimConflict:
                with self._lock:
                    st.claiming.discard(c.id)
                    st.containers.pop(c.id, None)
                continue
            except BackendError as exc:
                log.warning("pool %s: warm container %s is broken (%s); trying another", spec.name, c.id, exc)
                with self._lock:
                    st.claiming.discard(c.id)
                    st.containers[c.id] = c.replace(state="dead")
                continue
            with self._lock:
                st.containers[c.id] = got
                st.claiming.discard(c.id)
                st.touched.add(c.id)
            return got

    @staticmethod
    def _next_warm(st):
        """The claimable container expiring soonest (caller holds the lock)."""
        if st.cands is None:
            warm = [c for c in st.containers.values() if c.state == "warm" and c.id not in st.claiming]
            warm.sort(key=lambda c: (c.deadline if c.deadline is not None else float("inf"), c.id), reverse=True)
            st.cands = warm
        while st.cands:
            c = st.containers.get(st.cands.pop().id)
            if c is not None and c.state == "warm" and c.id not in st.claiming:
                return c
        return None

    def _reserve_cold(self, st) -> None:
        """Count one cold start against the pool's ``max_cold_per_minute`` (a sliding 60 s
        window on the controller's clock), or raise ColdLimited with when one frees up."""
        cap = st.spec.max_cold_per_minute
        now = self.clock()
        with self._lock:
            w = st.cold_window
            while w and w[0] <= now - COLD_WINDOW_SECONDS:
                w.popleft()
            if len(w) >= cap:
                retry = max(1, math.ceil(w[0] + COLD_WINDOW_SECONDS - now)) if w else int(COLD_WINDOW_SECONDS)
                self.metrics.of("cold_limited", st.spec.name).inc()
                raise ColdLimited(
                    f"pool {st.spec.name!r} has no warm container and already started {len(w)} cold in the last "
                    f"{COLD_WINDOW_SECONDS:g}s (max_cold_per_minute: {cap}); retry in {retry}s",
                    retry,
                )
            w.append(now)

    def _claim_cold(self, st) -> Container:
        spec = st.spec
        try:
            got, timings = self.backend(spec).cold_start(spec, self._new_id(spec.name), self.clock())
        except BackendError as exc:
            raise ClaimFailed(f"pool {spec.name!r}: cold start failed: {exc}") from exc
        self._observe_start(spec.runtime_class, timings)
        with self._lock:
            st.containers[got.id] = got
            st.touched.add(got.id)
        return got

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
            st.cands = None
            st.meter.released(now)
            st.leases.pop(container_id, None)
        return got

