"""Keep-alive / pre-warm policies for the trace replay (``warmpool.tracesim``).

Every policy only sees the past: ``resident(t, ...)`` is asked before minute ``t`` and
``observe(t, n)`` is told minute ``t`` afterwards.

- ``fixed:M``  keep a container resident for M minutes after it was last busy.
- ``seed``     the seed's decaying idle TTL (``warmpool.ttl``: 120 s x 0.85^k, k = unused
               expiries since the last cold start), at 60 s steps.
- ``hybrid``   Shahrad et al.'s hybrid histogram policy (ATC 2020).
- ``oracle``   knows every future invocation (lower bound; not causal).
- ``foresight`` ours: an online per-function model of the next invocation (a hazard over the
               idle time, learned from the function's own idle-time histogram with a prior),
               used to keep a container resident at offset ``o`` exactly when the chance of a
               call at ``o`` per unit of memory is high enough:

                   resident at o  <=>  h(o) / (1 - h(o)) >= lambda * memory_GB

               where ``h(o)`` is P(next call at o | none in 1..o-1). A periodic function gets
               h ~ 1 at its period and ~0 before it: the container is pre-warmed just before
               the call and holds nothing in between. An unknown function falls back on the
               prior's decreasing hazard, i.e. a short keep-alive that decays with memory.
               Under the concurrency model the r-th most recent container has the hazard
               of the gaps between minutes with demand >= r, and the pool keeps the prefix
               that minimises P(cold minute) + lambda * memory * expected idle containers.
               lambda is not tuned on the trace: it follows a memory budget (95% of what a
               fixed 10-minute keep-alive spends on the same past).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from forecaster.errors import UserError
from warmpool.tracesim import FunctionView
from warmpool.ttl import IdleTTL


# --- fixed ---------------------------------------------------------------------------------


class _FixedFn:
    __slots__ = ("k",)

    def __init__(self, k: int):
        self.k = k

    def resident(self, t, offsets):
        k = self.k
        return [o <= k for o in offsets]

    def observe(self, t, n):
        pass


@dataclass(frozen=True)
class FixedKeepAlive:
    minutes: int = 10

    @property
    def name(self) -> str:
        return f"fixed:{self.minutes}"

    def for_function(self, fn: FunctionView):
        return _FixedFn(self.minutes)


# --- seed decaying TTL ---------------------------------------------------------------------


class _SeedFn:
    """Container TTLs follow warmpool.ttl exactly: the TTL is fixed when the container becomes
    idle (end of its busy minute u); the container is resident at offset o while o*60 <= TTL;
    the first minute past it counts one unused expiry (k += 1); a cold start resets k."""

    def __init__(self, ttl: IdleTTL, step_seconds: float):
        self.ttl = ttl
        self.step = step_seconds
        self.k = 0
        self.ttl_of_minute: dict[int, float] = {}
        self.expired: set[int] = set()
        self.resident_count = 0

    def resident(self, t, offsets):
        mask = []
        for o in offsets:
            u = t - o
            ttl = self.ttl_of_minute.get(u, 0.0)
            ok = o * self.step <= ttl
            if not ok and u not in self.expired and (o - 1) * self.step <= ttl:
                # expired at this minute (count each container of that minute once)
                self.k += 1
            mask.append(ok)
        for o in offsets:
            u = t - o
            if not (o * self.step <= self.ttl_of_minute.get(u, 0.0)):
                self.expired.add(u)
        self.resident_count = sum(mask)
        return mask

    def observe(self, t, n):
        if n > 0:
            if n > self.resident_count:
                self.k = 0
            self.ttl_of_minute[t] = self.ttl.ttl(self.k)
        self.resident_count = 0


@dataclass(frozen=True)
class SeedDecayingTTL:
    ttl: IdleTTL = IdleTTL()
    step_seconds: float = 60.0
    name: str = "seed"

    def for_function(self, fn: FunctionView):
        return _SeedFn(self.ttl, self.step_seconds)


# --- hybrid histogram (Shahrad et al.) -----------------------------------------------------


class _HybridFn:
    RANGE = 240  # 4 h of 1-minute bins

    def __init__(self, p: "HybridHistogram"):
        self.p = p
        self.hist = np.zeros(self.RANGE + 1)
        self.oob: list[int] = []
        self.last: int | None = None
        self.head, self.tail = 1, self.RANGE

    def resident(self, t, offsets):
        h, tl = self.head, self.tail
        return [h <= o <= tl for o in offsets]

    def observe(self, t, n):
        if n <= 0:
            return
        if self.last is not None:
            it = t - self.last
            if it <= self.RANGE:
                self.hist[it] += 1
            else:
                self.oob.append(it)
        self.last = t
        self._decide()

    def _decide(self):
        total = self.hist.sum() + len(self.oob)
        if total == 0:
            self.head, self.tail = 1, self.RANGE
            return
        if len(self.oob) > self.p.oob_fraction * total:
            # many idle times beyond the histogram: predict the next one (the paper uses
            # ARIMA; with one day of data the mean of the recent out-of-range ones stands in)
            pred = float(np.mean(self.oob[-5:]))
            self.head = max(1, int(0.85 * pred))
            self.tail = max(self.head, int(math.ceil(0.85 * pred + 0.30 * pred)))
            return
        counts = self.hist[1:]
        mean = counts.mean()
        cv = counts.std() / mean if mean > 0 else 0.0
        if self.hist.sum() < self.p.min_samples or cv < self.p.cv_threshold:
            self.head, self.tail = 1, self.RANGE  # not representative: keep alive 4 h
            return
        cum = np.cumsum(counts) / counts.sum()
        p5 = int(np.searchsorted(cum, 0.05) + 1)
        p99 = int(np.searchsorted(cum, 0.99) + 1)
        self.head = max(1, int(math.floor(p5 * 0.9)))
        self.tail = max(self.head, int(math.ceil(p99 * 1.1)))


@dataclass(frozen=True)
class HybridHistogram:
    cv_threshold: float = 2.0
    min_samples: int = 5
    oob_fraction: float = 0.5
    name: str = "hybrid"

    def for_function(self, fn: FunctionView):
        return _HybridFn(self)


# --- oracle --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Oracle:
    """Perfect knowledge of every future invocation: only a function's first invoked minute
    is cold, nothing is ever idle. Not causal; the lower bound."""

    name: str = "oracle"
    oracle: bool = True

    def exact(self, demand_row: np.ndarray):
        nz = np.flatnonzero(demand_row)
        if len(nz) == 0:
            return 0, 0, 0
        return 1, int(demand_row[nz[0]]), 0


# --- foresight (ours) ----------------------------------------------------------------------


def _rank_edges(limit: int) -> list[int]:
    """Lower edges of the container-rank buckets: 1, 2, 3, 4, 5, 6, 8, 10, 12, 15, ..."""
    edges = [1, 2, 3, 4]
    while edges[-1] < limit:
        edges.append(max(edges[-1] + 1, int(edges[-1] * 1.25)))
    return edges


class _ForesightFn:
    """State of one function: for each bucket of container ranks b (rank r = r-th most
    recently used container), the minute ``last[b]`` when demand last reached the bucket's
    lower edge, and a histogram of the gaps between such minutes. The r-th container is used
    in a minute exactly when demand reaches r, so its hazard is that of its bucket's gaps:

        h_b(o) = (count_b(o) + a * prior(o)) / (count_b(gaps >= o) + a)

    with ``prior(o) = prior_scale / (o + prior_shift) ** prior_power`` (a decreasing hazard:
    the longer a function has been silent, the less likely a call in the next minute)."""

    def __init__(self, p: "ForesightPolicy", fn: FunctionView):
        self.p = p
        T = fn.minutes + 2
        self.T = T
        self.mem_gb = fn.memory_mb / 1024.0
        o = np.arange(T, dtype=float)
        o[0] = 1.0
        self.prior = np.clip(p.prior_scale / (o + p.prior_shift) ** p.prior_power, 0.0, 0.95)
        self.edges: list[int] = []
        self.last: list[int] = []
        self.cnt: list[np.ndarray] = []
        self.hazards = np.zeros((0, T))
        self.resident_now = 0
        self.grid_now: np.ndarray | None = None  # what each grid price would keep now
        self.recent: list[int] = []  # demand of the last `shadow_minutes` minutes

    def _refit(self, b: int) -> None:
        c = self.cnt[b]
        risk = np.cumsum(c[::-1])[::-1]  # number of gaps >= o
        a = self.p.prior_weight
        self.hazards[b] = (c + a * self.prior) / (risk + a)

    def _grow(self, n: int) -> None:
        edges = _rank_edges(n)
        while len(self.edges) < len(edges) and edges[len(self.edges)] <= n:
            self.edges.append(edges[len(self.edges)])
            self.last.append(-1)
            self.cnt.append(np.zeros(self.T))
            self.hazards = np.vstack([self.hazards, self.prior[None, :]])

    def resident(self, t, offsets):
        p = self.p
        bar = p.price * self.mem_gb
        grid = p.price_grid * self.mem_gb
        if len(offsets) == 1:
            h = self.hazards[0, min(offsets[0], self.T - 1)]
            self.resident_now = int(h >= bar * (1.0 - h))
            if p.budget is not None:
                self.grid_now = (h >= grid * (1.0 - h)).astype(np.int64)
            return [bool(self.resident_now)]
        # q[r-1] ~ P(n >= r) for the r-th most recent container; keep the prefix R that
        # minimises P(cold minute) + bar * expected idle containers = q[R] + bar * sum(1 - q[:R])
        offs = np.minimum(np.asarray(offsets), self.T - 1)
        ranks = np.arange(1, len(offs) + 1)
        b = np.searchsorted(np.asarray(self.edges), ranks, side="right") - 1
        q = np.minimum.accumulate(self.hazards[b, offs])
        idle = np.concatenate([[0.0], np.cumsum(1.0 - q)])
        miss = np.concatenate([q, [0.0]])
        self.resident_now = int(np.argmin(miss + bar * idle))
        if p.budget is not None:
            self.grid_now = np.argmin(miss[None, :] + grid[:, None] * idle[None, :], axis=1)
        return self.resident_now

    def observe(self, t, n):
        p = self.p
        mb = self.mem_gb * 1024.0
        # memory accounting for the price: ours, every grid price, and a shadow fixed
        # keep-alive, all on the same past
        p._spent_mb_min += (self.resident_now - min(n, self.resident_now)) * mb
        if self.grid_now is not None:
            p._spent_grid += (self.grid_now - np.minimum(n, self.grid_now)) * mb
            self.grid_now = None
        if self.recent:
            p._shadow_mb_min += max(0, max(self.recent) - n) * mb
        self.recent.append(n)
        if len(self.recent) > p.shadow_minutes:
            self.recent.pop(0)
        self.resident_now = 0
        if n <= 0:
            return
        if not self.edges or self.edges[-1] < n:
            self._grow(n)
        for b, edge in enumerate(self.edges):
            if edge > n:
                break
            if self.last[b] >= 0:
                self.cnt[b][min(t - self.last[b], self.T - 1)] += 1.0
                self._refit(b)
            self.last[b] = t


class ForesightPolicy:
    """See the module doc.

    ``price`` is what one GB-minute of idle memory costs, in cold minutes (as odds). With
    ``budget`` set (default 0.95) the price follows a memory budget: every minute the policy
    also accounts what each price of a grid (1e-6 .. 0.1, 8 per decade) would have spent on
    the past, takes the lowest one whose spend stayed within ``budget`` x what a fixed
    ``shadow_minutes`` keep-alive spent on the same past (the constant price that was right so
    far), and multiplies it by a slow correction that steers the actual cumulative spend onto
    the budget (prices moved while the day was young). Only the past is used.
    ``budget=None`` keeps ``price`` fixed (the frontier sweep in the benchmark).

    Tried and measured without gain on the 700-function day (so left out): conditioning the
    gap histogram on the previous gap's class, smoothing each gap over +/-30%, a prior
    learned online from all functions by invocation-count class, exponential forgetting.
    """

    def __init__(
        self,
        price: float = 1e-3,
        budget: float | None = 0.95,
        shadow_minutes: int = 10,
        correction_gain: float = 0.1,
        prior_scale: float = 0.5,
        prior_shift: float = 1.0,
        prior_power: float = 1.5,
        prior_weight: float = 1.0,
        name: str = "foresight",
    ):
        if budget is not None and not budget > 0:
            raise ValueError(f"budget must be > 0 (a fraction of fixed keep-alive memory), got {budget!r}")
        self.price = self.initial_price = price
        self.budget = budget
        self.shadow_minutes = shadow_minutes
        self.correction_gain = correction_gain
        self.prior_scale, self.prior_shift, self.prior_power = prior_scale, prior_shift, prior_power
        self.prior_weight = prior_weight
        self.name = name
        self.price_grid = np.logspace(-6, -1, 41)
        self._reset()

    def _reset(self) -> None:
        self.price = self.initial_price
        self._spent_mb_min = 0.0
        self._shadow_mb_min = 0.0
        self._spent_grid = np.zeros(len(self.price_grid))
        self._correction = 1.0

    def for_function(self, fn: FunctionView):
        return _ForesightFn(self, fn)

    def begin_minute(self, t: int) -> None:
        if t == 0:  # a new replay starts afresh
            self._reset()

    def end_minute(self, t: int) -> None:
        if self.budget is None or self._shadow_mb_min <= 0:
            return
        allowed = self.budget * self._shadow_mb_min
        ok = np.flatnonzero(self._spent_grid <= allowed)
        if len(ok) == 0:
            price = float(self.price_grid[-1])
        elif ok[0] == 0:
            price = float(self.price_grid[0])
        else:  # interpolate log(price) between the grid prices around the budget
            i = ok[0]
            hi, lo = self._spent_grid[i - 1], self._spent_grid[i]
            w = (hi - allowed) / (hi - lo) if hi > lo else 1.0
            lp = np.log(self.price_grid[i - 1]) + w * (np.log(self.price_grid[i]) - np.log(self.price_grid[i - 1]))
            price = float(np.exp(lp))
        if self.correction_gain > 0 and self._spent_mb_min > 0:
            ratio = self._spent_mb_min / self._shadow_mb_min
            # overspending is corrected faster than underspending: the budget is a ceiling
            gain = self.correction_gain * (3.0 if ratio > self.budget else 1.0)
            self._correction = float(min(1e3, max(1e-3, self._correction * (ratio / self.budget) ** gain)))
        self.price = price * self._correction


# --- registry ------------------------------------------------------------------------------

POLICY_NAMES = ("fixed:MINUTES", "seed", "hybrid", "oracle", "foresight")


def make_policy(spec: str):
    """A policy by name (``fixed:10``, ``seed``, ``hybrid``, ``oracle``, ``foresight``) or a
    WarmPoolPolicy YAML file (its first pool's idle TTL becomes a seed-style policy)."""
    s = spec.strip()
    if s.startswith("fixed:"):
        try:
            m = int(s.split(":", 1)[1])
            if m < 0:
                raise ValueError
        except ValueError:
            raise UserError(f"policy {spec!r}: fixed:MINUTES needs a whole number of minutes >= 0, e.g. fixed:10") from None
        return FixedKeepAlive(m)
    if s == "seed":
        return SeedDecayingTTL()
    if s == "hybrid":
        return HybridHistogram()
    if s == "oracle":
        return Oracle()
    if s == "foresight":
        return ForesightPolicy()
    if Path(s).is_file():
        from warmpool.policy import load_policy

        pol = load_policy(s)
        pool = pol.pools[0]
        return SeedDecayingTTL(ttl=pool.idle_ttl, name=f"{Path(s).stem}:{pool.name}")
    raise UserError(f"unknown policy {spec!r}; known: {', '.join(POLICY_NAMES)} or a policy YAML file")
