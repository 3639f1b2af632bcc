"""Declared metrics besides CPU (``forecaster.predicted``): ``predicted_<name>`` (the demand)
and ``predicted_<name>_ratio`` (demand / (ready pods x capacity per replica)).

The values come from the same rule as the CPU metrics (``forecaster.served.served_demand`` and
``served_demand_ratio``: ``served_cores``, and ``served_load_ratio`` with the declared capacity
in place of the CPU request), so the policy's headroom, the observed floor, staleness and
fallbacks apply unchanged; only the unit in the reason differs. ``DeclaredMetrics`` is the
adapter's part: which metrics exist (the configured
ones plus every metric series the store publishes), and serving one for a workload, with the
metric's own observed demand read directly from its source while the store is out of reach.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import replace
from typing import TYPE_CHECKING

from core.store import Forecast, StoreError, StoreUnavailable
from forecaster.predicted import metric_series_id, served_metric, served_names
from forecaster.served import NoData, ServedValue, served_demand, served_demand_ratio

if TYPE_CHECKING:  # pragma: no cover
    from adapter.core import AdapterCore

__all__ = ["DeclaredMetrics"]


class DeclaredMetrics:
    """The declared metrics an ``AdapterCore`` serves."""

    def __init__(self, core: "AdapterCore") -> None:
        self.core = core
        # series id -> {metric: capacity_per_replica} from --config (the store adds the rest)
        self.configured = {sid: dict(m) for sid, m in core.settings.workload_metrics.items()}
        self._configured_names = frozenset(n for m in self.configured.values() for n in m)
        self._known: tuple[frozenset[str] | None, frozenset[str]] = (None, self._configured_names)

    def known(self) -> frozenset[str]:
        """Configured and published metric names, recomputed only when the store's change."""
        published = self.core.cache.metric_names()
        if self._known[0] is not published:
            self._known = (published, self._configured_names | published)
        return self._known[1]

    def names(self) -> list[str]:
        """Every declared metric name: configured, or published by the trainer."""
        return sorted(self.known())

    def external_names(self) -> list[str]:
        return [e for n in self.names() for e in served_names(n)]

    def parse(self, external: str) -> tuple[str, bool] | None:
        """(metric, is_ratio) of a served name, or None when no such metric is declared."""
        if not external.startswith("predicted_"):
            return None
        got = served_metric(external, self.known())
        if got is None:
            try:  # a request right after start may come before the first index build
                self.core.cache.ensure_index()
            except StoreError:
                return None
            got = served_metric(external, self.known())
        return got

    def of(self, sid: str) -> list[str]:
        """The metrics workload ``sid`` declares (as far as the index has seen)."""
        return sorted(set(self.configured.get(sid, {})) | self.core.cache.metrics_of(sid))

    def declares(self, sid: str, metric: str) -> bool:
        """Whether workload ``sid`` declares ``metric``: configured, indexed, or published since
        the last index build (one cached read of its series)."""
        if metric in self.configured.get(sid, {}) or metric in self.core.cache.metrics_of(sid):
            return True
        try:
            return self.core.cache.get(metric_series_id(sid, metric)) is not None
        except StoreUnavailable:
            return False

    def served(self, metric: str, ratio: bool, sid: str, cpu_fc: Forecast | None, store_down: bool, now: float,
               pending: list[Future] | None = None) -> ServedValue:
        """The value of one declared metric of one workload, or -- with the store down or
        nothing to serve from the forecast -- its observed demand read directly. Raises NoData."""
        ms = self.core.settings.metric
        msid = metric_series_id(sid, metric)
        conf_cap = self.configured.get(sid, {}).get(metric)
        fc = None
        if not store_down:
            try:
                fc = self.core.cache.get(msid)
            except StoreUnavailable:
                store_down = True
        if not store_down:
            meta = fc.meta if fc is not None else {}
            cpu_meta = cpu_fc.meta if cpu_fc is not None else {}
            # the pods the HPA counts now (the watch), as for predicted_cpu_load_ratio; else the published count
            pods = self.core.watched_pods(sid, cpu_meta or meta)
            if pods is None:
                pods = meta.get("ready_pods", cpu_meta.get("ready_pods", self.core.settings.workload_capacity.get(sid, {})
                                                           .get("ready_pods")))
            cap = meta.get("capacity_per_replica", conf_cap)
            try:
                fresh = self.core.observed_now(msid, fc)
                if not ratio:
                    return served_demand(metric, fc, now, ms, observed=fresh)
                if pods is None:
                    raise NoData(f"ready pod count of {sid} is unknown (meta.ready_pods)")
                return served_demand_ratio(metric, fc, now, pods, cap, ms, observed=fresh)
            except NoData as exc:
                why = str(exc)
        else:
            why = "the forecast store is unreachable"
        obs = self.core.observed.get(msid, pending) if self.core.observed is not None else None
        if obs is None:
            hint = "" if self.core.observed is not None else " (no demand source configured: pass --config)"
            raise NoData(f"{why}; the observed {metric} could not be read directly either{hint}")
        if ratio:
            pods = self.core.watched_pods(sid)
            if pods is None:
                pods = obs.ready_pods if obs.ready_pods is not None else self.core.settings.workload_capacity.get(
                    sid, {}).get("ready_pods")
            if pods is None:
                raise NoData(f"{why}; the ready pod count of {sid} is unknown (ready_pods query)")
            sv = served_demand_ratio(metric, None, now, pods, conf_cap, ms, observed=obs.cores)
        else:
            sv = served_demand(metric, None, now, ms, observed=obs.cores)
        reason = sv.reason.replace("no forecast published; serving observed demand",
                                   f"{why}; serving observed demand read directly from its source", 1)
        return replace(sv, source="observed-direct", reason=reason)
