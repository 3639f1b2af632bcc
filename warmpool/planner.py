"""The shipped warm-pool policy: what ``foresight warmpool run`` and ``foresight up`` run, and
what ``foresight warmpool simulate --policy foresight`` measures.

Per pool and reconcile round, the pool wants ``max(forecast, idle model)`` containers in all:

- forecast: ``ceil(peak / capacity_per_container)``, with ``peak`` the largest forecast value
  (the pool's quantile) over [now, now + lead_seconds + T_cold p90] and the last observed
  demand; nothing without a forecast;
- idle model (``idle_model.enabled``): the R most recently busy containers whose chance of a
  claim pays for their memory at the controller's memory price (``warmpool.idlemodel``);
  this both holds containers and pre-warms them before a claim it expects;
- idle containers beyond that expire only once past their idle-TTL deadline (``warmpool.ttl``:
  ``max(floor, 120 s x 0.85^k)`` by default, ``k`` = unused expiries since the last cold
  start), so a container the model stops wanting lingers for the TTL, and longer after a miss.

The memory price is shared by the pools of one controller and follows ``memory_budget``.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from forecaster.store import Forecast
from warmpool.idlemodel import PRICE_GRID, MemoryPrice, PoolIdleModel
from warmpool.policy import Policy, PoolSpec
from warmpool.reconcile import BinUsage, PoolObserved, PoolTarget, forecast_need


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

    def target(self, spec: PoolSpec, obs: PoolObserved, forecast: Forecast | None, now: float) -> PoolTarget:
        needed, peak = forecast_need(spec, obs, forecast, now)
        reason = "" if forecast is not None else f"no forecast for series {spec.series!r}"
        keep = 0
        if spec.idle_model.enabled:
            st = self._pools.get(spec.name)
            if st is not None and st.model.seen:
                b = int(now // spec.idle_model.bin_seconds)
                keep = st.model.keep(b, self.price.price, spec.memory_mb / 1024.0)
        if needed is None and keep == 0:
            return PoolTarget(None, None, None, True, reason + (": holding min_warm" if reason else ""))
        if keep:
            reason = (reason + "; " if reason else "") + f"idle model keeps {keep}"
        return PoolTarget(max(needed or 0, keep), needed, peak, True, reason)
