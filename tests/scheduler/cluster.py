"""A small fake cluster whose node CPU comes from real traces (tests/data/cpu_slice.csv.gz).

Each node's utilization is a real per-VM CPU % series (Azure Public Dataset V1), turned into
node-exporter ``node_cpu_seconds_total`` counters per core and mode (idle grows by
(1 - u) x 60 s per minute, user by u x 60 s), so ``1 - avg by (instance)(rate(...idle...[5m]))``
recovers the trace. kube-state-metrics ``kube_node_info`` / ``kube_node_labels`` carry the
node names, internal IPs and zones, and ``kube_node_status_allocatable{resource="memory"}``
the allocatable memory (``MEMORY_PER_CORE`` per core).

Memory in use: no memory traces are bundled, so each node's memory follows *another* node's
real CPU trace, squeezed into 30..90% of allocatable (``memory_fraction``), exported as
node-exporter's ``node_memory_MemTotal_bytes`` / ``node_memory_MemAvailable_bytes``. Nodes
with ``memory_gap`` lose their memory samples for that many minutes in the middle of the
window, so the range query returns NaN there (a scrape outage).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

STEP = 60.0  # counter sample spacing (node-exporter is scraped more often than 5 min)


@dataclass(frozen=True)
class FakeNode:
    name: str
    instance: str  # what node-exporter's scrape calls it
    internal_ip: str
    zone: str
    cores: int
    trace: str  # series_id in cpu_slice.csv.gz
    in_inventory: bool = True
    memory_trace: str = ""  # series_id whose shape the node's memory use follows
    memory_gap: int = 0  # minutes of missing memory samples mid-window


MEMORY_PER_CORE = 4 * 2**30  # allocatable bytes per core
RESERVED = 2**29  # MemTotal - allocatable (system- and kube-reserved)


NODES = (
    FakeNode("node-a", "10.0.0.1:9100", "10.0.0.1", "zone-a", 2, "azurev1-737498", memory_trace="azurev1-1985204"),
    FakeNode("node-b", "node-b:9100", "10.0.0.2", "zone-a", 4, "azurev1-1985204", memory_trace="azurev1-618849"),  # relabeled instance
    FakeNode("node-c", "10.0.0.3:9100", "10.0.0.3", "zone-b", 2, "azurev1-618849", memory_trace="azurev1-825849", memory_gap=40),
    FakeNode("node-d", "10.0.0.4:9100", "10.0.0.4", "zone-b", 2, "azurev1-825849"),  # no memory metrics
    FakeNode("ghost", "10.9.9.9:9100", "10.9.9.9", "zone-b", 1, "azurev1-1650389", in_inventory=False),
)


def memory_fraction(trace: pd.DataFrame, node: FakeNode, points: int) -> np.ndarray:
    """Memory in use as a fraction of allocatable, per 5-minute bucket (0.3..0.9)."""
    return 0.3 + 0.6 * utilization(trace, node.memory_trace, points)


def utilization(trace: pd.DataFrame, series: str, points: int) -> np.ndarray:
    """The last ``points`` 5-minute values of a real series as utilization 0..1."""
    v = trace[trace["series_id"] == series]["value"].to_numpy(dtype="float64")[-points:]
    v = pd.Series(v).ffill().bfill().to_numpy()
    return np.clip(v / 100.0, 0.0, 1.0)


def build_families(trace: pd.DataFrame, end: float, hours: float = 12.0, nodes=NODES):
    """(families for prometheus_factory, truth) where truth[node] = (5-min bucket starts, u).

    Utilization is constant within each 5-minute bucket [t, t + 300); ``end`` should be a
    multiple of 300 so that buckets align with the forecaster's 5-minute grid."""
    buckets = int(hours * 12)
    start = end - buckets * 300.0
    fam: dict[str, list] = {"node_cpu_seconds_total": [], "kube_node_info": [], "kube_node_labels": [],
                            "node_memory_MemTotal_bytes": [], "node_memory_MemAvailable_bytes": [],
                            "kube_node_status_allocatable": []}
    truth: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    minutes = np.arange(start, end + 1, STEP)
    for node in nodes:
        u = utilization(trace, node.trace, buckets)
        bucket_ts = start + 300.0 * np.arange(buckets)
        truth[node.name] = (bucket_ts, u)
        per_minute = u[np.minimum(((minutes - start) // 300).astype(int), buckets - 1)]
        idle = np.concatenate([[0.0], np.cumsum((1.0 - per_minute[:-1]) * STEP)])
        user = np.concatenate([[0.0], np.cumsum(per_minute[:-1] * STEP)])
        for cpu in range(node.cores):
            for mode, counter in (("idle", idle), ("user", user)):
                labels = {"instance": node.instance, "job": "node-exporter", "cpu": str(cpu), "mode": mode}
                fam["node_cpu_seconds_total"].append((labels, list(zip(minutes, 1000.0 * cpu + counter))))
        if node.in_inventory:
            info = {"node": node.name, "internal_ip": node.internal_ip, "job": "kube-state-metrics"}
            fam["kube_node_info"].append((info, [(t, 1.0) for t in minutes[::5]]))
            lab = {"node": node.name, "label_topology_kubernetes_io_zone": node.zone, "job": "kube-state-metrics"}
            fam["kube_node_labels"].append((lab, [(t, 1.0) for t in minutes[::5]]))
            alloc = {"node": node.name, "resource": "memory", "unit": "byte", "job": "kube-state-metrics"}
            fam["kube_node_status_allocatable"].append((alloc, [(t, float(node.cores * MEMORY_PER_CORE)) for t in minutes[::5]]))
        if node.memory_trace:
            _memory_families(fam, trace, node, minutes, start, buckets)
    return fam, truth


def _memory_families(fam: dict, trace: pd.DataFrame, node: FakeNode, minutes: np.ndarray, start: float, buckets: int) -> None:
    allocatable = float(node.cores * MEMORY_PER_CORE)
    total = allocatable + RESERVED
    frac = memory_fraction(trace, node, buckets)[np.minimum(((minutes - start) // 300).astype(int), buckets - 1)]
    keep = np.ones(len(minutes), dtype=bool)
    if node.memory_gap:
        mid = len(minutes) // 2
        keep[mid : mid + node.memory_gap] = False
    labels = {"instance": node.instance, "job": "node-exporter"}
    fam["node_memory_MemTotal_bytes"].append((labels, [(t, total) for t in minutes]))
    fam["node_memory_MemAvailable_bytes"].append(
        (labels, [(t, total - f * allocatable) for t, f, k in zip(minutes, frac, keep) if k]))
