"""Claim and release: one warm container to exactly one caller, a cold start otherwise.
Part of ``warmpool.controller.Controller`` (the same locks and pool state).

Leases: a claim holds its container until ``lease_seconds`` after the claim or the last
renewal; then the reconcile step releases or deletes it (``on_lease_expiry``). The expiry is
persisted by the backend with the container (an annotation on the pod, the crun metadata
file), in the same call as the claim, so a restarted controller reads each claim's lease back
from ``Backend.list``: it neither frees a claimed container early nor, when it restarts more
often than ``lease_seconds``, keeps it forever. ``st.leases`` is the in-memory index of those
expiries. A claimed container with no persisted lease (claimed by an older controller) gets
one from the moment it is adopted, written back at once.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

from core.errors import UserError
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
        lease = st.spec.lease_seconds
        expires = self.clock() + lease
        got = self._claim_warm(st, expires)
        if got is None and st.has_creating:
            self._promote_ready(st)
            got = self._claim_warm(st, expires)
        cold = got is None
        with self._lock:
            st.decay = st.decay.on_cold_start() if cold else st.decay.on_warm_claim()
        if cold:
            self.metrics.of("cold", pool).inc()
            if not allow_cold:
                raise NoWarmContainer(f"pool {pool!r} has no warm container right now")
            self._reserve_cold(st)
            got = self._claim_cold(st, expires)
        now = self.clock()
        with self._lock:
            st.meter.claimed(now, warm=not cold)
            st.leases[got.id] = expires
        dt = time.perf_counter() - t0
        result = "cold" if cold else "warm"
        self.metrics.of("claims", pool, result).inc()
        self.metrics.of("latency", pool, result).observe(dt)
        return ClaimResult(pool, got.id, got.endpoint, cold, dt, lease, expires)

    def renew(self, pool: str, container_id: str) -> dict:
        """Extend a claim's lease by the pool's ``lease_seconds`` from now, persisted with the
        container first (ClaimFailed when the backend cannot write it: the old lease stands)."""
        st = self._state(pool)
        expires = self.clock() + st.spec.lease_seconds
        with self._lock:
            c = st.containers.get(container_id)
            if c is None or c.state != "claimed" or container_id not in st.leases:
                what = "no longer exists (its lease expired or it was released)" if c is None else f"is {c.state}, not claimed"
                raise NotClaimed(f"pool {pool!r}: container {container_id!r} {what}; claim again")
            if container_id in st.claiming:
                raise NotClaimed(f"pool {pool!r}: container {container_id!r} is being released right now; claim again")
            st.claiming.add(container_id)  # keeps release and expiry off it while the lease is written
        try:
            got = self.backend(st.spec).renew(st.spec, c, expires)
        except BackendError as exc:
            raise ClaimFailed(f"pool {pool!r}: renewing the lease of {container_id!r} failed: {exc}; retry") from exc
        finally:
            with self._lock:
                st.claiming.discard(container_id)
        with self._lock:
            st.containers[container_id] = got
            st.touched.add(container_id)
            st.leases[container_id] = expires
        return {"pool": pool, "container_id": container_id, "lease_seconds": st.spec.lease_seconds,
                "lease_expires_at": expires}

    def _reclaim_expired(self, now: float) -> None:
        """Claims whose lease ran out go back (``on_lease_expiry: release``) or are deleted
        (``delete``, and always for pools no longer in the policy). The lease of a claimed
        container the controller adopted comes from the backend (persisted with it)."""
        due: list[tuple[Any, str, bool]] = []
        unleased: list[tuple[Any, Container]] = []
        with self._lock:
            for name, st in self._pools.items():
                in_policy = self.policy.pool(name) is not None
                claimed = {cid: c for cid, c in st.containers.items() if c.state == "claimed"}
                for cid in [cid for cid in st.leases if cid not in claimed]:
                    del st.leases[cid]
                for cid in sorted(claimed):
                    exp = st.leases.get(cid)
                    if exp is None:
                        exp = claimed[cid].lease_expires_at
                        if exp is None:
                            unleased.append((st, claimed[cid]))
                            continue
                        st.leases[cid] = exp
                    if exp <= now and cid not in st.claiming:
                        due.append((st, cid, in_policy and st.spec.on_lease_expiry == "release"))
        for st, c in unleased:
            self._lease_adopted(st, c, now + st.spec.lease_seconds)
        for st, cid, back in due:
            name = st.spec.name
            log.info("pool %s: the lease of %s expired; %s", name, cid, "releasing it" if back else "deleting it")
            try:
                if back:
                    self.release(name, cid)
                else:
                    self._delete_claimed(st, cid)
            except (BackendError, UserError) as exc:
                log.warning("pool %s: reclaiming %s failed: %s (retried next round)", name, cid, exc)
                continue
            self.metrics.of("lease_expired", name).inc()

    def _lease_adopted(self, st, c: Container, expires: float) -> None:
        """A claimed container without a persisted lease: one from now, written back."""
        try:
            got = self.backend(st.spec).renew(st.spec, c, expires)
        except (BackendError, UserError) as exc:
            log.warning("pool %s: cannot persist a lease for the adopted claim %s: %s (retried next round)",
                        st.spec.name, c.id, exc)
            return
        log.info("pool %s: adopted claim %s had no lease; it expires in %gs", st.spec.name, c.id, st.spec.lease_seconds)
        with self._lock:
            if c.id in st.containers:
                st.containers[c.id] = got
                st.touched.add(c.id)
            st.leases.setdefault(c.id, expires)

    def _claim_warm(self, st, lease_expires_at: float) -> Container | None:
        spec = st.spec
        try:
            backend = self.backend(spec)
        except UserError as exc:  # its backend cannot run here: a 503 that says why, not a 500
            raise ClaimFailed(f"pool {spec.name!r}: {exc}") from exc
        while True:
            with self._lock:
                c = self._next_warm(st)
                if c is None:
                    return None
                st.claiming.add(c.id)
            try:
                got = backend.claim(spec, c, self.clock(), lease_expires_at)
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

    def _claim_cold(self, st, lease_expires_at: float) -> Container:
        spec = st.spec
        try:
            got, timings = self.backend(spec).cold_start(spec, self._new_id(spec.name), self.clock(), lease_expires_at)
        except (BackendError, UserError) as exc:
            raise ClaimFailed(f"pool {spec.name!r}: cold start failed: {exc}") from exc
        with self._lock:
            st.containers[got.id] = got
            st.touched.add(got.id)
        self._observe_start(st, got, timings)
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
        except BackendError as exc:  # the container stays claimed by its claimer, who may retry
            raise ClaimFailed(f"pool {pool!r}: releasing {container_id!r} failed: {exc}; retry") from exc
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

