"""Predicted metrics besides CPU: a workload's declared PromQL demands and their served names.

A workload always has its CPU series (``<ns>/<name>``, served as ``predicted_cpu_load_ratio``
and ``predicted_cpu_cores``). It may declare more, each with a PromQL demand query and the
demand one ready replica absorbs at 100 % (``capacity_per_replica``)::

    metrics:
      - name: rps
        query: sum(rate(http_requests_total{namespace="shop",service="checkout"}[2m]))
        capacity_per_replica: 40

Each is its own forecast series ``<ns>/<name>/<metric>`` (fitted, refreshed, drift-checked and
given a serving policy like the CPU series, with the capacity as the policy's per-pod unit),
served as ``predicted_<metric>`` (the demand) and ``predicted_<metric>_ratio`` (demand /
(ready pods x capacity), computed exactly as the CPU load ratio). The third path segment keeps
these series out of the adapter's workload index: a workload is still found by its CPU series.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

__all__ = [
    "CPU_METRIC_NAMES", "PredictedMetric", "capacity_per_pod", "metric_name_problem", "metric_of_series",
    "metric_series_id", "served_names", "served_metric",
]

# The CPU series' served names (adapter.settings.METRICS): a declared metric may not shadow them.
CPU_METRIC_NAMES = ("predicted_cpu_load_ratio", "predicted_cpu_cores")
RATIO_SUFFIX = "_ratio"
_NAME = re.compile(r"[a-z]([-_a-z0-9]{0,38}[a-z0-9])?")


@dataclass(frozen=True)
class PredictedMetric:
    """One declared demand of a workload (see the module doc)."""

    name: str
    query: str
    capacity_per_replica: float

    @property
    def served_names(self) -> tuple[str, str]:
        return served_names(self.name)


def served_names(name: str) -> tuple[str, str]:
    """(demand, ratio) external metric names of a declared metric."""
    return f"predicted_{name}", f"predicted_{name}{RATIO_SUFFIX}"


def served_metric(external_name: str, known: Any) -> tuple[str, bool] | None:
    """(declared metric name, is_ratio) of an external metric name when its metric is in
    ``known`` (a container of names); None otherwise. The ratio form is tried first: a name
    ending in ``_ratio`` is refused at validation, so the two readings never both match."""
    if not external_name.startswith("predicted_"):
        return None
    rest = external_name[len("predicted_"):]
    if rest.endswith(RATIO_SUFFIX) and rest[: -len(RATIO_SUFFIX)] in known:
        return rest[: -len(RATIO_SUFFIX)], True
    if rest in known:
        return rest, False
    return None


def metric_name_problem(name: Any) -> str | None:
    """Why ``name`` cannot name a predicted metric (None when it can); the message follows the
    name, as the config checker writes it: ``'cpu' collides with ...``."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        return ("must be 1-40 lowercase letters, digits, '-' or '_', starting with a letter and "
                "ending with a letter or digit (e.g. rps, queue_depth)")
    if name == "cpu" or any(n in CPU_METRIC_NAMES for n in served_names(name)):
        return (f"collides with the CPU metrics ({', '.join(CPU_METRIC_NAMES)}); CPU is always "
                "predicted, pick another name")
    if name.endswith(RATIO_SUFFIX):
        return f"must not end in {RATIO_SUFFIX} (predicted_{name} would read as another metric's ratio)"
    return None


def metric_series_id(workload_series_id: str, metric: str) -> str:
    """``<ns>/<workload>/<metric>``: the forecast series of one declared metric."""
    return f"{workload_series_id}/{metric}"


def metric_of_series(series_id: str) -> tuple[str, str] | None:
    """(workload series id, metric name) of a metric series; None for a workload's CPU series
    (``<ns>/<name>``) and node/zone series."""
    parts = series_id.split("/")
    if len(parts) != 3 or not all(parts):
        return None
    return f"{parts[0]}/{parts[1]}", parts[2]


def capacity_per_pod(meta: Mapping[str, Any]) -> float | None:
    """The demand one pod carries, for the serving policy's pod count: a declared metric's
    ``capacity_per_replica``, else the CPU request in cores."""
    v = meta.get("capacity_per_replica")
    return v if v is not None else meta.get("cpu_request_cores")
