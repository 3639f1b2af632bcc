"""The shipped warm-pool policy: what ``foresight warmpool run`` and ``foresight up`` run, and
what ``foresight warmpool simulate --policy foresight`` measures.

Per pool and reconcile round, the pool wants ``max(forecast, idle model)`` containers in all:

- forecast: ``ceil(peak / capacity_per_container)``, with ``peak`` the value the HPA is served
  (``forecaster.served``) with [now, now + lead_seconds + T_cold p90] as its window;
  nothing without a forecast;
- idle model (``idle_model.enabled``): the R most recently busy containers whose chance of a
  claim pays for their memory at the controller's memory price (``warmpool.idlemodel``);
  this both holds containers and pre-warms them before a claim it expects, for every bin
  from now until a container started at the controller's next round would be ready (a bin's
  first claims can come before its first round);
- forecast: with ``demand: requests`` (or ``both``) the predicted request rate over
  ``request_rate.concurrency_per_container`` (or the larger of it and the cpu need);
- idle containers beyond that expire only once past their idle-TTL deadline (``warmpool.ttl``:
  ``max(floor, 120 s x 0.85^k)`` by default, ``k`` = unused expiries since the last cold
  start) when the forecast sized the pool, the idle model is off, or ``hold_on_ttl``;
  otherwise the idle model has priced each container already and surplus goes at once.

The memory price is shared by the pools of one controller and follows ``memory_budget``.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from core.store import Forecast
from warmpool.idlemodel import PRICE_GRID, MemoryPrice, PoolIdleModel
from warmpool.policy import Policy, PoolSpec
from warmpool.reconcile import BinUsage, PoolObserved, PoolTarget, forecast_need, peak_demand


class _PoolState:
    __slots__ = ("model", "recent", "ref_bins")

    def __init__(self, spec: PoolSpec, budget_seconds: float):
        self.model = PoolIdleModel(spec.idle_model)
        self.ref_bins = max(1, int(round(budget_seconds / spec.idle_model.bin_seconds)))
        self.recent: deque[int] = deque(maxlen=self.ref_bins)


class ForesightPolicy:
    """Implements ``warmpool.reconcile.WarmPolicy``."""

    name = "foresight"

    def __init__(self, config: Policy, name: str | None = None):
        self.config = config
        if name:
            self.name = name
        self.price = MemoryPrice(config.memory_budget)
        self._pools: dict[str, _PoolState] = {}

    def configure(self, config: Policy) -> None:
        if config.memory_budget != self.config.memory_budget:
            self.price.budget = config.memory_budget
        self.config = config
        for spec in config.pools:
            st = self._pools.get(spec.name)
            if st is not None and st.model.spec != spec.idle_model:
                del self._pools[spec.name]  # a new model shape starts afresh

    def _state(self, spec: PoolSpec) -> _PoolState:
        st = self._pools.get(spec.name)
        if st is None:
            st = self._pools[spec.name] = _PoolState(spec, self.config.memory_budget.reference_keepalive_seconds)
        return st

    def record(self, spec: PoolSpec, usage: BinUsage) -> None:
        st = self._state(spec)
        mb = spec.memory_mb
        grid_mb = None
        if spec.idle_model.enabled and st.model.seen:
            keep = st.model.keep_at_prices(usage.index, PRICE_GRID, mb / 1024.0)
            grid_mb = np.maximum(keep - usage.demand, 0) * mb
        shadow = max(0, max(st.recent) - usage.demand) if st.recent else 0
        if st.model.seen or usage.demand > 0:
            self.price.account(usage.idle * mb, shadow * mb, grid_mb)
            st.recent.append(usage.demand)
        st.model.record(usage.index, usage.demand)

    def end_round(self) -> None:
        self.price.update()

    def target(self, spec: PoolSpec, obs: PoolObserved, forecast: Forecast | None, now: float,
               request_rate: Forecast | None = None) -> PoolTarget:
        needed, peak, reason = _forecast_target(spec, obs, forecast, request_rate, now)
        keep = 0
        if spec.idle_model.enabled:
            keep = _idle_keep(spec, self._state(spec).model, obs, self.price.price, now)
        if needed is None and keep == 0:
            hold = not spec.idle_model.enabled or spec.idle_model.hold_on_ttl
            return PoolTarget(None, None, None, hold, reason + (": holding min_warm" if reason else ""))
        if keep:
            reason = (reason + "; " if reason else "") + f"idle model keeps {keep}"
        hold = needed is not None or not spec.idle_model.enabled or spec.idle_model.hold_on_ttl
        return PoolTarget(max(needed or 0, keep), needed, peak, hold, reason)


def _idle_keep(spec: PoolSpec, model: PoolIdleModel, obs: PoolObserved, price: float, now: float) -> int:
    """Containers the idle model holds now: the most any bin wants from now until a container
    started at the controller's next round would be ready. A bin's claims can come at its
    first second, and the next round may come seconds into it, so its pre-warm starts in the
    round before."""
    bs = spec.idle_model.bin_seconds
    b = int(now // bs)
    end = int((now + obs.round_seconds + obs.cold_start_p90_seconds) // bs)
    gb = spec.memory_mb / 1024.0
    return max(model.keep(x, price, gb, open_bin=b, open_demand=obs.open_demand) for x in range(b, end + 1))


def _forecast_target(spec: PoolSpec, obs: PoolObserved, cpu: Forecast | None, rate: Forecast | None,
                     now: float) -> tuple[int | None, float | None, str]:
    """(containers the forecasts ask for, the peak that drove it, why) by the pool's
    ``demand``: the ``series`` forecast / capacity_per_container, the predicted request rate /
    concurrency_per_container, or the larger of the two."""
    parts: list[tuple[int, float, str]] = []
    missing: list[str] = []
    if spec.demand != "requests":
        n, peak = forecast_need(spec, obs, cpu, now)
        if n is None:
            missing.append(spec.series)
        else:
            parts.append((n, peak, f"cpu peak {peak:.3g} / {spec.capacity_per_container:g} per container = {n}"))
    if spec.demand != "cpu" and spec.request_rate is not None:
        rr = spec.request_rate
        if rate is None:
            missing.append(rr.series)
        else:
            peak = peak_demand(spec, rate, now, now + spec.lead_seconds + obs.cold_start_p90_seconds)
            n = int(math.ceil(peak / rr.concurrency_per_container - 1e-9))
            parts.append((n, peak, f"request rate peak {peak:.3g}/s / {rr.concurrency_per_container:g} per container = {n}"))
    why = "; ".join(f"no forecast for series {m!r}" for m in missing)
    if not parts:
        return None, None, why
    n, peak, what = max(parts, key=lambda x: x[0])
    return n, peak, (why + "; " if why else "") + what
