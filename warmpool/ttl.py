"""The decaying idle TTL (pure).

The rule, exactly (a "round" is one unused expiry):

1. A pool carries a decay counter ``k``, starting at 0.
2. When a warm container becomes idle (it finished starting, or it was released by its
   claimer), it gets a deadline ``idle_since + ttl(k)`` with the ``k`` of that moment, where
   ``ttl(k) = max(floor_seconds, initial_seconds * (1 - decay) ** k)``. Later changes of ``k``
   do not move deadlines already given.
3. A warm container that reaches its deadline without being claimed expires (it is deleted)
   and ``k`` goes up by one: one round.
4. A claim that finds no warm container (a cold start) resets ``k`` to 0. A claim that gets a
   warm container leaves ``k`` alone.

So with the defaults (120 s, decay 0.15, floor 0) the TTLs handed out are 120, 102, 86.7,
73.7, ... s while containers keep expiring unused, and 120 s again after a cold start.
A pool's ``min_warm`` containers are exempt: the controller never expires below min_warm.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from core.typedconfig import FORBID_EXTRA, Number, Range


@dataclass(frozen=True)
class IdleTTL:
    """A pool's idle TTL (the policy's ``idle_ttl``; floor_seconds <= initial_seconds)."""

    __pydantic_config__ = FORBID_EXTRA

    initial_seconds: Annotated[Number, Range(0, lo_open=True)] = 120.0
    decay: Annotated[Number, Range(0, 1, hi_open=True)] = 0.15
    floor_seconds: Annotated[Number, Range(0)] = 0.0

    def ttl(self, k: int) -> float:
        """TTL handed to a container that becomes idle while the pool's counter is ``k``."""
        return max(self.floor_seconds, self.initial_seconds * (1.0 - self.decay) ** max(0, k))


@dataclass(frozen=True)
class DecayState:
    """The pool's decay counter; transitions are pure and return a new state."""

    k: int = 0

    def on_expired_unused(self, count: int = 1) -> "DecayState":
        return DecayState(self.k + count)

    def on_cold_start(self) -> "DecayState":
        return DecayState(0)

    def on_warm_claim(self) -> "DecayState":
        return self

    def deadline(self, ttl: IdleTTL, idle_since: float) -> float:
        return idle_since + ttl.ttl(self.k)
