"""The learned idle-time model of a pool and the memory price shared by all pools.

Time is cut into bins (``idle_model.bin_seconds``, default 60 s). A pool's demand in a bin is
the largest number of containers claimed at once during it. The r-th container of a pool
(r-th most recently busy) is busy in a bin exactly when demand reaches r, so its idle time is
the gap since the last bin with demand >= r. For buckets of ranks (each rank alone up to 8,
then ~25% wider: 10, 12, 15, 18, 22, ...) the model keeps a histogram of those gaps and
estimates the hazard

    h(o) = P(busy o bins after the last busy bin | idle for bins 1 .. o-1)
         = (count(o) + w * prior(o)) / (count(gaps >= o) + w),  prior(o) = scale / (o + 1) ** power

A periodic pool gets h ~ 1 at its period and ~ 0 before it; a pool with no history falls back
on the prior, a decreasing hazard (the longer it has been silent, the less likely a claim).

The hazard also depends on the idle gap that ended last (``previous_gap_weight`` > 0): a pool
inside a burst (its last gap 1-2 bins) is likely to be claimed again soon, the same pool after
a long silence is not. Each rank bucket keeps its gaps by the class of the gap before them
(1, 2-3, 4-7, ..., 128+ bins, ``GAP_CLASSES``) and uses

    h(o | class k) = (count_k(o) + v * h(o)) / (count_k(gaps >= o) + v),   v = previous_gap_weight

the pool's overall hazard ``h(o)`` above standing in until the class has its own evidence.
Measured on the tuning half of the Azure Functions trace this is the change that pays most
(bench/warmpool_trace.py, README "Measured").

With ``q_r`` the hazard of rank r at its current idle time (made non-increasing over ranks),
the pool keeps the R most recently busy containers warm, R minimising

    P(a cold start this bin) + price * memory_GB * E[idle containers] = q_{R+1} + price * m * sum_{r<=R} (1 - q_r)

so a container is held (or pre-warmed) when the odds of a claim pay for its memory. The
price is one number for all pools of a controller (``MemoryPrice``): it follows the memory
budget, using only the past.
"""

from __future__ import annotations

import bisect

import numpy as np

from warmpool.policy import IdleModel, MemoryBudget

HORIZON_BINS = 1442  # idle times beyond one day of 60 s bins share the last histogram bin
PRICE_GRID = np.logspace(-6, -1, 41)  # GB-bin prices whose spend is tracked to set the price
GAP_CLASSES = np.array([1, 2, 4, 8, 16, 32, 64, 128])  # lower edges (bins) of the previous-gap classes


def gap_class(gap: int) -> int:
    return int(np.searchsorted(GAP_CLASSES, gap, side="right")) - 1


def rank_edges(limit: int) -> list[int]:
    """Lower edges of the rank buckets: 1, 2, ..., 8, 10, 12, 15, 18, 22, ... up to ``limit``."""
    edges = [1, 2, 3, 4]
    while edges[-1] < limit:
        edges.append(max(edges[-1] + 1, int(edges[-1] * 1.25)))
    return [e for e in edges if e <= max(1, limit)]


