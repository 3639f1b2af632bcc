"""Discrete-event simulated containers: start latencies drawn from the cold-start model,
time from an injected clock. It starts whatever kind it is told (``start_kind``: containers by
default, or pods to stand in for the kubernetes backend), and never teaches the model (its
starts are the model's own draws). For benchmarks, for ``foresight up`` where crun cannot run,
and for controller tests that need faults on demand (``fail_creates``, ``kill``). Containers are
kept per pool: the trace benchmark runs one pool per function, hundreds in one controller."""

from __future__ import annotations

import random
import threading
from typing import Callable, Mapping

from warmpool.backends.base import BackendError, ClaimConflict, CreateError
from warmpool.coldstart import CONTAINER, START_KINDS, ColdStartModel
from warmpool.policy import PoolSpec
from warmpool.reconcile import Container


class SimBackend:
    name = "sim"

    def __init__(self, clock: Callable[[], float], model: ColdStartModel | None = None, seed: int = 0,
                 start_kind: str = CONTAINER):
        if start_kind not in START_KINDS:
            raise ValueError(f"start_kind must be one of {', '.join(START_KINDS)}, got {start_kind!r}")
        self.start_kind = start_kind
        self.clock = clock
        self.model = model or ColdStartModel()
        self.rng = random.Random(seed)
        self._lock = threading.Lock()
        self._containers: dict[str, Container] = {}
        self._by_pool: dict[str, dict[str, Container]] = {}
        self._ready_at: dict[str, float] = {}
        self._fail_creates = 0
        self._fail_reason = "simulated creation failure"
        self.created_total = 0
        self.deleted_total = 0

    # --- fault injection -------------------------------------------------------------------

    def fail_creates(self, n: int, reason: str = "image not found") -> None:
        with self._lock:
            self._fail_creates = n
            self._fail_reason = reason

    def kill(self, container_id: str) -> None:
        with self._lock:
            self._put(self._containers[container_id].replace(state="dead"))

    def _put(self, c: Container) -> None:
        self._containers[c.id] = c
        self._by_pool.setdefault(c.pool, {})[c.id] = c

    def count(self, pool: str, states: tuple[str, ...] = ("warm", "creating")) -> int:
        """Containers of a pool in ``states`` (what the trace benchmark counts as resident)."""
        with self._lock:
            return sum(1 for c in self._by_pool.get(pool, {}).values() if c.state in states)

    # --- protocol --------------------------------------------------------------------------

    def list(self, pool: PoolSpec) -> list[Container]:
        now = self.clock()
        with self._lock:
            out = []
            for cid, c in sorted(self._by_pool.get(pool.name, {}).items()):
                if c.state == "creating" and self._ready_at.get(cid, 0.0) <= now:
                    ready = self._ready_at.pop(cid)
                    ttl = (c.deadline or ready) - (c.idle_since or ready)
                    c = c.replace(state="warm", idle_since=ready, deadline=ready + ttl)
                    self._put(c)
                out.append(c)
            return out

    def create(self, pool: PoolSpec, container_id: str, now: float, deadline: float):
        with self._lock:
            if self._fail_creates > 0:
                self._fail_creates -= 1
                raise CreateError(self._fail_reason)
            ms = self.model.sample_ms(self.start_kind, pool.runtime_class, self.rng)
            c = Container(container_id, pool.name, "creating", created_at=now, idle_since=now, deadline=deadline, endpoint=f"sim://{container_id}")
            self._put(c)
            self._ready_at[container_id] = now + ms / 1000.0
            self.created_total += 1
        return c, self._timings(ms)

    def _timings(self, ms: float) -> Mapping[str, float]:
        # never a complete start (all three components, or a pod's start_ms): the model must
        # not learn its own draws
        return {"sandbox": ms} if self.start_kind == CONTAINER else {}

    def claim(self, pool: PoolSpec, container: Container, now: float, lease_expires_at: float | None = None) -> Container:
        with self._lock:
            cur = self._containers.get(container.id)
            if cur is None or cur.state == "dead":
                raise BackendError(f"container {container.id} is gone")
            if cur.state == "claimed":
                raise ClaimConflict(f"container {container.id} was claimed by someone else")
            c = cur.replace(state="claimed", claimed_since_idle=True, lease_expires_at=lease_expires_at)
            self._put(c)
            return c

    def renew(self, pool: PoolSpec, container: Container, lease_expires_at: float) -> Container:
        with self._lock:
            cur = self._containers.get(container.id)
            if cur is None or cur.state != "claimed":
                raise BackendError(f"container {container.id} is {cur.state if cur else 'gone'}, not claimed")
            c = cur.replace(lease_expires_at=lease_expires_at)
            self._put(c)
            return c

    def release(self, pool: PoolSpec, container: Container, now: float, deadline: float) -> Container:
        with self._lock:
            c = container.replace(state="warm", idle_since=now, deadline=deadline, claimed_since_idle=False,
                                  lease_expires_at=None)
            self._put(c)
            return c

    def delete(self, pool: PoolSpec, container_id: str) -> None:
        with self._lock:
            c = self._containers.pop(container_id, None)
            if c is not None:
                self._by_pool.get(c.pool, {}).pop(container_id, None)
                self.deleted_total += 1
            self._ready_at.pop(container_id, None)

    def cold_start(self, pool: PoolSpec, container_id: str, now: float, lease_expires_at: float | None = None):
        with self._lock:
            if self._fail_creates > 0:
                self._fail_creates -= 1
                raise CreateError(self._fail_reason)
            ms = self.model.sample_ms(self.start_kind, pool.runtime_class, self.rng)
            c = Container(container_id, pool.name, "claimed", created_at=now, idle_since=now, deadline=now, endpoint=f"sim://{container_id}", claimed_since_idle=True,
                          lease_expires_at=lease_expires_at)
            self._put(c)
            self.created_total += 1
        return c, self._timings(ms)

    def list_orphans(self, known_pools: set[str]) -> list[tuple[str, Container]]:
        with self._lock:
            return [("", c) for pool, cs in sorted(self._by_pool.items()) if pool not in known_pools for c in cs.values()]

    def delete_orphan(self, namespace: str, container_id: str) -> None:
        self.delete(None, container_id)  # type: ignore[arg-type]

    def container_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._containers)
