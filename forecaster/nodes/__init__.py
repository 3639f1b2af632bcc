"""Node-level CPU and memory forecasts and the placement scores derived from them.

Floor 1, so the adapter's scheduler extender and the warm pool's Kubernetes backend (which
must not import each other) compute *the same* scores. The seams, in data-flow order:

- ``inventory``: the PromQL (node-exporter CPU and memory, kube-state-metrics inventory and
  allocatable memory), the series ids (``node/<node>``, ``node-memory/<node>``,
  ``zone/<zone>``) and the instance -> node/zone join;
- ``history``: range and instant queries against the source (the only module that asks it);
- ``forecasting``: history -> forecasts, pure (utilization 0..1 of CPU cores or of
  allocatable memory; gaps carried, never published as NaN);
- ``publish``: ``train_nodes_once`` (one cycle into the store) and ``run_nodes_schedule``;
- ``scoring``: published forecasts -> per-node loads and 0..10 scores (min of the CPU and
  memory free fractions; see that module for why);
- ``placement``: the filter rule and nodeAffinity preferences.
"""

from __future__ import annotations

from forecaster.nodes.forecasting import (
    NodeForecastSettings,
    NodeTrainReport,
    build_forecasts,
    build_memory_forecasts,
    forecast_utilization,
    memory_capacities,
)
from forecaster.nodes.inventory import (
    NODE_ALLOCATABLE_MEMORY_QUERY,
    NODE_CORES_QUERY,
    NODE_CPU_QUERY,
    NODE_INFO_QUERY,
    NODE_LABELS_QUERY,
    NODE_MEMORY_PREFIX,
    NODE_MEMORY_QUERY,
    NODE_PREFIX,
    NODE_SERIES_PREFIXES,
    ZONE_PREFIX,
    NodeInventory,
    instance_host,
    is_node_series,
    labels_from_series_name,
    memory_series_id,
    node_series_id,
    zone_series_id,
)
from forecaster.nodes.placement import filter_reason, placement_affinity, preferred_node_affinity, split_hot
from forecaster.nodes.publish import run_nodes_schedule, train_nodes_once
from forecaster.nodes.scoring import (
    MAX_SCORE,
    NEUTRAL_SCORE,
    NodeLoad,
    NodeScoreSettings,
    assess_nodes,
    memory_room_bytes,
    memory_score,
    score_for_load,
    score_for_pod,
    unknown_load,
    window_max,
)

__all__ = [
    "MAX_SCORE",
    "NEUTRAL_SCORE",
    "NODE_ALLOCATABLE_MEMORY_QUERY",
    "NODE_CORES_QUERY",
    "NODE_CPU_QUERY",
    "NODE_INFO_QUERY",
    "NODE_LABELS_QUERY",
    "NODE_MEMORY_PREFIX",
    "NODE_MEMORY_QUERY",
    "NODE_PREFIX",
    "NODE_SERIES_PREFIXES",
    "ZONE_PREFIX",
    "NodeForecastSettings",
    "NodeInventory",
    "NodeLoad",
    "NodeScoreSettings",
    "NodeTrainReport",
    "assess_nodes",
    "build_forecasts",
    "build_memory_forecasts",
    "filter_reason",
    "forecast_utilization",
    "instance_host",
    "is_node_series",
    "labels_from_series_name",
    "memory_capacities",
    "memory_room_bytes",
    "memory_score",
    "memory_series_id",
    "node_series_id",
    "placement_affinity",
    "preferred_node_affinity",
    "run_nodes_schedule",
    "score_for_load",
    "score_for_pod",
    "split_hot",
    "train_nodes_once",
    "unknown_load",
    "window_max",
    "zone_series_id",
]
