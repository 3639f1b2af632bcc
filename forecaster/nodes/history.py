"""Node history and inventory from a metrics source (``PrometheusSource``: ``fetch`` for range
queries, ``instant`` for the inventory and capacities). The only part of this package that
asks the source anything."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from forecaster.nodes.forecasting import History
from forecaster.nodes.inventory import (
    NODE_CORES_QUERY,
    NODE_INFO_QUERY,
    NODE_LABELS_QUERY,
    NODE_MEMTOTAL_QUERY,
    NodeInventory,
    labels_from_series_name,
)

log = logging.getLogger(__name__)


def instant_or_empty(source: Any, query: str, now: float) -> list[tuple[dict[str, str], float]]:
    """An optional instant query (kube-state-metrics, capacities): [] when it fails."""
    if not query:
        return []
    try:
        return list(source.instant(query, now))
    except Exception as exc:  # noqa: BLE001 - kube-state-metrics is optional
        log.warning("node inventory query %r failed (%s); joining without it", query, exc)
        return []


def fetch_history(source: Any, query: str, start: float, end: float, step: float) -> History:
    """``{instance (or node): (unix_ts, values)}`` of a range query grouped per node."""
    frame = source.fetch(query, start, end, step)
    history: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for sid, g in frame.groupby("series_id", sort=True):
        labels = labels_from_series_name(str(sid))
        key = labels.get("instance") or labels.get("node")
        if not key:
            log.warning("node series %r has neither an instance nor a node label; is %r grouped by instance?", sid, query)
            continue
        ts = g["timestamp"].astype("int64").to_numpy() / 1e9
        history[key] = (ts.astype("float64"), g["value"].to_numpy(dtype="float64"))
    return history


def fetch_inventory(source: Any, at: float) -> NodeInventory:
    return NodeInventory.from_samples(
        instant_or_empty(source, NODE_INFO_QUERY, at), instant_or_empty(source, NODE_LABELS_QUERY, at)
    )


def fetch_cores(source: Any, at: float) -> dict[str, float]:
    return {labels.get("instance", ""): v for labels, v in instant_or_empty(source, NODE_CORES_QUERY, at)}


def fetch_memory_capacity(source: Any, allocatable_query: str, at: float) -> tuple[dict[str, float], dict[str, float]]:
    """(allocatable bytes by node name, MemTotal bytes by instance)."""
    allocatable: dict[str, float] = {}
    for labels, v in instant_or_empty(source, allocatable_query, at):
        node = labels.get("node")
        if node and labels.get("unit", "byte") == "byte":
            allocatable[node] = float(v)
    memtotal = {labels.get("instance", ""): float(v) for labels, v in instant_or_empty(source, NODE_MEMTOTAL_QUERY, at)}
    return allocatable, memtotal