class PoolIdleModel:
    """Gap histograms of one pool; ``record`` learns one closed bin, ``keep`` answers how
    many containers to hold warm in a bin (pure). Hazards are evaluated only at the offsets
    asked for: a controller may run hundreds of pools, each asked every round."""

    def __init__(self, spec: IdleModel):
        self.spec = spec
        o = np.arange(HORIZON_BINS, dtype=float)
        o[0] = 1.0
        self.prior = np.clip(spec.prior_scale / (o + 1.0) ** spec.prior_power, 0.0, 0.95)
        self.last = np.zeros(0, dtype=np.int64)  # per rank r-1: last bin with demand >= r
        self.edges: list[int] = []
        self.counts = np.zeros((0, HORIZON_BINS))  # gaps of exactly o bins
        self.risk = np.zeros((0, HORIZON_BINS))  # gaps of o bins or more
        self._bucket_of_rank = np.zeros(0, dtype=np.int64)
        self._memo: tuple[int, np.ndarray, np.ndarray] | None = None
        # per rank bucket: the class of its last gap (-1: none yet), and its gaps by the class
        # of the gap before them, sorted (kept as lists: most classes of most pools stay small)
        self.prev_class: list[int] = []
        self.by_class: list[list[list[int]]] = []
        self._sorted: dict[tuple[int, int], np.ndarray] = {}

    @property
    def seen(self) -> bool:
        return len(self.last) > 0

    def _grow(self, n: int) -> None:
        old = len(self.last)
        self.last = np.concatenate([self.last, np.full(n - old, -1, dtype=np.int64)])
        edges = rank_edges(n)
        extra = len(edges) - len(self.edges)
        if extra > 0:
            self.edges = edges
            self.counts = np.vstack([self.counts, np.zeros((extra, HORIZON_BINS))])
            self.risk = np.vstack([self.risk, np.zeros((extra, HORIZON_BINS))])
            self.prev_class += [-1] * extra
            self.by_class += [[[] for _ in GAP_CLASSES] for _ in range(extra)]
        ranks = np.arange(1, n + 1)
        self._bucket_of_rank = np.searchsorted(np.asarray(self.edges), ranks, side="right") - 1

    def record(self, b: int, demand: int) -> None:
        """Learn closed bin ``b`` with ``demand`` containers busy at its peak."""
        if demand <= 0:
            return
        self._memo = None
        if demand > len(self.last):
            self._grow(demand)
        for j, edge in enumerate(self.edges):
            if edge > demand:
                break
            prev = self.last[edge - 1]
            if prev >= 0:
                g = min(b - int(prev), HORIZON_BINS - 1)
                self.counts[j, g] += 1.0
                self.risk[j, : g + 1] += 1.0
                k = self.prev_class[j]
                if k >= 0:
                    bisect.insort(self.by_class[j][k], g)
                    self._sorted.pop((j, k), None)
                self.prev_class[j] = gap_class(g)
        self.last[:demand] = b

    def _after_open(self, open_bin: int, open_demand: int) -> tuple[np.ndarray, list[int]]:
        """(last busy bin per rank, class of each bucket's last gap) as they will be once bin
        ``open_bin`` closes with at least ``open_demand`` (its peak so far)."""
        last, prev = self.last, self.prev_class
        n = min(open_demand, len(last))
        if n <= 0:
            return last, prev
        prev = list(prev)
        for j, edge in enumerate(self.edges):
            if edge > n:
                break
            if last[edge - 1] >= 0:
                prev[j] = gap_class(min(open_bin - int(last[edge - 1]), HORIZON_BINS - 1))
        last = last.copy()
        last[:n] = open_bin
        return last, prev

    def _curve(self, b: int, open_bin: int | None = None, open_demand: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """(miss, idle) of keeping R = 0 .. ranks containers in bin ``b``: the chance that
        rank R+1 is needed, and the expected idle containers among the R kept. A bin after
        the still open ``open_bin`` counts that bin's demand so far as if it had closed."""
        if open_bin is None or b <= open_bin:
            open_bin, open_demand = None, 0
        key = (b, open_bin, open_demand)
        if self._memo is not None and self._memo[0] == key:
            return self._memo[1], self._memo[2]
        last, prev_class = self._after_open(open_bin, open_demand) if open_demand > 0 else (self.last, self.prev_class)
        w = self.spec.prior_weight
        new_ranks = max(0, open_demand - len(last))  # busy for the first time in the open bin
        if len(last) == 1 and not new_ranks:  # most pools: plain floats are several times faster here
            o = min(max(b - int(last[0]), 1), HORIZON_BINS - 1)
            h = (float(self.counts[0, o]) + w * float(self.prior[o])) / (float(self.risk[0, o]) + w)
            v = self.spec.previous_gap_weight
            k = prev_class[0]
            if v > 0 and k >= 0:
                gaps = self.by_class[0][k]
                lo = bisect.bisect_left(gaps, o)
                h = (bisect.bisect_right(gaps, o) - lo + v * h) / (len(gaps) - lo + v)
            miss, idle = np.array([h, 0.0]), np.array([0.0, 1.0 - h])
            self._memo = (key, miss, idle)
            return miss, idle
        offs = np.minimum(np.maximum(b - last, 1), HORIZON_BINS - 1)
        bk = self._bucket_of_rank
        h = (self.counts[bk, offs] + w * self.prior[offs]) / (self.risk[bk, offs] + w)
        if self.spec.previous_gap_weight > 0:
            h = self._given_previous_gap(h, offs, prev_class)
        if new_ranks:  # no gaps of theirs yet: the prior
            h = np.concatenate([h, np.full(new_ranks, self.prior[min(max(b - open_bin, 1), HORIZON_BINS - 1)])])
        q = np.minimum.accumulate(h)
        miss = np.concatenate([q, [0.0]])
        idle = np.concatenate([[0.0], np.cumsum(1.0 - q)])
        self._memo = (key, miss, idle)
        return miss, idle

    def _given_previous_gap(self, h: np.ndarray, offs: np.ndarray, prev_class: list[int]) -> np.ndarray:
        """``h`` (per rank) conditioned on the class of its bucket's last gap."""
        v = self.spec.previous_gap_weight
        out = h.copy()
        bk = self._bucket_of_rank
        for j, k in enumerate(prev_class):
            if k < 0 or not self.by_class[j][k]:
                continue
            arr = self._sorted.get((j, k))
            if arr is None:
                arr = self._sorted[(j, k)] = np.asarray(self.by_class[j][k])
            sel = np.flatnonzero(bk == j)
            o = offs[sel]
            lo = np.searchsorted(arr, o, side="left")
            c = np.searchsorted(arr, o, side="right") - lo
            out[sel] = (c + v * h[sel]) / (len(arr) - lo + v)
        return out

    def keep(self, b: int, price_per_gb: float, memory_gb: float, open_bin: int | None = None, open_demand: int = 0) -> int:
        """Containers to hold warm in bin ``b`` at ``price_per_gb`` (cold starts per idle GB-bin);
        ``open_bin``/``open_demand``: the current bin and its peak so far, when ``b`` is later."""
        if not self.seen and (open_bin is None or b <= open_bin or open_demand <= 0):
            return 0
        miss, idle = self._curve(b, open_bin, open_demand)
        if len(miss) == 2:
            return int(miss[0] > price_per_gb * memory_gb * idle[1])
        return int(np.argmin(miss + price_per_gb * memory_gb * idle))

    def keep_at_prices(self, b: int, prices: np.ndarray, memory_gb: float) -> np.ndarray:
        """``keep`` at every price of ``prices`` at once."""
        if not self.seen:
            return np.zeros(len(prices), dtype=np.int64)
        miss, idle = self._curve(b)
        if len(miss) == 2:  # one rank: keep it when its odds beat the price
            return (miss[0] > prices * memory_gb * idle[1]).astype(np.int64)
        return np.argmin(miss[None, :] + (prices * memory_gb)[:, None] * idle[None, :], axis=1)


class MemoryPrice:
    """One price for idle memory across pools, set so the spend follows the budget.

    Every closed bin, each pool reports what it actually held idle, what a fixed keep-alive
    of ``reference_keepalive_seconds`` would have held on the same demand (the shadow), and
    what each price of ``PRICE_GRID`` would have held. The price is the lowest grid price
    whose spend so far stayed within ``fraction`` x the shadow (log-interpolated), times a
    slow correction that steers the actual cumulative spend onto the budget (actual spend
    includes containers held by the TTL and the forecast, which no grid price sees)."""

    GAIN = 0.1
    START = 1e-3

    def __init__(self, budget: MemoryBudget):
        self.budget = budget
        self.price = self.START
        self.spent_mb = 0.0
        self.shadow_mb = 0.0
        self.grid_mb = np.zeros(len(PRICE_GRID))
        self._correction = 1.0
        self._dirty = False

    def account(self, idle_mb: float, shadow_mb: float, grid_mb: np.ndarray | None) -> None:
        self.spent_mb += idle_mb
        self.shadow_mb += shadow_mb
        if grid_mb is not None:
            self.grid_mb += grid_mb
        self._dirty = True

    def update(self) -> None:
        """Move the price once per batch of closed bins (not per reconcile round)."""
        if not self._dirty or self.shadow_mb <= 0:
            return
        self._dirty = False
        frac = self.budget.fraction
        allowed = frac * self.shadow_mb
        ok = np.flatnonzero(self.grid_mb <= allowed)
        if len(ok) == 0:
            price = float(PRICE_GRID[-1])
        elif ok[0] == 0:
            price = float(PRICE_GRID[0])
        else:
            i = ok[0]
            hi, lo = self.grid_mb[i - 1], self.grid_mb[i]
            w = (hi - allowed) / (hi - lo) if hi > lo else 1.0
            lp = np.log(PRICE_GRID[i - 1]) + w * (np.log(PRICE_GRID[i]) - np.log(PRICE_GRID[i - 1]))
            price = float(np.exp(lp))
        if self.spent_mb > 0:
            ratio = self.spent_mb / self.shadow_mb
            # overspending is corrected faster than underspending: the budget is a ceiling
            gain = self.GAIN * (3.0 if ratio > frac else 1.0)
            self._correction = float(min(1e3, max(1e-3, self._correction * (ratio / frac) ** gain)))
        self.price = price * self._correction
