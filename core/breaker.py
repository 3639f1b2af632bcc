"""A fleet-wide circuit breaker for one outside system (Prometheus, Redis).

Without it a stalled dependency costs every workload its own timeouts: Prometheus that
accepts connections and never answers held each pull for tries x timeout, so one refresh
of 10,000 workloads took days. With it the trainer pays about one timeout per cool-down:

    closed --(threshold consecutive failures)--> open
    open   --(cool-down elapsed: one caller may probe)--> half-open
    half-open --(the probe succeeds)--> closed;  --(it fails)--> open (a new cool-down)

While open (and while a probe is in flight) ``allow()`` is False and callers fail fast with
their own "unavailable" error; the workload then serves its last forecast (or the adapter's
reactive fallback) exactly as when a pull fails. The outage is logged once when the circuit
opens and once when it closes again, instead of one warning per workload per step.

The class is the state machine only (clock injected, no I/O); the one module per outside
system wraps its calls with it (forecaster/sources/prometheus.py, core/store.py).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half-open"


class CircuitOpen(Exception):
    """Marker mixed into a system's own "unavailable" error when the breaker answered for it:
    the outage is already logged once, so callers log these at debug level."""


class CircuitBreaker:
    def __init__(
        self,
        name: str,
        *,
        threshold: int = 3,
        cooldown_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger | None = None,
    ) -> None:
        if threshold < 1:
            raise ValueError(f"threshold: {threshold} must be at least 1 consecutive failure")
        if cooldown_seconds <= 0:
            raise ValueError(f"cooldown_seconds: {cooldown_seconds} must be > 0")
        self.name = name
        self.threshold = int(threshold)
        self.cooldown_seconds = float(cooldown_seconds)
        self.clock = clock
        self.log = logger or logging.getLogger(__name__)
        self._lock = threading.Lock()  # pull threads and the fit worker share one breaker
        self._state = CLOSED
        self._failures = 0
        self._opened_at: float | None = None  # start of the current cool-down
        self._outage_since: float | None = None  # first opening of this outage
        self._probe_at: float | None = None  # when the half-open probe was handed out
        self.fast_failures = 0  # calls refused during the current outage
        self.outages = 0

    @property
    def state(self) -> str:
        return self._state

    @property
    def is_open(self) -> bool:
        """Open or probing: new calls are refused."""
        return self._state != CLOSED

    def seconds_until_probe(self) -> float:
        if self._opened_at is None:
            return 0.0
        return max(0.0, self._opened_at + self.cooldown_seconds - self.clock())

    def allow(self) -> bool:
        """May a call go out now? While open, the first caller after the cool-down is the probe."""
        with self._lock:
            if self._state == CLOSED:
                return True
            now = self.clock()
            if self._state == OPEN and now - (self._opened_at or 0.0) >= self.cooldown_seconds:
                self._state, self._probe_at = HALF_OPEN, now
                return True
            if self._state == HALF_OPEN and now - (self._probe_at or 0.0) >= self.cooldown_seconds:
                self._probe_at = now  # the probe never reported (its caller died): hand out another
                return True
            self.fast_failures += 1
            return False

    def succeeded(self) -> None:
        with self._lock:
            self._failures = 0
            if self._state == CLOSED:
                return
            down = self.clock() - (self._outage_since if self._outage_since is not None else self.clock())
            self.log.warning("%s reachable again after %.0f s; %d calls failed fast meanwhile",
                             self.name, down, self.fast_failures)
            self._state, self._opened_at, self._outage_since, self._probe_at = CLOSED, None, None, None

    def failed(self, reason: object) -> None:
        with self._lock:
            now = self.clock()
            self._failures += 1
            if self._state == HALF_OPEN:
                self._state, self._opened_at = OPEN, now  # the probe failed: another cool-down, no new line
                return
            if self._state == CLOSED and self._failures >= self.threshold:
                self._state, self._opened_at, self._outage_since = OPEN, now, now
                self.fast_failures = 0
                self.outages += 1
                self.log.warning(
                    "%s unavailable (%d consecutive failures, last: %s): failing fast, one probe every "
                    "%.0f s; workloads keep serving their last forecast until it answers",
                    self.name, self._failures, reason, self.cooldown_seconds,
                )
